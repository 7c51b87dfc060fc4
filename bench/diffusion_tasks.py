"""Diffusion samplers on held-out tiny-parallel problems, per task (`bench_diffusion.py --model tiny-parallel`).

Per task and sampler: accuracy (the task's checker), NFE (sequential model calls; FreeDave's
batched verification call counts one), NFE / length, tokens committed per call, and seconds
per answer (CPU time of the process, median per prompt over the rounds; configurations are
interleaved per prompt). The one-token-per-step run is `steps=length`; the causal twin's
greedy run (`tiny-parallel-ar`) is the left-to-right reference: its NFE is one call per token
it wrote. Tasks are ParallelBench-style (decoding/diffusion/parallel_tasks.py): `determined`
ones have one right answer; on the others, tokens decoded in the same step are drawn
independently and may clash, which is the effect to watch as tokens per step rise.

    python bench/bench_diffusion.py --model tiny-parallel [--quick] [--json] [--per-task 20]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from decoding import run_to_trace
from decoding.diffusion.parallel_tasks import SPLIT_SIZES, TASKS, make_splits
from decoding.events import DiffusionStep
from decoding.run import as_lm

ONE_PER_STEP = "steps=length"
TWIN = "causal twin greedy"


def task_configs(length: int) -> dict[str, dict]:
    """Sampler name -> diffusion params; every run greedy (temperature 0) and deterministic."""
    return {
        ONE_PER_STEP: {"steps": length},
        "fixed 2/step": {"steps": length // 2},
        "fixed 4/step": {"steps": length // 4},
        "fixed 8/step": {"steps": length // 8},
        "threshold 0.9": {"threshold": 0.9},
        "threshold 0.7": {"threshold": 0.7},
        "threshold 0.5": {"threshold": 0.5},
        "localleap 0.9/0.5 r4": {"sampler": "localleap", "anchor_threshold": 0.9, "threshold": 0.5, "radius": 4},
        "localleap 0.9/0.5 r4 linear": {"sampler": "localleap", "anchor_threshold": 0.9, "threshold": 0.5, "radius": 4,
                                        "decay": "linear"},
        "freedave d4": {"sampler": "freedave", "steps": length, "draft_steps": 4},
        "freedave d8": {"sampler": "freedave", "steps": length, "draft_steps": 8},
        "learn2pd 0.9": {"sampler": "learn2pd", "filter_threshold": 0.9},
        "steps=length + delayed cache": {"steps": length, "cache": "delayed", "refresh_interval": 4},
        "threshold 0.9 + delayed cache": {"threshold": 0.9, "cache": "delayed", "refresh_interval": 4},
        "threshold 0.9 + greedy cache": {"threshold": 0.9, "cache": "greedy", "refresh_interval": 4},
        "threshold 0.9 + prefill cache": {"threshold": 0.9, "cache": "prefill"},
    }


def _nfe(trace) -> int:
    return [e for e in trace.events if isinstance(e, DiffusionStep)][-1].nfe


def run_tasks(model: str, twin: str | None, per_task: int, length: int, rounds: int, say=print,
              only: tuple[str, ...] = ()) -> dict:
    """`only`: run only the samplers whose name contains one of these words (one-per-step always runs)."""
    lm = as_lm(model)
    ar = as_lm(twin) if twin else None
    table = {name: p for name, p in task_configs(length).items()
             if name == ONE_PER_STEP or not only or any(word in name for word in only)}
    # the first `per_task` problems per task of the held-out test split (the same ones the tab's picker shows)
    problems = make_splits(sizes={**SPLIT_SIZES, "train": 0, "test": per_task})["test"]
    run_to_trace(lm, problems[0].prompt, strategy="diffusion", params={"steps": 4}, max_new_tokens=8)  # warm-up
    rows: dict = {task: {name: {"right": [], "nfe": [], "tps": [], "seconds": []} for name in [*table, TWIN]}
                  for task in TASKS}
    canvases_match = {name: 0 for name in table if name.startswith("freedave")}
    for i, problem in enumerate(problems):
        timings = {name: [] for name in table}
        answers = {}
        for r in range(rounds):
            for name in (table if r % 2 == 0 else list(reversed(table))):
                t0 = time.process_time()
                trace = run_to_trace(lm, problem.prompt, strategy="diffusion", params=table[name],
                                     max_new_tokens=length, seed=0)
                timings[name].append(time.process_time() - t0)
                if r == 0:
                    ids = trace.finish.token_ids
                    answers[name] = ids
                    cell = rows[problem.task][name]
                    cell["right"].append(TASKS[problem.task].check(problem.prompt, lm.decode(ids)))
                    cell["nfe"].append(_nfe(trace))
                    cell["tps"].append(length / _nfe(trace))
        for name in table:
            rows[problem.task][name]["seconds"].append(statistics.median(timings[name]))
        for name in canvases_match:
            canvases_match[name] += answers[name] == answers[ONE_PER_STEP]
        if ar is not None:
            t0 = time.process_time()
            trace = run_to_trace(ar, problem.prompt, strategy="greedy", max_new_tokens=length, seed=0)
            cell = rows[problem.task][TWIN]
            cell["seconds"].append(time.process_time() - t0)
            cell["right"].append(TASKS[problem.task].check(problem.prompt, ar.decode(trace.finish.token_ids)))
            cell["nfe"].append(len(trace.finish.token_ids))
            cell["tps"].append(1.0)
        if (i + 1) % 20 == 0:
            say(f"{i + 1} of {len(problems)} problems")
    out = {"model": model, "twin": twin, "length": length, "problems_per_task": per_task, "rounds": rounds,
           "freedave_identical_canvas": {k: v / len(problems) for k, v in canvases_match.items()}, "tasks": {}}
    for task, by_name in rows.items():
        samplers = {}
        for name, cell in by_name.items():
            if not cell["right"]:
                continue
            samplers[name] = {
                "accuracy": sum(cell["right"]) / len(cell["right"]),
                "nfe": statistics.mean(cell["nfe"]), "nfe_fraction": statistics.mean(cell["nfe"]) / length,
                "tokens_per_step": statistics.mean(cell["tps"]),
                "seconds": statistics.mean(cell["seconds"]),
            }
        out["tasks"][task] = {"determined": TASKS[task].determined, "samplers": samplers}
    return out


def add_twin(result: dict, twin: str, say=print) -> dict:
    """Fill in the causal twin's rows of an earlier result (its problems, its length)."""
    ar = as_lm(twin)
    per_task, length = result["problems_per_task"], result["length"]
    problems = make_splits(sizes={**SPLIT_SIZES, "train": 0, "test": per_task})["test"]
    cells = {task: {"right": [], "nfe": [], "seconds": []} for task in TASKS}
    for problem in problems:
        t0 = time.process_time()
        trace = run_to_trace(ar, problem.prompt, strategy="greedy", max_new_tokens=length, seed=0)
        cell = cells[problem.task]
        cell["seconds"].append(time.process_time() - t0)
        cell["right"].append(TASKS[problem.task].check(problem.prompt, ar.decode(trace.finish.token_ids)))
        cell["nfe"].append(len(trace.finish.token_ids))
    for task, cell in cells.items():
        result["tasks"][task]["samplers"][TWIN] = {
            "accuracy": sum(cell["right"]) / len(cell["right"]), "nfe": statistics.mean(cell["nfe"]),
            "nfe_fraction": statistics.mean(cell["nfe"]) / length, "tokens_per_step": 1.0,
            "seconds": statistics.mean(cell["seconds"])}
    result["twin"] = twin
    return result


def goals(result: dict) -> dict:
    """The issue's goals, measured: see the README's Diffusion benchmark."""
    determined = [t for t, r in result["tasks"].items() if r["determined"]]
    best = {}
    for name in result["tasks"][determined[0]]["samplers"]:
        if name in (ONE_PER_STEP, TWIN) or name.startswith("freedave"):
            continue
        drops = [result["tasks"][t]["samplers"][ONE_PER_STEP]["accuracy"] - result["tasks"][t]["samplers"][name]["accuracy"]
                 for t in determined]
        fractions = [result["tasks"][t]["samplers"][name]["nfe_fraction"] for t in determined]
        best[name] = {"max_accuracy_drop": max(drops), "mean_nfe_fraction": statistics.mean(fractions)}
    freedave = {name: statistics.mean(r["samplers"][name]["nfe"] / r["samplers"][ONE_PER_STEP]["nfe"]
                                      for r in result["tasks"].values())
                for name in result["tasks"][determined[0]]["samplers"] if name.startswith("freedave")}
    return {"confidence_rules_on_determined_tasks": best, "freedave_calls_vs_sequential": freedave}


def print_table(result: dict) -> None:
    names = list(next(iter(result["tasks"].values()))["samplers"])
    print(f"{result['model']} (canvas {result['length']}), {result['problems_per_task']} held-out problems per task; "
          "accuracy % / NFE per answer\n")
    print("| sampler | " + " | ".join(f"{t}{'' if r['determined'] else '*'}" for t, r in result["tasks"].items()) + " |")
    print("|---|" + "---|" * len(result["tasks"]))
    for name in names:
        cells = [f"{100 * r['samplers'][name]['accuracy']:.0f} / {r['samplers'][name]['nfe']:.1f}"
                 for r in result["tasks"].values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\n* dependent task (many right answers whose tokens depend on each other)")


def main(args) -> None:
    torch.set_num_threads(args.threads)
    per_task = args.per_task or (20 if args.quick else 50)
    rounds = 1 if args.quick else args.rounds
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    if args.merge_twin:  # an earlier result (--out) gets the causal twin's rows
        with open(args.merge_twin) as f:
            result = add_twin(json.load(f), args.twin, say)
    else:
        result = run_tasks(args.model, args.twin, per_task, args.length, rounds, say, tuple(args.only))
    result["goals"] = goals(result)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
        print(json.dumps(result["goals"], indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
