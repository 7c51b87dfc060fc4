"""LLM-as-a-judge pictures: the kept candidate's accuracy against the number of candidates k, one colour per
judge temperature T, the model's prediction as lines and the measurement as markers; and k*(T).

Halder and Pehlevan 2025, "Demystifying LLM-as-a-Judge: Analytically Tractable Model for Inference-Time
Scaling" (arXiv 2512.19905). The numbers come from `decoding.scaling.judge` (exact) or from the benchmark's
JSON (`bench/bench_judge.py --write assets/tiny-math/judge.json`). Pure: dicts of curves in, a figure out.

Glossary
    k       candidates drawn i.i.d.; the judge keeps one by softmax(score / T) (T = 0: its top score).
    k*      the k with the best accuracy; "interior" when it is below the largest k drawn and beats it.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from visualizers._common import TEMPLATE, title_block

PALETTE = ("#d62728", "#f58518", "#4c78a8", "#54a24b", "#9467bd", "#8c564b", "#17becf")
MAX_CURVES = len(PALETTE)  # temperatures drawn at most (the rest are left out, and the title says so)


def _best(curve: list[float]) -> int:
    top = max(curve)
    return next(i for i, v in enumerate(curve) if v >= top - 1e-9)


def accuracy_figure(ks: list[int], predicted: dict[str, list[float]], measured: dict[str, list[float]] | None = None,
                    *, title: str = "", y_title: str = "accuracy of the kept candidate",
                    k_stars: dict | None = None) -> go.Figure:
    """Left: accuracy against k per temperature (keys of `predicted`, e.g. "0", "0.5", "inf"): the prediction
    as a line with its k* starred, the measurement (same keys) as markers. Right: k*(T), predicted and
    measured (a flat curve, T = ∞, has no k* and gets no star). `k_stars` ({T: {"predicted": [k, interior],
    "measured": [...]}}, the benchmark's) replaces the argmax of the drawn (rounded) curves. At most MAX_CURVES
    temperatures are drawn."""
    temps = list(predicted)[:MAX_CURVES]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], horizontal_spacing=0.1,
                        subplot_titles=["accuracy against the number of candidates k", "the best k, k*(T)"])
    star_x, star_pred, star_meas = [], [], []
    for i, t in enumerate(temps):
        color, label = PALETTE[i], f"T = {'∞' if t == 'inf' else t}"
        curve = predicted[t]
        fig.add_trace(go.Scatter(x=ks, y=curve, mode="lines", name=f"{label} (model)", legendgroup=t,
                                 line=dict(color=color)), row=1, col=1)
        given = (k_stars or {}).get(t, {})
        best = ks.index(given["predicted"][0]) if "predicted" in given else _best(curve)
        flat = max(curve) - min(curve) < 1e-9  # a uniform pick (T = ∞): no best k to draw
        if not flat:
            fig.add_trace(go.Scatter(x=[ks[best]], y=[curve[best]], mode="markers", legendgroup=t, showlegend=False,
                                     marker=dict(color=color, size=14, symbol="star",
                                                 line=dict(color="black", width=1)),
                                     hovertemplate=f"{label}: model's k* = {ks[best]}<extra></extra>"), row=1, col=1)
            star_x.append(t)
            star_pred.append(ks[best])
        if measured and t in measured:
            fig.add_trace(go.Scatter(x=ks, y=measured[t], mode="markers", name=f"{label} (measured)",
                                     legendgroup=t, marker=dict(color=color, size=6, symbol="circle-open")),
                          row=1, col=1)
            if not flat:
                star_meas.append(given["measured"][0] if "measured" in given else ks[_best(measured[t])])
    fig.add_trace(go.Scatter(x=star_x, y=star_pred, mode="lines+markers", name="k* (model)",
                             line=dict(color="#222222"), marker=dict(symbol="star", size=10)), row=1, col=2)
    if star_meas:
        fig.add_trace(go.Scatter(x=star_x, y=star_meas, mode="markers", name="k* (measured)",
                                 marker=dict(color="#222222", symbol="circle-open", size=10)), row=1, col=2)
    fig.update_xaxes(title_text="k (candidates the judge chooses from)", row=1, col=1)
    fig.update_xaxes(title_text="judge temperature T", type="category", row=1, col=2)
    fig.update_yaxes(title_text=y_title, row=1, col=1)
    fig.update_yaxes(title_text="k*", rangemode="tozero", row=1, col=2)
    more = f" ({len(predicted) - MAX_CURVES} more temperatures not drawn)" if len(predicted) > MAX_CURVES else ""
    head, top = title_block([title + more], width=90)
    fig.update_annotations(yshift=4)  # the panel titles, just above their plots
    fig.update_layout(template=TEMPLATE, height=360 + top, margin=dict(l=55, r=20, t=top + 10, b=45),
                      title=dict(head, font=dict(size=13)), legend=dict(orientation="h", y=-0.25))
    return fig


def tiny_math_figure(result: dict | None) -> go.Figure:
    """The benchmark's tiny-math result (bench/bench_judge.py --write): measured and predicted per T."""
    if not result or "predicted" not in result:
        fig = go.Figure()
        fig.update_layout(template=TEMPLATE, height=200, title="no tiny-math result: run "
                          "python bench/bench_judge.py --write assets/tiny-math/judge.json")
        return fig
    title = (f"tiny-math: {result['problems']} held-out problems × {result['samples']} samples; judge = logit "
             f"P_probe + {result['fit']['weight']:g} × arithmetic share (lines: the fitted model, circles: measured)")
    return accuracy_figure(result["ks"], result["predicted"], result["measured"], title=title,
                           k_stars=result.get("k_star"))
