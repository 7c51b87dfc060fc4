"""N samples as one batch: this project's best-of-N vs transformers' `generate(num_return_sequences=N)`.

Issue 13's "particles as fast as the hardware allows": before, every row advanced one text step at a
time and a row that had finished its line was fed padding until every row had (the step barrier).
Methods that select nothing between steps (best-of-N, voting, `reward=none`) now run without it
(`ParticleBatch.extend_free`). For each prompt this runs, interleaved over rounds (the order
rotates), on one loaded model:

    ours     best-of-n with reward=none (N samples, no barrier), N = 1 and N = --n
    barrier  the same run with the old lockstep barrier (every row waits at each line's end)
    peer     model.generate(do_sample=True, num_return_sequences=N), same prompt ids, temperature,
             top-p and token cap

and reports medians of CPU time (this process, `time.process_time`), model calls, and the ratios:
`n_over_1` (the cost of N samples relative to one; the issue's goal is <= 3x at N = 16) and
`ours_over_peer` (time of the peer / time of ours: above 1 = ours is faster).

    python bench/bench_particles.py [--model smollm2-135m] [--n 16] [--tokens 32] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from decoding import run_to_trace
from decoding.events import stats
from decoding.lm import LM
from decoding.models import load_model
from decoding.scaling import run as scaling_run
from decoding.scaling.particle_batch import ParticleBatch

PROMPTS = {
    "paragraph": "Explain in one paragraph why the sky is blue.",
    "poem": "Write a short poem about the sea, one image per line.",
}
TEMPERATURE, TOP_P = 1.0, 1.0


class LockstepBatch(ParticleBatch):
    """The old behaviour, for the `barrier` column: every row waits at the end of each step."""

    def extend_free(self, rows, step_done, step_cap, budgets):
        return self.extend(rows, step_done, [min(step_cap, budgets.get(i, 0)) for i in range(self.n)])


def ours(lm: LM, prompt: str, n: int, tokens: int, seed: int, barrier: bool = False) -> dict:
    params = {"n": n, "reward": "none", "temperature": TEMPERATURE, "top_p": TOP_P}
    patch = mock.patch.object(scaling_run, "ParticleBatch", LockstepBatch) if barrier else mock.patch.object(
        scaling_run, "ParticleBatch", ParticleBatch)
    cpu = time.process_time()
    with patch:
        trace = run_to_trace(lm, prompt, strategy="best-of-n", params=params, max_new_tokens=tokens, seed=seed)
    cpu = time.process_time() - cpu
    texts = [p["text"] for p in trace.finish.extra["particles"]]
    return {"cpu_s": cpu, "calls": stats(trace)["forward_passes"], "texts": texts}


def peer(lm: LM, prompt: str, n: int, tokens: int, seed: int) -> dict:
    ids, _, _ = lm.encode_prompt(prompt)
    model, tok = lm.loaded.model, lm.tokenizer
    torch.manual_seed(seed)
    input_ids = torch.tensor([ids], device=lm.device)
    cpu = time.process_time()
    with torch.inference_mode():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=True,
                             temperature=TEMPERATURE, top_p=TOP_P, top_k=0, max_new_tokens=tokens,
                             num_return_sequences=n, pad_token_id=tok.pad_token_id or tok.eos_token_id)
    cpu = time.process_time() - cpu
    return {"cpu_s": cpu, "calls": out.shape[1] - len(ids), "texts": tok.batch_decode(out[:, len(ids):])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print only the summary, as one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lm = LM(load_model(args.model, dtype=args.dtype, progress=None))
    columns = {
        "ours_1": lambda p, s: ours(lm, p, 1, args.tokens, s),
        "ours_n": lambda p, s: ours(lm, p, args.n, args.tokens, s),
        "barrier_n": lambda p, s: ours(lm, p, args.n, args.tokens, s, barrier=True),
        "peer_1": lambda p, s: peer(lm, p, 1, args.tokens, s),
        "peer_n": lambda p, s: peer(lm, p, args.n, args.tokens, s),
    }
    for fn in columns.values():
        fn("Hello", 0)  # warm-up: one-off kernel set-up
    summary = {"model": args.model, "dtype": args.dtype, "n": args.n, "tokens": args.tokens,
               "rounds": args.rounds, "threads": args.threads, "prompts": {}}
    for name, prompt in PROMPTS.items():
        runs = {c: [] for c in columns}
        order = list(columns)
        for r in range(args.rounds):
            for c in order[r % len(order):] + order[:r % len(order)]:
                runs[c].append(columns[c](prompt, r))
        med = {c: statistics.median(x["cpu_s"] for x in runs[c]) for c in columns}
        calls = {c: statistics.median(x["calls"] for x in runs[c]) for c in columns}
        row = {
            "cpu_s": {c: round(v, 3) for c, v in med.items()},
            "calls": calls,
            "ours_n_over_1": round(med["ours_n"] / med["ours_1"], 2),
            "barrier_n_over_1": round(med["barrier_n"] / med["ours_1"], 2),
            "peer_n_over_1": round(med["peer_n"] / med["peer_1"], 2),
            "ours_over_peer_n": round(med["peer_n"] / med["ours_n"], 2),  # above 1: ours is faster
            "ours_over_barrier_n": round(med["barrier_n"] / med["ours_n"], 2),
            "same_texts_as_barrier": all(a["texts"] == b["texts"] for a, b in zip(runs["ours_n"], runs["barrier_n"])),
        }
        summary["prompts"][name] = row
        if not args.json:
            print(f"{name}: N={args.n} costs {row['ours_n_over_1']}x N=1 (with the barrier "
                  f"{row['barrier_n_over_1']}x; peer {row['peer_n_over_1']}x); ours / peer at N={args.n}: "
                  f"{row['ours_over_peer_n']}x; model calls ours {calls['ours_n']}, barrier {calls['barrier_n']}, "
                  f"peer {calls['peer_n']}; same samples with and without the barrier: "
                  f"{row['same_texts_as_barrier']}", flush=True)
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
