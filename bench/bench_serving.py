"""Serving a stream of requests: one at a time, static batches and temporal fusion (Flover), side by side.

Requests with different prompts arrive as a Poisson stream (`--rate` a second) and are decoded greedily to
`--tokens` tokens each under each policy (`decoding/serving.py`), in interleaved rounds on the same model
and machine. Printed per policy (medians over rounds): throughput (generated tokens / seconds from the
first arrival to the last token), p50 and p95 time to first token and latency, forward passes, and the
ratios to one-at-a-time. Every policy must give every request the same tokens (greedy), and the run says
whether they did.

    python bench/bench_serving.py [--model smollm2-135m] [--requests 16] [--tokens 64] [--rate 2.0]
                                  [--batch-size 8] [--rounds 3] [--threads 1] [--quick] [--json]

`--quick`: 8 requests of 16 tokens, one round (a few minutes on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from decoding.models import load_model
from decoding.run import as_lm
from decoding.serving import POLICIES, poisson_arrivals, sample_requests, serve



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rate", type=float, default=2.0, help="requests arriving per second (Poisson)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="8 requests of 16 tokens, one round")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.tokens, args.rounds = 8, 16, 1
    torch.set_num_threads(args.threads)
    lm = as_lm(load_model(args.model, dtype="float32", progress=None))
    arrivals = poisson_arrivals(args.requests, args.rate, seed=0)
    requests = sample_requests(lm, args.requests, args.tokens, arrivals)
    serve(lm, requests[:2], "fusion", batch_size=2)  # warm-up: the first forwards pay one-off set-up
    results = {p: [] for p in POLICIES}
    tokens = {}
    for r in range(args.rounds):
        order = POLICIES[r % len(POLICIES):] + POLICIES[:r % len(POLICIES)]  # interleaved
        for policy in order:
            run = serve(lm, requests, policy, batch_size=args.batch_size)
            results[policy].append(run.summary())
            tokens.setdefault(policy, [s.token_ids for s in run.served])
    median = {p: {k: statistics.median(s[k] for s in results[p]) for k in results[p][0] if k != "policy"}
              for p in POLICIES}
    base = median["one-at-a-time"]["tokens_per_s"]
    out = {"model": args.model, "requests": args.requests, "tokens": args.tokens, "rate_per_s": args.rate,
           "batch_size": args.batch_size, "rounds": args.rounds, "threads": args.threads,
           "throughput": {p: median[p]["tokens_per_s"] for p in POLICIES},
           "throughput_ratio": {p: round(median[p]["tokens_per_s"] / base, 2) for p in POLICIES},
           "ttft_p50_s": {p: median[p]["ttft_p50_s"] for p in POLICIES},
           "ttft_p95_s": {p: median[p]["ttft_p95_s"] for p in POLICIES},
           "latency_p95_s": {p: median[p]["latency_p95_s"] for p in POLICIES},
           "forward_passes": {p: median[p]["forward_passes"] for p in POLICIES},
           "identical_tokens": all(tokens[p] == tokens["one-at-a-time"] for p in POLICIES)}
    if args.json:
        print(json.dumps(out))
        return
    print(f"{args.model}: {args.requests} requests of {args.tokens} tokens, Poisson {args.rate}/s, batch "
          f"{args.batch_size}, {args.rounds} interleaved rounds (medians), {args.threads} thread(s)")
    print(f"{'policy':<15}{'tokens/s':>10}{'x':>7}{'ttft p50':>10}{'ttft p95':>10}{'latency p95':>13}{'passes':>8}")
    for p in POLICIES:
        m = median[p]
        print(f"{p:<15}{m['tokens_per_s']:>10.1f}{out['throughput_ratio'][p]:>7.2f}{m['ttft_p50_s']:>10.2f}"
              f"{m['ttft_p95_s']:>10.2f}{m['latency_p95_s']:>13.2f}{m['forward_passes']:>8.0f}")
    print("same tokens under every policy:", out["identical_tokens"])


if __name__ == "__main__":
    main()
