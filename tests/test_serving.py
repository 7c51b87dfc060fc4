"""Serving many requests (issue 29, Flover): every policy gives each request exactly the tokens greedy decoding
gives it alone, whatever the arrival order; temporal fusion never computes for a request that has ended and
lets a new one in at the next step; a static batch makes a late request wait for the whole batch."""

from __future__ import annotations

import random

import pytest

from decoding.run import as_lm, run_to_trace
from decoding.serving import POLICIES, Request, percentile, poisson_arrivals, serve

TINY = "tiny-random"
PROMPTS = ["a", "hello there", "The quick brown fox jumps over", "2 + 2 =", "Stop means stop", "xyz xyz xyz xyz"]


@pytest.fixture(scope="module")
def lm():
    return as_lm(TINY)


def alone(lm, prompt: str, n: int) -> list[int]:
    return run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=n, chat=False).finish.token_ids


def requests(lm, lengths, arrivals) -> list[Request]:
    return [Request(i, tuple(lm.encode_prompt(p, chat=False)[0]), n, a)
            for i, (p, n, a) in enumerate(zip(PROMPTS, lengths, arrivals))]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", [0, 1])  # arrival orders
def test_every_request_gets_its_own_greedy_tokens(lm, policy, seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 9) for _ in PROMPTS]
    arrivals = [rng.choice([0.0, 0.0, 0.02, 0.05]) for _ in PROMPTS]  # several at once, some later
    run = serve(lm, requests(lm, lengths, arrivals), policy, batch_size=3)
    for served in run.served:
        r = served.request
        assert served.token_ids == alone(lm, PROMPTS[r.id], r.max_new_tokens), (policy, r.id)
        assert served.stop_reason in ("eos", "max_new_tokens")
        assert served.started_s >= r.arrival_s and served.token_times == sorted(served.token_times)


def test_fusion_drops_ended_requests_and_takes_new_ones_at_the_next_step(lm):
    run = serve(lm, requests(lm, [2, 8, 8, 3, 8, 8], [0.0] * 6), "fusion", batch_size=8)
    ended = {}
    for start, _, ids in run.steps:
        for served in run.served:
            if served.request.id in ids:
                assert served.token_times[-1] >= start, "a step computed for a request that had ended"
            if served.token_times and served.token_times[-1] < start:
                ended[served.request.id] = True
    assert len(run.steps[0][2]) == 6 and len(run.steps[-1][2]) < 6  # all at once, then the short ones leave
    assert {s.request.id for s in run.served} == set(range(6))


def test_a_static_batch_makes_a_late_request_wait_for_the_batch(lm):
    reqs = requests(lm, [96, 96, 2], [0.0, 0.0, 0.01])  # a batch of about 100 steps, far longer than 10 ms
    run = serve(lm, reqs, "static", batch_size=4)
    late = next(s for s in run.served if s.request.id == 2)
    batch_end = max(s.token_times[-1] for s in run.served if s.request.id in (0, 1))
    assert late.started_s >= batch_end  # it arrived during the batch and waited for its end
    fused = serve(lm, reqs, "fusion", batch_size=4)
    late_fused = next(s for s in fused.served if s.request.id == 2)
    assert late_fused.started_s < max(s.token_times[-1] for s in fused.served if s.request.id in (0, 1))


def test_summary_and_helpers():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5 and percentile([5.0], 95) == 5.0
    times = poisson_arrivals(16, 4.0, seed=3)
    assert len(times) == 16 and times[0] == 0.0 and times == sorted(times) and times == poisson_arrivals(16, 4.0, 3)
    with pytest.raises(ValueError, match="`policy` must be one of one-at-a-time, static, fusion"):
        serve(as_lm(TINY), [], "round-robin")
    with pytest.raises(ValueError, match="`batch_size` must be in"):
        serve(as_lm(TINY), [], "fusion", batch_size=0)
