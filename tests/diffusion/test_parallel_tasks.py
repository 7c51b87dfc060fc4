"""tiny-parallel's task generator: deterministic, held-out prompts unseen, checkers that can fail."""

import random

import pytest

from decoding.diffusion import parallel_tasks as P

SMALL = {"train": 30, "val": 10, "test": 10}


def test_the_same_seed_writes_the_same_files(tmp_path):
    P.write_splits(tmp_path / "a", sizes=SMALL)
    P.write_splits(tmp_path / "b", sizes=SMALL)
    for name in ("train.txt", "val.txt", "train.jsonl", "val.jsonl", "test.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert P.load_split(tmp_path / "a" / "test.jsonl") == P.make_splits(sizes=SMALL)["test"]
    assert P.make_splits(seed=1, sizes=SMALL)["test"] != P.make_splits(sizes=SMALL)["test"]


def test_every_split_holds_every_task_and_held_out_prompts_never_occur_in_training():
    splits = P.make_splits(sizes=SMALL)
    for split, rows in splits.items():
        assert {task: sum(e.task == task for e in rows) for task in P.TASKS} == dict.fromkeys(P.TASKS, SMALL[split])
    held_out = {e.prompt for split in ("val", "test") for e in splits[split] if e.task != "distinct"}
    assert held_out and not held_out & {e.prompt for e in splits["train"]}


def _corrupt(e: P.Example, rng: random.Random) -> list[str]:
    """Wrong answers: a word dropped, a word doubled, a word swapped for another, the empty answer."""
    words = e.reference.split()
    wrong = [" ".join(words[:-1]), " ".join(words + words[-1:]), ""]
    if len(words) > 1:
        wrong.append(" ".join([words[0]] + [words[0]] + words[2:]))  # a repeat instead of the second word
    if e.task in ("add", "date"):
        wrong.append(e.reference[:-1] + str((int(e.reference[-1]) + 1) % 10))
    if e.task in ("copy", "reverse", "sort"):
        wrong.append(" ".join(words[::-1]) if len(set(words)) > 1 else "x")
    return wrong


@pytest.mark.parametrize("task", list(P.TASKS))
def test_checkers_accept_the_reference_and_reject_corrupted_answers(task):
    rng = random.Random(0)
    for _ in range(50):
        prompt, reference = P.TASKS[task].make(rng)
        e = P.Example(task, prompt, reference)
        assert P.task_of(prompt) == task
        assert P.check(task, prompt, reference), e
        assert P.check(task, prompt, f" {reference} \n")  # surrounding space is not an error
        for wrong in _corrupt(e, rng):
            if task == "copy" and wrong == " ".join(reference.split()[::-1]):
                continue
            assert not P.check(task, prompt, wrong), (e, wrong)


def test_dependent_tasks_accept_other_right_answers_and_shuffle_refuses_the_input_order():
    assert P.check("shuffle", "shuffle: cat dog owl", "owl cat dog")
    assert not P.check("shuffle", "shuffle: cat dog owl", "cat dog owl")
    assert P.check("pick", "pick 2: cat dog owl bee", "bee cat")
    assert not P.check("pick", "pick 2: cat dog owl bee", "bee bee")  # a collision: two positions chose the same
    assert P.check("distinct", "list 3 different animals", "yak ox emu")
    assert not P.check("distinct", "list 3 different animals", "yak ox yak")
    assert P.check("insert", "owl joins the line anywhere: cat dog", "owl cat dog")
    assert P.check("insert", "owl joins the line anywhere: cat dog", "cat dog owl")
    assert not P.check("insert", "owl joins the line anywhere: cat dog", "dog owl cat")
    assert [P.TASKS[t].determined for t in P.TASKS].count(True) == 6


def test_malformed_prompts_and_answers_are_wrong_not_errors():
    assert P.task_of("In the beginning") is None
    assert not P.check("add", "add: 12 + x", "3")
    assert not P.check("date", "date: tomorrow", "1 May 2020")
    assert not P.check("replace", "replace 9 with owl: cat dog", "cat owl")
