"""The Scaling tab's event handlers as plain functions: values in, {output name: value} out.

Each one validates its inputs (a bad one raises `gr.Error` with the engine's message and changes
nothing) and renders with `ui.scaling_views.views`. `generate_run` is a generator that streams
while the worker thread decodes the N particles, then (with "Compare with") runs another method
at the same budget; closing it (Stop) stops whichever run is going.
"""

from __future__ import annotations

from typing import Iterator

import gradio as gr

from decoding.events import Trace
from decoding.presets import preset_menu
from decoding.run import validate_request
from ui.widgets import USER_ERRORS, md_esc, user_error
from ui.wiring import RunControls, as_int
from ui.worker import check_model, limit_note, run_work, stream_views, wait_for_finish
from ui.scaling_views import (defaults_on_switch, settings_of, DEFAULTS, FIELDS, FREE_PROMPT, METHODS, SPECIFIC,
                              UI_MAX_NEW_TOKENS, collect_params, fields_from_params, live_particles, method_help,
                              method_info, reward_help, stats_line, task_by_id, task_of_prompt, views, visible_fields)

NO_COMPARISON = "none"


def model_changed(model: str, method: str) -> dict:
    """A model on a remote engine: the method menu offers only what the engine can run, and says why."""
    from decoding.remote.source import is_remote
    from decoding.remote.strategies import remote_menu

    names, note = list(METHODS), ""
    if is_remote(model or ""):
        names, note = remote_menu(names)
    return {"method": gr.update(choices=names, value=method if method in names else names[0],
                                info=note or method_info())}


def shown_controls(method: str, reward: str) -> dict:
    """Show only the controls of this method and reward, and the method's and the reward's one-line explanations."""
    shown = visible_fields(method, reward)
    return ({f"sc:{f}": gr.update(visible=f in shown) for f in SPECIFIC}
            | {"reward_help": reward_help(reward), "method_help": method_help(method)})


def method_switched(method: str, **values) -> dict:
    """The user picked another method: a family field left at a default takes the new method's own
    (`defaults_on_switch`; step-speculation's n = 1, the particle filter's n = 4)."""
    return defaults_on_switch(method, values)


TINY_MATH_REWARDS = ("spare", "spare-prm")  # read a tiny-math question's steps, or tiny-math's own forward pass


def task_chosen(task_id, model=None, reward=None) -> dict:
    """A shipped task fills the prompt and its reference answer; "(free prompt)" clears the reference.
    A tiny-math problem also picks tiny-math (it reads nothing else), and a word problem moves the
    policy off tiny-math to the model the task set was written for; any other model is kept. A word
    problem also moves the reward off one that reads only tiny-math (the tab opens on spare, issue 43),
    to the declared default: spare would score every line of a word problem neutral."""
    task = task_by_id(task_id) if task_id not in (None, FREE_PROMPT) else None
    if task is None:
        return {"sc:reference": ""}
    out = {"prompt": task["prompt"], "sc:reference": task["answer"]}
    if task["model"] == "tiny-math" or model == "tiny-math":
        out["model"] = task["model"]
    if task["model"] != "tiny-math" and reward in TINY_MATH_REWARDS:
        out["sc:reward"] = DEFAULTS["reward"]
    return out


def prompt_edited(prompt, task_id) -> dict:
    """A prompt that no longer contains the chosen task's question is a free prompt: forget the task's answer."""
    task = task_by_id(task_id) if task_id not in (None, FREE_PROMPT) else None
    if task is None or task["question"] in (prompt or ""):
        return {}
    return {"task": FREE_PROMPT, "sc:reference": ""}


def form_note(model, prompt) -> dict:
    """Under the prompt: when the policy is tiny-math and the prompt is outside the one question form it
    was trained to read (a second line, a multi-word name, another sentence), say so and why; else nothing.
    tiny-math answers such prompts, but its answers mean little (its model card)."""
    from decoding.scaling.math_tasks import check_question

    why = check_question(prompt or "") if model == "tiny-math" else None
    if why is None:
        return {"form_note": gr.update(value="", visible=False)}
    return {"form_note": gr.update(value=f"Note: this prompt is outside the form tiny-math reads ({md_esc(why)}), so its "
                                         "answers will mostly be wrong. Pick a task, or edit the numbers, name or item "
                                         "of one.", visible=True)}


def validate(model, prompt, method, max_new_tokens, seed, fields: dict,
             compare=NO_COMPARISON) -> tuple[dict, dict | None]:
    """(the run's parameters, the comparison run's or None), or ValueError naming the bad input."""
    params = collect_params(method, fields)
    validate_request(prompt, method, params, max_new_tokens, seed)
    other = None
    if compare and compare != NO_COMPARISON:
        if compare not in METHODS:
            raise ValueError(f"`compare` must be none or one of {', '.join(METHODS)}, got {compare!r}")
        other = collect_params(compare, fields)
        try:
            validate_request(prompt, compare, other, max_new_tokens, seed)
        except ValueError as err:
            raise ValueError(f"Compare with {compare}: {err}") from None
    check_model(model)
    return params, other


def generate_run(model, prompt, method, max_new_tokens, seed, chat, compare, **fields) -> Iterator[dict]:
    """Run the method and stream the views; then the "Compare with" method at the same budget (if asked).
    `fields` are the tab's parameter fields by name (every one of `FIELDS`)."""
    max_new_tokens, seed = as_int(max_new_tokens), as_int(seed)
    try:
        params, other_params = validate(model, prompt, method, max_new_tokens, seed, fields, compare)
    except USER_ERRORS as err:
        raise user_error(err) from None
    trace = Trace()
    yield views(trace) | {"trace": trace, "other": None, "status": f"Starting {md_esc(model)}…"}
    work = run_work(model, prompt, strategy=method, params=params, max_new_tokens=max_new_tokens, seed=seed,
                    chat=bool(chat))
    particles = lambda progress: live_particles(trace, progress)  # each step's tokens as they come
    yield from stream_views(work, trace, lambda: views(trace, live=True), "particle steps", quick=particles)
    done = views(trace) | {"trace": trace}
    if other_params is None or trace.finish is None or trace.finish.stop_reason == "cancelled":
        yield done | {"status": f"**Finished**: {stats_line(trace)}.{limit_note(trace)}" if trace.finish else "Finished."}
        return
    other = Trace()
    yield done | {"other": other, "status": f"{method} finished; now **{compare}** with the same N, reward, seed "
                                            "and prompt, for the comparison…"}
    work = run_work(model, prompt, strategy=compare, params=other_params, max_new_tokens=max_new_tokens, seed=seed,
                    chat=bool(chat))
    particles = lambda progress: live_particles(other, progress, f"comparison: {compare}")
    render = lambda: {"summary": views(trace, other)["summary"]} | particles(None)
    yield from stream_views(work, other, render, f"{compare} steps", quick=particles)
    yield views(trace, other) | {"status": comparison_status(trace, other)}


def comparison_status(trace: Trace, other: Trace) -> str:
    return f"**Finished**: {stats_line(trace)}. Compared: {stats_line(other)}."


def stop_run(trace, other, wait_s: float = 3.0) -> dict:
    """After Stop cancelled the running event: show what was generated (the export buttons offer it)."""
    if trace is None:
        return {"status": "Nothing is running."}
    if other is not None:  # the main run had finished; Stop hit the comparison run (or came after it)
        if not wait_for_finish(other, wait_s):
            return {"status": "Nothing is running."}
        return views(trace, other) | {"status": "**Stopped** the comparison run "
                                      f"after {len(other.of_kind('particles'))} steps. Main: {stats_line(trace)}."}
    if not wait_for_finish(trace, wait_s) and trace.finish is not None:
        return {"status": "Nothing is running."}
    count = len(trace.of_kind("particles"))
    return views(trace) | {"status": f"**Stopped** the run after {count} particle steps."}


def choose_step(step, trace, other) -> dict:
    """The step slider: that step's particles (after the run; while it streams the latest is shown)."""
    if trace is None or trace.start is None:
        return {}
    return views(trace, other, as_int(step))


def run_controls(run) -> dict:
    """The controls for a preset's or a replayed run's settings: the method's own defaults for what they leave
    out, and the task's answer as the reference where the prompt is one of the task's problems."""
    task = task_of_prompt(run.prompt)
    controls = {"model": run.model, "prompt": run.prompt, "method": run.strategy, "seed": run.seed, "chat": run.chat,
                "task": str(task["id"]) if task else FREE_PROMPT,
                "max_new_tokens": min(max(1, run.max_new_tokens), UI_MAX_NEW_TOKENS)}
    controls |= {f"sc:{f}": v for f, v in settings_of(run.strategy).items()}
    controls |= fields_from_params(run.strategy, run.params)  # .change shows the right controls
    if not str(run.params.get("reference") or "").strip():
        controls["sc:reference"] = task["answer"] if task else ""
    return controls


TAB = RunControls("scaling", "scaling", lambda strategy: strategy in METHODS, run_controls)


def replay(path, trace, other) -> dict:
    """Load a saved scaling trace into the views (and its settings into the controls); anything else changes nothing."""
    return TAB.replay(path, "particle steps", lambda t: TAB.runs(t.start.strategy) and bool(t.of_kind("particles")),
                      views, stats_line, {"other": None})


# Presets -------------------------------------------------------------------------------------------
def preset_choices() -> list[tuple[str, str]]:
    return preset_menu("scaling")


def preset_chosen(name) -> dict:
    """Every control from the preset (the method's defaults for what it leaves out) and its teaching note."""
    return TAB.preset_chosen(name)


__all__ = ["FIELDS", "NO_COMPARISON", "choose_step", "generate_run", "preset_chosen", "prompt_edited", "replay",
           "form_note", "method_switched", "shown_controls", "stop_run", "task_chosen"]
