"""Compare mode's handlers (the Playground's "Compare" section) as plain functions: values in,
{output name: value} out. The engine is `decoding/compare.py`; the pictures `visualizers/compare.py`.

The state `comparison` holds {"settings": [Setting], "traces": [Trace], "scores": [RunScore | None],
"step": int | None}. `compare_run` streams: the token columns as soon as any run has a new token,
the chart and the table when `Redraw` says so. Stop cancels the event: every run ends before its
next model call, and what each made stays on screen and can be exported.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator

import gradio as gr

from decoding.compare import (MAX_RUNS, MIN_RUNS, RunScore, Setting, compare_runs, parse_settings, table_csv,
                              table_rows, validate_settings)
from decoding.events import Event, Trace
from decoding.models import load_model
from decoding.presets import find_preset
from decoding.remote.source import is_remote
from decoding.run import as_lm
from ui.widgets import USER_ERRORS, user_error
from ui.wiring import as_int
from ui.playground_views import param_widgets, playground_strategies, shown_group
from ui.worker import Status, check_model, pump_views, wait_for_finish
from ui.exports import NOTHING_YET, STILL_RUNNING, export_dir, sweep
from visualizers.compare import columns_html, distributions_figure, entropy_figure, table_html

OFF = "(off)"
# each row's strategy and the parameters its widgets show at first (the rest at their declared defaults)
DEFAULT_ROWS = (("greedy", {}), ("sample", {"top_p": 0.9}), ("sample", {"min_p": 0.1, "temperature": 1.5}), (OFF, {}))
OUTPUTS = ("compare_status", "compare_columns", "compare_entropy", "compare_table", "compare_distributions",
           "compare_step", "comparison")
JSON_HELP = ('Optional, for the API-minded: a JSON object such as {"top_p": 0.9}; its keys override the widgets '
             "above for this run (any parameter of the strategy, also those without a widget).")


def new_comparison(settings: list[Setting] | None = None) -> dict:
    settings = settings or []
    return {"settings": settings, "traces": [Trace() for _ in settings], "scores": [None] * len(settings),
            "step": None}


def row_params(strategy: str, widget_values: dict, text: str | None, row: int) -> dict:
    """One row's parameters: its widgets' values ({"param:<strategy>.<name>": value}) where they differ from
    the declared defaults (so the column is labelled by what was changed), then the JSON field's keys on top.
    A widget value missing (an API call with JSON only) counts as the default."""
    params = {}
    for widget in param_widgets(strategy):
        value = widget_values.get(widget.key, widget.default)
        if widget.kind == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is not None and value != widget.default:
            params[widget.name] = value
    text = (text or "").strip()
    if not text:
        return params
    try:
        given = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        given = None
    if not isinstance(given, dict):
        raise ValueError(f"run {row}'s JSON parameters must be an object such as {{\"top_p\": 0.9}}, got "
                         f"{text[:60]!r}")
    return params | given


def settings_from_rows(rows: list[tuple[str, dict, str]]) -> list[Setting]:
    """The rows that are on, as settings: (strategy, its widgets' values, the JSON field) per row; ValueError
    naming the row with bad parameters."""
    chosen = []
    for i, (strategy, widget_values, text) in enumerate(rows, 1):
        if not strategy or strategy == OFF:
            continue
        chosen.append({"strategy": strategy, "params": row_params(strategy, widget_values, text, i)})
    if not MIN_RUNS <= len(chosen) <= MAX_RUNS:
        raise ValueError(f"Compare needs {MIN_RUNS} to {MAX_RUNS} runs switched on; {len(chosen)} "
                         f"{'is' if len(chosen) == 1 else 'are'} (pick a strategy for more rows)")
    return parse_settings(chosen)


def split_rows(rows: dict) -> list[tuple[str, dict, str]]:
    """The Compare section's values by name ("strategy_<k>", "params_<k>" and "row<k>:param:<strategy>.<name>")
    as one (strategy, widget values, JSON text) per row."""
    out = []
    for k in range(MAX_RUNS):
        prefix = f"row{k}:"
        widgets = {name.removeprefix(prefix): value for name, value in rows.items() if name.startswith(prefix)}
        out.append((rows.get(f"strategy_{k}"), widgets, rows.get(f"params_{k}")))
    return out


def row_strategy_chosen(strategy) -> dict:
    """Show the chosen strategy's widgets in its row (by the Playground's group names, `group:<strategy>`)."""
    return shown_group(strategy, [name for name in playground_strategies() if param_widgets(name)])


def views(comparison: dict, color_by: str = "prob", *, charts: bool = True) -> dict:
    """Every Compare view of `comparison` (only the token columns when `charts` is False)."""
    names = [s.name for s in comparison["settings"]]
    traces, step = comparison["traces"], comparison["step"]
    out = {"compare_columns": columns_html(traces, names, color_by=color_by, selected_step=step)}
    if charts:
        started = [t for t in traces if t.start]
        out |= {"compare_entropy": entropy_figure(traces, names, selected_step=step),
                "compare_table": table_html(table_rows(comparison["settings"], traces, comparison["scores"])
                                            if len(started) == len(traces) and traces else []),
                "compare_distributions": distributions_figure(traces, names, step)}
    return out


def compare_work(model: str, prompt: str, settings: list[Setting], dtype: str, **kwargs) -> Callable:
    """A worker: load the model (Status lines), then emit (run index, event or RunScore) as the runs go."""

    def work(emit, should_stop):
        loaded = load_model(model, dtype=dtype, progress=lambda message: emit(Status(message)))
        if should_stop():
            return
        emit(Status(f"Comparing {len(settings)} settings on {loaded.name}…"))
        for item in compare_runs(as_lm(loaded), prompt, settings, should_stop=should_stop, **kwargs):
            emit(item)

    return work


def _take(comparison: dict, item) -> bool:
    """Put one worker item into the comparison; True when it was an event or a score."""
    if not isinstance(item, tuple):
        return False
    index, what = item
    if isinstance(what, RunScore):
        comparison["scores"][index] = what
    elif isinstance(what, Event):
        comparison["traces"][index].append(what)
    return True


def compare_run(model, prompt, max_new_tokens, seed, chat, dtype, color_by, comparison, **rows) -> Iterator[dict]:
    """Run 2-4 settings side by side (the Playground's model, prompt, length, seed and chat template)."""
    max_new_tokens, seed = as_int(max_new_tokens), as_int(seed)
    try:
        settings = settings_from_rows(split_rows(rows))
        if is_remote(model):
            raise ValueError("Compare runs on a local model: it scores every run's text with the model's full "
                             "distribution, which a remote engine does not send")
        validate_settings(prompt, settings, max_new_tokens, seed)
        check_model(model)
    except USER_ERRORS as err:
        raise user_error(err) from None
    comparison = new_comparison(settings)
    yield views(comparison, color_by) | {"comparison": comparison, "compare_step": None,
                                         "compare_status": f"Starting {model}…"}
    work = compare_work(model, prompt, settings, dtype or "auto", max_new_tokens=max_new_tokens, seed=seed,
                        chat=bool(chat))
    try:
        yield from _stream(work, comparison, color_by)
    except USER_ERRORS as err:  # the model failed to load, or a run refused its input: a message, not a crash
        raise user_error(err) from None
    yield views(comparison, color_by) | {"comparison": comparison, "compare_status": _finished(comparison)}


def _stream(work, comparison: dict, color_by: str) -> Iterator[dict]:
    """The worker's items into the comparison (also a run's RunFinished "cancelled" after Stop): the token
    columns at once, the charts when a redraw is due."""
    take = lambda item: _take(comparison, item)
    yield from pump_views(work, take, lambda: views(comparison, color_by),
                          lambda status, progress: _live_status(comparison, status or "Working…"),
                          quick=lambda progress: views(comparison, color_by, charts=False), on_late=take,
                          status_key="compare_status")


def _live_status(comparison: dict, status: str) -> str:
    counts = [len(t.of_kind("token")) or len(t.of_kind("beams")) for t in comparison["traces"]]
    return f"{status} Steps so far: {' · '.join(f'run {i + 1}: {n}' for i, n in enumerate(counts))}."


def _finished(comparison: dict) -> str:
    traces = comparison["traces"]
    if any(t.finish is None or t.finish.stop_reason == "cancelled" for t in traces):  # a run still ending counts
        return f"**Stopped**: all {len(traces)} runs ended; what each made is shown (and can be exported)."
    return f"**Finished** {len(traces)} runs side by side, same seed. The table compares them."


def stop_compare(comparison, color_by, wait_s: float = 3.0) -> dict:
    """After Stop cancelled the comparison: every run's RunFinished "cancelled" is in; show them."""
    if not comparison or not comparison["traces"]:
        return {"compare_status": "Nothing is running."}
    for trace in comparison["traces"]:
        wait_for_finish(trace, wait_s)
    return views(comparison, color_by) | {"compare_status": _finished(comparison)}


def select_step(step, comparison, color_by) -> dict:
    """Every run's distribution at `step` (a chip click in any run, or the step box)."""
    if not comparison or not comparison["traces"]:
        gr.Warning("Compare some runs first, then click one of their tokens.")
        return {}
    step = as_int(step)
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        gr.Warning(f"A step is a whole number from 0, got {step!r}.")
        return {}
    comparison["step"] = step
    return views(comparison, color_by) | {"comparison": comparison, "compare_step": step}


def click_chip(comparison, color_by, evt: gr.EventData) -> dict:
    data = getattr(evt, "_data", None) or {}
    return select_step(data.get("step") if isinstance(data, dict) else None, comparison, color_by)


def recolor(comparison, color_by) -> dict:
    return views(comparison, color_by, charts=False) if comparison else {}


def preset_row(name) -> dict:
    """A Playground preset's strategy and parameters, for one Compare row: the strategy, its widgets (the
    preset's values, the declared defaults for the rest) and an empty JSON field; a parameter the widgets do not
    show goes to the JSON field."""
    preset = find_preset("playground", name)
    if preset is None:
        return {}
    widgets = param_widgets(preset.strategy)
    shown = {w.name for w in widgets}
    rest = {k: v for k, v in preset.params.items() if k not in shown}
    return ({"strategy": preset.strategy, "params": json.dumps(rest) if rest else ""}
            | {w.key: preset.params.get(w.name, w.default) for w in widgets} | row_strategy_chosen(preset.strategy))


def export_comparison(comparison) -> str | None:
    """The comparison as a ZIP: run-<k>-<strategy>.json per run (each replays in the Playground) and
    compare-table.csv."""
    traces = (comparison or {}).get("traces") or []
    if not traces or not all(t.start for t in traces):
        gr.Warning(NOTHING_YET)
        return None
    if not all(t.finish for t in traces):
        gr.Warning(STILL_RUNNING)
        return None
    sweep()
    folder = export_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=folder)) / \
        f"{_safe(traces[0].start.model)}-compare.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for i, trace in enumerate(traces, 1):
            archive.writestr(f"run-{i}-{_safe(trace.start.strategy)}.json", trace.to_json())
        archive.writestr("compare-table.csv",
                         table_csv(table_rows(comparison["settings"], traces, comparison["scores"])))
    return str(path)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


__all__ = ["DEFAULT_ROWS", "JSON_HELP", "OFF", "OUTPUTS", "compare_run", "export_comparison", "new_comparison",
           "preset_row", "row_params", "row_strategy_chosen", "select_step", "settings_from_rows", "split_rows",
           "stop_compare", "views"]
