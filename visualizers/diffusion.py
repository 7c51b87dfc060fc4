"""Masked-diffusion LM pictures: the live canvas, the order positions were unmasked in, confidence over
steps, tokens per step against NFE, samplers compared, autoregressive versus diffusion, a summary, and
the per-task benchmark's accuracy against tokens per step (ParallelBench's picture).

Papers followed: Sahoo et al. 2024 "MDLM" and Nie et al. 2025 "LLaDA" (masked diffusion, low-confidence
remasking, semi-autoregressive blocks), Wu et al. 2025 "Fast-dLLM" (confidence-threshold parallel
unmasking, NFE counting), Kang et al. 2025 "ParallelBench" (accuracy against tokens per step, per task).
The events are `DiffusionStep`, one per denoising step (decoding/events.py); the benchmark chart reads the
JSON object `bench/bench_diffusion.py --model tiny-parallel --json` prints.

Glossary
    canvas      the L generated positions after the prompt; each holds a token or [MASK].
    mask        a position not decided yet (`canvas[i] == -1`), shown as a grey ▒ chip.
    unmask      commit a position to a token; `confidence` is the score the sampler ranked it by.
    remask      send a committed position back to [MASK] (some samplers do; the canvas shows it).
    block       semi-autoregressive chunk of the canvas: blocks are denoised left to right, and
                positions inside a block in any order.
    NFE         number of function evaluations: model calls so far (`nfe`), the cost measure.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.events import DiffusionStep
from visualizers._common import (CELLS, MARKS, NODES, TEMPLATE, cap, empty_figure, esc, label, note_capped, plotly_safe,
                                 shown_of, table, visible, vlines)
from visualizers.tokens import _chip_text, chip_color

WAITING_DIFFUSION = "waiting for the first denoising step…"
COLORS = {"masked": "#d9d9d9", "new": "#e4572e", "mean": "#4c78a8", "nfe": "#333333", "threshold": "#e45756",
          "bar": ["#9ecae1", "#fdd0a2"], "canvas": "#888888"}
RUN_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2"]


def _fmt(x, spec=".3g") -> str:
    return "—" if x is None else format(x, spec)


def _check_steps(steps) -> list[DiffusionStep]:
    steps = list(steps or [])
    bad = next((s for s in steps if not isinstance(s, DiffusionStep)), None)
    if bad is not None:
        raise ValueError(f"`steps` must hold DiffusionStep events only, got a {type(bad).__name__}")
    return steps


def confidence_range(steps: list[DiffusionStep]) -> tuple[float, float]:
    """(0, 1) for probability-like scores; the scores' own range otherwise (margins, -entropy, keys)."""
    values = [c for s in steps for c in s.confidence if c is not None and math.isfinite(c)]
    if not values or (min(values) >= 0 and max(values) <= 1):
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def commits(steps: list[DiffusionStep]) -> dict[int, tuple[int, float]]:
    """Position -> (step, confidence) of its latest commit, for positions committed after the last step."""
    out: dict[int, tuple[int, float]] = {}
    for s in steps:
        out.update({p: (s.step, c) for p, c in zip(s.unmasked, s.confidence)})
    if not steps:
        return out
    canvas = steps[-1].canvas  # one pass at the end (not per step: 2,048 steps x 2,048 positions)
    return {p: v for p, v in out.items() if 0 <= p < len(canvas) and canvas[p] != -1}  # remasked drop out


# ---------------------------------------------------------------- the live canvas (HTML)

_CSS = " ".join("""
.dl-canvas{font-size:14px}.dl-canvas .dl-head{font-size:13px;opacity:.8;margin-bottom:.4em}
.dl-canvas .cells{display:flex;flex-wrap:wrap;gap:3px;line-height:1.6}
.dl-canvas .cell,.dl-canvas .key{color:#111;border-radius:4px;padding:0 4px;min-width:1.4em;text-align:center;
 white-space:pre;font-family:ui-monospace,monospace;font-size:13px;border:1px solid rgba(0,0,0,.12)}
.dl-canvas .masked{color:#777;letter-spacing:1px}
.dl-canvas .new{outline:2px solid #e4572e;outline-offset:1px;box-shadow:0 0 6px 1px rgba(228,87,46,.6)}
.dl-canvas .remasked{border:1px dashed #e4572e}.dl-canvas .rejected{outline:2px dashed #4c78a8;outline-offset:1px}
.dl-canvas .sym{opacity:.55}
.dl-canvas .dl-legend{display:flex;flex-wrap:wrap;align-items:center;gap:.5em;font-size:12px;opacity:.85;
 margin-bottom:.4em}.dl-canvas .dl-bar{display:inline-block;width:8em;height:.9em;border-radius:3px}
.dl-canvas .dl-empty{font-size:13px;opacity:.75;font-style:italic}
""".split())


def _cell_text(text: str) -> str:
    """Escaped token text for a cell: newline, tab, controls as symbols, spaces as a dim ␣."""
    if text == "":
        return '<span class="sym">∅</span>'
    out = []
    for ch in text:
        shown = "␣" if ch == " " else visible(ch)
        out.append(esc(ch) if shown == ch else f'<span class="sym">{esc(shown)}</span>')
    return "".join(out)


def _masked_tint(p) -> str:
    """Grey, warmed a little towards the confidence colour of the masked position's top-1 probability."""
    if not isinstance(p, (int, float)) or not math.isfinite(p):
        return COLORS["masked"]
    a = chip_color(p)
    mix = [round(0.7 * int(COLORS["masked"][i:i + 2], 16) + 0.3 * int(a[i:i + 2], 16)) for i in (1, 3, 5)]
    return "#{:02x}{:02x}{:02x}".format(*mix)


def canvas_html(steps: list[DiffusionStep], upto: int | None = None) -> str:
    """The canvas after step `upto` (default: the latest) as a wrapping row of cells, one per position.
    Masked cells are grey ▒ chips (tinted by their current top-1 probability); committed cells are
    coloured by the confidence they were committed with (purple = unsure, yellow = sure); cells
    unmasked at this step glow. Hover a cell for position, token, step committed and confidence."""
    if upto is not None and (isinstance(upto, bool) or not isinstance(upto, int) or upto < 0):
        raise ValueError(f"`upto` must be None or a step number >= 0, got {upto!r}")
    steps = _check_steps(steps)
    head = f'<div class="dl-canvas"><style>{_CSS}</style>'
    shown = steps if upto is None else [s for s in steps if s.step <= upto]
    if not shown or (upto is not None and upto > steps[-1].step):
        msg = f"step {upto} has not been played yet (last step: {steps[-1].step})" if steps else WAITING_DIFFUSION
        return f'{head}<div class="dl-empty">{esc(msg)}</div></div>'
    now, before = shown[-1], (shown[-2] if len(shown) > 1 else None)
    done, (lo, hi) = commits(shown), confidence_range(steps)
    new = set(now.unmasked)
    rejected = set(now.extra.get("rejected") or ())  # FreeDave: drafted this round, not verified
    verified = "verified" in now.extra
    filter_p = now.extra.get("filter_p") or []  # Learn2PD: the filter's p(final) of each candidate
    cells = []
    for i, tok in enumerate(now.canvas):
        if tok == -1:
            p = now.masked_confidence[i] if i < len(now.masked_confidence) else None
            remasked = before is not None and before.canvas[i] != -1
            tip = f"position {i} · [MASK]{' (remasked at this step)' if remasked else ''}\ntop-1 p = {_fmt(p)}"
            if i in rejected:
                tip += "\ndrafted this round, rejected by verification (FreeDave)"
            fp = filter_p[i] if i < len(filter_p) else None
            if isinstance(fp, (int, float)):
                tip += f"\nLearn2PD filter: p(final) = {_fmt(fp)}"
            cls = "cell masked" + (" remasked" if remasked else "") + (" rejected" if i in rejected else "")
            bg, body = _masked_tint(p), "▒"
            data = f'data-pos="{esc(i)}" data-p="{esc(_fmt(p, ".4g"))}"'
        else:
            text = now.canvas_text[i]
            step, conf = done.get(i, (None, None))
            final = i in new and i in (now.extra.get("predicted_final") or ())
            tip = (f"position {i} · '{visible(text)}' (id {tok})\ncommitted at step {_fmt(step, 'd')}"
                   f"{' (this step)' if i in new else ''} · confidence {_fmt(conf)}"
                   f"{' · a verified draft (FreeDave)' if verified and i in new else ''}"
                   f"{' · the filter said final (Learn2PD)' if final else ''}")
            cls = "cell committed" + (" new" if i in new else "")
            bg = chip_color((conf - lo) / (hi - lo)) if conf is not None else COLORS["masked"]
            body = _cell_text(text)
            data = f'data-pos="{esc(i)}" data-step="{esc(_fmt(step, "d"))}" data-conf="{esc(_fmt(conf, ".4g"))}"'
        tip = esc(tip).replace("\n", "&#10;")
        cells.append(f'<span class="{cls}" {data} style="background:{esc(bg)}" title="{tip}">{body}</span>')
    masked = now.canvas.count(-1)
    info = (f"step {now.step} · block {now.block} · unmasked {len(now.unmasked)} this step · "
            f"{len(now.canvas) - masked} of {len(now.canvas)} committed, {masked} masked · NFE {now.nfe}")
    if verified:
        info += (f" · FreeDave: {now.extra.get('steps_advanced')} of {now.extra.get('draft_steps')} drafted steps "
                 f"verified, {len(rejected)} positions rejected")
    if "predicted_final" in now.extra:
        info += f" · Learn2PD: {len(now.extra['predicted_final'])} predicted final"
    stops = ",".join(chip_color(k / 10) for k in range(11))
    legend = (f'<div class="dl-legend"><span>colour = confidence at commit: {esc(format(lo, ".3g"))}</span>'
              f'<span class="dl-bar" style="background:linear-gradient(to right,{esc(stops)})"></span>'
              f'<span>{esc(format(hi, ".3g"))} ·</span>'
              f'<span class="key masked" style="background:{COLORS["masked"]}">▒</span><span>masked ·</span>'
              f'<span class="key new" style="background:#fff">new</span><span>unmasked at this step</span>'
              + (f'<span>·</span><span class="key masked rejected" style="background:{COLORS["masked"]}">▒</span>'
                 '<span>drafted, rejected by verification</span>' if verified else '')
              + '</div>')
    return (f'{head}<div class="dl-head">{esc(info)}</div>{legend}'
            f'<div class="cells">{"".join(cells)}</div></div>')


# ---------------------------------------------------------------- unmasking order


def block_boundaries(steps: list[DiffusionStep], block_length: int | None = None) -> list[float]:
    """x of the lines between blocks: multiples of `block_length` (or `extra["block_length"]`) when
    known, else just right of each finished block's last committed position."""
    if block_length is not None and (isinstance(block_length, bool) or not isinstance(block_length, int)
                                     or block_length < 1):
        raise ValueError(f"`block_length` must be None or an integer >= 1, got {block_length!r}")
    if not steps:
        return []
    length = len(steps[-1].canvas)
    block_length = block_length or steps[-1].extra.get("block_length")
    if block_length:
        return [k * block_length - 0.5 for k in range(1, -(-length // block_length))]
    ends: dict[int, int | None] = {}  # block -> its last committed position (one pass over the steps)
    for s in steps:
        last = max(s.unmasked, default=None)
        known = ends.get(s.block)
        ends[s.block] = last if known is None else known if last is None else max(known, last)
    blocks = sorted(ends)
    return [ends[b] + 0.5 for b in blocks[:-1] if ends[b] is not None]


def unmask_order_figure(steps: list[DiffusionStep], *, block_length: int | None = None) -> go.Figure:
    """When each position was committed: position (x) × step (y, downwards). A coloured cell is a
    commit (colour = confidence); grey cells are still masked after that step. A diagonal means
    left to right, scattered cells mean any order; dashed lines separate semi-AR blocks."""
    steps = _check_steps(steps)
    x_title, y_title = "position on the canvas", "step"
    if not steps:
        return empty_figure(WAITING_DIFFUSION, x_title=x_title, y_title=y_title)
    length = len(steps[-1].canvas)
    group = max(1, -(-len(steps) * length // cap(CELLS)))  # steps per row: the cells stay within the cap
    rows = [steps[k:k + group] for k in range(0, len(steps), group)]
    xs, ys = list(range(length)), [r[-1].step for r in rows]
    z = [[math.nan] * length for _ in rows]  # (R, L): confidence at commit, NaN elsewhere
    text = [[""] * length for _ in rows]  # short, in the cell
    full = [[""] * length for _ in rows]  # quoted, in the hover
    for row, r in enumerate(rows):
        for s in r:  # a later commit of the row's steps wins
            for p, c in zip(s.unmasked, s.confidence):
                if 0 <= p < length:
                    z[row][p], full[row][p] = c, plotly_safe(label(s.canvas_text[p], 24))
                    text[row][p] = plotly_safe(visible(s.canvas_text[p].strip() or s.canvas_text[p])[:5])
    masked = [[0 if t == -1 else math.nan for t in r[-1].canvas] for r in rows]  # after the row's last step
    lo, hi = confidence_range(steps)
    fig = go.Figure()
    grey = [[0, COLORS["masked"]], [1, COLORS["masked"]]]
    # numpy arrays: plotly checks a nested list cell by cell in Python (200,000 cells took seconds), an array at once
    fig.add_trace(go.Heatmap(x=xs, y=ys, z=np.array(masked, dtype=float), name="masked", colorscale=grey,
                             showscale=False, xgap=1, ygap=1,
                             hovertemplate="position %{x} · step %{y}: still masked<extra></extra>"))
    small = length <= 16  # room for a few characters per cell (32 cells in the tab's ~420 px overlapped)
    fig.add_trace(go.Heatmap(
        x=xs, y=ys, z=np.array(z, dtype=float), name="committed", colorscale="Viridis", zmin=lo, zmax=hi, xgap=1,
        ygap=1, text=np.array(text, dtype=object) if small else None, customdata=np.array(full, dtype=object),
        texttemplate="%{text}" if small else None, textfont=dict(size=10),
        colorbar=dict(title=dict(text="confidence"), thickness=12),
        hovertemplate="position %{x} committed at step %{y}<br>%{customdata} · confidence %{z:.3f}<extra></extra>"))
    bounds = block_boundaries(steps, block_length)
    shown = bounds[:cap(MARKS)]
    if shown:  # one trace for all the lines, spanning the rows
        fig.add_trace(vlines(shown, ys[0] - 0.5 * max(1, group), ys[-1] + 0.5 * max(1, group), "block boundary",
                             dict(color="#333", dash="dash", width=1.5)))
    note_capped(fig, [shown_of(len(shown), len(bounds), "block boundaries"),
                      f"{group} steps per row ({len(rows)} rows for {len(steps)} steps)" if group > 1 else ""])
    fig.update_layout(template=TEMPLATE, height=min(max(260, 120 + 26 * len(rows)), 700),
                      margin=dict(l=55, r=20, t=30, b=45), plot_bgcolor="#ffffff",
                      xaxis=dict(title=dict(text=x_title), range=[-0.5, length - 0.5], showgrid=False,
                                 dtick=max(1, -(-length // 16))),  # 16 ticks at most: 32 overlapped at 420 px
                      yaxis=dict(title=dict(text=y_title), autorange="reversed", showgrid=False,
                                 dtick=max(1, -(-(ys[-1] - ys[0] + 1) // 20))))
    return fig


# ---------------------------------------------------------------- confidence, tokens per step, samplers


def confidence_figure(steps: list[DiffusionStep]) -> go.Figure:
    """Per step, the confidence of each token committed (dots) and the mean top-1 probability of the
    positions still masked after it (line): how sure the model was of what it fixed and of what is
    left. A dotted line marks the sampler's threshold when it uses one."""
    steps = _check_steps(steps)
    x_title, y_title = "step", "confidence"
    if not steps:
        return empty_figure(WAITING_DIFFUSION, x_title=x_title, y_title=y_title)
    lo, hi = confidence_range(steps)
    pts = [(s, c, p) for s in steps for p, c in zip(s.unmasked, s.confidence)]  # (its step, confidence, position)
    total = len(pts)
    pts = [(s.step, c, p, s.canvas_text[p] if 0 <= p < len(s.canvas_text) else "")
           for s, c, p in pts[::max(1, -(-total // cap(NODES)))]]  # every k-th commit beyond the cap
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[t[0] for t in pts], y=[t[1] for t in pts], mode="markers", name="committed tokens",
        marker=dict(size=9, color=[t[1] for t in pts], colorscale="Viridis", cmin=lo, cmax=hi,
                    line=dict(color="#333", width=0.5)),
        customdata=table([[t[2], plotly_safe(label(t[3], 20))] for t in pts]),
        hovertemplate="step %{x}: position %{customdata[0]} %{customdata[1]}<br>confidence %{y:.3f}<extra></extra>"))
    means = [_finite_mean(s.masked_confidence) for s in steps]
    fig.add_trace(go.Scatter(
        x=[s.step for s in steps], y=means, mode="lines+markers", name="mean top-1 p of masked positions",
        line=dict(color=COLORS["mean"], width=2), marker=dict(size=5), customdata=[s.canvas.count(-1) for s in steps],
        hovertemplate="after step %{x}: %{customdata} masked, mean top-1 p %{y:.3f}<extra></extra>"))
    threshold = steps[-1].extra.get("threshold")
    unit = (lo, hi) == (0.0, 1.0) and (not isinstance(threshold, (int, float)) or 0 <= threshold <= 1)
    if isinstance(threshold, (int, float)):
        fig.add_trace(go.Scatter(x=[steps[0].step - 0.5, steps[-1].step + 0.5], y=[threshold] * 2, mode="lines",
                                 name=f"threshold {threshold:g}", hoverinfo="skip",
                                 line=dict(color=COLORS["threshold"], dash="dot", width=1.5)))
    fig.update_layout(template=TEMPLATE, height=340, margin=dict(l=55, r=20, t=30, b=45),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
                      xaxis=dict(title=dict(text=x_title), dtick=max(1, -(-len(steps) // 20)),
                                 range=[-0.5, steps[-1].step + 0.5]),
                      yaxis=dict(title=dict(text=y_title), range=[0, 1.05] if unit else None))
    return note_capped(fig, [shown_of(len(pts), total, "committed tokens (every k-th)")])


def _finite_mean(values) -> float | None:
    """The mean of the finite numbers among `values` (None = a committed position), in numpy: a 2,048-position
    canvas over 2,048 steps is 4 million values."""
    try:
        a = np.array(values, dtype=float)  # None -> NaN
    except (TypeError, ValueError):  # a hand-made trace with text in it
        return None
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None


def tokens_per_step_figure(steps: list[DiffusionStep]) -> go.Figure:
    """Bars: tokens committed at each step (shade = block). Line, right axis: NFE so far. Many tokens
    per step with a slowly rising NFE is what makes diffusion decoding fast."""
    steps = _check_steps(steps)
    if not steps:
        return empty_figure(WAITING_DIFFUSION, x_title="step", y_title="tokens unmasked")
    x = [s.step for s in steps]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(
        x=x, y=[len(s.unmasked) for s in steps], name="tokens unmasked",
        marker=dict(color=[COLORS["bar"][s.block % 2] for s in steps], line=dict(color="#555", width=0.5)),
        customdata=[[s.block, ", ".join(map(str, s.unmasked)) or "none"] for s in steps],
        hovertemplate="step %{x} (block %{customdata[0]}): %{y} unmasked<br>positions %{customdata[1]}"
                      "<extra></extra>"), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=[s.nfe for s in steps], mode="lines+markers", name="NFE so far",
                             line=dict(color=COLORS["nfe"], width=2), marker=dict(size=5),
                             hovertemplate="after step %{x}: NFE %{y}<extra></extra>"), secondary_y=True)
    fig.update_xaxes(title_text="step", dtick=max(1, -(-len(steps) // 20)), range=[-0.5, steps[-1].step + 0.5])
    fig.update_yaxes(title_text="tokens unmasked", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="NFE (model calls)", rangemode="tozero", showgrid=False, tick0=0,
                     dtick=max(1, -(-steps[-1].nfe // 5)), secondary_y=True)
    fig.update_layout(template=TEMPLATE, height=320, margin=dict(l=55, r=55, t=30, b=45), bargap=0.2,
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0))
    return fig


def compare_samplers_figure(runs: dict[str, list[DiffusionStep]]) -> go.Figure:
    """Cumulative tokens committed (y) against NFE (x), one line per sampler on the same prompt. The
    line that reaches the top (the whole canvas) furthest left finished with the fewest model calls."""
    if not isinstance(runs, dict):
        raise ValueError(f"`runs` must be a dict of sampler name -> list of DiffusionStep, got {type(runs).__name__}")
    x_title, y_title = "NFE (model calls)", "tokens committed"
    if not runs:
        return empty_figure("no runs to compare yet", x_title=x_title, y_title=y_title)
    fig, length, most = go.Figure(), 0, 0
    for k, (name, steps) in enumerate(runs.items()):
        steps = _check_steps(steps)
        xs, ys = [0], [0]
        for s in steps:
            xs.append(s.nfe)
            ys.append(len(s.canvas) - s.canvas.count(-1))
            length = max(length, len(s.canvas))
        most = max(most, xs[-1])
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines+markers+text", name=plotly_safe(str(name)),
            text=[""] * (len(xs) - 1) + [f"{xs[-1]} NFE"], textposition="middle right",
            line=dict(color=RUN_COLORS[k % len(RUN_COLORS)], width=2, shape="hv"), marker=dict(size=6),
            hovertemplate=f"{plotly_safe(str(name))}<br>NFE %{{x}}: %{{y}} tokens committed<extra></extra>"))
    if length:
        fig.add_hline(y=length, line=dict(color=COLORS["canvas"], dash="dot", width=1),
                      annotation_text=f"canvas L = {length}", annotation_position="bottom left")
    fig.update_layout(template=TEMPLATE, height=340, margin=dict(l=55, r=40, t=30, b=45),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
                      xaxis=dict(title=dict(text=x_title), range=[0, most * 1.2 + 1]),  # room for "48 NFE"
                      yaxis=dict(title=dict(text=y_title), rangemode="tozero"))
    return fig


# ---------------------------------------------------------------- tables (HTML)

_TABLE_CSS = (".dl-diff-table table{border-collapse:collapse;font-size:14px}.dl-diff-table th{text-align:left;"
              "font-weight:600;padding:2px 12px 2px 0}.dl-diff-table td{padding:2px 12px 2px 0;"
              "font-variant-numeric:tabular-nums}.dl-diff-table .dl-hint{opacity:.65;font-size:12px}"
              ".dl-diff-table td.best{font-weight:700}.dl-diff-table .texts{display:grid;"
              "grid-template-columns:1fr 1fr;gap:10px;margin-top:8px}.dl-diff-table .text{white-space:pre-wrap;"
              "word-break:break-word;border:1px solid #ddd;border-radius:6px;padding:6px 8px;font-size:13px}"
              ".dl-diff-table .dl-empty{font-size:13px;opacity:.75;font-style:italic}")


def _num(x) -> str:
    return _fmt(x, ".4g") if isinstance(x, float) else "—" if x is None else str(x)


def _per_pass(stats: dict, passes) -> float | None:
    tokens = stats.get("num_tokens")
    return round(tokens / passes, 3) if isinstance(tokens, (int, float)) and passes else None


def ar_vs_diffusion_html(ar_stats: dict, diffusion_stats: dict, ar_text: str, diffusion_text: str) -> str:
    """Autoregressive and diffusion decoding of the same prompt side by side: tokens, forward passes
    (NFE for diffusion), tokens per forward pass, elapsed, tokens/s (the better value in bold), then both texts."""
    for name, value in (("ar_stats", ar_stats), ("diffusion_stats", diffusion_stats)):
        if not isinstance(value, dict):
            raise ValueError(f"`{name}` must be a stats dict (decoding.events.stats), got {type(value).__name__}")
    ar_passes = ar_stats.get("forward_passes")
    dm_passes = diffusion_stats.get("nfe", diffusion_stats.get("forward_passes"))
    rows = [("tokens", ar_stats.get("num_tokens"), diffusion_stats.get("num_tokens"), None),
            ("forward passes (NFE)", ar_passes, dm_passes, min),
            ("tokens per forward pass", _per_pass(ar_stats, ar_passes), _per_pass(diffusion_stats, dm_passes), max),
            ("elapsed (s)", ar_stats.get("elapsed_s"), diffusion_stats.get("elapsed_s"), min),
            ("tokens/s", ar_stats.get("tokens_per_s"), diffusion_stats.get("tokens_per_s"), max)]
    body = []
    for name, a, d, better in rows:
        numbers = isinstance(a, (int, float)) and isinstance(d, (int, float))
        best = better(a, d) if better and numbers and a != d else None
        cells = "".join(f'<td{" class=best" if v == best and best is not None else ""}>{esc(_num(v))}</td>'
                        for v in (a, d))
        body.append(f"<tr><th>{esc(name)}</th>{cells}</tr>")
    texts = "".join(f'<div><b>{esc(who)}</b><div class="text">{_chip_text(t) if t else "<i>no text yet</i>"}'
                    f"</div></div>" for who, t in (("autoregressive", ar_text), ("diffusion", diffusion_text)))
    return (f'<div class="dl-diff-table dl-ar-vs-diffusion"><style>{_TABLE_CSS}</style><table>'
            f'<tr><th></th><th>autoregressive</th><th>diffusion</th></tr>{"".join(body)}</table>'
            f'<div class="texts">{texts}</div></div>')


SUMMARY = [("num_tokens", "tokens", ""), ("nfe", "NFE (model calls)", ""),
           ("diffusion_steps", "denoising steps", ""), ("tokens_per_step", "tokens per step", "autoregressive: 1"),
           ("nfe_per_token", "NFE per token", "autoregressive: 1"), ("elapsed_s", "elapsed (s)", "")]


def diffusion_summary_html(stats: dict | None) -> str:
    """A table of the run's diffusion statistics (only the keys present)."""
    stats = stats or {}
    rows = [(name, stats[key], hint) for key, name, hint in SUMMARY if key in stats]
    if "nfe" not in stats and "diffusion_steps" not in stats:
        return '<div class="dl-diff-table"><div class="dl-empty">no diffusion statistics yet</div></div>'
    cells = "".join(f"<tr><th>{esc(a)}</th><td>{esc(_num(b))}</td>"
                    f'<td class="dl-hint">{esc(c)}</td></tr>' for a, b, c in rows)
    return f'<div class="dl-diff-table dl-diff-summary"><style>{_TABLE_CSS}</style><table>{cells}</table></div>'


# ---------------------------------------------------------------- the per-task benchmark (ParallelBench)

FIXED_SCHEDULES = ("steps=length", "fixed 2/step", "fixed 4/step", "fixed 8/step")  # bench_diffusion's names
TASK_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d", "#ff9da6",
               "#79706e"]  # one per task (Tableau 10)


def _bench_tasks(bench) -> dict:
    if not isinstance(bench, dict) or not isinstance(bench.get("tasks"), dict):
        raise ValueError("`bench` must be the JSON object of `bench/bench_diffusion.py --model tiny-parallel --json` "
                         f"(a dict with a \"tasks\" mapping), got {type(bench).__name__}"
                         + (f" with keys {', '.join(map(str, bench))}" if isinstance(bench, dict) else ""))
    for task, row in bench["tasks"].items():
        if not isinstance(row, dict) or not isinstance(row.get("samplers"), dict):
            raise ValueError(f"`bench` task {task!r} must hold \"determined\" and a \"samplers\" mapping")
    return bench["tasks"]


def accuracy_vs_tokens_per_step_figure(bench: dict, *, schedules: tuple[str, ...] = FIXED_SCHEDULES) -> go.Figure:
    """Per task, checker accuracy (y, %) against tokens committed per model call (x, log scale) for the
    fixed schedules (one token per step, then 2, 4 and 8): one colour per task, solid lines for
    determined tasks (one right answer), dashed for dependent ones (many right answers whose tokens
    depend on each other). ParallelBench's finding is that the dashed lines fall as x grows while the
    solid ones can stay level. `bench` is the benchmark's JSON object; samplers it lacks are skipped."""
    tasks = _bench_tasks(bench)
    x_title, y_title = "tokens per step (fixed schedule)", "accuracy (%)"
    fig = go.Figure()
    xs_all = []
    for k, (task, row) in enumerate(tasks.items()):
        points = [(name, row["samplers"][name]) for name in schedules if isinstance(row["samplers"].get(name), dict)]
        points = [(name, r) for name, r in points
                  if isinstance(r.get("tokens_per_step"), (int, float)) and isinstance(r.get("accuracy"), (int, float))]
        if not points:
            continue
        determined = bool(row.get("determined"))
        group = "determined" if determined else "dependent"
        xs = [r["tokens_per_step"] for _, r in points]
        xs_all += xs
        fig.add_trace(go.Scatter(
            x=xs, y=[100 * r["accuracy"] for _, r in points], mode="lines+markers", name=plotly_safe(str(task)),
            legendgroup=group, legendgrouptitle_text=("determined: one right answer" if determined
                                                      else "dependent: many right answers"),
            line=dict(color=TASK_COLORS[k % len(TASK_COLORS)], width=2.5, dash="solid" if determined else "dash"),
            marker=dict(size=7, symbol="circle" if determined else "diamond"),
            customdata=[[plotly_safe(name), _fmt(r.get("nfe"), ".3g")] for name, r in points],
            hovertemplate=f"{plotly_safe(str(task))} ({group})<br>%{{customdata[0]}}: %{{x:.3g}} tokens per step, "
                          "NFE %{customdata[1]}<br>accuracy %{y:.1f}%<extra></extra>"))
    if not fig.data:
        return empty_figure("no fixed-schedule results in this benchmark", x_title=x_title, y_title=y_title)
    ticks = sorted({2 ** round(math.log2(x)) for x in xs_all if x > 0})
    length = bench.get("length")
    fig.update_layout(template=TEMPLATE, height=420, margin=dict(l=55, r=20, t=40, b=50),
                      title=dict(text=plotly_safe(f"{bench.get('model', 'the model')}, canvas of {length} positions"
                                                  if length else str(bench.get("model", ""))), font=dict(size=13)),
                      legend=dict(groupclick="toggleitem", tracegroupgap=12),
                      xaxis=dict(title=dict(text=x_title), type="log", tickvals=ticks, ticktext=[str(t) for t in ticks]),
                      yaxis=dict(title=dict(text=y_title), range=[-3, 103]))
    return fig
