"""Adaptive compute (Manvi et al. 2024) on held-out tiny-math problems: samples saved at equal accuracy.

Policy: `tiny-math-selfeval` (tiny-math fine-tuned to answer its self-evaluation query; its
sampling kept close to tiny-math's by a KL term). For each problem, interleaved (the order rotates
per problem), with the same seed:
    best-of-N, self-eval       N samples, the one with the highest self-evaluation wins (N = 1..16)
    best-of-N, arith-step      the same N samples, the highest arith-step score (a rule checker) wins
    adaptive, T=<t>            waves of 1, 2, 4, ... samples (16 at most) until the best complete
                               sample's self-evaluation reaches t
    adaptive, T=<t>, prune     ... and after 2 steps of a wave only its better half goes on
Reports accuracy, samples started, tokens generated and CPU time (median per problem; for best-of-N
only the 16-sample run's, the smaller budgets being read off it), and for
every adaptive row the smallest best-of-N (self-eval) budget that is at least as accurate: the
samples saved at equal accuracy. best-of-N's rows are read off one 16-sample run (slot i's sample
is the same whatever N is; `bench_scaling.py` does the same).

    python bench/bench_adaptive.py [--tasks 60] [--thresholds 0.6,0.8,0.9,0.95] [--json]
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
from decoding.scaling.math_eval import MAX_NEW_TOKENS
from decoding.scaling.run import best_complete

COMMON = {"temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}
TOP = 16
BUDGETS = (1, 2, 4, 8, 16)


def correct(answer, reference) -> bool:
    value = rw.parse_number(answer) if answer is not None else None
    return value is not None and abs(value - float(reference)) < 1e-9


def arith_score(prompt: str, text: str) -> float:
    checker = rw.ArithmeticStepChecker(floor=0.05, ceiling=0.95, neutral=0.5)
    lines = [line for line in text.splitlines() if line.strip()] or [""]
    return min(checker.score(prompt, lines[: i + 1], i == len(lines) - 1).value for i in range(len(lines)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--thresholds", default="0.6,0.8,0.9,0.95")
    parser.add_argument("--prune-after", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print only the summary, as one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(1)
    say = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    lm = LM(load_model("tiny-math-selfeval", progress=None))
    problems = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"][: args.tasks]
    columns = {"best-of-N": ("best-of-n", {"n": TOP, "reward": "self-eval", "aggregate": "last"})}
    for t in (float(x) for x in args.thresholds.split(",")):
        columns[f"adaptive, T={t:g}"] = ("adaptive", {"n": TOP, "threshold": t})
        columns[f"adaptive, T={t:g}, prune"] = ("adaptive", {"n": TOP, "threshold": t,
                                                             "prune_after": args.prune_after, "keep": 0.5})
    order = list(columns)
    rows: dict[str, list[dict]] = {}
    for k, problem in enumerate(problems):
        prompt = math_tasks.prompt(problem.question)
        for c in order[k % len(order):] + order[:k % len(order)]:
            strategy, params = columns[c]
            cpu = time.process_time()
            trace = run_to_trace(lm, prompt, strategy=strategy, params={**COMMON, **params},
                                 max_new_tokens=MAX_NEW_TOKENS, chat=False, seed=args.seed + k)
            cpu = time.process_time() - cpu
            extra = trace.finish.extra
            if strategy == "best-of-n":  # every budget from the first N slots of one run
                particles = extra["particles"]
                arith = [arith_score(prompt, p["text"]) for p in particles]
                for n in BUDGETS:
                    first = particles[:n]
                    ended = [p["ended"] for p in first]
                    by_self = first[best_complete([p["score"] for p in first], ended)]
                    by_rule = first[best_complete(arith[:n], ended)]
                    spent = sum(p["num_tokens"] for p in first)
                    rows.setdefault(f"best-of-N={n}, self-eval", []).append(
                        {"ok": correct(by_self["answer"], problem.answer), "samples": n, "tokens": spent,
                         "cpu_s": cpu if n == TOP else None})  # measured for the whole run only
                    rows.setdefault(f"best-of-N={n}, arith-step", []).append(
                        {"ok": correct(by_rule["answer"], problem.answer), "samples": n, "tokens": spent,
                         "cpu_s": None})
            else:
                info = extra["adaptive"]
                rows.setdefault(c, []).append({"ok": correct(extra["answer"], problem.answer),
                                               "samples": info["samples"], "tokens": info["tokens"], "cpu_s": cpu})
        say(f"problem {k + 1}/{len(problems)}: " + ", ".join(
            f"{c} {sum(r['ok'] for r in v)}" for c, v in rows.items() if "arith" not in c))
    methods = {}
    for c, r in rows.items():
        methods[c] = {"accuracy": round(sum(x["ok"] for x in r) / len(r), 4),
                      "samples_mean": round(statistics.mean(x["samples"] for x in r), 2),
                      "tokens_mean": round(statistics.mean(x["tokens"] for x in r), 1),
                      "cpu_s_median": round(statistics.median(x["cpu_s"] for x in r), 4)
                      if r[0]["cpu_s"] is not None else None}
    for c, m in methods.items():
        if c.startswith("adaptive"):
            match = next((n for n in BUDGETS if methods[f"best-of-N={n}, self-eval"]["accuracy"] >= m["accuracy"]),
                         None)
            m["best_of_n_budget_as_accurate"] = match
            m["samples_saved_vs_that_budget"] = round(match / m["samples_mean"], 2) if match else None
    summary = {"model": "tiny-math-selfeval", "tasks": len(problems), "split": "test", "sampling": COMMON,
               "max_samples": TOP, "prune_after": args.prune_after, "seed": args.seed, "methods": methods}
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
