"""The Playground's Compare mode: 2-4 decoding settings on the Playground's prompt, side by side.

    build_compare(c)   lays the section out under the Playground (its model, prompt, length, seed, chat
                       template and dtype are the Playground's own controls, in `c`) and wires it

Handlers live in `ui/compare_callbacks.py`.
"""

from __future__ import annotations

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.compare import MAX_RUNS
from ui import compare_callbacks as cb
from ui.widgets import explain_clamping
from ui.wiring import bind, named_inputs, on, session_state
from ui.worker import MODEL_CONCURRENCY_ID, model_event, runs_at_once
from ui.exports import wire_download
from ui.playground_callbacks import preset_choices
from ui.playground_views import COLOR_CHOICES, param_widget, param_widgets, playground_strategies

# a chip click in any run column reports its step (every run is then inspected at that step)
CHIP_CLICK_JS = """
element.addEventListener('click', (event) => {
  const chip = event.target.closest('.tok[data-step]');
  if (!chip || !element.contains(chip)) return;
  trigger('click', {step: Number(chip.dataset.step)});
});
"""
INTRO = ("Run two to four settings on the **prompt, model, max new tokens, seed, chat template and dtype above**, "
         "side by side: the runs take turns (one token each), share the model and start from the same seed. "
         "Each run is exactly the run it would be alone. Click a token in any run to see every run's "
         "distribution at that step. Stop stops all of them. Each knob is explained under the same knob in the "
         "controls above (choose that strategy there to read it).")


def build_compare(c: dict) -> None:
    """The Compare section's widgets (added to `c` under `compare_*` names), wired."""
    with gr.Accordion("Compare strategies side by side", open=False, elem_id="dl-compare"):
        gr.Markdown(INTRO, elem_classes="dl-help")
        for k in range(MAX_RUNS):
            _row(c, k)
        with gr.Row():
            c["compare_go"] = gr.Button("Compare", variant="primary", elem_id="dl-compare-go")
            c["compare_stop"] = gr.Button("Stop all", variant="stop", elem_id="dl-compare-stop")
            c["compare_export"] = gr.Button("Export comparison (ZIP: JSON per run + CSV table)", size="sm",
                                            elem_id="dl-compare-export")
        c["compare_status"] = gr.Markdown("Ready.", elem_id="dl-compare-status")
        initial = cb.views(cb.new_comparison())
        c["compare_color_by"] = gr.Radio(COLOR_CHOICES, value="prob", show_label=False, container=False,
                                         elem_id="dl-compare-color-by")
        c["compare_columns"] = gr.HTML(initial["compare_columns"], elem_id="dl-compare-columns",
                                       js_on_load=CHIP_CLICK_JS, elem_classes="dl-panel")
        c["compare_entropy"] = gr.Plot(initial["compare_entropy"], label="Entropy per step, one line per run",
                                       elem_id="dl-compare-entropy")
        c["compare_table"] = gr.HTML("", elem_id="dl-compare-table")
        with gr.Row(equal_height=True):
            c["compare_step"] = gr.Number(None, label="Step", precision=0, scale=0, min_width=90,
                                          elem_id="dl-compare-step")
            gr.Markdown("Every run's top alternatives at this step (raw, T = 1; red = the token that run chose). "
                        "Runs diverge, so the same step can follow different text in each.", elem_classes="dl-help")
        c["compare_distributions"] = gr.Plot(initial["compare_distributions"], label="Distributions at the step",
                                             elem_id="dl-compare-distributions")
    c["comparison"] = session_state(cb.new_comparison())
    _wire(c)


def _row(c: dict, k: int) -> None:
    """Run k's controls: a preset menu, the strategy, the chosen strategy's own widgets (the Playground's, one
    group per strategy, the chosen one shown) and, folded, its parameters as JSON."""
    strategy, params = cb.DEFAULT_ROWS[k]
    with gr.Group(elem_id=f"dl-compare-row-{k}", elem_classes="dl-compare-row"):
        with gr.Row(equal_height=True):
            c[f"compare_preset_{k}"] = gr.Dropdown(preset_choices(), value=None, label=f"Run {k + 1}: from a preset",
                                                   scale=3, elem_id=f"dl-compare-preset-{k}")
            c[f"compare_strategy_{k}"] = gr.Dropdown([cb.OFF] + playground_strategies(), value=strategy,
                                                     label=f"Run {k + 1}: strategy", scale=2,
                                                     elem_id=f"dl-compare-strategy-{k}")
        for name in playground_strategies():
            widgets = param_widgets(name)
            if not widgets:  # greedy: nothing to set
                continue
            with gr.Row(visible=name == strategy, elem_classes="dl-compare-params") as group:
                c[f"compare_{k}:group:{name}"] = group
                for w in widgets:
                    c[f"compare_{k}:{w.key}"] = param_widget(
                        w, value=params.get(w.name) if name == strategy else None, compact=True,
                        elem_id=f"dl-compare-{k}-{w.key.removeprefix('param:').replace('.', '-')}")
        with gr.Accordion(f"Run {k + 1}: parameters as JSON", open=False, elem_id=f"dl-compare-json-{k}"):
            c[f"compare_params_{k}"] = gr.Textbox("", label=f"Run {k + 1}: parameters (JSON, optional)", max_lines=1,
                                                  info=cb.JSON_HELP, placeholder='{"top_p": 0.9}',
                                                  elem_id=f"dl-compare-params-{k}")


def _row_widgets(c: dict, k: int) -> dict:
    """Run k's widgets by the names the handlers use: "strategy", "params", "group:<s>", "param:<s>.<name>"."""
    prefix = f"compare_{k}:"
    return {"strategy": c[f"compare_strategy_{k}"], "params": c[f"compare_params_{k}"]} | \
        {key.removeprefix(prefix): widget for key, widget in c.items() if key.startswith(prefix)}


def _wire(c: dict) -> None:
    outputs = {name: c[name] for name in cb.OUTPUTS}
    quiet = dict(show_progress="hidden", api_visibility="undocumented")
    rows = {}
    for k in range(MAX_RUNS):
        row = _row_widgets(c, k)
        groups = {key: widget for key, widget in row.items() if key.startswith("group:")}
        values = {key: widget for key, widget in row.items() if key.startswith("param:")}
        on(c[f"compare_preset_{k}"].input, cb.preset_row, {k2: row[k2] for k2 in ("strategy", "params")} | values
           | groups, {"name": c[f"compare_preset_{k}"]}, **quiet)
        on(c[f"compare_strategy_{k}"].change, cb.row_strategy_chosen, groups, {"strategy": c[f"compare_strategy_{k}"]},
           **quiet)
        rows |= {f"strategy_{k}": row["strategy"], f"params_{k}": row["params"]} | \
            {f"row{k}:{key}": widget for key, widget in values.items()}
        explain_clamping(row, {w.key: w.spec for w in param_widgets() if w.spec})  # as the Playground's own
    shared = {k: c[k] for k in ("model", "prompt", "max_new_tokens", "seed", "chat", "dtype")} | \
        {"color_by": c["compare_color_by"], "comparison": c["comparison"]}
    run_inputs = named_inputs(shared, rows)
    run = c["compare_go"].click(model_event(bind(cb.compare_run, outputs, run_inputs)), list(run_inputs.values()),
                                list(outputs.values()), concurrency_id=MODEL_CONCURRENCY_ID,
                                concurrency_limit=runs_at_once(), show_progress="minimal",
                                show_progress_on=[c["compare_status"]], api_visibility="undocumented")
    state = {"comparison": c["comparison"], "color_by": c["compare_color_by"]}
    on(c["compare_stop"].click(None, cancels=[run], api_visibility="undocumented").then, cb.stop_compare, outputs,
       state, **quiet)
    on(c["compare_columns"].click, cb.click_chip, outputs, state, **quiet)
    on(c["compare_step"].submit, cb.select_step, outputs, {"step": c["compare_step"]} | state, **quiet)
    on(c["compare_color_by"].change, cb.recolor, outputs, state, **quiet)
    wire_download(c["compare_export"], cb.export_comparison, [c["comparison"]])


__all__ = ["build_compare"]
