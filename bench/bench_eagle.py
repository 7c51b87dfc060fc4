"""The EAGLE drafter vs plain greedy decoding on open-ended prompts, side by side in one run.

For each open-ended prompt (none of them among the head's training prompts) runs plain greedy and
speculative greedy with the shipped EAGLE head (a chain and dynamic trees) in interleaved rounds,
rotating the order, and reports per configuration: the median over prompts x rounds of the
speed-up in CPU time (`time.process_time`, robust on a shared machine) and in wall-clock, tokens
per round (accepted + the target's own), acceptance, target passes per token, the share of a
round spent drafting, and whether every output equals plain greedy (greedy verification: it must).

With `--heads NAME=FOLDER,...` every configuration runs once per head (e.g. the shipped head against an
FSPAD-trained one, `python -m decoding.training.eagle train --fspad`), side by side in the same rounds, and
each row also gives the acceptance by depth: at depth d, the share of drafted tokens at depth d that were
accepted, among rounds whose tokens above d were all accepted (chains: the path's own; trees: the best path).

    python bench/bench_eagle.py [--tokens 64] [--rounds 2] [--threads 1] [--heads NAME=FOLDER,...] [--json]
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
from decoding.speculative import eagle
from decoding.training.eagle_prompts import HELD_OUT

PROMPTS = list(HELD_OUT) + ["What makes a good friend?", "Write a haiku about autumn rain and explain it."]
CONFIGS = {
    "eagle chain 3": {"drafter": "eagle", "tree": "chain", "draft_length": 3},
    "eagle chain 5": {"drafter": "eagle", "tree": "chain", "draft_length": 5},
    "eagle dynamic 4x2/8": {"drafter": "eagle", "tree": "dynamic", "draft_length": 4, "width": 2, "node_budget": 8},
    "eagle dynamic 5x4/16": {"drafter": "eagle", "tree": "dynamic", "draft_length": 5, "width": 4, "node_budget": 16},
}


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names of CONFIGS")
    parser.add_argument("--heads", default="", help="NAME=FOLDER,... heads to compare (default: the shipped one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lm = LM(load_model(args.model, dtype=args.dtype, progress=None))
    heads = dict(h.split("=", 1) for h in args.heads.split(",") if h) or {"shipped": str(eagle.HEADS[lm.name])}
    configs, head_of = {}, {}
    for head in heads:
        for name in args.configs.split(","):
            label = name if len(heads) == 1 else f"{head}: {name}"
            configs[label], head_of[label] = CONFIGS[name], heads[head]
    eagle.HEADS[lm.name] = Path(next(iter(heads.values())))
    run_to_trace(lm, PROMPTS[0], max_new_tokens=8)  # warm-up
    run_to_trace(lm, PROMPTS[0], strategy="speculative", params=next(iter(configs.values())), max_new_tokens=8)
    names = ["plain"] + list(configs)
    samples = {name: {"cpu": [], "wall": [], "same": True, "rounds": 0, "tokens": 0, "accepted": 0, "judged": 0,
                      "target": 0, "first": 0, "nodes": 0, "draft_s": 0.0, "verify_s": 0.0,
                      "reached": [0] * 8, "kept": [0] * 8} for name in configs}
    for prompt in PROMPTS:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
            results = {}
            for name in order:
                if name == "plain":
                    results[name] = timed(lambda prompt=prompt: run_to_trace(lm, prompt, max_new_tokens=args.tokens))
                else:
                    eagle.HEADS[lm.name] = Path(head_of[name])
                    results[name] = timed(lambda prompt=prompt, name=name: run_to_trace(
                        lm, prompt, strategy="speculative", params=configs[name], max_new_tokens=args.tokens))
            plain, plain_cpu, plain_wall = results["plain"]
            for name in configs:
                trace, cpu, wall = results[name]
                s = samples[name]
                s["cpu"].append(plain_cpu / cpu * len(trace.finish.token_ids) / len(plain.finish.token_ids))
                s["wall"].append(plain_wall / wall * len(trace.finish.token_ids) / len(plain.finish.token_ids))
                s["same"] &= trace.finish.token_ids == plain.finish.token_ids
                rounds = trace.of_kind("spec_round")
                s["rounds"] += len(rounds)
                s["tokens"] += len(trace.finish.token_ids)
                s["accepted"] += sum(len(e.accepted_path) for e in rounds)
                s["judged"] += sum(1 for e in rounds for n in e.nodes if n["status"] != "unvisited")
                s["first"] += sum(1 for e in rounds if e.accepted_path)
                s["nodes"] += sum(len(e.nodes) for e in rounds)
                s["target"] += sum(e.target_forward_passes for e in rounds)
                s["draft_s"] += sum(e.draft_time_s for e in rounds)
                s["verify_s"] += sum(e.verify_time_s for e in rounds)
                for e in rounds:  # acceptance by depth: depth d is judged when all above it were accepted
                    depths = max((e.nodes[i].get("depth", 0) for i in range(len(e.nodes))), default=0)
                    kept = len(e.accepted_path)
                    for d in range(min(depths, 8)):
                        if kept >= d:
                            s["reached"][d] += 1
                            s["kept"][d] += kept > d
    rows = []
    for name, s in samples.items():
        rows.append({
            "config": name, "params": configs[name], "same_output_as_plain": s["same"],
            "speedup_cpu_median": round(statistics.median(s["cpu"]), 3),
            "speedup_wall_median": round(statistics.median(s["wall"]), 3),
            "speedup_cpu_min": round(min(s["cpu"]), 3), "speedup_cpu_max": round(max(s["cpu"]), 3),
            "tokens_per_round": round(s["tokens"] / s["rounds"], 3),
            "mean_accepted_per_round": round(s["accepted"] / s["rounds"], 3),
            "acceptance_rate": round(s["accepted"] / s["judged"], 3) if s["judged"] else None,
            "first_token_accepted": round(s["first"] / s["rounds"], 3),
            "draft_nodes_per_round": round(s["nodes"] / s["rounds"], 2),
            "target_passes_per_token": round(s["target"] / s["tokens"], 3),
            "draft_share_of_round": round(s["draft_s"] / (s["draft_s"] + s["verify_s"]), 3),
            "head": head_of[name],
            "acceptance_by_depth": [round(k / r, 3) for k, r in zip(s["kept"], s["reached"]) if r],
        })
    result = {"model": args.model, "dtype": args.dtype, "threads": args.threads, "tokens": args.tokens,
              "rounds": args.rounds, "prompts": PROMPTS, "rows": rows}
    if args.json:
        print(json.dumps(result))
        return
    print("| config | CPU-time speed-up (median, min-max) | wall-clock speed-up | tokens / round | acceptance | "
          "acceptance by depth | target passes / token | drafting share | same output |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['config']} | {row['speedup_cpu_median']}x ({row['speedup_cpu_min']}-{row['speedup_cpu_max']}) | "
              f"{row['speedup_wall_median']}x | {row['tokens_per_round']} | {row['acceptance_rate']} | "
              f"{', '.join(map(str, row['acceptance_by_depth']))} | "
              f"{row['target_passes_per_token']} | {row['draft_share_of_round']} | {row['same_output_as_plain']} |")


if __name__ == "__main__":
    main()
