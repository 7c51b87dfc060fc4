"""Step-level speculation on held-out tiny-math problems: the policy alone vs a drafter writing steps.

For each problem, interleaved (the order rotates per problem), one solution (N = 1) by:
    policy alone        best-of-n with n = 1: tiny-math samples every step itself
    spec, <drafter>     step-speculation: the drafter writes each step, the `arith-step` reward keeps
                        it (the policy reads it in one call) or the policy rewrites it
for each drafter in --drafters (`tiny-math-draft`, the 0.38M model trained for this, greedy (@0) and at
temperature 1, and `self`: tiny-math drafting for itself, where nothing can be saved). Reports accuracy, CPU time per problem
(`time.process_time`, medians and totals), the policy's and the drafter's model calls, the share of
steps kept and of solution tokens written by the drafter, and the CPU-time ratio alone / spec (above 1
= speculation is faster).

    python bench/bench_step_speculation.py [--tasks 40] [--drafters tiny-math-draft,self] [--json]
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
from decoding.scaling import math_tasks
from decoding.scaling import rewards as rw

COMMON = {"reward": "arith-step", "temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}


def correct(answer, reference) -> bool:
    value = rw.parse_number(answer) if answer is not None else None
    return value is not None and abs(value - float(reference)) < 1e-9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--drafters", default="tiny-math-draft@0,tiny-math-draft,self",
                        help="drafters, NAME or NAME@TEMPERATURE (self: the policy drafts for itself)")
    parser.add_argument("--accept", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print only the summary, as one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from decoding.scaling.math_eval import MAX_NEW_TOKENS

    lm = LM(load_model("tiny-math", progress=None))
    drafters = [d.strip() for d in args.drafters.split(",") if d.strip()]
    columns = {"policy alone": ("best-of-n", {"n": 1})}
    for d in drafters:  # NAME or NAME@T (the drafter's temperature; default 1)
        name, _, temperature = d.partition("@")
        columns[f"spec, {d}"] = ("step-speculation", {"n": 1, "accept": args.accept,
                                                      "draft_model": "" if name == "self" else name,
                                                      "draft_temperature": float(temperature or 1.0)})
    problems = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"][:args.tasks]
    for strategy, params in columns.values():  # warm-up (and load the drafters)
        run_to_trace(lm, math_tasks.prompt(problems[0].question), strategy=strategy, params={**COMMON, **params},
                     max_new_tokens=MAX_NEW_TOKENS, chat=False, seed=0)
    runs: dict[str, list[dict]] = {c: [] for c in columns}
    order = list(columns)
    for k, problem in enumerate(problems):
        prompt = math_tasks.prompt(problem.question)
        for c in order[k % len(order):] + order[:k % len(order)]:
            strategy, params = columns[c]
            before = lm.forward_passes
            cpu = time.process_time()
            trace = run_to_trace(lm, prompt, strategy=strategy, params={**COMMON, **params},
                                 max_new_tokens=MAX_NEW_TOKENS, chat=False, seed=args.seed + k)
            cpu = time.process_time() - cpu
            spec = trace.finish.extra.get("speculation", {})
            runs[c].append({"ok": correct(trace.finish.extra["answer"], problem.answer), "cpu_s": cpu,
                            "policy_calls": spec.get("policy_calls", lm.forward_passes - before),
                            "draft_calls": spec.get("draft_calls", 0),
                            "kept": spec.get("accepted_steps", 0), "steps": spec.get("accepted_steps", 0)
                            + spec.get("rewritten_steps", 0),
                            "draft_tokens": spec.get("accepted_tokens", 0),
                            "tokens": len(trace.finish.token_ids)})
        if not args.json:
            print(f"problem {k + 1}/{len(problems)}: " + ", ".join(
                f"{c} {sum(r['ok'] for r in runs[c])}" for c in columns), file=sys.stderr, flush=True)
    summary = {"tasks": len(problems), "accept": args.accept, "sampling": COMMON, "methods": {}}
    alone = sum(r["cpu_s"] for r in runs["policy alone"])
    for c, rows in runs.items():
        steps = sum(r["steps"] for r in rows)
        summary["methods"][c] = {
            "accuracy": round(sum(r["ok"] for r in rows) / len(rows), 3),
            "cpu_s_median": round(statistics.median(r["cpu_s"] for r in rows), 4),
            "cpu_s_total": round(sum(r["cpu_s"] for r in rows), 2),
            "speedup_vs_alone": round(alone / sum(r["cpu_s"] for r in rows), 2),
            "policy_calls_per_problem": round(statistics.mean(r["policy_calls"] for r in rows), 1),
            "draft_calls_per_problem": round(statistics.mean(r["draft_calls"] for r in rows), 1),
            "steps_kept": round(sum(r["kept"] for r in rows) / steps, 3) if steps else None,
            "tokens_from_drafter": round(sum(r["draft_tokens"] for r in rows) / max(1, sum(r["tokens"] for r in rows)), 3)
            if steps else None,
        }
    if args.json:
        print(json.dumps(summary))
    else:
        for c, m in summary["methods"].items():
            print(f"{c}: accuracy {m['accuracy']:.0%}, CPU {m['cpu_s_total']} s ({m['speedup_vs_alone']}x alone), "
                  f"policy calls {m['policy_calls_per_problem']}, drafter calls {m['draft_calls_per_problem']}, "
                  f"steps kept {m['steps_kept']}, tokens from the drafter {m['tokens_from_drafter']}")


if __name__ == "__main__":
    main()
