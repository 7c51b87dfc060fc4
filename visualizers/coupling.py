"""Verification rules at one position, as couplings: a heat map of each rule's joint law of (draft,
output) with its acceptance in the title, and the multi-draft rules' acceptance against k.

Papers followed: Leviathan et al. 2023 / Chen et al. 2023 (speculative sampling: the maximal coupling),
Miao et al. 2024 "SpecInfer" with Jeon et al. 2024 "Recursive Speculative Decoding" (RSD: k drafts
without replacement), Sun et al. 2023 "SpecTr" (k i.i.d. drafts, K-SEQ), Kocaoglu et al. 2017 (the
greedy minimum-entropy coupling). The numbers come from `decoding.speculative.coupling`, exactly.

Glossary
    position    one place where the drafter proposed tokens: the target's p and the draft's q there,
                over a few tokens: p's likeliest recorded tokens and q's, both renormalised over them (a token
                missing from one model's recorded list counts as 0 there), so the numbers are exact for that
                small vocabulary, not for the whole one.
    joint       rows: the draft, columns: the output. With k > 1 drafts the row is the draft the
                output matched when it matched one (the diagonal), else the first draft.
    acceptance  P(output is one of the drafts): the diagonal's total.
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from decoding.events import Trace
from decoding.speculative.coupling import acceptance_by_k, couplings
from visualizers._common import TEMPLATE, label, plotly_safe, title_block
from visualizers.speculative import COLORS, _pick_round, _token_names, position_text

SHOWN_TOKENS = 6  # tokens of a round's position the view keeps (p and q renormalised over them)
KS = (1, 2, 3, 4)  # the acceptance-vs-k chart
SHORT = {"maximal": "speculative sampling", "rsd": "RSD / SpecInfer", "spectr": "SpecTr (K-SEQ)",
         "mec": "min-entropy coupling"}
RULE_COLORS = {"rsd": COLORS["accepted"], "spectr": "#4c78a8", "maximal": "#555555"}


@dataclass(frozen=True)
class Position:
    labels: list[str]  # token texts
    p: torch.Tensor  # (V,) target
    q: torch.Tensor  # (V,) draft
    source: str  # where p and q come from, for the title
    note: str = ""  # how they were cut down from the whole vocabulary, for the title


def example_position() -> Position:
    """A built-in position: an over-confident drafter that mostly agrees with the target."""
    labels = [plotly_safe(label(t)) for t in (" the", " a", " his", " that", " this", " one")]
    p = torch.tensor([0.34, 0.22, 0.16, 0.12, 0.10, 0.06], dtype=torch.float64)
    q = torch.tensor([0.58, 0.06, 0.22, 0.02, 0.08, 0.04], dtype=torch.float64)
    return Position(labels, p, q, "the built-in example")


def round_position(trace: Trace, round_index: int | None = None, parent: int = -1,
                   tokens: int = SHOWN_TOKENS) -> Position | None:
    """p and q at one position of a recorded round (default: the latest round, the context), renormalised
    over `tokens` of its recorded tokens (p's likeliest half, then q's likeliest); None when the round recorded no
    q there (a deterministic drafter) or the trace has no such round or position."""
    r, _ = _pick_round(trace, round_index)
    d = next((d for d in r.dists if d.get("parent") == parent), None) if r is not None else None
    if d is None or not d.get("q_top_ids"):
        return None
    p_top = dict(zip(d["p_top_ids"], d["p_top_probs"]))
    q_top = dict(zip(d["q_top_ids"], d["q_top_probs"]))
    ids = list(dict.fromkeys(d["p_top_ids"][:(tokens + 1) // 2] + d["q_top_ids"] + d["p_top_ids"]))[:tokens]
    ids.sort(key=lambda t: -max(p_top.get(t, 0.0), q_top.get(t, 0.0)))  # p's likeliest and q's likeliest, both
    names = _token_names(trace, r, d)
    labels = [plotly_safe(label(names[t], 10)) if t in names else f"#{t}" for t in ids]
    p = torch.tensor([p_top.get(t, 0.0) for t in ids], dtype=torch.float64)
    q = torch.tensor([q_top.get(t, 0.0) for t in ids], dtype=torch.float64)
    if p.sum() <= 0 or q.sum() <= 0:  # the kept tokens carry none of one model's recorded mass
        return None
    note = (f"p and q renormalised over these {len(ids)} tokens ({p.sum().item():.0%} of p, {q.sum().item():.0%} "
            f"of q)")
    if isinstance(d.get("overlap"), (int, float)):
        note += f"; whole-vocabulary overlap Σ min(p, q) = {d['overlap']:.3f}"
    where = position_text(trace, r, parent)
    return Position(labels, p / p.sum(), q / q.sum(), f"round {r.round}, {where}", note)


def coupling_figure(trace: Trace | None = None, round_index: int | None = None, parent: int = -1, *,
                    k: int = 2) -> go.Figure:
    """The rules at one position of a run's round (its recorded p and q), or at the built-in example
    when there is no run or that position recorded no draft distribution."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= max(KS):
        raise ValueError(f"`k` must be an integer in [1, {max(KS)}], got {k!r}")
    position, note = None, ""
    if trace is not None and trace.start is not None:
        position = round_position(trace, round_index, parent)
        if position is None:
            note = "this position recorded no draft distribution q (a deterministic drafter, or no round yet): "
    return position_figure(position or example_position(), k, note=note)


def position_figure(position: Position, k: int, *, note: str = "") -> go.Figure:
    """One heat map per rule (the joint of draft and output, acceptance in its title) and acceptance vs k."""
    rules = couplings(position.p, position.q, k)
    by_k = acceptance_by_k(position.p, position.q, KS)
    fig = make_subplots(rows=2, cols=4, specs=[[{}, {}, {}, {}], [{"colspan": 4}, None, None, None]],
                        row_heights=[0.58, 0.42], vertical_spacing=0.2, horizontal_spacing=0.035,
                        subplot_titles=[_heat_title(c) for c in rules] + ["acceptance vs number of drafts k"])
    top = max(c.matched.max().item() for c in rules)
    ticks = dict(tickmode="array", tickvals=list(range(len(position.labels))), ticktext=position.labels)
    for col, c in enumerate(rules, start=1):
        fig.add_trace(go.Heatmap(
            z=c.matched.tolist(), x=list(range(len(position.labels))), y=list(range(len(position.labels))),
            zmin=0, zmax=top, colorscale="Blues", showscale=col == 4, name=SHORT[c.rule],
            colorbar=dict(title=dict(text="P"), len=0.5, y=0.78),
            customdata=[[[draft, out] for out in position.labels] for draft in position.labels],  # [row][column]
            hovertemplate="draft %{customdata[0]} → output %{customdata[1]}<br>P = %{z:.4f}"
                          f"<extra>{SHORT[c.rule]}</extra>"), row=1, col=col)
        fig.update_xaxes(title_text="output", tickangle=-45, row=1, col=col, **ticks)
        fig.update_yaxes(title_text="draft" if col == 1 else None, showticklabels=col == 1, autorange="reversed",
                         row=1, col=col, **ticks)
    fig.update_annotations(font=dict(size=12))
    fig.layout.annotations[-1].update(x=0, xanchor="left")  # the bar chart's title, clear of the legend
    for rule in ("rsd", "spectr"):
        fig.add_trace(go.Bar(x=[str(x) for x in KS], y=by_k[rule], name=SHORT[rule], marker_color=RULE_COLORS[rule],
                             text=[f"{a:.3f}" for a in by_k[rule]], textposition="outside",
                             hovertemplate=f"{SHORT[rule]}, k = %{{x}}: acceptance %{{y:.4f}}<extra></extra>"),
                      row=2, col=1)
    single = torch.minimum(position.p, position.q).sum().item()
    fig.add_trace(go.Scatter(x=[str(x) for x in KS], y=[single] * len(KS), mode="lines", name="one draft: Σ min(p, q)",
                             line=dict(color=RULE_COLORS["maximal"], dash="dot"),
                             hovertemplate="one draft: %{y:.4f}<extra></extra>"), row=2, col=1)
    fig.update_xaxes(title_text="drafts k", row=2, col=1, tickmode="array", tickvals=[str(x) for x in KS],
                     ticktext=[f"<b>{x} (shown)</b>" if x == k else str(x) for x in KS])
    fig.update_yaxes(title_text="P(output is a draft)", range=[0, 1.15], row=2, col=1)
    matched = "" if k == 1 else f"; with k = {k}, a row is the draft the output matched, else the first draft"
    lines = [f"Verification rules at one position: {note}{position.source}"] + [position.note] * bool(position.note)
    title, margin = title_block(lines + [f"rows: draft, columns: output; the diagonal's total is the acceptance{matched}"],
                                width=120)
    fig.update_layout(template=TEMPLATE, height=640 + margin, margin=dict(l=60, r=30, t=margin + 30, b=50),
                      title=title | dict(font=dict(size=13)), barmode="group",
                      legend=dict(orientation="h", yanchor="top", y=0.4, xanchor="right", x=1))
    return fig


def _heat_title(c) -> str:
    """The rule, its acceptance, and rho* (SpecTr) or the joint's entropy (the one-draft couplings); short
    lines: four titles share a row."""
    if c.rule in ("rsd", "spectr"):
        extra = f"ρ* = {c.rho:.2f}" if c.rule == "spectr" else "drafts without replacement"
        return f"{SHORT[c.rule]}, k = {c.k}<br>accept {c.acceptance:.3f}<br>{extra}"
    return f"{SHORT[c.rule]}<br>accept {c.acceptance:.3f}<br>H(draft, output) = {c.entropy_bits:.2f} bits"
