"""tiny-ar vs tiny-ar-hyperfit (Carlsson et al. 2024): greedy text and sharpness side by side.

For each prompt both models decode greedily (`--tokens` tokens, the same prompts, one process) and
the summary reports, from the runs' own events: mean entropy of the raw next-token distribution
(nats), distinct-2 and distinct-3 (unique token n-grams / all token n-grams of the continuation),
and repeated 4-grams (4-gram occurrences that repeat an earlier one). Deterministic (greedy), so
one round; CPU seconds are reported for completeness, not compared.

    python bench/bench_hyperfit.py [--tokens 64] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.models import load_model

MODELS = ("tiny-ar", "tiny-ar-hyperfit")
PROMPTS = ("In the beginning", "The LORD is my shepherd", "And it came to pass", "Blessed are they",
           "And the king said", "Now the serpent")  # the first two open held-out chapters (Genesis 1, Psalm 23)


def distinct(ids: list[int], n: int) -> float:
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def repeated(ids: list[int], n: int = 4) -> int:
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) - len(set(grams))


def measure(lm: LM, prompt: str, tokens: int) -> dict:
    started = time.process_time()
    trace = run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=tokens, chat=False)
    ids = trace.finish.token_ids
    return {"prompt": prompt, "text": trace.finish.text, "num_tokens": len(ids),
            "mean_entropy": statistics.fmean(e.entropy for e in trace.of_kind("token")),
            "distinct_2": distinct(ids, 2), "distinct_3": distinct(ids, 3), "repeated_4grams": repeated(ids),
            "cpu_s": time.process_time() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lms = {name: LM(load_model(name, dtype="float32", progress=None)) for name in MODELS}
    runs = {name: [] for name in MODELS}
    for prompt in PROMPTS:  # interleaved: both models per prompt
        for name in MODELS:
            runs[name].append(measure(lms[name], prompt, args.tokens))
    keys = ("mean_entropy", "distinct_2", "distinct_3", "repeated_4grams")
    summary = {name: {k: statistics.fmean(r[k] for r in runs[name]) for k in keys} for name in MODELS}
    result = {"tokens": args.tokens, "prompts": list(PROMPTS), "summary": summary, "runs": runs}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'model':18} {'entropy':>8} {'distinct-2':>10} {'distinct-3':>10} {'rep. 4-grams':>12}")
    for name in MODELS:
        s = summary[name]
        print(f"{name:18} {s['mean_entropy']:8.3f} {s['distinct_2']:10.3f} {s['distinct_3']:10.3f} {s['repeated_4grams']:12.1f}")
    for i, prompt in enumerate(PROMPTS):
        print(f"\n{prompt!r}")
        for name in MODELS:
            print(f"  {name:16} {runs[name][i]['text']!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
