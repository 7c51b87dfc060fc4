"""Widgets and what they show: a widget from a parameter's spec (`spec_widget`), the model menu, the seed
box, the warning when the browser clamped a typed number, the statistics cards, Markdown-safe status
text, and engine errors as `gr.Error` toasts."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.embedded import EmbeddedModelError
from decoding.errors import MissingDependency
from decoding.models import REGISTRY, TINY_MODEL, ModelLoadError, pick_device, pick_dtype
from decoding.run import MAX_NEW_TOKENS_CAP
from visualizers._common import esc


ASSETS = Path(__file__).resolve().parents[1] / "assets"


def auto_dtype_help() -> str:
    """What dtype "auto" means on this machine, for the dtype control's help line."""
    auto = str(pick_dtype("auto", pick_device())).removeprefix("torch.")
    return (f"auto is {auto} here: bfloat16 where this machine computes it natively (a GPU, or a CPU with "
            "AVX512-BF16/AMX), float32 otherwise; the tiny-* models stay float32. float32 gives exact, "
            "comparable text.")


def show_test_models() -> bool:
    return os.environ.get("DECODING_LAB_SHOW_TEST_MODELS", "").strip().lower() in {"1", "true", "yes", "on"}


def model_choices(kind: str = "causal") -> list[str]:
    """Registry models of `kind` the menu lists (tiny test models only with DECODING_LAB_SHOW_TEST_MODELS=1)."""
    names = [name for name, spec in REGISTRY.items() if spec.suggested and spec.kind == kind]
    if show_test_models() and kind == "causal" and TINY_MODEL not in names:
        names.append(TINY_MODEL)
    return names


_MARKDOWN = {c: f"&#{ord(c)};" for c in "[]()*_`~!|#\\"}  # what starts a link, an emphasis or a code span


def md_esc(value) -> str:
    """`value` as plain text inside Markdown (a status line): HTML-escaped, and the characters that make
    links, emphasis, headings or code written as character references, which Markdown shows as they are.
    A URL is not linked: its "://" and "www." are broken the same way."""
    text = esc(value, quote=False).translate(str.maketrans(_MARKDOWN))
    return text.replace("://", "&#58;//").replace("www.", "www&#46;")


def user_error(err: BaseException) -> gr.Error:
    """The engine's message for bad input or a model that cannot load, as a Gradio error toast."""
    return error_toast(str(err), "Cannot run this")


def error_toast(message: str, title: str) -> gr.Error:
    """A Gradio error toast. The toast renders HTML and the message may quote a file name or a value
    from an uploaded trace, so it is escaped (as text: quotes stay readable for API clients)."""
    return gr.Error(esc(message, quote=False), title=title, print_exception=False)


USER_ERRORS = (ValueError, ModelLoadError, EmbeddedModelError, MissingDependency, OSError)


def failed_line(err: BaseException) -> str:
    """A run's status line once it could not run: the reason itself (a missing program, a model that cannot be
    fetched, a bad value), so the page never shows Gradio's bare "Error" beside a stale "Preparing…"."""
    return f"**Cannot run this:** {md_esc(str(err))}"


def theme() -> gr.themes.Base:
    """System fonts only: the page loads nothing from outside hosts (offline classrooms, CI)."""
    return gr.themes.Soft(primary_hue="indigo", secondary_hue="orange", neutral_hue="slate",
                          font=["ui-sans-serif", "system-ui", "Segoe UI", "Helvetica", "Arial", "sans-serif"],
                          font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])


def benchmark_file(path, command: str, model: str, figure: Callable[[dict], object]) -> tuple[dict | None, object,
                                                                                         str | None]:
    """(the benchmark's JSON, its figure, None) from a shipped benchmark file that a lab's accordion
    shows, or (None, None, Markdown saying why not and how to produce it) for a missing or
    unreadable file (read when the tab is built; a bad file never stops the app)."""
    path = Path(path)
    how = f"Produce it with\n\n```\n{command}\n```\n\nand restart the app."
    if not path.exists():
        return None, None, f"No benchmark has been run for {model} on this machine yet (`{path.name}` is missing). {how}"
    try:
        bench = json.loads(path.read_text(encoding="utf-8"))
        return bench, figure(bench), None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        return None, None, f"`{path.name}` cannot be read ({esc(str(err)[:200], quote=False)}). {how}"


# Sliders: a number typed past a slider's end ----------------------------------------------------------
# The browser sets a number typed into a slider's box beyond its ends to the nearest end when the box
# loses focus, without a word; a run would then use another value than the one typed. Its `release`
# event carries the typed number, so the server can say what was changed. (The event takes no input:
# Gradio may read the slider before the browser has set it back, and refuse the typed number with a
# traceback in the log.)
MAX_NEW_TOKENS_SPEC = {"name": "max_new_tokens", "low": 1, "high": MAX_NEW_TOKENS_CAP,
                       "range": f"[1, {MAX_NEW_TOKENS_CAP}]"}


def clamp_message(label: str, typed, low: float, high: float, hint: str = "") -> str | None:
    """What the browser did to `typed` in a slider from `low` to `high`, or None when it kept it; `hint`
    says where more fits."""
    if not isinstance(typed, (int, float)) or isinstance(typed, bool) or low <= typed <= high:
        return None
    end, value = ("maximum", high) if typed > high else ("minimum", low)
    return f"{label}: {typed:g} is beyond this slider's {end}, so it was set to {value:g}." + (f" {hint}" if hint else "")


def range_hint(spec: dict | None, low: float, high: float) -> str:
    """For a slider from `low` to `high` over a parameter `spec` (a `decoding.params.describe` row): where
    the rest of the allowed range is, or "" when the slider reaches both of its ends."""
    if spec is None or (spec["low"] >= low and spec["high"] <= high):
        return ""
    return f"`{spec['name']}` allows {spec['range']} through the API and the CLI."


def slider_range_text(spec: dict, low: float, high: float) -> str:
    """The range a slider's info may claim: the allowed one when the slider reaches it, else the slider's own."""
    if not range_hint(spec, low, high):
        return f"Allowed: {spec['range']}."
    return f"This slider: {low:g} to {high:g} (allowed {spec['range']} through the API and the CLI)."


def explain_clamping(c: dict, specs: dict[str, dict | None]) -> None:
    """Wire the sliders of a tab (`c`, widgets by name) named in `specs` ({name: parameter spec or None}),
    and Max new tokens, to warn when the browser changed a typed number; a spec adds where the rest of the
    parameter's allowed range is. Only sliders whose ends never change: the warning names the end."""
    specs = {"max_new_tokens": MAX_NEW_TOKENS_SPEC} | specs
    for key, spec in specs.items():
        widget = c.get(key)
        if isinstance(widget, gr.Slider):
            low, high = widget.minimum, widget.maximum
            widget.release(_clamp_warning(widget.label or key, low, high, range_hint(spec, low, high)), None, None,
                           **QUIET)


def _clamp_warning(label: str, low: float, high: float, hint: str) -> Callable:
    def warn(evt: gr.EventData) -> None:
        message = clamp_message(label, getattr(evt, "_data", None), low, high, hint)
        if message:
            gr.Warning(esc(message, quote=False))

    return warn


def seed_box(elem_id: str, value: int = 0) -> gr.Number:
    """The Seed box. It has no `minimum`: Gradio refuses a value below it before any callback runs and logs
    a traceback for it; the engine refuses a negative seed itself, with the allowed range, as a toast."""
    return gr.Number(value, label="Seed", precision=0, elem_id=elem_id, scale=1, min_width=90)


QUIET = dict(show_progress="hidden", api_visibility="undocumented")  # quick view updates, not in the API page


RENDER_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, ArithmeticError, RecursionError)


# Statistics cards: number formatting and the cards every lab shows ---------------------------------------
EMPTY_STATS_HTML = '<div class="dl-stats dl-stats-empty">Statistics appear here once a run starts.</div>'


def fmt(value, digits: int = 2, unit: str = "") -> str:
    """A statistic for a card: "–" when missing, numbers with `digits` decimals, anything else as text."""
    if value is None:
        return "–"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.{digits}f}{unit}"
    return str(value)


def run_stats_html(trace, cards: Callable, setting: Callable, name: str | None = None) -> str:
    """Every tab's statistics card: `cards(trace)` [(label, value)] under the caption "[name ·] model ·
    `setting(start)` · dtype on device", or the empty card before a run starts."""
    start = trace.start
    if start is None:
        return EMPTY_STATS_HTML
    caption = " · ".join([*([name] if name else []), start.model, setting(start), f"{start.dtype} on {start.device}"])
    return stat_cards_html(cards(trace), caption)


def stat_cards_html(cards: list[tuple[str, object]], caption: str) -> str:
    """One row of (label, value) cards under a caption; every value is escaped. A value in words ("end token")
    gets the class `w`: a smaller font that wraps, where a number stays large."""
    body = "".join(f'<div class="dl-stat"><div class="v{" w" * any(ch.isalpha() for ch in str(v))}">{esc(v)}</div>'
                   f'<div class="k">{esc(k)}</div></div>' for k, v in cards)
    return f'<div class="dl-stats"><div class="dl-caption">{esc(caption)}</div><div class="dl-cards">{body}</div></div>'


def fine_step(step: float, value, low: float) -> float:
    """A float slider's step, made fine enough to land on `value`: a default closer to the slider's low end than one
    step (a learning rate of 0.001 on (0, 1], whose hundredth is 0.01) gets the power of ten below its distance from
    that end, so the slider starts at or below it; Gradio refuses a value under the slider's minimum."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return step
    gap = value - low
    if 0 < gap < step:
        return min(step, 10.0 ** math.floor(math.log10(gap)))
    return step


def spec_widget(spec: dict, *, label: str | None = None, elem_id: str | None = None, visible: bool = True,
                value=None, ui_max: float = 100.0):
    """A widget for one parameter from its spec row (`decoding.params.describe`): a checkbox for a
    bool, a radio for choices, a model menu for a model id, a slider for a bounded number (stopping at the
    spec's `ui_high` hint, else at `ui_max` for an unbounded end; its `step` hint), a number box otherwise,
    a textbox for text. The label is `label`, the spec's `label` hint, or its name."""
    value = spec["default"] if value is None else value
    kw = dict(label=label or spec.get("label") or spec["name"].replace("_", " "), info=spec["help"], visible=visible,
              elem_id=elem_id)
    if spec["type"] == "bool":
        return gr.Checkbox(value, **kw)
    if spec.get("choices"):
        return gr.Radio(list(spec["choices"]), value=value, **kw)
    if spec["type"] == "str" and (spec.get("range") or "").endswith("name or hub id"):  # a model: the menu or any id
        kind = "diffusion" if spec["range"].startswith("diffusion") else "causal"
        return gr.Dropdown(model_choices(kind), value=value or None, allow_custom_value=True, **kw)
    if spec["type"] in ("int", "float"):
        low, high = spec["low"], spec["high"]
        if (not spec["interval"] and not spec.get("ui_high")) or low == float("-inf"):
            return gr.Number(value, precision=0 if spec["type"] == "int" else None, **kw)
        high = min(high, spec.get("ui_high") or max(ui_max, low + 1))
        step = spec.get("step") or (1 if spec["type"] == "int" else round((high - low) / 100, 6) or 0.01)
        if not spec.get("step") and spec["type"] == "float":
            step = fine_step(step, value, low)
        if spec.get("step"):  # the slider's marks are multiples of the step: start at the first allowed one
            low = math.ceil(low / step - 1e-9) * step
        if not spec.get("low_inclusive", True) and low == spec["low"]:  # (0, 1]: the slider starts one step in
            low = low + step
        return gr.Slider(low, high, value=value, step=step, **kw)
    return gr.Textbox(value, max_lines=1, **kw)
