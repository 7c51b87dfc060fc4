"""The generated text as coloured token chips (HTML), and the per-token table behind it (CSV export).

Glossary
    chip        one `<span class="tok" data-step="N">` per TokenStep; its background encodes the
                chosen token's raw probability (`color_by="prob"`) or the step's raw entropy
                (`color_by="entropy"`) on the Viridis scale, lightened so dark text stays
                readable in light and dark themes. Purple means uncertain in both modes.
    tooltip     the chip's `title`: step, p, rank, entropy, kept set, then the top alternatives
                with ✓ (kept by truncation) or ✗ (cut); the chosen one is marked ◀.
    selected    the chip of `selected_step` gets the extra class `sel` (outlined).
    special     a special token's chip (class `special`) shows a marked label, not the raw token: "end of text"
                for the one that ended the run (`<|im_end|>`), the bare name for others; the raw form is in
                its tooltip.
"""

from __future__ import annotations

import functools
import math
import re

import pandas as pd
from plotly.colors import sample_colorscale, unlabel_rgb

from decoding.events import TokenStep, Trace
from visualizers._common import WAITING, beam_steps, esc, token_steps, visible, vocab_size

COLOR_BY = ("prob", "entropy")
ENTROPY_CAP = 6.0  # nats; entropies at or above this get the "most uncertain" colour
_SCALE = "Viridis"
_WHITE_MIX = 0.5  # share of white mixed into the scale, so chips stay light
END_LABEL = "end of text"  # the chip of the token that ended the run (`<|im_end|>`, `</s>`, ...)
_SPECIAL = re.compile(r"^<\|[^<>|]*\|>$|^</?s>$|^<(pad|unk|eos|bos|mask)>$")

TABLE_COLUMNS = ["step", "token_id", "token", "prob", "sampling_prob", "rank", "entropy", "entropy_truncated",
                 "kept_size", "top_alternatives", "elapsed_s"]

_CSS = " ".join("""
.dl-tokens{line-height:1.9;font-size:15px}
.dl-tokens .dl-text{white-space:pre-wrap;word-break:break-word;overflow-wrap:anywhere}
.dl-tokens .tok{color:#111;border-radius:3px;padding:1px 0;cursor:pointer;
 box-shadow:inset -1px 0 0 rgba(0,0,0,.18)}
.dl-tokens .tok:hover{box-shadow:inset 0 0 0 1px rgba(0,0,0,.55)}
.dl-tokens .tok.sel{outline:2px solid #e4572e;outline-offset:1px}
.dl-tokens .tok .sym{opacity:.6}
.dl-tokens .tok.special{font-family:ui-monospace,monospace;font-size:.85em;font-style:italic}
.dl-tokens .tok .dl-mark{display:inline-block;margin:0 .25em;padding:0 .4em;border:1px dashed rgba(0,0,0,.55);
 border-radius:4px;font-family:system-ui,sans-serif;font-style:normal;font-size:.75em;line-height:1.5;
 text-transform:uppercase;letter-spacing:.04em;vertical-align:.1em}
.dl-tokens .dl-legend{display:flex;flex-wrap:wrap;align-items:center;gap:.5em;font-size:12px;opacity:.85;
 margin-bottom:.4em}
.dl-tokens .dl-bar{display:inline-block;width:9em;height:.9em;border-radius:3px;border:1px solid rgba(127,127,127,.5)}
.dl-tokens .dl-note,.dl-tokens .dl-empty{font-size:13px;opacity:.75;font-style:italic}
.dl-tokens .tok-plain{white-space:pre-wrap}
""".split())


def tokens_html(trace: Trace, *, color_by: str = "prob", selected_step: int | None = None) -> str:
    """The generated text as HTML chips, one per TokenStep, coloured by probability or entropy.

    Works on a trace prefix while streaming. Beam traces (no TokenStep) show the best text uncoloured.
    """
    if color_by not in COLOR_BY:
        raise ValueError(f"`color_by` must be one of {', '.join(map(repr, COLOR_BY))}, got {color_by!r}")
    steps = token_steps(trace)
    if steps:
        cap = _entropy_cap(trace)
        last_special = _ends_with_stop(trace, steps)
        chips = "".join(_chip(e, color_by, cap, selected_step, special=last_special and e is steps[-1]) for e in steps)
        body = _legend(color_by, cap) + f'<div class="dl-text">{chips}</div>'
    elif beam_steps(trace) or trace.finish:
        body = _plain_text(trace)
    else:
        body = f'<div class="dl-empty">{esc(WAITING)}</div>'
    return f'<div class="dl-tokens"><style>{_CSS}</style>{body}</div>'


def token_table(trace: Trace) -> pd.DataFrame:
    """One row per TokenStep (for CSV export: write `token_table(trace).map(csv_safe)`); `top_alternatives` is a
    compact string."""
    rows = [{
        "step": e.step, "token_id": e.token_id, "token": e.token_text, "prob": e.prob,
        "sampling_prob": e.sampling_prob, "rank": e.rank, "entropy": e.entropy,
        "entropy_truncated": e.entropy_truncated, "kept_size": e.kept_size,
        "top_alternatives": "; ".join(
            f"'{visible(t)}' {p:.4f}" + ("" if kept else " (cut)")
            for t, p, kept in zip(e.top_tokens, e.top_probs, e.top_kept)),
        "elapsed_s": e.elapsed_s,
    } for e in token_steps(trace)]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet evaluates a cell starting so (OWASP: CSV injection)


def csv_safe(value):
    """`value` for a CSV cell: text that a spreadsheet would read as a formula (`=HYPERLINK(...)`, `+1`,
    `@SUM`, a leading tab or carriage return) gets a leading apostrophe, as OWASP's CSV-injection rule
    says; anything else is returned unchanged."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def chip_color(t: float) -> str:
    """Background for a confidence `t` in [0, 1] (0 = uncertain, purple; 1 = confident, yellow)."""
    t = min(max(float(t), 0.0), 1.0) if math.isfinite(t) else 0.0
    return _chip_color_at(round(t, 3))  # 1001 shades: indistinguishable, and redraws stay cheap


@functools.lru_cache(maxsize=1024)
def _chip_color_at(t: float) -> str:
    r, g, b = unlabel_rgb(sample_colorscale(_SCALE, [t])[0])
    mix = [round(c * (1 - _WHITE_MIX) + 255 * _WHITE_MIX) for c in (r, g, b)]
    return "#{:02x}{:02x}{:02x}".format(*mix)


def _confidence(e: TokenStep, color_by: str, cap: float) -> float:
    return e.prob if color_by == "prob" else 1.0 - min(e.entropy, cap) / cap


def _entropy_cap(trace: Trace) -> float:
    v = vocab_size(trace)
    return min(ENTROPY_CAP, math.log(v)) if v and v > 1 else ENTROPY_CAP


def _ends_with_stop(trace: Trace, steps: list[TokenStep]) -> bool:
    finish = trace.finish
    return bool(finish and finish.stop_reason == "eos" and finish.token_ids
                and finish.token_ids[-1] == steps[-1].token_id)


def _chip(e: TokenStep, color_by: str, cap: float, selected_step: int | None, *, special: bool) -> str:
    classes = ["tok"]
    stop = special  # the token that ended the run
    special = special or bool(_SPECIAL.match(e.token_text)) or e.token_text == ""
    if special:
        classes.append("special")
    if selected_step is not None and e.step == selected_step:
        classes.append("sel")
    label = special_label(e.token_text, stop=stop) if special else None
    return chip_html(e.token_text, _confidence(e, color_by, cap), tooltip_text(e), classes, {"step": e.step},
                     label=label)


def special_label(text: str, *, stop: bool = False) -> str | None:
    """What a special token's chip says instead of its raw form: "end of text" for the token that ended the run (or
    one named like an end: `<|im_end|>`, `</s>`, `<eos>`, `<|endoftext|>`), else its name without the brackets
    (`<|im_start|>` -> "im_start"); None for an empty token (drawn as ∅). The raw token stays in the tooltip."""
    name = text.strip().strip("<>|/").strip()
    if stop or text.strip() == "</s>" or re.search(r"end|eos|eot", name, re.IGNORECASE):
        return END_LABEL
    return name or None


def chip_html(text: str, confidence: float, tooltip: str, classes=("tok",), data: dict | None = None,
              label: str | None = None) -> str:
    """One token chip: `text` on the colour of `confidence` (0 uncertain .. 1 sure), `tooltip` on hover (plain
    text, escaped here), `data` as data-* attributes; `label` (a special token's): shown in a marked box instead
    of the text. Inside `tokens_css()`'s `.dl-tokens` it looks like the Playground's (the Streaming speech tab's
    transcript uses it too)."""
    attrs = "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in (data or {}).items())
    shown = f'<span class="dl-mark">{esc(label)}</span>' if label else _chip_text(text)
    return (f'<span class="{esc(" ".join(classes))}"{attrs} style="background:{esc(chip_color(confidence))}" '
            f'title="{esc(tooltip).replace(chr(10), "&#10;")}">{shown}</span>')


def tokens_css() -> str:
    """The chips' style sheet (a `<style>` element), for a view that shows chips outside `tokens_html`."""
    return f"<style>{_CSS}</style>"


def alternatives_lines(chosen_id: int, top_ids, top_tokens, top_probs, kept=None) -> list[str]:
    """A tooltip's alternatives: one line per top token, ✓ / ✗ (cut) when `kept` says, ◀ on the chosen one."""
    lines = []
    for i, (tid, tok, p) in enumerate(zip(top_ids, top_tokens, top_probs)):
        mark = "" if kept is None else (" ✓" if kept[i] else " ✗ (cut)")
        chosen = " ◀ chosen" if tid == chosen_id else ""
        lines.append(f"  '{visible(tok)}' {p:.3f}{mark}{chosen}")
    return lines


def _chip_text(text: str) -> str:
    """Escaped token text: spaces kept, newline as ⏎ plus a real line break, controls as symbols."""
    if text == "":
        return '<span class="sym">∅</span>'
    parts = []
    for ch in text:
        if ch == "\n":
            parts.append('<span class="sym">⏎</span><br>')
        elif ord(ch) >= 0x20 and ch != "\x7f":
            parts.append(esc(ch))
        else:
            parts.append(f'<span class="sym">{esc(visible(ch))}</span>')
    return "".join(parts)


def tooltip_text(e: TokenStep) -> str:
    """Plain-text tooltip for one step (escaped by the caller)."""
    lines = [f"step {e.step} · '{visible(e.token_text)}' · p={e.prob:.3g} (rank {e.rank}) · H={e.entropy:.2f} nats",
             f"drawn with q={e.sampling_prob:.3g} from {e.kept_size} kept tokens (H={e.entropy_truncated:.2f} nats)"]
    lines += alternatives_lines(e.token_id, e.top_ids, e.top_tokens, e.top_probs, e.top_kept)
    if e.token_id not in e.top_ids:
        lines.append(f"  … chosen '{visible(e.token_text)}' is rank {e.rank}")
    return "\n".join(lines)


def _legend(color_by: str, cap: float) -> str:
    stops = ",".join(chip_color(i / 10) for i in range(11))
    if color_by == "prob":
        left, right, what = "low probability (surprising)", "high probability (confident)", "chosen token's probability"
    else:
        left, right, what = f"high entropy ≥ {cap:.1f} nats (uncertain)", "low entropy (confident)", "step entropy"
    return (f'<div class="dl-legend"><span>colour = {esc(what)}:</span><span>{esc(left)}</span>'
            f'<span class="dl-bar" style="background:linear-gradient(to right,{esc(stops)})"></span>'
            f'<span>{esc(right)}</span><span>· hover a token for alternatives</span></div>')


def _plain_text(trace: Trace) -> str:
    finish, beams = trace.finish, beam_steps(trace)
    if finish:
        text, note = finish.text, "final text"
    else:
        last = beams[-1]
        text = last.beams[0]["text"] if last.beams else ""
        note = f"best live beam after step {last.step}"
    if beams:
        note = (f"Beam search keeps several hypotheses, so there is no single per-token probability to colour; "
                f"showing the {note} (see the beam tree).")
    else:
        note = f"No per-token steps in this trace; showing the {note}."
    return (f'<div class="dl-note">{esc(note)}</div>'
            f'<div class="dl-text"><span class="tok-plain">{_chip_text(text)}</span></div>')
