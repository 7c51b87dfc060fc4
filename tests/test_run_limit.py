"""A run's time limit (`generate(time_limit_s=...)`, the app's DECODING_LAB_RUN_LIMIT_S): a run that computes that
long ends as Stop ends it, keeps what it made, and its RunFinished says it was the limit; the app's worker threads
set the limit for every run they make, so one visitor's run cannot hold the model for hours."""

from __future__ import annotations

import contextvars
import time

import pytest

from decoding.events import Trace
from decoding.run import RUN_TIME_LIMIT, generate, run_to_trace
from ui.worker import limit_note, run_limit_s, stream_in_thread

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
