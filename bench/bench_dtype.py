"""float32 vs bfloat16 on this host: greedy tokens/s of one model loaded in each dtype, side by side.

The two runs alternate over several rounds (which goes first alternates too), so machine noise hits
both alike; each round reports wall-clock and CPU time per token. `dtype=auto` picks bfloat16 on a CPU
with native bfloat16 arithmetic (AVX512-BF16 or AMX): this is the measurement behind that rule. The
two dtypes give slightly different greedy text, which the summary reports (`same_tokens`).

    python bench/bench_dtype.py [--model smollm2-135m] [--tokens 48] [--rounds 4] [--threads 1] [--json]
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
from decoding.models import cpu_native_bf16, load_model, pick_dtype, pick_device

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
DTYPES = ("float32", "bfloat16")


def timed_run(lm: LM, tokens: int) -> dict:
    """One greedy run: tokens, wall seconds and CPU seconds (this process, all threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    trace = run_to_trace(lm, PROMPT, strategy="greedy", max_new_tokens=tokens)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    ids = trace.finish.token_ids
    return {"ids": ids, "tok_s": len(ids) / wall, "cpu_ms_per_tok": 1000 * cpu / max(1, len(ids))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch default)")
    parser.add_argument("--json", action="store_true", help="print only the summary, as one JSON line")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lms = {dtype: LM(load_model(args.model, dtype=dtype, progress=None)) for dtype in DTYPES}
    for lm in lms.values():
        timed_run(lm, 4)  # warm-up: one-off kernel set-up
    runs: dict[str, list[dict]] = {dtype: [] for dtype in DTYPES}
    for r in range(args.rounds):
        for dtype in DTYPES if r % 2 == 0 else DTYPES[::-1]:
            runs[dtype].append(timed_run(lms[dtype], args.tokens))
        if not args.json:
            print(json.dumps({"round": r} | {f"{d}_tok_s": round(runs[d][-1]["tok_s"], 2) for d in DTYPES}), flush=True)
    median = {d: statistics.median(x["tok_s"] for x in runs[d]) for d in DTYPES}
    ratios = [b["tok_s"] / f["tok_s"] for f, b in zip(runs["float32"], runs["bfloat16"])]
    auto = str(pick_dtype("auto", pick_device())).removeprefix("torch.")
    print(json.dumps({
        "model": args.model, "tokens": args.tokens, "rounds": args.rounds, "threads": torch.get_num_threads(),
        "cpu_native_bf16": cpu_native_bf16(), "auto_picks": auto,
        **{f"{d}_tok_s_median": round(median[d], 2) for d in DTYPES},
        **{f"{d}_cpu_ms_per_tok_median": round(statistics.median(x["cpu_ms_per_tok"] for x in runs[d]), 2)
           for d in DTYPES},
        "bf16_over_fp32_median": round(statistics.median(ratios), 3),
        "bf16_over_fp32_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "same_tokens": runs["float32"][0]["ids"] == runs["bfloat16"][0]["ids"],
    }))


if __name__ == "__main__":
    main()
