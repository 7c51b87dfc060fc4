"""`python -m decoding transcribe`: stream a clip through a policy, one JSON object per event with --json.

    python -m decoding transcribe --audio FILE.wav --policy local-agreement --chunk-s 1.0 --json

--audio reads what the tab reads: a WAV of any rate, channels and sample width (espeak-ng writes 22,050 Hz), FLAC
or OGG, converted to 16 kHz mono by sox (`decoding.speech.audio.read_audio`).
    python -m decoding transcribe --say "Please open the window." --policy redecode

With --json every event is one line (`speech_start`, one `speech_chunk` per chunk, `speech_finish`); the last
holds "text" (the final transcript) and "committed" (each committed word with its latency in seconds). Word
latencies need the reference word times: a clip made with --say (or by `decoding.speech.audio.speak`) has
them (its .json beside the WAV); `--words FILE.json` gives them for any other file ([{"word", "start", "end"}]
or {"words": [...]}); without them the latencies are null. The options are declared with the other subcommands
in `decoding/__main__.py` (the docs' command check reads them there).
"""

from __future__ import annotations

import json
import sys

from decoding.speech.policies import stream_params, transcribe


def _words(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    words = data.get("words") if isinstance(data, dict) else data
    ok = isinstance(words, list) and all(isinstance(w, dict) and isinstance(w.get("word"), str) and
                                         all(isinstance(w.get(k), (int, float)) for k in ("start", "end"))
                                         for w in words)
    if not ok:
        raise ValueError(f"`--words` must hold [{{\"word\", \"start\", \"end\"}}, ...] (seconds), got {path}")
    return words


def _sets(items: list[str]) -> dict:
    pairs = [item.partition("=") for item in items]
    bad = [item for item, (key, sep, _) in zip(items, pairs) if not sep or not key.strip()]
    if bad:
        raise ValueError(f"`--set` expects key=value, got {bad[0]!r}")
    return {key.strip(): value.strip() for key, _, value in pairs}


def cmd_transcribe(args) -> int:
    from decoding.speech.audio import read_audio, speak, word_times
    from decoding.speech.whisper import load_whisper

    config = stream_params({"policy": args.policy, "chunk_s": args.chunk_s, **_sets(args.set)})
    if args.say is not None:
        clip = speak(args.say)
        audio, words, reference = clip.audio, clip.words, args.reference or args.say
    else:
        audio = read_audio(args.audio)  # any rate, channels, width or format sox reads, as the tab reads it
        words = _words(args.words) if args.words else word_times(args.audio)
        reference = args.reference or (" ".join(w["word"] for w in words) if words else "")
    asr = load_whisper(args.model)
    for event in transcribe(asr, audio, params=config, words=words, reference=reference):
        if args.json:
            print(json.dumps(event.to_dict(), ensure_ascii=False), flush=True)
        elif event.kind == "speech_chunk":
            tentative = event.hypothesis_text[len(event.committed_text):] if event.hypothesis_text.startswith(
                event.committed_text) else ""
            withdrawn = f"  (retracted: {''.join(r['text'] for r in event.retracted).strip()})" if event.retracted else ""
            print(f"[{event.audio_end_s:5.2f} s] {event.committed_text.strip()} | {tentative.strip()}{withdrawn}",
                  file=sys.stderr)
        elif event.kind == "speech_finish":
            print(event.text)
            s = event.stats
            print(f"[WER {s['wer']}, latency mean {s['mean_latency_s']} s, p95 {s['p95_latency_s']} s, "
                  f"{s['retracted_tokens']} tokens retracted, {s['cpu_s_per_audio_s']} CPU s per audio s]",
                  file=sys.stderr)
    return 0
