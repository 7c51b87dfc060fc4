"""The Serving tab: many users at once. A stream of requests (a Poisson stream, or a class pressing Generate
together) is served by one model under each policy in turn (one at a time, static batches, Flover's temporal
fusion), live on this machine: the timeline shows each request waiting, prefilling and decoding, and the table
compares throughput, time to first token and latency.

    build_serving()   lays the tab out inside the current Blocks and wires it (used by app.py)
    demo()            the tab as a Blocks of its own:  python -m ui.serving

Handlers live in `ui/serving_callbacks.py`; rendering in `ui/serving_views.py`.
"""

from __future__ import annotations

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.serving import POLICIES
from ui import serving_callbacks as cb
from ui.launch import serve, standalone
from ui.serving_views import (ARRIVALS, DEFAULT_MODEL, DEFAULTS, LIMITS, OUTPUTS, POLICY_HELP, SERVER_POLL_S, new_state,
                              server_view, views)
from ui.widgets import QUIET, explain_clamping, model_choices
from ui.wiring import bind, lab_columns, named_inputs, on, run_buttons, session_state
from ui.worker import MODEL_CONCURRENCY_ID, model_event, runs_at_once

INTRO = ("Many users at once: a **stream of requests** with different prompts arrives at the model, and a "
         "**policy** decides which requests share each forward pass. **One at a time** serves each request "
         "alone; **static** batches take the requests waiting when the model is idle and run until the "
         "longest ends (an ended request keeps its row, a late one waits); **fusion** (Flover, temporal "
         "fusion) lets every arrived request join the running batch at the next step and drops an ended one at "
         "once. A batched forward of a few rows costs little more than one row, so batching raises throughput; "
         "fusion also stops late requests from waiting for a whole batch. Every policy gives each request "
         "exactly its own greedy text (tested); only the timing differs. Measured live on this machine.")


def _controls(c: dict) -> None:
    gr.Markdown(INTRO, elem_classes="dl-help", elem_id="sv-intro")
    c["model"] = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Model", allow_custom_value=True,
                             elem_id="sv-model", info="Greedy decoding. Prompts in turn: questions for a chat model (SmolLM2), "
                                                          "openings of text for a base model (tiny-ar).")
    run_buttons(c, "sv")
    low, high = LIMITS["requests"]
    c["requests"] = gr.Slider(low, high, value=DEFAULTS["requests"], step=1, label="Requests", elem_id="sv-requests")
    low, high = LIMITS["tokens"]
    c["tokens"] = gr.Slider(low, high, value=DEFAULTS["tokens"], step=1, label="New tokens per request",
                            elem_id="sv-tokens")
    c["arrival"] = gr.Radio(list(ARRIVALS), value=DEFAULTS["arrival"], label="Arrivals", elem_id="sv-arrival")
    low, high = LIMITS["rate"]
    c["rate"] = gr.Slider(low, high, value=DEFAULTS["rate"], step=0.1, label="Poisson rate (requests per second)",
                          elem_id="sv-rate", info="The same arrival times for every policy (seed 0).")
    low, high = LIMITS["batch_size"]
    c["batch_size"] = gr.Slider(low, high, value=DEFAULTS["batch_size"], step=1, label="Batch size (at most)",
                                elem_id="sv-batch-size", info="Rows in one forward pass: static batches and fusion.")
    c["policies"] = gr.CheckboxGroup(list(POLICIES), value=DEFAULTS["policies"], label="Policies, served in turn",
                                     elem_id="sv-policies",
                                     info=" · ".join(f"{p}: {h}" for p, h in POLICY_HELP.items()))


def _views(c: dict) -> None:
    initial = views(new_state())
    c["table"] = gr.HTML(initial["table"], elem_id="sv-table")
    c["timeline"] = gr.Plot(initial["timeline"], label="Timeline: each request waiting, prefilling, decoding",
                            elem_id="sv-timeline")


SERVER_HELP = ("**This server**: started with `DECODING_LAB_BATCH=1` (off by default for now), the visitors' runs "
               "of this app share the model's steps the same way (fusion): a greedy or sampling run joins the running "
               "batch at the next step and leaves when it ends. Turn on *Watch* and ask the class to press Generate: "
               "each run's stay in the batch (below) and the rows of every step (above), over the last 30 s. With "
               "the switch off, runs compute one at a time and nothing is drawn here.")


def server_panel(c: dict) -> None:
    """The live batch of this server's own visitors (`decoding.batching`), polled every 2 s while watched."""
    with gr.Accordion("This server: the visitors' runs, batched live", open=False, elem_id="sv-server"):
        gr.Markdown(SERVER_HELP, elem_classes="dl-help")
        c["server_watch"] = gr.Checkbox(False, label="Watch (refreshes every 2 s)", elem_id="sv-server-watch")
        c["server_line"] = gr.Markdown(elem_id="sv-server-line")
        c["server_plot"] = gr.Plot(label="This server's batch", elem_id="sv-server-plot")
        timer = gr.Timer(SERVER_POLL_S, active=False)
    quiet = dict(show_progress="hidden", api_visibility="undocumented", concurrency_limit=None)  # not the model queue
    outputs = [c["server_line"], c["server_plot"]]
    c["server_watch"].change(lambda on: [gr.Timer(active=bool(on)), *server_view()], c["server_watch"],
                             [timer, *outputs], **quiet)
    timer.tick(server_view, None, outputs, **quiet)


def build_serving() -> dict:
    """Create the tab's widgets in the current Blocks, wire them, and return them by name."""
    c: dict = {}
    lab_columns(c, _controls, _views, "dl-serving")
    server_panel(c)
    c["runs"] = session_state(new_state())
    outputs = {name: c[name] for name in OUTPUTS}
    run_inputs = named_inputs({k: c[k] for k in ("model", "requests", "tokens", "arrival", "rate", "batch_size",
                                                  "policies")})
    run = c["generate"].click(model_event(bind(cb.generate_run, outputs, run_inputs)), list(run_inputs.values()),
                              list(outputs.values()), concurrency_id=MODEL_CONCURRENCY_ID,
                              concurrency_limit=runs_at_once(), show_progress="minimal",
                              show_progress_on=[c["status"]], api_visibility="undocumented")
    on(c["stop"].click(None, cancels=[run], api_visibility="undocumented").then, cb.stop_run,
       {k: c[k] for k in ("status", "timeline", "table")}, {"runs": c["runs"]}, **QUIET)
    explain_clamping(c, {k: None for k in ("requests", "tokens", "rate", "batch_size")})
    return c


def demo() -> gr.Blocks:
    return standalone(build_serving, "Decoding Lab: Serving")


if __name__ == "__main__":
    serve(demo())
