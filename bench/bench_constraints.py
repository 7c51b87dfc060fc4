"""Text constraints on SmolLM2-135M: particle filter (SMC steering) vs best-of-N at equal budget.

Issue 13's constraint family, after Lew et al. 2023 ("Sequential Monte Carlo steering of large
language models using probabilistic programs"): a hard constraint on open-ended text, either
- `forbid-letter` (no word with the letter `e`): the letter is masked while sampling, so every
  sample obeys it; a particle's weight is the probability mass the model kept on allowed tokens,
  so the filter moves particles away from continuations the model did not want to write; or
- `max-word-length` (no word longer than 5 letters): not masked; a particle with a long word gets
  weight 0, so the filter drops it at the next step and copies a survivor, while best-of-N can only
  pick among N finished samples.
Both methods get the same N, prompt, seed, token cap and step (`max_step_tokens` tokens or a line).
For each run it reports whether the chosen text satisfies the constraint and its mean log-probability
per token under the unconstrained model (temperature 1, one forward pass over prompt + text): a
method that satisfies the constraint by writing text the model finds unlikely scores low there.

    python bench/bench_constraints.py [--model smollm2-135m] [--n 4 8] [--seeds 2] [--tokens 32] [--json]
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
from decoding.scaling import rewards as rw

PROMPTS = (
    "Write one sentence about a dog in the park.",
    "Describe a rainy morning in two sentences.",
    "Write a short note to a friend about the weekend.",
    "Tell me about the moon in two sentences.",
)
CONSTRAINTS = {
    "forbid-letter e": ({"reward": "forbid-letter", "letter": "e", "hard": True}, rw.ForbiddenLetter("e")),
    "max-word-length 5": ({"reward": "max-word-length", "max_word_length": 5, "hard": True}, rw.MaxWordLength(5)),
}
METHODS = ("best-of-n", "particle-filter")


def mean_logprob(lm: LM, prompt_ids: list[int], token_ids: list[int]) -> float:
    """Mean log P(token) of the text under the model at temperature 1 (one forward pass)."""
    if not token_ids:
        return float("nan")
    ids = torch.tensor([prompt_ids + token_ids], device=lm.device)
    with torch.inference_mode():
        logits = lm.loaded.model(ids).logits[0, len(prompt_ids) - 1:-1].float()  # (T, V)
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(token_ids, device=lm.device)[:, None])
    return float(logprobs.mean())


def one_run(lm: LM, prompt: str, method: str, constraint: str, n: int, tokens: int, step_tokens: int,
            seed: int) -> dict:
    params, checker = CONSTRAINTS[constraint]
    params = dict(params, n=n, max_step_tokens=step_tokens)
    cpu = time.process_time()
    trace = run_to_trace(lm, prompt, strategy=method, params=params, max_new_tokens=tokens, seed=seed)
    cpu = time.process_time() - cpu
    ids = list(trace.finish.token_ids)
    text = lm.decode(ids)
    satisfied = checker.score(prompt, [text], True).value >= 1.0
    prompt_ids, _, _ = lm.encode_prompt(prompt)
    return {"satisfied": satisfied, "logprob": mean_logprob(lm, prompt_ids, ids), "text": text,
            "tokens_spent": stats(trace)["tokens_spent"], "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--n", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--step-tokens", type=int, default=6, help="a step ends after this many tokens (or a line)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print only the summary, as one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lm = LM(load_model(args.model, dtype=args.dtype, progress=None))
    summary = {"model": args.model, "n": args.n, "seeds": args.seeds, "tokens": args.tokens,
               "step_tokens": args.step_tokens, "prompts": len(PROMPTS), "table": {}, "examples": {}}
    for constraint in CONSTRAINTS:
        table = summary["table"][constraint] = {}
        for n in args.n:
            runs = {m: [] for m in METHODS}
            for prompt in PROMPTS:
                for seed in range(args.seeds):
                    for m in METHODS if seed % 2 == 0 else METHODS[::-1]:  # interleaved; the order alternates
                        runs[m].append(one_run(lm, prompt, m, constraint, n, args.tokens, args.step_tokens, seed))
            for m in METHODS:
                rows = runs[m]
                table.setdefault(m, {})[str(n)] = {
                    "satisfied": round(sum(r["satisfied"] for r in rows) / len(rows), 3),
                    "mean_logprob": round(statistics.mean(r["logprob"] for r in rows), 3),
                    "mean_logprob_satisfied": round(statistics.mean(r["logprob"] for r in rows if r["satisfied"]), 3)
                    if any(r["satisfied"] for r in rows) else None,
                    "tokens_spent": round(statistics.mean(r["tokens_spent"] for r in rows), 1),
                    "cpu_s": round(statistics.median(r["cpu_s"] for r in rows), 2),
                }
                summary["examples"].setdefault(constraint, {}).setdefault(m, rows[0]["text"])
            if not args.json:
                cells = "; ".join(f"{m}: {table[m][str(n)]['satisfied']:.0%} satisfy, mean logprob "
                                  f"{table[m][str(n)]['mean_logprob']}" for m in METHODS)
                print(f"{constraint}, N={n}: {cells}", flush=True)
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
