"""Adaptive compute (Manvi et al. 2024) on held-out tiny-math problems: samples saved at equal accuracy.

Two evaluators decide when to stop and what to prune, each with the policy it needs:
    self-eval   the policy's own self-evaluation token, with --self-eval-model FOLDER: a policy trained by
                `python -m decoding.training.selfeval` (none ships: on tiny-math the token did not learn,
                docs/scaling.md); without it these rows are skipped
    arith-step  the arithmetic step checker on `tiny-math` (a rule process reward, standing in for a
                self-evaluation that does discriminate; min over the steps: 0.5 for a complete solution
                with every step right, as its answer line is neutral, 0.05 with a wrong one)
For each problem and evaluator, interleaved (the order rotates per problem), with the same seed:
    best-of-N, <evaluator>          N samples, the highest score wins (N = 1, 2, 4, 8, 16 read off one
                                    16-sample run: slot i's sample is the same whatever N is)
    adaptive, <evaluator> T=<t>     waves of 1, 2, 4, ... samples (16 at most) until the best complete
                                    sample's score reaches t
    ..., prune                      ... and after 2 steps of a wave only its better half goes on
Reports accuracy, samples started, tokens generated and CPU time (median per problem; for best-of-N
only the 16-sample run's, the smaller budgets being read off it), and for every adaptive row the
smallest best-of-N budget (same evaluator) at least as accurate: the samples saved at equal accuracy.

    python bench/bench_adaptive.py [--tasks 40] [--self-eval-model /tmp/selfeval/out] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
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
from decoding.scaling.math_eval import MAX_NEW_TOKENS
from decoding.scaling.run import best_complete
from bench_step_speculation import correct  # the same answer check as the step-speculation bench

COMMON = {"temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}
TOP = 16
BUDGETS = (1, 2, 4, 8, 16)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--self-eval-model", help="a folder trained by decoding.training.selfeval (its rows run only then)")
    parser.add_argument("--self-eval-threshold", type=float, default=0.8)
    parser.add_argument("--arith-threshold", type=float, default=0.5,
                        help="a complete solution scores 0.5 (its answer line is neutral) when every step is right, "
                             "0.05 when one is wrong: 0.5 stops at the first sample with no wrong step")
    parser.add_argument("--prune-after", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print only the summary, as one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(1)
    say = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    policies = {"arith-step": LM(load_model("tiny-math", progress=None))}
    scoring = {"arith-step": {"reward": "arith-step", "aggregate": "min"}}
    if args.self_eval_model:
        os.environ.setdefault("DECODING_LAB_ALLOW_LOCAL_MODELS", "1")  # a folder, not a registry name
        policies["self-eval"] = LM(load_model(args.self_eval_model, progress=None))
        scoring["self-eval"] = {"reward": "self-eval", "aggregate": "last"}
    thresholds = {"self-eval": args.self_eval_threshold, "arith-step": args.arith_threshold}
    problems = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"][: args.tasks]
    columns = {}  # name -> (evaluator, strategy, params)
    for ev, score in scoring.items():
        t = thresholds[ev]
        columns[f"best-of-N, {ev}"] = (ev, "best-of-n", {"n": TOP, **score})
        columns[f"adaptive, {ev} T={t:g}"] = (ev, "adaptive", {"n": TOP, "threshold": t, **score})
        columns[f"adaptive, {ev} T={t:g}, prune"] = (ev, "adaptive", {"n": TOP, "threshold": t, **score,
                                                                       "prune_after": args.prune_after, "keep": 0.5})
    order = list(columns)
    rows: dict[str, list[dict]] = {}
    for k, problem in enumerate(problems):
        prompt = math_tasks.prompt(problem.question)
        for c in order[k % len(order):] + order[:k % len(order)]:
            ev, strategy, params = columns[c]
            cpu = time.process_time()
            trace = run_to_trace(policies[ev], prompt, strategy=strategy, params={**COMMON, **params},
                                 max_new_tokens=MAX_NEW_TOKENS, chat=False, seed=args.seed + k)
            cpu = time.process_time() - cpu
            extra = trace.finish.extra
            if strategy == "best-of-n":  # every budget from the first N slots of one run
                particles = extra["particles"]
                for n in BUDGETS:
                    first = particles[:n]
                    chosen = first[best_complete([p["score"] for p in first], [p["ended"] for p in first])]
                    rows.setdefault(f"best-of-N={n}, {ev}", []).append(
                        {"ok": correct(chosen["answer"], problem.answer), "samples": n,
                         "tokens": sum(p["num_tokens"] for p in first),
                         "cpu_s": cpu if n == TOP else None})  # measured for the whole run only
            else:
                info = extra["adaptive"]
                rows.setdefault(c, []).append({"ok": correct(extra["answer"], problem.answer),
                                               "samples": info["samples"], "tokens": info["tokens"], "cpu_s": cpu})
        say(f"problem {k + 1}/{len(problems)}: " + ", ".join(
            f"{c} {sum(r['ok'] for r in v)}" for c, v in rows.items()))
    methods = {}
    for c, r in rows.items():
        methods[c] = {"accuracy": round(sum(x["ok"] for x in r) / len(r), 4),
                      "samples_mean": round(statistics.mean(x["samples"] for x in r), 2),
                      "tokens_mean": round(statistics.mean(x["tokens"] for x in r), 1),
                      "cpu_s_median": round(statistics.median(x["cpu_s"] for x in r), 4)
                      if r[0]["cpu_s"] is not None else None}
    for c, m in methods.items():
        if c.startswith("adaptive"):
            ev = c.split(", ")[1].split(" ")[0]
            match = next((n for n in BUDGETS if methods[f"best-of-N={n}, {ev}"]["accuracy"] >= m["accuracy"]), None)
            m["best_of_n_budget_as_accurate"] = match
            m["samples_saved_vs_that_budget"] = round(match / m["samples_mean"], 2) if match else None
    summary = {"policies": {ev: lm.name for ev, lm in policies.items()}, "tasks": len(problems), "split": "test",
               "sampling": COMMON,
               "max_samples": TOP, "prune_after": args.prune_after, "thresholds": thresholds, "seed": args.seed,
               "methods": methods}
    if args.json:
        print(json.dumps(summary))
    else:
        for c, m in methods.items():
            saved = (f"; best-of-N needs N={m['best_of_n_budget_as_accurate']} for as much "
                     f"({m['samples_saved_vs_that_budget']}x the samples)") if "best_of_n_budget_as_accurate" in m else ""
            print(f"{c}: accuracy {m['accuracy']:.1%}, samples {m['samples_mean']}, tokens {m['tokens_mean']}, "
                  f"CPU median {m['cpu_s_median']} s{saved}")


if __name__ == "__main__":
    main()
