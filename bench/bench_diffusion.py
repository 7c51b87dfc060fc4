"""Diffusion samplers on the embedded model, side by side in one run: NFE, wall-clock and quality.

For every prompt, runs each sampler configuration on `tiny-diffusion` (the same canvas length,
greedy draws so each run is deterministic) and reports, per configuration:
  NFE            model calls per answer (mean over prompts); fixed steps = length is the baseline
  tokens/step    canvas tokens committed per model call
  wall-clock     seconds per answer, median over rounds; configurations are interleaved per
                 prompt and their order alternates between rounds, so all share the machine's state
  speed-up       the baseline's wall-clock / this configuration's (median of per-prompt ratios)
  AR ppl         perplexity of the whole canvas (every token, end-of-verse separators included)
                 under `tiny-ar`, given the prompt: the quality measure (lower reads more like the
                 corpus to a model trained on it; geometric mean over prompts)
  rep-4          share of the canvas' 4-grams that repeat an earlier 4-gram (degenerate loops
                 score low perplexity, so read the two together)
A tiny-ar greedy row gives the autoregressive reference (its perplexity is scored by itself, so
it flatters AR). With `--check-cache`, the delayed cache at refresh 1 is also checked to give the
uncached canvas.

    python bench/bench_diffusion.py [--length 64] [--rounds 3] [--prompts 8] [--threads 1] [--only cache] [--out F.json]

With a task model (`--model tiny-parallel`) it runs the per-task benchmark instead
(bench/diffusion_tasks.py): accuracy by the task's checker, NFE, tokens per step, the causal
twin as the left-to-right reference:

    python bench/bench_diffusion.py --model tiny-parallel [--quick] [--json] [--per-task N]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from decoding import run_to_trace
from decoding.events import DiffusionStep, stats
from decoding.run import as_lm

PROMPTS = [
    "In the beginning",
    "And it came to pass, when",
    "The LORD is my shepherd;",
    "And Jesus said unto them,",
    "Thus saith the LORD of hosts,",
    "Blessed are they that",
    "My son, hear the instruction of",
    "And the king said unto",
    "Praise ye the LORD.",
    "And God said, Let",
    "For the Son of man",
    "Hear, O Israel:",
]


BASELINE = "fixed, steps = length"
TASK_MODELS = ("tiny-parallel",)  # models trained on tasks with checkers: the per-task benchmark


def configs(length: int) -> dict[str, dict]:
    """The sampler settings compared; `fixed, steps = length` is the one-token-per-step baseline."""
    return {
        BASELINE: {"steps": length},
        "fixed, steps = length/2": {"steps": length // 2},
        "fixed, steps = length/4": {"steps": length // 4},
        "fixed, steps = length, random order": {"steps": length, "remasking": "random"},
        "threshold 0.9": {"threshold": 0.9},
        "threshold 0.7": {"threshold": 0.7},
        "threshold 0.5": {"threshold": 0.5},
        "threshold 0.3": {"threshold": 0.3},
        "localleap 0.9 / 0.5, radius 4": {"sampler": "localleap", "anchor_threshold": 0.9, "threshold": 0.5, "radius": 4},
        "localleap 0.7 / 0.3, radius 4": {"sampler": "localleap", "anchor_threshold": 0.7, "threshold": 0.3, "radius": 4},
        "localleap 0.7 / 0.3, radius 4, linear decay": {"sampler": "localleap", "anchor_threshold": 0.7,
                                                        "threshold": 0.3, "radius": 4, "decay": "linear"},
        "fixed, steps = length + delayed cache": {"steps": length, "cache": "delayed", "refresh_interval": 4},
        "threshold 0.7 + delayed cache": {"threshold": 0.7, "cache": "delayed", "refresh_interval": 4},
    }


def final_canvas(trace) -> list[int]:
    """The last step's canvas: every position's token, end-of-verse separators included."""
    last = [e for e in trace.events if isinstance(e, DiffusionStep)][-1]
    assert -1 not in last.canvas, "a diffusion run ended with masked positions"
    return last.canvas


@torch.no_grad()
def ar_nll(ar, prompt_ids: list[int], ids: list[int]) -> float:
    """Mean negative log-likelihood (nats/token) of `ids` after `prompt_ids` under the AR model."""
    full = torch.tensor([prompt_ids + ids])
    logits = ar.loaded.model(input_ids=full).logits[0, len(prompt_ids) - 1:-1].float()  # (L, V)
    return torch.nn.functional.cross_entropy(logits, torch.tensor(ids)).item()


def repeated_4grams(ids: list[int]) -> float:
    grams = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
    seen, repeats = set(), 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / max(1, len(grams))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny-diffusion")
    parser.add_argument("--ar", default="tiny-ar")
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=0, help="semi-AR blocks for every sampler (0 = one block)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--check-cache", action="store_true")
    parser.add_argument("--samples", type=int, default=2, help="print this many samples per configuration")
    parser.add_argument("--only", action="append", default=[],
                        help="run only the samplers whose name contains this (repeatable); the baseline always runs")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="task models: 20 problems per task, one round")
    parser.add_argument("--json", action="store_true", help="task models: print one JSON object")
    parser.add_argument("--per-task", type=int, default=0, help="task models: held-out problems per task")
    parser.add_argument("--twin", default="tiny-parallel-ar", help="task models: the causal twin ('' = none)")
    parser.add_argument("--merge-twin", metavar="FILE", help="task models: add the twin's rows to an earlier --out FILE")
    args = parser.parse_args()
    if args.model in TASK_MODELS:
        from diffusion_tasks import main as task_main

        if args.length == 64:
            args.length = 32  # tiny-parallel's answers fit in 32 positions
        task_main(args)
        return
    torch.set_num_threads(args.threads)
    lm, ar = as_lm(args.model), as_lm(args.ar)
    prompts = PROMPTS[:args.prompts]
    table = {name: p for name, p in configs(args.length).items()
             if name == BASELINE or not args.only or any(word in name for word in args.only)}
    if args.block_length:
        table = {name: {**p, "block_length": args.block_length} for name, p in table.items()}
    run = dict(max_new_tokens=args.length, chat=False, seed=0)
    run_to_trace(lm, prompts[0], strategy="diffusion", params={"steps": 8}, max_new_tokens=16, chat=False)  # warm-up

    results = {name: {"nfe": [], "tps": [], "seconds": [], "nll": [], "rep": [], "texts": []} for name in table}
    ar_rows = {"nfe": [], "seconds": [], "nll": [], "rep": [], "texts": []}
    speedups = {name: [] for name in table}
    for prompt in prompts:
        prompt_ids = lm.encode_prompt(prompt, chat=False)[0]
        timings = {name: [] for name in table}
        canvases = {}
        for r in range(args.rounds):
            names = list(table) if r % 2 == 0 else list(reversed(table))
            for name in names:
                t0 = time.perf_counter()
                trace = run_to_trace(lm, prompt, strategy="diffusion", params=table[name], **run)
                timings[name].append(time.perf_counter() - t0)
                canvas = final_canvas(trace)
                assert canvases.setdefault(name, canvas) == canvas, f"{name}: greedy runs differ between rounds"
                if r == 0:
                    s = stats(trace)
                    results[name]["nfe"].append(s["nfe"])
                    results[name]["tps"].append(s["tokens_per_step"])
        for name in table:
            seconds = statistics.median(timings[name])
            results[name]["seconds"].append(seconds)
            speedups[name].append(statistics.median(timings[BASELINE]) / seconds)
            results[name]["nll"].append(ar_nll(ar, prompt_ids, canvases[name]))
            results[name]["rep"].append(repeated_4grams(canvases[name]))
            results[name]["texts"].append(prompt + lm.decode(canvases[name]))
        if args.check_cache:
            base = canvases[BASELINE]
            cached = final_canvas(run_to_trace(lm, prompt, strategy="diffusion", params={
                "steps": args.length, "cache": "delayed", "refresh_interval": 1}, **run))
            assert cached == base, f"delayed cache at refresh 1 changed the canvas for {prompt!r}"
        ar_ids = ar.encode_prompt(prompt, chat=False)[0]
        t0 = time.perf_counter()
        ar_trace = run_to_trace(ar, prompt, strategy="greedy", max_new_tokens=args.length, chat=False, seed=0)
        ar_rows["seconds"].append(time.perf_counter() - t0)
        ar_out = ar_trace.finish.token_ids
        ar_rows["nfe"].append(len(ar_out))
        ar_rows["nll"].append(ar_nll(ar, ar_ids, ar_out))
        ar_rows["rep"].append(repeated_4grams(ar_out))
        ar_rows["texts"].append(prompt + ar.decode(ar_out))
        print(f"done: {prompt!r}", file=sys.stderr, flush=True)

    rows = []
    for name, res in results.items():
        rows.append({
            "sampler": name, "params": table[name], "nfe": statistics.mean(res["nfe"]),
            "tokens_per_step": statistics.mean(res["tps"]), "seconds": statistics.mean(res["seconds"]),
            "speedup": statistics.median(speedups[name]), "ar_ppl": math.exp(statistics.mean(res["nll"])),
            "rep4": statistics.mean(res["rep"]), "samples": res["texts"][:args.samples],
        })
    rows.append({
        "sampler": "tiny-ar greedy (reference)", "params": {}, "nfe": statistics.mean(ar_rows["nfe"]),
        "tokens_per_step": 1.0, "seconds": statistics.mean(ar_rows["seconds"]), "speedup": None,
        "ar_ppl": math.exp(statistics.mean(ar_rows["nll"])), "rep4": statistics.mean(ar_rows["rep"]),
        "samples": ar_rows["texts"][:args.samples],
    })
    print(f"{args.model}, {args.length} tokens, block_length {args.block_length or args.length}, "
          f"{len(prompts)} prompts, {args.rounds} rounds, {args.threads} thread(s)\n")
    print("| sampler | NFE | tokens/step | s/answer | speed-up | AR ppl | rep-4 |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        speedup = f"{row['speedup']:.2f}x" if row["speedup"] is not None else "-"
        print(f"| {row['sampler']} | {row['nfe']:.1f} | {row['tokens_per_step']:.2f} | {row['seconds']:.3f} | "
              f"{speedup} | {row['ar_ppl']:.1f} | {row['rep4']:.2f} |")
    print()
    for row in rows:
        for text in row["samples"]:
            print(f"[{row['sampler']}] {text!r}")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
