"""InfAlign pictures: the reward transforms, and best-of-N win rate against KL for each way of aligning.

Balashankar, Sun et al. 2025, "InfAlign: Inference-aware language model alignment" (arXiv 2412.19792). The
numbers come from `decoding.scaling.infalign`, exactly (no sampling); tiny-math's curves from the benchmark's
JSON (`bench/bench_infalign.py --write assets/tiny-math/infalign.json`).

Glossary
    u           the calibrated reward: an outcome's win rate against one base sample, in [0, 1].
    Phi(u)      the transform applied before the KL-regularised tilt, drawn rescaled to [0, 1] (beta absorbs
                the scale, so only the shape matters): identity, exp(t u), and the optimal transform (the
                paper's fixed point) at the chosen N and KL; the raw reward as points (its own shape).
    win rate    P(best-of-N of the aligned policy beats best-of-N of the base) + 1/2 P(tie).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.scaling import infalign as ia
from visualizers._common import TEMPLATE

COLORS = {"rlhf": "#9e9e9e", "calibrated": "#4c78a8", "exp": "#f58518", "optimal": "#222222"}
NAMES = {"rlhf": "standard RLHF (raw reward)", "calibrated": "calibrated, identity",
         "exp": "calibrated, exp(t·u) (InfAlign)", "optimal": "optimal for best-of-N"}


def _unit(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    span = values.max() - values.min()
    return (values - values.min()) / span if span > 0 else np.zeros_like(values)


def transform_figure(p0, r, n: int, kl: float, t: float) -> go.Figure:
    """Phi(u) of each method on [0, 1] (rescaled): identity, exp(t u), the optimal transform of this base policy
    at best-of-n and KL `kl` (its value at each outcome's u, a step per level), and the raw reward's points."""
    u = np.linspace(0, 1, 101)
    c = ia.calibrate(p0, r)
    order = np.argsort(c)
    try:
        opt, _ = ia.at_kl(p0, r, "optimal", kl, n=n)
        where = f"at KL {kl:g}"
    except ValueError:  # the optimum never spends that much KL: draw its small-KL shape (the gradient at p0)
        opt, where = np.asarray(p0, np.float64), "near KL 0"
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=u, y=u, name=NAMES["calibrated"], line=dict(color=COLORS["calibrated"])))
    fig.add_trace(go.Scatter(x=u, y=_unit(np.exp(t * u)), name=f"exp(t·u), t = {t:.3g}",
                             line=dict(color=COLORS["exp"])))
    fig.add_trace(go.Scatter(x=c[order], y=_unit(ia.optimal_reward(opt, p0, r, n))[order], mode="lines+markers",
                             line=dict(color=COLORS["optimal"], dash="dash", shape="hv"),
                             name=f"optimal, best-of-{n} {where}"))
    fig.add_trace(go.Scatter(x=c[order], y=_unit(r)[order], mode="markers", name="raw reward r",
                             marker=dict(color=COLORS["rlhf"], size=9, symbol="diamond")))
    fig.update_layout(template=TEMPLATE, height=340, margin=dict(l=50, r=20, t=50, b=45),
                      title=dict(text="The transform Φ(u) (rescaled to [0, 1])", font=dict(size=14)),
                      xaxis_title="calibrated reward u (win rate against one base sample)",
                      yaxis_title="Φ(u), rescaled", legend=dict(orientation="h", y=-0.25))
    return fig


def win_rate_figure(p0, r, n: int, kl: float, t: float, kl_high: float | None = None) -> go.Figure:
    """Two panels, win rate against KL(pi || pi0) for each method: under plain sampling (N = 1) and under
    best-of-n; a dotted line at the chosen KL."""
    kl_high = min(kl_high or 2 * kl, 0.999 * ia.max_kl(p0, r))
    panels = [(1, "plain sampling (N = 1)"), (n, f"best-of-{n} against best-of-{n}")]
    fig = make_subplots(rows=1, cols=2, subplot_titles=[title for _, title in panels], horizontal_spacing=0.1)
    for col, (panel_n, _) in enumerate(panels, start=1):
        for m in ia.METHODS:
            kls, wins = ia.curve(p0, r, m, panel_n, kl_high, t=t)
            fig.add_trace(go.Scatter(x=kls, y=wins, name=NAMES[m], legendgroup=m, showlegend=col == 1,
                                     line=dict(color=COLORS[m], dash="dash" if m == "optimal" else "solid")),
                          row=1, col=col)
        fig.add_vline(x=kl, line=dict(color="#bbbbbb", dash="dot"), row=1, col=col)
        fig.update_xaxes(title_text="KL(π ‖ π₀), nats", row=1, col=col)
    fig.update_yaxes(title_text="win rate against the base", row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=360, margin=dict(l=55, r=20, t=50, b=45),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def tiny_math_figure(result: dict | None) -> go.Figure:
    """The benchmark's tiny-math curves (pooled over problems, one beta per point): one panel per reward."""
    fig = go.Figure()
    section = (result or {}).get("tiny_math")
    if not section:
        fig.update_layout(template=TEMPLATE, height=200, title="no tiny-math result: run "
                          "python bench/bench_infalign.py --write assets/tiny-math/infalign.json")
        return fig
    rewards = [k for k in ("probe", "step-share") if k in section]
    fig = make_subplots(rows=1, cols=len(rewards), horizontal_spacing=0.1,
                        subplot_titles=[f"reward {k} (best-of-{section[k]['curve']['n']})" for k in rewards])
    for col, reward in enumerate(rewards, start=1):
        curve = section[reward]["curve"]
        for m, wins in curve["win"].items():
            fig.add_trace(go.Scatter(x=[0.0] + curve["kl"], y=[0.5] + wins, name=NAMES[m], legendgroup=m,
                                     showlegend=col == 1, mode="lines+markers",
                                     line=dict(color=COLORS[m])), row=1, col=col)
        fig.update_xaxes(title_text="mean KL(π ‖ π₀), nats", row=1, col=col)
    fig.update_yaxes(title_text="win rate against the base", row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=340, margin=dict(l=55, r=20, t=50, b=45),
                      title=dict(text=f"tiny-math: {section['problems']} held-out problems × {section['samples']} "
                                      "samples, each problem's samples its base policy", font=dict(size=13)),
                      legend=dict(orientation="h", y=-0.3))
    return fig
