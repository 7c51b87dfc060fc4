"""Wiring a lab tab: handlers bound to widgets by name (`bind`, `named_inputs`), the Generate / Stop /
preset / lesson / replay events every lab shares (`wire_lab`), the two-column layout, per-session state,
and the checks of the values a handler receives by name."""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.env import env_int
from decoding.errors import short_repr
from ui.classroom import keep_on_screen, lesson_line, lesson_step
from ui.guard import BudgetExceeded, replay_budget_s, within_budget
from ui.widgets import QUIET, RENDER_ERRORS, error_toast, md_esc
from ui.worker import MODEL_CONCURRENCY_ID, model_event, runs_at_once


def session_ttl_s() -> int:
    """How long a session's state (its traces) is kept after it was last set, in seconds
    (DECODING_LAB_SESSION_TTL_S, default one hour): a client that never comes back frees its memory."""
    return env_int("DECODING_LAB_SESSION_TTL_S", 3600)


def session_cap() -> int:
    """How many sessions the server keeps at most; beyond it the least recently used one is dropped
    (DECODING_LAB_SESSION_CAP, default 200)."""
    return env_int("DECODING_LAB_SESSION_CAP", 200)


def session_state(value=None) -> gr.State:
    """Per-user state of a tab, dropped `session_ttl_s()` after it was last set."""
    return gr.State(value, time_to_live=session_ttl_s())


def bind(fn: Callable, outputs: dict[str, gr.components.Component],
         inputs: dict[str, gr.components.Component]) -> Callable:
    """Adapt a callback to Gradio by name: its inputs and outputs are {name: component}.

    Gradio passes the event's values in the order of `list(inputs.values())`; the wrapper calls `fn`
    with them as keyword arguments by their names, so a handler never depends on the order of a tab's
    widgets, and a name `fn` cannot take is a TypeError here, when the tab is wired. `fn` returns or
    yields {output name: value}, which the wrapper turns into Gradio's {component: value}. A parameter
    of `fn` annotated `gr.EventData` (or a subclass, e.g. `gr.SelectData`) receives the event's data.
    The wrapper closes `fn`'s generator when Gradio closes its own, so Stop reaches the worker thread.
    """

    def by_component(update: dict) -> dict:
        if not update:  # "change nothing": Gradio reads an empty dict as one value for all its outputs
            return {component: gr.skip() for component in outputs.values()}
        return {outputs[name]: value for name, value in update.items()}

    names = tuple(inputs)
    event = _event_parameter(fn)
    try:
        inspect.signature(fn).bind(**dict.fromkeys(names + ((event[0],) if event else ())))
    except TypeError as err:
        raise TypeError(f"cannot wire {fn.__qualname__} to the inputs {', '.join(names)}: {err}") from None

    def call(*values):
        if event:  # Gradio puts the event's data first (the wrapper's one positional parameter)
            data, *values = values
        if len(values) != len(names):  # Gradio passes exactly the components it was given
            raise TypeError(f"{fn.__qualname__} expected {len(names)} input values ({', '.join(names)}), "
                            f"got {len(values)}")
        return fn(**dict(zip(names, values)), **({event[0]: data} if event else {}))

    if inspect.isgeneratorfunction(fn):
        def wrapper(*values):
            with contextlib.closing(call(*values)) as updates:
                for update in updates:
                    yield by_component(update)
    else:
        def wrapper(*values):
            return by_component(call(*values))

    # Gradio reads the wrapper's signature: `*values`, after the event data's parameter if `fn` takes one.
    functools.update_wrapper(wrapper, fn, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
    del wrapper.__wrapped__
    parameters = [inspect.Parameter("values", inspect.Parameter.VAR_POSITIONAL)]
    if event:
        parameters.insert(0, inspect.Parameter(event[0], inspect.Parameter.POSITIONAL_ONLY, annotation=event[1]))
    wrapper.__signature__ = inspect.Signature(parameters)
    wrapper.__annotations__ = dict([event]) if event else {}
    return wrapper


def _event_parameter(fn: Callable) -> tuple[str, type] | None:
    """(name, annotation) of `fn`'s parameter annotated gr.EventData or a subclass, if it has one."""
    import typing

    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):  # an annotation that does not resolve at run time: read the names Gradio's are
        hints = {name: getattr(gr, str(hint).rpartition(".")[2], None) for name, hint in fn.__annotations__.items()}
    for name, hint in hints.items():
        if isinstance(hint, type) and issubclass(hint, gr.EventData):
            return name, hint
    return None


def on(listener: Callable, fn: Callable, outputs: dict[str, gr.components.Component],
       inputs: dict[str, gr.components.Component], **options):
    """Wire `fn` to an event by name: `listener` is a component's event method (`c["step"].submit`),
    `fn` gets `inputs`' values by their names and returns {output name: value} (see `bind`)."""
    return listener(bind(fn, outputs, inputs), list(inputs.values()), list(outputs.values()), **options)


def on_any(triggers: list[Callable], fn: Callable, outputs: dict[str, gr.components.Component],
           inputs: dict[str, gr.components.Component], **options):
    """`on` for several triggers as ONE event (gr.on): updates run in the order they were asked for, so a
    slow one (a model loading to count a prompt's tokens) cannot land after a later one and overwrite it
    with a note computed from stale values, as separate events per trigger could."""
    return gr.on(triggers, bind(fn, outputs, inputs), list(inputs.values()), list(outputs.values()), **options)


def named_inputs(*groups: dict[str, gr.components.Component]) -> dict[str, gr.components.Component]:
    """Merge {parameter name: component} groups into one `inputs` dict for `bind`. A name in two groups
    (e.g. a method parameter named like one of the tab's own controls) is a TypeError naming it."""
    merged: dict = {}
    for group in groups:
        taken = merged.keys() & group.keys()
        if taken:
            raise TypeError(f"the input name(s) {', '.join(sorted(taken))} are given twice: a method parameter "
                            "cannot share its name with one of the tab's own controls")
        merged |= group
    return merged


ON_SCREEN = ("note", "prompt", "question", "own_question")  # the controls Present mode keeps on the page


def lab_columns(c: dict, controls: Callable[[dict], None], views: Callable[[dict], None], elem_id: str) -> None:
    """A lab tab's layout: controls on the left, views on the right (each fills `c` by name). Of the controls,
    Present mode keeps those named in `ON_SCREEN` on the projected page (ui/classroom.py)."""
    with gr.Row(equal_height=False, elem_id=elem_id):
        with gr.Column(scale=4, min_width=330, elem_classes="dl-controls"):
            controls(c)
            keep_on_screen(*(c[name] for name in ON_SCREEN if name in c))
        with gr.Column(scale=9, elem_classes="dl-views"):
            views(c)


def run_buttons(c: dict, prefix: str, label: str = "Generate") -> None:
    """A lab tab's Generate (named `label`) and Stop buttons side by side, and its status line under them:
    `c["generate"]`, `c["stop"]`, `c["status"]` (elem ids `<prefix>-generate`, `-stop`, `-status`), which
    `wire_lab` wires. The class `dl-generate` is what Present mode's G key presses (ui/classroom.py)."""
    with gr.Row():
        c["generate"] = gr.Button(label, variant="primary", elem_id=f"{prefix}-generate", elem_classes="dl-generate")
        c["stop"] = gr.Button("Stop", variant="stop", elem_id=f"{prefix}-stop")
    c["status"] = gr.Markdown("Ready.", elem_id=f"{prefix}-status", elem_classes="dl-run-status")


def wire_lesson(c: dict, lab: str, chosen, chosen_outputs: list) -> None:
    """Next / Previous choose a preset, then `chosen` (the tab's preset callback, Gradio-bound, from
    the preset's name to `chosen_outputs`) sets the controls as a hand-picked preset does; choosing
    one by hand moves the lesson line too."""
    if "lesson_next" not in c:
        return
    outputs = {k: c[k] for k in ("preset", "lesson")}
    for button, direction in ((c["lesson_next"], 1), (c["lesson_prev"], -1)):
        on(button.click, lambda name, d=direction: lesson_step(lab, name, d), outputs, {"name": c["preset"]},
           **QUIET).then(chosen, c["preset"], chosen_outputs, **QUIET)
    c["preset"].input(lambda name: lesson_line(lab, name), c["preset"], c["lesson"], **QUIET)


def wire_lab(c: dict, cb, outputs: dict, state: dict, run_inputs: dict, controls: tuple, lab: str = "",
             more_runs: dict | None = None) -> dict:
    """The events every lab tab wires the same way: the preset menu, Generate (in the shared model
    queue), Stop (cancel, then show what ran) and the replay upload. `cb` is the tab's callbacks
    module (preset_chosen, generate_run, stop_run, replay); `c` its widgets by name; `run_inputs`
    {parameter name of `cb.generate_run`: component} and `state` {name: the tab's gr.State} (which
    stop_run and replay read, after the upload's `path`), passed by name (see `bind`); `controls` the widgets
    a preset or a replay sets. `more_runs` {name: (button, handler, inputs by name)}: other model-bound runs of
    the tab (the Playground's branch), queued like Generate and stopped by Stop. Returns the events that
    leave new views ({"generate", "stop", "upload", and each of `more_runs`}), for a tab to chain a view
    of its own with `.then`."""
    preset_outputs = {k: c[k] for k in controls + ("note",)}
    chosen = bind(cb.preset_chosen, preset_outputs, {"name": c["preset"]})
    c["preset"].input(chosen, c["preset"], list(preset_outputs.values()), **QUIET)
    wire_lesson(c, lab, chosen, list(preset_outputs.values()))  # classroom mode's Next / Previous
    model_bound = dict(concurrency_id=MODEL_CONCURRENCY_ID, concurrency_limit=runs_at_once(), show_progress="minimal",
                       show_progress_on=[c["status"]], api_visibility="undocumented")
    runs = {"generate": c["generate"].click(model_event(bind(cb.generate_run, outputs, run_inputs)),
                                            list(run_inputs.values()), list(outputs.values()), **model_bound)}
    for name, (button, handler, inputs) in (more_runs or {}).items():
        runs[name] = button.click(model_event(bind(handler, outputs, inputs)), list(inputs.values()),
                                  list(outputs.values()), **model_bound)
    # Cancel first (`model_event`: it returns once the worker has stopped), then show the result.
    stopped = on(c["stop"].click(None, cancels=list(runs.values()), api_visibility="undocumented").then,
                 cb.stop_run, outputs, state, **QUIET)
    replay_outputs = outputs | {k: c[k] for k in controls}
    uploaded = on(c["upload"].upload, cb.replay, replay_outputs, {"path": c["upload"]} | state, **QUIET)
    return runs | {"stop": stopped, "upload": uploaded}


def load_replay(path, lab: str, what: str, accepts: Callable, render: Callable,
                hint: str = "replay it in the tab it came from."):
    """(trace, its rendered views, file name) of an uploaded trace a lab tab can show, None without a
    file; a gr.Error naming the problem for an unreadable file, another lab's run (`accepts` says
    no) or malformed `what` (rendering fails)."""
    from decoding.events import Trace

    if not path:
        return None
    name = Path(path).name
    try:
        loaded = Trace.load(path)
    except (ValueError, OSError, TypeError, KeyError, AttributeError) as err:
        raise error_toast(f"Cannot replay {name}: {err}", "Not a Decoding Lab trace") from None
    try:
        accepted = accepts(loaded)
    except AttributeError:  # a tab's test read `start.strategy`: another family's run has no RunStarted
        accepted = False
    if not accepted and loaded.start is None:  # another family's run (a streaming speech run)
        kind = getattr(loaded.events[0], "describes", f"a {loaded.events[0].kind!r} run")
        raise error_toast(f"Cannot replay {name}: it is {kind}, without {what}.", f"Not a {lab} trace")
    if not accepted:
        raise error_toast(f"Cannot replay {name}: it is a {short_repr(loaded.start.strategy, 80)} run without "
                          f"{what}; {hint}", f"Not a {lab} trace")
    budget = replay_budget_s()
    try:
        shown = within_budget(lambda: render(loaded), budget)  # stops drawing (and its CPU) at the budget
    except BudgetExceeded:
        raise error_toast(f"Cannot replay {name}: drawing it took longer than {budget} s, the limit for a "
                          "replay (DECODING_LAB_REPLAY_BUDGET_S)", "Replay too large") from None
    except RENDER_ERRORS as err:  # a consistent trace never gets here (decoding/trace_checks.py); a last guard
        raise error_toast(f"Cannot replay {name}: malformed {what} ({type(err).__name__}: {str(err)[:300]})",
                          "Not a Decoding Lab trace") from None
    return loaded, shown, name


@dataclass(frozen=True)
class RunControls:
    """How a lab tab restores a run's settings: from a preset (the menu) or a replayed trace's start.

    Both carry the same settings (model, strategy, prompt, max_new_tokens, seed, chat, params), so one
    `controls(settings)` per tab ({output name: value}, the tab's defaults for what the settings leave
    out) serves both, and `preset_chosen` and `replay` are written once for every tab."""

    lab: str  # the presets' lab ("playground", "speculative", ...)
    title: str  # how a message names the tab's traces ("a Playground trace")
    runs: Callable[[str], bool]  # whether the tab runs this strategy (a preset or run it can restore)
    controls: Callable[[object], dict]  # a Preset or RunStarted -> {output name: value}

    def preset_chosen(self, name) -> dict:
        """Every control from the preset (the tab's defaults for what it leaves out) and its teaching note;
        nothing but an empty note for a name that is not one of this tab's presets."""
        from decoding.presets import find_preset

        preset = find_preset(self.lab, name)
        if preset is None or not self.runs(preset.strategy):
            return {"note": ""}
        return self.controls(preset) | {"note": f"**{preset.title}.** {preset.note.strip()}"}

    def replay(self, path, what: str, accepts: Callable, render: Callable, line: Callable, reset: dict,
               hint: str = "replay it in the tab it came from.") -> dict:
        """An uploaded trace's views (`render`), its settings in the controls where the tab runs its strategy,
        the tab's state (`reset`, plus the trace) and a status line (`line(trace)`); {} without a file, a
        gr.Error naming the problem for a file the tab cannot show (see `load_replay`)."""
        got = load_replay(path, self.title, what, accepts, render, hint)
        if got is None:
            return {}
        loaded, shown, name = got
        controls, refused = {}, ""
        if self.runs(loaded.start.strategy):
            try:  # a shared trace's settings are checked as a run's are (choices, ranges) before they reach the page
                checked_settings(loaded.start)
                controls = self.controls(loaded.start)
            except ValueError as err:
                refused = f" Its settings are not restored: {md_esc(str(err)[:300])}."
        status = (f"**Replaying** {md_esc(name)}: {line(loaded)}."
                  + (" Its settings are back in the controls." if controls else refused))
        return shown | controls | reset | {"trace": loaded, "status": status}


def checked_settings(start) -> None:
    """ValueError naming the first setting of a replayed run that no run could have (a knob's value outside its
    choices or range): what a shared trace would put into the controls is checked as a run's settings are."""
    from decoding.run import make_params

    make_params(start.strategy, start.params, lenient=True)


def as_int(value):
    """Sliders and number boxes may deliver 64.0; the engine wants an int (and reports anything else)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def check_names(given: dict, expected, what: str) -> None:
    """ValueError naming any value in `given` whose name is not `expected`, or an expected name without a
    value (a widget the tab did not wire, or a caller's typo); `what` says whose parameters they are."""
    unknown = [name for name in given if name not in expected]
    if unknown:
        raise ValueError(f"unknown {what} parameter{'s' * (len(unknown) > 1)} "
                         f"{', '.join(f'`{n}`' for n in unknown)}; the known ones are {', '.join(expected)}")
    missing = [name for name in expected if name not in given]
    if missing:
        raise ValueError(f"no value for the {what} parameter{'s' * (len(missing) > 1)} "
                         f"{', '.join(f'`{n}`' for n in missing)}")
