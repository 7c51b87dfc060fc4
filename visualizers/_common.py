"""Helpers shared by the visualizers: reading events out of a trace, showing token text, empty figures.

Glossary
    visible text    a token's text with invisible characters replaced by symbols: newline "⏎",
                    tab "⇥", carriage return "␍", other control characters by their Unicode
                    control pictures ("\\x0f" -> "␏"), the empty string "∅". Spaces are kept.
    label           visible text in quotes, shortened, for axis ticks and hovers ("' Paris'").
    escaped         `esc(x)`: any value as HTML text, quotes included, so it is safe both between
                    tags and inside an attribute. Every value that reaches HTML goes through it:
                    token texts, model names, numbers (a loaded trace is checked, but never trusted).
    cap             `cap(MARKS)` etc.: the most a figure draws of one kind (environment-tunable); a figure
                    that drew fewer than it had adds one line saying so (`note_capped`).
    plotly-safe     `plotly_safe(x)`: escaped for plotly labels, hovers and titles, whose pseudo-HTML
                    (<b>, <br>, <a href>, <span style>) plotly renders: `<`, `>`, `&` become
                    `&lt;` / `&gt;` / `&amp;`, which plotly decodes back when drawing, so a token
                    "<b>" is shown as text. Quotes stay (plotly has no attributes outside its tags).
"""

from __future__ import annotations

import html
import textwrap

import numpy as np
import plotly.graph_objects as go

from decoding.env import env_int
from decoding.events import BeamStep, TokenStep, Trace

TEMPLATE = "plotly_white"
# What one figure draws at most (issue 25: one layout object per mark is quadratic in plotly, and a trace
# at the bounds of decoding/trace_checks.py held a worker for minutes); beyond, the figure says so.
MARKS = ("DECODING_LAB_MAX_FIGURE_MARKS", 300)  # repeated marks of one kind: lines, labels, edges
NODES = ("DECODING_LAB_MAX_FIGURE_NODES", 3000)  # nodes of a tree or graph, points of a scatter
CELLS = ("DECODING_LAB_MAX_FIGURE_CELLS", 200_000)  # cells of a heat map
WAITING = "waiting for tokens…"

_SYMBOLS = {"\n": "⏎", "\t": "⇥", "\r": "␍", "\x7f": "␡"}


def token_steps(trace: Trace) -> list[TokenStep]:
    return [e for e in trace.events if isinstance(e, TokenStep)]


def beam_steps(trace: Trace) -> list[BeamStep]:
    return [e for e in trace.events if isinstance(e, BeamStep)]


def vocab_size(trace: Trace) -> int | None:
    start = trace.start
    return start.vocab_size if start else None


def visible(text: str) -> str:
    """The token text with invisible characters shown as symbols (spaces kept)."""
    if text == "":
        return "∅"
    out = []
    for ch in text:
        if ch in _SYMBOLS:
            out.append(_SYMBOLS[ch])
        elif ord(ch) < 0x20:
            out.append(chr(0x2400 + ord(ch)))  # Unicode "control pictures" block
        else:
            out.append(ch)
    return "".join(out)


def label(text: str, max_chars: int = 18) -> str:
    """Quoted visible text, shortened to `max_chars` (not escaped)."""
    shown = visible(text)
    if len(shown) > max_chars:
        shown = shown[: max_chars - 1] + "…"
    return f"'{shown}'"


def esc(value, *, quote: bool = True) -> str:
    """`value` as escaped HTML text, safe in element content and in quoted attributes
    (`quote=False` leaves quotes alone: for text that never lands in an attribute)."""
    return html.escape(str(value), quote=quote)


def plotly_safe(text) -> str:
    """Escape text for plotly labels and hovers (plotly decodes &lt; &gt; &amp; when drawing)."""
    return esc(text, quote=False)


def title_block(lines: list[str], *, width: int = 64, small: str = "", small_width: int | None = None) -> tuple[dict, int]:
    """A figure title that fits a half-page chart: every line wrapped at `width` characters (plotly never
    wraps, it cuts at the figure's edge), then `small` in a smaller font (wrapped at `small_width` characters
    when given); pinned to the top of the figure. Returns (layout `title`, the top margin it and a legend row
    above the plot need)."""
    wrapped = [part for line in lines for part in textwrap.wrap(line, width, break_long_words=False,
                                                                         break_on_hyphens=False) or [""]]
    smalls = textwrap.wrap(small, small_width, break_long_words=False, break_on_hyphens=False) \
        if small and small_width else ([small] if small else [])
    text = "<br>".join(wrapped) + "".join(f"<br><span style='font-size:12px'>{line}</span>" for line in smalls)
    count = len(wrapped) + len(smalls)
    # pad: below the floating label Gradio draws over a plot's top-left corner
    return dict(text=text, x=0.01, xanchor="left", y=1, yref="container", yanchor="top", pad=dict(t=28)), 64 + 17 * count


def empty_figure(message: str = WAITING, *, title: str | None = None, height: int = 300,
                 x_title: str | None = None, y_title: str | None = None) -> go.Figure:
    """A valid figure with no data and a centred message (used before the first event arrives)."""
    fig = go.Figure()
    fig.add_annotation(text=plotly_safe(message), x=0.5, y=0.5, xref="paper", yref="paper",
                       showarrow=False, font=dict(size=14, color="#666"))
    fig.update_layout(template=TEMPLATE, height=height, margin=dict(l=50, r=20, t=40 if title else 20, b=40),
                      title=dict(text=plotly_safe(title)) if title else None)
    fig.update_xaxes(title_text=x_title, showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(title_text=y_title, showticklabels=False, showgrid=False, zeroline=False)
    return fig


def cap(bound: tuple[str, int]) -> int:
    """The limit `bound` (MARKS, NODES or CELLS) sets: its environment variable, else its default."""
    return env_int(*bound)


def note_capped(fig: go.Figure, notes: list[str]) -> go.Figure:
    """One small line in the plot's bottom-right corner listing what was left out ("showing 300 of 2,047
    block boundaries"); nothing when `notes` is empty. One annotation, however many notes."""
    notes = [n for n in notes if n]
    if notes:
        fig.add_annotation(text=plotly_safe(" · ".join(notes)), xref="paper", yref="paper", x=1, y=0,
                           xanchor="right", yanchor="bottom", showarrow=False, bgcolor="rgba(255,255,255,0.85)",
                           font=dict(size=11, color="#a33"), name="capped")
    return fig


def shown_of(shown: int, total: int, what: str) -> str:
    """"showing 300 of 2,047 block boundaries", or "" when everything is shown."""
    return f"showing {shown:,} of {total:,} {what}" if shown < total else ""


def vlines(xs, y0: float, y1: float, name: str, line: dict, **kwargs) -> go.Scatter:
    """Vertical segments at `xs` from y0 to y1 as ONE scatter trace with None gaps (not one layout shape per
    line: plotly copies the layout on every add_vline, so n lines cost n^2)."""
    x, y = [], []
    for v in xs:
        x += [v, v, None]
        y += [y0, y1, None]
    return go.Scatter(x=x, y=y, mode="lines", name=name, line=line, hoverinfo="skip", showlegend=False, **kwargs)


def table(rows: list) -> np.ndarray:
    """`rows` (a hover's customdata: one list per point) as a numpy object array: plotly checks a list of
    lists item by item in Python (20,000 rows: 0.4 s), an array at once (0.03 s)."""
    out = np.empty((len(rows), len(rows[0]) if rows else 0), dtype=object)
    for i, row in enumerate(rows):
        out[i] = row
    return out
