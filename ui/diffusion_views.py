"""Diffusion tab views as plain functions: the state (the main run, the comparison run, the chosen
step) rendered into {output name: value} (see `OUTPUTS`), and the tab's control <-> parameter map.

    trace      the main run (a `Trace` of `DiffusionStep`s, growing while it streams)
    other      the "Compare with" run: another sampler setting or the autoregressive tiny-ar (or None)
    step       which step's canvas is shown (None = the latest)

The task picker and the checker's verdict (tiny-parallel's tasks) live in `ui/diffusion_tasks.py`.

Glossary: mask / unmask / remask / block / NFE: see `decoding/diffusion/samplers.py`.
    field      a control of the tab, named like the `DiffusionParams` field it sets ("df:steps" -> `steps`).
    length     the canvas size: `max_new_tokens`, every position starts as a mask.
"""

from __future__ import annotations

import gradio as gr

from decoding.events import Trace, stats
from decoding.registry import param_specs
from decoding.diffusion.samplers import CACHES, REMASKING, SAMPLERS
from ui.widgets import fmt, run_stats_html
from ui.wiring import check_names
from ui.diffusion_tasks import verdict_html, verdict_mark
from visualizers._common import esc
from ui.plugin_fields import chosen_values, namespaced, own_values, plugin_rows
from visualizers.diffusion import (ar_vs_diffusion_html, canvas_html, compare_samplers_figure, confidence_figure,
                                   diffusion_summary_html, tokens_per_step_figure, unmask_order_figure)

DEFAULT_MODEL = "tiny-diffusion"
DEFAULT_PROMPT = "And God said"
DEFAULT_LENGTH = 48  # max new tokens = canvas positions
UI_MAX_LENGTH = 256
AR_MODEL = "tiny-ar"  # the causal model of the same size, tokenizer and data
TWIN_MODEL = "tiny-parallel-ar"  # tiny-parallel's causal twin: same tasks, tokenizer and data

_SPECS = {p["name"]: p for p in param_specs("diffusion")}  # DiffusionParams, read when the tab module is imported
FIELDS = tuple(_SPECS)  # the tab's parameter fields (DiffusionParams', in field order)
DEFAULT_SETTINGS = {f: _SPECS[f]["default"] for f in FIELDS}
INT_FIELDS = {f for f in FIELDS if _SPECS[f]["type"] == "int"}
FLOAT_FIELDS = {f for f in FIELDS if _SPECS[f]["type"] == "float"}
# field -> (control, the values of that control that show it); every other field is always shown
# (a sampler's own knobs, as it declares them: shown when it is chosen)
SPECIFIC = {row["name"]: ("sampler", (row["plugin"],)) for row in plugin_rows("diffusion")} | {
    "refresh_interval": ("cache", ("delayed", "greedy"))}
CHOICES = {"remasking": lambda: REMASKING, "sampler": SAMPLERS.names, "cache": lambda: CACHES}  # read when a tab is built

# "Compare with": label -> (model, strategy, parameter overrides); None model = the tab's model
COMPARISONS = {
    "none": None,
    "fixed schedule, steps = length": (None, "diffusion", {"sampler": "fixed", "steps": 0, "threshold": 0.0}),
    "fixed schedule, steps = length / 4": (None, "diffusion", {"sampler": "fixed", "steps": "length/4",
                                                               "threshold": 0.0}),
    "threshold 0.9 (Fast-dLLM)": (None, "diffusion", {"sampler": "fixed", "threshold": 0.9, "steps": 0,
                                                      "remasking": "low-confidence"}),
    "localleap (0.95 anchors, 0.5 relaxed)": (None, "diffusion", {"sampler": "localleap", "threshold": 0.5,
                                                                  "localleap.anchor_threshold": 0.95,
                                                                  "remasking": "low-confidence"}),
    "FreeDave, 4 drafted steps per call (the canvas of steps = length)": (
        None, "diffusion", {"sampler": "freedave", "steps": 0, "threshold": 0.0, "freedave.draft_steps": 4, "temperature": 0.0,
                            "cache": "none"}),
    "tiny-ar, greedy": (AR_MODEL, "greedy", {}),
    "tiny-ar, sampling": (AR_MODEL, "sample", {}),
    "tiny-parallel-ar, greedy (tiny-parallel's causal twin)": (TWIN_MODEL, "greedy", {}),
}
NO_COMPARISON = "none"
# The tab opens on its lesson (issue 33): Fast-dLLM's threshold on tiny-parallel's copy task (preset 54: the whole
# canvas in one model call of 32) with the one-token-per-step schedule compared after it on the same canvas. A
# fresh tab shows the preset's controls and note; without the preset file it opens on the declared defaults.
OPENING_PRESET = "54-parallel-threshold-copy"
OPENING_COMPARE = "fixed schedule, steps = length"
# Pace: at most this many steps a second (the run waits before its next model call; 0 = full speed). The
# default steps a run that is faster than the eye (tiny-diffusion: 48 steps in under a second) and leaves a
# slower one alone.
PLAYBACK = {"8 steps/s": 8.0, "2 steps/s": 2.0, "1 step/s": 1.0, "full speed": 0.0}
DEFAULT_PLAYBACK = "8 steps/s"

OUTPUTS = ("status", "stats", "canvas", "verdict", "step", "order", "confidence", "tokens", "summary",
           "compare_plot", "compare_html", "trace", "other")
CONTROLS = ("model", "task", "problem", "prompt", "length", "seed") + tuple(f"df:{f}" for f in FIELDS)


# Controls <-> parameters ------------------------------------------------------------------------------
def spec_of(field: str) -> dict:
    return _SPECS[field]


def help_of(field: str) -> str:
    return _SPECS[field]["help"]


def visible_fields(sampler: str, cache: str) -> set[str]:
    """The sampler- and cache-specific fields shown for this choice (every other one is hidden)."""
    chosen = {"sampler": sampler, "cache": cache}
    return {f for f, (control, values) in SPECIFIC.items() if chosen[control] in values}


def collect_params(fields: dict) -> dict:
    """`DiffusionParams` fields from the tab's values by name ({field: value}, every one of `FIELDS`);
    sliders give 4.0 for 4. A missing or unknown name is a ValueError naming it.

    Fields hidden for this sampler / cache keep their defaults, so the trace records what was used."""
    check_names(fields, FIELDS, "diffusion")
    shown = visible_fields(fields["sampler"], fields["cache"])
    params = {}
    for field in FIELDS:
        value = fields[field]
        if value is None or (field in SPECIFIC and field not in shown):
            value = DEFAULT_SETTINGS[field]
        if field in INT_FIELDS and isinstance(value, float) and value.is_integer():
            value = int(value)
        if field in FLOAT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        params[field] = value
    return chosen_values(params, params["sampler"])


def fields_from_params(params: dict) -> dict:
    """{"df:field": value} for a run's (or a preset's) parameters; defaults for what it leaves out (a sampler's
    knobs in the older flat form of traces and presets are read as the chosen sampler's)."""
    params = namespaced("diffusion", params)
    return {f"df:{f}": params.get(f, DEFAULT_SETTINGS[f]) for f in FIELDS}


# Views ----------------------------------------------------------------------------------------------
def steps_of(trace: Trace | None) -> list:
    return trace.of_kind("diffusion_step") if trace is not None else []


def views(trace: Trace | None, other: Trace | None = None, step: int | None = None, *, live: bool = False) -> dict:
    """Every display output from the state; `live=True` while the main run streams (latest step)."""
    trace = trace or Trace()
    steps = steps_of(trace)
    index = step if step is not None and 0 <= step < len(steps) else len(steps) - 1
    block = trace.start.params.get("block_length") if trace.start else None
    return {"stats": stats_html(trace),
            "canvas": canvas_html(steps, steps[index].step if steps and step is not None else None),
            "verdict": "" if live else verdict_html(trace, other, other_label=f"compared: {other_label(other)}"),
            "step": gr.update(minimum=0, maximum=max(1, len(steps) - 1), value=max(index, 0),
                              interactive=len(steps) > 1 and not live,
                              label=f"Step ({len(steps)} played)" if steps else "Step"),
            "order": unmask_order_figure(steps, block_length=block or None),
            "confidence": confidence_figure(steps),
            "tokens": tokens_per_step_figure(steps)} | comparison_views(trace, other)


def canvas_views(trace: Trace) -> dict:
    """The canvas at the latest step: cheap, so a streaming run shows every step as it is computed."""
    return {"canvas": canvas_html(steps_of(trace), None)}


def comparison_views(trace: Trace, other: Trace | None) -> dict:
    """The summary table, and with a comparison run: NFE per sampler, or autoregressive vs diffusion."""
    if trace.start is None:
        return {"summary": "", "compare_plot": compare_samplers_figure({}), "compare_html": ""}
    s = stats(trace)
    main = {run_label(trace): steps_of(trace)}
    if other is None or other.start is None:
        return {"summary": diffusion_summary_html(s), "compare_plot": compare_samplers_figure(main),
                "compare_html": ""}
    if other.start.strategy == "diffusion":
        label = run_label(other)
        if label in main:
            label += " (compared)"
        return {"summary": diffusion_summary_html(s), "compare_html": same_canvas_html(trace, other),
                "compare_plot": compare_samplers_figure(main | {label: steps_of(other)})}
    ar_text = other.finish.text if other.finish else "".join(e.token_text for e in other.of_kind("token"))
    main_text = trace.finish.text if trace.finish else ""
    head = (f"<p><b>{esc(other.start.model)}</b> ({esc(other.start.strategy)}) against "
            f"<b>{esc(trace.start.model)}</b> ({esc(run_label(trace))}), same prompt, length and seed."
            "</p>")
    return {"summary": diffusion_summary_html(s), "compare_plot": compare_samplers_figure(main),
            "compare_html": head + ar_vs_diffusion_html(stats(other), s, ar_text, main_text)}


def same_canvas_html(trace: Trace, other: Trace) -> str:
    """Whether two finished diffusion runs ended with the same canvas (FreeDave's promise against
    steps = length); "" while either is unfinished."""
    a, b = steps_of(trace), steps_of(other)
    if not a or not b or trace.finish is None or other.finish is None or "cancelled" in (
            trace.finish.stop_reason, other.finish.stop_reason):
        return ""
    x, y = a[-1].canvas, b[-1].canvas
    differ = sum(p != q for p, q in zip(x, y)) + abs(len(x) - len(y))
    same = ("<b>the same final canvas</b>" if not differ else
            f"final canvases that differ at <b>{differ}</b> of {max(len(x), len(y))} positions")
    return (f'<p class="df-same-canvas" data-differ="{differ}">{esc(run_label(trace))} and {esc(run_label(other))}: '
            f"{same}, with NFE {a[-1].nfe} and {b[-1].nfe}.</p>")


def other_label(other: Trace | None) -> str:
    if other is None or other.start is None:
        return ""
    return run_label(other) if other.start.strategy == "diffusion" else f"{other.start.model}, {other.start.strategy}"


def run_label(trace: Trace) -> str:
    """A diffusion run's sampler setting in a few words (legend entries, captions)."""
    p, length = trace.start.params, trace.start.max_new_tokens
    own = own_values(p, str(p.get("sampler")))
    if p.get("sampler") == "localleap":
        text = f"localleap r={own.get('radius')} anchor {own.get('anchor_threshold'):g} relaxed {p.get('threshold'):g}"
        text += ", linear decay" if own.get("decay") == "linear" else ""
    elif p.get("sampler") == "freedave":
        text = f"freedave, {p.get('steps') or length} steps, {own.get('draft_steps')} drafted per call"
    elif p.get("sampler") == "learn2pd":
        text = f"learn2pd filter {own.get('filter_threshold'):g}"
    elif p.get("sampler") not in (None, "fixed"):
        text = str(p.get("sampler"))
    elif p.get("threshold", 0) > 0:
        text = f"threshold {p['threshold']:g}"
    else:
        text = f"fixed, {p.get('steps') or length} steps"
    if p.get("block_length"):
        text += f", blocks of {p['block_length']}"
    if p.get("cache") in ("delayed", "greedy"):
        text += f", {p['cache']} cache /{p.get('refresh_interval')}"
    elif p.get("cache") == "prefill":
        text += ", prefill cache"
    return text


def stats_html(trace: Trace) -> str:
    """One row of cards: answer tokens, steps, NFE, positions per step, NFE per position, elapsed. The answer is
    the text before the first end-of-text; the per-step and per-NFE rates count every canvas position committed,
    the end-of-text padding too (that is the work a step does: 8 answer tokens in one step of 32 positions)."""
    def cards(trace: Trace) -> list:
        s = stats(trace)
        tokens = s["num_tokens"] if trace.finish else sum(len(e.unmasked) for e in steps_of(trace))
        return [("answer tokens" if trace.finish else "committed", f"{tokens} / {trace.start.max_new_tokens}"),
                ("steps", s.get("diffusion_steps", 0)), ("NFE (model calls)", s.get("nfe", 0)),
                ("positions per step", fmt(s.get("tokens_per_step"))),
                ("NFE per position", fmt(s.get("nfe_per_token"))), ("elapsed (s)", fmt(s.get("elapsed_s"), 1))]

    def setting(start) -> str:
        chat = " · chat template" if start.chat else ""
        return (f"{run_label(trace)} · remasking {start.params.get('remasking')}, "
                f"temperature {start.params.get('temperature', 0):g}{chat}")

    return run_stats_html(trace, cards, setting)


def stats_line(trace: Trace) -> str:
    """The run in one sentence (status bar, tests)."""
    s = stats(trace)
    return (f"{s['num_tokens']} tokens in {s.get('diffusion_steps', 0)} steps, NFE {s.get('nfe', 0)} "
            f"({fmt(s.get('tokens_per_step'))} positions per step, end-of-text padding included), "
            f"{s['elapsed_s']:.1f} s{verdict_mark(trace)}")


__all__ = ["COMPARISONS", "CONTROLS", "OPENING_COMPARE", "OPENING_PRESET",
           "DEFAULT_LENGTH", "DEFAULT_MODEL", "DEFAULT_PROMPT", "DEFAULT_SETTINGS",
           "FIELDS", "OUTPUTS", "collect_params", "fields_from_params", "views", "visible_fields"]
