"""Review, refine, repeat (IAD): does feeding the review back beat sampling again? On held-out tiny-math problems.

For every problem of tiny-math's test split (temperature 1, top_p 1, 160 tokens per solution, seed 0 + problem), side
by side: refine with each feedback mode (`correction`: the best solution's verified steps and the checker's corrected
step forced into the next round, as Chakraborty et al. 2025 feed the evaluation back; `prefix`: the verified steps
only, the bad step sampled again; `none`: every round samples afresh, the paper's diversity-only control), 3 rounds,
at N = 1 and 4 solutions per round, with the step rewards `arith-step` (blind to a misread number) and `spare` (reads
the reference from the question, so its correction is the reference's step); and best-of-N under the same reward,
N = 1..16 from one run of 16 samples, read at the refine runs' mean tokens (linear in log tokens: equal compute).
Tokens: generated tokens per problem (prompt and forced corrections excluded; the forced ones are counted apart).

    python bench/bench_refine.py --json              # 100 problems (423 s CPU on one thread)
    python bench/bench_refine.py --quick --json      # 40 problems
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

from bench_compute_optimal import correct, interpolate, paired, problems
from decoding import run_to_trace
from decoding.events import stats
from decoding.lm import LM
from decoding.models import load_model
from decoding.scaling import math_tasks
from decoding.scaling.compute_fit import pooled_correct
from decoding.scaling.math_eval import MAX_NEW_TOKENS

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}
REWARDS = ("arith-step", "spare")
MODES = ("correction", "prefix", "none")
SIZES = (1, 4)
BEST_OF = (1, 2, 4, 8, 16)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=None, help="problems (100; --quick 40)")
    parser.add_argument("--first-task", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lm = LM(load_model("tiny-math", progress=None))
    chosen = problems("test", args.first_task, args.tasks or (40 if args.quick else 100))
    cells: dict = {}
    t0 = time.process_time()
    for k, problem in enumerate(chosen):
        prompt, seed = math_tasks.prompt(problem.question), args.seed + args.first_task + k
        run = dict(max_new_tokens=MAX_NEW_TOKENS, chat=False, seed=seed)
        for reward in REWARDS:
            sampled = run_to_trace(lm, prompt, strategy="best-of-n", params={"n": max(BEST_OF), "reward": reward,
                                                                           **SAMPLING}, **run)
            samples = [p | {"correct": correct(p["answer"], problem.answer)} for p in sampled.finish.extra["particles"]]
            for n in BEST_OF:
                cells.setdefault((reward, f"best-of-n N={n}"), []).append(
                    (pooled_correct(samples[:n], "best-of-n"), sum(p["num_tokens"] for p in samples[:n]), 0, 1))
            for mode in MODES:
                for n in SIZES:
                    trace = run_to_trace(lm, prompt, strategy="refine", params={
                        "n": n, "reward": reward, "rounds": args.rounds, "feedback": mode, **SAMPLING}, **run)
                    extra = trace.finish.extra
                    cells.setdefault((reward, f"refine {mode} N={n}"), []).append(
                        (correct(extra["answer"], problem.answer), stats(trace)["tokens_spent"],
                         extra.get("forced_tokens", 0), len(extra.get("rounds", [])) or 1))
        print(f"problem {k + 1}/{len(chosen)} ({time.process_time() - t0:.0f} s CPU so far)", file=sys.stderr, flush=True)
    rows = {reward: {} for reward in REWARDS}
    for (reward, name), values in cells.items():
        rows[reward][name] = {"accuracy": round(statistics.mean(v[0] for v in values), 4),
                              "tokens_mean": round(statistics.mean(v[1] for v in values), 1),
                              "tokens_median": statistics.median(v[1] for v in values),
                              "forced_tokens_mean": round(statistics.mean(v[2] for v in values), 1),
                              "rounds_mean": round(statistics.mean(v[3] for v in values), 2)}
    for table in rows.values():
        curve = [(table[f"best-of-n N={n}"]["tokens_mean"], table[f"best-of-n N={n}"]["accuracy"]) for n in BEST_OF]
        for name, row in table.items():
            if name.startswith("refine"):
                at = interpolate(curve, row["tokens_mean"])
                row["best_of_n_at_equal_tokens"] = None if at is None else round(at, 4)
    for reward in REWARDS:  # the same problems, paired: feedback against its controls
        for n in SIZES:
            mine = cells[(reward, f"refine correction N={n}")]
            rows[reward][f"refine correction N={n}"]["paired"] = {
                f"vs_{mode}": paired(mine, cells[(reward, f"refine {mode} N={n}")]) for mode in MODES[1:]}
    result = {"problems": "tiny-math held-out test split", "tasks": len(chosen), "first_task": args.first_task,
              "rounds": args.rounds, "seed": args.seed, "sampling": SAMPLING, "rows": rows,
              "cpu_s": round(time.process_time() - t0, 1)}
    if args.json:
        print(json.dumps(result))
        return
    print(f"\n{len(chosen)} held-out test problems, {args.rounds} rounds; accuracy (mean / median tokens; forced; rounds)")
    for reward, table in rows.items():
        print(f"\nreward {reward}")
        for name, row in table.items():
            at = row.get("best_of_n_at_equal_tokens")
            print(f"  {name:<24}{row['accuracy']:>7.1%}  ({row['tokens_mean']:.0f} / {row['tokens_median']:.0f}; "
                  f"{row['forced_tokens_mean']:.1f}; {row['rounds_mean']:.2f})"
                  + ("" if at is None else f"  best-of-N at equal tokens {at:.1%}"))
            for versus, p in row.get("paired", {}).items():
                print(f"      minus {versus[3:]}: {p['diff']:+.1%} ± {p['se'] or 0:.1%} (solved by one only: "
                      f"{p['only_a']} / {p['only_b']})")


if __name__ == "__main__":
    main()
