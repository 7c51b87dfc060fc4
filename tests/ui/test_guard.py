"""ui/guard.py and the compute slots, in-process: who a session store evicts, the rate windows, the replay
time budget, Markdown-safe status text, first-come-first-served slots. The same attacks over real HTTP
against `python app.py` are in tests/test_hostile.py."""

from __future__ import annotations

import threading
import time

import pytest

from decoding.events import Trace
from ui import guard
from ui.guard import CLIENT, GuardedStateHolder, RateWindow, within_budget


class FakeBlocks:
    """What a session store reads of Blocks: the state components and the default config."""

    def __init__(self):
        import gradio as gr

        with gr.Blocks() as self.demo:
            self.trace = gr.State(None)
            gr.Textbox("x")
        self.demo.state_session_capacity = 5

    @property
    def state_id(self) -> int:
        return self.trace._id


@pytest.fixture
def store(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_SESSIONS_PER_CLIENT", "3")
    blocks = FakeBlocks()
    holder = GuardedStateHolder()
    holder.set_blocks(blocks.demo)
    return holder, blocks.state_id


_TRACES: dict[int, Trace] = {}


def a_trace(tokens: int = 3) -> Trace:
    """A real greedy run of the tiny random model (a fresh copy each call)."""
    if tokens not in _TRACES:
        from decoding.run import run_to_trace

        _TRACES[tokens] = run_to_trace("tiny-random", "hi", max_new_tokens=tokens, chat=False)
    return Trace(list(_TRACES[tokens].events))


def session_of(holder, client: str, name: str):
    token = CLIENT.set(client)
    try:
        return holder[name]
    finally:
        CLIENT.reset(token)


def test_a_flooding_client_evicts_only_its_own_sessions(store):
    holder, state = store
    session_of(holder, "victim", "v")[state] = a_trace()
    for i in range(201):  # what the flood did: every request names a new session
        session_of(holder, "attacker", f"a{i}")
    assert "v" in holder.session_data and isinstance(holder.session_data["v"].state_data[state], Trace)
    owned = [s for s, c in holder.owner.items() if c == "attacker"]
    assert len(owned) == 3  # DECODING_LAB_SESSIONS_PER_CLIENT: the attacker's newest three
    assert owned == ["a198", "a199", "a200"]


def test_at_capacity_a_session_without_a_run_goes_first_then_the_busiest_client(store):
    holder, state = store  # capacity 5
    session_of(holder, "a", "a1")[state] = a_trace()
    session_of(holder, "b", "b1")  # holds nothing
    session_of(holder, "c", "c1")[state] = a_trace()
    session_of(holder, "c", "c2")[state] = a_trace()
    session_of(holder, "d", "d1")[state] = a_trace()
    session_of(holder, "e", "e1")  # full: b1 (no run) goes, although a1 is older
    assert "b1" not in holder.session_data and "a1" in holder.session_data
    session_of(holder, "e", "e1")[state] = a_trace()
    session_of(holder, "f", "f1")  # full of runs: client c holds the most, its oldest goes
    assert "c1" not in holder.session_data
    assert {"a1", "c2", "d1", "e1", "f1"} == set(holder.session_data)


def test_the_memory_budget_drops_the_heaviest_clients_oldest_run(store, monkeypatch):
    holder, state = store
    small = a_trace(3)
    big = Trace(list(small.events) * 100)
    monkeypatch.setenv("DECODING_LAB_SESSION_MEMORY_MB", str((guard.trace_bytes(big) * 2 + guard.trace_bytes(small) * 2)
                                                               // 2**20 + 1))
    monkeypatch.setattr(guard, "session_memory_bytes", lambda: guard.trace_bytes(big) * 2 + guard.trace_bytes(small) * 2)
    session_of(holder, "victim", "v")[state] = small
    session_of(holder, "hog", "h1")[state] = big
    session_of(holder, "hog", "h2")[state] = big
    session_of(holder, "other", "o")[state] = small  # exactly at the budget: nothing goes
    assert {"v", "h1", "h2", "o"} <= set(holder.session_data)
    session_of(holder, "hog", "h3")[state] = big  # over it: the hog's oldest goes, never the victim's
    assert "h1" not in holder.session_data and {"v", "o", "h2", "h3"} <= set(holder.session_data)


def test_trace_bytes_grows_with_the_trace():
    assert guard.trace_bytes(a_trace(100)) > 20 * guard.trace_bytes(a_trace(3)) / 2


@pytest.mark.slow  # builds the whole app (12 s)
def test_a_lazy_session_gives_gradio_the_same_components():
    import app
    from gradio.state_holder import SessionState

    holder = GuardedStateHolder()
    holder.set_blocks(app.demo)
    lazy, full = holder["x"], SessionState(app.demo)
    assert list(lazy.components) == list(full.components)
    start = time.process_time()
    for i in range(50):
        holder[f"s{i}"]
    assert time.process_time() - start < 0.5  # Gradio's own: ~0.16 s each


def test_rate_window_counts_per_client_and_forgets_after_the_window():
    window = RateWindow(lambda: 2, window_s=60)
    assert window.allow("a", now=0) and window.allow("a", now=1)
    assert not window.allow("a", now=2)
    assert window.allow("b", now=2)  # another client is not affected
    assert window.allow("a", now=61)


def test_client_address_from_the_proxy_only_when_trusted(monkeypatch):
    scope = {"client": ("127.0.0.1", 5000), "headers": [(b"x-forwarded-for", b"spoofed, 203.0.113.9")]}
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("DECODING_LAB_TRUST_PROXY", raising=False)
    assert guard.client_of(scope) == "127.0.0.1"
    monkeypatch.setenv("SPACE_ID", "someone/space")
    assert guard.client_of(scope) == "203.0.113.9"  # the proxy's own entry, not what the client wrote first


def test_within_budget_stops_a_long_python_loop_and_leaves_quick_work_alone():
    def forever():
        n = 0
        while True:
            n += 1

    start = time.monotonic()
    with pytest.raises(guard.BudgetExceeded, match="budget of 0.3 s"):
        within_budget(forever, 0.3)
    assert time.monotonic() - start < 5
    assert within_budget(lambda: 42, 5) == 42
    time.sleep(0.1)  # no stray exception lands afterwards


def test_upload_sweep_keeps_the_export_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_EXPORT_DIR", str(tmp_path / "decoding-lab-exports"))
    (tmp_path / "decoding-lab-exports" / "e1").mkdir(parents=True)
    (tmp_path / "decoding-lab-exports" / "e1" / "t.json").write_bytes(b"x" * 4096)
    for i in range(4):
        entry = tmp_path / f"u{i}"
        entry.mkdir()
        (entry / "f.bin").write_bytes(b"x" * 1000)
        time.sleep(0.01)
    import os

    for i in range(4):
        os.utime(tmp_path / f"u{i}", (1000 + i, time.time() - 100 + i))
    gone = guard.sweep_uploads(tmp_path, max_bytes=2500)
    assert sorted(p.name for p in gone) == ["u0", "u1"]
    assert (tmp_path / "decoding-lab-exports" / "e1" / "t.json").exists()


def test_md_esc_shows_markdown_and_html_as_text():
    from ui.widgets import md_esc

    text = md_esc("[Session expired: click to sign in](https://evil.example/x) **big** <b>x</b> www.evil.example")
    assert "](" not in text and "**" not in text and "<b>" not in text and "https://" not in text
    assert "www." not in text
    import html

    assert html.unescape(text) == ("[Session expired: click to sign in](https://evil.example/x) **big** <b>x</b> "
                                   "www.evil.example")


def test_compute_slots_are_first_come_first_served():
    from ui.worker import ComputeSlots

    slots, order = ComputeSlots(1), []
    assert slots.acquire(lambda: False, lambda ahead: None)

    def wait(name: str):
        aheads = []
        assert slots.acquire(lambda: False, aheads.append)
        order.append((name, aheads))
        slots.release()

    threads = []
    for name in "abcd":
        thread = threading.Thread(target=wait, args=(name,))
        thread.start()
        threads.append(thread)
        time.sleep(0.15)  # each is waiting before the next arrives
    slots.release()
    for thread in threads:
        thread.join(10)
    assert [name for name, _ in order] == list("abcd")
    assert [aheads for _, aheads in order] == [[1], [2], [3], [4]]


def test_a_stopped_waiter_leaves_the_line():
    from ui.worker import ComputeSlots

    slots = ComputeSlots(1)
    assert slots.acquire(lambda: False, lambda ahead: None)
    stop = threading.Event()
    got = []
    thread = threading.Thread(target=lambda: got.append(slots.acquire(stop.is_set, lambda ahead: None)))
    thread.start()
    time.sleep(0.1)
    stop.set()
    thread.join(5)
    assert got == [False] and not slots.queue
    slots.release()
    assert slots.acquire(lambda: False, lambda ahead: None)


def test_a_session_keeps_no_drawn_output_in_its_config(store):
    """Gradio stores every output's latest value (whole figures) per session for deep links, which this
    app refuses: a 1.2 MB diffusion replay cost 9.9 MB of server memory per session with them, 5.7 without."""
    holder, state = store
    session = holder["s"]
    textbox = next(k for k in session.blocks_config.blocks if k != state)
    session._update_value_in_config(textbox, "x" * 10_000)
    assert "x" * 10_000 not in repr(session.config_values.get(textbox))
