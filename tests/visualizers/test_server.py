"""The Serving tab's "This server" panel: the live batch drawn from a snapshot of the batcher's log (issue 44)."""

from __future__ import annotations

from decoding.batching import MemberEvent, PassRecord, ServerActivity
from ui.serving_views import server_line
from visualizers.server import server_figure, server_summary


def snapshot() -> ServerActivity:
    passes = [PassRecord("m", 90.0, 90.5, (1,), True),  # run 1's prefill
              PassRecord("m", 91.0, 91.1, (1, 2), False), PassRecord("m", 91.2, 91.3, (1, 2, 3), False),
              PassRecord("m", 91.4, 91.5, (2, 3), False)]
    members = [MemberEvent("m", 89.9, 1, True), MemberEvent("m", 90.9, 2, True), MemberEvent("m", 91.15, 3, True),
               MemberEvent("m", 91.35, 1, False)]
    return ServerActivity(now=100.0, window_s=30.0, passes=passes, members=members, live={"m": 2})


def test_summary_counts_a_token_per_row_of_each_step():
    s = server_summary(snapshot())
    assert (s["steps"], s["solo_calls"], s["tokens"], s["max_rows"], s["runs_now"]) == (3, 1, 7, 3, 2)
    assert abs(s["mean_step_s"] - 0.1) < 1e-9 and abs(s["tokens_per_s"] - 7 / 30) < 1e-9
    assert "2 runs in the batch now" in server_line(s).replace("**", "")


def test_figure_shows_rows_per_step_and_each_runs_stay():
    fig = server_figure(snapshot())
    bars, solo, lanes = fig.data
    assert list(bars.y) == [2, 3, 2] and len(solo.x) == 1
    xs = [x for x in lanes.x if x is not None]
    assert len(xs) == 6 and abs(xs[0] + 10.1) < 1e-9 and abs(xs[1] + 8.65) < 1e-9  # run 1: joined, left
    assert xs[3] == 0.0  # run 2 is still in the batch: its line reaches now
    empty = server_figure(ServerActivity(100.0, 30.0, [], [], {}))
    assert "no runs" in empty.layout.annotations[0].text
