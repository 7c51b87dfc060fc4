"""The Playground tab: pick a model, a strategy and its parameters; watch the text, the entropy
timeline and each step's alternatives arrive live; click a token to inspect it; branch from it;
compare 2-4 settings side by side (`ui/compare.py`).

    build_playground()   lays the tab out inside the current Blocks and wires it (used by app.py)
    demo()               the tab as a Blocks of its own:  python -m ui.playground

Handlers live in `ui/playground_callbacks.py` (plain functions, {output name: value}); this module
only creates widgets and binds names to them.
"""

from __future__ import annotations

import functools
import importlib.util

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.remote.source import model_field_hint
from decoding.models import DEFAULT_MODEL, SUGGESTED_HUB_IDS
from ui import playground_callbacks as cb
from ui.classroom import lesson_row
from ui.compare import build_compare
from ui.launch import serve, standalone
from ui.widgets import auto_dtype_help, explain_clamping, model_choices, seed_box
from ui.wiring import lab_columns, named_inputs, on, on_any, run_buttons, session_state, wire_lab
from ui.exports import HTML_NOTE, download, wire_download
from ui.playground_views import (COLOR_CHOICES, CONTROLS, DEFAULT_STRATEGY, EXAMPLE_PROMPTS, OUTPUTS,
                                 PRIMARY_PARAMS, UI_MAX_NEW_TOKENS, new_selection, param_widget, param_widgets,
                                 playground_strategies, views)

# Runs in the browser when a token panel loads: a click on a chip reports its step to Python.
TOKEN_CLICK_JS = """
element.addEventListener('click', (event) => {
  const chip = event.target.closest('.tok[data-step]');
  if (!chip || !element.contains(chip)) return;
  element.querySelectorAll('.tok.sel').forEach((t) => t.classList.remove('sel'));
  chip.classList.add('sel');
  trigger('click', {step: Number(chip.dataset.step)});
});
"""
# The tab opens on its lesson (issue 43): the controls' defaults (SmolLM2-135M, greedy, the first example prompt, 64
# tokens). tests/test_lessons.py runs it and checks what this note says.
OPENING_NOTE = (
    "**This tab's lesson: how sure the model was of every token.** **Generate** decodes the prompt greedily "
    "with SmolLM2-135M: every step takes the most probable next token, and the text colours each token by the "
    "probability the model gave it. The model is sure where the words are fixed (\"Ray\" is followed by \"leigh\" "
    "with probability 1.00, \"in all\" by \"directions\") and unsure where it chooses what to say (in \"it "
    "encounters a mixture of blue and red light\", \"a\" 0.14, \"blue\" 0.27, \"red\" 0.31). The entropy timeline "
    "shows the same: near zero inside a phrase, 2 to 3.5 nats where the sentence could go several ways. Click "
    "a token to see the alternatives it weighed, or branch from one. The presets walk the rest: loops, "
    "temperature, truncation rules, other methods.")
EXPORTS = {"json": "trace", "csv": "tokens", "html": "entropy"}  # button -> what `download` writes
PNG_NOTE = ("PNG export needs the `kaleido` package (and a Chrome); use the chart's camera button instead."
            if importlib.util.find_spec("kaleido") is None else "")


def _controls(c: dict) -> None:
    c["preset"] = gr.Dropdown(cb.preset_choices(), value=None, label="Preset", elem_id="dl-preset",
                              info="A classroom demo: sets the model, strategy, parameters and prompt, and explains "
                                   "what to look for.")
    lesson_row(c, "playground", "dl")
    c["note"] = gr.Markdown(OPENING_NOTE, elem_classes="dl-help", elem_id="dl-note")
    c["model"] = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Model", allow_custom_value=True,
                             info=f"Embedded models work offline; with internet, type any hub id "
                                  f"(e.g. {SUGGESTED_HUB_IDS[-1]}).{model_field_hint()}", elem_id="dl-model")
    c["strategy"] = gr.Dropdown(playground_strategies(), value=DEFAULT_STRATEGY, label="Decoding strategy",
                                info=cb.strategy_help(DEFAULT_STRATEGY), elem_id="dl-strategy")
    c["prompt"] = gr.Textbox(EXAMPLE_PROMPTS[0], label="Prompt", lines=3, max_lines=12, elem_id="dl-prompt")
    run_buttons(c, "dl")
    for name in playground_strategies():
        widgets = param_widgets(name)
        with gr.Column(visible=name == DEFAULT_STRATEGY, elem_classes="dl-params") as group:
            c[f"group:{name}"] = group
            if not widgets:
                gr.Markdown(f"**{name}** has no parameters: the most probable token wins every step.",
                            elem_classes="dl-help")
            for w in widgets[:PRIMARY_PARAMS]:
                c[w.key] = param_widget(w)
            if widgets[PRIMARY_PARAMS:]:
                with gr.Accordion("More rules", open=False):
                    for w in widgets[PRIMARY_PARAMS:]:
                        c[w.key] = param_widget(w)
    with gr.Row():
        c["max_new_tokens"] = gr.Slider(1, UI_MAX_NEW_TOKENS, value=64, step=1, label="Max new tokens",
                                        elem_id="dl-max-new-tokens", scale=2)
        c["seed"] = seed_box("dl-seed")
    with gr.Row():
        c["chat"] = gr.Checkbox(True, label="Chat template", info="Send the prompt as a user message.")
        c["dtype"] = gr.Dropdown(["auto", "float32", "bfloat16"], value="auto", label="dtype",
                                 info=auto_dtype_help())
    gr.Examples([[p] for p in EXAMPLE_PROMPTS], inputs=c["prompt"], label="Example prompts")
    with gr.Accordion("Export & replay", open=False, elem_id="dl-export"):
        with gr.Row():
            c["dl_json"] = gr.Button("Trace (JSON)", size="sm", elem_id="dl-download-json")
            c["dl_csv"] = gr.Button("Tokens (CSV)", size="sm", elem_id="dl-download-csv")
            c["dl_html"] = gr.Button("Entropy chart (HTML)", size="sm", elem_id="dl-download-html")
            c["dl_branch"] = gr.Button("Branch trace (JSON)", size="sm", elem_id="dl-download-branch")
        gr.Markdown(HTML_NOTE, elem_classes="dl-help")
        if PNG_NOTE:
            gr.Markdown(PNG_NOTE, elem_classes="dl-help")
        c["upload"] = gr.File(label="Replay a saved trace (.json)", file_types=[".json"], type="filepath",
                              height=110, elem_id="dl-upload")


def _initial() -> dict:
    """What the views show before any run (values only)."""
    return {k: v.get("value") if isinstance(v, dict) else v for k, v in views(None, None, new_selection()).items()}


def _views(c: dict) -> None:
    initial = _initial()
    c["stats"] = gr.HTML(initial["stats"], elem_id="dl-stats")
    with gr.Row(equal_height=True, elem_classes="dl-text-head"):
        gr.Markdown("### Generated text")
        c["color_by"] = gr.Radio(COLOR_CHOICES, value="prob", show_label=False, container=False, scale=0,
                                 min_width=380, elem_id="dl-color-by")
    c["text"] = gr.HTML(initial["text"], elem_id="dl-main-text", js_on_load=TOKEN_CLICK_JS, elem_classes="dl-panel")
    c["entropy"] = gr.Plot(initial["entropy"], label="Entropy per step", elem_id="dl-entropy")
    c["beams"] = gr.Plot(label="Beam search tree", visible=DEFAULT_STRATEGY == "beam", elem_id="dl-beams")
    c["method"] = gr.Plot(label="Method picture", visible=False, elem_id="dl-method")  # momentum, adadec, superposed
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=320, elem_classes="dl-inspector"):
            with gr.Row(equal_height=True):
                c["step"] = gr.Number(None, label="Step", precision=0, scale=0, min_width=90,
                                      elem_id="dl-step")
                c["alternatives"] = gr.Dropdown([], label="Alternatives at this step", interactive=False, scale=4,
                                                elem_id="dl-alternatives")
            c["branch_button"] = gr.Button("Branch from this alternative ↳", interactive=False, variant="secondary",
                                           elem_id="dl-branch")
            c["inspect"] = gr.Markdown(initial["inspect"], elem_classes="dl-help", elem_id="dl-inspect")
        c["distribution"] = gr.Plot(initial["distribution"], label="Alternatives at the latest step",
                                    elem_id="dl-distribution", scale=6, min_width=380)
    with gr.Column(visible=False, elem_classes="dl-branch-box", elem_id="dl-branch-box") as box:
        c["branch_box"] = box
        gr.Markdown("### Branch")
        c["branch_text"] = gr.HTML(elem_id="dl-branch-text", js_on_load=TOKEN_CLICK_JS, elem_classes="dl-panel")
        c["branch_summary"] = gr.Markdown(elem_classes="dl-summary")


def build_playground() -> dict:
    """Create the tab's widgets in the current Blocks, wire them, and return them by name."""
    c: dict = {}
    lab_columns(c, _controls, _views, "dl-playground")
    build_compare(c)  # Compare mode: 2-4 settings side by side on the controls above
    c["trace"], c["branch"], c["selection"] = session_state(), session_state(), session_state(new_selection())
    _wire(c)
    return c


def _wire(c: dict) -> None:
    outputs = {name: c[name] for name in OUTPUTS}
    state = {k: c[k] for k in ("trace", "branch", "selection", "color_by")}
    quiet = dict(show_progress="hidden", api_visibility="undocumented")

    shown = [f"group:{n}" for n in playground_strategies()] + ["strategy", "beams", "method", "model"]
    strategy_outputs = {k: c[k] for k in shown}  # "model": a method trained into its model picks that model
    on(c["strategy"].change, cb.strategy_changed, strategy_outputs, {"strategy": c["strategy"]}, **quiet)
    on(c["model"].change, cb.model_changed, {"strategy": c["strategy"]}, {k: c[k] for k in ("model", "strategy")}, **quiet)
    inputs = ("model", "strategy", "prompt", "max_new_tokens", "seed", "chat", "dtype", "color_by", "selection")
    run_inputs = named_inputs({k: c[k] for k in inputs}, {w.key: c[w.key] for w in param_widgets()})
    # the same wiring as every lab: presets and lessons, Generate and Branch in the model queue, Stop, replay
    wire_lab(c, cb, outputs, state, run_inputs, CONTROLS + tuple(w.key for w in param_widgets()), lab="playground",
             more_runs={"branch": (c["branch_button"], cb.branch_run, {"alternative": c["alternatives"]} | state)})
    on(c["text"].click, cb.click_main, outputs, state, **quiet)
    on(c["branch_text"].click, cb.click_branch, outputs, state, **quiet)
    # the step box: typed (Enter), its arrows, or Present mode's Left / Right keys (which fire `input`)
    on_any([c["step"].submit, c["step"].input], cb.type_step, outputs, {"step": c["step"]} | state,
           trigger_mode="always_last", **quiet)
    on(c["color_by"].change, cb.recolor, outputs, state, **quiet)
    explain_clamping(c, {w.key: w.spec for w in param_widgets() if w.spec})
    for what in ("json", "csv", "html"):
        wire_download(c[f"dl_{what}"], functools.partial(download, what=EXPORTS[what]), [c["trace"]])
    wire_download(c["dl_branch"], cb.download_branch, [c["branch"]])


def demo() -> gr.Blocks:
    """This tab alone, queued like the full app."""
    return standalone(build_playground, "Decoding Lab · Playground")


if __name__ == "__main__":
    serve(demo())
