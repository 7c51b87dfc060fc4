"""MEC-B beside the verification rules: the minimum-entropy coupling of draft and output through a code of
bounded entropy, its rate trade-off, and the Markov coding game it serves (Ebrahimi, Chen and Khisti 2024,
"Minimum Entropy Coupling with Bottleneck", NeurIPS 2024). Numbers from `decoding.speculative.mecb` and
`decoding.speculative.mcg`; pure functions, no model.

Glossary
    encoder     rows: the draft x, columns: its code word t (a group of draft tokens); P(x, t).
    joint       rows: the draft, columns: the output; P(draft, output) through the code, columns summing to p.
    trade-off   I(draft; output) and H(T) against the rate bound R: Algorithm 1 (greedy EBIM) and the
                paper's uniform-quantisation baseline (Algorithm 5).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.events import Trace
from decoding.speculative.coupling import entropy_bits
from decoding.speculative.mcg import ACTIONS, DEFAULT_GRID, Episode, Grid
from decoding.speculative.mecb import mecb, rate_sweep
from visualizers._common import TEMPLATE, title_block
from visualizers.coupling import Position, example_position, round_position

METHOD_NAMES = {"greedy": "greedy EBIM (Algorithm 1)", "uniform": "uniform quantiser (Algorithm 5)"}
METHOD_COLORS = {"greedy": "#2f7d32", "uniform": "#888888"}


def mecb_figure(trace: Trace | None = None, round_index: int | None = None, parent: int = -1, *,
                rate: float = 1.0) -> go.Figure:
    """MEC-B at the position the rules view shows (a run's round, else the built-in example)."""
    position = round_position(trace, round_index, parent) if trace is not None and trace.start is not None else None
    return mecb_position_figure(position or example_position(), rate)


def mecb_position_figure(position: Position, rate: float) -> go.Figure:
    """The encoder and the joint at `rate` (heat maps), and I(draft; output) against R."""
    c = mecb(position.q, position.p, rate)
    codes = [f"t{t}" for t in range(c.encoder.shape[1])]
    fig = make_subplots(rows=2, cols=2, row_heights=[0.55, 0.45], vertical_spacing=0.2, horizontal_spacing=0.12,
                        specs=[[{}, {}], [{"colspan": 2}, None]],
                        subplot_titles=[f"encoder: draft → code, H(T) = {abs(c.code_entropy):.2f} ≤ R = {rate:.2f}",
                                        f"MEC-B joint: I = {c.info_xy:.2f} bits, H = {c.joint_entropy:.2f} bits",
                                        "rate trade-off (the bottleneck R against what reaches the output)"])
    labels, idx = position.labels, list(range(len(position.labels)))
    top = max(c.encoder.max().item(), c.joint.max().item())
    heat = dict(zmin=0, zmax=top, colorscale="Blues")
    fig.add_trace(go.Heatmap(z=c.encoder.tolist(), x=codes, y=idx, showscale=False, name="encoder",
                             customdata=[[label] * len(codes) for label in labels],
                             hovertemplate="draft %{customdata} → code %{x}<br>P = %{z:.4f}<extra>encoder</extra>",
                             **heat), row=1, col=1)
    fig.add_trace(go.Heatmap(z=c.joint.tolist(), x=idx, y=idx, name="MEC-B", colorbar=dict(len=0.5, y=0.78),
                             customdata=[[[draft, out] for out in labels] for draft in labels],
                             hovertemplate="draft %{customdata[0]} → output %{customdata[1]}<br>P = %{z:.4f}"
                                           "<extra>MEC-B</extra>", **heat), row=1, col=2)
    ticks = dict(tickmode="array", tickvals=idx, ticktext=labels)
    fig.update_xaxes(title_text="code word t", row=1, col=1)
    fig.update_xaxes(title_text="output", tickangle=-45, row=1, col=2, **ticks)
    for col in (1, 2):
        fig.update_yaxes(title_text="draft", autorange="reversed", row=1, col=col, **ticks)
    h_q = entropy_bits(position.q)
    rates = [(h_q + 0.25) * i / 40 for i in range(41)]
    for method in ("greedy", "uniform"):
        sweep = rate_sweep(position.q, position.p, rates, method)
        fig.add_trace(go.Scatter(x=rates, y=[s.info_xy for s in sweep], mode="lines", line_shape="hv",
                                 name=f"I(draft; output), {METHOD_NAMES[method]}", line=dict(color=METHOD_COLORS[method]),
                                 hovertemplate="R = %{x:.2f}: I = %{y:.3f} bits<extra></extra>"), row=2, col=1)
    greedy = rate_sweep(position.q, position.p, rates)
    fig.add_trace(go.Scatter(x=rates, y=[s.code_entropy for s in greedy], mode="lines", line_shape="hv",
                             name="H(T) = I(draft; T), Algorithm 1", line=dict(color=METHOD_COLORS["greedy"], dash="dot"),
                             hovertemplate="R = %{x:.2f}: H(T) = %{y:.3f} bits<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Scatter(x=[rate, rate], y=[0, h_q], mode="lines", name="R shown", line=dict(color="#c0392b"),
                             hoverinfo="skip"), row=2, col=1)
    fig.update_xaxes(title_text="rate bound R (bits)", row=2, col=1)
    fig.update_yaxes(title_text="bits", row=2, col=1)
    fig.update_annotations(font=dict(size=12))
    accept = "" if c.acceptance is None else f", P(output = draft) = {c.acceptance:.3f}"
    lines = [f"MEC-B (Ebrahimi, Chen and Khisti 2024) at one position: {position.source}",
             f"the draft is coded into T with H(T) ≤ R, T is coupled with the output by minimum entropy; the output "
             f"is still exactly p{accept}. At R ≥ H(q) = {h_q:.2f} bits it is the min-entropy coupling above."]
    return _titled(fig, lines, height=600)


def game_figure(episode: Episode, prior, labels: list[str], curves: list[dict], temperature: float,
                grid: Grid = DEFAULT_GRID) -> go.Figure:
    """One episode of the Markov coding game (the path the actions drew, the receiver's belief over messages
    after each action) and the reward-vs-accuracy trade-off over temperatures at this rate."""
    fig = make_subplots(rows=2, cols=2, row_heights=[0.55, 0.45], vertical_spacing=0.2, horizontal_spacing=0.12,
                        specs=[[{}, {}], [{"colspan": 2}, None]],
                        subplot_titles=[f"the agent's path: {''.join(ACTIONS[a] for a in episode.actions) or '(none)'}",
                                        "the receiver's belief over messages",
                                        "receiver accuracy vs mean return, one point per temperature τ"])
    rows, cols = zip(*(divmod(s, grid.size) for s in episode.states))
    fig.add_trace(go.Scatter(x=[c for c in range(grid.size) for _ in range(grid.size)],
                             y=[r for _ in range(grid.size) for r in range(grid.size)], mode="markers",
                             marker=dict(symbol="square", size=26, color="#eeeeee"), hoverinfo="skip", showlegend=False),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=list(cols), y=list(rows), mode="lines+markers", name="path", showlegend=False,
                             line=dict(color="#4c78a8"), text=["start"] + [ACTIONS[a] for a in episode.actions],
                             hovertemplate="step %{pointNumber}: %{text}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[0, grid.size - 1], y=[0, grid.size - 1], mode="markers+text", text=["start", "goal"],
                             textposition="top center", marker=dict(size=14, color=["#c0392b", "#2f7d32"]),
                             hoverinfo="skip", showlegend=False), row=1, col=1)
    fig.update_xaxes(range=[-0.6, grid.size - 0.4], showticklabels=False, showgrid=False, zeroline=False, row=1, col=1)
    fig.update_yaxes(range=[grid.size - 0.4, -0.6], showticklabels=False, showgrid=False, zeroline=False, row=1, col=1)
    beliefs = episode.message_beliefs(prior)  # (steps + 1, messages)
    fig.add_trace(go.Heatmap(z=beliefs, x=labels, y=list(range(len(beliefs))), zmin=0, zmax=1, colorscale="Greens",
                             colorbar=dict(len=0.5, y=0.78), name="belief",
                             hovertemplate="after %{y} actions: P(%{x}) = %{z:.3f}<extra></extra>"), row=1, col=2)
    fig.update_xaxes(title_text=f"message (sent: {labels[episode.message]})", row=1, col=2)
    fig.update_yaxes(title_text="actions seen", autorange="reversed", row=1, col=2)
    for method in ("greedy", "uniform"):
        points = [p for p in curves if p["method"] == method]
        taus = [f"τ={p['temperature']:g}" for p in points]
        fig.add_trace(go.Scatter(x=[p["mean_return"] for p in points], y=[p["accuracy"] for p in points],
                                 mode="lines+markers+text", text=_spaced(points, taus) if method == "greedy" else None,
                                 textposition="top center", name=METHOD_NAMES[method], customdata=taus,
                                 line=dict(color=METHOD_COLORS[method]),
                                 hovertemplate="return %{x:.2f}, accuracy %{y:.3f}<extra>%{customdata}</extra>"),
                      row=2, col=1)
    fig.update_xaxes(title_text="mean return (−1 per move; higher is better)", row=2, col=1)
    fig.update_yaxes(title_text="accuracy", range=[0, 1.1], row=2, col=1)
    fig.update_annotations(font=dict(size=12))
    verdict = "✓" if episode.correct else "✗"
    lines = [f"Markov coding game (Ebrahimi, Chen and Khisti 2024, after Sokota et al. 2022): message "
             f"{labels[episode.message]} → code t{episode.code} (of {len(episode.groups)}) → {len(episode.actions)} "
             f"actions at τ = {temperature:g} → decoded {labels[episode.decoded]} {verdict}"]
    return _titled(fig, lines, height=620)


def _titled(fig: go.Figure, lines: list[str], height: int) -> go.Figure:
    """The two figures' common frame: the wrapped title block above, the legend below."""
    title, margin = title_block(lines, width=120)
    fig.update_layout(template=TEMPLATE, height=height + margin, margin=dict(l=60, r=30, t=margin + 30, b=50),
                      title=title | dict(font=dict(size=13)),
                      legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0))
    return fig


def _spaced(points: list[dict], labels: list[str], gap: float = 0.5) -> list[str]:
    """Labels for the points at least `gap` apart in mean return from the last labelled one ("" for the
    others: hover still names them), so the temperatures crowding near the shortest path do not overlap."""
    out, last = [""] * len(points), None
    for i in sorted(range(len(points)), key=lambda i: points[i]["mean_return"]):
        x = points[i]["mean_return"]
        if last is None or x - last >= gap:
            out[i], last = labels[i], x
    return out
