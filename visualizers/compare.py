"""Compare mode's pictures: 2-4 runs of one prompt side by side (`decoding/compare.py`).

Glossary
    columns       one column per run: its label, then its text as token chips (`tokens_html`: colour =
                  the chosen token's raw probability or the step's entropy). A chip click reports
                  (run, step) to the app; the clicked step is outlined in EVERY run.
    entropy       one line per run: the raw entropy (nats, T = 1) of the model's distribution at each
                  step; a vertical line marks the selected step. Beam search plots its best live beam's
                  parent distribution (BeamStep.entropy).
    distributions one panel per run at the selected step: that run's top alternatives (raw, T = 1),
                  the chosen token in red. Runs diverge, so the same step number is a different
                  context in each run: the panel's title says which token each run chose there.
    table         `decoding.compare.table_rows`: tokens, own tokens/s, mean entropy, mean chosen
                  probability, distinct 2-/3-grams, repeated 4-grams, the text's log-probability at T = 1.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.events import Trace
from visualizers._common import (TEMPLATE, WAITING, beam_steps, empty_figure, esc, label, plotly_safe,
                                 token_steps)
from visualizers.tokens import tokens_html

RUN_COLORS = ("#4c78a8", "#9d755d", "#54a24b", "#b279a2")  # none red: red marks the chosen token
HEIGHT = 320
TOP_K = 8
TABLE_HEADERS = {"run": "run", "strategy": "setting", "tokens": "tokens", "tokens_per_s": "tokens/s",
                 "mean_entropy": "mean entropy (nats)", "mean_prob": "mean p(chosen)", "distinct_2": "distinct-2",
                 "distinct_3": "distinct-3", "repeated_4grams": "repeated 4-grams", "logprob": "log P(text)",
                 "logprob_per_token": "log P per token", "stop_reason": "stopped by"}

_CSS = " ".join("""
.dl-compare-grid{display:grid;gap:.8em;grid-template-columns:repeat(auto-fit,minmax(220px,1fr))}
.dl-compare-run{border:1px solid rgba(127,127,127,.35);border-radius:6px;padding:.4em .6em;min-width:0}
.dl-compare-run h4{margin:.1em 0 .4em 0;font-size:14px}
.dl-compare-run .dl-swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.35em}
.dl-compare-table{border-collapse:collapse;font-size:13px;width:100%}
.dl-compare-table th,.dl-compare-table td{border-bottom:1px solid rgba(127,127,127,.3);padding:.25em .5em;
 text-align:right}
.dl-compare-table th:nth-child(2),.dl-compare-table td:nth-child(2){text-align:left}
""".split())


def columns_html(traces: list[Trace], names: list[str], *, color_by: str = "prob",
                 selected_step: int | None = None) -> str:
    """The runs' texts side by side, one column (`data-run`) of token chips each."""
    if not traces:
        return f'<div class="dl-empty">{esc("Pick two to four settings and press Compare.")}</div>'
    cells = []
    for i, (trace, name) in enumerate(zip(traces, names)):
        body = tokens_html(trace, color_by=color_by, selected_step=selected_step) if trace.start else \
            f'<div class="dl-empty">{esc(WAITING)}</div>'
        cells.append(f'<div class="dl-compare-run" data-run="{i}"><h4><span class="dl-swatch" '
                     f'style="background:{RUN_COLORS[i % len(RUN_COLORS)]}"></span>{esc(f"{i + 1}. {name}")}</h4>'
                     f'{body}</div>')
    return f'<div class="dl-compare"><style>{_CSS}</style><div class="dl-compare-grid">{"".join(cells)}</div></div>'


def entropy_figure(traces: list[Trace], names: list[str], *, selected_step: int | None = None) -> go.Figure:
    """Raw entropy per step, one line per run."""
    if not any(token_steps(t) or beam_steps(t) for t in traces):
        return empty_figure(x_title="step", y_title="entropy (nats)", height=HEIGHT)
    fig = go.Figure()
    for i, (trace, name) in enumerate(zip(traces, names)):
        steps = token_steps(trace) or beam_steps(trace)
        texts = [plotly_safe(label(getattr(e, "token_text", ""))) for e in steps]
        fig.add_trace(go.Scatter(
            x=[e.step for e in steps], y=[e.entropy for e in steps], name=plotly_safe(f"{i + 1}. {name}"),
            mode="lines+markers", marker=dict(size=4), line=dict(color=RUN_COLORS[i % len(RUN_COLORS)], width=2),
            customdata=texts, hovertemplate="step %{x}: %{customdata}<br>H = %{y:.2f} nats<extra>run " f"{i + 1}</extra>"))
    if selected_step is not None:
        fig.add_vline(x=selected_step, line=dict(color="#e4572e", width=1, dash="dot"))
    fig.update_layout(template=TEMPLATE, height=HEIGHT, margin=dict(l=55, r=20, t=40, b=45),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
                      xaxis=dict(title=dict(text="step")), yaxis=dict(title=dict(text="entropy (nats, raw)"),
                                                                      rangemode="tozero"))
    return fig


def distributions_figure(traces: list[Trace], names: list[str], step: int | None) -> go.Figure:
    """Every run's top alternatives at `step` (raw probabilities), one panel per run."""
    if step is None or not traces:
        return empty_figure("click a token in any run to see every run's distribution at that step",
                            x_title="next token", y_title="probability", height=HEIGHT)
    fig = make_subplots(rows=1, cols=len(traces), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[_panel_title(t, n, i, step) for i, (t, n) in enumerate(zip(traces, names))])
    for i, trace in enumerate(traces):
        event = next((e for e in token_steps(trace) if e.step == step), None)
        if event is None:
            continue
        tokens = [plotly_safe(label(t, 10)) for t in event.top_tokens[:TOP_K]]
        ids, probs = event.top_ids[:TOP_K], event.top_probs[:TOP_K]
        color = RUN_COLORS[i % len(RUN_COLORS)]
        fig.add_trace(go.Bar(
            x=list(range(1, len(tokens) + 1)), y=probs, name=f"run {i + 1}", showlegend=False,
            marker=dict(color=[("#e4572e" if t == event.token_id else color) for t in ids]), customdata=tokens,
            hovertemplate="%{customdata}<br>p = %{y:.4f}<extra>run " f"{i + 1}</extra>"), row=1, col=i + 1)
        fig.update_xaxes(tickmode="array", tickvals=list(range(1, len(tokens) + 1)), ticktext=tokens, tickangle=-45,
                         row=1, col=i + 1)
    fig.update_layout(template=TEMPLATE, height=HEIGHT + 40, margin=dict(l=50, r=15, t=60, b=80),
                      yaxis=dict(title=dict(text="probability (raw, T = 1)"), rangemode="tozero"))
    fig.update_annotations(font=dict(size=12))
    return fig


def _panel_title(trace: Trace, name: str, i: int, step: int) -> str:
    event = next((e for e in token_steps(trace) if e.step == step), None)
    if event is not None:
        return plotly_safe(f"{i + 1}. chose {label(event.token_text, 12)} (p={event.prob:.2f})")
    if beam_steps(trace) and not token_steps(trace):
        return plotly_safe(f"{i + 1}. {label(name, 14)}: no per-step distribution")
    return plotly_safe(f"{i + 1}. no step {step}")


def table_html(rows: list[dict]) -> str:
    """The statistics table (rows of `decoding.compare.table_rows`)."""
    if not rows:
        return ""
    head = "".join(f"<th>{esc(h)}</th>" for h in TABLE_HEADERS.values())
    body = "".join("<tr>" + "".join(f"<td>{esc(_cell(k, row.get(k)))}</td>" for k in TABLE_HEADERS) + "</tr>"
                   for row in rows)
    return (f'<div class="dl-compare"><style>{_CSS}</style><table class="dl-compare-table" id="dl-compare-stats">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def _cell(key: str, value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value).replace("_", " ") if key == "stop_reason" else str(value)


__all__ = ["RUN_COLORS", "TABLE_HEADERS", "columns_html", "distributions_figure", "entropy_figure", "table_html"]
