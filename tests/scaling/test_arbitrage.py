"""Arbitrage (decoding.scaling.arbitrage and step-speculation's gates): the router's features and fit, the
oracle's choice and accounting, the router gate at its extremes, and what a missing router says."""

import pytest
import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.models import load_model
from decoding.scaling import arbitrage as arb
from decoding.scaling import math_tasks
from decoding.scaling.probe import auc
from decoding.scaling.specreason import StepSpeculationParams, _peek_calls

DRAFTED = {"n": 1, "draft_model": "tiny-math-draft", "draft_temperature": 1.0, "temperature": 1.0, "top_p": 1.0,
           "max_step_tokens": 40}


@pytest.fixture(scope="module")
def math_lm():
    return LM(load_model("tiny-math", progress=None))


@pytest.fixture(scope="module")
def problem():
    return math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"][3]


def run(lm, problem, **params):
    return run_to_trace(lm, math_tasks.prompt(problem.question), strategy="step-speculation",
                        params=DRAFTED | params, max_new_tokens=160, chat=False, seed=4)


def test_draft_features_read_the_drafters_confidence_in_the_features_order():
    stats = [(-0.1, 0.5), (-2.0, 1.5), (-0.3, 1.0)]
    got = arb.draft_features(0.05, stats, 2, True, "The answer is 7.")
    assert dict(zip(arb.FEATURES, got)) == pytest.approx({
        "draft_reward": 0.05, "min_logprob": -2.0, "mean_logprob": -0.8, "mean_entropy": 1.0, "max_entropy": 1.5,
        "tokens": 3.0, "step": 2.0, "previous_by_policy": 1.0, "answer_line": 1.0})
    assert arb.draft_features(0.5, [], 0, False, "3 + 4 = 7")[1:] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_the_router_fit_learns_a_nonlinear_rule_and_survives_its_json():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, len(arb.FEATURES), generator=g, dtype=torch.float64)
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).double()  # xor: no linear rule separates it
    router = arb.fit(x, y, steps=800)
    assert auc(router(x), y) > 0.95
    again = arb.Router.from_json(router.to_json())
    assert torch.allclose(again(x), router(x), atol=1e-4)
    with pytest.raises(ValueError, match="trained on features"):
        arb.Router.from_json(router.to_json() | {"features": ["draft_reward"]})


def test_the_peek_is_what_only_the_discarded_steps_needed():
    written = {0: ([5, 6, 7], "step"), 1: ([5, 6, 7, 8, 9], "step")}
    mark = (10, None, [3, None], None)  # a token was waiting to be fed: k tokens cost k calls
    assert _peek_calls(5, written, [0, 1], [0, 1], mark) == 5  # every draft kept: all of it was a peek
    assert _peek_calls(5, written, [0, 1], [1], mark) == 2  # slot 0's 3-token step needed 3 of the 5 calls
    assert _peek_calls(5, written, [0, 1], [0], mark) == 0  # the longest step is the policy's: nothing extra
    assert _peek_calls(4, written, [0, 1], [1], (10, None, [None, None], None)) == 2  # the first step: k - 1


def test_the_gate_fields_are_checked():
    assert StepSpeculationParams().gate == "threshold"  # today's gate is the default
    with pytest.raises(ValueError, match="gate"):
        StepSpeculationParams(gate="coin")
    with pytest.raises(ValueError, match="router_threshold"):
        StepSpeculationParams(router_threshold=1.5)


@pytest.mark.slow  # the real models tiny-math and tiny-math-draft
def test_an_oracle_that_never_escalates_keeps_every_draft_at_the_threshold_runs_cost(math_lm, problem):
    """oracle_margin = 1: no step's advantage exceeds it, so every draft is kept (the drafter's stream is
    the same): the solution is accept = 0's, and the oracle's routed calls are exactly its calls; it
    spent more, writing every step it then discarded."""
    keep_all = run(math_lm, problem, accept=0.0)
    oracle = run(math_lm, problem, gate="oracle", oracle_margin=1.0)
    assert oracle.finish.text == keep_all.finish.text
    sp, base = oracle.finish.extra["speculation"], keep_all.finish.extra["speculation"]
    assert sp["rewritten_steps"] == 0 and sp["routed_policy_calls"] == base["policy_calls"]
    assert sp["policy_calls"] == base["policy_calls"] + sp["oracle_peek_calls"] > base["policy_calls"]


@pytest.mark.slow  # the real models tiny-math and tiny-math-draft
def test_the_oracle_keeps_the_better_step_of_the_two(math_lm, problem):
    trace = run(math_lm, problem, gate="oracle", oracle_margin=0.0)
    rewritten = 0
    for event in trace.of_kind("particles"):
        sp = event.extra["speculation"]
        advantage = sp["policy_rewards"]["0"] - sp["draft_rewards"]["0"]
        kept = sp["drafts"]["0"] if sp["accepted"] == [0] else sp["policy_steps"]["0"]
        assert (sp["rewritten"] == [0]) == (advantage > 0) and event.particles[0]["step_text"] == kept
        assert len(sp["features"]["0"]) == len(arb.FEATURES) and sp["gate"] == "oracle"
        rewritten += sp["rewritten"] == [0]
    assert rewritten == trace.finish.extra["speculation"]["rewritten_steps"] > 0


@pytest.mark.slow  # the real models tiny-math and tiny-math-draft, the shipped router
def test_the_router_gate_at_its_extremes_keeps_every_draft_or_none(math_lm, problem):
    """P is in (0, 1): a threshold of 1 never escalates (accept = 0's run), one of 0 always does (accept = 1's:
    the policy writes every step); in between the router's P decides each step."""
    assert run(math_lm, problem, gate="router", router_threshold=1.0).finish.text == run(
        math_lm, problem, accept=0.0).finish.text
    assert run(math_lm, problem, gate="router", router_threshold=0.0).finish.text == run(
        math_lm, problem, accept=1.0).finish.text
    trace = run(math_lm, problem, gate="router", router_threshold=0.5)
    for event in trace.of_kind("particles"):
        sp = event.extra["speculation"]
        assert (sp["rewritten"] == [0]) == (sp["router_p"]["0"] > 0.5)


@pytest.mark.slow  # the real model tiny-math, the shipped router
def test_the_shipped_router_beats_chance_and_names_what_it_was_trained_for(math_lm, problem):
    router = arb.router_for(math_lm, "tiny-math-draft", "arith-step")
    assert router.info["held_out"]["auc"] > 0.9 and router.info["drafter"] == "tiny-math-draft"
    with pytest.raises(ValueError, match="trained for drafter 'tiny-math-draft' with reward 'arith-step'"):
        run(math_lm, problem, gate="router", reward="spare")
    with pytest.raises(ValueError, match="python -m decoding.scaling.arbitrage train"):
        run(math_lm, problem, gate="router", draft_model="")


@pytest.mark.slow  # the real models tiny-math and tiny-math-draft, the shipped router
def test_the_router_preset_does_what_its_note_says(math_lm):
    """48: the router rewrites the early answer line the threshold keeps (P 0.60 > 0.1) and ends right."""
    from decoding.presets import load_presets

    preset = next(p for p in load_presets() if p.name == "48-arbitrage-router")
    go = lambda **change: run_to_trace(math_lm, preset.prompt, strategy=preset.strategy, params=preset.params | change,
                                       max_new_tokens=preset.max_new_tokens, chat=preset.chat, seed=preset.seed)
    trace, threshold = go(), go(gate="threshold")
    sp = trace.finish.extra["speculation"]
    assert (trace.finish.extra["answer"], sp["rewritten_steps"], sp["accepted_steps"], sp["policy_calls"]) == ("186", 5, 4, 67)
    assert (threshold.finish.extra["answer"], threshold.finish.extra["speculation"]["policy_calls"]) == ("337", 45)
    early = next(e.extra["speculation"] for e in trace.of_kind("particles")
                 if e.extra["speculation"]["drafts"]["0"] == "The answer is 337.")
    assert early["rewritten"] == [0] and round(early["router_p"]["0"], 2) == 0.60 and early["draft_rewards"]["0"] == 0.5
    for claim in ("186", "337", "0.60", "5 of 9 steps rewritten, 67 tiny-math calls", "45 calls"):
        assert claim in preset.note.replace("\n", " ").replace("  ", " ")
