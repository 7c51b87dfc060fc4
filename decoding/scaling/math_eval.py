"""Evaluate a trained `tiny-math` policy on held-out generated problems (decoding.scaling.math_tasks).

Figures, overall and per difficulty (number of steps):
    greedy      share of problems whose greedy solution ends in the right "The answer is N."
    pass@1      mean share of correct samples at temperature T (default 1), i.e. expected accuracy
                of one sample
    pass@k      oracle pass@k: share of problems with at least one correct sample among k
    step error  share of generated `a op b = c` lines whose arithmetic is wrong (samples at T)
    misread     share of generated step lines whose `a op b` is not the reference's (a wrong operand
                or operation, or `a` not the previous line's result) -- errors a checker of the
                arithmetic alone cannot see

    python -m decoding.scaling.math_eval --model assets/tiny-math --split test --count 200 --samples 16

Splits (`math_tasks.HELD_OUT_SPLITS`): `test` and `val` are written with the training lists' names
and items; `unseen` only with names and items no training problem has; `classic` is the first
tiny-math's test split (its 10 names and 10 items), to compare models across data versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from decoding.scaling.math_tasks import (_STEP, HELD_OUT_SPLITS, SPLIT_SIZES, make_splits, parse_answer, prompt,
                                         step_errors)

MAX_NEW_TOKENS = 160  # an 8-step solution is about 100 tokens


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], *, temperature: float, num_return: int, generator_seed: int,
             batch_rows: int = 64) -> list[list[str]]:
    """For each prompt, `num_return` completions (greedy when temperature == 0), as text."""
    tokenizer.padding_side = "left"
    per_batch = max(1, batch_rows // num_return)
    out: list[list[str]] = []
    torch.manual_seed(generator_seed)
    for start in range(0, len(prompts), per_batch):
        chunk = prompts[start : start + per_batch]
        enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        ids = model.generate(
            **enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None, top_k=None, top_p=None,
            num_return_sequences=num_return, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )  # (len(chunk) * num_return, T)
        texts = tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        out.extend(texts[i * num_return : (i + 1) * num_return] for i in range(len(chunk)))
    return out


def misreads(text: str, problem) -> tuple[int, int]:
    """(steps, steps whose `a op b` differs from the reference step in the same place, given the
    text's own previous result): the operation and operand must be the question's, `a` the chain's."""
    steps = wrong = 0
    previous = int(_STEP.match(problem.steps[0]).group(1))
    for i, line in enumerate(s for s in text.splitlines() if _STEP.match(s.strip())):
        a, op, b, c = _STEP.match(line.strip()).groups()
        ref = _STEP.match(problem.steps[i]) if i < len(problem.steps) else None
        steps += 1
        wrong += ref is None or (int(a), op, b) != (previous, ref.group(2), ref.group(3))
        previous = int(c)
    return steps, wrong


def evaluate_model(path: str, split: str = "test", count: int = 200, samples: int = 16, temperature: float = 1.0,
                   seed: int = 0, threads: int = 1) -> dict:
    from decoding.training.train import load_trained

    torch.set_num_threads(threads)
    model, tokenizer, _ = load_trained(path)
    problems = make_splits(sizes={**SPLIT_SIZES, "train": 0})[split][:count]  # held-out splits do not depend on train
    prompts = [prompt(p.question) for p in problems]
    t0 = time.time()
    greedy = generate(model, tokenizer, prompts, temperature=0.0, num_return=1, generator_seed=seed)
    sampled = generate(model, tokenizer, prompts, temperature=temperature, num_return=samples, generator_seed=seed)
    seconds = time.time() - t0
    by_diff: dict = defaultdict(lambda: defaultdict(float))
    for p, g, ss in zip(problems, greedy, sampled):
        correct = [parse_answer(s) == p.answer for s in ss]
        row = by_diff[p.difficulty]
        row["problems"] += 1
        row["greedy"] += parse_answer(g[0]) == p.answer
        row["pass@1"] += sum(correct) / len(correct)
        row[f"pass@{samples}"] += any(correct)
        for s in ss:
            n, wrong = step_errors(s)
            row["steps"] += n
            row["wrong_steps"] += wrong
        for s in ss:
            n, wrong = misreads(s, p)
            row["read_steps"] += n
            row["misread_steps"] += wrong
        n, wrong = step_errors(g[0])
        row["greedy_steps"] += n
        row["greedy_wrong_steps"] += wrong

    def figures(rows) -> dict:
        total = defaultdict(float)
        for r in rows:
            for k, v in r.items():
                total[k] += v
        n = total["problems"]
        return {"problems": int(n), "greedy": total["greedy"] / n, "pass@1": total["pass@1"] / n,
                f"pass@{samples}": total[f"pass@{samples}"] / n,
                "step_error": total["wrong_steps"] / max(1, total["steps"]),
                "greedy_step_error": total["greedy_wrong_steps"] / max(1, total["greedy_steps"]),
                "misread": total["misread_steps"] / max(1, total["read_steps"])}

    return {
        "model": path, "split": split, "count": len(problems), "samples": samples, "temperature": temperature,
        "seed": seed, "seconds": round(seconds, 1),
        "overall": figures(by_diff.values()),
        "by_difficulty": {d: figures([by_diff[d]]) for d in sorted(by_diff)},
        "samples_shown": [{"question": p.question, "reference": p.solution(), "greedy": g[0], "sample": ss[0]}
                          for p, g, ss in list(zip(problems, greedy, sampled))[:3]],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.scaling.math_eval",
                                     description="greedy accuracy, pass@1 at T=1 and oracle pass@k on held-out problems")
    parser.add_argument("--model", required=True, help="a trained model directory, e.g. assets/tiny-math")
    parser.add_argument("--split", choices=HELD_OUT_SPLITS, default="test",
                        help="val/test: the first tiny-math's held-out splits (10 names and items); open: names and "
                             "items of the training lists; unseen: names and items never in training")
    parser.add_argument("--count", type=int, default=200, help="problems (the first COUNT of the split)")
    parser.add_argument("--samples", type=int, default=16, help="samples per problem at temperature 1")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures (and a few samples) here")
    args = parser.parse_args(argv)
    report = evaluate_model(args.model, args.split, args.count, args.samples, args.temperature, args.seed,
                            args.threads)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
