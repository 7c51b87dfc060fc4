"""ui/admission.py in-process, on a stand-in for Gradio's queue (its `event_queue_per_concurrency_id` and
`active_jobs`): where a joining request is placed, and who is refused. The same rules over real HTTP against
`python app.py` are in tests/test_classroom_queue.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ui import admission


class Line:
    """A Gradio queue with one model group: `join` appends a request as Gradio does, then places it."""

    def __init__(self, running: list[tuple[str, str]] = ()):
        self.events = {}
        self.queue = SimpleNamespace(event_queue_per_concurrency_id={"model": SimpleNamespace(queue=[])},
                                     active_jobs=[[self.event(s, c)] for s, c in running] + [None])

    def event(self, session: str, client: str):
        return SimpleNamespace(session_hash=session, concurrency_id="model",
                               request=SimpleNamespace(scope={"client": (client, 1), "headers": []}),
                               name=f"{session}@{client}")

    def join(self, session: str, client: str) -> None:
        event = self.event(session, client)
        self.queue.event_queue_per_concurrency_id["model"].queue.append(event)
        admission.place(self.queue, event)

    def order(self) -> list[str]:
        return [e.name for e in self.queue.event_queue_per_concurrency_id["model"].queue]


@pytest.fixture(autouse=True)
def direct(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_TRUST_PROXY", "0")


def test_every_sessions_first_run_goes_before_any_sessions_second():
    line = Line()
    for session in ("a", "a", "a", "b", "c"):
        line.join(session, "10.0.0.1")
    assert line.order() == ["a@10.0.0.1", "b@10.0.0.1", "c@10.0.0.1", "a@10.0.0.1", "a@10.0.0.1"]


def test_a_lone_visitor_is_next_rather_than_behind_a_whole_class():
    line = Line(running=[("s0", "school")])
    for i in range(1, 5):
        line.join(f"s{i}", "school")
    line.join("me", "home")
    assert line.order() == ["me@home", "s1@school", "s2@school", "s3@school", "s4@school"]


def test_a_class_goes_one_for_one_with_a_flood_of_sessions_that_came_first():
    line = Line()
    for i in range(6):
        line.join(f"f{i}", "flood")
    for i in range(3):
        line.join(f"c{i}", "class")
    assert line.order() == ["f0@flood", "c0@class", "f1@flood", "c1@class", "f2@flood", "c2@class",
                            "f3@flood", "f4@flood", "f5@flood"]


def test_the_same_round_keeps_its_order():
    line = Line()
    for client in ("x", "y", "z"):
        line.join(client, client)
    assert line.order() == ["x@x", "y@y", "z@z"]


def test_a_session_past_its_runs_and_an_address_past_its_waiting_are_refused(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_RUNS_PER_SESSION", "2")
    monkeypatch.setenv("DECODING_LAB_QUEUED_PER_CLIENT", "3")
    line = Line(running=[("tab", "school")])
    line.join("tab", "school")
    assert "DECODING_LAB_RUNS_PER_SESSION" in admission.refusal(line.queue, "tab", "school", "model")
    assert admission.refusal(line.queue, "tab", "school", "other") is None  # a view update is not a run
    assert admission.refusal(line.queue, "tab2", "school", "model") is None
    line.join("tab2", "school")
    line.join("tab3", "school")
    assert "DECODING_LAB_QUEUED_PER_CLIENT" in admission.refusal(line.queue, "tab4", "school", "model")
    assert admission.refusal(line.queue, "tab4", "home", "model") is None  # another address is not affected


def test_the_defaults_hold_a_class_of_forty(monkeypatch):
    for name in ("DECODING_LAB_QUEUE_SIZE", "DECODING_LAB_QUEUED_PER_CLIENT", "DECODING_LAB_RUNS_PER_SESSION"):
        monkeypatch.delenv(name, raising=False)
    assert admission.queued_per_client() >= 40 and admission.queue_size() >= 40 + admission.queued_per_client()
    assert admission.queued_per_client() <= admission.queue_size() // 2  # one address never fills the queue
