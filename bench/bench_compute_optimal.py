"""Compute-optimal scaling per prompt (Snell et al. 2024) against uniform allocation at equal tokens, on tiny-math.

Three commands (tiny-math, temperature 1, top_p 1, reward arith-step, 160 tokens per solution, seed 0 + problem):

    python bench/bench_compute_optimal.py collect --split val --tasks 200 --out /tmp/co/val.jsonl   # 613 s CPU
    python bench/bench_compute_optimal.py fit --records /tmp/co/val.jsonl --write assets/tiny-math/compute_optimal.json
    python bench/bench_compute_optimal.py eval --tasks 100 --levels 2,4,8,16 --json   # test split (338 s CPU)
    python bench/bench_compute_optimal.py eval --quick --json              # 40 test problems

collect: for each problem of the split, 16 independent samples (the probes are their first k, best-of-N and
majority vote read their first N) and one run of every other option of `decoding.scaling.compute_fit.OPTIONS`
(particle filter, reward beam, refine at several N); one JSON line per problem, appended as it goes (a rerun
skips the problems already there). fit: the allocation table from those records (`compute_fit.fit`): per budget
level, the probe size, the difficulty bins and one option per bin that solve most with mean tokens at most those
of best-of-N at the level's N, and the best single option for every prompt (uniform). eval: on test problems
never used in the fit, per problem and side by side: the registered strategy `compute-optimal` per prompt and
with `allocation=uniform` at every level, and best-of-N at N = 1..16 from one run of 16 samples; accuracy, mean
and median tokens (the probe's included), and best-of-N's accuracy interpolated at the per-prompt run's mean
tokens (equal compute). Tokens are generated tokens per problem, summed over samples (prompt excluded; refine's
forced corrections are prefilled, not generated).
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
from decoding.events import stats
from decoding.lm import LM
from decoding.models import load_model
from decoding.scaling import compute_fit, compute_optimal, math_tasks
from decoding.scaling import rewards as rw
from decoding.scaling.compute_optimal import TABLE_PATH, load_table, option_label
from decoding.scaling.math_eval import MAX_NEW_TOKENS

MATH = {"reward": "arith-step", "temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}
TOP = 16  # samples per problem: best-of-N for N up to 16 reads their first N


def correct(answer, reference: int) -> bool:
    value = rw.parse_number(answer) if answer is not None else None
    return value is not None and abs(value - reference) < 1e-6


def problems(split: str, first: int, count: int) -> list:
    return math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})[split][first:first + count]


def samples_of(lm, problem, seed: int) -> list[dict]:
    trace = run_to_trace(lm, math_tasks.prompt(problem.question), strategy="best-of-n", params={"n": TOP, **MATH},
                         max_new_tokens=MAX_NEW_TOKENS, chat=False, seed=seed)
    return [{"answer": p["answer"], "score": p["score"], "ended": p["ended"], "tokens": p["num_tokens"],
             "correct": correct(p["answer"], problem.answer)} for p in trace.finish.extra["particles"]]


def run_once(lm, problem, strategy: str, params: dict, seed: int) -> dict:
    trace = run_to_trace(lm, math_tasks.prompt(problem.question), strategy=strategy, params={**MATH, **params},
                         max_new_tokens=MAX_NEW_TOKENS, chat=False, seed=seed)
    return {"correct": correct(trace.finish.extra.get("answer"), problem.answer),
            "tokens": stats(trace)["tokens_spent"], "extra": trace.finish.extra}


def collect(lm, args, log) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["id"] for line in out.read_text().splitlines()} if out.exists() else set()
    for k, problem in enumerate(problems(args.split, args.first_task, args.tasks)):
        pid = f"{args.split}-{args.first_task + k}"
        if pid in done:
            continue
        t0, seed = time.process_time(), args.seed + args.first_task + k
        record = {"id": pid, "answer": problem.answer, "difficulty": problem.difficulty,
                  "samples": samples_of(lm, problem, seed), "runs": {}}
        for option in compute_fit.RUN_OPTIONS:
            run = run_once(lm, problem, option["method"], {"n": option["n"], **option.get("params", {})}, seed)
            record["runs"][option_label(option)] = {"correct": run["correct"], "tokens": run["tokens"]}
        with out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        log(f"{pid} ({time.process_time() - t0:.0f} s CPU): best-of-16 "
            f"{'right' if compute_fit.pooled_correct(record['samples'], 'best-of-n') else 'wrong'}")


def fit_table(args) -> dict:
    records = [json.loads(line) for line in Path(args.records).read_text().splitlines()]
    levels = compute_fit.fit(records, levels=tuple(int(x) for x in args.levels.split(",")), min_count=args.min_count)
    table = {"model": "tiny-math", "split": records[0]["id"].split("-")[0], "problems": len(records),
             "sampling": MATH, "max_new_tokens": MAX_NEW_TOKENS, "probe_samples": TOP, "min_count": args.min_count,
             "command": f"python bench/bench_compute_optimal.py fit --records {args.records}", "levels": levels}
    if args.write:
        Path(args.write).write_text(json.dumps(table, indent=1) + "\n")
    return table


def interpolate(curve: list[tuple[float, float]], tokens: float) -> float | None:
    """Accuracy of the (tokens, accuracy) curve at `tokens`, linear in log tokens; None outside it."""
    for (t0, a0), (t1, a1) in zip(curve, curve[1:]):
        if t0 <= tokens <= t1:
            w = (math.log(tokens) - math.log(t0)) / (math.log(t1) - math.log(t0)) if t1 > t0 else 0.0
            return a0 + w * (a1 - a0)
    return None


def paired(a: list[tuple], b: list[tuple]) -> dict:
    """Accuracy difference a - b over the same problems, with its standard error (sd of the per-problem
    differences / sqrt(n)), and the problems only one of them solved."""
    diffs = [float(x[0]) - float(y[0]) for x, y in zip(a, b)]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None
    return {"diff": round(statistics.mean(diffs), 4), "se": None if se is None else round(se, 4),
            "only_a": sum(d > 0 for d in diffs), "only_b": sum(d < 0 for d in diffs)}


def evaluate(lm, args, log) -> dict:
    if args.table:  # the strategy reads its table from here for this process
        compute_optimal.TABLE_PATH = Path(args.table)
    table = load_table()
    levels = [lvl for lvl in table["levels"] if not args.levels or lvl in args.levels.split(",")]
    rows: dict = {}
    bins: dict = {}
    chosen = problems("test", args.first_task, args.tasks)
    for k, problem in enumerate(chosen):
        t0, seed = time.process_time(), args.seed + args.first_task + k
        samples = samples_of(lm, problem, seed)
        for n in (1, 2, 4, 8, 16):
            first = samples[:n]
            rows.setdefault(f"best-of-n N={n}", []).append(
                (compute_fit.pooled_correct(first, "best-of-n"), sum(s["tokens"] for s in first)))
        for level in levels:
            for allocation in ("per-prompt", "uniform"):
                run = run_once(lm, problem, "compute-optimal", {"n": int(level), "allocation": allocation}, seed)
                rows.setdefault(f"compute-optimal {allocation} N={level}", []).append((run["correct"], run["tokens"]))
                if allocation == "per-prompt":
                    alloc = run["extra"]["allocation"]
                    cell = bins.setdefault(level, {}).setdefault(alloc["bin"], {"count": 0, "solved": 0, "steps": [],
                                                                               "choices": {}})
                    cell["count"] += 1
                    cell["solved"] += run["correct"]
                    cell["steps"].append(problem.difficulty)
                    cell["choices"][alloc["choice"]] = cell["choices"].get(alloc["choice"], 0) + 1
        log(f"problem {k + 1}/{len(chosen)} ({time.process_time() - t0:.0f} s CPU)")
    summary = {name: {"accuracy": round(statistics.mean(ok for ok, _ in cells), 4),
                      "tokens_mean": round(statistics.mean(t for _, t in cells), 1),
                      "tokens_median": statistics.median(t for _, t in cells)} for name, cells in rows.items()}
    curve = [(summary[f"best-of-n N={n}"]["tokens_mean"], summary[f"best-of-n N={n}"]["accuracy"]) for n in (1, 2, 4, 8, 16)]
    side = []
    for level in levels:
        per, uni, bon = (summary[f"compute-optimal per-prompt N={level}"], summary[f"compute-optimal uniform N={level}"],
                         summary[f"best-of-n N={level}"])
        at = interpolate(curve, per["tokens_mean"])
        mine = rows[f"compute-optimal per-prompt N={level}"]
        side.append({"level": int(level), "per_prompt": per, "uniform_best_option": uni, "uniform_best_of_n": bon,
                     "uniform_option": option_label(table["levels"][level]["uniform"]),
                     "best_of_n_at_equal_tokens": None if at is None else round(at, 4),
                     "paired": {name: paired(mine, rows[key]) for name, key in (
                         ("vs_best_of_n", f"best-of-n N={level}"), ("vs_uniform_option", f"compute-optimal uniform N={level}"))}})
    by_bin = {level: {name: {"count": c["count"], "accuracy": round(c["solved"] / c["count"], 4),
                             "mean_steps": round(statistics.mean(c["steps"]), 2), "choices": c["choices"]}
                      for name, c in cells.items()} for level, cells in bins.items()}
    return {"problems": "tiny-math held-out test split", "tasks": len(chosen), "first_task": args.first_task,
            "seed": args.seed, "sampling": MATH, "table": str(args.table or TABLE_PATH.relative_to(TABLE_PATH.parents[2])),
            "rows": summary, "side_by_side": side, "by_bin": by_bin}


def print_eval(result: dict) -> None:
    print(f"\n{result['tasks']} held-out test problems; accuracy (mean / median tokens per problem)")
    print(f"{'level':<7}{'per-prompt':<26}{'uniform best-of-N':<26}{'uniform best option':<44}{'best-of-N at equal tokens'}")
    for row in result["side_by_side"]:
        cell = lambda r: f"{r['accuracy']:.1%} ({r['tokens_mean']:.0f} / {r['tokens_median']:.0f})"
        at = row["best_of_n_at_equal_tokens"]
        print(f"N={row['level']:<5}{cell(row['per_prompt']):<26}{cell(row['uniform_best_of_n']):<26}"
              f"{(cell(row['uniform_best_option']) + ' ' + row['uniform_option']):<44}{'–' if at is None else f'{at:.1%}'}")
    for row in result["side_by_side"]:
        print(f"N={row['level']}: per-prompt minus best-of-N " + _paired(row["paired"]["vs_best_of_n"])
              + "; minus the uniform best option " + _paired(row["paired"]["vs_uniform_option"]))
    for level, cells in result["by_bin"].items():
        print(f"N={level} bins: " + "; ".join(f"{name}: {c['count']} problems, {c['accuracy']:.0%} right, mean steps "
                                             f"{c['mean_steps']}, ran {c['choices']}" for name, c in cells.items()))


def _paired(p: dict) -> str:
    se = "" if p["se"] is None else f" ± {p['se']:.1%}"
    return f"{p['diff']:+.1%}{se} (solved by one only: {p['only_a']} / {p['only_b']})"


def print_fit(table: dict) -> None:
    for level, row in table["levels"].items():
        alloc = ", ".join(f"{b['name']} (d <= {b['max_difficulty']:g}, {b['count']}): "
                          f"{option_label(row['allocation'][b['name']])}" for b in row["bins"])
        print(f"N={level}: budget {row['budget_tokens']} tokens; probe {row['probe']}; {alloc}; val accuracy "
              f"{row['val_accuracy']:.1%} at {row['val_tokens']} tokens; uniform {option_label(row['uniform'])} "
              f"{row['uniform_val_accuracy']:.1%} at {row['uniform_val_tokens']}; best-of-{level} "
              f"{row['best_of_n_val_accuracy']:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", nargs="?", default="eval", choices=("collect", "fit", "eval"))
    parser.add_argument("--split", default="val", choices=("val", "test"), help="collect: the split")
    parser.add_argument("--tasks", type=int, default=None, help="problems (collect 200, eval 100, --quick 40)")
    parser.add_argument("--first-task", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="/tmp/compute-optimal/val.jsonl", help="collect: the records (JSON lines)")
    parser.add_argument("--records", default="/tmp/compute-optimal/val.jsonl", help="fit: the records")
    parser.add_argument("--write", default=None, help="fit: write the table here")
    parser.add_argument("--table", default=None, help="eval: the table (default: the shipped one)")
    parser.add_argument("--levels", default="", help="fit / eval: budget levels (default: 2,4,8,16 / the table's)")
    parser.add_argument("--min-count", type=int, default=10, help="fit: fewest problems in a difficulty bin")
    parser.add_argument("--quick", action="store_true", help="eval: 40 problems")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    log = lambda message: print(message, file=sys.stderr, flush=True)
    if args.command == "fit":
        args.levels = args.levels or ",".join(map(str, compute_fit.LEVELS))
        table = fit_table(args)
        print(json.dumps(table)) if args.json else print_fit(table)
        return
    args.tasks = args.tasks or (200 if args.command == "collect" else 40 if args.quick else 100)
    lm = LM(load_model("tiny-math", progress=None))
    t0 = time.process_time()
    if args.command == "collect":
        collect(lm, args, log)
        log(f"done in {time.process_time() - t0:.0f} s CPU")
        return
    result = evaluate(lm, args, log) | {"cpu_s": round(time.process_time() - t0, 1)}
    print(json.dumps(result)) if args.json else print_eval(result)


if __name__ == "__main__":
    main()
