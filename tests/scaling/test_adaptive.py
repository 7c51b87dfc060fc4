"""Adaptive compute (decoding.scaling.adaptive) and its training data (decoding.training.selfeval)."""

import shutil
from pathlib import Path

import pytest

from decoding import run_to_trace
from decoding.events import ParticleStep
from decoding.scaling import adaptive as ad
from decoding.scaling import math_tasks
from decoding.training import selfeval as se

COMMON = {"temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}


def test_waves_grow_exponentially_and_sum_to_n():
    assert ad.waves(1) == [1]
    assert ad.waves(8) == [1, 2, 4, 1]
    assert ad.waves(16) == [1, 2, 4, 8, 1]
    assert all(sum(ad.waves(n)) == n for n in range(1, 40))


def test_prune_keeps_the_best_share_and_at_least_one():
    assert ad.prune({3: 0.2, 4: 0.9, 5: 0.5, 6: 0.1}, 0.5) == [3, 6]
    assert ad.prune({0: 0.4}, 0.1) == []
    assert ad.prune({1: 0.5, 2: 0.5}, 0.5) == [2]  # a tie keeps the lower slot


def test_capability_targets_are_relative_to_the_policys_own_samples():
    # right: 1; wrong: 1 - (right share of the other samples), ties count as not better
    assert se.capability_targets([True, False, False, True]) == [1.0, pytest.approx(1 / 3), pytest.approx(1 / 3), 1.0]
    assert se.capability_targets([False, False]) == [1.0, 1.0]  # nobody solves it: restarting cannot help
    assert se.capability_targets([False]) == [0.0]


def test_examples_cut_each_sample_after_every_line_and_end_with_the_query():
    rows = se.examples("Q?\n", ["1 + 2 = 3\nThe answer is 3.", "1 + 2 = 4\nThe answer is 4."], [True, False])
    assert [r[0] for r in rows] == ["Q?\n1 + 2 = 3" + ad.SELF_EVAL_QUERY,
                                   "Q?\n1 + 2 = 3\nThe answer is 3." + ad.SELF_EVAL_QUERY,
                                   "Q?\n1 + 2 = 4" + ad.SELF_EVAL_QUERY,
                                   "Q?\n1 + 2 = 4\nThe answer is 4." + ad.SELF_EVAL_QUERY]
    assert [(r[1], r[2], r[3]) for r in rows] == [(1.0, 1, False), (1.0, 2, True), (0.0, 1, False), (0.0, 2, True)]


def test_the_reward_reads_exactly_what_training_wrote():
    # the strategy scores steps as ScalingRun hands them (each with its newline); training cut text lines
    assert ad.query_text("Q?\n", ["1 + 2 = 3\n", "  ", "3 + 1 = 4\n"]) == se.examples(
        "Q?\n", ["1 + 2 = 3\n3 + 1 = 4"], [True])[1][0]


def _problem(k=0):
    p = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"][k]
    return math_tasks.prompt(p.question), p


def _texts(trace):
    return [q["text"] for q in trace.finish.extra["particles"]]


@pytest.fixture
def self_eval_policy(tmp_path, monkeypatch):
    """tiny-math's weights in a folder with the self-evaluation marker: the reward's mechanics (what it reads,
    one forward pass) on a real model; its values mean nothing (no such model is trained here)."""
    folder = tmp_path / "tiny-math-self-eval"
    shutil.copytree(Path(__file__).resolve().parents[2] / "assets" / "tiny-math", folder)
    (folder / ad.SELF_EVAL_FILE).write_text('{"query": "\\nRestart?", "no_better": "N", "better": "Y"}')
    monkeypatch.setenv("DECODING_LAB_ALLOW_LOCAL_MODELS", "1")
    return str(folder)


@pytest.mark.slow  # the real model tiny-math, 12 samples
def test_never_stopping_early_is_plain_best_of_n_with_the_same_evaluator(self_eval_policy):
    prompt, _ = _problem()
    a = run_to_trace(self_eval_policy, prompt, strategy="adaptive",
                     params={**COMMON, "n": 6, "threshold": 1.0, "reward": "self-eval", "aggregate": "last"},
                     max_new_tokens=160, chat=False, seed=3)
    b = run_to_trace(self_eval_policy, prompt, strategy="best-of-n",
                     params={**COMMON, "n": 6, "reward": "self-eval", "aggregate": "last"},
                     max_new_tokens=160, chat=False, seed=3)
    assert _texts(a) == _texts(b) and all(_texts(a))
    assert a.finish.extra["chosen"] == b.finish.extra["chosen"]
    assert [q["score"] for q in a.finish.extra["particles"]] == [q["score"] for q in b.finish.extra["particles"]]
    assert a.finish.extra["adaptive"] == {"samples": 6, "pruned": 0, "waves": [1, 2, 3], "stopped_early": False,
                                          "tokens": a.finish.extra["adaptive"]["tokens"]}


@pytest.mark.slow  # the real model tiny-math
def test_stopping_at_the_first_complete_sample_the_evaluator_accepts():
    prompt, problem = _problem()
    trace = run_to_trace("tiny-math", prompt, strategy="adaptive", params={**COMMON, "n": 8},
                         max_new_tokens=160, chat=False, seed=3)  # arith-step, min, 0.5: no wrong step
    info = trace.finish.extra["adaptive"]
    particles = trace.finish.extra["particles"]
    started = [q for q in particles if q["text"]]
    assert info["samples"] == len(started) < 8 and info["stopped_early"]
    assert info["waves"] == [1, 2, 4][:len(info["waves"])] and sum(info["waves"]) == info["samples"]
    assert particles[trace.finish.extra["chosen"]]["score"] >= 0.5  # the sample that stopped it
    assert all(q["weight"] == 0.0 for q in particles if not q["text"])
    steps = [e for e in trace.events if isinstance(e, ParticleStep)]
    assert steps[0].extra["dormant"] == list(range(1, 8))


@pytest.mark.slow  # the real model tiny-math
def test_pruning_stops_the_weaker_half_of_a_wave_mid_way():
    prompt, _ = _problem(1)
    trace = run_to_trace("tiny-math", prompt, strategy="adaptive",
                         params={**COMMON, "n": 7, "threshold": 1.0, "prune_after": 1, "keep": 0.5},
                         max_new_tokens=160, chat=False, seed=5)
    pruned = [i for e in trace.events if isinstance(e, ParticleStep) for i in e.extra.get("pruned_now", [])]
    assert len(pruned) == 0 + 1 + 2  # waves 1, 2, 4: ceil(half) of each goes on
    particles = trace.finish.extra["particles"]
    for i in pruned:
        assert not particles[i]["ended"] and particles[i]["weight"] == 0.0
        assert particles[i]["text"].strip().count("\n") == 0  # one step, then stopped
    assert trace.finish.extra["chosen"] not in pruned
    assert trace.finish.extra["adaptive"]["pruned"] == 3


@pytest.mark.slow  # the real model tiny-math
def test_the_self_evaluation_needs_a_policy_trained_for_it():
    with pytest.raises(ValueError, match="self_eval.json.*arith-step"):
        run_to_trace("tiny-math", "Leo has 3 pens. He gets 2 more, then gets 1 more. How many pens now?\n",
                     strategy="adaptive", params={"n": 2, "reward": "self-eval"}, max_new_tokens=8, chat=False)
