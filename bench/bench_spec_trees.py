"""Speculative sampling: how each tree shape drafts and is accepted, side by side in one run.

Speculative sampling (temperature > 0) with a model drafter, for each tree shape, over several
seeds run in interleaved order: acceptance rate, mean accepted length, target forward passes per
generated token, and CPU seconds per token relative to plain sampling of the same target (medians
over seeds). The output distribution is the target's for every shape (tests/speculative/test_speculative_exact.py);
what differs is how much work a shape saves.

    python bench/bench_spec_trees.py [--target tiny-ar] [--draft tiny-ar-draft] [--temperature 1.0]
                                     [--tokens 48] [--seeds 6] [--json]
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

PROMPT = "And it came to pass, when the king"
TREES = {
    "chain": {"tree": "chain", "draft_length": 4},
    "static": {"tree": "static", "draft_length": 3, "width": 2, "node_budget": 16},
    "dynamic": {"tree": "dynamic", "draft_length": 4, "width": 3, "node_budget": 16},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="tiny-ar")
    parser.add_argument("--draft", default="tiny-ar-draft")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    torch.set_num_threads(1)
    lm = LM(load_model(args.target, progress=None))
    load_model(args.draft, progress=None)
    run_to_trace(lm, PROMPT, max_new_tokens=4, chat=False)  # warm-up
    cpu = {name: [] for name in ["plain", *TREES]}
    per_tree = {name: [] for name in TREES}
    for seed in range(args.seeds):
        order = ["plain", *TREES] if seed % 2 == 0 else [*reversed(TREES), "plain"]
        for name in order:
            params = {"temperature": args.temperature} if name == "plain" else (
                TREES[name] | {"drafter": "model", "draft_model": args.draft, "temperature": args.temperature})
            t0 = time.process_time()
            trace = run_to_trace(lm, PROMPT, strategy="sample" if name == "plain" else "speculative", params=params,
                                 max_new_tokens=args.tokens, seed=seed, chat=False)
            cpu[name].append((time.process_time() - t0) / len(trace.finish.token_ids))
            if name != "plain":
                per_tree[name].append(stats(trace))
    rows = []
    for name, runs in per_tree.items():
        ratios = [plain / spec for plain, spec in zip(cpu["plain"], cpu[name])]
        rows.append({
            "tree": name, **TREES[name],
            "acceptance_rate": round(statistics.median(s["acceptance_rate"] for s in runs), 3),
            "mean_accepted_length": round(statistics.median(s["mean_accepted_length"] for s in runs), 3),
            "target_passes_per_token": round(statistics.median(s["target_forward_passes_per_token"] for s in runs), 3),
            "speedup_cpu_median": round(statistics.median(ratios), 3),
        })
    result = {"target": args.target, "draft": args.draft, "temperature": args.temperature, "tokens": args.tokens,
              "seeds": args.seeds, "rows": rows}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.target} drafted by {args.draft}, temperature {args.temperature}, {args.tokens} tokens, "
          f"{args.seeds} seeds (medians)")
    print("| tree | acceptance | mean accepted | target passes / token | CPU speed vs plain sampling |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tree']} | {r['acceptance_rate']} | {r['mean_accepted_length']} | "
              f"{r['target_passes_per_token']} | {r['speedup_cpu_median']}x |")


if __name__ == "__main__":
    main()
