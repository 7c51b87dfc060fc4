"""This server's own traffic: the live batch of visitors' runs (`decoding.batching`), for a teacher to show the class.

    server_figure(activity) -> go.Figure   top: rows in each batched step over the last seconds (a solo call, a
                                           prompt's prefill, is a grey mark); bottom: one line per run, from when it
                                           joined the batch to when it left
    server_summary(activity) -> dict       runs in the batch now, steps, mean step time, tokens per second

Pure functions of a `ServerActivity` snapshot (plain values; times are seconds before `activity.now`).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.batching import ServerActivity
from visualizers._common import TEMPLATE, empty_figure

MAX_LANES = 60  # runs drawn at most (the most recent ones)


def server_summary(activity: ServerActivity) -> dict:
    """What the last `window_s` seconds computed: every batched step's row made one token."""
    steps = [p for p in activity.passes if not p.solo]
    tokens = sum(len(p.runs) for p in steps)
    busy = sum(p.end - p.start for p in activity.passes)
    return {"runs_now": sum(activity.live.values()), "steps": len(steps), "solo_calls": len(activity.passes) - len(steps),
            "tokens": tokens, "tokens_per_s": tokens / activity.window_s,
            "mean_rows": tokens / len(steps) if steps else 0.0, "max_rows": max((len(p.runs) for p in steps), default=0),
            "mean_step_s": sum(p.end - p.start for p in steps) / len(steps) if steps else None,
            "busy_share": min(1.0, busy / activity.window_s)}


def server_figure(activity: ServerActivity) -> go.Figure:
    """Rows per step and each run's stay in the batch, over the last `window_s` seconds."""
    if not activity.passes and not activity.members:
        return empty_figure(f"no runs in the last {activity.window_s:g} s: press Generate in any tab",
                            x_title="seconds ago", y_title="rows")
    ago = lambda t: t - activity.now  # (negative) seconds before now
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.45, 0.55], vertical_spacing=0.08)
    steps = [p for p in activity.passes if not p.solo]
    solo = [p for p in activity.passes if p.solo]
    fig.add_trace(go.Bar(x=[ago((p.start + p.end) / 2) for p in steps], y=[len(p.runs) for p in steps],
                         width=[max(p.end - p.start, 0.02) for p in steps], marker_color="#4e79a7",
                         name="batched step: rows", hovertemplate="%{y} rows<extra>step</extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[ago(p.start) for p in solo], y=[0.5] * len(solo), mode="markers",
                             marker=dict(color="#9d9d9d", symbol="line-ns-open", size=10), name="solo call (prefill)",
                             hovertemplate="%{x:.1f} s<extra>solo call</extra>"), row=1, col=1)
    joined: dict[int, float] = {}
    left: dict[int, float] = {}
    for m in activity.members:
        (joined if m.joined else left)[m.run] = m.at
    for p in activity.passes:  # a run that joined before the window: from its first pass in it
        for run in p.runs:
            joined.setdefault(run, p.start)
    runs = sorted(joined, key=lambda r: joined[r])[-MAX_LANES:]
    xs, ys = [], []
    for lane, run in enumerate(runs):
        xs += [ago(max(joined[run], activity.now - activity.window_s)), ago(left.get(run, activity.now)), None]
        ys += [lane, lane, None]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", line=dict(color="#59a14f", width=4),
                             marker=dict(size=6), name="a run in the batch", hoverinfo="skip"), row=2, col=1)
    fig.update_layout(template=TEMPLATE, height=360, margin=dict(l=50, r=20, t=30, b=40), bargap=0,
                      legend=dict(orientation="h", y=1.12), title=None)
    fig.update_xaxes(range=[-activity.window_s, 0], row=2, col=1, title_text="seconds ago")
    fig.update_yaxes(title_text="rows", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="runs", showticklabels=False, row=2, col=1)
    return fig
