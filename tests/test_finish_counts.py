"""Every run's finish event carries the model calls the run made, whatever the family (issue 27: a scaling
run's RunFinished.forward_passes was 0), checked against a forward hook on the model for one method of
each family (the early-exit drafter runs on the target model itself, so its calls are seen too); the
statistics report the same number less a drafter's calls."""

from __future__ import annotations

import pytest

from decoding.events import stats
from decoding.run import as_lm, run_to_trace

CASES = {  # family: (strategy, model, params) -- one method each, the model it runs on
    "token": ("sample", "tiny-random", {"top_k": 5}),
    "beam": ("beam", "tiny-random", {"num_beams": 2}),
    "speculative": ("speculative", "tiny-random", {"drafter": "early-exit", "exit_layer": 1, "draft_length": 2}),
    "scaling": ("best-of-n", "tiny-random", {"n": 3, "max_step_tokens": 3, "reward": "arith-step"}),
    "diffusion": ("diffusion", "tiny-random-diffusion", {}),
    "longctx": ("rag", "tiny-random", {"mode": "iterdrag", "iterations": 1, "step_tokens": 4}),
}


def test_every_family_is_covered():
    from decoding.registry import STRATEGIES

    assert {info.family for info in STRATEGIES.values()} == set(CASES)


@pytest.mark.parametrize("family", sorted(CASES))
def test_the_finish_event_counts_every_model_call(family):
    strategy, model, params = CASES[family]
    lm = as_lm(model, progress=None)
    calls = []
    handle = lm.model.register_forward_hook(lambda module, args, output: calls.append(1))
    try:
        trace = run_to_trace(lm, "1+1=", strategy=strategy, params=params, max_new_tokens=8, seed=0, chat=False)
    finally:
        handle.remove()
    assert trace.finish.forward_passes == len(calls) > 0
    drafted = sum(r.draft_forward_passes for r in trace.of_kind("spec_round"))  # the headline leaves them out
    assert stats(trace)["forward_passes"] == len(calls) - drafted
    assert (drafted > 0) == (family == "speculative")
