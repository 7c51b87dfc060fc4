"""Rewards: arithmetic checks, answer extraction, text constraints, combination, LM-judge prompt, registry."""

import pytest

from decoding.scaling.rewards import (
    DEFAULT_JUDGE_TEMPLATE,
    ArithmeticStepChecker,
    FinalAnswerChecker,
    ForbiddenLetter,
    LMJudgeReward,
    MaxWordLength,
    RequiredWords,
    RewardResult,
    extract_answer,
)

Q = "What is 12 times 3?"


def score(reward, steps, final=False):
    return reward.score(Q, list(steps), final)


# --------------------------------------------------------------------------- interface


def test_reward_result_validation():
    with pytest.raises(ValueError, match=r"`value` must be in \[0, 1\], got 1.5"):
        RewardResult(1.5)
    with pytest.raises(ValueError, match="must be 0 when `hard_violation`"):
        RewardResult(0.5, hard_violation=True)


# --------------------------------------------------------------------------- arithmetic


@pytest.mark.parametrize("step, value", [
    ("12 × 3 = 36", 1.0),
    ("7-2=4", 0.0),
    ("1,200 / 4 = 300", 1.0),
    ("So 3 x 4 = 12 apples", 1.0),
    ("2.5 * 4 = 10.0", 1.0),
    ("10 ÷ 4 = 2.5", 1.0),
    ("10 / 3 = 3.33", 1.0),  # rounded to the decimals written
    ("10 / 3 = 3", 0.0),
    ("8 + 5 = 13 and 9 - 4 = 6", 0.5),
    ("1,000 + 250 = 1,250", 1.0),
    ("5 / 0 = 0", 0.0),
    ("-3 + 5 = 2", 1.0),
])
def test_arithmetic_checker_values(step, value):
    assert score(ArithmeticStepChecker(), [step]).value == pytest.approx(value)


def test_arithmetic_checker_detail_and_only_last_step():
    checker = ArithmeticStepChecker()
    result = score(checker, ["7-2=4", "12 × 3 = 36, then 36 - 1 = 34"])
    assert result.value == pytest.approx(0.5) and not result.hard_violation
    assert "12 × 3 = 36 ✓" in result.detail
    assert "36 - 1 = 34 ✗ (is 35)" in result.detail
    assert "7 - 2" not in result.detail


def test_arithmetic_checker_calibrated_levels():
    checker = ArithmeticStepChecker(floor=0.05, ceiling=0.95, neutral=0.5)
    assert score(checker, ["2 + 2 = 4"]).value == pytest.approx(0.95)
    assert score(checker, ["2 + 2 = 5"]).value == pytest.approx(0.05)
    assert score(checker, ["2 + 2 = 4 and 3 + 3 = 7"]).value == pytest.approx(0.5)
    assert score(checker, ["No sums here."]).value == 0.5
    with pytest.raises(ValueError, match="`floor`"):
        ArithmeticStepChecker(floor=0.9, ceiling=0.1)


def test_arithmetic_checker_no_arithmetic_is_one():
    result = score(ArithmeticStepChecker(), ["Let us think about the apples."])
    assert result.value == 1.0 and "no arithmetic" in result.detail
    assert score(ArithmeticStepChecker(), []).value == 1.0


# --------------------------------------------------------------------------- final answer


@pytest.mark.parametrize("text, answer", [
    ("so we get 12 and then 36", "36"),
    ("The answer is 1,200.", "1,200"),
    ("The answer is: $42 dollars, not 7", "42"),
    ("work 5 + 5 = 10\n#### 72", "72"),
    (r"Thus \boxed{3/4} is it, step 9", "3/4"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    ("no numbers here", None),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize("steps, reference, value", [
    (["12 × 3 = 36", "The answer is 36."], "36", 1.0),
    (["#### 1,200"], "1200", 1.0),
    ([r"\boxed{0.75}"], "3/4", 1.0),
    ([r"\boxed{\frac{3}{4}}"], "0.75", 1.0),
    (["The answer is 35"], "36", 0.0),
    (["I am not sure"], "36", 0.0),
])
def test_final_answer_checker(steps, reference, value):
    result = score(FinalAnswerChecker(reference), steps, final=True)
    assert result.value == value and not result.hard_violation


def test_final_answer_reference_validated():
    with pytest.raises(ValueError, match="`reference` must be a number, got 'thirty'"):
        FinalAnswerChecker("thirty")


# --------------------------------------------------------------------------- text constraints


def test_forbidden_letter_hard_and_soft():
    ok = score(ForbiddenLetter("e"), ["A big cat sat on a mat"])
    assert ok.value == 1.0 and not ok.hard_violation
    bad = score(ForbiddenLetter("e"), ["A big cat", "sat on the mat"])
    assert bad.value == 0.0 and bad.hard_violation and "the" in bad.detail
    soft = score(ForbiddenLetter("E", hard=False), ["the cat ate food"])  # 2 of 4 words have e
    assert soft.value == pytest.approx(0.5) and not soft.hard_violation


def test_max_word_length_hard_and_soft():
    assert score(MaxWordLength(4), ["a cat is here"]).value == 1.0
    bad = score(MaxWordLength(4), ["a cat is somewhere"])
    assert bad.hard_violation and bad.value == 0.0 and "somewhere" in bad.detail
    soft = score(MaxWordLength(4, hard=False), ["a cat is somewhere"])
    assert soft.value == pytest.approx(0.75) and not soft.hard_violation


def test_required_words_soft_partial_credit_then_fraction():
    reward = RequiredWords(["apple", "pear"])
    early = score(reward, ["I ate an Apple."], final=False)
    assert early.value == pytest.approx((1 + 0.5) / 2) and not early.hard_violation
    final = score(reward, ["I ate an Apple."], final=True)
    assert final.value == pytest.approx(0.5) and not final.hard_violation and "pear" in final.detail
    assert score(reward, ["apple", "and a pear"], final=True).value == 1.0
    assert score(reward, ["pineapple"], final=True).value == 0.0  # whole words only


def test_required_words_hard_only_fails_at_the_end():
    reward = RequiredWords(("apple",), hard=True)
    assert not score(reward, ["nothing yet"], final=False).hard_violation
    end = score(reward, ["nothing yet"], final=True)
    assert end.hard_violation and end.value == 0.0


@pytest.mark.parametrize("make, match", [
    (lambda: ForbiddenLetter("ab"), "`letter` must be a single letter, got 'ab'"),
    (lambda: ForbiddenLetter("e", hard="yes"), "`hard` must be True or False"),
    (lambda: MaxWordLength(0), "`n` must be an integer >= 1, got 0"),
    (lambda: RequiredWords([]), "`words` must be a non-empty list"),
    (lambda: RequiredWords(["a"], pending_credit=2), r"`pending_credit` must be in \[0, 1\]"),
])
def test_constraint_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# --------------------------------------------------------------------------- LM judge


def test_lm_judge_builds_prompt_and_returns_judge_value():
    prompts = []

    def fake_judge(prompt):
        prompts.append(prompt)
        return 0.8

    judge = LMJudgeReward(fake_judge)
    result = judge.score(Q, ["First, think.", "12 × 3 = 36"], False)
    assert result.value == 0.8 and not result.hard_violation
    (prompt,) = prompts
    assert prompt == f"Question: {Q}\nProposed step: 12 × 3 = 36\nIs this step correct? Answer Yes or No."
    assert prompt == DEFAULT_JUDGE_TEMPLATE.format(question=Q, step="12 × 3 = 36")


def test_lm_judge_custom_template_with_previous_steps():
    judge = LMJudgeReward(lambda p: 0.1, template="Q: {question}\nSo far: {previous}\nNext: {step}\nOK?")
    prompt = judge.build_prompt(Q, ["step one", "step two"])
    assert Q in prompt and "So far: step one" in prompt and "Next: step two" in prompt


def test_lm_judge_validation():
    with pytest.raises(ValueError, match="`judge` must be callable"):
        LMJudgeReward(0.5)
    with pytest.raises(ValueError, match="`template` must contain"):
        LMJudgeReward(lambda p: 0.5, template="Is {step} right?")
    with pytest.raises(ValueError, match=r"must return P\(Yes\) in \[0, 1\], got 1.2"):
        LMJudgeReward(lambda p: 1.2).score(Q, ["x"], False)


# --------------------------------------------------------------------------- registry


def test_one_reward_registry_builds_each_reward_from_cli_strings():
    """`--set` strings go through the method's parameters into the reward registry (one spelling)."""
    from decoding.run import make_params
    from decoding.scaling.scoring import REWARDS, build_reward

    assert REWARDS.names() == ("arith-step", "arith-lastdigit", "spare", "final-answer", "forbid-letter",
                               "max-word-length", "required-words", "lm-judge", "probe", "spare-prm", "prm", "none", "self-eval")

    def built(**sets):
        return build_reward(make_params("best-of-n", sets), None)[0]

    assert isinstance(built(reward="arith-step"), ArithmeticStepChecker)
    assert built(reward="spare").name == "reference steps" and built(reward="arith-lastdigit").name == "last digit"
    assert built(reward="final-answer", reference="36").reference == "36"
    assert built(reward="forbid-letter", letter="e", hard="false").hard is False
    assert built(reward="max-word-length", max_word_length="5").n == 5
    assert built(reward="required-words", words="apple, pear").words == ("apple", "pear")
    assert built(reward="none").score(Q, ["x"], False).value == 1.0


@pytest.mark.parametrize("sets, match", [
    ({"reward": "oracle"}, "`reward` must be one of arith-step, arith-lastdigit, spare, final-answer"),
    ({"reward": "max-word-length", "max_word_length": "five"},
     "`max-word-length.max_word_length` must be an integer, got 'five'"),
    ({"reward": "max-word-length", "max_word_length": "0"},
     r"`max-word-length.max_word_length` must be an integer in \[1, 40\], got 0"),
    ({"reward": "forbid-letter", "hard": "maybe"}, "`forbid-letter.hard` must be true or false, got 'maybe'"),
    ({"reward": "final-answer", "reference": "x"}, "`reference` must be a number"),
    ({"reward": "required-words", "words": " , "}, "`required-words.words` must be a non-empty list"),
])
def test_reward_parameters_are_checked_when_the_parameters_are_made(sets, match):
    from decoding.run import make_params

    with pytest.raises(ValueError, match=match):
        make_params("particle-filter", sets)


def test_extract_answer_without_the_last_number_fallback():
    assert extract_answer("Step 1: 3 + 4 = 7\nStep 2", last_number=False) is None
    assert extract_answer("so the answer is 7. Step 2", last_number=False) == "7"
