"""Drawing is bounded (issue 25): every walk over trace data ends even when a hand-made trace skipped the
load checks, repeated marks are one trace (no layout shape or annotation per mark: plotly copies the layout
on each, so n of them cost n^2), what is drawn is capped and the figure says so, and a worst-case trace at
the bounds of `decoding/trace_checks.py` draws each figure in a few seconds of CPU.

The worst cases come from bench/bench_draw.py (its builders). Time bounds are CPU seconds and generous
(the old code took 20 s to 20 min on these): the counts are what the tests pin.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from decoding.events import ParticleStep
from visualizers import (
    confidence_figure,
    draft_tree_figure,
    lineage_figure,
    overlap_figure,
    search_tree_figure,
    unmask_order_figure,
    weights_figure,
)
from visualizers.particles import path_to_root, search_tree
from visualizers.speculative import tree_layout
from visualizers.token_methods import momentum_graph_figure, superposed_figure

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_draw as bd

CPU_S = 8.0  # per figure, generous: the target is well under 2 s; the old code took 20 s and more


@contextmanager
def ends_within(seconds: int):
    """Fail (instead of hanging the suite) when the block runs longer than `seconds` of wall time."""
    def alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: an unbounded walk?")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def cpu(draw):
    t = time.process_time()
    fig = draw()
    return fig, time.process_time() - t


def notes(fig) -> str:
    return " ".join(a.text for a in fig.layout.annotations if a.name == "capped")


def points(fig) -> int:
    return sum(len(t.x) for t in fig.data if getattr(t, "x", None) is not None)


# ---------------------------------------------------------------- walks that end


def looping_astar() -> list[ParticleStep]:
    """The issue's trace, built without the load checks: step 1 expands node 1 and makes node 1 again."""
    steps, _ = bd.astar_steps(2, 2)
    nodes = steps[1].extra["nodes"]
    nodes[0]["id"] = steps[1].extra["expanded"]["id"]  # a node whose parent is itself
    nodes[0]["complete"] = True
    return steps


def test_a_looping_search_tree_draws_and_its_chosen_walk_ends():
    steps = looping_astar()
    finish = {"particles": [{"text": steps[1].particles[0]["text"]}]}
    with ends_within(20):
        parent, *_ = search_tree(steps)
        fig = search_tree_figure(steps, finish)
    assert all(parent[n] != n for n in parent)  # the second making of node 1 was left out
    assert {t.name for t in fig.data} >= {"tree", "expanded"}


def test_path_to_root_is_bounded_on_a_loop():
    with ends_within(10):
        assert path_to_root({0: None, 1: 1}, 1) == [1]  # its own parent
        assert path_to_root({0: None, 1: 2, 2: 3, 3: 1}, 1) == [1, 2, 3]  # a cycle of three
        assert path_to_root({0: None, 1: 0, 2: 1}, 2) == [2, 1, 0]
        assert path_to_root({0: None}, 7) == []


def test_tree_layout_handles_deep_chains_and_loops():
    with ends_within(20):
        chain = [{"id": i, "parent": i - 1} for i in range(20_000)]  # 20,000 deep: recursion would fail
        pos = tree_layout(chain, 19_999)
        assert pos[19_999] == (20_000, 0) and pos["extra"] == (20_001, 0)
        loop = [{"id": 0, "parent": 1}, {"id": 1, "parent": 0}, {"id": 2, "parent": 2}]  # never reached from -1
        pos = tree_layout(loop, 1)
        assert set(pos) == {-1, 0, 1, 2, "extra"}


# ---------------------------------------------------------------- one trace per kind of mark, capped


def test_diffusion_block_boundaries_are_one_capped_trace():
    steps = bd.diffusion_steps(2048, 1)  # the 4.5 KB trace: block_length 1 on a 2,048 canvas
    fig, spent = cpu(lambda: unmask_order_figure(steps))
    assert fig.layout.shapes == ()
    lines = [t for t in fig.data if t.name == "block boundary"]
    assert len(lines) == 1 and len(lines[0].x) == 3 * 300
    assert "showing 300 of 2,047 block boundaries" in notes(fig)
    assert spent < CPU_S


def test_the_caps_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_MAX_FIGURE_MARKS", "5")
    fig = unmask_order_figure(bd.diffusion_steps(64, 1))
    assert len(next(t for t in fig.data if t.name == "block boundary").x) == 15
    assert "showing 5 of 63 block boundaries" in notes(fig)
    monkeypatch.setenv("DECODING_LAB_MAX_FIGURE_MARKS", "0")
    with pytest.raises(ValueError, match="DECODING_LAB_MAX_FIGURE_MARKS must be >= 1, got 0"):
        unmask_order_figure(bd.diffusion_steps(8, 1))


def test_the_unmask_map_groups_steps_beyond_the_cell_cap(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_MAX_FIGURE_CELLS", "1000")
    steps = bd.diffusion_steps(64, 64)  # 4,096 cells: 5 steps per row
    heat = next(t for t in unmask_order_figure(steps).data if t.name == "committed")
    assert len(heat.z) * len(heat.z[0]) <= 1000 + 64 * 4
    assert list(heat.y)[:3] == [4, 9, 14] and len(heat.y) == 13  # a row is named by its last step
    assert [p for p, v in enumerate(heat.z[0]) if not math.isnan(v)] == [0, 1, 2, 3, 4]  # the row's five commits
    assert "5 steps per row (13 rows for 64 steps)" in notes(unmask_order_figure(steps))


def test_resampling_lines_are_one_trace():
    steps = bd.scaling_steps(320, 8)
    fig, spent = cpu(lambda: weights_figure(steps))
    assert fig.layout.shapes == ()
    lines = [t for t in fig.data if t.name == "resampling"]
    assert len(lines) == 1 and len(lines[0].x) == 3 * 300 and "showing 300 of 320 resampling lines" in notes(fig)
    assert spent < CPU_S


def test_lineage_draws_the_last_steps_within_the_node_cap(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_MAX_FIGURE_NODES", "100")
    fig = lineage_figure(bd.scaling_steps(40, 8), {"chosen": 0})
    drawn = [t for t in fig.data if t.name in ("particle", "dead particle")]
    assert sum(len(t.x) for t in drawn) == 12 * 8 and min(x for t in drawn for x in t.x) == 28
    assert "showing 12 of 40 steps (the last ones)" in notes(fig)


def test_drafted_marks_on_p_vs_q_are_one_text_trace():
    trace = bd.spec_trace(400)  # the 43 KB trace: 400 children of the root
    fig, spent = cpu(lambda: overlap_figure(trace))
    assert len(fig.layout.annotations) <= 2  # the title's pieces and the cap note, not one per drafted token
    marks = next(t for t in fig.data if t.name == "drafted")
    assert len(marks.x) == 300 and set(marks.text) <= {"▼ drafted ✓", "▼ drafted ✗"}
    assert "showing 300 of 400 tokens (the likeliest)" in notes(fig)
    assert spent < CPU_S


def test_the_draft_tree_is_capped_and_keeps_the_accepted_path(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_MAX_FIGURE_NODES", "50")
    trace = bd.spec_trace(400)
    fig = draft_tree_figure(trace)
    assert sum(len(t.x) for t in fig.data if t.name in ("accepted", "rejected", "unvisited")) == 50
    assert "showing 50 of 400 draft nodes" in notes(fig)
    monkeypatch.delenv("DECODING_LAB_MAX_FIGURE_NODES")
    assert cpu(lambda: draft_tree_figure(trace))[1] < CPU_S


def test_a_search_tree_at_the_limits_draws_the_first_nodes_and_the_chosen_path():
    steps, finish = bd.astar_steps(2000, 16)  # 32,001 nodes
    fig, spent = cpu(lambda: search_tree_figure(steps, finish))
    drawn = sum(len(t.x) for t in fig.data if t.name in ("expanded", "frontier", "complete"))
    path = next(t for t in fig.data if t.name == "chosen path")
    assert 3000 <= drawn <= 3000 + 2001 and len(path.x) == 3 * 2000  # the path from depth 2,000 to the prompt
    assert "of 32,001 nodes" in notes(fig)
    assert spent < CPU_S


def test_momentum_edges_are_a_few_traces():
    trace = bd.momentum_trace(2048)
    fig, spent = cpu(lambda: momentum_graph_figure(trace))
    assert len(fig.data) <= 3  # steps, loop edges (one width here), nodes: not one trace per step
    assert spent < CPU_S


def test_superposed_draws_at_most_its_cap_of_drafts():
    trace = bd.momentum_trace(3)
    for e in trace.events[1:-1]:
        e.extra.clear()
        e.extra["drafts"] = [{"prob": 0.5, "text": f"d{k}"} for k in range(500)]
    fig = superposed_figure(trace)
    assert len(fig.data) == 32 and "showing 32 of 500 drafts" in notes(fig)


def test_confidence_points_are_capped(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_MAX_FIGURE_NODES", "10")
    fig = confidence_figure(bd.diffusion_steps(64, 64))
    assert len(fig.data[0].x) <= 10 and "of 64 committed tokens" in notes(fig)


def test_the_benchmark_runs_and_every_figure_draws_quickly(capsys):
    """`python bench/bench_draw.py --quick --rounds 1 --json` (docs/hosting.md's command, on its small traces)."""
    assert bd.main(["--quick", "--rounds", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["figures"]) == 10
    assert not {name: r for name, r in out["figures"].items() if r["cpu_s"] >= CPU_S}


def test_weights_draw_at_most_64_slots_and_the_rest_as_one_bar():
    steps = bd.scaling_steps(20, 256)
    fig, spent = cpu(lambda: weights_figure(steps))
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 65 and bars[-1].name == "192 other slots"
    assert [round(sum(t.y[k] for t in bars), 6) for k in range(20)] == [1.0] * 20  # every stack still sums to 1
    assert "showing 64 of 256 slots" in notes(fig) and spent < CPU_S
