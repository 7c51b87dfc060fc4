"""Stop means stop, for every lab (issue 12): the engine.

Every strategy asks the stop flag before each model call (drafts, verifications, particle batches,
reward and judge calls), so Stop pressed during model call k means no call k + 1.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from decoding.diffusion.lm import DiffusionLM
from decoding.lm import LM
from decoding.registry import STRATEGIES
from decoding.run import as_lm, run_to_trace
from decoding.scaling import scoring

TINY, TINY_DRAFT, TINY_DIFFUSION = "tiny-random", "tiny-random-draft", "tiny-random-diffusion"
PROMPT = "Stop means stop: 2 + 3 = 5\n4 + 4 ="


class Probe:
    """Every model call (causal `LM.forward`, the diffusion model's one call site) is counted, slowed to
    `call_s` and can set the stop flag from inside call number `stop_at` (Stop pressed during it)."""

    def __init__(self, monkeypatch, call_s: float = 0.0):
        self.call_s, self.stop_at = call_s, None
        self.calls, self.stop, self.began = 0, threading.Event(), threading.Event()
        self.lock = threading.Lock()
        for cls, name in ((LM, "forward"), (DiffusionLM, "_call")):
            monkeypatch.setattr(cls, name, self._counted(getattr(cls, name)))

    def reset(self, stop_at: int | None = None) -> None:
        self.calls, self.stop_at = 0, stop_at
        self.stop.clear()

    def _counted(self, call):
        def counted(lm, *args, **kwargs):
            with self.lock:
                self.calls += 1
                if self.calls == self.stop_at:
                    self.stop.set()
            self.began.set()
            if self.call_s:
                time.sleep(self.call_s)
            return call(lm, *args, **kwargs)

        return counted


# The engine: Stop during model call k, and call k + 1 never starts ------------------------------------
def byte_judge(lm):
    """`lm_judge` for the byte-level tiny model (it has no single-token Yes): a model call per judgement."""
    def judge(prompt: str) -> float:
        ids, _, _ = lm.encode_prompt(prompt, chat=False)
        probs = torch.softmax(lm.forward(torch.tensor([ids[-64:]]), last_only=True).logits[0, -1], -1)  # (V,)
        return float(probs.max())

    return judge


MODEL_DRAFT = {"drafter": "model", "draft_model": TINY_DRAFT, "draft_length": 3}
SCALING = {"n": 4, "max_step_tokens": 3, "reward": "lm-judge", "temperature": 1.0}  # batch calls and judge calls
CASES = [
    ("greedy", {}), ("sample", {"top_k": 20}), ("mirostat", {}), ("contrastive", {"top_k": 3}),
    ("beam", {"num_beams": 3}),
    ("speculative", MODEL_DRAFT | {"tree": "static"}),
    ("speculative", MODEL_DRAFT | {"tree": "dynamic", "temperature": 1.0}),
    ("speculative", {"drafter": "early-exit", "exit_layer": 2, "draft_length": 3}),
    ("speculative", {"drafter": "early-exit"}),  # DEL: the layer and length change every round
    ("speculative", {"drafter": "prompt-lookup"}), ("speculative", {"drafter": "token-recycling"}),
    ("best-of-n", SCALING), ("majority-vote", SCALING), ("reward-beam", SCALING | {"beam_width": 2}),
    ("particle-filter", SCALING), ("first-finish", {"n": 4, "chunk_tokens": 3, "reward": "lm-judge"}),
    ("diffusion", {}), ("diffusion", {"block_length": 4, "remasking": "margin"}),
    ("diffusion", {"sampler": "freedave", "draft_steps": 3}),
]


def test_every_shipped_strategy_is_covered():
    shipped = {name for name, info in STRATEGIES.items() if info.fn.__module__.startswith("decoding.")}
    assert shipped == {strategy for strategy, _ in CASES}


@pytest.mark.parametrize("strategy, params", CASES, ids=[f"{s}-{json.dumps(p)}" for s, p in CASES])
def test_stop_during_any_model_call_ends_the_run_before_the_next(strategy, params, monkeypatch):
    monkeypatch.setattr(scoring, "lm_judge", byte_judge)
    lm = as_lm(TINY_DIFFUSION if strategy == "diffusion" else TINY)
    probe = Probe(monkeypatch)
    kwargs = dict(strategy=strategy, params=params, max_new_tokens=8, seed=0,
                  chat=False)
    full = run_to_trace(lm, PROMPT, **kwargs)
    total = probe.calls
    assert total >= 4 and full.finish.stop_reason != "cancelled"
    for stop_at in range(1, total):  # Stop pressed during every call but the last
        probe.reset(stop_at)
        trace = run_to_trace(lm, PROMPT, should_stop=probe.stop.is_set, **kwargs)
        assert probe.calls == stop_at, f"Stop came during model call {stop_at}; {probe.calls - stop_at} more ran"
        assert trace.finish.stop_reason == "cancelled" and trace.events[-1] is trace.finish


def test_a_step_cut_short_is_dropped_and_the_answer_comes_from_the_last_step_shown(monkeypatch):
    monkeypatch.setattr(scoring, "lm_judge", byte_judge)
    probe = Probe(monkeypatch)
    kwargs = dict(strategy="particle-filter", params=SCALING, max_new_tokens=12, seed=0, chat=False)
    probe.reset(stop_at=12)  # in the second step's judge calls (a step: 3 batch calls, 4 judge calls)
    trace = run_to_trace(TINY, PROMPT, should_stop=probe.stop.is_set, **kwargs)
    (step,) = trace.of_kind("particles")
    assert trace.finish.stop_reason == "cancelled" and probe.calls == 12
    texts = {p["text"] for p in step.particles}  # after the step, before resampling
    final = trace.finish.extra["particles"]
    assert trace.finish.text in texts and {p["text"] for p in final} <= texts  # no token of the dropped step
    assert [p["num_tokens"] for p in final] == [3] * 4
