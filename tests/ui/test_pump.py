"""ui.worker.pump_views: how the worker's items become view updates (issue 26: the tabs and Compare share it)."""

from __future__ import annotations

import pytest

from decoding.contracts import StepProgress
from decoding.events import RunFinished
from ui import worker
from ui.worker import Status, pump_views


def fake_pump(batches):
    def stream_in_thread(work, on_late=None, **_):
        yield from batches
    return stream_in_thread


def updates_for(monkeypatch, batches, quick=True):
    monkeypatch.setattr(worker, "stream_in_thread", fake_pump(batches))
    taken = []
    return list(pump_views(None, lambda item: taken.append(item) or True, lambda: {"render": len(taken)},
                           lambda status, progress: f"{status}|{progress.step if progress else '-'}",
                           quick=(lambda progress: {"quick": progress.step if progress else None}) if quick else None))


def progress(step: int) -> StepProgress:
    return StepProgress(step=step, texts=["a"], new_texts=["b"], tokens_spent=1)


FINISHED = RunFinished(text="", token_ids=[], stop_reason="max_new_tokens", elapsed_s=0.1)


@pytest.mark.parametrize("batches", [
    [[progress(0)], [FINISHED]],  # a quiet machine: the progress arrives alone
    [[progress(0), FINISHED]],  # a loaded one: progress and event in one batch
])
def test_a_steps_progress_is_shown_before_its_event_however_the_items_are_batched(monkeypatch, batches):
    updates = updates_for(monkeypatch, batches)
    quick = [u["quick"] for u in updates if "quick" in u]
    assert quick[:2] == [0, None]  # the step under way, then its event in
    assert any(u.get("status") == "None|0" for u in updates)


def test_status_lines_without_events_and_no_quick_view(monkeypatch):
    updates = updates_for(monkeypatch, [[Status("Loading…")], [], [FINISHED]], quick=False)
    assert updates[0] == {"status": "Loading…|-"}
    assert all("quick" not in u for u in updates) and updates[-1]["render"] == 1
