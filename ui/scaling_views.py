"""Scaling tab views as plain functions: the state (the main run, the comparison run, the chosen
step) rendered into {output name: value} (see `OUTPUTS`), and the tab's control <-> parameter map.

    trace      the main run (a `Trace` of `ParticleStep`s, growing while it streams)
    other      the "Compare with" run: another method, same N, reward, seed and prompt (or None)
    step       which step's particles the cards show (None = the latest)

Glossary: particle / weight / ESS / resample / lineage: see `visualizers/particles.py`.
    field      a control of the tab, named like the parameter it sets: a shared one by its name ("sc:n" ->
               `n`), a method's own as "<method>.<field>" ("sc:particle-filter.select"), a reward's own as
               the engine names it ("sc:forbid-letter.letter"); so no two fields ever share a widget.
    verdict    whether the chosen answer equals the task's reference (✓ / ✗), when one is known.
"""

from __future__ import annotations

import gradio as gr

from decoding.contracts import StepProgress
from decoding.events import Trace, stats
from decoding.scaling.rewards import parse_number
from decoding.params import specs
from decoding.registry import get_strategy, param_specs, strategies_of
from decoding.scaling.params import ScalingParams
from decoding.models import ASSETS_DIR
from ui.plugin_fields import namespaced, plugin_rows
from ui.widgets import benchmark_file, fmt, md_esc, run_stats_html
from ui.wiring import check_names
from decoding.scaling.scoring import REWARDS, reward_help as _reward_help
from decoding.scaling.tasks import menu_tasks
from visualizers._common import esc
from visualizers.particles import (SUMMARY, budget_figure, chosen_path, chosen_slot, choice_html, lineage_figure,
                                   particles_html, sampling_html, scaling_summary_html, search_tree_figure,
                                   weights_figure)

PREFERRED_METHODS = ("best-of-n", "majority-vote", "reward-beam", "particle-filter", "first-finish")  # menu order


def scaling_methods() -> tuple[str, ...]:
    """Every registered scaling method, the shipped ones first (read when the tab module is imported)."""
    names = strategies_of("scaling")
    return tuple(m for m in PREFERRED_METHODS if m in names) + tuple(m for m in names if m not in PREFERRED_METHODS)


METHODS = scaling_methods()


METHOD_INFO = "How the budget is spent; the chosen method in one line below, every method under “Every method”."


def method_info() -> str:
    """The method menu's line (the methods' own help is `method_help` and `method_list`: 300 words under the
    menu were too many to read)."""
    return METHOD_INFO


def method_help(method: str) -> str:
    """The chosen method in one line, from the registry's help."""
    return f"**{method}**: {get_strategy(method).help}" if method in METHODS else ""


def method_list() -> str:
    """Every method, one line each (a Markdown list), from the registry's help."""
    return "\n".join(f"- **{m}**: {get_strategy(m).help}" for m in METHODS)


DEFAULT_METHOD = "particle-filter"
DEFAULT_MODEL = "tiny-math"  # the policy trained for this lab: its slips are what search can fix
DEFAULT_MAX_NEW_TOKENS = 160  # per particle (an 8-step tiny-math solution is about 100 tokens)
UI_MAX_NEW_TOKENS = 256
FREE_PROMPT = ""  # the task menu's "(free prompt)" value

COMMON = tuple(s.name for s in specs(ScalingParams))  # what every method shares (a reward's own knobs aside)
# each method's own parameters, from its dataclass, keyed "<method>.<field>": two methods' fields of one name
# (best-of-N's and the particle filter's `select`) are two widgets, each with its own default and range
METHOD_FIELDS = {m: tuple(f"{m}.{s.name}" for s in specs(get_strategy(m).params_cls) if s.name not in COMMON)
                 for m in METHODS}
_REWARD_ROWS = plugin_rows(DEFAULT_METHOD)  # every reward's own knobs, "<reward>.<field>" (the same for every method)
REWARD_KEYS = tuple(row["name"] for row in _REWARD_ROWS)
# the fields shown only with a reward: its own knobs, and the task's reference for a reward that reads it
REWARD_FIELDS = {r: tuple(k for k in REWARD_KEYS if k.startswith(f"{r}."))
                 + (("reference",) if REWARDS.capability(r, "reads_reference") else ()) for r in REWARDS.names()}
FIELDS = COMMON + tuple(f for fs in METHOD_FIELDS.values() for f in fs) + REWARD_KEYS
assert not set(METHODS) & set(REWARDS.names()), "a method and a reward share a name: their fields' keys would meet"

_SPECS = {m: {p["name"]: p for p in param_specs(m)} for m in METHODS}


def _param(field: str) -> tuple[str, str]:
    """(whose spec rows hold it, the row's name): a method's own field, a reward's, or a shared one."""
    owner, dot, name = field.partition(".")
    if dot and owner in METHODS:
        return owner, name
    return DEFAULT_METHOD, field


# Each method's declared defaults: a family field may default differently per method (step-speculation
# writes n = 1 solution, the particle filter runs n = 4 particles), so defaults are read per method.
METHOD_DEFAULTS = {m: {f: _SPECS[m][f]["default"] for f in COMMON + REWARD_KEYS}
                   | {f: _SPECS[m][_param(f)[1]]["default"] for f in METHOD_FIELDS[m]} for m in METHODS}
DEFAULTS = {f: next(METHOD_DEFAULTS[m][f] for m in (DEFAULT_METHOD, *METHODS) if f in METHOD_DEFAULTS[m])
            for m in METHODS for f in METHOD_DEFAULTS[m]}  # the tab's initial values: the default method's first
VARYING = tuple(f for f in COMMON if len({repr(METHOD_DEFAULTS[m][f]) for m in METHODS}) > 1)  # e.g. n
assert set(DEFAULTS) == set(FIELDS) and len(set(FIELDS)) == len(FIELDS)

TASKS = menu_tasks()
# The tab opens on its lesson (issues 33, 43): a particle filter of N = 4 on held-out problem m5 (preset 30's), where
# greedy tiny-math answers 238 (it reads "gets 22 more" as 40, right arithmetic on a misread number). The arithmetic
# checker cannot see a misread, so with it the filter's final weights are equal and its "choice" is slot 0 winning a
# tie; the opening uses the reward spare, which checks each line against the question's own steps (a reference no
# real task has), and the filter ends with all four particles on 220 (seeds 0-19: right on 12, best-of-N on 10).
OPENING_TASK = "m5"
OPENING_COMPARE = "best-of-n"
OPENING_SETTINGS = {"reward": "spare"}  # the lesson's own choices over the declared defaults
DEFAULT_TASK = next((t for t in TASKS if str(t["id"]) == OPENING_TASK), TASKS[0])
OPENING_NOTE = (
    "**This tab's lesson: a particle filter against best-of-N, on a problem greedy gets wrong.** tiny-math, the "
    "lab's 2.7M policy, solves held-out problem m5 one `a op b = c` line at a time. Greedy decoding answers 238: "
    "its last line adds 40 where the question says 22, right arithmetic on a misread number. **Generate** runs a "
    "particle filter of N = 4 sampling at temperature 0.8; after every line the reward **spare** checks each "
    "particle's line against the question's own steps, and resampling replaces a particle that misread with a copy "
    "of one that did not (the weights chart marks it; the lineage greys the dropped branch). At seed 0 all four "
    "particles end on 220, the right answer. Then *Compare with* runs best-of-N at the same budget: four "
    "independent samples judged only at the end; one of them is right and spare picks it. One problem and seed: "
    "over seeds 0-19 the filter ends right on 12 and best-of-N on 10; over 40 held-out problems at N = 4 and "
    "temperature 1 the filter with spare is right on 92%, best-of-N with the arithmetic checker on 85% "
    "(docs/measured.md). Spare reads the question's reference steps, which no reward of a real task has: with the "
    "arithmetic checker (reward arith-step) the filter cannot see a misread, its final weights are equal and it "
    "ends on 220 only because the first slot is one of the two that reached it (docs/scaling.md)."
) if DEFAULT_TASK["id"] == OPENING_TASK else ""
DEFAULT_PROMPT = DEFAULT_TASK["prompt"]
DEFAULT_SETTINGS = DEFAULTS | {"reference": DEFAULT_TASK["answer"]} | (
    OPENING_SETTINGS if DEFAULT_TASK["id"] == OPENING_TASK else {})

OUTPUTS = ("status", "stats", "weights", "lineage", "particles", "step", "choice", "summary", "trace", "other")
CONTROLS = ("model", "task", "prompt", "method", "max_new_tokens", "seed", "chat") + tuple(f"sc:{f}" for f in FIELDS)


# Controls <-> parameters ------------------------------------------------------------------------------
def spec_of(field: str) -> dict:
    """The engine's spec row (type, default, range, help, UI hints) of a field's parameter."""
    method, name = _param(field)
    return _SPECS[method][name]


UI_MAX_N = int(spec_of("n")["ui_high"])  # where the N slider stops (the engine takes up to 64)


def help_of(field: str) -> str:
    """The engine's one-line help for a field (its parameter)."""
    return spec_of(field)["help"]


def reward_help(reward: str) -> str:
    return f"**{reward}**: {_reward_help().get(reward, 'unknown reward')}."


def visible_fields(method: str, reward: str) -> set[str]:
    """The method- and reward-specific fields shown for this choice (every other one is hidden)."""
    return set(METHOD_FIELDS.get(method, ())) | set(REWARD_FIELDS.get(reward, ()))


SPECIFIC = tuple(f for f in FIELDS if any(f in fs for fs in (*METHOD_FIELDS.values(), *REWARD_FIELDS.values())))


def collect_params(method: str, fields: dict) -> dict:
    """The method's parameters from the tab's field values by name ({field: value}, every one of
    `FIELDS`): the shared ones, the method's own (as its parameter names) and the chosen reward's
    (`"<reward>.<field>"`); sliders give 4.0 for 4. A missing or unknown name is a ValueError naming it."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {', '.join(METHODS)}, got {method!r}")
    check_names(fields, FIELDS, "scaling")
    params = {}
    reward = fields["reward"] if fields["reward"] in REWARDS else None
    for field in dict.fromkeys(COMMON + METHOD_FIELDS[method] + REWARD_FIELDS.get(reward, ())):  # `reference` once
        value = fields[field]
        kind = spec_of(field)["type"]
        if value is None:
            value = METHOD_DEFAULTS[method][field]
        if kind == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, str) and not field.endswith(".letter"):  # a space may be the letter asked for
            value = value.strip()
        params[_param(field)[1]] = value
    return params


def settings_of(method: str) -> dict:
    """{field: value} a fresh tab shows for `method`: its declared defaults over the tab's."""
    return DEFAULT_SETTINGS | METHOD_DEFAULTS.get(method, {})


def defaults_on_switch(method: str, values: dict) -> dict:
    """{"sc:field": value}: the family fields whose declared default depends on the method (`VARYING`)
    take `method`'s default when the user left them at some method's default; a value typed by the user
    is kept."""
    out = {}
    for field in VARYING:
        seen = {repr(METHOD_DEFAULTS[m][field]) for m in METHODS}
        if repr(values.get(field)) in seen or repr(as_number(values.get(field))) in seen:
            out[f"sc:{field}"] = METHOD_DEFAULTS[method][field]
    return out


def as_number(value):
    return int(value) if isinstance(value, float) and value.is_integer() else value


def fields_from_params(method: str, params: dict) -> dict:
    """{"sc:field": value} for a run's (or a preset's) parameters; a slider's value past where the widget
    stops (its `ui_high` hint) is clamped to it. A reward's knobs in the older flat form of traces and
    presets are read as the chosen reward's."""
    out = {}
    own = set(METHOD_FIELDS.get(method, ()))
    for name, value in namespaced(method, params, given_only=True).items():
        field = f"{method}.{name}" if f"{method}.{name}" in own else name
        if field not in DEFAULTS:
            continue
        high = spec_of(field).get("ui_high")
        if high and isinstance(value, int) and not isinstance(value, bool):
            value = max(1, min(value, int(high)))
        out[f"sc:{field}"] = value
    return out


def task_choices() -> list[tuple[str, str]]:
    short = lambda q: q if len(q) <= 70 else q[:67] + "…"
    return [("(free prompt)", FREE_PROMPT)] + [(f"#{t['id']} · {t['model']} · {short(t['question'])} (= {t['answer']})",
                                                str(t["id"])) for t in TASKS]


def task_by_id(task_id) -> dict | None:
    return next((t for t in TASKS if str(t.get("id")) == str(task_id)), None)


def task_of_prompt(prompt: str) -> dict | None:
    """The shipped task whose prompt this is, if any (replay and presets put the menu back)."""
    return next((t for t in TASKS if t["prompt"].strip() == (prompt or "").strip()), None)


# The benchmark accordion -----------------------------------------------------------------------------
BENCH_MODEL = "tiny-math"
BENCH_PATH = ASSETS_DIR / BENCH_MODEL / "bench.json"
BENCH_COMMAND = f"python bench/bench_scaling.py --quick --json > assets/{BENCH_MODEL}/bench.json"


def benchmark_views(path=None) -> tuple[str, object | None, object | None]:
    """(Markdown, accuracy-vs-N figure, accuracy-vs-tokens figure) from the shipped benchmark file;
    without a readable one, how to produce it (and no figures)."""
    bench, figure, problem = benchmark_file(path or BENCH_PATH, BENCH_COMMAND, BENCH_MODEL,
                                            lambda b: budget_figure(b["rows"]))
    if bench is None:
        return problem, None, None
    sampling = bench.get("sampling", {})
    text = (f"Accuracy on {bench.get('tasks')} held-out {BENCH_MODEL} problems against the budget N (samples, "
            f"particles, beams, or A*'s candidate steps per expansion), temperature {sampling.get('temperature', '?')}, "
            f"step reward {sampling.get('reward', '?')}. The dotted line is the oracle (some sample is right): the "
            "ceiling a perfect chooser would reach. The second chart puts the same runs against the tokens they "
            f"spent. From `{BENCH_COMMAND.split(' >')[0]}`; the README discusses what it shows.")
    return text, figure, budget_figure(bench["rows"], x="tokens")


# Views ----------------------------------------------------------------------------------------------
def views(trace: Trace | None, other: Trace | None = None, step: int | None = None, *, live: bool = False) -> dict:
    """Every display output from the state; `live=True` while the main run streams (latest step)."""
    trace = trace or Trace()
    steps = trace.of_kind("particles")
    finish = trace.finish.extra if trace.finish else None
    index = step if step is not None and 0 <= step < len(steps) else len(steps) - 1
    shown = steps[index] if steps else None
    path = dict(chosen_path(steps, chosen_slot(steps, finish)))  # step -> slot on the chosen path
    return {"stats": stats_html(trace),
            "weights": weights_figure(steps),
            "lineage": (search_tree_figure(steps, finish) if trace.start is not None and trace.start.strategy == "a-star"
                        else lineage_figure(steps, finish)),
            "particles": particles_html(shown, path.get(shown.step) if shown else None),
            "step": gr.update(minimum=0, maximum=max(1, len(steps) - 1), value=max(index, 0),
                              interactive=len(steps) > 1 and not live,
                              label=f"Step ({len(steps)} played)" if steps else "Step"),
            "choice": choice_panel(trace),
            "summary": summary_html(trace, other)}


def live_particles(trace: Trace, progress: StepProgress | None, title: str = "") -> dict:
    """The particles panel while a run streams: the step under way as its tokens are sampled, else the
    run's latest step (cheap: no chart)."""
    if progress is not None:
        return {"particles": sampling_html(progress, title)}
    steps = trace.of_kind("particles")
    return {"particles": particles_html(steps[-1] if steps else None)}


def reference_of(trace: Trace) -> str | None:
    """The run's reference answer: its `reference` parameter, else the answer of the shipped task it asked."""
    given = str(trace.start.params.get("reference") or "").strip()
    task = None if given else task_of_prompt(trace.start.prompt)
    return given or (task["answer"] if task else None)


def verdict(trace: Trace) -> bool | None:
    """True / False when the run's reference (the task's answer) is known and the run chose; else None."""
    if trace.start is None or trace.finish is None or "method" not in trace.finish.extra:
        return None
    reference = parse_number(reference_of(trace) or "")
    answer = trace.finish.extra.get("answer")
    if reference is None:
        return None
    value = parse_number(str(answer)) if answer is not None else None
    return value is not None and abs(value - reference) <= 1e-6


def verdict_html(trace: Trace) -> str:
    ok = verdict(trace)
    if ok is None:
        return ""
    reference = esc(reference_of(trace))
    colour, mark, word = ("#2e7d32", "✓", "right") if ok else ("#c62828", "✗", "wrong")
    return (f'<div class="dl-verdict" data-correct="{str(ok).lower()}" style="margin-top:.4em;font-size:15px">'
            f'<b style="color:{colour}">{mark} {word}</b> · the task\'s answer is {reference}</div>')


def choice_panel(trace: Trace) -> str:
    if trace.start is None:
        return ('<div class="dl-placeholder">Press <b>Generate</b>: N particles decode side by side; after every step '
                "the reward weighs them and the method keeps, copies or drops them. The final choice appears here.</div>")
    if trace.finish is None:
        return '<div class="dl-placeholder">running… the choice is made when every particle has finished.</div>'
    if trace.finish.stop_reason == "cancelled" and "method" not in trace.finish.extra:
        return '<div class="dl-placeholder">stopped before a choice was made.</div>'
    return choice_html(trace.finish.extra) + verdict_html(trace)


def _column(trace: Trace, title: str) -> str:
    method = esc(trace.start.strategy) if trace.start else "–"
    return f'<div class="sc-col"><h4 style="margin:.1em 0 .4em">{esc(title)}: {method}</h4>{choice_panel(trace)}</div>'


def _cell(value) -> str:
    return "–" if value is None else esc(f"{value:.4g}" if isinstance(value, float) else value)


def summary_html(trace: Trace, other: Trace | None) -> str:
    """The run's statistics table; with a comparison run, both choices side by side over one table."""
    if trace.start is None:
        return ""
    if other is None or other.start is None:
        return f'<div class="dl-summary">{scaling_summary_html(stats(trace))}</div>'
    a, b = live_stats(trace), live_stats(other)
    rows = "".join(f"<tr><th>{esc(name)}</th><td>{_cell(a.get(key))}</td><td>{_cell(b.get(key))}</td></tr>"
                   for key, name in SUMMARY if key in a or key in b)
    head = (f"<tr><th></th><th>{esc(trace.start.strategy)}</th><th>{esc(other.start.strategy)}</th>"
            "</tr>")
    return ('<div class="sc-compare"><div style="display:grid;grid-template-columns:1fr 1fr;gap:1.2em">'
            f"{_column(trace, 'Main')}{_column(other, 'Compared')}</div>"
            f'<div class="dl-summary" style="margin-top:.6em"><table>{head}{rows}</table></div></div>')


def live_stats(trace: Trace) -> dict:
    """`stats()` plus tokens spent / s while running (stats() times a finished run only)."""
    s = stats(trace)
    steps = trace.of_kind("particles")
    if s.get("tokens_spent_per_s") is None and steps and steps[-1].elapsed_s > 0:
        s["tokens_spent_per_s"] = round(steps[-1].tokens_spent / steps[-1].elapsed_s, 3)
    return s


def stats_html(trace: Trace) -> str:
    """One row of cards: particles, steps, resampling events, ESS, tokens spent, forward passes, tokens/s."""
    def cards(trace: Trace) -> list:
        s = live_stats(trace)
        return [("particles N", s.get("num_particles", trace.start.params.get("n"))), ("steps", s.get("particle_steps", 0)),
                ("resampling events", s.get("resampling_events", 0)),
                ("ESS", f"{s['ess']:.2f}" if s.get("ess") is not None else "–"),
                ("tokens spent", s.get("tokens_spent", 0)), ("forward passes", s["forward_passes"]),
                ("tokens spent / s", fmt(s.get("tokens_spent_per_s"), 1))]

    def setting(start) -> str:
        p = start.params
        return f"{start.strategy}, reward {p.get('reward')}, N = {p.get('n')}, temperature {p.get('temperature', 0):g}"

    return run_stats_html(trace, cards, setting)


def stats_line(trace: Trace) -> str:
    """The run in one sentence (status bar, tests)."""
    s = live_stats(trace)
    answer = trace.finish.extra.get("answer") if trace.finish else None
    ok = verdict(trace)
    mark = "" if ok is None else " ✓" if ok else " ✗"
    return (f"{md_esc(trace.start.strategy)} chose answer **{md_esc(answer) if answer is not None else 'none'}**{mark}; "
            f"N = {s.get('num_particles', '–')}, {s.get('particle_steps', 0)} steps, "
            f"{s.get('resampling_events', 0)} resampling events, {s.get('tokens_spent', 0)} tokens spent in "
            f"{s['elapsed_s']:.1f} s ({fmt(s.get('tokens_spent_per_s'), 1)} tokens/s)")


__all__ = ["CONTROLS", "DEFAULT_METHOD", "METHOD_DEFAULTS", "VARYING", "defaults_on_switch", "settings_of", "DEFAULT_MODEL",
           "DEFAULT_PROMPT", "DEFAULT_SETTINGS", "FIELDS",
           "METHODS", "OUTPUTS", "REWARDS", "collect_params", "fields_from_params", "views"]
