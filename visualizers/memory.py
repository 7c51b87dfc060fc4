"""SpecMemo's pictures: the bytes each part of speculative decoding held, and acceptance against budget.

    memory_figure(trace, points=())   top: one stacked bar per round of what speculation holds above the
                                      weights (MB per part: the caches, the verification's logits and
                                      probs, the draft's q; the weights in the title), the budget less the
                                      weights as a dashed line; bottom: acceptance rate against the budget,
                                      one point per run of this session (`budget_point(trace)` makes one),
                                      a line per setting (all but the budget), each point "run k".
    budget_point(trace)               {"budget_mb", "acceptance", "tokens_per_round", "peak_mb", "label",
                                      "setting", "setting_label"} of a finished speculative run, from its rounds.

Read from SpecRound.extra["memory"] (decoding.speculative.memory); no model.
"""

from __future__ import annotations

import json

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.events import Trace, stats
from visualizers._common import TEMPLATE, empty_figure, plotly_safe, title_block

MB = 1 << 20
PARTS = {"target weights": "#4c78a8", "draft weights": "#9ecae9", "target cache": "#f58518", "draft cache": "#ffbf79",
         "verify logits": "#54a24b", "verify probs": "#88d27a", "draft q": "#b279a2"}
MAX_POINTS = 40  # runs kept in the acceptance-vs-budget panel
SETTING_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#9d755d", "#eeca3b")


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
                     f"{len(trace.finish.token_ids) if trace.finish else 0} tokens",
            "setting": setting_of(trace), "setting_label": setting_label(trace)}


def setting_of(trace: Trace) -> str:
    """What a run's acceptance depends on besides its memory budget (model, prompt, length, seed, every other
    parameter), as one string: runs of one setting at several budgets are one line of the lower panel."""
    start = trace.start
    params = {k: v for k, v in start.params.items() if "memory_budget" not in k}
    return json.dumps([start.model, start.prompt, start.max_new_tokens, start.seed, start.chat, params], sort_keys=True,
                      default=str)


def setting_label(trace: Trace) -> str:
    """The setting in a few words, for the legend: model, drafter, tree and temperature."""
    p = trace.start.params
    return f"{trace.start.model} · {p.get('drafter')} · {p.get('tree')} · T {p.get('temperature', 0):g}"


def memory_figure(trace: Trace | None, points: list | tuple = (), *, pending: bool = False) -> go.Figure:
    """The figure (see the module docstring); `pending`: a run is under way (its bytes are drawn when it ends)."""
    rounds = _rounds(trace) if trace is not None else []
    if not rounds:
        message = ("A run is under way: its memory is drawn when it ends, with the earlier runs' points" if pending
                   else "Generate a speculative run: the bytes each part holds appear here")
        return empty_figure(message, height=420, title="Memory (SpecMemo)")
    fig = make_subplots(rows=2, cols=1, row_heights=[0.55, 0.45], vertical_spacing=0.24,
                        subplot_titles=("what speculation holds above the weights, per round (MB)",
                                        "acceptance against memory budget (a point per run; ★ no budget, "
                                        "at its peak)"))
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
    _budget_panel(fig, shown)
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


def _budget_panel(fig: go.Figure, shown: list) -> None:
    """The lower panel: a line per setting (`setting_of`) through its runs' budgets, named in the legend, each
    point marked "run k" (its place among the session's runs); a run without a budget is a star at its peak."""
    groups: dict = {}
    for k, p in enumerate(shown, start=1):
        groups.setdefault(p.get("setting") or p.get("label"), []).append((k, p))
    labels: list = []
    for g, members in enumerate(groups.values()):
        label = members[0][1].get("setting_label") or members[0][1].get("label", "")
        label = label if label not in labels else f"{label} · setting {g + 1}"  # same words, another prompt or length
        labels.append(label)
        color = SETTING_COLORS[g % len(SETTING_COLORS)]
        budgeted = sorted((m for m in members if m[1].get("budget_mb")), key=lambda m: m[1]["budget_mb"])
        peaks = [m for m in members if not m[1].get("budget_mb")]
        for part, x_key, symbol in ((budgeted, "budget_mb", "circle"), (peaks, "peak_mb", "star")):
            if not part:
                continue
            fig.add_trace(go.Scatter(
                x=[p[x_key] for _, p in part], y=[p["acceptance"] for _, p in part],
                mode="markers+lines+text" if symbol == "circle" else "markers+text", name=plotly_safe(label),
                legendgroup=f"setting {g}", showlegend=part is (budgeted or peaks), text=[f"run {k}" for k, _ in part],
                textposition="middle right", textfont=dict(size=10, color=color), cliponaxis=False,
                legendgrouptitle=dict(text="runs (lower panel)") if g == 0 and part is (budgeted or peaks) else None,
                marker=dict(symbol=symbol, size=12 if symbol == "star" else 9, color=color), line=dict(color=color),
                meta="budget runs",
                hovertext=[plotly_safe(f"run {k}: {p['label']}; " + (f"node budget {p['node_budget']}, " if p.get(
                    "budget_mb") else "no budget, ") + f"{p['tokens_per_round']} tokens/round, peak {p['peak_mb']} MB")
                    for k, p in part], hoverinfo="text+x+y"), 2, 1)
