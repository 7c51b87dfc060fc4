"""Per-session state has a time-to-live and the server a cap on sessions (issue 12: a client that never
comes back must not keep its traces in memory). Gradio's own StateHolder, which the server sweeps
every second, is driven here with the app's real Blocks built under a short TTL.
"""

from __future__ import annotations

import time

import gradio as gr
import pytest
from gradio.state_holder import StateHolder

from ui.launch import launch_kwargs
from ui.wiring import session_cap, session_ttl_s


def states(blocks: gr.Blocks) -> list[gr.State]:
    return [block for block in blocks.blocks.values() if isinstance(block, gr.State)]


@pytest.fixture
def short_ttl(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_SESSION_TTL_S", "1")
    monkeypatch.setenv("DECODING_LAB_SESSION_CAP", "3")


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("DECODING_LAB_SESSION_TTL_S", raising=False)
    monkeypatch.delenv("DECODING_LAB_SESSION_CAP", raising=False)
    assert (session_ttl_s(), session_cap(), launch_kwargs()["state_session_capacity"]) == (3600, 200, 200)
    monkeypatch.setenv("DECODING_LAB_SESSION_TTL_S", "0")
    with pytest.raises(ValueError, match="DECODING_LAB_SESSION_TTL_S must be >= 1, got 0"):
        session_ttl_s()


@pytest.mark.slow  # imports app.py and builds the whole app (15 s); the next test checks one tab's TTL fast
def test_every_tab_keeps_its_state_for_the_ttl_only(short_ttl):
    import app

    blocks = app.build_app()
    found = states(blocks)
    assert len(found) >= 10  # trace and comparison of every lab, the Playground's branch and selection
    assert {s.time_to_live for s in found} == {1}


def test_state_is_dropped_after_the_ttl_and_sessions_are_capped(short_ttl):
    from ui.speculative import demo

    blocks = demo()
    blocks.state_session_capacity = launch_kwargs()["state_session_capacity"]  # what launch() sets
    holder = StateHolder()
    holder.set_blocks(blocks)
    trace_state = states(blocks)[0]
    session = holder["gone"]
    session[trace_state._id] = "a trace of the client that left"
    assert holder["gone"][trace_state._id] == "a trace of the client that left"
    time.sleep(1.2)
    holder["fresh"][trace_state._id] = "a trace set just now"
    holder.delete_all_expired_state()  # what the server does every second
    assert trace_state._id not in holder.session_data["gone"].state_data
    assert holder["gone"][trace_state._id] is None  # back to the initial value: the tab shows "nothing yet"
    assert holder["fresh"][trace_state._id] == "a trace set just now"
    for name in ("b", "c", "d"):
        holder[name][trace_state._id] = name
    assert list(holder.session_data) == ["b", "c", "d"]  # at most 3 sessions: the least recently used went
