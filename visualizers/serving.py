"""The serving timeline: one row per request, one panel per policy (`decoding/serving.py`).

    serving_timeline_figure(runs) -> go.Figure   waiting (grey), prefill to first token (orange), decoding
                                                 (blue) per request, on one time axis; each panel's title
                                                 gives its throughput and p95 time to first token

A pure function of `ServingRun`s (what each request got and when), so a live run draws as it grows.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from visualizers._common import TEMPLATE, empty_figure, plotly_safe

PHASES = (("waiting", "#c7c7c7"), ("prefill, first token", "#f28e2b"), ("decoding", "#4e79a7"))


def _segments(served, now: float) -> list[tuple[str, float, float]]:
    """(phase, start, end) of one request; a phase still under way ends at `now`."""
    r = served.request
    start = served.started_s
    first = served.token_times[0] if served.token_times else None
    last = served.token_times[-1] if served.token_times else None
    out = [("waiting", r.arrival_s, start if start is not None else max(now, r.arrival_s))]
    if start is not None:
        out.append(("prefill, first token", start, first if first is not None else now))
    if first is not None:
        out.append(("decoding", first, last if served.stop_reason else max(last, now)))
    return [(phase, a, b) for phase, a, b in out if b > a]


def serving_timeline_figure(runs) -> go.Figure:
    """The timeline of one run or several (one panel each, the same time axis)."""
    runs = [runs] if hasattr(runs, "served") else list(runs)
    runs = [r for r in runs if r is not None and r.served]
    if not runs:
        return empty_figure("no requests yet", x_title="seconds after the first arrival", y_title="request")
    titles = []
    for run in runs:
        done = all(s.stop_reason for s in run.served)
        if done:
            s = run.summary()
            titles.append(f"{plotly_safe(run.policy)}: {s['tokens_per_s']:.1f} tokens/s, time to first token "
                          f"p95 {s['ttft_p95_s']:.2f} s, {s['forward_passes']} forward passes")
        else:
            titles.append(f"{plotly_safe(run.policy)}: running…")
    fig = make_subplots(rows=len(runs), cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.08)
    for row, run in enumerate(runs, start=1):
        now = max([t for s in run.served for t in s.token_times] + [s.started_s or 0.0 for s in run.served] + [0.0])
        labels = [f"#{s.request.id}" for s in run.served]
        for phase, colour in PHASES:
            bars = [(f"#{s.request.id}", a, b) for s in run.served for p, a, b in _segments(s, now) if p == phase]
            fig.add_trace(go.Bar(
                y=[y for y, _, _ in bars], x=[b - a for _, a, b in bars], base=[a for _, a, _ in bars],
                orientation="h", name=phase, marker_color=colour, legendgroup=phase, showlegend=row == 1,
                hovertemplate=f"%{{y}} · {phase}: %{{base:.2f}} s to %{{x:.2f}} s later<extra></extra>"),
                row=row, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1], title_text="request", row=row, col=1)
    fig.update_xaxes(title_text="seconds after the first arrival", row=len(runs), col=1)
    fig.update_layout(template=TEMPLATE, barmode="overlay", height=min(160 + 170 * len(runs) +
                      10 * max(len(r.served) for r in runs) * len(runs), 1200),
                      margin=dict(l=60, r=20, t=60, b=40),
                      legend=dict(orientation="h", yanchor="bottom", y=1.04, xanchor="left", x=0))
    return fig


__all__ = ["serving_timeline_figure"]
