"""Step-level speculation (strategy step-speculation) and the batch operations it rests on."""

import pytest
import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.models import load_model
from decoding.scaling import math_tasks
from decoding.scaling.particle_batch import ParticleBatch, slot_generators

PROMPT = "Tom has 3 apples and buys 4 more. How many apples does he have?"


@pytest.fixture(scope="module")
def math_lm():
    return LM(load_model("tiny-math", progress=None))


@pytest.fixture(scope="module")
def problem():
    return math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"][0]


def test_feed_block_scores_a_step_in_one_call_as_a_full_forward_does(tiny_lm):
    """Two rows of different lengths, one with a pending token: one call, the exact log-probabilities
    of a fresh forward over the whole text, and the rows continue as if they had written the tokens."""
    prompt = tiny_lm.tokenizer(PROMPT).input_ids
    batch = ParticleBatch(tiny_lm, prompt, slot_generators(4, 2), temperature=1.0)
    first = batch.extend([0], lambda ids: False, [3, 0])[0][0]  # row 0: 3 tokens, its last one pending
    steps = {0: [5, 9, 11, 7], 1: [12, 3]}
    before = tiny_lm.forward_passes
    got = batch.feed_block(steps)
    assert tiny_lm.forward_passes == before + 1
    for row, history in ((0, first), (1, [])):
        ids = torch.tensor([prompt + history + steps[row]])
        logits = tiny_lm.forward(ids).logits[0]  # (T, V)
        start = len(prompt) + len(history)
        expected = [float(torch.log_softmax(logits[start + j - 1], -1)[t]) for j, t in enumerate(steps[row])]
        assert got[row] == pytest.approx(expected, abs=1e-4)
    batch.feed()  # the last token of each step
    for row, history in ((0, first), (1, [])):
        reference = tiny_lm.forward(torch.tensor([prompt + history + steps[row]]), last_only=True).logits[0, -1]
        torch.testing.assert_close(batch.logits[row], reference, atol=1e-4, rtol=1e-4)


def test_rewind_hides_what_a_row_wrote_since_the_checkpoint(tiny_lm):
    prompt = tiny_lm.tokenizer(PROMPT).input_ids
    batch = ParticleBatch(tiny_lm, prompt, slot_generators(1, 2), temperature=1.0)
    batch.extend([0, 1], lambda ids: False, [2, 2])
    mark = batch.checkpoint()
    kept = batch.extend([0, 1], lambda ids: False, [4, 4])
    batch.rewind([1], mark)
    batch.feed_block({1: [21, 22]})
    batch.feed()
    width = mark[0]
    # row 1: its tokens since the checkpoint are hidden; seen are the token pending at the checkpoint
    # and the two forced ones. Row 0 keeps its pending token and its four new ones.
    assert batch.mask[1, width:].sum() == 3
    assert batch.mask[0, width:].sum() == 5
    assert len(kept[0][0]) == 4


def test_every_step_rewritten_is_plain_sampling_by_the_policy(math_lm, problem):
    """accept above any reward (the step checker gives at most 0.95): every draft is refused and the
    policy writes each step itself, so the solutions are best-of-N's (same seed, same N)."""
    prompt = math_tasks.prompt(problem.question)
    common = dict(max_new_tokens=120, chat=False, seed=5)
    spec = run_to_trace(math_lm, prompt, strategy="step-speculation",
                        params={"n": 2, "accept": 1.0}, **common)
    plain = run_to_trace(math_lm, prompt, strategy="best-of-n", params={"n": 2}, **common)
    texts = lambda t: [p["text"] for p in t.finish.extra["particles"]]
    assert texts(spec) == texts(plain)
    assert spec.finish.extra["speculation"]["accepted_steps"] == 0
    from visualizers.particles import particles_html

    card = particles_html(spec.of_kind("particles")[0])
    assert card.count("rewritten by the policy (draft reward") == 2 and "refused draft: " in card


def test_accepted_steps_cost_the_policy_one_call_each(math_lm, problem):
    prompt = math_tasks.prompt(problem.question)
    trace = run_to_trace(math_lm, prompt, strategy="step-speculation", params={"n": 1, "accept": 0.0},
                         max_new_tokens=120, chat=False, seed=2)
    spec = trace.finish.extra["speculation"]
    steps = trace.of_kind("particles")
    assert spec["rewritten_steps"] == 0 and spec["accepted_steps"] == len(steps)
    assert spec["policy_calls"] <= 1 + len(steps)  # the prompt's prefill, then one verification per step
    assert spec["draft_calls"] >= spec["draft_tokens"] - len(steps)  # the drafter wrote token by token
    last = steps[-1].extra["speculation"]
    assert last["accepted"] == [0] and "0" in last["drafts"] and last["policy_logprob"]["0"] <= 0


@pytest.mark.slow  # the real model tiny-ar
def test_a_drafter_with_another_tokenizer_is_refused(math_lm, problem):
    with pytest.raises(ValueError, match="tokenizer"):
        run_to_trace(math_lm, math_tasks.prompt(problem.question), strategy="step-speculation",
                     params={"draft_model": "tiny-ar"}, max_new_tokens=20, chat=False)


@pytest.mark.slow  # the real model tiny-math-draft
def test_the_shipped_drafter_drafts_for_tiny_math(math_lm, problem):
    """tiny-math-draft shares tiny-math's tokenizer; its calls are counted apart from the policy's."""
    trace = run_to_trace(math_lm, math_tasks.prompt(problem.question), strategy="step-speculation",
                         params={"draft_model": "tiny-math-draft"}, max_new_tokens=120, chat=False, seed=0)
    spec = trace.finish.extra["speculation"]
    assert spec["draft_model"] == "tiny-math-draft"
    assert spec["draft_calls"] >= spec["draft_tokens"] - spec["accepted_steps"] - spec["rewritten_steps"] > 0
    steps = spec["accepted_steps"] + spec["rewritten_steps"]
    assert spec["policy_calls"] <= 1 + spec["accepted_steps"] + spec["policy_tokens"] + steps
    assert trace.finish.text.strip()
