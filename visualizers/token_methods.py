"""Pictures of three Playground methods, read from TokenStep.extra only (no model, no tokenizer).

    momentum_graph_figure(trace)   the walk on the graph of written tokens; loops (revisited nodes)
                                   in red, the deeper the loop the thicker the edge.
    adadec_figure(trace)           entropy per step with the threshold; each pause is a marker whose
                                   hover lists its candidates, their lookahead text and scores.
    superposed_figure(trace)       the k drafts' probabilities per step, hover = draft text; the
                                   title gives the cost: one pass per step vs k per step for k runs.
    method_figure(trace)           whichever of these fits the trace's strategy (None otherwise); LUD,
                                   HAMburger and FTP draw theirs in visualizers.faster.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from decoding.events import Trace
from visualizers._common import TEMPLATE, empty_figure, label, note_capped, plotly_safe, shown_of, title_block, token_steps
from visualizers.beams import _lines

HEIGHT = 360
SHOWN_DRAFTS = 32  # superposed decoding: lines drawn (one trace each)
LOOP, NEW, PAUSE = "#e45756", "#4c78a8", "#f58518"


def momentum_graph_figure(trace: Trace) -> go.Figure:
    """Nodes = distinct tokens written (first-visit order around a circle), edges = the walk's steps."""
    steps = [e for e in token_steps(trace) if "depth" in e.extra]
    if not steps:
        return empty_figure(title="Momentum: graph of the written tokens", height=HEIGHT)
    order: dict[int, int] = {}
    texts: dict[int, str] = {}
    visits: dict[int, int] = {}
    for e in steps:
        order.setdefault(e.token_id, len(order))
        texts[e.token_id] = e.token_text
        visits[e.token_id] = visits.get(e.token_id, 0) + 1
    n = len(order)
    pos = {t: (math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)) for t, i in order.items()}
    fig = go.Figure()
    loops = 0
    edges: dict[int, list] = {}  # line width -> segments: one trace per width, not one per step
    for prev, e in zip(steps, steps[1:]):
        depth = e.extra["depth"] if isinstance(e.extra["depth"], int) else 0
        loop = depth >= 2  # repeats at least a bigram: the walk goes round a visited edge
        loops += loop
        edges.setdefault(1 + min(depth, 6) if loop else 0, []).append((*pos[prev.token_id], *pos[e.token_id]))
    for width, segments in sorted(edges.items()):
        fig.add_trace(_lines(segments, "loop" if width else "step",
                             dict(color=LOOP if width else "#bab0ac", width=width or 1)))
        fig.data[-1].showlegend = False
    ids = list(order)
    fig.add_trace(go.Scatter(
        x=[pos[t][0] for t in ids], y=[pos[t][1] for t in ids], mode="markers+text", name="token (node)",
        text=[plotly_safe(label(texts[t], 10)) for t in ids], textposition="top center",
        marker=dict(size=[8 + 3 * min(visits[t], 8) for t in ids],
                    color=[LOOP if visits[t] > 1 else NEW for t in ids]),
        hovertext=[plotly_safe(f"{label(texts[t])} visited {visits[t]}×") for t in ids], hoverinfo="text"))
    alpha = steps[0].extra.get("alpha")
    title, top = title_block([f"Momentum (alpha {plotly_safe(alpha)}): {n} nodes, "
                              f"{loops} of {len(steps) - 1} steps close a loop"],
                             small="red = revisited node / loop edge (thicker = deeper repeated n-gram)")
    fig.update_layout(template=TEMPLATE, height=HEIGHT, title=title, margin=dict(l=20, r=20, t=top, b=20))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, scaleanchor="x")
    return fig


def adadec_figure(trace: Trace) -> go.Figure:
    """Entropy per step, the pause threshold, and the pauses with their reranked candidates on hover."""
    steps = [e for e in token_steps(trace) if "paused" in e.extra]
    if not steps:
        return empty_figure(title="AdaDec: entropy and pauses", height=HEIGHT, x_title="step", y_title="entropy (nats)")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[e.step for e in steps], y=[e.entropy for e in steps], mode="lines+markers",
                             name="entropy", line=dict(color=NEW), hovertext=[plotly_safe(label(e.token_text)) for e in steps],
                             hoverinfo="x+y+text"))
    threshold = steps[0].extra["threshold"]
    fig.add_hline(y=threshold, line=dict(color="#888", dash="dash"), annotation_text=plotly_safe(f"threshold {threshold:g}"))
    pauses = [e for e in steps if e.extra["paused"]]

    def hover(e) -> str:
        x = e.extra
        rows = [f"{'→ ' if i == x['chosen'] else ''}{label(c)} + {label(look, 30)}: {s:.2f}"
                for i, (c, look, s) in enumerate(zip(x["candidate_texts"], x["lookahead_texts"], x["scores"]))]
        return plotly_safe(f"pause at step {e.step}") + "<br>" + "<br>".join(plotly_safe(r) for r in rows)

    fig.add_trace(go.Scatter(x=[e.step for e in pauses], y=[e.entropy for e in pauses], mode="markers", name="pause",
                             marker=dict(color=PAUSE, size=12, symbol="diamond"),
                             hovertext=[hover(e) for e in pauses], hoverinfo="text"))
    changed = sum(e.extra["chosen"] != 0 for e in pauses)
    passes = sum(e.forward_passes for e in steps)
    title, top = title_block([f"AdaDec: {len(pauses)} pauses in {len(steps)} steps, {changed} changed greedy's token"],
                             small=f"{passes} forward passes (lookahead calls included); hover a pause for its candidates")
    fig.update_layout(template=TEMPLATE, height=HEIGHT, title=title, margin=dict(l=50, r=20, t=top, b=40))
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="entropy (nats)")
    return fig


def superposed_figure(trace: Trace) -> go.Figure:
    """Each draft slot's probability per step (log axis); hover shows the draft's text at that step."""
    steps = [e for e in token_steps(trace) if "drafts" in e.extra]
    if not steps:
        return empty_figure(title="Superposed decoding: drafts", height=HEIGHT, x_title="step", y_title="draft probability")
    k = max(len(e.extra["drafts"]) for e in steps)
    fig = go.Figure()
    for slot in range(min(k, SHOWN_DRAFTS)):  # one trace per draft: the first ones, within a small cap
        rows = [(e.step, e.extra["drafts"][slot]) for e in steps if slot < len(e.extra["drafts"])]
        fig.add_trace(go.Scatter(x=[s for s, _ in rows], y=[max(d["prob"], 1e-300) for _, d in rows],
                                 mode="lines+markers", name=f"draft {slot + 1}",
                                 hovertext=[plotly_safe(label(d["text"][-60:], 60)) for _, d in rows], hoverinfo="text+y"))
    passes = sum(e.forward_passes for e in steps)
    title, top = title_block([f"Superposed decoding: {k} drafts in {passes} forward passes"],
                             small=f"{k} independent runs would take about {k * passes}; hover for each draft's text")
    fig.update_layout(template=TEMPLATE, height=HEIGHT, title=title, margin=dict(l=60, r=20, t=top, b=40))
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="draft probability", type="log")
    return note_capped(fig, [shown_of(min(k, SHOWN_DRAFTS), k, "drafts")])


def _span_heatmap(trace: Trace) -> go.Figure:
    from visualizers.extract import span_heatmap_figure  # (its own module: extractive QA)

    return span_heatmap_figure(trace)


def _faster(name: str):
    def draw(trace: Trace) -> go.Figure:
        import visualizers.faster as faster  # (its own module: LUD, HAMburger, FTP)

        return getattr(faster, f"{name}_figure")(trace)

    return draw


METHOD_FIGURES = {"momentum": momentum_graph_figure, "adadec": adadec_figure, "superposed": superposed_figure,
                  "exact-extract": _span_heatmap, "lud": _faster("lud"), "hamburger": _faster("hamburger"),
                  "ftp": _faster("ftp")}


def method_figure(trace: Trace) -> go.Figure | None:
    """The picture of the trace's strategy when it has one here, else None."""
    start = trace.start
    draw = METHOD_FIGURES.get(start.strategy) if start is not None else None
    return draw(trace) if draw else None
