"""The Playground's event handlers as plain functions: values in, {output name: value} out.

Each one validates its inputs (a bad one raises `gr.Error` with the engine's message and changes
nothing), updates the per-user state it was given, and renders with `views`. Model-bound ones
(`generate_run`, `branch_run`) are generators that stream while the worker thread decodes;
closing them (Stop) stops the run.
"""

from __future__ import annotations

from typing import Iterator

import gradio as gr

from visualizers.token_methods import METHOD_FIGURES

from decoding.events import Trace, TokenStep, stats
from decoding.presets import preset_menu
from decoding.run import validate_request
from decoding.registry import STRATEGIES
from decoding.remote.source import is_remote
from decoding.remote.strategies import remote_menu
from ui.widgets import USER_ERRORS, md_esc, user_error
from ui.wiring import RunControls, as_int
from ui.worker import check_model, finished_status, run_work, stream_views, wait_for_finish
from ui.exports import download
from ui.playground_views import (UI_MAX_NEW_TOKENS, collect_params, focused, is_beam_family, new_selection, param_widgets,
                                 playground_strategies, shown_group, text_views, token_at, views)

NO_BRANCH = "No branch to export: click a token, pick an alternative and press Branch."


def strategy_changed(strategy: str) -> dict:
    """Show only the chosen strategy's parameters (and the beam tree for beam search)."""
    out = shown_group(strategy, playground_strategies())
    out["strategy"] = gr.update(info=strategy_help(strategy))
    out["beams"] = gr.update(visible=is_beam_family(strategy))
    out["method"] = gr.update(visible=strategy in METHOD_FIGURES)
    models = STRATEGIES[strategy].models if strategy in STRATEGIES else ()
    if models:  # a method trained into its model (LUD, HAMburger, FTP's router): pick that model
        out["model"] = gr.update(value=models[0])
    return out


def model_changed(model: str, strategy: str) -> dict:
    """A model on a remote engine: the strategy menu offers only what the engine can run, and says why."""
    names, note = playground_strategies(), ""
    if is_remote(model):
        names, note = remote_menu(names)
    chosen = strategy if strategy in names else names[0]
    return {"strategy": gr.update(choices=names, value=chosen, info=note or strategy_help(chosen))}


def strategy_help(strategy: str) -> str:
    """The registry's one-line help as a sentence."""
    text = STRATEGIES[strategy].help if strategy in STRATEGIES else ""
    return text[:1].upper() + text[1:] + "." if text else ""


def _reset(selection: dict, run: str = "main") -> dict:
    selection.clear()
    selection.update(new_selection(), run=run)
    return selection


def generate_run(model, strategy, prompt, max_new_tokens, seed, chat, dtype, color_by, selection,
                 **param_values) -> Iterator[dict]:
    """Run the chosen strategy and stream the views (the export buttons write files only when clicked).
    `param_values` are the parameter widgets' values by key ({"param:sample.top_p": 0.9, ...})."""
    max_new_tokens, seed = as_int(max_new_tokens), as_int(seed)
    try:
        params = collect_params(strategy, param_values)
        validate_request(prompt, strategy, params, max_new_tokens, seed)
        check_model(model)
    except USER_ERRORS as err:
        raise user_error(err) from None
    selection = _reset(selection)
    trace, branch = Trace(), None
    first = views(trace, branch, selection, color_by)
    yield first | {"trace": trace, "branch": branch, "selection": selection, "status": f"Starting {md_esc(model)}…"}
    work = run_work(model, prompt, dtype=dtype or "auto", strategy=strategy, params=params,
                    max_new_tokens=max_new_tokens, seed=seed, chat=bool(chat))
    render = lambda: views(trace, branch, selection, color_by, inspector=False)
    chips = lambda _: text_views(trace, branch, selection, color_by)
    beams = is_beam_family(strategy)  # a step grows every beam by one; the best hypothesis may end sooner
    yield from stream_views(work, trace, render, "beam steps" if beams else "tokens", quick=chips)
    yield views(trace, branch, selection, color_by) | {"trace": trace, "status": finished_status(trace, "Finished")
                                                       + (beam_note(trace) if beams else "")}


def beam_note(trace: Trace) -> str:
    """What a beam run's counts mean: the live line counted beam steps, "Finished" the best hypothesis's tokens."""
    steps = len(trace.of_kind("beams"))
    return (f" Tokens counts the best hypothesis; the search ran {steps} beam steps (what the live line counted)."
            if steps else "")


def stop_run(trace, branch, selection, color_by, wait_s: float = 3.0) -> dict:
    """After Stop cancelled the running event: show what was generated (the export buttons offer it).

    The latest run is the branch if there is one. Its worker ends after the current step and records
    RunFinished "cancelled"; wait briefly for it.
    """
    shown, what = (branch["trace"], "the branch") if branch else (trace, "the run")
    if shown is None:
        return {"status": "Nothing is running."}
    if not wait_for_finish(shown, wait_s) and shown.finish is not None:
        return {"status": "Nothing is running."}
    count = stats(shown)["num_tokens"] if shown.start else 0
    return views(trace, branch, selection, color_by) | {"status": f"**Stopped** {what} after {count} tokens."}


def select_step(run: str, step, trace, branch, selection, color_by) -> dict:
    """Inspect `step` of the main run or the branch: marker on the timeline, its alternatives, Branch."""
    shown = branch["trace"] if run == "branch" and branch else trace if run == "main" else None
    if shown is None:
        gr.Warning("Generate some text first, then click one of its tokens.")
        return {}
    step = as_int(step)
    if step is not None and token_at(shown, step) is None:
        steps = [e.step for e in shown.events if isinstance(e, TokenStep)]
        if not steps:
            gr.Warning("This run has no per-token steps to inspect (beam search keeps whole hypotheses).")
        else:
            gr.Warning(f"Step {step} is not in this run: its steps are {steps[0]}–{steps[-1]}.")
        return {}
    selection.update(run=run, step=step)
    return views(trace, branch, selection, color_by) | {"selection": selection}


def click_token(trace, branch, selection, color_by, evt: gr.EventData, run: str = "main") -> dict:
    step = getattr(evt, "_data", None) or {}
    return select_step(run, step.get("step") if isinstance(step, dict) else None, trace, branch, selection,
                       color_by)


def click_main(trace, branch, selection, color_by, evt: gr.EventData) -> dict:
    return click_token(trace, branch, selection, color_by, evt, "main")


def click_branch(trace, branch, selection, color_by, evt: gr.EventData) -> dict:
    return click_token(trace, branch, selection, color_by, evt, "branch")


def type_step(step, trace, branch, selection, color_by) -> dict:
    """The step number box: inspect that step of the focused run."""
    return select_step(selection.get("run", "main"), step, trace, branch, selection, color_by)


def recolor(trace, branch, selection, color_by) -> dict:
    return views(trace, branch, selection, color_by, inspector=False)


def branch_source(trace, branch, selection) -> tuple[Trace, TokenStep, dict | None]:
    """The focused run, its selected step and (for a branch of a branch) its branch info; ValueError if none."""
    source, _ = focused(trace, branch, selection)
    event = token_at(source, selection.get("step"))
    if source is None or event is None:
        raise ValueError("select a token first: click it in the text (or type its step number)")
    if STRATEGIES.get(source.start.strategy) is None or STRATEGIES[source.start.strategy].family != "token":
        raise ValueError(f"branching needs one token per step; {source.start.strategy!r} has none")
    info = branch["info"] if source is (branch or {}).get("trace") else None
    return source, event, info


def branch_plan(source: Trace, event: TokenStep, info: dict | None, alternative) -> tuple[list[int], int, dict]:
    """(prefix_ids, max_new_tokens, branch info) to continue `source` from `alternative` at `event.step`."""
    alternative = as_int(alternative)
    if alternative not in event.top_ids:
        raise ValueError(f"`alternative` must be one of step {event.step}'s recorded alternatives "
                         f"{event.top_ids}, got {alternative!r}")
    start, steps = source.start, [e for e in source.events if isinstance(e, TokenStep)]
    before = [e for e in steps if e.step < event.step]
    prefix_ids = list(start.prefix_ids) + [e.token_id for e in before] + [alternative]
    budget = start.max_new_tokens + len(start.prefix_ids)  # the source's total length limit
    lead = (info["prefix_text"] + info["chosen_text"]) if info else ""
    after = Trace([e for e in steps if e.step > event.step])
    index = event.top_ids.index(alternative)
    plan = {"source": "previous branch" if info else "original run", "step": event.step,
            "prefix_text": lead + "".join(e.token_text for e in before),
            "chosen_text": event.top_tokens[index], "chosen_prob": event.top_probs[index],
            "orig_text": event.token_text, "orig_prob": event.prob,
            "orig_after": stats(after) | {"stop_reason": stats(source)["stop_reason"]}}
    return prefix_ids, max(1, budget - len(prefix_ids)), plan


def remote_prefix(model: str, traces: list[Trace], ids: list[int]) -> list[int]:
    """A remote branch's prefix in this process's token ids, from the id -> text tables the traces
    record (every step's chosen token and its alternatives)."""
    texts: dict[int, str] = {}
    for trace in traces:
        for e in trace.of_kind("token"):
            texts.update(zip(e.top_ids, e.top_tokens))
            texts[e.token_id] = e.token_text
    from decoding.run import as_lm

    return as_lm(model).ids_for(ids, texts)


def branch_run(alternative, trace, branch, selection, color_by) -> Iterator[dict]:
    """Continue the focused run from the selected step with another token; the original stays visible."""
    try:
        source, event, info = branch_source(trace, branch, selection)
        prefix_ids, max_new_tokens, plan = branch_plan(source, event, info, alternative)
        if is_remote(source.start.model):  # the engine's tokens are texts: re-number them for this process
            prefix_ids = remote_prefix(source.start.model, [trace, source], prefix_ids)
    except USER_ERRORS as err:
        raise user_error(err) from None
    start = source.start
    branch = {"trace": Trace(), "info": plan}
    selection = _reset(selection, run="branch")
    yield views(trace, branch, selection, color_by) | {"branch": branch, "selection": selection,
                                                        "status": f"Branching at step {event.step}…"}
    work = run_work(start.model, start.prompt, dtype=start.dtype, strategy=start.strategy, params=start.params,
                    max_new_tokens=max_new_tokens, seed=start.seed, chat=start.chat, prefix_ids=prefix_ids)
    render = lambda: views(trace, branch, selection, color_by, inspector=False)
    chips = lambda _: text_views(trace, branch, selection, color_by)
    yield from stream_views(work, branch["trace"], render, "branch tokens", quick=chips)
    yield views(trace, branch, selection, color_by) | {"branch": branch, "selection": selection,
                                                        "status": finished_status(branch["trace"], "Branch finished")}


def download_branch(branch: dict | None) -> str | None:
    """The Branch trace button: the branch's trace (JSON), named like the main run's with `-branch`."""
    return download(branch and branch["trace"], missing=NO_BRANCH, suffix="-branch")


def run_controls(run) -> dict:
    """The controls for a preset's or a replayed run's settings (the strategy's defaults for what they leave
    out; the strategy's `.change` then shows that strategy's parameters)."""
    return {"model": run.model, "strategy": run.strategy, "prompt": run.prompt, "seed": run.seed, "chat": run.chat,
            "max_new_tokens": min(max(1, run.max_new_tokens), UI_MAX_NEW_TOKENS)} | \
        {w.key: run.params.get(w.name, w.default) for w in param_widgets(run.strategy)}


TAB = RunControls("playground", "Playground", lambda strategy: strategy in playground_strategies(), run_controls)


def replay(path, trace, branch, selection, color_by) -> dict:
    """Load a saved trace into the views (and its settings into the controls, where the Playground runs its
    strategy, so Generate reruns it); a bad file changes nothing."""
    fresh = new_selection()

    def line(loaded: Trace) -> str:
        s, start = stats(loaded), loaded.start
        return (f"{md_esc(start.model)}, {md_esc(start.strategy)}, {s['num_tokens']} tokens "
                f"(recorded at {s['tokens_per_s'] or '–'} tokens/s)")

    update = TAB.replay(path, "token steps", lambda t: True, lambda t: views(t, None, fresh, color_by), line,
                        {"branch": None, "selection": selection})
    if update:  # the views were drawn with a fresh selection: the session's becomes it
        selection.clear()
        selection.update(fresh)
    return update


# Presets -------------------------------------------------------------------------------------------
def preset_choices() -> list[tuple[str, str]]:
    return preset_menu("playground")


def preset_chosen(name) -> dict:
    """The preset's model, strategy, prompt, limits and parameters (defaults for those it leaves out), and its
    teaching note; the strategy's `.change` then shows that strategy's parameters."""
    return TAB.preset_chosen(name)
