"""The Speculative tab: a drafter proposes a token tree, the target verifies it in one forward pass.
Watch each round's tree (accepted green, rejected red, the target's own token gold), the accepted
length per round, and p versus q where the draft was made; compare the speed with plain decoding.
An accordion shows the verification rules at one position as couplings (`visualizers/coupling.py`), MEC-B
beside them and its Markov coding game (`visualizers/mecb.py`).

    build_speculative()   lays the tab out inside the current Blocks and wires it (used by app.py)
    demo()                the tab as a Blocks of its own:  python -m ui.speculative

Handlers live in `ui/speculative_callbacks.py` (plain functions, {output name: value}); rendering in
`ui/speculative_views.py`. This module only creates widgets and binds names to them.
"""

from __future__ import annotations

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.models import SUGGESTED_HUB_IDS
from decoding.registry import param_specs
from decoding.speculative.strategy import DRAFTERS, TREES
from ui import speculative_callbacks as cb
from ui.classroom import lesson_row
from ui.launch import serve, standalone
from ui.widgets import QUIET, explain_clamping, model_choices, seed_box, spec_widget
from ui.wiring import lab_columns, named_inputs, on, on_any, run_buttons, session_state, wire_lab
from ui.plugin_fields import plugin_widgets, visibility
from ui.exports import download, wire_download
from visualizers.memory import memory_figure
from ui.speculative_views import (CONTROLS, DEFAULT_MAX_NEW_TOKENS, DEFAULT_MODEL, OPENING_NOTE,
                                  DEFAULT_PROMPT, DEFAULT_SETTINGS, OUTPUTS, SPEC_FIELDS, STRATEGY, UI_MAX_NEW_TOKENS,
                                  views)

INTRO = ("A cheap **drafter** guesses several tokens ahead; the **target** model checks the whole guess in **one** "
         "forward pass and keeps the longest prefix it agrees with, plus one token of its own. With temperature 0 "
         "the text is exactly the target's greedy text, only faster when the guesses are good.")
COUPLING_HELP = ("Each lossless rule ties the draft to the output differently. With the shown round's p and q at the "
                 "chosen position (or a built-in example): speculative sampling, RSD (the default `rule`), SpecTr "
                 "(`rule=spectr`) and a minimum-entropy coupling, each as a joint of draft and output; the diagonal "
                 "is how often the output is a draft.")
MECB_HELP = ("**MEC-B** (minimum-entropy coupling with a bottleneck, Ebrahimi, Chen and Khisti 2024): the same "
             "position's draft is first coded into a code word T whose entropy may not exceed the rate bound R, "
             "then T is coupled with the output by minimum entropy. The output is still exactly p; R caps how much "
             "the output can depend on the draft. At R ≥ H(q) it is the minimum-entropy coupling above.")
MCG_HELP = ("**Markov coding game** (the paper's example, after Sokota et al. 2022): a message (16, equally likely) "
            "is coded at rate bound R and sent through the *actions* of an agent walking a 4×4 grid to the goal. "
            "Each action is drawn from a minimum-entropy coupling of the receiver's belief and the agent's own "
            "policy, so the actions keep exactly the policy's law; a hotter policy (temperature τ) carries more "
            "bits per move but takes longer. The receiver decodes from the actions alone.")
NO_PLAIN = "No plain decoding run to export: tick “Also run plain decoding” and Generate."
PREFERRED_DRAFTERS = ("prompt-lookup", "early-exit", "token-recycling", "model")  # menu order; others follow


def drafter_order() -> list[str]:
    """Every registered drafter, the shipped ones first."""
    return [n for n in PREFERRED_DRAFTERS if n in DRAFTERS] + [n for n in DRAFTERS.names() if n not in PREFERRED_DRAFTERS]


def _controls(c: dict) -> None:
    d = DEFAULT_SETTINGS
    c["preset"] = gr.Dropdown(cb.preset_choices(), value=None, label="Preset", elem_id="spec-preset",
                              info="A classroom demo: sets every control and explains what to look for.")
    lesson_row(c, "speculative", "spec")
    c["note"] = gr.Markdown(OPENING_NOTE, elem_classes="dl-help", elem_id="spec-note")
    c["model"] = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Target model", allow_custom_value=True,
                             info=f"The model whose output counts; with internet, any hub id "
                                  f"(e.g. {SUGGESTED_HUB_IDS[-1]}).", elem_id="spec-model")
    c["prompt"] = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=4, max_lines=12, elem_id="spec-prompt")
    run_buttons(c, "spec")
    c["spec:drafter"] = gr.Radio(drafter_order(), value=d["drafter"], label="Drafter", elem_id="spec-drafter",
                                 info="Who proposes the draft tokens (the chosen one's own settings follow).")
    c["drafter_help"] = gr.Markdown(cb.drafter_help(d["drafter"]), elem_classes="dl-help", elem_id="spec-drafter-help")
    plugin_widgets(c, "spec", "spec", STRATEGY, d["drafter"], values=d)
    c["spec:tree"] = gr.Radio(list(TREES), value=d["tree"], label="Draft tree", elem_id="spec-tree",
                              info="chain: one guess per position; static: a full tree `width` wide; "
                                   "dynamic: best-first by draft probability.")
    with gr.Row():
        c["spec:draft_length"] = gr.Slider(0, 16, value=d["draft_length"], step=1, label="draft length",
                                           info="0 = the drafter's own (prompt-lookup 10, model 8, others 4)",
                                           elem_id="spec-draft-length")
        c["spec:width"] = gr.Slider(1, 8, value=d["width"], step=1, label="width", elem_id="spec-width")
    with gr.Row():
        c["spec:node_budget"] = gr.Slider(1, 64, value=d["node_budget"], step=1, label="node budget",
                                          elem_id="spec-node-budget")
        c["spec:temperature"] = gr.Slider(0, 2, value=d["temperature"], step=0.05, label="temperature",
                                          info="0 = greedy verification", elem_id="spec-temperature")
    c["spec:adaptive"] = gr.Checkbox(d["adaptive"], label="adaptive draft length",
                                     info="Chains: +2 after a fully accepted round, −1 otherwise.",
                                     elem_id="spec-adaptive")
    specs = {p["name"]: p for p in param_specs(STRATEGY)}
    for field in SPEC_FIELDS:  # a family parameter no row above lays out (e.g. a new one): from its spec
        if f"spec:{field}" not in c:
            c[f"spec:{field}"] = spec_widget(specs[field], elem_id=f"spec-{field.replace('_', '-')}")
    with gr.Row():
        c["max_new_tokens"] = gr.Slider(1, UI_MAX_NEW_TOKENS, value=DEFAULT_MAX_NEW_TOKENS, step=1,
                                        label="Max new tokens", elem_id="spec-max-new-tokens", scale=2)
        c["seed"] = seed_box("spec-seed")
    with gr.Row():
        c["chat"] = gr.Checkbox(True, label="Chat template", info="Send the prompt as a user message.")
        c["compare"] = gr.Checkbox(True, label="Also run plain decoding", elem_id="spec-compare",
                                   info="Then greedy (or sampling at the same temperature) on the same target, "
                                        "for the speed-up.")
    with gr.Accordion("Export & replay", open=False, elem_id="spec-export"):
        with gr.Row():
            c["dl_json"] = gr.Button("Trace (JSON)", size="sm", elem_id="spec-download-json")
            c["dl_plain"] = gr.Button("Plain decoding trace (JSON)", size="sm", elem_id="spec-download-plain")
        c["upload"] = gr.File(label="Replay a saved speculative trace (.json)", file_types=[".json"],
                              type="filepath", height=110, elem_id="spec-upload")


def _views(c: dict) -> None:
    initial = {k: v.get("value") if isinstance(v, dict) else v for k, v in views(None).items()}
    c["stats"] = gr.HTML(initial["stats"], elem_id="spec-stats")
    gr.Markdown("### Generated text")
    c["text"] = gr.HTML(initial["text"], elem_id="spec-text", elem_classes="dl-panel")
    c["tree"] = gr.Plot(initial["tree"], label="Draft tree of the round", elem_id="spec-tree-plot")
    c["round"] = gr.Slider(0, 1, value=0, step=1, label="Round", interactive=False, elem_id="spec-round",
                           info="Step back through earlier rounds' trees.")
    c["acceptance"] = gr.Plot(initial["acceptance"], label="Accepted per round", elem_id="spec-acceptance")
    c["overlap"] = gr.Plot(initial["overlap"], label="Target p vs draft q", elem_id="spec-overlap")
    c["memory"] = gr.Plot(memory_figure(None), label="Memory (SpecMemo)", elem_id="spec-memory")
    c["position"] = gr.Dropdown([], label="Position in this round", interactive=False, elem_id="spec-position",
                                info="Where the drafter proposed children: compare the target's p with the draft's q.")
    with gr.Accordion("Verification rules, one position", open=False, elem_id="spec-coupling"):
        gr.Markdown(COUPLING_HELP, elem_classes="dl-help")
        c["coupling_k"] = gr.Slider(1, 4, value=cb.COUPLING_K, step=1, label="drafts k", elem_id="spec-coupling-k",
                                    info="How many drafts the multi-draft rules (RSD, SpecTr) get at this position.")
        c["coupling"] = gr.Plot(cb.coupling_view(cb.COUPLING_K, 0, -1, None)["coupling"], show_label=False,
                                elem_id="spec-coupling-plot")
        gr.Markdown(MECB_HELP, elem_classes="dl-help")
        c["mecb_rate"] = gr.Slider(0, 3, value=cb.MECB_RATE, step=0.05, label="rate bound R (bits)",
                                   elem_id="spec-mecb-rate", info="The most entropy the code word T may carry.")
        c["mecb"] = gr.Plot(cb.mecb_view(cb.MECB_RATE, 0, -1, None)["mecb"], show_label=False,
                            elem_id="spec-mecb-plot")
        gr.Markdown(MCG_HELP, elem_classes="dl-help")
        d = cb.MCG_DEFAULTS
        with gr.Row():
            c["mcg_message"] = gr.Dropdown(cb.MCG_MESSAGES, value=d["message"], label="message",
                                           elem_id="spec-mcg-message")
            c["mcg_seed"] = seed_box("spec-mcg-seed", d["seed"])
        with gr.Row():
            c["mcg_rate"] = gr.Slider(0, 4, value=d["rate"], step=0.25, label="rate bound R (bits)",
                                      elem_id="spec-mcg-rate", info="4 bits: every message its own code word.")
            c["mcg_temperature"] = gr.Slider(0.05, 1, value=d["temperature"], step=0.05, label="policy temperature τ",
                                             elem_id="spec-mcg-temperature", info="Higher: more random moves.")
        first = cb.mcg_view(d["message"], d["rate"], d["temperature"], d["seed"])
        c["mcg_text"] = gr.Markdown(first["mcg_text"], elem_id="spec-mcg-text")
        c["mcg"] = gr.Plot(first["mcg"], show_label=False, elem_id="spec-mcg-plot")
    gr.Markdown("### Speculative vs plain decoding")
    c["summary"] = gr.HTML(initial["summary"], elem_id="spec-summary")
    gr.Markdown(INTRO, elem_classes="dl-help")


def build_speculative() -> dict:
    """Create the tab's widgets in the current Blocks, wire them, and return them by name."""
    c: dict = {}
    lab_columns(c, _controls, _views, "dl-speculative")
    c["trace"], c["baseline"], c["plain"], c["budget_points"] = (session_state(), session_state(), session_state(),
                                                                 session_state([]))
    _wire(c)
    return c


def _wire(c: dict) -> None:
    outputs = {name: c[name] for name in OUTPUTS}
    state = {k: c[k] for k in ("trace", "baseline")}
    explain_clamping(c, {f"spec:{p['name']}": p for p in param_specs(STRATEGY)} |
                     dict.fromkeys(("coupling_k", "mecb_rate", "mcg_rate", "mcg_temperature")))

    shown = {k: c[k] for k in visibility(STRATEGY, "spec", "")} | {"drafter_help": c["drafter_help"]}
    on(c["spec:drafter"].change, cb.drafter_changed, shown, {"drafter": c["spec:drafter"]}, **QUIET)
    run_inputs = named_inputs({k: c[k] for k in ("model", "prompt", "max_new_tokens", "seed", "chat", "compare")},
                              {name: c[f"spec:{name}"] for name in SPEC_FIELDS})
    events = wire_lab(c, cb, outputs, state, run_inputs, CONTROLS, lab="speculative")
    coupling = (cb.coupling_view, {"coupling": c["coupling"]},
                {"k": c["coupling_k"], "round_index": c["round"], "parent": c["position"], "trace": c["trace"]})
    picked = [on(c["round"].input, cb.choose_round, outputs, {"round_index": c["round"]} | state,  # dragged, typed or
                 trigger_mode="always_last", **QUIET),  # Present mode's Left / Right
              on(c["position"].input, cb.choose_position, outputs,
                 {"parent": c["position"], "round_index": c["round"]} | state, **QUIET)]
    memory = (cb.memory_view, {"memory": c["memory"], "budget_points": c["budget_points"]},
              {"trace": c["trace"], "points": c["budget_points"]})
    mecb = (cb.mecb_view, {"mecb": c["mecb"]},
            {"rate": c["mecb_rate"], "round_index": c["round"], "parent": c["position"], "trace": c["trace"]})
    for event in picked + list(events.values()):
        on(event.then, *coupling, **QUIET)
        on(event.then, *mecb, **QUIET)
    for event in events.values():  # a run ended (or was stopped, or replayed): its bytes, and one more point
        on(event.then, *memory, **QUIET)
    on(c["generate"].click, cb.memory_pending, {"memory": c["memory"]}, {}, **QUIET)  # not the last run's, meanwhile
    on(c["coupling_k"].release, *coupling, **QUIET)
    on(c["mecb_rate"].input, *mecb, trigger_mode="always_last", **QUIET)  # dragged or typed
    game = (cb.mcg_view, {"mcg": c["mcg"], "mcg_text": c["mcg_text"]},
            {"message": c["mcg_message"], "rate": c["mcg_rate"], "temperature": c["mcg_temperature"],
             "seed": c["mcg_seed"]})
    on_any([c["mcg_message"].input, c["mcg_rate"].input, c["mcg_temperature"].input, c["mcg_seed"].submit], *game,
           trigger_mode="always_last", **QUIET)
    wire_download(c["dl_json"], download, [c["trace"]])
    wire_download(c["dl_plain"], lambda plain: download(plain, missing=NO_PLAIN), [c["plain"]])


def demo() -> gr.Blocks:
    """This tab alone, queued like the full app."""
    return standalone(build_speculative, "Decoding Lab · Speculative")


if __name__ == "__main__":
    serve(demo())
