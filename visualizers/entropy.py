"""Uncertainty over time: entropy per step, the chosen token's probability, and the kept-set size.

Glossary
    entropy (raw)        nats, of the model's full distribution at T = 1 (TokenStep.entropy).
    entropy (truncated)  nats, of the distribution the token was actually drawn from, after
                         temperature, penalties and truncation (0 for greedy: one token left).
    p(chosen)            raw probability of the chosen token, on the right axis (0-1).
    kept tokens          how many tokens survived truncation, as faint bars on a log axis; shown
                         only when the strategy truncates (not greedy, some kept_size < V).
A remote engine's run (decoding.remote) sends only the top-k: its raw entropy is a lower bound
(the top-k plus the rest of the mass as one bucket), and the curve's name says so.
Beam traces plot BeamStep.entropy (the best live beam's parent distribution) and the probability
of the best beam's newest token.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from decoding.events import Trace
from visualizers._common import TEMPLATE, beam_steps, empty_figure, label, plotly_safe, token_steps, vocab_size

HEIGHT = 300
X_TITLE, Y_TITLE, Y2_TITLE, Y3_TITLE = "step", "entropy (nats)", "probability", "kept tokens (log)"
COLORS = {"raw": "#4c78a8", "truncated": "#72b7b2", "prob": "#e45756", "kept": "#bab0ac", "selected": "#e4572e"}


def entropy_figure(trace: Trace, *, selected_step: int | None = None) -> go.Figure:
    """Entropy (raw and truncated) and p(chosen) per step; kept-set size when the strategy truncates."""
    steps, beams = token_steps(trace), beam_steps(trace)
    if not steps and not beams:
        return empty_figure(x_title=X_TITLE, y_title=Y_TITLE, height=HEIGHT)
    fig, show_kept = go.Figure(), False
    if steps:
        x = [e.step for e in steps]
        tokens = [plotly_safe(label(e.token_text)) for e in steps]
        bound = steps[0].extra.get("entropy")  # a remote run: "lower bound from the top-k ..."
        raw = "raw, lower bound from the top-k" if bound else "raw"
        fig.add_trace(go.Scatter(
            x=x, y=[e.entropy for e in steps], name=f"entropy ({raw})", mode="lines+markers", customdata=tokens,
            line=dict(color=COLORS["raw"], width=2), marker=dict(size=5),
            hovertemplate=f"%{{customdata}}<br>H {'≥' if bound else '='} %{{y:.2f}} nats<extra>{raw}</extra>"))
        fig.add_trace(go.Scatter(
            x=x, y=[e.entropy_truncated for e in steps], name="entropy (truncated)", mode="lines",
            line=dict(color=COLORS["truncated"], width=2, dash="dash"),
            hovertemplate="H = %{y:.2f} nats<extra>truncated</extra>"))
        fig.add_trace(go.Scatter(
            x=x, y=[e.prob for e in steps], name="p(chosen)", mode="markers", yaxis="y2",
            customdata=[[t, e.rank] for t, e in zip(tokens, steps)], marker=dict(color=COLORS["prob"], size=6),
            hovertemplate="p(%{customdata[0]}) = %{y:.3f} · rank %{customdata[1]}<extra></extra>"))
        show_kept = _truncates(trace, steps)
        if show_kept:
            fig.add_trace(go.Bar(
                x=x, y=[e.kept_size for e in steps], name="kept tokens", yaxis="y3",
                marker=dict(color=COLORS["kept"]), opacity=0.35,
                hovertemplate="kept %{y} tokens<extra></extra>"))
            v = vocab_size(trace) or max(e.kept_size for e in steps)
            fig.update_layout(yaxis3=dict(title=dict(text=Y3_TITLE), type="log", overlaying="y", side="right",
                                          anchor="free", autoshift=True, showgrid=False,
                                          range=[0, math.log10(max(v, 10))]))
    else:
        x = [e.step for e in beams]
        tokens = [plotly_safe(label(e.beams[0]["token_text"])) if e.beams else "(no live beam)" for e in beams]
        fig.add_trace(go.Scatter(
            x=x, y=[e.entropy for e in beams], name="entropy (best beam)", mode="lines+markers", customdata=tokens,
            line=dict(color=COLORS["raw"], width=2), marker=dict(size=5),
            hovertemplate="%{customdata}<br>H = %{y:.2f} nats<extra>best beam</extra>"))
        fig.add_trace(go.Scatter(
            x=x, y=[math.exp(e.beams[0]["logprob"]) if e.beams else None for e in beams],
            name="p(best beam's token)", mode="markers", yaxis="y2", customdata=tokens,
            marker=dict(color=COLORS["prob"], size=6),
            hovertemplate="p(%{customdata}) = %{y:.3f}<extra></extra>"))
    if selected_step is not None:
        fig.add_vline(x=selected_step, line=dict(color=COLORS["selected"], width=2, dash="dot"),
                      annotation_text=f"step {selected_step}", annotation_position="top right",
                      annotation_font=dict(size=10, color=COLORS["selected"]))
    fig.update_layout(
        template=TEMPLATE, height=HEIGHT, margin=dict(l=55, r=110 if show_kept else 60, t=40, b=40),
        hovermode="x unified",
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
        xaxis=dict(title=dict(text=X_TITLE)), yaxis=dict(title=dict(text=Y_TITLE), rangemode="tozero"),
        yaxis2=dict(title=dict(text=Y2_TITLE), overlaying="y", side="right", range=[0, 1.02], showgrid=False),
        bargap=0.3)
    return fig


def _truncates(trace: Trace, steps) -> bool:
    start = trace.start
    if start is not None and start.strategy == "greedy":
        return False
    v = vocab_size(trace)
    return any(v is None or e.kept_size < v for e in steps)
