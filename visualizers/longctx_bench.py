"""The Long context lab's cross-run pictures, drawn from its benchmarks' JSON (no model, no trace):

    needle_compute_figure(report)   accuracy against compute: each method of `bench/bench_needle.py --json` (full
                                    context, DRAG, IterDRAG, TTT, thinking) one line through its windows (1K, 2K,
                                    4K, ...), x the median GFLOPs per question (log scale), y the share of right
                                    answers; the questions behind each point on hover
    context_speed_figure(result)    tokens per second and acceptance against context length from
                                    `bench/bench_long_context.py --json`: plain greedy and each drafter's decode speed
                                    (1000 / ms per token after the prefill), and each drafter's acceptance rate.
                                    Reads the format with `rows[i].drafters[name]` and, for older files, the one with
                                    RAPID's figures at the top level of each row

`bench/plot_longctx.py` draws them to PNG (docs/longctx.md shows them).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from visualizers._common import TEMPLATE, empty_figure, plotly_safe

LABELS = {"full": "full context", "drag": "DRAG (top 4)", "iterdrag": "IterDRAG", "ttt": "TTT (train)",
          "think": "thinking (matched FLOPs)", "plain": "plain greedy"}
COLORS = {"full": "#9ecae9", "drag": "#f58518", "iterdrag": "#e45756", "ttt": "#b279a2", "think": "#72b7b2",
          "plain": "#4c78a8", "rapid": "#f58518", "longspec": "#54a24b", "eagle": "#b279a2"}
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x")


def _window(size) -> str:
    return f"{size // 1024}K" if isinstance(size, int) and size % 1024 == 0 else str(size)


def needle_compute_figure(report: dict) -> go.Figure:
    """Accuracy against GFLOPs per question, one line per method through its windows (see the module docstring)."""
    rows = [r for r in report.get("rows", []) if r.get("depth") == "all"]
    methods = [m for m in report.get("settings", {}) or LABELS if any(m in r for r in rows)]
    if not rows or not methods:
        return empty_figure("No rows: run bench/bench_needle.py --json", title="Accuracy against compute")
    fig = go.Figure()
    for k, m in enumerate(methods):
        cells = [(r["size"], r["questions"], r[m]) for r in rows if m in r]
        fig.add_trace(go.Scatter(
            x=[c["gflops"] for _, _, c in cells], y=[c["accuracy"] for _, _, c in cells], mode="lines+markers+text",
            name=LABELS.get(m, m), text=[_window(s) for s, _, _ in cells],
            textposition="bottom center" if k % 2 else "top center",  # neighbours' labels on opposite sides
            line=dict(color=COLORS.get(m)), marker=dict(size=10, symbol=SYMBOLS[k % len(SYMBOLS)]),
            hovertext=[plotly_safe(f"{LABELS.get(m, m)}, {_window(s)} window: {round(c['accuracy'] * n)}/{n} right, "
                                   f"{c['gflops']:.0f} GFLOPs and {c['cpu_s']:.1f} CPU s per question (medians)")
                       for s, n, c in cells], hoverinfo="text"))
    total = {m: (sum(round(r[m]["accuracy"] * r["questions"]) for r in rows if m in r),
                 sum(r["questions"] for r in rows if m in r)) for m in methods}
    overall = "; ".join(f"{LABELS.get(m, m)} {k}/{n}" for m, (k, n) in total.items())
    model = plotly_safe(str(report.get("model", "")))
    fig.update_layout(template=TEMPLATE, width=900, height=520, margin=dict(l=70, r=30, t=90, b=60),
                      title=dict(text=f"Needle accuracy against compute ({model}, one line per method through its "
                                      f"windows)<br><span style='font-size:12px'>right answers: {plotly_safe(overall)}"
                                      "</span>", x=0.01, xanchor="left"),
                      legend=dict(orientation="h", y=-0.16))
    fig.update_xaxes(title_text="GFLOPs per question (median, log scale)", type="log")
    fig.update_yaxes(title_text="share of answers right", range=[-0.05, 1.12])
    return fig


def _drafter_rows(row: dict) -> dict:
    """{drafter: its figures} of one row: the newer format's `drafters`, or RAPID's top-level figures."""
    if isinstance(row.get("drafters"), dict):
        return row["drafters"]
    if "rapid_s" in row:
        return {"rapid": {"s": row["rapid_s"], "ms_per_token": row.get("rapid_ms_per_token"),
                          "speedup": row.get("speedup"), "decode_speedup": row.get("decode_speedup"),
                          "acceptance_rate": row.get("acceptance_rate")}}
    return {}


def context_speed_figure(result: dict) -> go.Figure:
    """Decode tokens/s (plain greedy and each drafter) and acceptance against the prompt's length."""
    rows = sorted(result.get("rows", []), key=lambda r: r.get("prompt_tokens") or r.get("size") or 0)
    if not rows:
        return empty_figure("No rows: run bench/bench_long_context.py --json", title="Speed against context length")
    drafters = list(dict.fromkeys(d for r in rows for d in _drafter_rows(r)))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("decode speed (after the prefill)", "acceptance rate"),
                        horizontal_spacing=0.1)
    x = [r.get("prompt_tokens") or r.get("size") for r in rows]
    label = [_window(r.get("size")) for r in rows]

    def per_s(ms) -> float | None:
        return round(1000 / ms, 2) if isinstance(ms, (int, float)) and ms > 0 else None

    fig.add_trace(go.Scatter(x=x, y=[per_s(r.get("plain_ms_per_token")) for r in rows], mode="lines+markers",
                             name=LABELS["plain"], line=dict(color=COLORS["plain"], width=3), text=label,
                             hovertemplate="plain greedy, %{text} window (%{x} prompt tokens): %{y} tokens/s"
                                           "<extra></extra>"), row=1, col=1)
    for k, d in enumerate(drafters):
        cells = [_drafter_rows(r).get(d, {}) for r in rows]
        color, symbol = COLORS.get(d, "#888"), SYMBOLS[k % len(SYMBOLS)]
        name = plotly_safe(d)
        hover = [plotly_safe(f"{d}, {w} window: {c.get('speedup')}x end to end, {c.get('decode_speedup')}x after "
                             f"the prefill") for w, c in zip(label, cells)]
        fig.add_trace(go.Scatter(x=x, y=[per_s(c.get("ms_per_token")) for c in cells], mode="lines+markers", name=name,
                                 line=dict(color=color), marker=dict(symbol=symbol, size=9), hovertext=hover,
                                 hoverinfo="text+y", legendgroup=name), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[c.get("acceptance_rate") for c in cells], mode="lines+markers", name=name,
                                 line=dict(color=color), marker=dict(symbol=symbol, size=9), showlegend=False,
                                 legendgroup=name, hovertemplate=f"{name}: acceptance %{{y}}<extra></extra>"),
                      row=1, col=2)
    model = plotly_safe(str(result.get("model", "")))
    tokens = result.get("tokens")
    fig.update_layout(template=TEMPLATE, width=1000, height=470, margin=dict(l=70, r=30, t=90, b=60),
                      title=dict(text=f"Speed and acceptance against context length ({model}"
                                      + (f", {tokens} tokens" if isinstance(tokens, int) else "") + ", CPU medians)",
                                 x=0.01, xanchor="left"),
                      legend=dict(orientation="h", y=-0.18))
    fig.update_xaxes(title_text="prompt tokens", type="log", tickvals=x, ticktext=[f"{v:,}" for v in x])
    fig.update_yaxes(title_text="tokens / s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="accepted / drafted", range=[0, 1.05], row=1, col=2)
    return fig
