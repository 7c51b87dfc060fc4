"""Trace values reach plotly's titles, annotations, hovers and labels as plain text (issue 25).

plotly renders a pseudo-HTML subset in those strings (`<a href>`, `<span style>`, `<b>`, `<br>`): an
unescaped value from a shared trace became a 30 px red "Session expired: click to sign in" linking out. The
load checks now refuse these values where a number belongs (tests/test_trace_checks_structures.py); the
views escape them anyway, because a notebook can hand them any trace. Each test puts the payloads into one
field, draws, and looks for a live tag in every string of the figure.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from decoding.events import Trace
from visualizers import (
    draft_tree_figure,
    lineage_figure,
    search_tree_figure,
    weights_figure,
)
from visualizers.extract import span_heatmap_figure
from visualizers.token_methods import momentum_graph_figure

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_draw as bd

LINK = "<a href='http://x'>Session expired</a>"
STYLE = "<span style='font-size:30px;color:red'>Session expired: click to sign in</span>"
PAYLOADS = [LINK, STYLE]


def strings(value):
    """Every string inside a figure's JSON (data and layout)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from strings(v)
    elif isinstance(value, np.ndarray):  # customdata tables (visualizers._common.table)
        yield from strings(value.tolist())


def assert_plain(fig, payload: str) -> None:
    texts = list(strings(fig.to_plotly_json()))
    live = [t for t in texts if "<a href='http://x'" in t or "<span style='font-size:30px" in t]  # a real "<" opens a tag
    assert not live, live[:3]
    assert any("Session" in t for t in texts), "the payload should be shown, as text"


@pytest.mark.parametrize("payload", PAYLOADS)
def test_momentum_alpha_in_the_title(payload):
    trace = bd.momentum_trace(4)
    for e in trace.events[1:-1]:
        e.extra["alpha"] = payload
    assert_plain(momentum_graph_figure(trace), payload)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_exact_extract_num_spans_and_texts(payload):
    trace = bd.momentum_trace(2)
    trace.events[1].extra.clear()
    trace.events[1].extra["extract"] = {
        "passage_tokens": ["a", payload, "c"], "max_span_tokens": 2, "logprobs": [[-1.0, -2.0], [-1.5, None]],
        "best": {"start": 0, "end": 1, "text": payload, "logprob": -1.0},
        "greedy": {"text": payload, "span": [1, 1], "logprob": -1.5}, "num_spans": payload}
    assert_plain(span_heatmap_figure(trace), payload)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_deer_diffusion_block_and_rasd_sources_in_the_draft_tree(payload):
    r = dataclasses.replace(bd.spec_trace(3).events[1], extra={"diffusion_block": payload, "sources": [payload] * 3})
    assert_plain(draft_tree_figure(Trace([bd.start("speculative"), r])), payload)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_search_tree_and_particle_texts(payload):
    steps, finish = bd.astar_steps(3, 2)
    for s in steps:
        for p in s.particles:
            p["text"] = payload
    assert_plain(search_tree_figure(steps, finish), payload)
    steps = bd.scaling_steps(3, 2)
    for s in steps:
        for p in s.particles:
            p.update(step_text=payload, text=payload, answer=payload, finished=True)
    assert_plain(weights_figure(steps), payload)
    assert_plain(lineage_figure(steps, {"chosen": 0}), payload)
