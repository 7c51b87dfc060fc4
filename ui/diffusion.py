"""The Diffusion tab: a masked diffusion LM starts from a canvas of masks and unmasks it over a few
steps, many positions at a time and in any order. Watch the canvas fill in, when each position was
committed, how sure the model was, and how many model calls (NFE) the whole text cost; compare
samplers (fixed schedule, Fast-dLLM threshold, LocalLeap, FreeDave, Learn2PD) or the autoregressive
tiny-ar. With tiny-parallel, a task picker fills the prompt with a held-out ParallelBench-style problem
and the task's checker gives its verdict on the answer; an accordion shows what the benchmark found.

    build_diffusion()   lays the tab out inside the current Blocks and wires it (used by app.py)
    demo()              the tab as a Blocks of its own:  python -m ui.diffusion

Handlers live in `ui/diffusion_callbacks.py` (plain functions, {output name: value}); rendering in
`ui/diffusion_views.py`. This module only creates widgets and binds names to them.
"""

from __future__ import annotations

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from ui import diffusion_callbacks as cb
from ui.diffusion_tasks import benchmark_views, num_problems, shows_tasks, task_choices
from ui.classroom import lesson_row
from ui.launch import serve, standalone
from ui.widgets import QUIET, explain_clamping, model_choices, seed_box, spec_widget
from ui.wiring import lab_columns, named_inputs, on, on_any, run_buttons, session_state, wire_lab
from ui.exports import NO_OTHER_RUN, download, wire_download
from ui.plugin_fields import plugin_widgets
from ui.diffusion_views import (CHOICES, COMPARISONS, CONTROLS, DEFAULT_PLAYBACK, FIELDS, OUTPUTS, PLAYBACK, SPECIFIC,
                                UI_MAX_LENGTH, help_of, spec_of, views, visible_fields)

INTRO = ("A **masked diffusion LM** does not write left to right. It starts from a canvas of `length` **masks** "
         "and, at every **step**, predicts a token for every masked position at once; the **remasking** rule keeps "
         "the best few predictions (**unmask**) and leaves the rest masked for later steps. One step is one model "
         "call, and the cost of a text is its **NFE** (number of function evaluations = model calls). With a fixed "
         "schedule of `steps` = length the model commits one token per call, like an autoregressive model; a "
         "**threshold** (Fast-dLLM) or **LocalLeap** commits every position it is sure enough about, so several "
         "tokens share one call and the NFE drops. **Blocks** make it semi-autoregressive: blocks are filled left "
         "to right, positions inside a block in any order. **FreeDave** drafts several scheduled steps from one "
         "call and verifies them in the next: the canvas of one token per step, in fewer calls. **Learn2PD** "
         "commits what a small learned filter predicts is already final.")
CSS = """<style>
#df-stats .dl-stats .dl-cards { grid-template-columns: repeat(6, minmax(0, 1fr)); }
#df-generate, #df-stop { font-size: 1.05rem; }
#df-status p { font-size: 0.95rem; margin: 0.2rem 0; }
#df-note:empty, #df-css { display: none; }
#df-canvas { min-height: 4em; }
#df-verdict:empty { display: none; }
#df-verdict code { font-size: 13px; }
#df-order, #df-confidence, #df-tokens, #df-compare-plot { padding-top: 2.1rem !important; }
@media (max-width: 900px) { #df-stats .dl-stats .dl-cards { grid-template-columns: repeat(3, minmax(0, 1fr)); } }
</style>"""


def _eid(field: str) -> str:
    return f"df-{field.replace('_', '-')}"


OPENING = cb.opening()  # what a fresh tab shows, by control name (its lesson: see diffusion_views.OPENING_PRESET)


def _value(field: str):
    return OPENING[f"df:{field}"]


def _shown(field: str) -> bool:
    return field not in SPECIFIC or field in visible_fields(_value("sampler"), _value("cache"))


def _slider(c: dict, field: str, low, high, step, label: str, **kw) -> None:
    c[f"df:{field}"] = gr.Slider(low, high, value=_value(field), step=step, label=label,
                                 info=help_of(field), visible=_shown(field), elem_id=_eid(field), **kw)


def _radio(c: dict, field: str, label: str) -> None:
    c[f"df:{field}"] = gr.Radio(list(CHOICES[field]()), value=_value(field), label=label, info=help_of(field),
                                visible=_shown(field), elem_id=_eid(field))


def _controls(c: dict) -> None:
    presets = cb.preset_choices()
    c["preset"] = gr.Dropdown(presets, value=OPENING["preset"], label="Preset", elem_id="df-preset",
                              interactive=bool(presets),
                              info="A classroom demo: sets every control and explains what to look for."
                              if presets else "No diffusion presets ship yet.")
    lesson_row(c, "diffusion", "df")
    c["note"] = gr.Markdown(OPENING["note"], elem_classes="dl-help", elem_id="df-note")
    model = OPENING["model"]
    c["model"] = gr.Dropdown(model_choices("diffusion"), value=model, label="Model", allow_custom_value=True,
                             info="A masked diffusion LM, offline: tiny-diffusion (4.4M parameters, the KJV Bible) or "
                                  "tiny-parallel (3.5M, ParallelBench-style list tasks with checkers).",
                             elem_id="df-model")
    with gr.Group(visible=shows_tasks(model), elem_id="df-tasks") as c["tasks"]:
        c["task"] = gr.Dropdown(task_choices(), value=OPENING["task"], label="Task", elem_id="df-task",
                                info="A held-out problem of one of the tasks fills the prompt (and sets the length to "
                                     "32); after the run the task's checker says whether the answer is right.")
        problem = OPENING.get("problem") or {}  # the preset's problem number, when its prompt is one
        c["problem"] = gr.Slider(1, problem.get("maximum", max(num_problems(n) for _, n in task_choices() if n)),
                                 value=problem.get("value", 1), step=1, label="Problem",
                                 info=problem.get("info", "a held-out test problem of the task"), elem_id="df-problem")
        c["another"] = gr.Button("Another problem", size="sm", elem_id="df-another")
    c["prompt"] = gr.Textbox(OPENING["prompt"], label="Prompt", lines=2, max_lines=8, elem_id="df-prompt",
                             info="KJV-style text for tiny-diffusion; a task prompt for tiny-parallel. A model with a "
                                  "chat template gets it applied (tiny-parallel's adds a newline), as in the CLI.")
    run_buttons(c, "df")
    with gr.Row():
        c["length"] = gr.Slider(1, UI_MAX_LENGTH, value=OPENING["length"], step=1, label="Length (max new tokens)",
                                info=cb.LENGTH_INFO, elem_id="df-length", scale=2)
        c["seed"] = seed_box("df-seed", OPENING["seed"])
    _radio(c, "sampler", "Sampler")
    plugin_widgets(c, "df", "df", "diffusion", _value("sampler"),  # the chosen sampler's own knobs
                   {k.removeprefix("df:"): v for k, v in OPENING.items() if k.startswith("df:") and "." in k})
    with gr.Row():
        _slider(c, "steps", 0, UI_MAX_LENGTH, 1, "Steps (0 = one per token)")
        _slider(c, "block_length", 0, UI_MAX_LENGTH, 1, "Block length (0 = one block)")
    _radio(c, "remasking", "Remasking")
    _slider(c, "threshold", 0, 1, 0.01, "Threshold (0 = off)")
    _slider(c, "temperature", 0, 5, 0.05, "Temperature")
    with gr.Row():
        _radio(c, "cache", "Cache")
        _slider(c, "refresh_interval", 1, 64, 1, "Refresh interval")
    for field in FIELDS:  # a parameter added to DiffusionParams (e.g. by a new sampler): a widget from its spec
        if f"df:{field}" not in c:
            c[f"df:{field}"] = spec_widget(spec_of(field), value=_value(field), visible=_shown(field),
                                           elem_id=_eid(field))
    c["playback"] = gr.Radio(list(PLAYBACK), value=DEFAULT_PLAYBACK, label="Pace", elem_id="df-playback",
                             info="At most this many steps a second: the sampler waits before its next model call, "
                                  "so every step can be seen (a slower step is not slowed further; the statistics "
                                  "leave the waiting out). Full speed: no waiting.")
    c["compare"] = gr.Dropdown(list(COMPARISONS), value=OPENING["compare"], label="Compare with", elem_id="df-compare",
                               info="After the run: the same prompt, length and seed with another sampler (FreeDave "
                                    "against steps = length: same canvas?), or the autoregressive tiny-ar.")
    with gr.Accordion("Export & replay", open=False, elem_id="df-export"):
        with gr.Row():
            c["dl_json"] = gr.Button("Trace (JSON)", size="sm", elem_id="df-download-json")
            c["dl_other"] = gr.Button("Comparison trace (JSON)", size="sm", elem_id="df-download-other")
        c["upload"] = gr.File(label="Replay a saved diffusion trace (.json)", file_types=[".json"],
                              type="filepath", height=110, elem_id="df-upload")


def _views(c: dict) -> None:
    initial = {k: v.get("value") if isinstance(v, dict) else v for k, v in views(None).items()}
    gr.HTML(CSS, elem_id="df-css", padding=False)
    c["stats"] = gr.HTML(initial["stats"], elem_id="df-stats")
    gr.Markdown("### The canvas")
    c["canvas"] = gr.HTML(initial["canvas"], elem_id="df-canvas", elem_classes="dl-panel")
    c["verdict"] = gr.HTML(initial["verdict"], elem_id="df-verdict")
    c["step"] = gr.Slider(0, 1, value=0, step=1, label="Step", interactive=False, elem_id="df-step",
                          info="After the run: step back to see the canvas after an earlier step.")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            c["order"] = gr.Plot(initial["order"], label="Unmasking order: when each position was committed",
                                 elem_id="df-order")
        with gr.Column(scale=2, min_width=260):
            gr.Markdown(INTRO, elem_classes="dl-help", elem_id="df-intro")
    with gr.Row(equal_height=False):
        c["confidence"] = gr.Plot(initial["confidence"], label="Confidence over steps", elem_id="df-confidence")
        c["tokens"] = gr.Plot(initial["tokens"], label="Tokens per step and NFE", elem_id="df-tokens")
    gr.Markdown("### Run summary (and the comparison)")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=260):
            c["summary"] = gr.HTML(initial["summary"], elem_id="df-summary")
            c["compare_html"] = gr.HTML(initial["compare_html"], elem_id="df-compare-html")
        with gr.Column(scale=3):
            c["compare_plot"] = gr.Plot(initial["compare_plot"], label="Tokens committed against NFE",
                                        elem_id="df-compare-plot")
    with gr.Accordion("What the benchmark found on tiny-parallel", open=False, elem_id="df-bench"):
        text, figure = benchmark_views()
        gr.Markdown(text, elem_classes="dl-help", elem_id="df-bench-text")
        if figure is not None:
            gr.Plot(figure, label="Accuracy against tokens per step, per task", elem_id="df-bench-plot")


def build_diffusion() -> dict:
    """Create the tab's widgets in the current Blocks, wire them, and return them by name."""
    c: dict = {}
    lab_columns(c, _controls, _views, "dl-diffusion")
    c["trace"], c["other"] = session_state(), session_state()
    _wire(c)
    return c


def _wire(c: dict) -> None:
    outputs = {name: c[name] for name in OUTPUTS}
    state = {k: c[k] for k in ("trace", "other")}
    explain_clamping(c, {"length": None} | {f"df:{f}": spec_of(f) for f in FIELDS})

    shown = {f"df:{f}": c[f"df:{f}"] for f in SPECIFIC}
    on_any([c["df:sampler"].change, c["df:cache"].change], cb.shown_controls, shown,
           {"sampler": c["df:sampler"], "cache": c["df:cache"]}, **QUIET)
    run_inputs = named_inputs({k: c[k] for k in ("model", "prompt", "length", "seed", "compare", "playback")},
                              {name: c[f"df:{name}"] for name in FIELDS})
    wire_lab(c, cb, outputs, state, run_inputs, CONTROLS, lab="diffusion")
    fits = ("model", "prompt", "length")  # the note under Length: what fits beside the prompt
    on_any([c[k].change for k in fits], cb.length_checked, {"length": c["length"]}, {k: c[k] for k in fits},
           trigger_mode="always_last", **QUIET)
    _wire_tasks(c)
    on(c["step"].input, cb.choose_step, outputs, {"step": c["step"]} | state, trigger_mode="always_last", **QUIET)
    wire_download(c["dl_json"], download, [c["trace"]])
    wire_download(c["dl_other"], lambda other: download(other, missing=NO_OTHER_RUN), [c["other"]])


def _wire_tasks(c: dict) -> None:
    """The task picker: shown for the task models; a task or problem fills the prompt; typing follows."""
    on(c["model"].change, cb.task_picker_shown, {"tasks": c["tasks"]}, {"model": c["model"]}, **QUIET)
    filled = {k: c[k] for k in ("task", "problem", "prompt", "length")}
    picked = {"task": c["task"], "number": c["problem"]}
    on(c["model"].input, cb.model_picked, filled, {k: c[k] for k in ("model", "prompt")}, **QUIET)
    on(c["task"].input, cb.task_chosen, filled, picked, **QUIET)
    on(c["problem"].input, cb.problem_chosen, filled, picked, trigger_mode="always_last", **QUIET)
    on(c["another"].click, cb.another_problem, filled, picked, **QUIET)
    menu = {k: c[k] for k in ("task", "problem")}
    on(c["prompt"].input, cb.prompt_edited, menu, {"prompt": c["prompt"], "task": c["task"]},
       trigger_mode="always_last", **QUIET)


def demo() -> gr.Blocks:
    """This tab alone, queued like the full app."""
    return standalone(build_diffusion, "Decoding Lab · Diffusion")


if __name__ == "__main__":
    serve(demo())
