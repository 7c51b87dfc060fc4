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

Real speech, where a Debian package ships some: alsa-utils' `/usr/share/sounds/alsa/*.wav` (a person saying the
speaker names, "Front Center", "Rear Left"... 1.3-1.5 s each, 48 kHz; "Noise" left out), converted by sox. There are
no word times for them: WER, retractions and CPU only (set "real"; skipped, and said, where the files are missing).

CarelessWhisper (`careless`) runs when its trained LoRA ships (assets/whisper-careless-lora), beside a
`careless-untrained` row (the same causal encoder and commit rule without the LoRA, `careless.lora=false`);
until then it is listed with the reason it cannot run.

    python bench/bench_streaming.py [--chunks 1.0,2.0] [--clips 3] [--sets synthetic,real] [--threads 1] [--quick]
                                    [--json]

`--quick`: the first clip, chunks of 2 s, no `careless-untrained` row (about a minute on one core).
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
from decoding.speech.metrics import edits, normalise
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


REAL_DIR = Path("/usr/share/sounds/alsa")  # Debian's alsa-utils: recordings of a person saying the speaker names


def real_clips() -> list[tuple[Path, str]]:
    """(file, what is said) of the real recordings on this machine (none where alsa-utils is not installed)."""
    if not REAL_DIR.is_dir():
        return []
    return [(p, p.stem.replace("_", " ")) for p in sorted(REAL_DIR.glob("*.wav")) if p.stem != "Noise"]


class Recording:
    """A real recording as `run_policy` reads a clip: its samples, no word times."""

    def __init__(self, path: Path):
        from ui.speech_callbacks import read_audio_file

        self.audio, self.words = read_audio_file(path), None
        self.duration = len(self.audio) / 16000


VARIANTS = {"careless-untrained": ("careless", {"careless.lora": False})}  # row -> (policy, its settings)


def run_policy(asr, clip, text: str, policy: str, chunk_s: float) -> dict:
    name, extra = VARIANTS.get(policy, (policy, {}))
    finish = list(transcribe(asr, clip.audio, params={"policy": name, "chunk_s": chunk_s, **extra}, words=clip.words,
                             reference=text))[-1]
    ref = normalise(text)
    return {"policy": policy, "chunk_s": chunk_s, "text": finish.text, "edits": edits(ref, normalise(finish.text)),
            "ref_words": len(ref), "latencies": [w["latency_s"] for w in finish.committed if w["latency_s"] is not None],
            **{k: finish.stats[k] for k in ("retracted_tokens", "audio_s", "cpu_s", "encoder_passes", "decoder_passes")}}


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
        "encoder_passes": sum(r["encoder_passes"] for r in runs), "decoder_passes": sum(r["decoder_passes"] for r in runs),
        "audio_s": round(audio_s, 2), "clips": len(runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="1.0,2.0", help="chunk sizes in seconds, comma-separated")
    parser.add_argument("--clips", type=int, default=len(CLIPS), help=f"how many of the {len(CLIPS)} clips")
    parser.add_argument("--sets", default="synthetic,real", help="synthetic (espeak-ng clips), real (recordings "
                                                                   "from a Debian package), comma-separated")
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
    print(f"{'set':<9} {'policy':<18} {'chunk':>5} {'WER':>6} {'mean lat':>9} {'p95 lat':>8} {'retr/min':>9} {'CPU/audio s':>12}")
    for r in rows:
        print(f"{r['set']:<9} {r['policy']:<18} {r['chunk_s']:>5} {r['wer']:>6} {r['mean_latency_s']!s:>9} "
              f"{r['p95_latency_s']!s:>8} {r['retractions_per_minute']:>9} {r['cpu_s_per_audio_s']:>12}")
    for name, reason in out["unavailable"].items():
        print(f"{name}: {reason}")


if __name__ == "__main__":
    main()
