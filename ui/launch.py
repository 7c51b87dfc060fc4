"""Serving the app: launch options (theme, guard, queue), the start-up line and the default model's
preload, a tab served on its own (`standalone`, `serve`)."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.models import DEFAULT_MODEL, load_model
from decoding.run import generate
from decoding.trace_checks import upload_bytes
from ui.exports import export_dir, gradio_cache_policy, sweep
from ui.classroom import KEYS_JS
from ui.guard import guarded_app_kwargs, queue_size, quiet_refusals
from ui.widgets import ASSETS, md_esc, theme
from ui.wiring import session_cap
from decoding.env import configure_torch_threads
from ui.worker import model_slot


def launch_kwargs() -> dict:
    """Theme and CSS (Gradio 6 takes them in `launch()`); the upload size limit: a replayed trace may
    have at most DECODING_LAB_MAX_UPLOAD_MB (default 5), Gradio refuses a larger file before it is stored;
    the session cap (`session_cap`); the export folder, which may lie outside the temp folder; and
    the keys of classroom mode (`ui.classroom`)."""
    return {"theme": theme(), "css_paths": [ASSETS / "app.css"], "max_file_size": upload_bytes(),
            "state_session_capacity": session_cap(), "allowed_paths": [str(export_dir())],
            "app_kwargs": guarded_app_kwargs(),  # per-client limits, the guarded session store (ui/guard.py)
            "js": KEYS_JS}  # classroom mode's keys


class Startup:
    """What the server is doing before it is ready (loading the default model), for the page's progress
    line. Process-wide, like the model cache it reports on; `line` is "" when nothing is under way."""

    def __init__(self):
        self.line, self.done = "", True

    def say(self, line: str, done: bool = False) -> None:
        self.line, self.done = line, done


STARTUP = Startup()


# A spinner drawn by CSS (assets/app.css), not an emoji: Debian's Chromium has no emoji font and drew "⏳" as a box
SPINNER = '<span class="dl-spinner" role="progressbar" aria-label="loading"></span>'


def startup_line() -> tuple[str, bool]:
    """(the page's progress line as Markdown, whether there is more to come)."""
    line = md_esc(STARTUP.line)
    return (line if STARTUP.done else f"{SPINNER} {line}"), not STARTUP.done


def preload_default_model() -> threading.Thread | None:
    """Load and warm up the default model in the background when the app starts, so the first
    user does not wait for it (set DECODING_LAB_PRELOAD=0 to skip). A request that arrives
    meanwhile waits on the same load (the model cache loads each model once). `STARTUP` says what
    it is doing, and the page shows it."""
    if os.environ.get("DECODING_LAB_PRELOAD", "1").strip() in {"0", "false", "no"}:
        return None
    STARTUP.say(f"Loading {DEFAULT_MODEL}… (a run started now waits for it)")
    started = time.perf_counter()

    def warm() -> None:
        try:
            loaded = load_model(DEFAULT_MODEL, progress=STARTUP.say)  # "Dequantising …", "Loaded …"
            STARTUP.say(f"Warming up {DEFAULT_MODEL}…")
            with model_slot():  # a request arriving now waits for this one forward
                for _ in generate(loaded, "Hello", max_new_tokens=1):  # first forward pays one-off kernel set-up
                    pass
            dtype = str(loaded.dtype).removeprefix("torch.")
            STARTUP.say(f"{DEFAULT_MODEL} ready ({dtype} on {loaded.device}; loaded and warmed up in "
                        f"{time.perf_counter() - started:.0f} s).", done=True)
            print(STARTUP.line, flush=True)  # in the server's log too (tests/ui/test_browser_startup.py times it)
        except Exception as err:  # noqa: BLE001 - a failed preload is reported; requests will show the error
            STARTUP.say(f"Loading {DEFAULT_MODEL} failed: {err}", done=True)
            print(f"preload of {DEFAULT_MODEL} failed: {err}", flush=True)

    thread = threading.Thread(target=warm, name="preload", daemon=True)
    thread.start()
    return thread


def startup_progress(blocks: gr.Blocks) -> None:
    """The page's progress line under the header while the default model loads: read when a page
    opens, then polled every second until the model is ready (hidden when nothing loads)."""
    box = gr.Markdown(visible=False, elem_id="dl-startup")
    timer = gr.Timer(1.0, active=False)

    def show():
        line, loading = startup_line()
        return gr.update(value=line, visible=bool(line)), gr.Timer(active=loading)

    quiet = dict(show_progress="hidden", api_visibility="undocumented", concurrency_limit=None)  # not the model queue
    blocks.load(show, None, [box, timer], **quiet)
    timer.tick(show, None, [box, timer], **quiet)


def queued(blocks: gr.Blocks) -> gr.Blocks:
    """The app's queue: bounded (DECODING_LAB_QUEUE_SIZE), one event at a time by default."""
    quiet_refusals(blocks)  # an out-of-range value sent straight to an endpoint: refused without a log traceback
    return blocks.queue(max_size=queue_size(), default_concurrency_limit=1)


def standalone(build: Callable[[], None], title: str) -> gr.Blocks:
    """One tab as an app of its own, queued like the full app."""
    with gr.Blocks(title=title, delete_cache=gradio_cache_policy()) as blocks:
        build()
    return queued(blocks)


def serve(blocks: gr.Blocks) -> None:
    """What `python app.py` (or one tab's module) does: set torch threads, sweep old exports, start loading
    the default model in the background (while Gradio starts its server: reading the converted copy is
    mostly file reads), launch; the page's progress line says how far the load is."""
    configure_torch_threads()
    sweep()
    preload_default_model()
    blocks.launch(prevent_thread_lock=True, **launch_kwargs())
    blocks.block_thread()
