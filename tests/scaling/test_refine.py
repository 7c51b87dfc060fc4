"""Review, refine, repeat (decoding.scaling.refine) on tiny-math."""

import pytest

from decoding import run_to_trace
from decoding.events import stats
from decoding.scaling import refine as rf
from decoding.scaling.run import Particle
from decoding.scaling.tasks import menu_tasks

TASKS = {t["id"]: t for t in menu_tasks() if t["model"] == "tiny-math"}
SETTINGS = {"n": 2, "temperature": 1.0, "top_p": 1.0, "reward": "spare"}


def run(task_id, **params):
    return run_to_trace("tiny-math", TASKS[task_id]["prompt"], strategy="refine", params=SETTINGS | params,
                        max_new_tokens=160, seed=0, chat=False)


def test_first_bad_step_and_prefix():
    p = Particle(token_ids=[1, 2, 3, 4, 5], steps=["a", "b", "c"], rewards=[0.95, 0.05, 0.95], step_lengths=[2, 2, 1])
    assert rf.first_bad_step(p, 0.5) == 1 and rf.first_bad_step(p, 0.01) is None
    cut = p.prefix(1)
    assert (cut.token_ids, cut.steps, cut.rewards, cut.step_lengths, cut.finished) == ([1, 2], ["a"], [0.95], [2], False)


def test_each_round_rewrites_the_best_solution_from_its_first_bad_step():
    trace = run("m6", feedback="prefix")  # an 8-step problem where the first round slips
    steps = trace.of_kind("particles")
    rounds = [s.extra["round"] for s in steps]
    assert rounds == sorted(rounds) and max(rounds) == 3  # three rounds, in order
    for later in (2, 3):
        first = next(s for s in steps if s.extra["round"] == later)
        kept = first.extra["kept_steps"]
        assert first.extra["bad_step"] == kept  # the round continues the steps before the bad one
        assert first.extra["feedback"]["correction"] is None and first.extra["feedback"]["mode"] == "prefix"
        assert all(p["steps"] == kept + 1 and p["parent"] == -1 for p in first.particles)
    assert stats(trace)["tokens_spent"] == steps[-1].tokens_spent > steps[0].tokens_spent


def test_the_correction_is_fed_into_the_next_round_as_forced_tokens():
    """IAD's feedback: round 2 continues the best solution's verified steps and the checker's corrected
    step (m6, seed 0: round 1 writes 58 * 8 = 472 in step 3; spare says the question's 58 * 8 is 464)."""
    trace = run("m6", n=1, rounds=4)
    steps = trace.of_kind("particles")
    second = next(s for s in steps if s.extra["round"] == 2)
    feedback = second.extra["feedback"]
    assert feedback["mode"] == "correction" and feedback["from_round"] == 1
    assert feedback["bad_text"] == "58 * 8 = 472\n" and feedback["correction"] == "58 * 8 = 464\n"
    assert second.extra["kept_steps"] == feedback["bad_step"] + 1  # the verified steps and the forced one
    text = second.particles[0]["text"]
    assert text.splitlines()[:3] == ["136 - 135 = 1", "1 + 57 = 58", "58 * 8 = 464"]
    assert second.particles[0]["steps"] == second.extra["kept_steps"] + 1
    rounds = trace.finish.extra["rounds"]
    assert [r["round"] for r in rounds] == list(range(1, len(rounds) + 1)) and "feedback" not in rounds[0]
    assert trace.finish.extra["answer"] == TASKS["m6"]["answer"] == "45"  # four rounds reach it; prefix-only does not
    assert run("m6", n=1, rounds=4, feedback="prefix").finish.extra["answer"] != "45"


def test_correction_says_what_each_checker_says_the_step_should_be():
    from decoding.scaling import rewards as rw

    question = TASKS["m6"]["question"]
    arith = rw.ArithmeticStepChecker(floor=0.05, ceiling=0.95, neutral=0.5)
    assert rf.correction(arith, question, ["136 - 135 = 1\n", "1 + 57 = 58\n", "58 * 8 = 472\n"]) == "58 * 8 = 464\n"
    assert rf.correction(arith, question, ["136 - 135 = 1\n"]) is None  # nothing to fix
    assert rf.correction(rw.LastDigitChecker(), question, ["58 * 8 = 472\n"]) == "58 * 8 = 474\n"  # as blind as it is
    spare = rw.ReferenceStepChecker()
    assert rf.correction(spare, question, ["136 - 135 = 1\n", "1 + 57 = 58\n", "58 * 3 = 174\n"]) == "58 * 8 = 464\n"
    assert rf.correction(spare, question, ["136 - 135 = 1\n", "The answer is 1."]) == "1 + 57 = 58"
    assert rf.correction(rw.FinalAnswerChecker("45"), question, ["The answer is 4."]) is None  # scores, says nothing


def test_feedback_none_samples_every_round_from_the_prompt():
    trace = run("m6", n=1, rounds=3, feedback="none")
    for s in trace.of_kind("particles"):
        if s.extra["round"] > 1:
            assert s.extra["kept_steps"] == 0 and s.extra["bad_step"] is None
            assert s.extra["feedback"]["mode"] == "none"


def test_a_solution_with_no_bad_step_ends_after_one_round():
    trace = run("m0")
    assert {s.extra["round"] for s in trace.of_kind("particles")} == {1}
    assert trace.finish.extra["answer"] == TASKS["m0"]["answer"]


@pytest.mark.slow  # the real model tiny-math
def test_under_a_constant_reward_refine_is_plain_sampling():
    same = {"n": 3, "temperature": 1.0, "reward": "none"}
    refined = run_to_trace("tiny-math", TASKS["m1"]["prompt"], strategy="refine", params=same, max_new_tokens=160,
                           seed=4, chat=False)
    sampled = run_to_trace("tiny-math", TASKS["m1"]["prompt"], strategy="best-of-n", params=same, max_new_tokens=160,
                           seed=4, chat=False)
    assert sorted(p["text"] for p in refined.finish.extra["particles"]) == \
        sorted(p["text"] for p in sampled.finish.extra["particles"])


def test_rounds_and_accept_are_checked():
    with pytest.raises(ValueError, match="rounds"):
        run("m0", rounds=0)


def test_the_particles_header_says_the_round_and_where_it_rewrites():
    from visualizers.particles import particles_html

    later = next(s for s in run("m6").of_kind("particles") if s.extra["round"] == 2)
    html = particles_html(later)
    assert f"round 2, rewriting from step {later.extra['bad_step'] + 1}" in html
    assert "feedback from round 1" in html and "forced: <code class=\"forced\">58 * 8 = 464</code>" in html


def test_the_choice_lists_every_round_and_its_feedback():
    from visualizers.particles import choice_html

    trace = run("m6", n=1, rounds=4)
    html = choice_html(trace.finish.extra)
    assert html.count("<tr data-round=") == len(trace.finish.extra["rounds"]) >= 2
    assert "forced <code" in html


@pytest.mark.slow  # the real model tiny-math
def test_events_mark_particles_cut_off_at_their_cap():
    trace = run_to_trace("tiny-math", TASKS["m1"]["prompt"], strategy="best-of-n", params=SETTINGS,
                         max_new_tokens=20, seed=0, chat=False)  # too short for any answer
    last = trace.of_kind("particles")[-1]
    assert all(p["finished"] and p["cut_off"] and p["answer"] is None for p in last.particles)
    full = run("m0")
    assert not any(p["cut_off"] for p in full.of_kind("particles")[-1].particles if p["answer"] is not None)
