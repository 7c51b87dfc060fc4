"""Beam search as a tree: live beams per step, their lineage, and the hypotheses that finished.

Glossary
    node        a live beam after a step: x = step, y = its rank (0 = best score), coloured by its
                cumulative score (sum of log-probabilities). Only the best path's nodes carry their
                newest token as a label (labels on every node overlap beyond ~10 steps); every
                node's hover names its token and text.
    parent      BeamStep.beams[i]["parent"]: the index (= rank) of the beam it extends in the
                previous step; the first step's parent is the prompt (x = first step - 1, y = 0).
    finished    a hypothesis that ended with a stop token at this step (star, below the live
                beams); its score is length-normalised, so it is not on the live colour scale.
    best path   the lineage of the final text (RunFinished), or of the best live beam while
                streaming, drawn as a thick line.
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding.events import BeamStep, Trace
from visualizers._common import TEMPLATE, beam_steps, empty_figure, label, plotly_safe, token_steps, visible

X_TITLE, Y_TITLE = "step", "beam rank (0 = best)"
COLORS = {"edge": "#9a9a9a", "best": "#e4572e", "finished": "#f2b701"}


def beams_figure(trace: Trace) -> go.Figure:
    """The beam search tree; an empty figure with a note for non-beam traces."""
    steps = beam_steps(trace)
    if not steps:
        start = trace.start
        is_beam = start is not None and start.strategy == "beam" and not token_steps(trace)
        message = "waiting for tokens…" if is_beam else "beam tree: run the 'beam' strategy to see one"
        return empty_figure(message, x_title=X_TITLE, y_title=Y_TITLE)
    root_x = steps[0].step - 1
    best_ids = _best_ids(trace, steps)
    nodes, edges, best_edges, stars, star_edges = [], [], [], [], []
    prev_pos = [(root_x, 0)]  # positions of the previous step's beams, by index
    prev_ids: list[list[int]] = [[]]
    for e in steps:
        for rank, b in enumerate(e.beams):
            px, py = prev_pos[b["parent"]] if b["parent"] < len(prev_pos) else prev_pos[0]
            on_best = b["token_ids"] == best_ids[: len(b["token_ids"])]
            nodes.append((e.step, rank, b, on_best))
            (best_edges if on_best else edges).append((px, py, e.step, rank))
        for j, h in enumerate(e.finished):
            y = len(e.beams) + j
            parent = next((i for i, ids in enumerate(prev_ids) if ids == h["token_ids"][:-1]), 0)
            px, py = prev_pos[parent] if parent < len(prev_pos) else prev_pos[0]
            stars.append((e.step, y, h))
            (best_edges if h["token_ids"] == best_ids else star_edges).append((px, py, e.step, y))
        if e.beams:
            prev_pos = [(e.step, rank) for rank in range(len(e.beams))]
            prev_ids = [b["token_ids"] for b in e.beams]

    fig = go.Figure()
    fig.add_trace(_lines(edges, "lineage", dict(color=COLORS["edge"], width=1.5)))
    fig.add_trace(_lines(star_edges, "to finished", dict(color=COLORS["finished"], width=1.5, dash="dot")))
    fig.add_trace(_lines(best_edges, "best path" if trace.finish else "best live beam",
                         dict(color=COLORS["best"], width=4)))
    # "prompt" above its marker, as the tokens' labels are (at its left it ran into the "0" tick of rank 0)
    fig.add_trace(go.Scatter(x=[root_x], y=[0], mode="markers+text", text=["prompt"], textposition="top center",
                             textfont=dict(size=10),
                             marker=dict(symbol="square", size=11, color="#555"), name="prompt",
                             showlegend=False, hovertemplate="prompt<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[n[0] for n in nodes], y=[n[1] for n in nodes], name="live beam", mode="markers+text",
        text=[plotly_safe(label(n[2]["token_text"], 10)) if n[3] else "" for n in nodes], textposition="top center",
        textfont=dict(size=10),
        marker=dict(size=11, color=[n[2]["score"] for n in nodes], colorscale="Viridis", showscale=True,
                    line=dict(color="#333", width=0.5),
                    colorbar=dict(title=dict(text="score<br>Σ log p"), thickness=12, len=0.8)),
        customdata=[[_hover_text(n[2]["text"]), n[2]["score"], n[2]["logprob"], plotly_safe(label(n[2]["token_text"], 24))]
                    for n in nodes],
        hovertemplate="token %{customdata[3]}<br>%{customdata[0]}<br>score %{customdata[1]:.2f} · "
                      "token log p %{customdata[2]:.2f}"
                      "<extra>step %{x} · rank %{y}</extra>"))
    fig.add_trace(go.Scatter(
        x=[s[0] for s in stars], y=[s[1] for s in stars], name="finished", mode="markers", showlegend=bool(stars),
        marker=dict(symbol="star", size=16, color=COLORS["finished"], line=dict(color="#333", width=0.8)),
        customdata=[[_hover_text(s[2]["text"]), s[2]["score"]] for s in stars],
        hovertemplate="finished: %{customdata[0]}<br>score %{customdata[1]:.3f} (length-normalised)"
                      "<extra>step %{x}</extra>"))
    rows = max(len(e.beams) + len(e.finished) for e in steps)
    fig.update_layout(
        template=TEMPLATE, height=min(140 + 45 * rows, 700), margin=dict(l=55, r=20, t=40, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
        xaxis=dict(title=dict(text=X_TITLE), dtick=1 if len(steps) <= 30 else None),
        yaxis=dict(title=dict(text=Y_TITLE), autorange="reversed", dtick=1, zeroline=False))
    return fig


def _best_ids(trace: Trace, steps: list[BeamStep]) -> list[int]:
    if trace.finish:
        return list(trace.finish.token_ids)
    live = next((e.beams for e in reversed(steps) if e.beams), [])
    return list(live[0]["token_ids"]) if live else []


def _lines(segments, name: str, line: dict) -> go.Scatter:
    """One trace for many segments (x0, y0, x1, y1), separated by None."""
    x, y = [], []
    for x0, y0, x1, y1 in segments:
        x += [x0, x1, None]
        y += [y0, y1, None]
    return go.Scatter(x=x, y=y, mode="lines", name=name, line=line, hoverinfo="skip", showlegend=bool(segments))


def _hover_text(text: str, max_chars: int = 80) -> str:
    """The beam's text, quoted and visible, keeping its end when long."""
    shown = visible(text)
    if len(shown) > max_chars:
        shown = "…" + shown[-(max_chars - 1):]
    return plotly_safe(f"'{shown}'")
