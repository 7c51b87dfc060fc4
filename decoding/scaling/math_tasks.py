"""Generated multi-step arithmetic word problems for `tiny-math`, the scaling lab's own policy.

A problem is a short story with a running count; the solution is one `a op b = c` line per
operation, then "The answer is N.":

    Mia has 37 shells. She gets 45 more, gives away 18, multiplies them by 3, then gets 20 more. How many shells now?
    37 + 45 = 82
    82 - 18 = 64
    64 * 3 = 192
    192 + 20 = 212
    The answer is 212.

Glossary
    step        one solution line `a op b = c`; `a` is the previous result (or the start count).
    difficulty  the number of steps, 3 to 8.
    noise       training documents only: each step's result is replaced, with probability
                `NOISE_RATE`, by a nearby wrong value (one digit off by one, as a slipped carry
                would make); the following steps continue consistently from the written value.
                So the policy learns step-local, stochastic slips, not a systematic bug, and a
                step checker sees exactly one wrong line per slip.
    held out    val and test problems; their question texts never occur in the training split.

Everything follows from one seed, so the same command writes the same files:

    python -m decoding.scaling.math_tasks --out /tmp/tiny-math/data     # train.txt, val.txt, {train,val,test}.jsonl
    python -m decoding.scaling.math_tasks eval --model assets/tiny-math --split test --count 200 --samples 16
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

SEED = 0  # the one seed every split is derived from
NOISE_RATE = 0.05  # probability that a training step's result is a nearby wrong value
MIN_STEPS, MAX_STEPS = 3, 8
MAX_VALUE = 999  # every running count stays in [0, MAX_VALUE]
MAX_FACTOR_BASE = 99  # multiply only two-digit counts (by 2..9): three-digit products are out of reach
SPLIT_SIZES = {"train": 120_000, "val": 500, "test": 500}
ANSWER_PREFIX = "The answer is "

_NAMES = [("Mia", "She"), ("Tom", "He"), ("Anna", "She"), ("Sam", "He"), ("Lily", "She"), ("Ben", "He"),
          ("Zoe", "She"), ("Leo", "He"), ("Emma", "She"), ("Max", "He")]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "shells", "coins", "stamps"]
_STEP = re.compile(r"^(\d+) ([+\-*]) (\d+) = (-?\d+)$")
_ANSWER = re.compile(r"The answer is (-?\d+)\.")


@dataclass(frozen=True)
class Problem:
    question: str  # the story, one line
    steps: tuple[str, ...]  # the reference solution, one `a op b = c` line per operation
    answer: int  # the value the (clean) reference reaches
    difficulty: int  # number of steps

    def solution(self) -> str:
        """The lines the model writes after the question (no trailing newline)."""
        return "\n".join(self.steps) + f"\n{ANSWER_PREFIX}{self.answer}."

    def text(self) -> str:
        return f"{prompt(self.question)}{self.solution()}"


def prompt(question: str) -> str:
    """What the model is given: the question line and a newline; it writes the steps."""
    return question + "\n"


def apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _operation(rng: random.Random, value: int) -> tuple[str, int]:
    """One feasible (op, operand) keeping the count in [0, MAX_VALUE]."""
    options = []
    if value + 10 <= MAX_VALUE:
        options.append("+")
    if value >= 10:
        options.append("-")
    if 2 <= value <= MAX_FACTOR_BASE:
        options.append("*")
    op = rng.choice(options)
    if op == "+":
        return op, rng.randint(2, min(199, MAX_VALUE - value))
    if op == "-":
        return op, rng.randint(2, min(199, value))
    return op, rng.randint(2, 9)


def _phrase(op: str, b: int) -> str:
    return {"+": f"gets {b} more", "-": f"gives away {b}", "*": f"multiplies them by {b}"}[op]


_QUESTION = re.compile(r"^\w+ has (\d+) [a-z]+\. (?:He|She) (.+)\. How many [a-z]+ now\?$")
_PHRASES = {re.compile(r"^gets (\d+) more$"): "+", re.compile(r"^gives away (\d+)$"): "-",
            re.compile(r"^multiplies them by (\d+)$"): "*"}


def parse_question(question: str) -> tuple[int, list[tuple[str, int]]] | None:
    """(start value, [(op, operand)]) of a question in tiny-math's form (the inverse of
    `make_problem`'s story), or None for any other text."""
    match = _QUESTION.match(question.strip())
    if not match:
        return None
    story = match.group(2)
    head, _, last = story.rpartition(", then ")
    ops = []
    for phrase in [*(head.split(", ") if head else []), last]:
        found = [(op, int(m.group(1))) for pattern, op in _PHRASES.items() if (m := pattern.match(phrase))]
        if not found:
            return None
        ops.append(found[0])
    return int(match.group(1)), ops


def slip(value: int, rng: random.Random) -> int:
    """A nearby wrong value: one digit of `value` off by one (a slipped carry), never negative."""
    digits = len(str(value))
    while True:
        wrong = value + rng.choice((-1, 1)) * 10 ** rng.randrange(digits)
        if wrong >= 0 and wrong != value:
            return wrong


def make_problem(rng: random.Random) -> tuple[Problem, list[tuple[str, int]], int]:
    """A clean problem plus its (op, operand) list and start value (to replay with noise)."""
    name, pronoun = rng.choice(_NAMES)
    item = rng.choice(_ITEMS)
    n = rng.randint(MIN_STEPS, MAX_STEPS)
    start = value = rng.randint(2, 150)
    ops, steps = [], []
    for _ in range(n):
        op, b = _operation(rng, value)
        ops.append((op, b))
        new = apply(value, op, b)
        steps.append(f"{value} {op} {b} = {new}")
        value = new
    phrases = [_phrase(op, b) for op, b in ops]
    story = ", ".join(phrases[:-1]) + f", then {phrases[-1]}"
    question = f"{name} has {start} {item}. {pronoun} {story}. How many {item} now?"
    return Problem(question, tuple(steps), value, n), ops, start


def noisy_solution(ops: list[tuple[str, int]], start: int, rng: random.Random, rate: float = NOISE_RATE) -> str:
    """The solution with each result slipped w.p. `rate`; later steps continue from what was written.

    A draw whose chain would go negative (a slip down, then a subtraction) is drawn again."""
    while True:
        lines, value = [], start
        for op, b in ops:
            result = apply(value, op, b)
            if rng.random() < rate:
                result = slip(result, rng)
            lines.append(f"{value} {op} {b} = {result}")
            value = result
            if value < 0:
                break
        if value >= 0:
            return "\n".join(lines) + f"\n{ANSWER_PREFIX}{value}."


def make_splits(seed: int = SEED, sizes: dict = SPLIT_SIZES, noise: float = NOISE_RATE) -> dict:
    """{"train": [(Problem, noisy text)], "val": [Problem], "test": [Problem]}, deterministic.

    Held-out problems are drawn first; a training candidate whose question text equals a held-out
    one (or an earlier training one) is skipped, so held-out questions never occur in training.
    """
    rng = random.Random(seed)
    noise_rng = random.Random(seed + 1)
    seen: set[str] = set()
    out: dict = {"val": [], "test": [], "train": []}
    for split in ("val", "test", "train"):
        while len(out[split]) < sizes[split]:
            problem, ops, start = make_problem(rng)
            if problem.question in seen:
                continue
            seen.add(problem.question)
            if split == "train":
                out[split].append((problem, prompt(problem.question) + noisy_solution(ops, start, noise_rng, noise)))
            else:
                out[split].append(problem)
    return out


def write_splits(out: Path, seed: int = SEED, sizes: dict = SPLIT_SIZES) -> dict:
    """train.txt / val.txt (documents separated by a blank line, for `decoding.training.train --docs blocks`)
    and {train,val,test}.jsonl (question, reference steps, answer, difficulty)."""
    splits = make_splits(seed, sizes)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.txt").write_text("\n\n".join(text for _, text in splits["train"]) + "\n")
    (out / "val.txt").write_text("\n\n".join(p.text() for p in splits["val"]) + "\n")
    for split in ("train", "val", "test"):
        rows = [p for p, _ in splits[split]] if split == "train" else splits[split]
        with open(out / f"{split}.jsonl", "w") as f:
            for i, p in enumerate(rows):
                f.write(json.dumps({"id": i, **asdict(p)}) + "\n")
    return {split: len(rows) for split, rows in splits.items()}


# ---------------------------------------------------------------- grading


def parse_answer(text: str) -> int | None:
    match = _ANSWER.search(text)
    return int(match.group(1)) if match else None


def step_errors(text: str) -> tuple[int, int]:
    """(steps, steps whose arithmetic is wrong) among the `a op b = c` lines of `text`."""
    steps = wrong = 0
    for line in text.splitlines():
        match = _STEP.match(line.strip())
        if match:
            a, op, b, c = match.groups()
            steps += 1
            wrong += apply(int(a), op, int(b)) != int(c)
    return steps, wrong


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.scaling.math_tasks", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd")
    parser.add_argument("--out", type=Path, help="write the splits here")
    parser.add_argument("--seed", type=int, default=SEED)
    e = sub.add_parser("eval", help="greedy accuracy, pass@1 at T=1 and oracle pass@k on held-out problems")
    e.add_argument("--model", required=True, help="a trained model directory, e.g. assets/tiny-math")
    e.add_argument("--split", choices=("val", "test"), default="test")
    e.add_argument("--count", type=int, default=200, help="problems (the first COUNT of the split)")
    e.add_argument("--samples", type=int, default=16, help="samples per problem at temperature 1")
    e.add_argument("--temperature", type=float, default=1.0)
    e.add_argument("--seed", type=int, default=0, help="sampling seed")
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--json", type=Path, help="also write the figures (and a few samples) here")
    args = parser.parse_args(argv)
    if args.cmd == "eval":
        from decoding.scaling.math_eval import evaluate_model

        report = evaluate_model(args.model, args.split, args.count, args.samples, args.temperature, args.seed,
                                args.threads)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))
        return 0
    if args.out is None:
        parser.error("--out is required to write the splits")
    print(json.dumps(write_splits(args.out, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
