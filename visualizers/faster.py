"""Pictures of the three drafter-free speed-ups, read from TokenStep.extra only (no model).

    lud_figure(trace)        the text with every lexical unit boxed: the tokens one forward wrote share
                             a colour (grey = a forward that wrote one token); hover a token for its
                             forward and its mask's probability.
    hamburger_figure(trace)  the text with every smashed slot boxed: the tokens one big forward wrote,
                             stored as ONE cache entry; a token's shade says which micro-step wrote it.
    ftp_figure(trace)        the layer map: one column per written token, one row per block; blue = the
                             block ran for the step that wrote the token, white = skipped (keys and
                             values only); hover for the router's score.

Each title gives the speed side (tokens per big forward, blocks that ran) and, where the model's
card measured it, the quality side (held-out loss against tiny-ar's, greedy agreement with tiny-ar).
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding.events import Trace
from visualizers._common import (MARKS, TEMPLATE, cap, empty_figure, note_capped, plotly_safe, shown_of, title_block,
                                token_steps, visible)

ROW_CHARS = 56  # characters per line of the token strip
GROUP_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2")  # cycled over groups of 2+ tokens
SINGLE = "#d9d9d9"  # a group of one token: nothing was gained there
SHOWN_COLUMNS = 160  # FTP: tokens drawn in the layer map
SMALL_CHARS = 100  # the titles' small lines wrap here (a half-page chart: ~110 characters of 12 px)


def _quality(extra: dict | None) -> str:
    if not extra:
        return ""
    loss, ref, agree = extra.get("val_loss"), extra.get("val_loss_tiny_ar"), extra.get("agree")
    agree = agree if agree is not None else extra.get("agree_tiny_ar")
    parts = []
    if loss is not None and ref is not None:
        parts.append(f"held-out loss {loss:.3f} vs tiny-ar {ref:.3f} nats/token")
    elif loss is not None:
        parts.append(f"held-out loss {loss:.3f} nats/token")
    if agree is not None:
        parts.append(f"top-1 agreement with tiny-ar {agree:.0%}")
    return "model card: " + ", ".join(parts) if parts else ""


def grouped_strip(steps: list, group_key: str, hover, title: str, small: str, height: int = 360) -> go.Figure:
    """The written text as one bar per token, wrapped into lines; the tokens of one group (unit, slot)
    share a colour and an outline. `hover(step)` -> the token's hover line."""
    shown = steps[: cap(MARKS)]
    groups, row, col = {}, 0, 0
    x0, widths, rows, texts, colors, hovers = [], [], [], [], [], []
    sizes: dict[int, int] = {}
    for e in steps:
        sizes[e.extra[group_key]] = sizes.get(e.extra[group_key], 0) + 1
    for e in shown:
        text = visible(e.token_text) or "·"
        width = max(len(text), 1)
        if col + width > ROW_CHARS and col > 0:
            row, col = row + 1, 0
        g = e.extra[group_key]
        if sizes[g] == 1:
            color = SINGLE
        else:
            color = groups.setdefault(g, GROUP_COLORS[len(groups) % len(GROUP_COLORS)])
        x0.append(col)
        widths.append(width)
        rows.append(row)
        texts.append(plotly_safe(text))
        colors.append(color)
        hovers.append(plotly_safe(hover(e)))
        col += width
    fig = go.Figure(go.Bar(
        base=x0, x=widths, y=rows, orientation="h", text=texts, textposition="inside", insidetextanchor="middle",
        textfont=dict(family="monospace", size=13, color="#111"), marker=dict(color=colors, line=dict(color="white", width=1)),
        hovertext=hovers, hoverinfo="text", width=0.8, showlegend=False))
    lines = row + 1
    title_layout, top = title_block([title], small=small, small_width=SMALL_CHARS)
    fig.update_layout(template=TEMPLATE, height=max(height, top + 40 + 26 * lines), title=title_layout,
                      margin=dict(l=20, r=20, t=top, b=20), bargap=0.1, uniformtext=dict(minsize=9, mode="show"))
    fig.update_xaxes(visible=False, range=[-0.5, ROW_CHARS + 0.5])
    fig.update_yaxes(visible=False, autorange="reversed", range=None)
    return note_capped(fig, [shown_of(len(shown), len(steps), "tokens")])


def lud_figure(trace: Trace) -> go.Figure:
    """Tokens grouped by the forward that wrote them (a lexical unit)."""
    steps = [e for e in token_steps(trace) if "unit" in e.extra]
    if not steps:
        return empty_figure(title="Lexical Unit Decoding: units per forward", height=360)
    forwards = len({e.extra["unit"] for e in steps})
    long_units = len({e.extra["unit"] for e in steps if e.extra["unit_size"] > 1})
    span = steps[0].extra["span"]
    quality = _quality(steps[0].extra.get("trained"))

    def hover(e):
        where = "the next token (from the last real position)" if e.extra["in_unit"] == 0 else \
            f"mask {e.extra['in_unit']}, p = {e.extra['mask_prob']:.2f}"
        return f"'{visible(e.token_text)}' forward {e.extra['unit'] + 1}: {where}"

    title = f"LUD: {len(steps)} tokens in {forwards} forwards ({len(steps) / forwards:.2f} per forward)"
    small = (f"{long_units} units of 2+ tokens; {span} masks per forward; boxed colour = one unit, grey = one token"
             + (f" · {quality}" if quality else ""))
    return grouped_strip(steps, "unit", hover, title, small)


def hamburger_figure(trace: Trace) -> go.Figure:
    """Tokens grouped by slot: each slot is one big forward and one cache entry; micro-steps on hover."""
    steps = [e for e in token_steps(trace) if "slot" in e.extra]
    if not steps:
        return empty_figure(title="HAMburger: smashed slots and micro-steps", height=360)
    slots = len({e.extra["slot"] for e in steps})
    prompt = steps[0].extra.get("prompt_slots", 0)
    micro = sum(1 for e in steps if e.extra["in_slot"] > 0)
    quality = _quality(steps[0].extra.get("trained"))

    def hover(e):
        how = "LM head (micro-step 1)" if e.extra["in_slot"] == 0 else \
            f"micro-step {e.extra['in_slot'] + 1}, p = {e.extra['micro_prob']:.2f}"
        return f"'{visible(e.token_text)}' slot {e.extra['slot'] + 1} of {e.extra['slot_size']} tokens: {how}"

    title = f"HAMburger: {len(steps)} tokens in {slots} big forwards ({len(steps) / slots:.2f} per forward)"
    small = (f"{micro} tokens written by micro-steps; cache: {prompt} + {slots} entries (a plain model: {prompt} + "
             f"{len(steps)}); boxed colour = one slot" + (f" · {quality}" if quality else ""))
    return grouped_strip(steps, "slot", hover, title, small)


def ftp_figure(trace: Trace) -> go.Figure:
    """Which blocks ran for each written token."""
    steps = [e for e in token_steps(trace) if "blocks" in e.extra]
    if not steps:
        return empty_figure(title="FTP: blocks each token used", height=360, x_title="token", y_title="block")
    blocks = steps[0].extra["num_blocks"]
    steps = [e for e in steps if len(e.extra["blocks"]) == blocks == len(e.extra.get("scores") or ())]
    shown = steps[:SHOWN_COLUMNS]
    z = [[e.extra["blocks"][b] for e in shown] for b in range(blocks)]  # (L, T)
    hover = [[plotly_safe(f"'{visible(e.token_text)}' block {b + 1}: {'ran' if e.extra['blocks'][b] else 'skipped'} "
                          f"(score {e.extra['scores'][b]:.2f})") for e in shown] for b in range(blocks)]
    fig = go.Figure(go.Heatmap(z=z, x=list(range(len(shown))), y=[f"block {b + 1}" for b in range(blocks)],
                               zmin=0, zmax=1, colorscale=[[0, "#f3f3f3"], [1, "#4c78a8"]], showscale=False,
                               hovertext=hover, hoverinfo="text", xgap=1, ygap=1))
    ran = sum(sum(e.extra["blocks"]) for e in steps)
    density = ran / (blocks * len(steps))
    threshold = steps[0].extra["threshold"]
    prompt = steps[0].extra.get("prompt_density")
    quality = _quality(steps[0].extra.get("trained"))
    title, top = title_block([f"FTP: {density:.0%} of blocks ran for {len(steps)} tokens (threshold {threshold:g})"],
                             small=("blue = ran, white = skipped (keys and values only)"
                                    + (f"; prompt {prompt:.0%}" if prompt is not None else "")
                                    + (f" · {quality}" if quality else "")), small_width=SMALL_CHARS)
    ticks = list(range(0, len(shown), max(1, len(shown) // 32)))
    fig.update_layout(template=TEMPLATE, height=min(1200, max(300, top + 60 + 34 * blocks)), title=title,
                      margin=dict(l=70, r=20, t=top, b=70))
    fig.update_xaxes(tickvals=ticks, ticktext=[plotly_safe(visible(shown[i].token_text)[:10]) for i in ticks],
                     tickangle=-60)
    fig.update_yaxes(autorange="reversed")
    return note_capped(fig, [shown_of(len(shown), len(steps), "tokens")])
