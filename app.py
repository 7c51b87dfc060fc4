"""Decoding Lab in the browser:  python app.py  (http://127.0.0.1:7860)

One tab per lab; each tab is a module in `ui/` that also runs alone. The `/generate` API endpoint
streams a run's events and ends with the CLI's `--json` summary (see `ui/api.py`).

Environment
    GRADIO_SERVER_NAME / GRADIO_SERVER_PORT   where to listen (default 127.0.0.1:7860)
    DECODING_LAB_CONCURRENCY                  model runs at once (default 1)
    DECODING_LAB_QUEUE_SIZE                   requests that may wait (default 128; ui/admission.py)
    DECODING_LAB_RUNS_PER_SESSION             runs one browser session may have computing or waiting (default 3)
    DECODING_LAB_BATCH=1                      visitors' runs share the model's steps (the batch engine; off by default)
    DECODING_LAB_RUN_LIMIT_S                  seconds one run may compute (default 600 on a Space, none elsewhere)
    DECODING_LAB_SHOW_TEST_MODELS=1           list the tiny random test model in the menu
    DECODING_LAB_TORCH_THREADS                torch threads (default: all cores but one)
    DECODING_LAB_PRELOAD=0                    do not load the default model at start-up
    DECODING_LAB_CONVERTED_COPY=0             convert a GGUF at every load instead of keeping a converted copy
    DECODING_LAB_MAX_UPLOAD_MB                largest replayed trace file (default 5)
    DECODING_LAB_MAX_AUDIO_S                  longest speech clip, uploaded or recorded (default 120)
    DECODING_LAB_MAX_TRACE_EVENTS / _CANVAS / _PARTICLES / _TOKENS   what a trace may hold
                                              (decoding/trace_checks.py; README, hosting)
    DECODING_LAB_EXPORT_DIR                   where downloads are written (default: in Gradio's cache)
    DECODING_LAB_EXPORT_MAX_AGE_S / _MAX_MB   export retention (default 3600 s, 200 MB; ui/exports.py)
    DECODING_LAB_SESSION_TTL_S                a session's state kept after its last update (default 3600)
    DECODING_LAB_SESSION_CAP                  sessions kept at most (default 200)
    DECODING_LAB_SESSIONS_PER_CLIENT / _SESSION_MEMORY_MB / _QUEUED_PER_CLIENT / _UPLOADS_PER_MIN /
    _UPLOAD_CACHE_MB / _REPLAY_BUDGET_S / _RUNS_AT_ONCE / _TRUST_PROXY   what one visitor may take (ui/guard.py)
    DECODING_LAB_MODEL_CACHE_MODELS / _MODEL_CACHE_MB / _ALLOW_HUB      the model cache (decoding/model_cache.py)
    DECODING_LAB_ALLOW_REMOTE=1, DECODING_LAB_REMOTE_ENGINES, DECODING_LAB_OPENAI_API_KEY   remote engines
                                              (the key goes only to the listed engines; README, hosting)
"""

from __future__ import annotations

import decoding  # noqa: F401  (switches telemetry and analytics off before gradio is imported)
import gradio as gr

from ui.api import register_api
from ui.launch import queued, serve, startup_progress
from ui.diffusion import build_diffusion
from ui.classroom import present_button
from ui.exports import gradio_cache_policy
from ui.longctx import build_longctx
from ui.playground import build_playground
from ui.scaling import build_scaling
from ui.serving import build_serving
from ui.speculative import build_speculative
from ui.speech import build_speech

HEADER = """
<div class="dl-header">
  <h1>Decoding Lab</h1>
  <p>Watch a language model decode, step by step, live on this machine. <b>Playground</b>: sampling and
  search strategies; tokens are <b>coloured by how sure the model was</b>, a chart tracks each step's
  <b>entropy</b>, and clicking a token shows the alternatives it weighed &mdash; pick one and <b>branch</b>.
  <b>Speculative</b>: a drafter's token tree and what the target accepts. <b>Scaling</b>: N partial solutions
  reweighted, resampled and pruned by a reward. <b>Diffusion</b>: a canvas of masks filled in, many
  positions per step, in any order. <b>Streaming speech</b>: Whisper transcribing audio while it
  still arrives, words committed and retracted. <b>Serving</b>: many users at once, one at a time, in batches or fused.
  <b>Long context</b>: a book as the prompt, read whole, by retrieval, or by a drafter that reads only what it retrieved.</p>
</div>
"""


def build_app() -> gr.Blocks:
    with gr.Blocks(title="Decoding Lab", delete_cache=gradio_cache_policy()) as demo:
        with gr.Row(elem_classes="dl-top"):
            gr.HTML(HEADER)
            present_button()  # classroom mode: controls hidden, views large, arrow keys step
        startup_progress(demo)  # "Loading smollm2-135m… ready" while the default model loads
        with gr.Tabs():
            with gr.Tab("Playground", id="playground"):
                build_playground()
            with gr.Tab("Speculative", id="speculative"):
                build_speculative()
            with gr.Tab("Scaling", id="scaling"):
                build_scaling()
            with gr.Tab("Diffusion", id="diffusion"):
                build_diffusion()
            with gr.Tab("Streaming speech", id="speech"):
                build_speech()
            with gr.Tab("Serving", id="serving"):
                build_serving()
            with gr.Tab("Long context", id="longctx"):
                build_longctx()
        register_api()
    return queued(demo)


demo = build_app()

if __name__ == "__main__":
    serve(demo)
