"""The Diffusion tab's event handlers as plain functions: values in, {output name: value} out.

Each one validates its inputs (a bad one raises `gr.Error` with the engine's message and changes
nothing) and renders with `ui.diffusion_views.views`. `generate_run` is a generator that streams
while the worker thread unmasks the canvas, then (with "Compare with") runs the same prompt, length
and seed with another sampler setting or the autoregressive tiny-ar; closing it (Stop) stops
whichever run is going. Runs apply the model's chat template when it has one (`chat=True`, as the
CLI and the API do by default): tiny-parallel's adds the newline its prompts end with; tiny-diffusion
has none and gets the plain prompt.

The task picker (shown for tiny-parallel): `task_picker_shown`, `model_picked`, `task_chosen`,
`problem_chosen`, `another_problem`, `prompt_edited`.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import gradio as gr

from decoding.events import Trace, stats
from decoding.models import REGISTRY
from decoding.presets import preset_menu
from decoding.run import as_lm, validate_request
from ui.widgets import USER_ERRORS, md_esc, user_error
from ui.wiring import RunControls, as_int
from ui.worker import check_model, limit_note, run_work, stream_views, wait_for_finish
from ui.diffusion_tasks import (FREE_PROMPT, TASK_LENGTH, num_problems, problem, problem_number, shows_tasks,
                                task_choices, verdict_mark)
from ui.diffusion_views import (COMPARISONS, DEFAULT_LENGTH, DEFAULT_MODEL, DEFAULT_PROMPT, DEFAULT_SETTINGS, FIELDS,
                                NO_COMPARISON, OPENING_COMPARE, OPENING_PRESET, PLAYBACK, SPECIFIC, UI_MAX_LENGTH,
                                canvas_views, collect_params, fields_from_params, other_label, stats_line, steps_of,
                                views, visible_fields)
from visualizers._common import esc

CHAT = True  # apply the model's chat template when it has one (decoding.lm: `lm.has_chat_template`)


def shown_controls(sampler: str, cache: str) -> dict:
    """Show each sampler's or cache's own fields only when it is chosen (see `SPECIFIC`): radius and anchor
    threshold for localleap, draft steps for freedave, the filter threshold for learn2pd, the refresh
    interval for the delayed and greedy caches."""
    shown = visible_fields(sampler, cache)
    return {f"df:{f}": gr.update(visible=f in shown) for f in SPECIFIC}


# The task picker ---------------------------------------------------------------------------------
def task_picker_shown(model) -> dict:
    """The picker is shown for a model trained on the tasks (tiny-parallel) only."""
    return {"tasks": gr.update(visible=shows_tasks(model))}


def _problem_slider(task: str, number: int | None = None) -> dict:
    count = max(1, num_problems(task))
    update = dict(maximum=count, interactive=count > 1, info=f"one of {count} held-out {task} problems")
    return gr.update(**update, value=(number - 1) % count + 1) if number else gr.update(**update)


def task_controls(prompt) -> dict:
    """The picker's task and problem number for a prompt (presets, replay, a prompt typed by hand)."""
    task, number = problem_number(prompt)
    if task is None:
        return {"task": FREE_PROMPT}
    return {"task": task, "problem": _problem_slider(task, number)}


def task_chosen(task, number) -> dict:
    """A task fills the prompt with its held-out problem `number` and sets the benchmark's canvas length;
    "free prompt" leaves the prompt as it is."""
    if task in (None, FREE_PROMPT):
        return {}
    number = min(max(1, as_int(number) or 1), num_problems(task))
    return {"prompt": problem(task, number).prompt, "problem": _problem_slider(task, number), "length": TASK_LENGTH}


def problem_chosen(task, number) -> dict:
    """The problem slider: that held-out problem of the chosen task."""
    if task in (None, FREE_PROMPT):
        return {}
    return {"prompt": problem(task, as_int(number)).prompt}


def another_problem(task, number) -> dict:
    """The next held-out problem of the task (after the last, the first again)."""
    if task in (None, FREE_PROMPT):
        return {}
    following = as_int(number or 0) % num_problems(task) + 1
    return {"prompt": problem(task, following).prompt, "problem": _problem_slider(task, following)}


def model_picked(model, prompt) -> dict:
    """Choosing a task model while the prompt is no task's: start with the first task's first problem."""
    if not shows_tasks(model) or problem_number(prompt)[0] is not None:
        return {}
    first = next(name for _, name in task_choices() if name != FREE_PROMPT)
    return {"task": first} | task_chosen(first, 1)


def prompt_edited(prompt, task) -> dict:
    """A prompt typed by hand: the menu follows it (its task, and its number when it is a held-out problem)."""
    out = task_controls(prompt)
    return {} if out["task"] == task and "problem" not in out else out


# The canvas length against the model's positions -------------------------------------------------
LENGTH_INFO = "Canvas positions; all start masked."


def canvas_room(model, prompt) -> tuple[int, int] | None:
    """(the model's positions, the prompt's tokens as a run encodes it) for a shipped diffusion model (small:
    loaded here, as its first run would), None for a hub model, which only a run loads (and then checks)."""
    spec = REGISTRY.get(model)
    if spec is None or spec.kind != "diffusion" or spec.hub_id or not isinstance(prompt, str) or not prompt.strip():
        return None
    lm = as_lm(model, progress=None)
    if lm.max_length is None:
        return None
    return lm.max_length, len(lm.encode_prompt(prompt, chat=CHAT)[0])


def length_checked(model, prompt, length) -> dict:
    """The Length slider's note, kept up to date as the model, prompt or length change, so a canvas that
    does not fit beside the prompt is said before Generate (the run would be refused)."""
    try:
        room = canvas_room(model, prompt)
    except USER_ERRORS:  # a model that cannot load: Generate says why
        room = None
    if room is None:
        return {"length": gr.update(info=LENGTH_INFO)}
    positions, used = room
    left = positions - used
    if left < 1:
        return {"length": gr.update(info=f"{LENGTH_INFO} ⚠ This prompt takes {used} tokens, more than {model}'s "
                                         f"{positions} positions: shorten it.")}
    note = f"{LENGTH_INFO} {model} has {positions} positions; this prompt takes {used}, leaving {left}."
    length = as_int(length)
    if isinstance(length, int) and length > left:
        note += f" ⚠ {length} does not fit: set at most {left}, or shorten the prompt."
    return {"length": gr.update(info=note)}


def check_diffusion_model(model: str) -> None:
    """A registry model must be a masked diffusion LM (hub ids are checked when they load)."""
    check_model(model)
    spec = REGISTRY.get(model)
    if spec is not None and spec.kind != "diffusion":
        raise ValueError(f"`model` {model!r} is a causal (autoregressive) model; the Diffusion tab needs a masked "
                         "diffusion LM such as tiny-diffusion (pick tiny-ar in Compare with to set them side by side)")


def comparison_request(compare, params: dict, length: int) -> tuple[str | None, str, dict] | None:
    """(model or None for the tab's, strategy, parameters) of the "Compare with" run, or None."""
    if compare in (None, "", NO_COMPARISON):
        return None
    if compare not in COMPARISONS:
        raise ValueError(f"`compare` must be one of {', '.join(COMPARISONS)}, got {compare!r}")
    model, strategy, overrides = COMPARISONS[compare]
    if overrides.get("steps") == "length/4":  # four tokens per step (at least one step per block)
        blocks = length // params["block_length"] if params["block_length"] and isinstance(length, int) else 1
        overrides = overrides | {"steps": max(blocks, length // 4 if isinstance(length, int) else 1, 1)}
    return model, strategy, (params | overrides if strategy == "diffusion" else dict(overrides))


def validate(model, prompt, length, seed, fields: dict, compare=NO_COMPARISON):
    """(the run's parameters, the comparison request or None), or ValueError naming the bad input."""
    params = collect_params(fields)
    validate_request(prompt, "diffusion", params, length, seed)
    other = comparison_request(compare, params, length)
    if other is not None:
        try:
            validate_request(prompt, other[1], other[2], length, seed)
        except ValueError as err:
            raise ValueError(f"Compare with {compare}: {err}") from None
    check_diffusion_model(model)
    return params, other


def _steps_status(update: dict, trace: Trace, what: str) -> dict:
    steps = steps_of(trace)
    if steps and "status" in update:
        update["status"] = f"{what}: {len(steps)} steps so far, NFE {steps[-1].nfe}."
    return update


def playback_rate(playback) -> float:
    """At most this many steps a second for a Pace choice (0 = full speed, also for a caller without the
    control; the tab's control starts at DEFAULT_PLAYBACK)."""
    if playback in (None, ""):
        return 0.0
    if playback not in PLAYBACK:
        raise ValueError(f"`playback` must be one of {', '.join(PLAYBACK)}, got {playback!r}")
    return PLAYBACK[playback]


def generate_run(model, prompt, length, seed, compare, playback=None, **fields) -> Iterator[dict]:
    """Unmask the canvas and stream the views; then the "Compare with" run (if asked).

    `fields` are the sampler's parameters by name (every one of `FIELDS`). `playback` paces the run: at
    most that many steps a second, the sampler waiting before its next model call (not a replay), so
    every step of a run faster than the eye reaches the page; the canvas goes out with each step."""
    length, seed = as_int(length), as_int(seed)
    try:
        rate = playback_rate(playback)
        params, other_request = validate(model, prompt, length, seed, fields, compare)
    except USER_ERRORS as err:
        raise user_error(err) from None
    trace = Trace()
    yield views(trace) | {"trace": trace, "other": None, "status": f"Starting {md_esc(model)}…"}
    work = run_work(model, prompt, strategy="diffusion", params=params, max_new_tokens=length, seed=seed, chat=CHAT,
                    min_step_s=1 / rate if rate else 0.0)
    live, canvas = lambda: views(trace, live=True), lambda _: canvas_views(trace)
    what = f"Unmasking at {playback} at most" if rate else "Unmasking"
    with contextlib.closing(stream_views(work, trace, live, "steps", quick=canvas)) as updates:  # Stop closes it
        for update in updates:
            yield _steps_status(update, trace, what)
    done = views(trace) | {"trace": trace}
    if other_request is None or trace.finish is None or trace.finish.stop_reason == "cancelled":
        yield done | {"status": f"**Finished**: {stats_line(trace)}.{limit_note(trace)}" if trace.finish else "Finished."}
        return
    other_model, strategy, other_params = other_request
    other_model = other_model or model
    other = Trace()
    yield done | {"other": other, "status": f"First run finished; now **{compare}** on the same prompt, length and seed…"}
    work = run_work(other_model, prompt, strategy=strategy, params=other_params, max_new_tokens=length, seed=seed,
                    chat=CHAT)
    render = lambda: {k: v for k, v in views(trace, other).items() if k.startswith("compare")}
    with contextlib.closing(stream_views(work, other, render, "tokens")) as updates:
        for update in updates:
            yield _steps_status(update, other, f"Comparing ({compare})")
    yield views(trace, other) | {"status": comparison_status(trace, other)}


def comparison_status(trace: Trace, other: Trace) -> str:
    s = stats(other)
    passes = s.get("nfe", s["forward_passes"])
    how = esc(other_label(other))
    return (f"**Finished**: {stats_line(trace)}. Compared ({how}): {s['num_tokens']} tokens with {passes} model "
            f"calls{verdict_mark(other)}.")


def stop_run(trace, other, wait_s: float = 3.0) -> dict:
    """After Stop cancelled the running event: show what was unmasked (the export buttons offer it)."""
    if trace is None:
        return {"status": "Nothing is running."}
    if other is not None:  # the main run had finished; Stop hit the comparison run (or came after it)
        if not wait_for_finish(other, wait_s):
            return {"status": "Nothing is running."}
        return views(trace, other) | {"status": f"**Stopped** the comparison run. Main: {stats_line(trace)}."}
    if not wait_for_finish(trace, wait_s) and trace.finish is not None:
        return {"status": "Nothing is running."}
    return views(trace) | {"status": f"**Stopped** the run after {len(steps_of(trace))} steps."}


def choose_step(step, trace, other) -> dict:
    """The step slider: the canvas after that step (after the run; while it streams the latest is shown)."""
    if trace is None or trace.start is None:
        return {}
    return views(trace, other, as_int(step))


def run_controls(run) -> dict:
    """The controls for a preset's or a replayed run's settings (the tab's defaults for what they leave out)."""
    return ({"model": run.model, "prompt": run.prompt, "seed": run.seed,
             "length": min(max(1, run.max_new_tokens), UI_MAX_LENGTH)}
            | task_controls(run.prompt) | fields_from_params(run.params))  # .change shows the right controls


TAB = RunControls("diffusion", "diffusion", lambda strategy: strategy == "diffusion", run_controls)


def replay(path, trace, other) -> dict:
    """Load a saved diffusion trace into the views and its settings into the controls; anything else changes
    nothing."""
    return TAB.replay(path, "diffusion steps", lambda t: TAB.runs(t.start.strategy) and bool(steps_of(t)), views,
                      stats_line, {"other": None})


# Presets -------------------------------------------------------------------------------------------
def preset_choices() -> list[tuple[str, str]]:
    return preset_menu("diffusion")


def preset_chosen(name) -> dict:
    """Every control from the preset (defaults for what it leaves out) and its teaching note."""
    return TAB.preset_chosen(name)


def opening() -> dict:
    """What a fresh tab shows, by control name: the opening preset's controls, note and name, the comparison
    that makes its lesson visible, and the declared defaults for the rest (all of them without the preset)."""
    chosen = preset_chosen(OPENING_PRESET)
    if "model" not in chosen:  # the preset file is gone: the declared defaults, no comparison
        return {"model": DEFAULT_MODEL, "prompt": DEFAULT_PROMPT, "length": DEFAULT_LENGTH, "seed": 0,
                "task": FREE_PROMPT, "compare": NO_COMPARISON, "preset": None, "note": ""} | fields_from_params({})
    return chosen | {"preset": OPENING_PRESET, "compare": OPENING_COMPARE}


__all__ = ["DEFAULT_SETTINGS", "FIELDS", "NO_COMPARISON", "another_problem", "choose_step", "generate_run",
           "model_picked", "opening", "preset_chosen", "problem_chosen", "prompt_edited", "replay", "shown_controls", "stop_run",
           "task_chosen", "task_picker_shown"]
