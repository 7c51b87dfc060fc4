"""Playground callbacks as plain functions: values in, {output name: value} out (see `OUTPUTS`).

`ui/playground.py` lays the widgets out and binds these names to components; tests call the
functions directly. Per-user state is passed in and returned, never kept here:

    trace      the main run (a `Trace`, growing while it streams)
    branch     {"trace": Trace, "info": {...}} for the branch shown under it, or None
    selection  {"run": "main" | "branch", "step": int | None}: which token the views inspect
               (None = the latest). Updated in place too, so a run that is streaming picks up a
               click made meanwhile.

Glossary
    focused run  the run the charts and statistics show: the one whose token was clicked last.
    branch       a run that continues from the prompt + the focused run's tokens before the
                 selected step + one of that step's alternatives (`generate(prefix_ids=...)`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gradio as gr

from decoding.events import TokenStep, Trace, stats
from decoding.run import MAX_NEW_TOKENS_CAP
from decoding.registry import STRATEGIES, get_strategy, param_specs
from ui.widgets import fmt, run_stats_html, slider_range_text
from visualizers import beams_figure, distribution_figure, entropy_figure, method_figure, tokens_html
from visualizers._common import esc, visible

UI_MAX_NEW_TOKENS = min(512, MAX_NEW_TOKENS_CAP)
DEFAULT_STRATEGY = "greedy"
COLOR_CHOICES = [("colour by probability", "prob"), ("colour by entropy", "entropy")]
EXAMPLE_PROMPTS = [
    "Explain why the sky is blue in two sentences.",
    "Write a haiku about autumn leaves.",
    "The capital of France is",
    "List three uses of a paperclip.",
    "Once upon a time, in a small village by the sea,",
]
# Practical slider ends for parameters whose allowed range is unbounded or huge (top_k: 1,048,576); the engine, the
# API and presets still take the whole range (a value past the slider is clamped in the widget, with a note).
UI_MAX = {"temperature": 2.0, "top_k": 100, "repetition_penalty": 2.0, "tau": 10.0}
UI_STEP = {"temperature": 0.05, "tau": 0.1, "length_penalty": 0.1, "penalty_alpha": 0.05, "top_p": 0.01}
COMPACT_WIDTH = 200  # px: a Compare row's widget at least this wide (a row of them wraps)
PRIMARY_PARAMS = 4  # the first parameters of a strategy are shown; the rest sit in an accordion
STOP_WORDS = {"max_new_tokens": "length", "eos": "end token", "cancelled": "Stop", "running": "running…"}

OUTPUTS = ("status", "stats", "text", "branch_box", "branch_text", "branch_summary", "entropy", "distribution",
           "beams", "method", "inspect", "step", "alternatives", "branch_button", "trace", "branch", "selection")
CONTROLS = ("model", "strategy", "prompt", "max_new_tokens", "seed", "chat")


# Parameter widgets ----------------------------------------------------------------------------
PLAYGROUND_FAMILIES = ("token", "beam")  # other families have labs (tabs) of their own


def playground_strategies() -> list[str]:
    return [name for name, info in STRATEGIES.items() if info.family in PLAYGROUND_FAMILIES]


@dataclass(frozen=True)
class ParamWidget:
    strategy: str
    name: str
    kind: str  # "int" / "float" (slider when the range is numeric, else a number box), "bool", "choice", "text"
    default: object
    low: float | None  # slider ends, inside the allowed range (None: no numeric range)
    high: float | None
    step: float
    help: str
    range_text: str
    choices: tuple = ()
    spec: dict | None = field(default=None, compare=False)  # its `describe` row (numbers): the allowed range

    @property
    def key(self) -> str:
        return f"param:{self.strategy}.{self.name}"


def param_widgets(strategy: str | None = None) -> list[ParamWidget]:
    """One widget per strategy parameter, from `param_specs` (all Playground strategies when None)."""
    widgets = []
    for name in [strategy] if strategy else playground_strategies():
        for spec in param_specs(name):
            kind, range_text = spec["type"], spec["range"]
            if kind == "bool":
                widgets.append(ParamWidget(name, spec["name"], "bool", spec["default"], None, None, 1, spec["help"],
                                           range_text))
                continue
            if kind not in ("int", "float"):
                choices = tuple(spec["choices"] or ())
                widgets.append(ParamWidget(name, spec["name"], "choice" if choices else "text", spec["default"],
                                           None, None, 1, spec["help"], range_text, choices))
                continue
            step = 1 if kind == "int" else UI_STEP.get(spec["name"], 0.01)
            low = high = None
            if spec["interval"]:
                low, high = float(spec["low"]), float(spec["high"])
                if not spec["low_inclusive"]:
                    low += step  # exclusive end: the slider stops one step inside
                if high == float("inf"):
                    high = UI_MAX.get(spec["name"], max(10.0, float(spec["default"]) * 4))
                elif not spec["high_inclusive"]:
                    high -= step
                ui_high = spec.get("ui_high") or UI_MAX.get(spec["name"])
                if ui_high is not None and ui_high < high:  # top_k's 1,048,576: a slider to 100 (its end label fits)
                    high = float(ui_high)
            widgets.append(ParamWidget(name, spec["name"], kind, spec["default"], low, high, step, spec["help"],
                                       range_text, spec=spec))
    return widgets


def param_widget(w: ParamWidget, *, value=None, elem_id: str | None = None,
                 compact: bool = False) -> gr.components.Component:
    """A slider for a numeric range, else a number box, checkbox, menu or text box; help as `info`. `value`
    replaces the declared default shown at first; `elem_id` the Playground's own id (`dl-param-...`). `compact`
    (a Compare row): no help under the widget (the same knob above, in the Playground's controls, has it) and a
    width that lets a row of them wrap instead of squashing each slider."""
    value = w.default if value is None else value
    common = dict(label=w.name.replace("_", " "), elem_id=elem_id or f"dl-{w.key.replace(':', '-').replace('.', '-')}")
    if compact:
        common["min_width"] = COMPACT_WIDTH
    info = f"{w.help} Allowed: {w.range_text}."
    if w.kind in ("int", "float") and w.low is not None:  # the info claims only what the slider reaches
        info = f"{w.help} {slider_range_text(w.spec, w.low, w.high)}"
    info = None if compact else info
    if w.kind in ("int", "float") and w.low is not None:
        return gr.Slider(w.low, w.high, value=value, step=w.step, info=info, **common)
    if w.kind in ("int", "float"):
        return gr.Number(value, precision=0 if w.kind == "int" else None, info=info, **common)
    if w.kind == "bool":
        return gr.Checkbox(bool(value), info=None if compact else w.help, **common)
    if w.kind == "choice":
        return gr.Dropdown(list(w.choices), value=value, info=None if compact else w.help, **common)
    return gr.Textbox(value, info=info, **common)


def shown_group(strategy: str, names) -> dict:
    """{"group:<name>": visible only for `strategy`}: the parameter groups of a strategy menu (the Playground's,
    each Compare row's)."""
    return {f"group:{name}": gr.update(visible=name == strategy) for name in names}


def collect_params(strategy: str, values: dict) -> dict:
    """The chosen strategy's parameters from the widgets' values by key ({`ParamWidget.key`: value}, e.g.
    {"param:sample.top_p": 0.9}). Every widget of `strategy` needs a value; other Playground strategies'
    widgets are ignored; a key that is no Playground widget's, or a missing one, is a ValueError naming it."""
    known = {w.key for w in param_widgets()}
    unknown = [key for key in values if key not in known]
    if unknown:
        raise ValueError(f"unknown parameter widget{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}; "
                         f"keys look like 'param:<strategy>.<parameter>'")
    params = {}
    for widget in param_widgets(strategy):
        if widget.key not in values:
            raise ValueError(f"no value for {strategy}'s parameter `{widget.name}` ({widget.key!r})")
        value = values[widget.key]
        if value is None:
            continue
        if widget.kind == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        params[widget.name] = value
    return params


# Views ------------------------------------------------------------------------------------------
def new_selection() -> dict:
    return {"run": "main", "step": None}


def is_beam_family(strategy: str | None) -> bool:
    """Whether a strategy's events are beam steps (beam search, superposed decoding): the beam view shows it."""
    return strategy in STRATEGIES and get_strategy(strategy).family == "beam"


def focused(trace: Trace | None, branch: dict | None, selection: dict) -> tuple[Trace | None, str]:
    if selection.get("run") == "branch" and branch:
        return branch["trace"], "branch"
    return trace, "original run"


def views(trace: Trace | None, branch: dict | None, selection: dict, color_by: str = "prob", *,
          inspector: bool = True) -> dict:
    """Every display output from the state; `inspector=False` while streaming (the user may be picking)."""
    step = selection.get("step")
    out = text_views(trace, branch, selection, color_by)
    if branch:
        out["branch_summary"] = branch_summary(branch)
    shown, name = focused(trace, branch, selection)
    shown = shown or Trace()
    is_beam = shown.start is not None and is_beam_family(shown.start.strategy)
    out["entropy"] = gr.update(value=entropy_figure(shown, selected_step=step), label=f"Entropy per step · {name}")
    where = f"step {step}" if step is not None else "the latest step"
    out["distribution"] = gr.update(value=distribution_figure(shown, step=step), visible=not is_beam,
                                    label=f"Alternatives at {where} · {name}")
    out["beams"] = gr.update(value=beams_figure(shown), visible=True) if is_beam else gr.update(visible=False)
    picture = method_figure(shown)  # momentum / adadec / superposed draw a picture of their own
    out["method"] = gr.update(value=picture, visible=True) if picture is not None else gr.update(visible=False)
    out["stats"] = stats_html(shown, name)
    if inspector:
        out |= inspector_views(shown, name, step)
    return out


def text_views(trace: Trace | None, branch: dict | None, selection: dict, color_by: str = "prob") -> dict:
    """The token chips of the run and its branch: cheap, so a streaming run shows each token as it comes."""
    step, run = selection.get("step"), selection.get("run", "main")
    out = {"text": tokens_html(trace, color_by=color_by, selected_step=step if run == "main" else None)
           if trace else _placeholder("Press <b>Generate</b>: the text appears here token by token, "
                                      "coloured by how sure the model was."),
           "branch_box": gr.update(visible=branch is not None)}
    if branch:
        out["branch_text"] = branch_html(branch, color_by, step if run == "branch" else None)
    return out


def _placeholder(message: str) -> str:
    return f'<div class="dl-placeholder">{message}</div>'


def stats_html(trace: Trace, name: str) -> str:
    """One row of cards: tokens, tokens/s, first token, mean entropy, forward passes, what stopped it."""
    return run_stats_html(trace, _cards, describe_settings, name)


def first_token_card(s: dict) -> tuple[str, str]:
    """The first token's time counted from the click: the run's own time to it, plus what the request waited before
    the run began (the model's load, a first use's download, other runs ahead), which is said apart."""
    first, waited = s["time_to_first_token_s"], s.get("waited_s") or 0.0
    if first is None or waited < 0.05:
        return "first token (s)", fmt(first, 2)
    return f"first token (s; {waited:.1f} of it loading or waiting)", fmt(first + waited, 2)


def _cards(trace: Trace) -> list:
    s = stats(trace)
    return [("tokens", s["num_tokens"]), ("tokens / s", fmt(s["tokens_per_s"], 1)), first_token_card(s),
            ("mean entropy (nats)", fmt(s["mean_entropy"], 2)),
            ("forward passes", s["forward_passes"]), ("stopped by", STOP_WORDS.get(s["stop_reason"], s["stop_reason"]))]


def describe_settings(start) -> str:
    defaults = {p["name"]: p["default"] for p in param_specs(start.strategy)} if start.strategy in STRATEGIES else {}
    changed = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
               for k, v in start.params.items() if defaults.get(k, object()) != v]
    seed = f", seed {start.seed}" if start.strategy in STRATEGIES and get_strategy(start.strategy).uses_seed else ""
    return f"{start.strategy}" + (f" ({', '.join(changed)})" if changed else "") + seed


def inspector_views(trace: Trace, name: str, step: int | None) -> dict:
    event = token_at(trace, step)
    if event is None:
        note = ("Click a token in the text (or type its step number) to see what else the model could have said "
                "there, then branch from one of those alternatives.")
        if trace.start is not None and is_beam_family(trace.start.strategy):
            note = ("Beam search keeps whole hypotheses rather than one choice per token, so there is nothing to "
                    "branch from.")
        return {"inspect": note, "step": step, "alternatives": gr.update(choices=[], value=None, interactive=False),
                "branch_button": gr.update(interactive=False)}
    choices = [(_alternative_label(event, i), tid) for i, tid in enumerate(event.top_ids)]
    default = next((tid for tid in event.top_ids if tid != event.token_id), event.top_ids[0])
    note = (f"**Step {event.step}** of the {name}: chose `{_code(event.token_text)}` "
            f"(p = {event.prob:.3g}, rank {event.rank}) · entropy {event.entropy:.2f} nats · "
            f"{event.kept_size} token{'s' if event.kept_size != 1 else ''} kept. Pick an alternative and branch "
            "to see where it leads.")
    return {"inspect": note, "step": event.step,
            "alternatives": gr.update(choices=choices, value=default, interactive=True),
            "branch_button": gr.update(interactive=True)}


def _alternative_label(event: TokenStep, i: int) -> str:
    mark = "  ◀ chosen" if event.top_ids[i] == event.token_id else ""
    cut = "" if event.top_kept[i] else "  (cut by truncation)"
    return f"{i + 1}. '{visible(event.top_tokens[i])}'  p={event.top_probs[i]:.3g}{mark}{cut}"


def _code(text: str) -> str:
    return "'" + visible(text).replace("`", "ˋ") + "'"


def token_at(trace: Trace | None, step) -> TokenStep | None:
    if trace is None or step is None:
        return None
    return next((e for e in trace.events if isinstance(e, TokenStep) and e.step == step), None)


# Branch display -------------------------------------------------------------------------------
def branch_html(branch: dict, color_by: str, selected_step: int | None) -> str:
    """The branch's chips after the shared prefix (muted) and the forced alternative (outlined)."""
    info = branch["info"]
    prefix_title = f"the same as the {info['source']} before step {info['step']}"
    forced_title = (f"your pick at step {info['step']} (p={info['chosen_prob']:.3g}); "
                    f"the {info['source']} had '{visible(info['orig_text'])}'")
    lead = (f'<span class="dl-prefix" title="{esc(prefix_title)}">{esc(info["prefix_text"])}</span>'
            f'<span class="dl-forced" title="{esc(forced_title)}">{esc(info["chosen_text"])}</span>')
    chips = tokens_html(branch["trace"], color_by=color_by, selected_step=selected_step)
    marker = '<div class="dl-text">'
    if marker in chips:
        return chips.replace(marker, marker + lead, 1)
    return chips.replace("</style>", f"</style>{marker}{lead}</div>", 1)


def branch_summary(branch: dict) -> str:
    """One sentence on what changed at the branch point, and a small table: original vs branch after it."""
    info, s = branch["info"], stats(branch["trace"])
    original, done = info["orig_after"], branch["trace"].finish is not None

    def row(name, t, stop):
        return (f"| {name} | {t['num_tokens']} | {fmt(t['mean_entropy'], 2)} | {fmt(t['mean_prob'], 3)} "
                f"| {STOP_WORDS.get(stop, stop)} |")

    return (f"Branched at **step {info['step']}**: the {info['source']} chose `{_code(info['orig_text'])}` "
            f"(p = {info['orig_prob']:.3g}); the branch continues from `{_code(info['chosen_text'])}` "
            f"(p = {info['chosen_prob']:.3g}) with the same settings.\n\n"
            f"| after step {info['step']} | tokens | mean entropy | mean p | stopped by |\n|---|---|---|---|---|\n"
            f"{row(info['source'], original, original['stop_reason'])}\n"
            f"{row('branch', s, s['stop_reason'] if done else 'running')}")
