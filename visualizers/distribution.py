"""The model's top alternatives at one step: which survived truncation, and which one was chosen.

Glossary
    alternatives  TokenStep.top_tokens / top_probs: the most likely next tokens under the raw
                  distribution (T = 1), most likely first; x positions 1..n, labelled by text.
    kept / cut    TokenStep.top_kept: whether the alternative survived truncation (top-k, top-p,
                  min-p, ...). Kept bars are blue, cut bars grey.
    chosen        the token actually generated: outlined in red and marked "▼ chosen". If it is
                  not among the alternatives (rank beyond them), it gets an extra bar at the end.
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding.events import TokenStep, Trace
from visualizers._common import (TEMPLATE, beam_steps, empty_figure, label, plotly_safe, title_block, token_steps,
                                 vocab_size)

HEIGHT = 320
X_TITLE, Y_TITLE = "next token (top alternatives, most likely first)", "probability (raw, T = 1)"
COLORS = {"kept": "#4c78a8", "cut": "#bab0ac", "chosen": "#e4572e"}


def distribution_figure(trace: Trace, step: int | None = None) -> go.Figure:
    """Bar chart of the top alternatives at `step` (default: the last step so far).

    A step not generated yet (streaming, or a selection from another run) gives an empty figure
    saying so; a negative or non-integer `step` raises ValueError.
    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError(f"`step` must be None or an integer >= 0, got {step!r}")
    steps = token_steps(trace)
    if not steps:
        if beam_steps(trace):
            return empty_figure("beam search keeps whole hypotheses, not one distribution per step: "
                                "see the beam tree", x_title=X_TITLE, y_title=Y_TITLE, height=HEIGHT)
        return empty_figure(x_title=X_TITLE, y_title=Y_TITLE, height=HEIGHT)
    event = steps[-1] if step is None else next((e for e in steps if e.step == step), None)
    if event is None:
        return empty_figure(f"step {step} has not been generated yet (last step: {steps[-1].step})",
                            x_title=X_TITLE, y_title=Y_TITLE, height=HEIGHT)
    return _bars(event, vocab_size(trace))


def _bars(e: TokenStep, vocab: int | None) -> go.Figure:
    tokens, probs, kept, ids = list(e.top_tokens), list(e.top_probs), list(e.top_kept), list(e.top_ids)
    ranks = list(range(1, len(tokens) + 1))
    outside = e.token_id not in ids
    if outside:  # the chosen token ranked below the recorded alternatives
        tokens.append(e.token_text)
        probs.append(e.prob)
        kept.append(True)
        ids.append(e.token_id)
        ranks.append(e.rank)
    x = list(range(1, len(tokens) + 1))
    labels = [plotly_safe(label(t)) for t in tokens]
    chosen_at = ids.index(e.token_id)
    fig = go.Figure()
    for name, want in (("kept (survived truncation)", True), ("cut by truncation", False)):
        idx = [i for i, k in enumerate(kept) if k == want]
        fig.add_trace(go.Bar(
            x=[x[i] for i in idx], y=[probs[i] for i in idx], name=name,
            marker=dict(color=COLORS["kept" if want else "cut"],
                        line=dict(color=COLORS["chosen"], width=[3 if i == chosen_at else 0 for i in idx])),
            customdata=[[labels[i], ranks[i], ids[i]] for i in idx],
            hovertemplate="%{customdata[0]} (id %{customdata[2]})<br>p = %{y:.4f} · rank %{customdata[1]}"
                          f"<extra>{'kept' if want else 'cut'}</extra>"))
    fig.add_annotation(x=x[chosen_at], y=probs[chosen_at], text="▼ chosen", showarrow=False, yanchor="bottom",
                       yshift=2, font=dict(color=COLORS["chosen"], size=12))
    if outside:
        labels[-1] = f"… {labels[-1]} (rank {ranks[-1]})"
    kept_part = f"kept {e.kept_size} of {vocab} tokens" if vocab else f"kept {e.kept_size} tokens"
    title, top = title_block([f"step {e.step}: chose {plotly_safe(label(e.token_text))} (p={e.prob:.3g}, rank {e.rank})"],
                             width=46, small=kept_part)
    fig.update_layout(
        template=TEMPLATE, height=HEIGHT + top - 90, title=title | dict(font=dict(size=14)), barmode="overlay",
        margin=dict(l=55, r=20, t=top, b=60), bargap=0.25,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
        xaxis=dict(title=dict(text=X_TITLE), tickmode="array", tickvals=x, ticktext=labels, tickangle=-35),
        yaxis=dict(title=dict(text=Y_TITLE), rangemode="tozero"))
    return fig
