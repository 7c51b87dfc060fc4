"""tiny-math's task generator (decoding.scaling.math_tasks) and the shipped model (assets/tiny-math)."""

import re
from pathlib import Path

import pytest
import torch

from decoding.scaling import math_tasks as M

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"train": 400, "val": 50, "test": 50, "open": 50, "unseen": 50}
STEP = re.compile(r"^(\d+) ([+\-*]) (\d+) = (\d+)$")


@pytest.fixture(scope="module")
def splits():
    """The shipped splits in full (120,000 training documents: 7 s to draw; the tests over all of them are slow)."""
    return M.make_splits()


@pytest.fixture(scope="module")
def held_out():
    """The full held-out splits and the first 3,000 training documents (the same as the full draw's)."""
    return M.make_splits(sizes=M.SPLIT_SIZES | {"train": 3000})


def test_generator_is_deterministic():
    a, b = M.make_splits(sizes=SMALL), M.make_splits(sizes=SMALL)
    assert a == b
    assert [p.question for p in M.make_splits(seed=1, sizes=SMALL)["test"]] != [p.question for p in a["test"]]


def test_reference_steps_evaluate_correctly(held_out):
    """Independent check with Python arithmetic: each step holds, chains from the previous result, and
    the last result is the answer; difficulty is the step count (3-8); counts stay in [0, 999]."""
    splits = held_out
    for problem in (splits["test"] + splits["val"] + splits["open"] + splits["unseen"]
                    + [p for p, _ in splits["train"][:2000]]):
        assert 3 <= problem.difficulty == len(problem.steps) <= 8
        start = int(re.search(r" has (\d+) ", problem.question).group(1))
        previous = start
        for step in problem.steps:
            a, op, b, c = STEP.match(step).groups()
            assert int(a) == previous
            assert eval(f"{a} {op} {b}") == int(c) and 0 <= int(c) <= 999  # noqa: S307 (digits and one op)
            previous = int(c)
        assert previous == problem.answer
        assert problem.solution().endswith(f"The answer is {problem.answer}.")


def test_training_noise_is_step_local(held_out):
    """A slipped step is off in one digit by one; the next step starts from the written (wrong) value."""
    splits = held_out
    slipped = total = 0
    for problem, text in splits["train"][:3000]:
        lines = text.splitlines()
        assert lines[0] == problem.question and len(lines) == problem.difficulty + 2
        previous = None
        for _, noisy in zip(problem.steps, lines[1:-1]):
            a, op, b, c = STEP.match(noisy).groups()
            if previous is not None:
                assert int(a) == previous
            true = eval(f"{a} {op} {b}")  # noqa: S307 (digits and one op)
            if true != int(c):
                slipped += 1
                diff = abs(true - int(c))
                assert diff in (1, 10, 100, 1000)
            total += 1
            previous = int(c)
        assert lines[-1] == f"The answer is {previous}."
    assert 0.03 < slipped / total < 0.07  # NOISE_RATE = 0.05


@pytest.mark.slow  # all 120,000 training documents
def test_held_out_problems_never_occur_in_training(splits):
    train = {p.question for p, _ in splits["train"]}
    train_text = {text for _, text in splits["train"]}
    for split in M.HELD_OUT_SPLITS:
        assert not {p.question for p in splits[split]} & train
        assert not {p.text() for p in splits[split]} & train_text
        assert {p.difficulty for p in splits[split]} == set(range(3, 9))
    for i, a in enumerate(M.HELD_OUT_SPLITS):
        for b in M.HELD_OUT_SPLITS[i + 1:]:
            assert not {p.question for p in splits[a]} & {p.question for p in splits[b]}


def _name_item(question: str) -> tuple[str, str]:
    name, _, count, item = question.split(" ")[:4]
    return name, item.rstrip(".")


@pytest.mark.slow  # all 120,000 training documents
def test_training_reads_hundreds_of_names_and_items_and_unseen_never_meets_them(splits):
    """Names and items come from open lists (hundreds each, many origins); the `unseen` split uses only
    the held-out lists, none of whose names or items occurs anywhere in a training document."""
    train_names = {_name_item(p.question)[0] for p, _ in splits["train"]}
    train_items = {_name_item(p.question)[1] for p, _ in splits["train"]}
    assert len(train_names) > 500 and len(train_items) > 250
    assert len({_name_item(p.question)[0] for p in splits["open"]}) > 200  # the open split: the training lists
    assert train_names <= {n for n, _ in M.OPEN.names} and train_items <= set(M.OPEN.items)
    held_names, held_items = {n for n, _ in M.HELD_OUT.names}, set(M.HELD_OUT.items)
    assert not held_names & {n for n, _ in M.OPEN.names} and not held_items & set(M.OPEN.items)
    unseen = [_name_item(p.question) for p in splits["unseen"]]
    assert {n for n, _ in unseen} <= held_names and {i for _, i in unseen} <= held_items
    words = {w for _, text in splits["train"][:20000] for w in re.findall(r"[A-Za-z]+", text)}
    assert not words & (held_names | held_items)
    assert {"Ava", "Noah"} <= held_names and "buttons" in held_items  # the failing prompts


def test_val_and_test_are_the_first_models_splits_and_open_unseen_do_not_depend_on_sizes(held_out):
    """val and test are drawn exactly as the first tiny-math drew them (10 names, 10 items), so old and
    new models are scored on the same problems (test problem 1 is the one the model card shows); the
    open and unseen splits do not depend on the other splits' sizes."""
    splits = held_out
    assert splits["test"][1].question.startswith("Leo has 123 pencils. He gets 11 more, gives away 113,")
    assert splits["test"][1].answer == 297
    classic = {(n, i) for n, _ in M.CLASSIC.names for i in M.CLASSIC.items}
    assert {_name_item(p.question) for p in splits["val"] + splits["test"]} <= classic
    assert M.make_splits(sizes={"test": 3})["test"] == splits["val"][:3]  # val 0: the stream's first problems
    assert M.make_splits(sizes={"unseen": 2, "open": 1, "train": 5})["unseen"] == splits["unseen"][:2]
    with pytest.raises(ValueError, match="'unseen'.*501.*at most 500"):
        M.make_splits(sizes={"unseen": 501})


def test_grading_helpers():
    assert M.parse_answer("1 + 2 = 3\nThe answer is 3.") == 3
    assert M.parse_answer("1 + 2 = 3") is None
    assert M.step_errors("12 + 5 = 17\n17 * 3 = 52\nThe answer is 52.") == (2, 1)


@pytest.mark.slow
def test_tiny_math_loads_and_greedy_decodes_a_held_out_problem(held_out):
    if not (ROOT / "assets" / "tiny-math" / "config.json").exists():
        pytest.skip("assets/tiny-math not built")
    from decoding.models import load_model

    loaded = load_model("tiny-math", progress=None)
    tok = loaded.tokenizer
    assert len(tok.tokenize("123")) == 3  # one token per digit
    problem = held_out["test"][0]
    ids = torch.tensor([tok(M.prompt(problem.question), add_special_tokens=False)["input_ids"]])
    out = loaded.model.generate(ids, max_new_tokens=140, do_sample=False, pad_token_id=tok.pad_token_id,
                                eos_token_id=tok.eos_token_id)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    lines = text.strip().splitlines()
    assert all(STEP.match(line) for line in lines[:-1]) and len(lines) - 1 == problem.difficulty
    assert re.fullmatch(r"The answer is \d+\.", lines[-1])


def test_train_reads_blank_line_documents_and_splits_digits(tmp_path):
    """The two `decoding.training.train` options tiny-math is trained with (the KJV defaults are unchanged)."""
    from decoding.training import train as T

    problems = [p.text() for p in M.make_splits(sizes=SMALL)["val"][:20]]
    (tmp_path / "train.txt").write_text("\n\n".join(problems) + "\n")
    assert T.read_documents(tmp_path / "train.txt", "blocks") == problems
    assert len(T.read_documents(tmp_path / "train.txt", "lines")) > len(problems)
    with pytest.raises(ValueError, match="docs"):
        T.read_documents(tmp_path / "train.txt", "pages")
    tok = T.train_tokenizer(problems, 300, split_digits=True)
    assert tok.tokenize("= 612") == ["=", "Ġ", "6", "1", "2"]
    assert tok.decode(tok(problems[0])["input_ids"]) == problems[0]


def test_misreads_count_wrong_operands_the_arithmetic_check_cannot_see():
    from decoding.scaling.math_eval import misreads

    problem = M.make_splits(sizes=SMALL)["test"][0]
    assert misreads(problem.solution(), problem) == (problem.difficulty, 0)
    a, op, b, _ = STEP.match(problem.steps[0]).groups()
    wrong_operand = f"{a} {op} {int(b) + 1} = {M.apply(int(a), op, int(b) + 1)}"  # right arithmetic, wrong operand
    assert misreads(wrong_operand, problem) == (1, 1) and M.step_errors(wrong_operand) == (1, 0)


def test_the_question_gives_back_the_reference_steps(held_out):
    for problem in held_out["test"][:200] + [p for p, _ in held_out["train"][:200]]:
        start, ops = M.parse_question(problem.question)
        assert len(ops) == problem.difficulty
        value = start
        for (op, b), line in zip(ops, problem.steps):
            assert line == f"{value} {op} {b} = {M.apply(value, op, b)}"
            value = M.apply(value, op, b)
    assert M.parse_question("Tom has 3 apples and buys 4 more. How many apples does he have?") is None
    assert M.parse_question("Mia has 5 cards. She eats 3, then gets 2 more. How many cards now?") is None


def test_check_question_accepts_the_form_and_says_why_other_text_is_outside_it(held_out):
    for split in M.HELD_OUT_SPLITS:
        assert all(M.check_question(p.question) is None for p in held_out[split])
    assert all(M.check_question(p.question) is None for p, _ in held_out["train"][:2000])
    ok = "Ava has 37 buttons. She gets 45 more, gives away 18, then multiplies them by 3. How many buttons now?"
    assert M.check_question(ok) is None and M.check_question(ok + "\n") is None
    outside = {
        "": "empty",
        "What is 2 + 2?": "of the form",
        ok + "\nAnd then?": "one question line",
        ok.replace("Ava", "ava"): "'ava' is not one capitalised word",
        ok.replace("Ava", "Zoë"): "'Zoë' is not one capitalised word",
        ok.replace("How many buttons", "How many shells"): "counts 'buttons' but asks how many 'shells'",
        ok.replace("37 buttons", "37 Buttons"): "'Buttons' is not one plural word in lowercase",
        ok.replace("She gets", "They gets"): "'They'",
        ok.replace("37", "370"): "start count '370'",
        ok.replace("gets 45 more", "eats 45"): "operation 1, 'eats 45', is not",
        ok.replace(", then", ","): "after ', then '",
        ok.replace("gets 45 more, ", ""): "2 operations",
        ok.replace("37", "137"): "operation 3 multiplies 164 by 3",
        ok.replace("gives away 18", "gives away 200"): "operation 2 takes away 200",
        ok.replace("gives away 18", "gives away 90"): "the count is -8",
        ok.replace("45 more", "045 more"): "leading zeros",
    }
    for question, reason in outside.items():
        found = M.check_question(question)
        assert found is not None and reason in found, (question, found)


def test_spare_sees_what_the_arithmetic_checker_cannot(held_out):
    from decoding.scaling.rewards import ArithmeticStepChecker, LastDigitChecker, ReferenceStepChecker

    problem = next(p for p in held_out["test"] if p.difficulty >= 4)
    question, steps = M.prompt(problem.question), list(problem.steps)
    spare, arith = ReferenceStepChecker(), ArithmeticStepChecker(floor=0.05, ceiling=0.95, neutral=0.5)
    right = steps + [f"The answer is {problem.answer}."]
    assert all(spare.score(question, right[: i + 1], i == len(right) - 1).value == 0.95 for i in range(len(right)))
    a, op, b = steps[1].split(" ")[:3]
    misread = f"{a} {op} {int(b) + 1} = {M.apply(int(a), op, int(b) + 1)}"  # a wrong operand, right arithmetic
    assert arith.score(question, steps[:1] + [misread], False).value == 0.95  # blind to it
    assert spare.score(question, steps[:1] + [misread], False).value == 0.05
    early = steps[:2] + [f"The answer is {steps[1].split(' = ')[1]}."]
    assert spare.score(question, early, True).value == 0.05 and "after 2 of" in spare.score(question, early, True).detail
    assert spare.score("What is 2 + 2?", ["2 + 2 = 4"], False).value == 0.5  # no reference to follow
    first = steps[0].split(" = ")
    carry = f"{first[0]} = {int(first[1]) + 10}"  # a slipped carry: the tens digit off by one
    last_digit = LastDigitChecker(floor=0.05, ceiling=0.95, neutral=0.5)
    assert last_digit.score(question, [carry], False).value == 0.95 and arith.score(question, [carry], False).value == 0.05
