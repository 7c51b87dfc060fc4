"""Streaming speech: each commit policy's word error rate, latency, retractions and CPU cost, side by side.

Held-out synthetic speech: paragraphs written for this benchmark (no test, and not the sentences the default
voice was chosen on), spoken by espeak-ng in three voice/speed settings, so every word's time is known. Each
clip streams through Whisper base in chunks of each `--chunks` size, under each policy, interleaved clip by
clip on one machine. Per policy and chunk size:

    wer                     word errors of the final transcript / reference words (all clips pooled)
    mean / p95 latency      committed word's commit time minus the end of the word in the audio (the audio
                            timeline: what had been heard when it was committed; computing time is not in it)
    retractions per minute  committed tokens later withdrawn, per minute of audio
    cpu per audio second    process CPU time of the policy's model calls and decisions / seconds of audio
                            (above 1: slower than real time on this machine)
    behind live             seconds behind live audio at the end of the worst clip, had its chunks arrived in real
                            time (each chunk's CPU time queued behind the earlier ones; 0: it keeps up)
    longest repeat          the phrase of 1-4 words repeated most times in a row (4 or more: the stream loops)

Real speech, where a Debian package ships some: alsa-utils' `/usr/share/sounds/alsa/*.wav` (a person saying the
speaker names, "Front Center", "Rear Left"... 1.3-1.5 s each, 48 kHz; "Noise" left out), converted by sox. There are
no word times for them: WER, retractions and CPU only (set "real"; skipped, and said, where the files are missing).

CarelessWhisper (`careless`) runs when its trained LoRA ships (assets/whisper-careless-lora), beside a
`careless-untrained` row (the same causal encoder and commit rule without the LoRA, `careless.lora=false`);
until then it is listed with the reason it cannot run.

    python bench/bench_streaming.py [--chunks 1.0,2.0] [--clips 3] [--sets synthetic,real,long] [--threads 1]
                                    [--policies careless,local-agreement] [--quick] [--json]

`--quick`: the first clip, chunks of 2 s, no variant rows (about a minute on one core). Variant rows: `careless-untrained`
(the causal encoder without its LoRA) and `local-agreement-heard` (the encoder over the audio heard only, `encode=heard`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from decoding.speech.audio import speak
from decoding.speech.metrics import edits, longest_repeat, normalise
from decoding.speech.policies import POLICIES, transcribe
from decoding.speech.whisper import load_whisper

# (text, espeak-ng voice, words a minute): never used by a test, nor to choose the default voice
CLIPS = [
    ("The train to the coast leaves at noon. Bring a warm coat, because the wind on the cliffs is cold.", "en", 150),
    ("My neighbour grows tomatoes and beans in a small garden. Every summer she gives half of them away.",
     "en-gb-x-rp", 150),
    ("The library closes early on Fridays. If you need a book, ask the clerk at the front desk before four.",
     "en", 175),
]

# Long streams (set "long"): paragraphs of modern prose written for this benchmark, 30-90 s spoken, never in any
# training data (careless trains on KJV verses and Debian's fortunes), the last in espeak-ng's `en-gb-x-gbcwmd`,
# a voice careless never trained on. They cross Whisper's 30 s window, where careless starts a new stream.
LONG_CLIPS = [
    ("On Monday morning the bus was late again, so Maria walked to the station through the park. The grass was wet "
     "and the paths were full of people with dogs. She reached the platform two minutes before the train left, found "
     "a seat by the window, and opened the letter her brother had sent from the north. He wrote that the snow had come "
     "early this year, that the lake was already frozen at the edges, and that their father had finally agreed to "
     "sell the old boat. Maria folded the letter, looked out at the grey fields, and wondered who would buy a boat "
     "that had not left the shore in ten years.", "en", 160),
    ("Our town holds a market every Saturday in the square beside the old church. Farmers bring eggs, cheese, apples "
     "and honey, and a baker sells bread that is still warm at eight o'clock. Last week a man played the violin near "
     "the fountain while children counted the coins in his hat. By noon the wind had turned cold and the sellers "
     "began to pack their tables. My grandmother always buys the same things: a dozen eggs, a small round cheese and "
     "a bag of pears. She says the pears from the hill farm are the sweetest in the valley, and nobody in our family "
     "has ever dared to disagree with her. In the afternoon the square is quiet again. A few pigeons search for "
     "crumbs between the stones, the cafe puts its chairs back outside, and the old men who play cards under the "
     "trees argue about the weather, the price of petrol and the football results. When the church bell rings six "
     "times, the last of them fold their cards, finish their coffee and walk home for supper.", "en-gb-x-rp", 160),
    ("The museum opened a new room this spring, and on the first Sunday the queue reached the end of the street. "
     "Inside there were maps drawn by sailors three hundred years ago, with islands that do not exist and coasts "
     "that nobody had seen. A guide explained how the sailors measured the speed of a ship with a rope full of knots, "
     "and how they guessed their position from the sun at midday. In the next room a clock as tall as a door ticked "
     "so loudly that the children laughed. Near the exit a small screen showed the same maps beside photographs "
     "taken from space, and the difference was greater than anyone expected. Some islands were too large, some "
     "rivers ran the wrong way, and one famous harbour had been drawn a hundred miles from where it really is. When "
     "we left, the rain had stopped, the streets were bright, and we walked home slowly, talking about the brave "
     "and careless people who had made those maps without ever knowing how wrong they were. My sister, who teaches "
     "geography, said that every map is a guess that someone was brave enough to write down. She told us about a "
     "village in the mountains where the road on the map still ends at a bridge that fell into the river fifty "
     "years ago, and about travellers who still arrive there in the evening, confused and tired, asking the "
     "farmers for directions. The farmers, she said, have become very good at giving directions.",
     "en-gb-x-gbcwmd", 165),
]

REAL_DIR = Path("/usr/share/sounds/alsa")  # Debian's alsa-utils: recordings of a person saying the speaker names


def real_clips() -> list[tuple[Path, str]]:
    """(file, what is said) of the real recordings on this machine (none where alsa-utils is not installed)."""
    if not REAL_DIR.is_dir():
        return []
    return [(p, p.stem.replace("_", " ")) for p in sorted(REAL_DIR.glob("*.wav")) if p.stem != "Noise"]


class Recording:
    """A real recording as `run_policy` reads a clip: its samples, no word times."""

    def __init__(self, path: Path):
        from decoding.speech.audio import read_audio

        self.audio, self.words = read_audio(path), None
        self.duration = len(self.audio) / 16000


VARIANTS = {  # row -> (policy, its settings)
    "careless-untrained": ("careless", {"careless.lora": False}),
    "local-agreement-heard": ("local-agreement", {"encode": "heard"}),  # the encoder over the audio heard only
}


def run_policy(asr, clip, text: str, policy: str, chunk_s: float) -> dict:
    name, extra = VARIANTS.get(policy, (policy, {}))
    finish = list(transcribe(asr, clip.audio, params={"policy": name, "chunk_s": chunk_s, **extra}, words=clip.words,
                             reference=text))[-1]
    ref = normalise(text)
    return {"policy": policy, "chunk_s": chunk_s, "text": finish.text, "edits": edits(ref, normalise(finish.text)),
            "repeat": longest_repeat(finish.text),
            "ref_words": len(ref), "latencies": [w["latency_s"] for w in finish.committed if w["latency_s"] is not None],
            **{k: finish.stats[k] for k in ("retracted_tokens", "audio_s", "cpu_s", "encoder_passes", "decoder_passes",
                                            "behind_s")}}


def aggregate(runs: list[dict]) -> dict:
    latencies = [x for r in runs for x in r["latencies"]]
    audio_s = sum(r["audio_s"] for r in runs)
    return {
        "set": runs[0].get("set", "synthetic"), "policy": runs[0]["policy"], "chunk_s": runs[0]["chunk_s"],
        "wer": round(sum(r["edits"] for r in runs) / sum(r["ref_words"] for r in runs), 4),
        "mean_latency_s": round(float(np.mean(latencies)), 3) if latencies else None,
        "p95_latency_s": round(float(np.percentile(latencies, 95)), 3) if latencies else None,
        "retractions_per_minute": round(sum(r["retracted_tokens"] for r in runs) / (audio_s / 60), 2),
        "cpu_s_per_audio_s": round(sum(r["cpu_s"] for r in runs) / audio_s, 3),
        "behind_live_s": max(r["behind_s"] for r in runs),  # the worst clip: how far behind live audio it ended
        "encoder_passes": sum(r["encoder_passes"] for r in runs), "decoder_passes": sum(r["decoder_passes"] for r in runs),
        "audio_s": round(audio_s, 2), "clips": len(runs),
        "longest_repeat": max((r["repeat"] for r in runs), key=lambda x: x["times"]),
        "loops": sum(r["repeat"]["times"] >= 4 for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="1.0,2.0", help="chunk sizes in seconds, comma-separated")
    parser.add_argument("--clips", type=int, default=len(CLIPS), help=f"how many of the {len(CLIPS)} clips")
    parser.add_argument("--sets", default="synthetic,real", help="synthetic (espeak-ng clips), real (recordings "
                                                                   "from a Debian package), long (paragraphs of 30-90 s), "
                                                                   "comma-separated")
    parser.add_argument("--policies", default="", help="only these policies (comma-separated; default: every one)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="the first clip, chunks of 2 s")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.quick:
        args.chunks, args.clips, args.sets = "2.0", 1, "synthetic"
    chunks = [float(c) for c in args.chunks.split(",")]
    torch.set_num_threads(args.threads)
    asr = load_whisper()
    runnable = [name for name in POLICIES.names() if not POLICIES.capability(name, "unavailable")]
    runnable += [row for row, (name, _) in VARIANTS.items() if name in runnable and not args.quick]
    if args.policies:
        wanted = [p.strip() for p in args.policies.split(",") if p.strip()]
        unknown = [p for p in wanted if p not in runnable]
        if unknown:
            parser.error(f"--policies: {', '.join(unknown)} not among the runnable {', '.join(runnable)}")
        runnable = wanted
    runs: dict[tuple, list] = {}
    clips = []
    sets = [x.strip() for x in args.sets.split(",") if x.strip()]
    for text, voice, rate in (CLIPS[:args.clips] if "synthetic" in sets else []):
        clip = speak(text, voice=voice, rate=rate)
        clips.append({"text": text, "voice": voice, "rate": rate, "audio_s": round(clip.duration, 2)})
        for chunk_s in chunks:  # interleaved: every policy on this clip before the next clip
            for policy in runnable:
                runs.setdefault((policy, chunk_s), []).append(run_policy(asr, clip, text, policy, chunk_s))
        if not args.json:
            print(f"{clip.duration:5.1f} s  {voice} {rate} wpm: {text[:60]}...", file=sys.stderr)
    for text, voice, rate in (LONG_CLIPS[:args.clips] if "long" in sets else []):
        clip = speak(text, voice=voice, rate=rate)
        clips.append({"set": "long", "text": text, "voice": voice, "rate": rate, "audio_s": round(clip.duration, 2)})
        for chunk_s in chunks:
            for policy in runnable:
                runs.setdefault(("long", policy, chunk_s), []).append(
                    run_policy(asr, clip, text, policy, chunk_s) | {"set": "long"})
        if not args.json:
            print(f"{clip.duration:5.1f} s  {voice} {rate} wpm (long): {text[:50]}...", file=sys.stderr)
    real = real_clips() if "real" in sets else []
    for path, text in real:
        clip = Recording(path)
        clips.append({"text": text, "file": str(path), "audio_s": round(clip.duration, 2)})
        for chunk_s in chunks:
            for policy in runnable:
                runs.setdefault(("real", policy, chunk_s), []).append(
                    run_policy(asr, clip, text, policy, chunk_s) | {"set": "real"})
    rows = [aggregate(r) for r in runs.values()]
    out = {"model": asr.name, "chunks": chunks, "clips": clips, "rows": rows,
           "transcripts": [{k: r[k] for k in ("policy", "chunk_s", "text")} for rs in runs.values() for r in rs],
           "unavailable": {n: POLICIES.capability(n, "unavailable") for n in POLICIES.names() if n not in runnable},
           "real_recordings": len(real) if "real" in sets else None,
           "threads": args.threads}
    if args.json:
        print(json.dumps(out))
        return
    if "real" in sets and not real:
        print(f"real: no recordings in {REAL_DIR} (Debian's alsa-utils)", file=sys.stderr)
    print(f"{'set':<9} {'policy':<18} {'chunk':>5} {'WER':>6} {'mean lat':>9} {'p95 lat':>8} {'retr/min':>9} "
          f"{'CPU/audio s':>12} {'behind':>7}  longest repeat")
    for r in rows:
        repeat = r["longest_repeat"]
        print(f"{r['set']:<9} {r['policy']:<18} {r['chunk_s']:>5} {r['wer']:>6} {r['mean_latency_s']!s:>9} "
              f"{r['p95_latency_s']!s:>8} {r['retractions_per_minute']:>9} {r['cpu_s_per_audio_s']:>12} "
              f"{r['behind_live_s']:>7}  "
              f"{repeat['times']}x {repeat['phrase']!r}")
    for name, reason in out["unavailable"].items():
        print(f"{name}: {reason}")


if __name__ == "__main__":
    main()
