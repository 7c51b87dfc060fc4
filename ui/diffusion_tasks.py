"""The Diffusion tab's task set: tiny-parallel's held-out problems for the task picker, the checker's
verdict on the answer a run wrote, and the benchmark accordion's contents.

The tasks, their checkers and the split come from `decoding.diffusion.parallel_tasks` (ParallelBench-
style list tasks); this module only picks problems from the held-out test split and words the verdict.

Glossary (determined / dependent / checker / reference: see `decoding/diffusion/parallel_tasks.py`)
    problem   one held-out test prompt of a task, numbered from 1 within its task (the picker's slider);
              a task's problems are its distinct test prompts, in the split's order.
    answer    what the model wrote: the run's finished text (the canvas up to its end-of-text token).
    verdict   `check(task_of(prompt), prompt, answer)`, for any prompt that is a task's, chosen in the
              picker or typed by hand; nothing for other prompts or an unfinished run.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

from decoding.diffusion.parallel_tasks import MONTHS, SPLIT_SIZES, TASKS, Example, check, make_splits, task_of
from decoding.events import Trace
from decoding.models import ASSETS_DIR
from ui.widgets import benchmark_file
from visualizers._common import esc
from visualizers.diffusion import accuracy_vs_tokens_per_step_figure

TASK_MODELS = ("tiny-parallel",)  # models trained on the tasks: the picker is shown for these
TASK_LENGTH = 32  # canvas length a chosen task sets (the benchmark's; every answer fits)
FREE_PROMPT = ""  # the task menu's "free prompt" value
BENCH_MODEL = "tiny-parallel"
BENCH_PATH = ASSETS_DIR / BENCH_MODEL / "bench.json"
BENCH_COMMAND = f"python bench/bench_diffusion.py --model {BENCH_MODEL} --quick --json > assets/{BENCH_MODEL}/bench.json"
# What a dependent task's checker accepts (a determined task's is its one reference answer)
REQUIRES = {"shuffle": "every word of the list exactly once, in an order other than the given one",
            "pick": "exactly k different words, all taken from the list",
            "distinct": "exactly k different animals, each from the model's animal vocabulary",
            "insert": "the list in its given order with the new word added once, at any place"}


# Problems ---------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def held_out() -> dict[str, tuple[Example, ...]]:
    """Task -> its distinct held-out test problems. The split is drawn val, test, then train from one
    seed, so drawing no training examples gives the training run's own test split (and fast)."""
    sizes = {"train": 0, "val": SPLIT_SIZES["val"], "test": SPLIT_SIZES["test"]}
    by_task: dict[str, dict[str, Example]] = {name: {} for name in TASKS}
    for example in make_splits(sizes=sizes)["test"]:
        by_task[example.task].setdefault(example.prompt, example)
    return {name: tuple(rows.values()) for name, rows in by_task.items()}


def shows_tasks(model) -> bool:
    return model in TASK_MODELS


def task_choices() -> list[tuple[str, str]]:
    """The picker's menu: free prompt, then every task with its one-line help and kind."""
    kind = lambda t: "determined: one right answer" if t.determined else "dependent: many right answers"
    return [("free prompt", FREE_PROMPT)] + [(f"{t.name} · {t.help} ({kind(t)})", t.name) for t in TASKS.values()]


def num_problems(task: str) -> int:
    return len(held_out().get(task, ()))


def problem(task: str, number) -> Example:
    """The `number`-th (from 1, wrapping around) held-out problem of `task`; ValueError for an unknown task."""
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {', '.join(TASKS)}, got {task!r}")
    rows = held_out()[task]
    return rows[(int(number or 1) - 1) % len(rows)]


def problem_number(prompt: str) -> tuple[str | None, int | None]:
    """(the prompt's task or None, its held-out problem number or None when it is not one)."""
    task = task_of(prompt or "")
    if task is None:
        return None, None
    prompts = [e.prompt for e in held_out()[task]]
    return task, prompts.index(prompt.strip()) + 1 if prompt.strip() in prompts else None


# The verdict --------------------------------------------------------------------------------------
def reference_answer(task: str, prompt: str) -> str | None:
    """The one right answer of a determined task's prompt (None for a dependent task or a malformed prompt).
    tests/ui/test_app_diffusion.py checks it against the generator's references and the checkers."""
    prompt = prompt.strip()
    items = prompt.split(":", 1)[1].split() if ":" in prompt else []
    try:
        if task == "copy":
            return " ".join(items)
        if task == "reverse":
            return " ".join(reversed(items))
        if task == "sort":
            return " ".join(sorted(items))
        if task == "replace":
            index, word = re.match(r"replace (\d+) with (\w+):", prompt).groups()
            items[int(index) - 1] = word
            return " ".join(items)
        if task == "add":
            a, b = (int(x) for x in prompt.split(":", 1)[1].split("+"))
            return str(a + b)
        if task == "date":
            year, month, day = (int(x) for x in prompt.split(":", 1)[1].strip().split("-"))
            return f"{day} {MONTHS[month - 1]} {year}"
    except (AttributeError, ValueError, IndexError):
        return None
    return None


def verdict(trace: Trace | None) -> dict | None:
    """The checker on a finished run's answer: {task, determined, right, answer, reference, requires,
    example, repeated}; None when the prompt is no task's or the run has not finished (or was stopped)."""
    if trace is None or trace.start is None or trace.finish is None or trace.finish.stop_reason == "cancelled":
        return None
    prompt = trace.start.prompt
    task = task_of(prompt)
    if task is None:
        return None
    answer = trace.finish.text
    determined = TASKS[task].determined
    _, number = problem_number(prompt)
    words = answer.split()
    return {"task": task, "determined": determined, "right": check(task, prompt, answer), "answer": answer,
            "reference": reference_answer(task, prompt) if determined else None,
            "requires": None if determined else REQUIRES.get(task, TASKS[task].help),
            "example": held_out()[task][number - 1].reference if number and not determined else None,
            "repeated": {w: n for w, n in Counter(words).items() if n > 1} if task not in ("add", "date") else {}}


def verdict_mark(trace: Trace | None) -> str:
    """"; copy ✓ right" (for a one-line status), or "" when there is no verdict."""
    v = verdict(trace)
    return "" if v is None else f"; {v['task']} {'✓ right' if v['right'] else '✗ wrong'}"


def _verdict_block(v: dict, who: str) -> str:
    colour, mark, word = ("#2e7d32", "✓", "right") if v["right"] else ("#c62828", "✗", "wrong")
    kind = "determined: one right answer" if v["determined"] else "dependent: many answers are right"
    answer = esc(v["answer"].strip()) if v["answer"].strip() else "<i>nothing (end-of-text at once)</i>"
    lines = [f'<b style="color:{colour}">{mark} {word}</b> · {esc(who)} · task <b>{esc(v["task"])}</b> ({kind})',
             f"wrote: <code>{answer}</code>"]
    if v["determined"]:
        lines.append(f"the answer: <code>{esc(v['reference'])}</code>" if v["reference"] is not None
                     else "the prompt is malformed, so no answer can be right")
    else:
        lines.append(f"the checker requires {esc(v['requires'])}")
        if v["example"]:
            lines.append(f"one right answer: <code>{esc(v['example'])}</code>")
    if v["repeated"] and not v["right"]:
        lines.append("repeated: " + ", ".join(f"{esc(w)} ×{n}" for w, n in v["repeated"].items()))
    return (f'<div class="dl-verdict" data-task="{esc(v["task"])}" data-correct="{str(v["right"]).lower()}" '
            f'style="margin:.3em 0;font-size:14px;line-height:1.5">{"<br>".join(lines)}</div>')


def verdict_html(trace: Trace | None, other: Trace | None = None, *, main_label: str = "this run",
                 other_label: str = "compared run") -> str:
    """The checker's verdict on the run's answer (and on the compared run's, when it has one); "" when
    neither has a verdict."""
    blocks = [_verdict_block(v, who) for v, who in ((verdict(trace), main_label), (verdict(other), other_label))
              if v is not None]
    return f'<div class="dl-verdicts">{"".join(blocks)}</div>' if blocks else ""


# The benchmark accordion ----------------------------------------------------------------------------
def benchmark_views(path: Path | None = None) -> tuple[str, object | None]:
    """(Markdown, the tokens-per-step-vs-accuracy figure or None) for the accordion, from the benchmark's
    JSON file (default `BENCH_PATH`); without a readable file, how to produce it."""
    bench, figure, problem = benchmark_file(path or BENCH_PATH, BENCH_COMMAND, BENCH_MODEL,
                                            accuracy_vs_tokens_per_step_figure)
    if bench is None:
        return problem, None
    per_task = bench.get("problems_per_task")
    text = (f"Checker accuracy on held-out {BENCH_MODEL} problems{f' ({per_task} per task)' if per_task else ''} "
            "against tokens committed "
            f"per model call, for the fixed schedules: one token per step, then 2, 4 and 8. Solid lines are "
            "**determined** tasks (the prompt fixes every answer token), dashed ones **dependent** tasks (many "
            "answers are right, and tokens committed in the same step are drawn independently, so they can clash). "
            f"From `{BENCH_COMMAND.split(' >')[0]}`.")
    return text, figure


__all__ = ["FREE_PROMPT", "TASK_LENGTH", "TASK_MODELS", "benchmark_views", "num_problems", "problem",
           "problem_number", "reference_answer", "shows_tasks", "task_choices", "verdict", "verdict_html",
           "verdict_mark"]
