"""Engine overhead: greedy decoding through the engine (full per-token recording) vs model.generate.

Both run side by side in one process on the same model, prompt and dtype, interleaved over several
rounds (who goes first alternates) so that machine noise hits both alike; CPU time of this process
(`time.process_time`, steadier than wall-clock on a shared machine), one thread by default. The
engine records every step (entropy, the top alternatives, timing) and yields it as an event, which
is what the views need; `overhead` is the engine's CPU time per token over generate()'s, minus one
(the goal on the 4M-parameter models: <= 3%). The tiny KJV models end a verse at once on most
prompts, so both decode through <|endoftext|> (every run is `--tokens` long); the outputs must be
identical token for token.

    python bench/bench_engine.py [--models tiny-ar,tiny-ar-layerskip] [--tokens 128] [--rounds 7]
                                 [--threads 1] [--json]
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

PROMPTS = {"chat": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
           "kjv": "And God said unto Moses,"}


def measure(name: str, tokens: int, rounds: int, dtype: str) -> dict:
    lm = LM(load_model(name, dtype=dtype, progress=None))
    chat = lm.tokenizer.chat_template is not None
    prompt = PROMPTS["chat" if chat else "kjv"]
    lm.stop_ids = frozenset()  # through end-of-text: every run is `tokens` long
    ids, _, _ = lm.encode_prompt(prompt, chat=chat)
    input_ids = torch.tensor([ids], device=lm.device)

    def run_generate() -> list[int]:
        with torch.inference_mode():
            out = lm.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=tokens,
                                    do_sample=False, eos_token_id=[], pad_token_id=0)
        return out[0, len(ids):].tolist()

    def run_engine() -> list[int]:
        return run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=tokens, chat=chat).finish.token_ids

    run_generate(), run_engine()  # warm-up
    times: dict[str, list[float]] = {"generate": [], "engine": []}
    same = True
    for r in range(rounds):
        outs = {}
        for which, fn in (("generate", run_generate), ("engine", run_engine))[::1 if r % 2 == 0 else -1]:
            t0 = time.process_time()
            outs[which] = fn()
            times[which].append(time.process_time() - t0)
        same &= outs["generate"] == outs["engine"]
    ratios = [e / g for e, g in zip(times["engine"], times["generate"])]
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"model": name, "tokens": tokens, "generate_cpu_ms_per_token": round(1000 * med["generate"] / tokens, 3),
            "engine_cpu_ms_per_token": round(1000 * med["engine"] / tokens, 3),
            "overhead": round(statistics.median(ratios) - 1, 4), "overhead_min": round(min(ratios) - 1, 4),
            "overhead_max": round(max(ratios) - 1, 4), "identical": same}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="tiny-ar,tiny-ar-layerskip", help="comma-separated model names")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch default)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [measure(name.strip(), args.tokens, args.rounds, args.dtype) for name in args.models.split(",") if name.strip()]
    result = {"rounds": args.rounds, "threads": torch.get_num_threads(), "dtype": args.dtype, "rows": rows}
    if args.json:
        print(json.dumps(result))
        return
    print("| model | generate() CPU ms/token | engine CPU ms/token | engine overhead (median, min..max) | identical |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['generate_cpu_ms_per_token']} | {r['engine_cpu_ms_per_token']} | "
              f"{r['overhead']:+.1%} ({r['overhead_min']:+.1%}..{r['overhead_max']:+.1%}) | {r['identical']} |")


if __name__ == "__main__":
    main()
