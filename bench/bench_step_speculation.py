"""Step-level speculation on held-out tiny-math problems: the policy alone vs a drafter writing steps, and
the gates that decide which steps the policy rewrites (SpecReason's threshold, Arbitrage's router and oracle).

For each problem, interleaved (the order rotates per problem), one solution (N = 1) by:
    policy alone        best-of-n with n = 1: tiny-math samples every step itself
    spec, <drafter>     step-speculation: the drafter writes each step, the `arith-step` reward keeps
                        it (the policy reads it in one call) or the policy rewrites it
for each drafter in --drafters (`tiny-math-draft`, the 0.38M model trained for this, greedy (@0) and at
temperature 1, and `self`: tiny-math drafting for itself, where nothing can be saved). Reports accuracy, CPU time per problem
(`time.process_time`, medians and totals), the policy's and the drafter's model calls, the share of
steps kept and of solution tokens written by the drafter, and the CPU-time ratio alone / spec (above 1
= speculation is faster).

Gates (Maheswaran et al. 2025, "Arbitrage", arXiv 2512.05033), for each drafter in --gate-drafters, each
gate swept over its own threshold (the same problems, interleaved with the columns above):
    threshold accept=A  the draft's reward below A: the policy rewrites the step (SpecReason; A = 0 keeps
                        every draft, A = 1 rewrites every one)
    router p>R          Arbitrage's router (`decoding.scaling.arbitrage`, trained on validation problems)
                        says P(the policy's step would score higher) > R: the policy rewrites it
    oracle margin=M     Arbitrage's oracle: the policy writes every step too, and its step replaces the
                        draft when its reward is more than M above the draft's (an upper bound)
Compared at equal policy calls by sweeping, not by matching: each setting is a point (policy calls per
problem, accuracy), and the "gates" key lists each gate's points in order of calls. The oracle's calls are
those its choices cost (`routed_policy_calls`: what a router that made them would spend), its calls
spent (both steps written every time) beside them.

    python bench/bench_step_speculation.py [--tasks 40] [--drafters tiny-math-draft,self] [--json]
    python bench/bench_step_speculation.py --tasks 100 --drafters "" --gate-drafters tiny-math-draft@0,tiny-math-draft --json
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
from decoding.scaling.arbitrage import router_path

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
    parser.add_argument("--gate-drafters", default="tiny-math-draft@0",
                        help="drafters whose gates are swept (NAME@TEMPERATURE; empty: none)")
    parser.add_argument("--accepts", default="0,0.5,0.7,1", help="threshold gate: the `accept` values swept")
    parser.add_argument("--router-thresholds", default="0.02,0.1,0.3,0.5,0.7,0.9,0.98",
                        help="router gate: the `router_threshold` values swept")
    parser.add_argument("--margins", default="0,0.5", help="oracle gate: the `oracle_margin` values swept")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print only the summary, as one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from decoding.scaling.math_eval import MAX_NEW_TOKENS

    lm = LM(load_model("tiny-math", progress=None))
    drafters = [d.strip() for d in args.drafters.split(",") if d.strip()]
    columns = {"policy alone": ("best-of-n", {"n": 1})}

    def drafting(d: str) -> dict:  # NAME or NAME@T (the drafter's temperature; default 1)
        name, _, temperature = d.partition("@")
        return {"n": 1, "draft_model": "" if name == "self" else name, "draft_temperature": float(temperature or 1.0)}

    for d in drafters:
        columns[f"spec, {d}"] = ("step-speculation", drafting(d) | {"accept": args.accept})
    floats = lambda text: [float(v) for v in text.split(",") if v.strip()]
    gates: dict[str, list[str]] = {}  # "<gate>, <drafter>" -> its columns
    for d in [d.strip() for d in args.gate_drafters.split(",") if d.strip()]:
        for gate, field, values, label in (("threshold", "accept", floats(args.accepts), "accept={:g}"),
                                           ("router", "router_threshold", floats(args.router_thresholds), "p>{:g}"),
                                           ("oracle", "oracle_margin", floats(args.margins), "margin={:g}")):
            for value in values:
                name = f"{gate} {label.format(value)}, {d}"
                columns[name] = ("step-speculation", drafting(d) | {"gate": gate, field: value})
                gates.setdefault(f"{gate}, {d}", []).append(name)
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
                            "policy_calls": spec.get("routed_policy_calls", spec.get("policy_calls",
                                                                                     lm.forward_passes - before)),
                            "policy_calls_spent": spec.get("policy_calls", lm.forward_passes - before),
                            "draft_calls": spec.get("draft_calls", 0),
                            "kept": spec.get("accepted_steps", 0), "steps": spec.get("accepted_steps", 0)
                            + spec.get("rewritten_steps", 0),
                            "draft_tokens": spec.get("accepted_tokens", 0),
                            "tokens": len(trace.finish.token_ids)})
        if not args.json:
            print(f"problem {k + 1}/{len(problems)}: " + ", ".join(
                f"{c} {sum(r['ok'] for r in runs[c])}" for c in columns), file=sys.stderr, flush=True)
    summary = {"tasks": len(problems), "accept": args.accept, "sampling": COMMON, "methods": {}}
    router_file = router_path(lm.loaded)
    if gates and router_file is not None and router_file.exists():
        info = json.loads(router_file.read_text())["info"]
        summary["router"] = {k: info.get(k) for k in ("drafter", "draft_temperatures", "reward", "trained_on")} | {
            "held_out_auc": info["held_out"]["auc"]}
    alone = sum(r["cpu_s"] for r in runs["policy alone"])
    for c, rows in runs.items():
        steps = sum(r["steps"] for r in rows)
        summary["methods"][c] = {
            "accuracy": round(sum(r["ok"] for r in rows) / len(rows), 3),
            "cpu_s_median": round(statistics.median(r["cpu_s"] for r in rows), 4),
            "cpu_s_total": round(sum(r["cpu_s"] for r in rows), 2),
            "speedup_vs_alone": round(alone / sum(r["cpu_s"] for r in rows), 2),
            "policy_calls_per_problem": round(statistics.mean(r["policy_calls"] for r in rows), 1),
            "policy_calls_spent_per_problem": round(statistics.mean(r["policy_calls_spent"] for r in rows), 1),
            "draft_calls_per_problem": round(statistics.mean(r["draft_calls"] for r in rows), 1),
            "steps_kept": round(sum(r["kept"] for r in rows) / steps, 3) if steps else None,
            "tokens_from_drafter": round(sum(r["draft_tokens"] for r in rows) / max(1, sum(r["tokens"] for r in rows)), 3)
            if steps else None,
        }
    summary["gates"] = {g: sorted(({"setting": c.split(",")[0], "policy_calls_per_problem":
                                    summary["methods"][c]["policy_calls_per_problem"],
                                    "accuracy": summary["methods"][c]["accuracy"]} for c in names),
                                  key=lambda point: point["policy_calls_per_problem"])
                        for g, names in gates.items()}
    if args.json:
        print(json.dumps(summary))
    else:
        for c, m in summary["methods"].items():
            spent = (f" (spent {m['policy_calls_spent_per_problem']})"
                     if m["policy_calls_spent_per_problem"] != m["policy_calls_per_problem"] else "")
            print(f"{c}: accuracy {m['accuracy']:.0%}, CPU {m['cpu_s_total']} s ({m['speedup_vs_alone']}x alone), "
                  f"policy calls {m['policy_calls_per_problem']}{spent}, drafter calls {m['draft_calls_per_problem']}, "
                  f"steps kept {m['steps_kept']}, tokens from the drafter {m['tokens_from_drafter']}")
        for g, points in summary["gates"].items():
            print(f"{g}: " + "; ".join(f"{p['setting']} {p['accuracy']:.0%} at {p['policy_calls_per_problem']} calls"
                                       for p in points))


if __name__ == "__main__":
    main()
