"""A small task set of arithmetic word problems with reference answers, for the scaling lab.

The shipped file `presets/tasks/arithmetic.jsonl` is made by this module with a fixed seed:

    python -m decoding.scaling.tasks --out presets/tasks/arithmetic.jsonl --seed 0 --count 40

Problems are GSM8K-style in form (Cobbe et al. 2021) but one or two operations on small numbers,
so that a 135M-parameter model solves some of them and inference-time scaling has room to help.
Each row: {"id", "question", "answer" (an integer, as text), "operations" (1 or 2)}.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

TASKS_PATH = Path(__file__).resolve().parents[2] / "presets" / "tasks" / "arithmetic.jsonl"

INSTRUCTION = 'Solve it step by step, one short step per line. Finish with the sentence "The answer is" and the number.'

_NAMES = ["Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Leo", "Emma", "Max", "Zoe"]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "shells"]


def _problem(rng: random.Random) -> tuple[str, int, int]:
    """(question, answer, number of operations) from one of six templates."""
    name, friend = rng.sample(_NAMES, 2)
    item = rng.choice(_ITEMS)
    kind = rng.randrange(6)
    if kind == 0:
        a, b = rng.randint(3, 20), rng.randint(2, 15)
        return f"{name} has {a} {item}. {name} buys {b} more. How many {item} does {name} have now?", a + b, 1
    if kind == 1:
        a = rng.randint(8, 30)
        b = rng.randint(2, a - 2)
        return f"{name} has {a} {item} and gives {b} to {friend}. How many {item} does {name} have left?", a - b, 1
    if kind == 2:
        a, b = rng.randint(2, 9), rng.randint(2, 12)
        return f"{name} buys {a} boxes of {item}. Each box has {b} {item}. How many {item} does {name} buy?", a * b, 1
    if kind == 3:
        b, each = rng.randint(2, 6), rng.randint(2, 9)
        return (f"{name} shares {b * each} {item} equally among {b} friends. "
                f"How many {item} does each friend get?", each, 1)
    if kind == 4:
        a, b, c = rng.randint(2, 15), rng.randint(2, 5), rng.randint(2, 10)
        return (f"{name} has {a} {item}. {name} buys {b} packs with {c} {item} in each pack. "
                f"How many {item} does {name} have now?", a + b * c, 2)
    a = rng.randint(15, 40)
    b, c = rng.randint(2, 8), rng.randint(2, 6)
    return (f"{name} has {a} {item}. {name} gives {b} to {friend} and {c} to a neighbour. "
            f"How many {item} are left?", a - b - c, 2)


def make_tasks(count: int = 40, seed: int = 0) -> list[dict]:
    """`count` distinct problems, the same for the same seed."""
    rng = random.Random(seed)
    tasks, seen = [], set()
    while len(tasks) < count:
        question, answer, operations = _problem(rng)
        if question in seen:
            continue
        seen.add(question)
        tasks.append({"id": len(tasks), "question": question, "answer": str(answer), "operations": operations})
    return tasks


def load_tasks(path: str | Path = TASKS_PATH) -> list[dict]:
    """The task rows of a JSONL file; ValueError naming the line for a malformed one."""
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: line {number} is not JSON ({err})") from None
        if not isinstance(row, dict) or not {"question", "answer"} <= row.keys():
            raise ValueError(f"{path}: line {number} needs \"question\" and \"answer\"")
        rows.append(row)
    return rows


def task_prompt(question: str) -> str:
    """What the model is asked: the problem and how to lay out its steps."""
    return f"{question}\n{INSTRUCTION}"


MATH_MENU = 30  # tiny-math's held-out problems offered in the Scaling tab's task menu


def menu_tasks(math_count: int = MATH_MENU) -> list[dict]:
    """The Scaling tab's task menu: tiny-math's first held-out validation problems (ids "m0", "m1", ...;
    never trained on; prompt = the question line, policy tiny-math; the presets and the tests name
    them), then the shipped SmolLM2 word problems (ids 0, 1, ...; prompt with the step instruction,
    policy smollm2-135m). The benchmark scores the test split instead. Each row: id, question, answer,
    prompt, model, and for tiny-math its difficulty (steps)."""
    from decoding.scaling import math_tasks

    problems = math_tasks.make_splits(sizes={"val": math_count})["val"]
    rows = [{"id": f"m{i}", "question": p.question, "answer": str(p.answer), "prompt": math_tasks.prompt(p.question),
             "model": "tiny-math", "difficulty": p.difficulty} for i, p in enumerate(problems)]
    return rows + [t | {"prompt": task_prompt(t["question"]), "model": "smollm2-135m"} for t in load_tasks()]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m decoding.scaling.tasks", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TASKS_PATH)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in make_tasks(args.count, args.seed):
            f.write(json.dumps(row) + "\n")
    print(f"wrote {args.count} tasks to {args.out}")


if __name__ == "__main__":
    main()
