"""SpecMemo's pictures: the bytes each part of speculative decoding held, and acceptance against budget.

    memory_figure(trace, points=())   top: one stacked bar per round of what speculation holds above the
                                      weights (MB per part: the caches, the verification's logits and
                                      probs, the draft's q; the weights in the title), the budget less the
                                      weights as a dashed line; bottom: acceptance rate against the budget,
                                      one point per run of this session (`budget_point(trace)` makes one).
    budget_point(trace)               {"budget_mb", "acceptance", "tokens_per_round", "peak_mb", "label"}
                                      of a finished speculative run, from its rounds.

Read from SpecRound.extra["memory"] (decoding.speculative.memory); no model.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.events import Trace, stats
from visualizers._common import TEMPLATE, empty_figure, plotly_safe, title_block

MB = 1 << 20
PARTS = {"target weights": "#4c78a8", "draft weights": "#9ecae9", "target cache": "#f58518", "draft cache": "#ffbf79",
         "verify logits": "#54a24b", "verify probs": "#88d27a", "draft q": "#b279a2"}
MAX_POINTS = 40  # runs kept in the acceptance-vs-budget panel


def _rounds(trace: Trace) -> list:
    return [r for r in trace.of_kind("spec_round") if isinstance((r.extra or {}).get("memory"), dict)]


def budget_point(trace: Trace | None) -> dict | None:
    """One run's point for the acceptance-vs-budget panel (None: no rounds with memory records)."""
    rounds = _rounds(trace) if trace is not None else []
    if not rounds or trace.start is None:
        return None
    s = stats(trace)
    budget = rounds[0].extra["memory"].get("budget")
    params = trace.start.params
    return {"budget_mb": round(budget / MB, 3) if budget else None, "acceptance": s.get("acceptance_rate"),
            "tokens_per_round": round(sum(len(r.token_ids) for r in rounds) / len(rounds), 3),
            "peak_mb": round(max(sum(r.extra["memory"]["parts"].values()) for r in rounds) / MB, 3),
            "node_budget": rounds[0].extra["memory"].get("node_budget"),
            "label": f"{trace.start.model} · {params.get('drafter')} · "
                     f"{len(trace.finish.token_ids) if trace.finish else 0} tokens"}


def memory_figure(trace: Trace | None, points: list | tuple = ()) -> go.Figure:
    rounds = _rounds(trace) if trace is not None else []
    if not rounds:
        return empty_figure("Generate a speculative run: the bytes each part holds appear here", height=420,
                            title="Memory (SpecMemo)")
    fig = make_subplots(rows=2, cols=1, row_heights=[0.55, 0.45], vertical_spacing=0.24,
                        subplot_titles=("what speculation holds above the weights, per round (MB)",
                                        "acceptance against memory budget (one point per run)"))
    first = rounds[0].extra["memory"]["parts"]
    weights = first.get("target weights", 0) + first.get("draft weights", 0)
    x = [r.round for r in rounds]
    for part, color in PARTS.items():
        if part.endswith("weights"):
            continue
        y = [r.extra["memory"]["parts"].get(part, 0) / MB for r in rounds]
        if any(y):
            fig.add_trace(go.Bar(x=x, y=y, name=part, marker_color=color, legendgroup="parts",
                                 hovertemplate=f"{plotly_safe(part)}: %{{y:.3f}} MB<extra>round %{{x}}</extra>"), 1, 1)
    memory = rounds[0].extra["memory"]
    budget = memory.get("budget")
    if budget:
        fig.add_trace(go.Scatter(x=[min(x) - 0.5, max(x) + 0.5], y=[(budget - weights) / MB] * 2, mode="lines",
                                 name="budget − weights", line=dict(color="#e45756", dash="dash")), 1, 1)
    shown = [p for p in points if isinstance(p, dict) and p.get("acceptance") is not None][-MAX_POINTS:]
    with_budget = [p for p in shown if p.get("budget_mb")]
    without = [p for p in shown if not p.get("budget_mb")]
    if with_budget:
        fig.add_trace(go.Scatter(x=[p["budget_mb"] for p in with_budget], y=[p["acceptance"] for p in with_budget],
                                 mode="markers+lines", name="run with a budget", line=dict(color="#4c78a8"),
                                 hovertext=[plotly_safe(f"{p['label']}: node budget {p['node_budget']}, "
                                                        f"{p['tokens_per_round']} tokens/round, peak {p['peak_mb']} MB")
                                            for p in with_budget], hoverinfo="text+x+y"), 2, 1)
    for p in without:  # no budget: drawn at its peak
        fig.add_trace(go.Scatter(x=[p["peak_mb"]], y=[p["acceptance"]], mode="markers", name="no budget (at its peak)",
                                 marker=dict(symbol="star", size=12, color="#f58518"), showlegend=p is without[0],
                                 hovertext=plotly_safe(f"{p['label']}: no budget, {p['tokens_per_round']} tokens/round"),
                                 hoverinfo="text+x+y"), 2, 1)
    peak = max(sum(r.extra["memory"]["parts"].values()) for r in rounds)
    nodes = memory.get("node_budget")
    line = (f"SpecMemo: budget {budget / MB:.2f} MB, at most {nodes} draft tokens a round"
            if budget else f"Memory: no budget (at most {nodes} draft tokens a round)")
    title, top = title_block([line], small=f"peak {peak / MB:.2f} MB; weights {weights / MB:.2f} MB (target "
                                           f"{first.get('target weights', 0) / MB:.2f} + draft "
                                           f"{first.get('draft weights', 0) / MB:.2f}), held throughout; run again at "
                                           "other budgets to fill the lower panel", small_width=100)
    fig.update_layout(template=TEMPLATE, height=560, barmode="stack", title=title, margin=dict(l=60, r=20, t=top, b=40),
                      legend=dict(font=dict(size=11)))
    fig.update_xaxes(title_text="round", title_standoff=4, row=1, col=1)
    fig.update_yaxes(title_text="MB", row=1, col=1)
    fig.update_xaxes(title_text="budget (MB)", title_standoff=4, row=2, col=1)
    fig.update_yaxes(title_text="acceptance", range=[0, 1.05], row=2, col=1)
    if not shown:
        fig.add_annotation(text="finished runs appear here", xref="x2 domain", yref="y2 domain", x=0.5, y=0.5,
                           showarrow=False, font=dict(color="#666"))
    return fig
