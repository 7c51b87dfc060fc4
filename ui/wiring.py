"""Wiring a lab tab: handlers bound to widgets by name (`bind`, `named_inputs`), the Generate / Stop /
preset / lesson / replay events every lab shares (`wire_lab`), the two-column layout, per-session state,
and the checks of the values a handler receives by name."""

from __future__ import annotations

import contextlib
import functools
import inspect
from pathlib import Path
from typing import Callable

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.env import env_int
from decoding.errors import short_repr
from ui.classroom import lesson_line, lesson_step
from ui.guard import BudgetExceeded, replay_budget_s, within_budget
from ui.widgets import QUIET, RENDER_ERRORS, error_toast
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
         inputs: dict[str, gr.components.Component] | None = None) -> Callable:
    """Adapt a callback that returns / yields {output name: value} to Gradio's {component: value}.

    Without `inputs` the wrapper keeps `fn`'s signature (Gradio reads it for gr.EventData) and the
    event's inputs fill `fn`'s parameters in order. With `inputs` ({parameter name: component}) the
    event's inputs are `list(inputs.values())` and `fn` is called with keyword arguments by name, so
    a tab's parameter values never depend on the order of its widgets; a name `fn` cannot take is a
    TypeError here, when the tab is wired. Either way the wrapper closes `fn`'s generator when Gradio
    closes the wrapper's, so Stop reaches the worker thread.
    """

    def by_component(update: dict) -> dict:
        if not update:  # "change nothing": Gradio reads an empty dict as one value for all its outputs
            return {component: gr.skip() for component in outputs.values()}
        return {outputs[name]: value for name, value in update.items()}

    call, names = fn, None
    if inputs is not None:
        names = tuple(inputs)
        try:
            inspect.signature(fn).bind(**dict.fromkeys(names))
        except TypeError as err:
            raise TypeError(f"cannot wire {fn.__qualname__} to the inputs {', '.join(names)}: {err}") from None

        def call(*values):
            if len(values) != len(names):  # Gradio passes exactly the components it was given
                raise TypeError(f"{fn.__qualname__} expected {len(names)} input values ({', '.join(names)}), "
                                f"got {len(values)}")
            return fn(**dict(zip(names, values)))

    if inspect.isgeneratorfunction(fn):
        def wrapper(*args, **kwargs):
            with contextlib.closing(call(*args, **kwargs)) as updates:
                for update in updates:
                    yield by_component(update)
    else:
        def wrapper(*args, **kwargs):
            return by_component(call(*args, **kwargs))

    if names is None:
        return functools.wraps(fn)(wrapper)
    # By name: Gradio must see a plain `*values` signature, not `fn`'s keyword parameters.
    functools.update_wrapper(wrapper, fn, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
    del wrapper.__wrapped__
    wrapper.__signature__ = inspect.Signature([inspect.Parameter("values", inspect.Parameter.VAR_POSITIONAL)])
    return wrapper


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


def lab_columns(c: dict, controls: Callable[[dict], None], views: Callable[[dict], None], elem_id: str) -> None:
    """A lab tab's layout: controls on the left, views on the right (each fills `c` by name)."""
    with gr.Row(equal_height=False, elem_id=elem_id):
        with gr.Column(scale=4, min_width=330, elem_classes="dl-controls"):
            controls(c)
        with gr.Column(scale=9, elem_classes="dl-views"):
            views(c)


def wire_lesson(c: dict, lab: str, chosen, chosen_outputs: list) -> None:
    """Next / Previous choose a preset, then `chosen` (the tab's preset callback, Gradio-bound, from
    the preset's name to `chosen_outputs`) sets the controls as a hand-picked preset does; choosing
    one by hand moves the lesson line too."""
    if "lesson_next" not in c:
        return
    outputs = {k: c[k] for k in ("preset", "lesson")}
    for button, direction in ((c["lesson_next"], 1), (c["lesson_prev"], -1)):
        step = bind(lambda name, d=direction: lesson_step(lab, name, d), outputs)
        button.click(step, c["preset"], list(outputs.values()), **QUIET).then(chosen, c["preset"], chosen_outputs,
                                                                               **QUIET)
    c["preset"].input(lambda name: lesson_line(lab, name), c["preset"], c["lesson"], **QUIET)


def wire_lab(c: dict, cb, outputs: dict, state: list, run_inputs: dict, controls: tuple, lab: str = "",
             more_runs: dict | None = None) -> dict:
    """The events every lab tab wires the same way: the preset menu, Generate (in the shared model
    queue), Stop (cancel, then show what ran) and the replay upload. `cb` is the tab's callbacks
    module (preset_chosen, generate_run, stop_run, replay); `c` its widgets by name; `run_inputs`
    {parameter name of `cb.generate_run`: component}, passed by name (see `bind`); `controls` the widgets
    a preset or a replay sets. `more_runs` {name: (button, handler, inputs)}: other model-bound runs of
    the tab (the Playground's branch), queued like Generate and stopped by Stop. Returns the events that
    leave new views ({"generate", "stop", "upload", and each of `more_runs`}), for a tab to chain a view
    of its own with `.then`."""
    preset_outputs = {k: c[k] for k in controls + ("note",)}
    chosen = bind(cb.preset_chosen, preset_outputs)
    c["preset"].input(chosen, c["preset"], list(preset_outputs.values()), **QUIET)
    wire_lesson(c, lab, chosen, list(preset_outputs.values()))  # classroom mode's Next / Previous
    model_bound = dict(concurrency_id=MODEL_CONCURRENCY_ID, concurrency_limit=runs_at_once(), show_progress="minimal",
                       show_progress_on=[c["status"]], api_visibility="undocumented")
    runs = {"generate": c["generate"].click(model_event(bind(cb.generate_run, outputs, run_inputs)),
                                            list(run_inputs.values()), list(outputs.values()), **model_bound)}
    for name, (button, handler, inputs) in (more_runs or {}).items():
        runs[name] = button.click(model_event(bind(handler, outputs)), inputs, list(outputs.values()), **model_bound)
    # Cancel first (`model_event`: it returns once the worker has stopped), then show the result.
    stopped = c["stop"].click(None, cancels=list(runs.values()), api_visibility="undocumented").then(
        bind(cb.stop_run, outputs), state, list(outputs.values()), **QUIET)
    replay_outputs = outputs | {k: c[k] for k in controls}
    uploaded = c["upload"].upload(bind(cb.replay, replay_outputs), [c["upload"]] + state,
                                  list(replay_outputs.values()), **QUIET)
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
    if not accepts(loaded):
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
