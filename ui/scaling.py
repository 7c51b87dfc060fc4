"""The Scaling tab: spend more compute at inference time. N particles (partial solutions) decode as
one batch; after every reasoning step a reward weighs them, and the method decides which to keep,
copy or drop: best-of-N, majority vote, reward-guided beam search, particle filtering, first finish.
Watch the weights and ESS per step, the lineage of the particles, and the final choice; compare two
methods at the same budget.

    build_scaling()   lays the tab out inside the current Blocks and wires it (used by app.py)
    demo()            the tab as a Blocks of its own:  python -m ui.scaling

Handlers live in `ui/scaling_callbacks.py` (plain functions, {output name: value}); rendering in
`ui/scaling_views.py`. This module only creates widgets and binds names to them.
"""

from __future__ import annotations

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.remote.source import model_field_hint
from decoding.models import SUGGESTED_HUB_IDS
from ui import scaling_callbacks as cb
from ui.classroom import lesson_row
from ui.launch import serve, standalone
from ui.widgets import QUIET, explain_clamping, model_choices, seed_box, spec_widget
from ui.wiring import lab_columns, named_inputs, on, on_any, run_buttons, session_state, wire_lab
from ui.exports import NO_OTHER_RUN, download, wire_download
from ui.infalign import build_infalign
from ui.judge import build_judge
from ui.plugin_fields import field_label
from ui.scaling_views import (CONTROLS, DEFAULT_MAX_NEW_TOKENS, DEFAULT_METHOD, DEFAULT_MODEL, DEFAULT_PROMPT,
                              DEFAULT_SETTINGS, DEFAULT_TASK, FIELDS, METHODS, OPENING_COMPARE, OPENING_NOTE, OUTPUTS,
                              REWARD_KEYS, REWARDS, SPECIFIC, VARYING, METHOD_FIELDS, UI_MAX_N, UI_MAX_NEW_TOKENS, help_of,
                              spec_of, benchmark_views, method_help, method_info, method_list, reward_help, task_choices,
                              views, visible_fields)

INTRO = ("A **particle** is one partial solution; N of them decode side by side as one batch. After every "
         "reasoning step (a line) the **reward** r ∈ [0, 1] scores each particle, and its **weight** is "
         "softmax(logit(r) / T) over the N particles. **Resampling** draws N new particles from those weights: "
         "good ones are copied, bad ones dropped (the grey branches in the lineage). The **effective sample size** "
         "ESS = 1 / Σ w² is N when the weights are even and 1 when one particle holds them all. Best-of-N and "
         "majority vote never resample: they only choose at the end.")
CSS = """<style>
#sc-weights, #sc-lineage { padding-top: 2.1rem !important; }
#sc-stats .dl-stats .dl-cards { grid-template-columns: repeat(7, minmax(0, 1fr)); }
#sc-summary table { width: auto; border: none !important; box-shadow: none !important; }
#sc-summary th, #sc-summary td { border: none !important; border-bottom: 1px solid var(--border-color-primary) !important;
                                 background: transparent !important; }
#sc-generate, #sc-stop { font-size: 1.05rem; }
#sc-status p { font-size: 0.95rem; margin: 0.2rem 0; }
#sc-note:empty, #sc-css { display: none; }
#sc-choice { min-height: 3em; }
@media (max-width: 900px) { #sc-stats .dl-stats .dl-cards { grid-template-columns: repeat(4, minmax(0, 1fr)); } }
</style>"""


def _field(c: dict, field: str, widget) -> None:
    c[f"sc:{field}"] = widget


def _shown(field: str) -> bool:
    return field not in SPECIFIC or field in visible_fields(DEFAULT_METHOD, DEFAULT_SETTINGS["reward"])


def _slider(field: str, low, high, step, label: str, **kw) -> gr.Slider:
    return gr.Slider(low, high, value=DEFAULT_SETTINGS[field], step=step, label=label, info=help_of(field),
                     visible=_shown(field), elem_id=f"sc-{field.replace('_', '-')}", **kw)


def _radio(field: str, choices, label: str) -> gr.Radio:
    return gr.Radio(list(choices), value=DEFAULT_SETTINGS[field], label=label, info=help_of(field),
                    visible=_shown(field), elem_id=f"sc-{field.replace('_', '-')}")


def _controls(c: dict) -> None:
    d = DEFAULT_SETTINGS
    c["preset"] = gr.Dropdown(cb.preset_choices(), value=None, label="Preset", elem_id="sc-preset",
                              info="A classroom demo: sets every control and explains what to look for.")
    lesson_row(c, "scaling", "sc")
    c["note"] = gr.Markdown(OPENING_NOTE, elem_classes="dl-help", elem_id="sc-note")
    c["model"] = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Model", allow_custom_value=True,
                             info=f"The policy every particle samples from; with internet, any hub id "
                                  f"(e.g. {SUGGESTED_HUB_IDS[-1]}).{model_field_hint()}", elem_id="sc-model")
    c["task"] = gr.Dropdown(task_choices(), value=str(DEFAULT_TASK["id"]), label="Task", elem_id="sc-task",
                            info="A held-out tiny-math problem (m…) or a SmolLM2 word problem: fills the prompt, its reference "
                                 "answer (✓/✗) and the policy it was written for.")
    c["prompt"] = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=3, max_lines=10, elem_id="sc-prompt")
    c["form_note"] = gr.Markdown("", visible=False, elem_id="sc-form-note")  # a prompt tiny-math cannot read
    run_buttons(c, "sc")
    c["method"] = gr.Radio(list(METHODS), value=DEFAULT_METHOD, label="Method", info=method_info(), elem_id="sc-method")
    c["method_help"] = gr.Markdown(method_help(DEFAULT_METHOD), elem_classes="dl-help", elem_id="sc-method-help")
    with gr.Accordion("Every method", open=False, elem_id="sc-methods"):
        gr.Markdown(method_list(), elem_classes="dl-help")
    _field(c, "reward", gr.Dropdown(list(REWARDS.names()), value=d["reward"], label="Reward", elem_id="sc-reward",
                                    info="What scores each step (and the finished answer)."))
    c["reward_help"] = gr.Markdown(reward_help(d["reward"]), elem_classes="dl-help", elem_id="sc-reward-help")
    # The reward's own knobs (as each reward declares them), and the task's reference for a reward that reads it
    _field(c, "reference", gr.Textbox(d["reference"], label="reference answer", info=help_of("reference"),
                                      visible=_shown("reference"), elem_id="sc-reference"))
    for field in REWARD_KEYS:
        row = spec_of(field)
        _field(c, field, spec_widget(row, label=field_label(row), value=d[field], visible=_shown(field),
                                     elem_id=f"sc-{field.replace('.', '-').replace('_', '-')}"))
    # The budget and the step
    with gr.Row():
        _field(c, "n", _slider("n", 1, UI_MAX_N, 1, "N (particles)"))
        _field(c, "temperature", _slider("temperature", 0, 2, 0.05, "token temperature"))
    _field(c, "max_step_tokens", _slider("max_step_tokens", 1, spec_of("max_step_tokens")["ui_high"], 1,
                                         "max step tokens"))
    # The method's own knobs (as each method declares them, with their UI hints), shown when it is chosen
    for fields in METHOD_FIELDS.values():
        for field in fields:
            _field(c, field, spec_widget(spec_of(field), value=d[field], visible=_shown(field),
                                         elem_id=f"sc-{field.replace('.', '-').replace('_', '-')}"))
    with gr.Accordion("More sampling settings", open=False, elem_id="sc-more"):
        _field(c, "top_p", _slider("top_p", 0.01, 1, 0.01, "top-p"))
        _field(c, "step_delimiter", _radio("step_delimiter", ("newline", "blank-line"), "step delimiter"))
        _field(c, "aggregate", _radio("aggregate", ("last", "min", "mean", "product"), "score = aggregate of steps"))
    with gr.Row():
        c["max_new_tokens"] = gr.Slider(1, UI_MAX_NEW_TOKENS, value=DEFAULT_MAX_NEW_TOKENS, step=1,
                                        label="Max new tokens (per particle)", elem_id="sc-max-new-tokens", scale=2)
        c["seed"] = seed_box("sc-seed")
    with gr.Row():
        c["chat"] = gr.Checkbox(True, label="Chat template", info="Send the prompt as a user message.",
                                elem_id="sc-chat")
        c["compare"] = gr.Dropdown([(cb.NO_COMPARISON, cb.NO_COMPARISON)] + [(m, m) for m in METHODS],
                                   value=OPENING_COMPARE, label="Compare with", elem_id="sc-compare",
                                   info="After the run, this method with the same N, reward, seed and prompt.")
    with gr.Accordion("Export & replay", open=False, elem_id="sc-export"):
        with gr.Row():
            c["dl_json"] = gr.Button("Trace (JSON)", size="sm", elem_id="sc-download-json")
            c["dl_other"] = gr.Button("Comparison trace (JSON)", size="sm", elem_id="sc-download-other")
        c["upload"] = gr.File(label="Replay a saved scaling trace (.json)", file_types=[".json"],
                              type="filepath", height=110, elem_id="sc-upload")


def _views(c: dict) -> None:
    initial = {k: v.get("value") if isinstance(v, dict) else v for k, v in views(None).items()}
    gr.HTML(CSS, elem_id="sc-css", padding=False)
    c["stats"] = gr.HTML(initial["stats"], elem_id="sc-stats")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=260):
            gr.Markdown("### Final choice")
            c["choice"] = gr.HTML(initial["choice"], elem_id="sc-choice", elem_classes="dl-panel")
            gr.Markdown(INTRO, elem_classes="dl-help", elem_id="sc-intro")
        with gr.Column(scale=3):
            c["lineage"] = gr.Plot(initial["lineage"], label="Lineage: who continues whom (A*: the search tree)",
                                   elem_id="sc-lineage")
    c["weights"] = gr.Plot(initial["weights"], label="Weights and ESS per step", elem_id="sc-weights")
    gr.Markdown("### Particles")
    c["step"] = gr.Slider(0, 1, value=0, step=1, label="Step", interactive=False, elem_id="sc-step",
                          info="After the run: step back through earlier steps (weights before resampling).")
    c["particles"] = gr.HTML(initial["particles"], elem_id="sc-particles")
    gr.Markdown("### Run summary (and the comparison)")
    c["summary"] = gr.HTML(initial["summary"], elem_id="sc-summary")
    with gr.Accordion("What the benchmark found on tiny-math: accuracy against the budget", open=False,
                      elem_id="sc-bench"):
        text, by_budget, by_tokens = benchmark_views()
        gr.Markdown(text, elem_classes="dl-help", elem_id="sc-bench-text")
        if by_budget is not None:
            with gr.Row():
                gr.Plot(by_budget, label="Accuracy against the budget N", elem_id="sc-bench-budget")
                gr.Plot(by_tokens, label="Accuracy against tokens spent", elem_id="sc-bench-tokens")
    build_infalign(c)  # InfAlign: aligning for best-of-N, exact on a categorical policy (ui/infalign.py)
    build_judge(c)  # LLM-as-a-Judge: the best number of candidates for a misspecified judge (ui/judge.py)


def build_scaling() -> dict:
    """Create the tab's widgets in the current Blocks, wire them, and return them by name."""
    c: dict = {}
    lab_columns(c, _controls, _views, "dl-scaling")
    c["trace"], c["other"] = session_state(), session_state()
    _wire(c)
    return c


def _wire(c: dict) -> None:
    outputs = {name: c[name] for name in OUTPUTS}
    state = {k: c[k] for k in ("trace", "other")}
    explain_clamping(c, {f"sc:{f}": spec_of(f) for f in FIELDS})

    shown = {f"sc:{f}": c[f"sc:{f}"] for f in SPECIFIC} | {k: c[k] for k in ("reward_help", "method_help")}
    on_any([c["method"].change, c["sc:reward"].change], cb.shown_controls, shown,
           {"method": c["method"], "reward": c["sc:reward"]}, **QUIET)
    switched = {f"sc:{f}": c[f"sc:{f}"] for f in VARYING}
    if switched:  # the user's own pick (not a preset's or a replay's): defaults that depend on the method follow it
        inputs = named_inputs({"method": c["method"]}, {f: c[f"sc:{f}"] for f in VARYING})
        on(c["method"].input, cb.method_switched, switched, inputs, **QUIET)
    on(c["model"].change, cb.model_changed, {"method": c["method"]}, {k: c[k] for k in ("model", "method")}, **QUIET)
    task_outputs = {k: c[k] for k in ("prompt", "sc:reference", "model", "sc:reward")}
    on(c["task"].input, cb.task_chosen, task_outputs, {"task_id": c["task"], "model": c["model"],
                                                        "reward": c["sc:reward"]}, **QUIET)
    on_any([c["prompt"].change, c["model"].change],  # typed, or set by a task, a preset or a replay
           cb.form_note, {"form_note": c["form_note"]}, {k: c[k] for k in ("model", "prompt")},
           trigger_mode="always_last", **QUIET)
    edited = {k: c[k] for k in ("task", "sc:reference")}
    on(c["prompt"].input, cb.prompt_edited, edited, {"prompt": c["prompt"], "task_id": c["task"]},
       trigger_mode="always_last", **QUIET)
    controls = ("model", "prompt", "method", "max_new_tokens", "seed", "chat", "compare")
    run_inputs = named_inputs({k: c[k] for k in controls}, {name: c[f"sc:{name}"] for name in FIELDS})
    wire_lab(c, cb, outputs, state, run_inputs, CONTROLS, lab="scaling")
    on(c["step"].input, cb.choose_step, outputs, {"step": c["step"]} | state, trigger_mode="always_last", **QUIET)
    wire_download(c["dl_json"], download, [c["trace"]])
    wire_download(c["dl_other"], lambda other: download(other, missing=NO_OTHER_RUN), [c["other"]])


def demo() -> gr.Blocks:
    """This tab alone, queued like the full app."""
    return standalone(build_scaling, "Decoding Lab · Scaling")


if __name__ == "__main__":
    serve(demo())
