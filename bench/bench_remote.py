"""Playground tokens/s through a local llama.cpp server vs in-process transformers, same model and prompt.

Both sides run the Playground's path (`generate`, greedy, every token recorded with its top-k) on
SmolLM2-135M-Instruct from the same GGUF file: llama.cpp runs it quantised (Q4_1) behind its
OpenAI-compatible server on loopback; transformers dequantises it to float32 in this process. The
same thread count for both. Rounds alternate which side goes first so machine noise hits both alike.
A third column is the server's own speed without log-probabilities (one plain completion): what
the streamed top-k costs on top of decoding.

    python bench/bench_remote.py [--tokens 64] [--rounds 3] [--threads 1] [--json]
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
from decoding.events import stats
from decoding.lm import LM
from decoding.models import load_model
from decoding.remote.client import Client
from decoding.remote.llama_server import ALIAS, running
from decoding.remote.source import ALLOW_ENV, ENGINES_ENV
from decoding.remote.strategies import NEUTRAL

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def tokens_per_s(model, prompt: str, tokens: int, chat: bool) -> tuple[float, int]:
    trace = run_to_trace(model, prompt, strategy="greedy", max_new_tokens=tokens, chat=chat)
    s = stats(trace)
    return s["tokens_per_s"], s["num_tokens"]


def plain_tokens_per_s(base_url: str, prompt: str, tokens: int) -> float:
    """The server alone: one non-streamed greedy completion, no log-probabilities."""
    started = time.perf_counter()
    reply = Client(base_url).complete(NEUTRAL | {"model": ALIAS, "prompt": prompt, "max_tokens": tokens,
                                                 "temperature": 0.0})
    return reply["usage"]["completion_tokens"] / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads and llama.cpp threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    os.environ[ALLOW_ENV] = "1"
    torch.set_num_threads(args.threads)
    lm = LM(load_model("smollm2-135m", dtype="float32", progress=None))
    _, templated, _ = lm.encode_prompt(PROMPT)  # the remote side gets the same text, template included
    rows = []
    with running(threads=args.threads) as base_url:
        os.environ[ENGINES_ENV] = base_url  # the one engine this process may reach
        source = f"openai:{base_url}#{ALIAS}"
        tokens_per_s(lm, PROMPT, 4, True), tokens_per_s(source, templated, 4, False)  # warm-up
        for r in range(args.rounds):
            sides = [("in_process", lambda: tokens_per_s(lm, PROMPT, args.tokens, True)),
                     ("remote", lambda: tokens_per_s(source, templated, args.tokens, False))]
            row = {"round": r}
            for name, run in sides if r % 2 == 0 else sides[::-1]:
                row[f"{name}_tokens_per_s"], row[f"{name}_tokens"] = run()
            row["server_plain_tokens_per_s"] = round(plain_tokens_per_s(base_url, templated, args.tokens), 3)
            rows.append(row)
            if not args.json:
                print(json.dumps(row))
    summary = {key: statistics.median(row[key] for row in rows)
               for key in ("in_process_tokens_per_s", "remote_tokens_per_s", "server_plain_tokens_per_s")}
    summary |= {"remote_over_in_process": round(summary["remote_tokens_per_s"] / summary["in_process_tokens_per_s"], 3),
                "tokens": args.tokens, "rounds": args.rounds, "threads": args.threads,
                "model": "SmolLM2-135M-Instruct (llama.cpp: Q4_1 GGUF; transformers: the same GGUF in float32)"}
    if args.json:
        print(json.dumps({"rounds": rows, "median": summary}))
    else:
        print(f"median tokens/s over {args.rounds} rounds, {args.tokens} tokens, {args.threads} thread(s): in-process "
              f"{summary['in_process_tokens_per_s']:.1f}, through llama.cpp's server {summary['remote_tokens_per_s']:.1f} "
              f"({summary['remote_over_in_process']:.2f}x); the server alone without log-probs "
              f"{summary['server_plain_tokens_per_s']:.1f}")


if __name__ == "__main__":
    main()
