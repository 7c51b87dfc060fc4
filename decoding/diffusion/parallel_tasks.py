"""Generated list and string tasks for `tiny-parallel`, the diffusion lab's own model.

The tasks follow the spirit of ParallelBench (Kang et al. 2025, "ParallelBench: Understanding the
Trade-offs of Parallel Decoding in Diffusion LLMs", arXiv 2510.04767; task definitions in
github.com/furiosa-ai/ParallelBench `parallelbench/datasets/task_generators.py`): the same list
operations, written as one-line prompts a 3M-parameter model can learn on a CPU. The texts and
the generator are this project's own.

    copy: fox owl cat            ->  fox owl cat
    shuffle: fox owl cat         ->  owl cat fox      (any other order of the same words)

Glossary
    determined  the input fixes every output token (copy, reverse, sort, replace, add, date), so a
                model can be sure of many positions at once and parallel decoding loses nothing.
    dependent   many outputs are right, and which token is right at one position depends on the
                tokens chosen at the others (shuffle, pick, distinct, insert). Positions decoded
                in the same step are drawn independently from their marginals, so they may
                collide (the same word twice): ParallelBench's point, visible here.
    checker     `check(task, prompt, answer)`: True when the answer is one of the right ones.
    reference   one right answer (the only one for a determined task); training documents use it.

Everything follows from one seed, so the same command writes the same files:

    python -m decoding.diffusion.parallel_tasks --out /tmp/tiny-parallel/data   # train.txt, val.txt, {train,val,test}.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

SEED = 0  # the one seed every split is derived from
WORDS = ("ant", "bat", "bee", "cat", "cow", "dog", "eel", "elk", "emu", "fox", "gnu", "hen", "jay", "kiwi",
         "lark", "lion", "mole", "moth", "mule", "newt", "owl", "ox", "pig", "pony", "ram", "rat", "seal",
         "swan", "toad", "wasp", "wolf", "yak")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
MIN_ITEMS, MAX_ITEMS = 3, 8  # list lengths
SPLIT_SIZES = {"train": 20_000, "val": 100, "test": 200}  # per task
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


@dataclass(frozen=True)
class Example:
    task: str
    prompt: str  # one line, without the newline the model is given after it
    reference: str  # one right answer

    def text(self) -> str:
        """A training document: the prompt line, then the answer line."""
        return f"{self.prompt}\n{self.reference}"


@dataclass(frozen=True)
class Task:
    name: str
    determined: bool
    make: Callable[[random.Random], tuple[str, str]]  # rng -> (prompt, reference)
    check: Callable[[str, str], bool]  # (prompt, answer) -> right?
    help: str


def _items(rng: random.Random, low: int = MIN_ITEMS, high: int = MAX_ITEMS) -> list[str]:
    return rng.sample(WORDS, rng.randint(low, high))


def _list_after_colon(prompt: str) -> list[str]:
    return prompt.split(":", 1)[1].split()


def _words(answer: str) -> list[str]:
    return answer.strip().split()


# ---------------------------------------------------------------- determined tasks


def _copy(rng):
    items = _items(rng)
    return f"copy: {' '.join(items)}", " ".join(items)


def _reverse(rng):
    items = _items(rng)
    return f"reverse: {' '.join(items)}", " ".join(reversed(items))


def _sort(rng):
    items = _items(rng)
    return f"sort: {' '.join(items)}", " ".join(sorted(items))


def _replace(rng):
    items = _items(rng)
    index = rng.randrange(len(items))
    new = rng.choice([w for w in WORDS if w not in items])
    out = list(items)
    out[index] = new
    return f"replace {index + 1} with {new}: {' '.join(items)}", " ".join(out)


def _check_replace(prompt, answer):
    match = re.match(r"replace (\d+) with (\w+):", prompt)
    items = _list_after_colon(prompt)
    items[int(match.group(1)) - 1] = match.group(2)
    return _words(answer) == items


def _add(rng):
    a, b = rng.randint(100, 9999), rng.randint(100, 9999)
    return f"add: {a} + {b}", str(a + b)


def _check_add(prompt, answer):
    a, b = (int(x) for x in prompt.split(":", 1)[1].split("+"))
    return answer.strip() == str(a + b)


def _date(rng):
    year, month, day = rng.randint(1900, 2099), rng.randint(1, 12), rng.randint(1, 28)
    return f"date: {year}-{month:02d}-{day:02d}", f"{day} {MONTHS[month - 1]} {year}"


def _check_date(prompt, answer):
    year, month, day = (int(x) for x in _DATE.match(prompt.split(":", 1)[1].strip()).groups())
    return answer.strip() == f"{day} {MONTHS[month - 1]} {year}"


# ---------------------------------------------------------------- dependent tasks


def _shuffle(rng):
    items = _items(rng)
    out = list(items)
    while out == items:
        rng.shuffle(out)
    return f"shuffle: {' '.join(items)}", " ".join(out)


def _check_shuffle(prompt, answer):
    items, out = _list_after_colon(prompt), _words(answer)
    return sorted(out) == sorted(items) and out != items


def _pick(rng):
    items = _items(rng, 5, MAX_ITEMS)
    k = rng.randint(2, len(items) - 2)
    return f"pick {k}: {' '.join(items)}", " ".join(rng.sample(items, k))


def _check_pick(prompt, answer):
    k = int(re.match(r"pick (\d+):", prompt).group(1))
    items, out = _list_after_colon(prompt), _words(answer)
    return len(out) == k and len(set(out)) == k and set(out) <= set(items)


def _distinct(rng):
    k = rng.randint(MIN_ITEMS, MAX_ITEMS)
    return f"list {k} different animals", " ".join(rng.sample(WORDS, k))


def _check_distinct(prompt, answer):
    k = int(re.match(r"list (\d+) different", prompt).group(1))
    out = _words(answer)
    return len(out) == k and len(set(out)) == k and set(out) <= set(WORDS)


def _insert(rng):
    items = _items(rng)
    new = rng.choice([w for w in WORDS if w not in items])
    out = list(items)
    out.insert(rng.randint(0, len(items)), new)
    return f"{new} joins the line anywhere: {' '.join(items)}", " ".join(out)


def _check_insert(prompt, answer):
    new = prompt.split(" ", 1)[0]
    items, out = _list_after_colon(prompt), _words(answer)
    return len(out) == len(items) + 1 and new in out and [w for w in out if w != new] == items


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("copy", True, _copy, lambda p, a: _words(a) == _list_after_colon(p), "repeat the list"),
    Task("reverse", True, _reverse, lambda p, a: _words(a) == _list_after_colon(p)[::-1], "the list backwards"),
    Task("sort", True, _sort, lambda p, a: _words(a) == sorted(_list_after_colon(p)), "the list in alphabetical order"),
    Task("replace", True, _replace, _check_replace, "the list with item i replaced by a given word"),
    Task("add", True, _add, _check_add, "the sum of two numbers"),
    Task("date", True, _date, _check_date, "an ISO date written out (7 March 2024)"),
    Task("shuffle", False, _shuffle, _check_shuffle, "the same words in any other order"),
    Task("pick", False, _pick, _check_pick, "any k distinct items of the list"),
    Task("distinct", False, _distinct, _check_distinct, "any k different animals"),
    Task("insert", False, _insert, _check_insert, "a new word joins the line at any place"),
)}


def check(task: str, prompt: str, answer: str) -> bool:
    """True when `answer` is a right answer to `prompt`; a malformed answer is wrong, never an error."""
    try:
        return bool(TASKS[task].check(prompt.strip(), answer))
    except (ValueError, AttributeError, IndexError, TypeError):
        return False


def task_of(prompt: str) -> str | None:
    """The task a prompt line belongs to, or None: the checker the Diffusion tab uses."""
    prompt = prompt.strip()
    for name in ("copy", "reverse", "sort", "shuffle", "add", "date"):
        if prompt.startswith(f"{name}: "):
            return name
    for name, pattern in (("replace", r"replace \d+ with \w+: "), ("pick", r"pick \d+: "),
                          ("distinct", r"list \d+ different animals$"), ("insert", r"\w+ joins the line anywhere: ")):
        if re.match(pattern, prompt):
            return name
    return None


def make_splits(seed: int = SEED, sizes: dict = SPLIT_SIZES) -> dict[str, list[Example]]:
    """{"train" | "val" | "test": [Example]}, deterministic; held-out prompts never occur in training.

    Tasks take turns, so every split holds the same number of examples per task. A dependent
    task's training reference is one right answer drawn at random, so the model learns the
    spread of right answers, not one of them."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: dict[str, list[Example]] = {}
    for split in ("val", "test", "train"):
        rows: list[Example] = []
        for _ in range(sizes[split]):
            for task in TASKS.values():
                while True:  # "distinct" has only six prompts: its held-out answers differ, not its prompts
                    prompt, reference = task.make(rng)
                    if prompt not in seen or task.name == "distinct":
                        break
                if split != "train":
                    seen.add(prompt)
                rows.append(Example(task.name, prompt, reference))
        out[split] = rows
    return out


def write_splits(out: Path, seed: int = SEED, sizes: dict = SPLIT_SIZES) -> dict:
    """train.txt / val.txt (documents separated by a blank line, for `decoding.training.train --docs pairs`)
    and {train,val,test}.jsonl (task, prompt, reference)."""
    splits = make_splits(seed, sizes)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        (out / f"{split}.txt").write_text("\n\n".join(e.text() for e in splits[split]) + "\n")
    for split, rows in splits.items():
        with open(out / f"{split}.jsonl", "w") as f:
            for i, e in enumerate(rows):
                f.write(json.dumps({"id": i, **asdict(e)}) + "\n")
    return {split: len(rows) for split, rows in splits.items()}


def load_split(path: Path) -> list[Example]:
    return [Example(r["task"], r["prompt"], r["reference"])
            for r in map(json.loads, Path(path).read_text().splitlines())]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.diffusion.parallel_tasks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="write the splits here")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    print(json.dumps(write_splits(args.out, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
