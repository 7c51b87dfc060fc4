"""N visitors' runs at once through the step batcher vs one at a time (issue 44), in one process, same model.

    python bench/bench_batching.py --model smollm2-135m --runs 8 --tokens 32 --json

Each run is a thread calling `generate` (a mix: greedy, top-p, min-p, mirostat, with seeds), all started at once.
"one at a time": the runs in turn (today's compute slot). "batched": every run joins the model's batch
(decoding.batching). Prints tokens/s over the whole set, first-token p50/p95 (from the common start), and whether
every batched run's tokens equal its lone run's.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from decoding.batching import ServerLog, StepBatcher
from decoding.models import load_model
from decoding.run import generate
from decoding.serving import percentile, sample_prompts

MIX = [("greedy", {}), ("sample", {"top_p": 0.9}), ("sample", {"min_p": 0.1, "temperature": 0.8}), ("mirostat", {})]


def one(model, i: int, tokens: int, began: float, result: dict) -> None:
    strategy, params = MIX[i % len(MIX)]
    first, ids = None, []
    for event in generate(model, PROMPTS[i % len(PROMPTS)], strategy=strategy, params=params, max_new_tokens=tokens,
                          seed=i):
        if event.kind == "token" and first is None:
            first = time.perf_counter() - began
        if event.kind == "finish":
            ids = event.token_ids
    result[i] = (first, ids, time.perf_counter() - began)


def measure(loaded, runs: int, tokens: int, batched: bool) -> dict:
    result: dict = {}
    began = time.perf_counter()
    if batched:
        batcher = StepBatcher(loaded, log=ServerLog())

        def member(i):
            with batcher.join() as lm:
                one(lm, i, tokens, began, result)

        threads = [threading.Thread(target=member, args=(i,)) for i in range(runs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i in range(runs):
            one(loaded, i, tokens, began, result)
    seconds = time.perf_counter() - began
    firsts = sorted(r[0] for r in result.values())
    made = sum(len(r[1]) for r in result.values())
    return {"seconds": round(seconds, 2), "tokens": made, "tokens_per_s": round(made / seconds, 2),
            "first_token_p50_s": round(percentile(firsts, 50), 2), "first_token_p95_s": round(percentile(firsts, 95), 2),
            "ids": {i: r[1] for i, r in result.items()}}


PROMPTS: list[str] = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    loaded = load_model(args.model)
    from decoding.lm import LM
    PROMPTS[:] = sample_prompts(LM(loaded))
    one(loaded, 0, 2, time.perf_counter(), {})  # warm-up: the first call's one-off costs are in neither column
    alone = measure(loaded, args.runs, args.tokens, batched=False)
    batched = measure(loaded, args.runs, args.tokens, batched=True)
    same = alone.pop("ids") == batched.pop("ids")
    report = {"model": args.model, "runs": args.runs, "tokens": args.tokens, "one_at_a_time": alone,
              "batched": batched, "identical_tokens": same,
              "speedup": round(batched["tokens_per_s"] / alone["tokens_per_s"], 2)}
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
