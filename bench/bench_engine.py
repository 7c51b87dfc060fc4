"""Engine overhead: greedy tokens/s through the engine (full per-token recording) vs model.generate.

Both run side by side in one process on the same model, prompt and dtype, interleaved over
several rounds so that machine noise hits both alike. Prints one JSON line per round and a
summary with the median ratio (target: engine >= 0.9x generate).

    python bench/bench_engine.py [--model smollm2-135m] [--tokens 64] [--rounds 5] [--dtype float32]
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
from decoding.events import stats
from decoding.lm import LM
from decoding.models import load_model

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = LM(load_model(args.model, dtype=args.dtype, progress=None))
    ids, _, _ = lm.encode_prompt(PROMPT)
    input_ids = torch.tensor([ids], device=lm.device)

    def run_generate() -> tuple[float, list[int]]:
        t0 = time.perf_counter()
        out = lm.model.generate(input_ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
        return time.perf_counter() - t0, out[0, len(ids):].tolist()

    def run_engine() -> tuple[float, list[int]]:
        t0 = time.perf_counter()
        trace = run_to_trace(lm, PROMPT, strategy="greedy", max_new_tokens=args.tokens)
        return time.perf_counter() - t0, trace.finish.token_ids

    run_generate(), run_engine()  # warm-up
    ratios = []
    for r in range(args.rounds):
        if r % 2 == 0:  # alternate which goes first
            tg, gen_ids = run_generate()
            te, eng_ids = run_engine()
        else:
            te, eng_ids = run_engine()
            tg, gen_ids = run_generate()
        n = min(len(gen_ids), len(eng_ids))
        ratio = (len(eng_ids) / te) / (len(gen_ids) / tg)
        ratios.append(ratio)
        print(json.dumps({"round": r, "generate_tok_s": round(len(gen_ids) / tg, 2), "engine_tok_s": round(len(eng_ids) / te, 2),
                          "ratio": round(ratio, 3), "same_tokens": gen_ids[:n] == eng_ids[:n]}), flush=True)
    trace = run_to_trace(lm, PROMPT, strategy="greedy", max_new_tokens=args.tokens)
    print(json.dumps({"model": args.model, "dtype": args.dtype, "tokens": args.tokens, "threads": torch.get_num_threads(),
                      "median_ratio_engine_over_generate": round(statistics.median(ratios), 3),
                      "min_ratio": round(min(ratios), 3), "engine_stats": stats(trace)}))


if __name__ == "__main__":
    main()
