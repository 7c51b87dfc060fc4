"""The Speculative tab's event handlers as plain functions: values in, {output name: value} out.

Each one validates its inputs (a bad one raises `gr.Error` with the engine's message and changes
nothing) and renders with `ui.speculative_views.views`. `generate_run` is a generator that streams
while the worker thread decodes, then (optionally) runs plain decoding of the same target for the
speed comparison; closing it (Stop) stops whichever run is going.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import torch

from decoding.speculative.strategy import DRAFTERS
from decoding.events import Event, Trace, stats
from decoding.presets import preset_menu
from decoding.run import validate_request
from ui.widgets import USER_ERRORS, md_esc, user_error
from ui.wiring import RunControls, as_int
from ui.worker import check_model, finished_status, run_work, stream_in_thread, stream_views, wait_for_finish
from ui.plugin_fields import namespaced, visibility
from ui.speculative_views import (DEFAULT_SETTINGS, SPEC_FIELDS, STRATEGY, UI_MAX_NEW_TOKENS, baseline_plan,
                                  collect_spec_params, stats_line, views)
from visualizers import spec_tokens_html
from visualizers.coupling import coupling_figure
from visualizers.mecb import game_figure, mecb_figure
from decoding.speculative import mcg
from visualizers.memory import MAX_POINTS, budget_point, memory_figure

COUPLING_K = 2  # the coupling view's drafts k at first
MECB_RATE = 1.0  # MEC-B's rate bound at first, bits
MCG_MESSAGES = [chr(ord("A") + i) for i in range(16)]  # the Markov coding game's messages, uniform prior
MCG_PRIOR = [1 / len(MCG_MESSAGES)] * len(MCG_MESSAGES)
MCG_DEFAULTS = {"message": "F", "rate": 2.0, "temperature": 0.3, "seed": 0}
MCG_TEMPERATURES = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)  # the trade-off curve's points
MCG_EPISODES = 48  # episodes per point of the trade-off (seeded)


def drafter_help(drafter: str) -> str:
    """The chosen drafter's own line (its registration's help)."""
    return f"**{drafter}**: {DRAFTERS.entry(drafter).help}" if drafter in DRAFTERS else ""


def drafter_changed(drafter: str) -> dict:
    """Show the chosen drafter's own settings (as it declares them) and its help; hide the others'."""
    return visibility(STRATEGY, "spec", drafter) | {"drafter_help": drafter_help(drafter)}


def validate(model, prompt, max_new_tokens, seed, fields: dict) -> dict:
    """The run's parameters, or ValueError naming the bad input (before any model work)."""
    params = collect_spec_params(fields)
    validate_request(prompt, STRATEGY, params, max_new_tokens, seed)
    check_model(model)
    for name, value in params.items():  # the chosen drafter's model, when it loads one
        if name.endswith(".draft_model") and str(value).strip():
            check_model(value)
    return params


def generate_run(model, prompt, max_new_tokens, seed, chat, compare, **fields) -> Iterator[dict]:
    """Run speculative decoding and stream the views; then plain decoding for the comparison (if asked).
    `fields` are the strategy's parameters by name (every one of `SPEC_FIELDS`)."""
    max_new_tokens, seed = as_int(max_new_tokens), as_int(seed)
    try:
        params = validate(model, prompt, max_new_tokens, seed, fields)
    except USER_ERRORS as err:
        raise user_error(err) from None
    trace = Trace()
    yield views(trace) | {"trace": trace, "baseline": None, "plain": None, "status": f"Starting {md_esc(model)}…"}
    work = run_work(model, prompt, strategy=STRATEGY, params=params, max_new_tokens=max_new_tokens, seed=seed,
                    chat=bool(chat))
    chips = lambda _: {"text": spec_tokens_html(trace)}  # each round's tokens as they come
    yield from stream_views(work, trace, lambda: views(trace, live=True), "tokens", quick=chips)
    done = views(trace) | {"trace": trace}
    if not compare or trace.finish is None or trace.finish.stop_reason == "cancelled":
        yield done | {"status": finished_status(trace, "Finished") + f" {stats_line(trace)}."}
        return
    strategy, plain_params = baseline_plan(params)
    plain = Trace()
    yield done | {"plain": plain, "status": f"Speculative run finished; now plain **{strategy}** decoding of the "
                                            "same target for the speed comparison…"}
    work = run_work(model, prompt, strategy=strategy, params=plain_params, max_new_tokens=max_new_tokens,
                    seed=seed, chat=bool(chat))
    late = lambda item: plain.append(item) if isinstance(item, Event) else None  # after Stop
    try:
        with contextlib.closing(stream_in_thread(work, on_late=late)) as pump:  # Stop closes it (and waits)
            for batch in pump:
                for item in batch:
                    if isinstance(item, Event):
                        plain.append(item)
    except USER_ERRORS as err:
        raise user_error(err) from None
    baseline = stats(plain)
    yield views(trace, baseline) | {"baseline": baseline, "status": comparison_status(trace, baseline)}


def comparison_status(trace: Trace, baseline: dict) -> str:
    s = stats(trace)
    fast, slow = s["tokens_per_s"], baseline.get("tokens_per_s")
    ratio = f"**{fast / slow:.2f}×** the speed of plain decoding" if fast and slow else "no speed ratio"
    return f"**Finished**: {stats_line(trace)}; {ratio} ({_n(slow)} tokens/s plain)."


def _n(value) -> str:
    return "–" if value is None else f"{value:.1f}"


def stop_run(trace, baseline, wait_s: float = 3.0) -> dict:
    """After Stop cancelled the running event: show what was generated (the export buttons offer it)."""
    if trace is None:
        return {"status": "Nothing is running."}
    if not wait_for_finish(trace, wait_s) and trace.finish is not None:
        if baseline is None:  # stopped during the comparison run: the speculative one is complete
            return views(trace) | {"status": f"**Stopped** the comparison run. {stats_line(trace)}."}
        return {"status": "Nothing is running."}
    count = stats(trace)["num_tokens"] if trace.start else 0
    return views(trace) | {"status": f"**Stopped** the run after {count} tokens."}


def choose_round(round_index, trace, baseline) -> dict:
    """The round slider: that round's draft tree, and its positions for the p-vs-q view."""
    if trace is None or trace.start is None:
        return {}
    return views(trace, baseline, as_int(round_index))


def choose_position(parent, round_index, trace, baseline) -> dict:
    """The position menu: p versus q where that node's children were drafted."""
    if trace is None or trace.start is None or parent is None:
        return {}
    return views(trace, baseline, as_int(round_index), as_int(parent))


def coupling_view(k, round_index, parent, trace) -> dict:
    """The accordion "Verification rules, one position": the rules at the shown round's position (its
    recorded p and q), or at the built-in example before a run or where no q was recorded."""
    k, round_index = as_int(k), as_int(round_index)
    parent = -1 if parent is None else as_int(parent)
    shown = trace if trace is not None and trace.of_kind("spec_round") else None
    return {"coupling": coupling_figure(shown, round_index if shown else None, parent, k=k)}


def mecb_view(rate, round_index, parent, trace) -> dict:
    """MEC-B beside the rules: the same position (the shown round's, or the built-in example) at rate bound R."""
    round_index = as_int(round_index)
    parent = -1 if parent is None else as_int(parent)
    shown = trace if trace is not None and trace.of_kind("spec_round") else None
    try:
        fig = mecb_figure(shown, round_index if shown else None, parent, rate=rate)
    except ValueError as err:
        raise user_error(err) from None
    return {"mecb": fig}


@functools.lru_cache(maxsize=32)
def _mcg_curves(rate: float, seed: int) -> list[dict]:
    """The trade-off at one rate (deterministic for a seed, so kept: shared read-only, never modified)."""
    return mcg.tradeoff(MCG_PRIOR, [rate], MCG_TEMPERATURES, episodes=MCG_EPISODES, seed=seed,
                        methods=("greedy", "uniform"))


def mcg_view(message, rate, temperature, seed) -> dict:
    """The Markov coding game: one episode sending `message` at rate bound R and policy temperature tau, and
    the reward-vs-accuracy trade-off at that rate (both encoders)."""
    seed = as_int(seed)
    try:
        if message not in MCG_MESSAGES:
            raise ValueError(f"`message` must be one of {', '.join(MCG_MESSAGES)}, got {message!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"`seed` must be an integer >= 0, got {seed!r}")
        episode = mcg.play(MCG_MESSAGES.index(message), MCG_PRIOR, rate, temperature,
                           torch.Generator().manual_seed(seed))
        curves = _mcg_curves(float(rate), seed)
    except ValueError as err:
        raise user_error(err) from None
    group = ", ".join(MCG_MESSAGES[m] for m in episode.groups[episode.code])
    actions = " ".join(mcg.ACTIONS[a] for a in episode.actions) or "(none)"
    verdict = "**right**" if episode.correct else "**wrong**"
    words = len(episode.groups)
    text = (f"Message **{message}** → code word t{episode.code} (shared by {group}; {words} code word"
            f"{'s' if words != 1 else ''} for rate bound R = {rate:g} bits) → actions {actions} "
            f"(return {episode.ret:g}) → decoded **{MCG_MESSAGES[episode.decoded]}**: {verdict}.")
    return {"mcg": game_figure(episode, MCG_PRIOR, MCG_MESSAGES, curves, temperature), "mcg_text": text}


def memory_pending() -> dict:
    """Generate pressed: the Memory plot (drawn when a run ends) stops showing the previous run as if it were this one."""
    return {"memory": memory_figure(None, pending=True)}


def memory_view(trace, points) -> dict:
    """The Memory plot (SpecMemo): the shown run's bytes per part and round, and acceptance against budget
    over this session's runs; a finished run not yet among the points is added."""
    points = list(points or [])
    point = budget_point(trace) if trace is not None and trace.finish is not None else None
    if point is not None and (not points or points[-1] != point):
        points = (points + [point])[-MAX_POINTS:]
    return {"memory": memory_figure(trace, points), "budget_points": points}


def run_controls(run) -> dict:
    """The controls for a preset's or a replayed run's settings (the defaults for what they leave out; the
    drafter's .change shows its own controls)."""
    params = DEFAULT_SETTINGS | namespaced(STRATEGY, run.params)
    return {"model": run.model, "prompt": run.prompt, "seed": run.seed, "chat": run.chat,
            "max_new_tokens": min(max(1, run.max_new_tokens), UI_MAX_NEW_TOKENS)} | \
        {f"spec:{k}": params[k] for k in SPEC_FIELDS if k in params}


TAB = RunControls("speculative", "speculative", lambda strategy: strategy == STRATEGY, run_controls)


def replay(path, trace, baseline) -> dict:
    """Load a saved speculative trace into the views (and its settings into the controls); anything else changes nothing."""
    return TAB.replay(path, "speculative rounds", lambda t: TAB.runs(t.start.strategy) and bool(t.of_kind("spec_round")),
                      views, stats_line, {"baseline": None, "plain": None}, hint="replay it in the Playground tab instead.")


# Presets -------------------------------------------------------------------------------------------
def preset_choices() -> list[tuple[str, str]]:
    return preset_menu("speculative")


def preset_chosen(name) -> dict:
    """Every control from the preset (defaults for what it leaves out) and its teaching note."""
    return TAB.preset_chosen(name)
