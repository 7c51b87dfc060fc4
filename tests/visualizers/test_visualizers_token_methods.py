"""The momentum graph, AdaDec pauses and superposed drafts pictures, from recorded traces (saved and loaded)."""

import plotly.graph_objects as go

from decoding import run_to_trace
from decoding.events import Trace
from visualizers import adadec_figure, method_figure, momentum_graph_figure, superposed_figure

PROMPT = "The quick brown fox"


def recorded(tiny_lm, strategy, params, tmp_path):
    path = tmp_path / f"{strategy}.json"
    run_to_trace(tiny_lm, PROMPT, strategy=strategy, params=params, max_new_tokens=12).save(path)
    return Trace.load(path)


def test_momentum_graph_has_a_node_per_distinct_token_and_marks_loops(tiny_lm, tmp_path):
    trace = recorded(tiny_lm, "momentum", {"alpha": 0.0}, tmp_path)  # greedy walk on a random model: loops
    steps = trace.of_kind("token")
    fig = momentum_graph_figure(trace)
    nodes = fig.data[-1]
    assert len(nodes.x) == len({e.token_id for e in steps})
    loops = sum(e.extra["depth"] >= 2 for e in steps[1:])
    assert f"{loops} of {len(steps) - 1} steps close a loop" in fig.layout.title.text
    red_edges = [t for t in fig.data[:-1] if t.line.color == "#e45756"]  # one trace per line width (issue 25)
    assert sum(list(t.x).count(None) for t in red_edges) == loops  # one segment per loop step
    assert len(red_edges) == len({min(e.extra["depth"], 6) for e in steps[1:] if e.extra["depth"] >= 2})


def test_adadec_figure_marks_every_pause_with_its_candidates(tiny_lm, tmp_path):
    trace = recorded(tiny_lm, "adadec", {"threshold": 0.0, "top_k": 2, "lookahead": 2}, tmp_path)
    fig = adadec_figure(trace)
    pauses = next(t for t in fig.data if t.name == "pause")
    assert len(pauses.x) == 12
    assert pauses.hovertext[0].count("<br>") == 2  # a header and one line per candidate
    passes = sum(e.forward_passes for e in trace.of_kind("token"))
    assert f"{passes} forward passes" in fig.layout.title.text


def test_superposed_figure_draws_one_line_per_draft_and_the_cost(tiny_lm, tmp_path):
    trace = recorded(tiny_lm, "superposed", {"num_drafts": 3}, tmp_path)
    fig = superposed_figure(trace)
    assert [t.name for t in fig.data] == ["draft 1", "draft 2", "draft 3"]
    assert "3 drafts in 12 forward passes" in fig.layout.title.text and "about 36" in fig.layout.title.text


def test_empty_traces_give_waiting_figures():
    empty = Trace()
    assert method_figure(empty) is None
    assert isinstance(momentum_graph_figure(empty), go.Figure)  # no events yet: a waiting figure
    assert isinstance(adadec_figure(empty), go.Figure) and isinstance(superposed_figure(empty), go.Figure)


def test_method_figure_follows_the_trace(tiny_lm):
    assert method_figure(run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=3)) is None
    fig = method_figure(run_to_trace(tiny_lm, PROMPT, strategy="superposed", max_new_tokens=3))
    assert fig.data[0].name == "draft 1"
