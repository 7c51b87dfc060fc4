"""A run's time limit (`generate(time_limit_s=...)`, the app's DECODING_LAB_RUN_LIMIT_S): a run that computes that
long ends as Stop ends it, keeps what it made, and its RunFinished says it was the limit; the app's worker threads
set the limit for every run they make, so one visitor's run cannot hold the model for hours."""

from __future__ import annotations

import contextvars
import time

import pytest

from decoding.events import Trace
from decoding.run import RUN_TIME_LIMIT, generate, run_to_trace
from decoding.serving import sample_requests, serve, serve_live
from ui.worker import LimitReached, limit_line, limit_note, run_limit_s, stream_in_thread

CALL_S = 0.01  # each model call slowed to this, so 2048 tokens would take 20 s


@pytest.fixture
def slow_lm(tiny_lm, monkeypatch):
    forward = tiny_lm.model.forward

    def slow(*args, **kwargs):
        time.sleep(CALL_S)
        return forward(*args, **kwargs)

    monkeypatch.setattr(tiny_lm.model, "forward", slow)
    return tiny_lm


def test_a_run_stops_at_its_limit_and_says_so(slow_lm):
    trace = run_to_trace(slow_lm, "hello", strategy="greedy", max_new_tokens=2048, chat=False, time_limit_s=0.3)
    finish = trace.finish
    assert finish.stop_reason == "cancelled" and finish.extra["time_limit_s"] == 0.3
    assert 0 < len(finish.token_ids) < 1000 and finish.elapsed_s < 10  # stopped long before its 20 s
    assert "DECODING_LAB_RUN_LIMIT_S" in limit_note(trace)
    assert Trace.from_json(trace.to_json()).finish.extra["time_limit_s"] == 0.3  # it saves and replays


def test_without_a_limit_the_run_ends_on_its_own_and_the_note_is_empty(tiny_lm):
    trace = run_to_trace(tiny_lm, "hello", strategy="greedy", max_new_tokens=5, chat=False)
    assert trace.finish.stop_reason in ("eos", "max_new_tokens") and "time_limit_s" not in trace.finish.extra
    assert limit_note(trace) == ""


def test_the_context_variable_sets_the_limit_where_generate_is_not_told(slow_lm):
    def run():
        RUN_TIME_LIMIT.set(0.3)
        return run_to_trace(slow_lm, "hello", strategy="greedy", max_new_tokens=2048, chat=False)

    trace = contextvars.copy_context().run(run)
    assert trace.finish.extra["time_limit_s"] == 0.3 and len(trace.finish.token_ids) < 1000
    assert RUN_TIME_LIMIT.get() is None  # only inside that context


@pytest.mark.parametrize("bad", [0, -1, True, "10", float("nan")])
def test_a_bad_limit_is_refused_naming_it(tiny_lm, bad):
    with pytest.raises(ValueError, match="`time_limit_s` must be a positive number of seconds"):
        next(generate(tiny_lm, "hello", time_limit_s=bad))


def test_the_apps_worker_threads_run_under_the_limit(slow_lm, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_RUN_LIMIT_S", "1")

    def work(emit, should_stop):
        for event in generate(slow_lm, "hello", strategy="greedy", max_new_tokens=2048, chat=False,
                              should_stop=should_stop):
            emit(event)

    trace = Trace()
    for batch in stream_in_thread(work):
        for item in batch:
            trace.append(item)
    assert trace.finish.extra["time_limit_s"] == 1.0 and len(trace.finish.token_ids) < 2048


def test_the_limit_defaults_to_600_s_on_a_space_and_none_elsewhere(monkeypatch):
    monkeypatch.delenv("DECODING_LAB_RUN_LIMIT_S", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert run_limit_s() is None
    monkeypatch.setenv("SPACE_ID", "someone/decoding-lab")
    assert run_limit_s() == 600.0
    monkeypatch.setenv("DECODING_LAB_RUN_LIMIT_S", "0")
    assert run_limit_s() is None
    monkeypatch.setenv("DECODING_LAB_RUN_LIMIT_S", "-5")
    with pytest.raises(ValueError, match="DECODING_LAB_RUN_LIMIT_S must be >= 0"):
        run_limit_s()


# Issue 48: one limit for every model-bound run, counted from when it holds the model -----------------------------
def test_preparation_inside_the_slot_counts_toward_the_limit(slow_lm, monkeypatch):
    """Before: a run's clock started at its first step, so building an 8K document (23 s) ran outside the limit."""
    monkeypatch.setenv("DECODING_LAB_RUN_LIMIT_S", "1")

    def work(emit, should_stop):
        time.sleep(0.8)  # preparing (loading, building the prompt) while holding the model
        for event in generate(slow_lm, "hello", strategy="greedy", max_new_tokens=2048, chat=False,
                              should_stop=should_stop):
            emit(event)

    trace, limits = Trace(), []
    start = time.monotonic()
    for batch in stream_in_thread(work):
        for item in batch:
            (limits.append if isinstance(item, LimitReached) else trace.append)(item)
    assert time.monotonic() - start < 5
    assert trace.finish.extra["time_limit_s"] == 1.0 and limits == [LimitReached(1.0)]
    assert trace.finish.elapsed_s < 0.9  # the run's own statistics still count its computing only


def _serve_under_limit(lm, requests, policy="fusion"):
    runs, limits = [], []

    def work(emit, should_stop):
        for run in serve_live(lm, requests, policy, 32, should_stop=should_stop):
            emit(run)

    for batch in stream_in_thread(work):
        for item in batch:
            (limits.append if isinstance(item, LimitReached) else runs.append)(item)
    return runs[-1], limits


def test_serving_stops_at_the_limit_and_says_so(slow_lm, monkeypatch):
    """Before: Serving at the page's maxima held the model 428 s with the limit at 60 s."""
    monkeypatch.setenv("DECODING_LAB_RUN_LIMIT_S", "1")
    requests = sample_requests(slow_lm, 32, 256, [0.0] * 32)
    start = time.monotonic()
    run, limits = _serve_under_limit(slow_lm, requests, "one-at-a-time")
    assert time.monotonic() - start < 5 and limits == [LimitReached(1.0)]
    assert not all(s.stop_reason for s in run.served)  # stopped with requests left
    assert "DECODING_LAB_RUN_LIMIT_S" in limit_line(1.0)


def test_serving_never_waits_for_an_arrival_holding_the_model(tiny_lm):
    """Before: at Poisson rate 0.1 the worker slept between arrivals holding the model (~20 min for three policies),
    and a Stop in a 40 s gap was answered ~33 s later. The stream's clock now skips the idle gaps."""
    requests = sample_requests(tiny_lm, 3, 3, [0.0, 40.0, 400.0])
    start = time.monotonic()
    run = serve(tiny_lm, requests, "fusion")
    assert time.monotonic() - start < 10  # not 400 s
    for served in run.served:
        assert served.started_s >= served.request.arrival_s and len(served.token_ids) == 3
        assert served.ttft_s < 10  # nothing waited: the model was idle when each arrived
    assert run.summary()["seconds"] >= 400  # the timeline keeps the arrivals' times


def test_a_long_prefill_is_chunked_and_stop_lands_between_chunks(tiny_lm, monkeypatch):
    """Before: Stop during an 8K prefill went unanswered until the prefill ended (one model call)."""
    import torch

    from decoding import lm as lm_module
    from decoding.contracts import Cancelled

    monkeypatch.setattr(lm_module, "PREFILL_CHUNK", 16)
    ids = torch.randint(5, 200, (1, 50), generator=torch.Generator().manual_seed(0))
    whole = tiny_lm.forward(ids)
    calls = []
    forward = tiny_lm.model.forward
    monkeypatch.setattr(tiny_lm.model, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    token = lm_module.PREFILL_STOP.set(lambda: False)
    try:
        chunked, last = tiny_lm.forward(ids), tiny_lm.forward(ids, last_only=True)
        assert len(calls) == 8  # 4 chunks each
        assert torch.allclose(chunked.logits, whole.logits, atol=1e-4) and chunked.cache.get_seq_length() == 50
        assert torch.allclose(last.logits[:, -1], whole.logits[:, -1], atol=1e-4) and last.logits.shape[1] == 1
        lm_module.PREFILL_STOP.set(lambda: len(calls) >= 9)  # Stop pressed during the first chunk
        with pytest.raises(Cancelled):
            tiny_lm.forward(ids)
        assert len(calls) == 9  # the next chunk never ran
    finally:
        lm_module.PREFILL_STOP.reset(token)
