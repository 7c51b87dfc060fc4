"""Exact extraction (exact-extract) as a start x end heat-map of span log-probabilities.

Reads the record the strategy puts on its first token event (`TokenStep.extra["extract"]`, see
`decoding/token/extractive.py`); no model.

Glossary
    cell        row = the span's first passage token, column = its last; colour = log P(span, then
                the answer ends). Cells below the diagonal or longer than `max_span_tokens` are empty.
    best span   the cell with the highest exact log-probability (star): what exact-extract answers.
    greedy      the answer greedy decoding gives from the same prompt (cross), when it is a span
                of the passage; otherwise the title says what greedy wrote instead.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from decoding.events import Trace
from visualizers._common import (CELLS, TEMPLATE, cap, empty_figure, label, note_capped, plotly_safe, shown_of,
                                 title_block, token_steps)

X_TITLE, Y_TITLE = "span ends at passage token", "span starts at passage token"


def extract_record(trace: Trace) -> dict | None:
    """The exact-extract record of a trace, or None."""
    return next((e.extra["extract"] for e in token_steps(trace) if "extract" in e.extra), None)


def span_heatmap_figure(trace: Trace) -> go.Figure:
    """Heat-map of every span's exact log-probability, best span and greedy answer marked."""
    record = extract_record(trace)
    if record is None:
        return empty_figure("span heat-map: run the 'exact-extract' strategy to see one", x_title=X_TITLE, y_title=Y_TITLE)
    tokens, rows, length = record["passage_tokens"], record["logprobs"], record["max_span_tokens"]
    total = len(tokens)
    n = min(total, math.isqrt(cap(CELLS)))  # an n x n map: the first passage tokens, within the cap
    z = [[None] * n for _ in range(n)]  # (start, end)
    for start, row in enumerate(rows[:n]):
        for k, value in enumerate(row[:length]):
            if start + k < n:
                z[start][start + k] = value
    ticks = [f"{i}: {plotly_safe(label(t, 10))}" for i, t in enumerate(tokens[:n])]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(n)), y=list(range(n)), colorscale="Viridis", hoverongaps=False, name="spans",
        colorbar=dict(title=dict(text="log P(span)"), thickness=12),
        customdata=[[ticks[s] + " … " + ticks[e] for e in range(n)] for s in range(n)],
        hovertemplate="%{customdata}<br>log P %{z:.2f}<extra>start %{y} · end %{x}</extra>"))
    best = record["best"]
    fig.add_trace(go.Scatter(x=[best["end"]], y=[best["start"]], mode="markers", name="exact best span",
                             marker=dict(symbol="star", size=18, color="#e4572e", line=dict(color="#fff", width=1)),
                             hovertemplate=plotly_safe(f"exact best: '{best['text']}'")
                             + f"<br>log P {best['logprob']:.2f}<extra></extra>"))
    greedy = record["greedy"]
    if greedy["span"] is not None:
        fig.add_trace(go.Scatter(x=[greedy["span"][1]], y=[greedy["span"][0]], mode="markers", name="greedy answer",
                                 marker=dict(symbol="x", size=14, color="#f2b701", line=dict(color="#333", width=1)),
                                 hovertemplate=plotly_safe(f"greedy: '{greedy['text']}'") + "<extra></extra>"))
        greedy_line = f"greedy: '{label(greedy['text'], 40)}' (log P {greedy['logprob']:.2f})"
    else:
        greedy_line = f"greedy: '{label(greedy['text'], 40)}' is not a span of the passage"
    title, top = title_block([plotly_safe(f"exact best span: '{label(best['text'], 40)}' (log P {best['logprob']:.2f})"),
                              plotly_safe(greedy_line)],
                             small=plotly_safe(f"{record['num_spans']} spans scored exactly"))
    fig.update_layout(template=TEMPLATE, title=title, height=min(260 + 14 * n, 800),
                      margin=dict(l=60, r=20, t=top, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
                      xaxis=dict(title=dict(text=X_TITLE)), yaxis=dict(title=dict(text=Y_TITLE), autorange="reversed"))
    return note_capped(fig, [shown_of(n, total, "passage tokens")])
