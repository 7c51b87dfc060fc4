"""Speculative tab views as plain functions: the state (trace, baseline stats, chosen round and
position) rendered into {output name: value} (see `OUTPUTS`).

    trace      the speculative run (a `Trace`, growing while it streams)
    baseline   `stats()` of plain decoding of the same target on the same prompt, or None
    plain      that plain decoding run itself (a `Trace`, for its export), or None
    round      which round's draft tree and p-vs-q view to show (None = the latest)
    parent     which expanded position of that round the p-vs-q view shows (-1 = the context)

Glossary: see `visualizers/speculative.py` (draft / accepted / rejected / unvisited / extra token).
"""

from __future__ import annotations

import gradio as gr

from decoding.events import Trace, stats
from decoding.registry import param_specs
from decoding.speculative.strategy import DRAFTERS
from ui.plugin_fields import chosen_values
from ui.widgets import fmt, run_stats_html
from ui.wiring import check_names
from visualizers._common import visible
from visualizers.speculative import (acceptance_figure, draft_tree_figure, overlap_figure, spec_rounds,
                                     spec_tokens_html, speculative_summary_html)

STRATEGY = "speculative"
SPEC_DEFAULTS = {p["name"]: p["default"] for p in param_specs(STRATEGY)}
SPEC_FIELDS = tuple(SPEC_DEFAULTS)  # the tab's parameter fields, in field order
INT_FIELDS = {p["name"] for p in param_specs(STRATEGY) if p["type"] == "int"}
DEFAULT_MODEL = "smollm2-135m"
DEFAULT_DRAFT_MODEL = "smollm2-135m"  # the same family as the default target (a smaller one drafts faster)
DEFAULT_PROMPT = ("Summarise, reusing its words: The lighthouse on the northern cliff was built in 1871 to warn "
                  "ships away from the rocks. For a hundred years a keeper lived beside it and lit the lamp every "
                  "evening, until an automatic lamp replaced him in 1971.")
# what the widgets show at first: the declared defaults, a draft model to pick for the drafters that load one
# and declare none (s2d declares its sorted model)
DEFAULT_SETTINGS = SPEC_DEFAULTS | {"drafter": "prompt-lookup"} | {
    f"{n}.draft_model": DEFAULT_DRAFT_MODEL for n in DRAFTERS.with_capability("loads_draft_model")
    if not SPEC_DEFAULTS.get(f"{n}.draft_model")}
DEFAULT_MAX_NEW_TOKENS = 48
OPENING_NOTE = (  # the tab opens on its lesson (issue 33)
    "**This tab's lesson: a draft that costs nothing.** The prompt asks for a summary that reuses the passage's "
    "words, so the answer keeps copying phrases of the prompt. Prompt lookup drafts the words that followed the "
    "last few generated tokens where they occur in the prompt; the target checks the whole draft in one forward "
    "pass and keeps the longest prefix it would have written itself, so the text is exactly greedy decoding's. "
    "**Generate**, then read the draft tree of each round, the acceptance chart and, under the summary, the "
    "speed-up against plain decoding of the same prompt.")
UI_MAX_NEW_TOKENS = 256

OUTPUTS = ("status", "stats", "text", "tree", "acceptance", "overlap", "summary", "round", "position", "trace",
           "baseline", "plain")
CONTROLS = ("model", "prompt", "max_new_tokens", "seed", "chat") + tuple(f"spec:{name}" for name in SPEC_FIELDS)


def collect_spec_params(fields: dict) -> dict:
    """The strategy's parameters from the widgets' values by name ({field: value}, every one of
    `SPEC_FIELDS`); sliders give 4.0 for 4. A missing or unknown name is a ValueError naming it."""
    check_names(fields, SPEC_FIELDS, STRATEGY)
    params = {}
    for name in SPEC_FIELDS:
        value = fields[name]
        if name in INT_FIELDS and isinstance(value, float) and value.is_integer():
            value = int(value)
        if name == "temperature" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if name.endswith("draft_model"):
            value = (value or "").strip()
        params[name] = SPEC_DEFAULTS[name] if value is None else value
    return chosen_values(params, params["drafter"])


def baseline_plan(params: dict) -> tuple[str, dict]:
    """Plain decoding that the speculative run must match: greedy, or sampling at the same temperature."""
    temperature = params.get("temperature", 0.0)
    return ("greedy", {}) if not temperature else ("sample", {"temperature": float(temperature)})


def views(trace: Trace | None, baseline: dict | None = None, round_index: int | None = None, parent: int = -1,
          *, live: bool = False) -> dict:
    """Every display output from the state; `live=True` while streaming (always the latest round)."""
    trace = trace or Trace()
    rounds = spec_rounds(trace)
    if round_index is not None and not any(r.round == round_index for r in rounds):
        round_index = None
    shown = round_index if round_index is not None else (rounds[-1].round if rounds else None)
    parents = _positions(trace, shown)
    parent = parent if any(p == parent for _, p in parents) else -1
    out = {"text": spec_tokens_html(trace) if trace.start else _placeholder(),
           "tree": draft_tree_figure(trace, shown),
           "acceptance": acceptance_figure(trace),
           "overlap": overlap_figure(trace, shown, parent) if rounds else overlap_figure(trace),
           "stats": stats_html(trace),
           "summary": speculative_summary_html(trace, baseline) if trace.start else "",
           "round": gr.update(minimum=0, maximum=max(1, len(rounds) - 1), value=shown or 0,
                              interactive=len(rounds) > 1 and not live,
                              label=f"Round ({len(rounds)} played)" if rounds else "Round"),
           "position": gr.update(choices=parents, value=parent if parents else None,
                                 interactive=bool(parents) and not live)}
    return out


def _positions(trace: Trace, round_index: int | None) -> list[tuple[str, int]]:
    """(label, parent) for each position of the round where the target's p was compared with the draft."""
    r = next((r for r in spec_rounds(trace) if r.round == round_index), None)
    if r is None:
        return []
    nodes = {n["id"]: n for n in r.nodes}
    out = []
    for d in r.dists:
        p = d["parent"]
        name = "the context (root)" if p == -1 else f"after node {p} '{visible(nodes[p]['token_text'])}'" \
            if p in nodes else f"after node {p}"
        out.append((f"{name} · overlap {d['overlap']:.2f}", p))
    return out


def _placeholder() -> str:
    return ('<div class="dl-placeholder">Press <b>Generate</b>: the text appears here round by round, each '
            "round's drafted &amp; accepted tokens in one colour, the target's own token bold.</div>")


def stats_html(trace: Trace) -> str:
    """One row of cards: tokens, tokens/s, target passes per token, mean accepted length, acceptance rate."""
    def cards(trace: Trace) -> list:
        s = stats(trace)
        return [("tokens", s["num_tokens"]), ("tokens / s", fmt(s["tokens_per_s"], 1)),
                ("target passes / token", fmt(s.get("target_forward_passes_per_token"), 2)),
                ("mean accepted length", fmt(s.get("mean_accepted_length"), 2)),
                ("acceptance rate", fmt(s.get("acceptance_rate"), 2)), ("rounds", s.get("rounds", 0))]

    def setting(start) -> str:
        p = start.params
        drafter = p.get("drafter")
        length = p.get("draft_length") or (  # a trace of before the length was resolved when the run starts records 0
            f"{DRAFTERS.capability(drafter, 'default_draft_length')} (the drafter's default)" if drafter in DRAFTERS else "–")
        text = f"{drafter} drafter, {p.get('tree')} tree, draft length {length}"
        return text + (f", temperature {p['temperature']:g}" if p.get("temperature") else "")

    return run_stats_html(trace, cards, setting)


def stats_line(trace: Trace) -> str:
    """The same numbers as one sentence (status bar, tests)."""
    s = stats(trace)
    return (f"{s['num_tokens']} tokens in {s['elapsed_s']:.1f} s ({fmt(s['tokens_per_s'], 1)} tokens/s), "
            f"{fmt(s.get('target_forward_passes_per_token'), 2)} target passes per token, "
            f"mean accepted length {fmt(s.get('mean_accepted_length'), 2)}, "
            f"acceptance rate {fmt(s.get('acceptance_rate'), 2)}")
