"""What every tab shares: settings from the environment, the ZeroGPU decorator, the worker thread
that streams a run, redraw throttling, engine errors as `gr.Error`, and the launch options.

Glossary
    work      `work(emit, should_stop)`: loads a model and iterates `decoding.run.generate` in a
              worker thread, `emit`ting each event (and `Status` lines while a model loads).
    pump      `stream_in_thread(work)`: a generator over batches of what `work` emitted. Closing
              it sets `should_stop`, which every strategy asks before each model call, and then
              WAITS for the worker to end (within one model call; at most STOP_WAIT_S). Its last
              events (RunFinished "cancelled") still reach the trace via `on_late`.
    stop      how Stop (or `POST /cancel`, or a lost client) reaches the worker: Gradio cancels the
              event's task. Model-bound events run through `model_event`, an async generator that
              drives the callback's generator in threads; the cancel lands in it at once, sets the
              request's cancel flag (the worker's `should_stop` and the pump both watch it), lets
              the callback's step under way return, closes the callback (so the pump, which waits
              for its worker) and only then lets the cancel go on. Gradio frees the queue's model
              slot after that: the slot is released when the compute has stopped, and `/cancel`
              answers within one model call.
    slot      one of `model_concurrency()` places for a computing run (`model_slot`, first come first
              served), held by the worker while it loads and computes, never while the figures are
              drawn. Gradio's queue group (`MODEL_CONCURRENCY_ID`) lets `runs_at_once()` model-bound
              events in at once, so one run's drawing overlaps the next run's compute; a run whose
              worker outlived STOP_WAIT_S still blocks the next.
    redraw    rebuilding the figures from the growing Trace; `Redraw` decides by wall clock when
              (at most ~5 per second, and never more than REDRAW_BUDGET of the time).
    quick     the cheap views (token chips, the diffusion canvas, the particles of a step under way),
              sent for every batch of new events or StepProgress, ahead of and apart from redraws.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import math
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.contracts import StepProgress
from decoding.embedded import EmbeddedModelError
from decoding.env import env_int
from decoding.events import BeamStep, DiffusionStep, Event, ParticleStep, TokenStep, Trace, stats
from decoding.errors import short_repr
from decoding.models import (DEFAULT_MODEL, REGISTRY, TINY_MODEL, ModelLoadError, load_model, pick_device, pick_dtype,
                             resolve_spec)
from decoding.run import MAX_NEW_TOKENS_CAP, generate
from decoding.trace_checks import upload_bytes
from ui.exports import export_dir, gradio_cache_policy, sweep
from ui.classroom import KEYS_JS, lesson_line, lesson_step
from ui.guard import BudgetExceeded, guarded_app_kwargs, queue_size, quiet_refusals, replay_budget_s, within_budget
from visualizers._common import esc

ASSETS = Path(__file__).resolve().parents[1] / "assets"
REDRAWS_PER_S = 5.0  # upper bound on live redraws
REDRAW_BUDGET = 0.08  # share of wall time redraws may take (slow redraws are spaced out further): drawing
# shares the GIL with the decoding thread, so this is roughly what live views cost in speed
MODEL_CONCURRENCY_ID = "model"  # every model-bound event shares this queue slot
STOP_WAIT_S = 30.0  # closing a run waits at most this long for its worker (which stops within one model call)


def model_concurrency() -> int:
    """How many model-bound runs execute at once (DECODING_LAB_CONCURRENCY, default 1)."""
    return env_int("DECODING_LAB_CONCURRENCY", 1)


def runs_at_once() -> int:
    """How many model-bound events Gradio processes at once (DECODING_LAB_RUNS_AT_ONCE, default
    `model_concurrency()` + 2). Only `model_concurrency()` of them compute (the compute slots, first come
    first served); the others draw their finished run, or wait for a slot saying how many runs are ahead.
    So drawing a large figure never holds the model: the next user's run computes meanwhile."""
    return max(model_concurrency(), env_int("DECODING_LAB_RUNS_AT_ONCE", model_concurrency() + 2))


class ComputeSlots:
    """`size` places for workers that compute, handed out first come, first served."""

    def __init__(self, size: int):
        self.size, self.busy, self.queue = size, 0, deque()
        self.cond = threading.Condition()

    def acquire(self, should_stop: Callable[[], bool], waiting: Callable[[int], None]) -> bool:
        """True once a slot is held; False when `should_stop` turned True while waiting (holding none).
        `waiting(ahead)` is called once, outside the lock, when the slot is not free at once."""
        with self.cond:
            if self.busy < self.size and not self.queue:
                self.busy += 1
                return True
            ticket = object()
            self.queue.append(ticket)
            ahead = self.busy + len(self.queue) - 1
        waiting(ahead)
        with self.cond:
            try:
                while not should_stop():
                    if self.queue[0] is ticket and self.busy < self.size:
                        self.queue.popleft()
                        self.busy += 1
                        return True
                    self.cond.wait(0.05)
                return False
            finally:
                if ticket in self.queue:
                    self.queue.remove(ticket)
                self.cond.notify_all()

    def release(self) -> None:
        with self.cond:
            self.busy -= 1
            self.cond.notify_all()


_SLOTS = ComputeSlots(model_concurrency())  # workers computing at once


@contextlib.contextmanager
def model_slot(should_stop: Callable[[], bool] = lambda: False, waiting: Callable[[int], None] = lambda ahead: None):
    """Hold one of the process's `model_concurrency()` compute slots; yields False (holding none) when
    `should_stop` turns True while waiting. `waiting(ahead)` is called once if the slot is not free at
    once, with the number of runs computing or waiting before this one."""
    acquired = _SLOTS.acquire(should_stop, waiting)
    try:
        yield acquired
    finally:
        if acquired:
            _SLOTS.release()


def waiting_line(ahead: int) -> str:
    return (f"Waiting for the model: {ahead} run{'s' * (ahead != 1)} ahead of this one "
            "(other users', or a stopped run finishing its model call)…")


def session_ttl_s() -> int:
    """How long a session's state (its traces) is kept after it was last set, in seconds
    (DECODING_LAB_SESSION_TTL_S, default one hour): a client that never comes back frees its memory."""
    return env_int("DECODING_LAB_SESSION_TTL_S", 3600)


def session_cap() -> int:
    """How many sessions the server keeps at most; beyond it the least recently used one is dropped
    (DECODING_LAB_SESSION_CAP, default 200)."""
    return env_int("DECODING_LAB_SESSION_CAP", 200)


def session_state(value=None) -> gr.State:
    """Per-user state of a tab, dropped `session_ttl_s()` after it was last set."""
    return gr.State(value, time_to_live=session_ttl_s())


def configure_torch_threads() -> int:
    """Give torch all cores but one (DECODING_LAB_TORCH_THREADS or OMP_NUM_THREADS override).

    The web server, the live redraws (and, on a laptop, the browser) need a core of their own:
    on a 2-core machine two busy intra-op threads plus that work oversubscribe the CPU and decoding
    slows several-fold. Called by the app's entry points, not on import.
    """
    import torch

    if os.environ.get("DECODING_LAB_TORCH_THREADS", "").strip():
        threads = env_int("DECODING_LAB_TORCH_THREADS", 1)
    elif os.environ.get("OMP_NUM_THREADS", "").strip():
        return torch.get_num_threads()
    else:
        threads = max(1, (os.cpu_count() or 1) - 1)
    torch.set_num_threads(threads)
    return threads


def auto_dtype_help() -> str:
    """What dtype "auto" means on this machine, for the dtype control's help line."""
    auto = str(pick_dtype("auto", pick_device())).removeprefix("torch.")
    return (f"auto is {auto} here: bfloat16 where this machine computes it natively (a GPU, or a CPU with "
            "AVX512-BF16/AMX), float32 otherwise; the tiny-* models stay float32. float32 gives exact, "
            "comparable text.")


def show_test_models() -> bool:
    return os.environ.get("DECODING_LAB_SHOW_TEST_MODELS", "").strip().lower() in {"1", "true", "yes", "on"}


def model_choices(kind: str = "causal") -> list[str]:
    """Registry models of `kind` the menu lists (tiny test models only with DECODING_LAB_SHOW_TEST_MODELS=1)."""
    names = [name for name, spec in REGISTRY.items() if spec.suggested and spec.kind == kind]
    if show_test_models() and kind == "causal" and TINY_MODEL not in names:
        names.append(TINY_MODEL)
    return names


def _zero_gpu_decorator() -> Callable:
    """`spaces.GPU` on a ZeroGPU Space, a no-op everywhere else (the package is never required)."""
    if os.environ.get("SPACES_ZERO_GPU", "").strip().lower() not in {"1", "true"}:
        return lambda fn: fn
    try:
        import spaces
    except ImportError:
        return lambda fn: fn
    return spaces.GPU


gpu = _zero_gpu_decorator()


_MARKDOWN = {c: f"&#{ord(c)};" for c in "[]()*_`~!|#\\"}  # what starts a link, an emphasis or a code span


def md_esc(value) -> str:
    """`value` as plain text inside Markdown (a status line): HTML-escaped, and the characters that make
    links, emphasis, headings or code written as character references, which Markdown shows as they are.
    A URL is not linked: its "://" and "www." are broken the same way."""
    text = esc(value, quote=False).translate(str.maketrans(_MARKDOWN))
    return text.replace("://", "&#58;//").replace("www.", "www&#46;")


def user_error(err: BaseException) -> gr.Error:
    """The engine's message for bad input or a model that cannot load, as a Gradio error toast."""
    return error_toast(str(err), "Cannot run this")


def error_toast(message: str, title: str) -> gr.Error:
    """A Gradio error toast. The toast renders HTML and the message may quote a file name or a value
    from an uploaded trace, so it is escaped (as text: quotes stay readable for API clients)."""
    return gr.Error(esc(message, quote=False), title=title, print_exception=False)


USER_ERRORS = (ValueError, ModelLoadError, EmbeddedModelError, OSError)


@dataclass(frozen=True)
class Status:
    """A progress line from the worker (model loading), shown in the status bar."""

    text: str


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_DONE = object()
WORKER_NAME = "decoding-run"  # the worker threads' name (tests count the live ones)
_CANCEL: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("decoding_lab_cancel", default=None)


class RequestCancelled(Exception):
    """Gradio cancelled the request (Stop, `POST /cancel`, a lost client): raised out of the pump so the
    callback ends at once; `model_event` expects it."""


def stream_in_thread(work: Callable[[Callable, Callable[[], bool]], None], *, wait_s: float = 0.1,
                     on_late: Callable[[object], None] | None = None,
                     stop_wait_s: float | None = None) -> Iterator[list]:
    """Run `work(emit, should_stop)` in a worker thread; yield lists of emitted items as they arrive.

    Yields an empty list when nothing arrived within `wait_s` (so callers can keep time) and re-raises
    the worker's exception; raises RequestCancelled once the request's cancel flag is set (the worker
    stops at its next model call). The worker computes holding a `model_slot`. Closing the generator sets
    `should_stop` and waits up to `stop_wait_s` (default STOP_WAIT_S) for the worker to end; whatever
    the worker emits after Stop (its RunFinished "cancelled") goes to `on_late`, so the caller's trace
    still ends properly, and is there when the close returns.
    """
    items: queue.SimpleQueue = queue.SimpleQueue()
    stop, lock = threading.Event(), threading.Lock()
    cancel = _CANCEL.get() or threading.Event()  # the request's cancel flag (`model_event`), if any

    def should_stop() -> bool:
        return stop.is_set() or cancel.is_set()

    def emit(item) -> None:
        with lock:
            if not stop.is_set():
                items.put(item)
            elif on_late is not None and not isinstance(item, _Failed) and item is not _DONE:
                on_late(item)

    def target():
        try:
            with model_slot(should_stop, lambda ahead: emit(Status(waiting_line(ahead)))) as held:
                if held:
                    work(emit, should_stop)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, which re-raises it
            emit(_Failed(err))
        finally:
            emit(_DONE)

    worker = threading.Thread(target=target, name=WORKER_NAME, daemon=True)
    worker.start()
    try:
        while True:
            if cancel.is_set():
                raise RequestCancelled("the request was cancelled")
            batch = []
            with contextlib.suppress(queue.Empty):
                item = items.get(timeout=wait_s)
                while True:
                    if item is _DONE:
                        if batch:
                            yield batch
                        return
                    if isinstance(item, _Failed):
                        raise item.error
                    batch.append(item)
                    item = items.get_nowait()
            yield batch
    finally:
        with lock:
            stop.set()
            while on_late is not None:  # emitted but not consumed yet
                try:
                    item = items.get_nowait()
                except queue.Empty:
                    break
                if item is not _DONE and not isinstance(item, _Failed):
                    on_late(item)
        # Stop is asked before every model call: the worker ends within one. Under `model_event`, Gradio
        # frees the queue slot only after this close returns, so the next run never starts beside this one.
        worker.join(STOP_WAIT_S if stop_wait_s is None else stop_wait_s)


_END = object()


def model_event(fn: Callable) -> Callable:
    """What a model-bound event runs: `fn`, a generator function (with ZeroGPU's decorator), as an async
    generator function that drives it one `next` per thread hop, so the event loop never waits on it.

    When Gradio cancels the event (Stop, `POST /cancel`), the cancel reaches this at once: the request's
    cancel flag is set (the worker stops before its next model call, the pump raises RequestCancelled),
    the `next` under way is let finish, `fn`'s generator is closed in a thread (closing a pump waits for
    its worker), and only then does the cancel go on, so Gradio frees the model slot after the compute
    has stopped. Items are passed through unchanged; `fn`'s signature is kept for Gradio to read."""
    if not inspect.isgeneratorfunction(fn):
        raise TypeError(f"model_event needs a generator function, got {fn!r}")
    fn = gpu(fn)

    @functools.wraps(fn)
    async def event(*args, **kwargs):
        cancel = threading.Event()
        context = contextvars.copy_context()  # Gradio's request context, plus this request's cancel flag
        context.run(_CANCEL.set, cancel)
        updates = context.run(fn, *args, **kwargs)  # a generator: none of its code runs yet
        loop = asyncio.get_running_loop()
        step, done = None, False
        try:
            while True:
                step = loop.run_in_executor(None, context.run, next, updates, _END)
                update = await asyncio.shield(step)  # a cancel interrupts the wait, not the thread
                step = None
                if update is _END:
                    done = True
                    return
                yield update
        finally:
            if not done:  # cancelled, closed by Gradio, or `fn` raised
                cancel.set()  # the worker stops before its next model call; the pump raises RequestCancelled
                if step is not None:
                    await _settled(step)
                await _settled(loop.run_in_executor(None, context.run, updates.close), check=True)

    return event


async def _settled(future: asyncio.Future, check: bool = False) -> None:
    """Wait for a thread's future to finish, also while this task is being cancelled (the wait is one
    model call at most); its outcome is re-raised only with `check` (a failing close is a bug)."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({future})
    if check:
        future.result()
    elif not future.cancelled():
        future.exception()  # retrieved: its error (RequestCancelled, or one already raised) is not news


def run_work(model: str, prompt: str, *, dtype: str = "auto", **generate_kwargs) -> Callable:
    """A `work` function: load `model` (emitting Status lines) and emit every event of `generate`, and
    the StepProgress of a long step (a scaling step's particles as they are sampled)."""

    def work(emit, should_stop):
        loaded = load_model(model, dtype=dtype, progress=lambda message: emit(Status(message)))
        if should_stop():
            return
        emit(Status(f"Generating with {loaded.name}…"))
        for event in generate(loaded, prompt, should_stop=should_stop, progress=emit, **generate_kwargs):
            emit(event)

    return work


def check_model(model: str) -> None:
    """Fail fast (ValueError) on a model name that is neither a registry name nor a hub id."""
    resolve_spec(model)


class Redraw:
    """Wall-clock throttle: `due()` at most `per_s` times a second, spaced so that drawing takes at most
    `budget` of the time (from a running mean of what `timed()` measured), but never more than
    `max_interval_s` apart, so a slow machine still shows the text growing."""

    def __init__(self, per_s: float = REDRAWS_PER_S, budget: float = REDRAW_BUDGET, max_interval_s: float = 1.0):
        self.min_interval, self.budget, self.max_interval = 1.0 / per_s, budget, max_interval_s
        self.last, self.cost = float("-inf"), 0.0

    def due(self) -> bool:
        interval = min(max(self.min_interval, self.cost / self.budget), self.max_interval)
        return time.perf_counter() - self.last >= interval

    @contextlib.contextmanager
    def timed(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.last = time.perf_counter()
            took = self.last - start
            self.cost = took if self.cost == 0.0 else 0.7 * self.cost + 0.3 * took


def bind(fn: Callable, outputs: dict[str, gr.components.Component],
         inputs: dict[str, gr.components.Component] | None = None) -> Callable:
    """Adapt a callback that returns / yields {output name: value} to Gradio's {component: value}.

    Without `inputs` the wrapper keeps `fn`'s signature (Gradio reads it for gr.EventData) and the
    event's inputs fill `fn`'s parameters in order. With `inputs` ({parameter name: component}) the
    event's inputs are `list(inputs.values())` and `fn` is called with keyword arguments by name, so
    a tab's parameter values never depend on the order of its widgets; a name `fn` cannot take is a
    TypeError here, when the tab is wired. Either way the wrapper closes `fn`'s generator when Gradio
    closes the wrapper's, so Stop reaches the worker thread.
    """

    def by_component(update: dict) -> dict:
        if not update:  # "change nothing": Gradio reads an empty dict as one value for all its outputs
            return {component: gr.skip() for component in outputs.values()}
        return {outputs[name]: value for name, value in update.items()}

    call, names = fn, None
    if inputs is not None:
        names = tuple(inputs)
        try:
            inspect.signature(fn).bind(**dict.fromkeys(names))
        except TypeError as err:
            raise TypeError(f"cannot wire {fn.__qualname__} to the inputs {', '.join(names)}: {err}") from None

        def call(*values):
            if len(values) != len(names):  # Gradio passes exactly the components it was given
                raise TypeError(f"{fn.__qualname__} expected {len(names)} input values ({', '.join(names)}), "
                                f"got {len(values)}")
            return fn(**dict(zip(names, values)))

    if inspect.isgeneratorfunction(fn):
        def wrapper(*args, **kwargs):
            with contextlib.closing(call(*args, **kwargs)) as updates:
                for update in updates:
                    yield by_component(update)
    else:
        def wrapper(*args, **kwargs):
            return by_component(call(*args, **kwargs))

    if names is None:
        return functools.wraps(fn)(wrapper)
    # By name: Gradio must see a plain `*values` signature, not `fn`'s keyword parameters.
    functools.update_wrapper(wrapper, fn, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
    del wrapper.__wrapped__
    wrapper.__signature__ = inspect.Signature([inspect.Parameter("values", inspect.Parameter.VAR_POSITIONAL)])
    return wrapper


def named_inputs(*groups: dict[str, gr.components.Component]) -> dict[str, gr.components.Component]:
    """Merge {parameter name: component} groups into one `inputs` dict for `bind`. A name in two groups
    (e.g. a method parameter named like one of the tab's own controls) is a TypeError naming it."""
    merged: dict = {}
    for group in groups:
        taken = merged.keys() & group.keys()
        if taken:
            raise TypeError(f"the input name(s) {', '.join(sorted(taken))} are given twice: a method parameter "
                            "cannot share its name with one of the tab's own controls")
        merged |= group
    return merged


def theme() -> gr.themes.Base:
    """System fonts only: the page loads nothing from outside hosts (offline classrooms, CI)."""
    return gr.themes.Soft(primary_hue="indigo", secondary_hue="orange", neutral_hue="slate",
                          font=["ui-sans-serif", "system-ui", "Segoe UI", "Helvetica", "Arial", "sans-serif"],
                          font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])


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


def startup_line() -> tuple[str, bool]:
    """(the page's progress line as Markdown, whether there is more to come)."""
    line = md_esc(STARTUP.line)
    return (line if STARTUP.done else f"⏳ {line}"), not STARTUP.done


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


def wait_for_finish(trace, wait_s: float) -> bool:
    """After Stop: wait up to `wait_s` for the cancelled run's worker to record its RunFinished.
    True when the run ended because it was cancelled (False: finished on its own, or still going)."""
    deadline = time.monotonic() + wait_s
    while trace.finish is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return trace.finish is not None and trace.finish.stop_reason == "cancelled"


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
    """What `python app.py` (or one tab's module) does: set torch threads, sweep old exports, preload, launch."""
    configure_torch_threads()
    sweep()
    blocks.launch(prevent_thread_lock=True, **launch_kwargs())  # the page first: the model loads behind it
    preload_default_model()  # in the background; the page's progress line says how far it is
    blocks.block_thread()


__all__ = ["DEFAULT_MODEL", "USER_ERRORS", "Redraw", "Status", "auto_dtype_help", "bind", "check_model",
           "configure_torch_threads",
           "error_toast", "gpu", "launch_kwargs", "md_esc", "model_choices", "model_concurrency", "model_event", "model_slot",
           "runs_at_once", "named_inputs", "preload_default_model", "startup_progress", "queue_size", "queued", "run_work",
           "serve", "session_cap",
           "session_state", "session_ttl_s", "standalone", "stream_in_thread", "user_error", "wait_for_finish"]


def benchmark_file(path, command: str, model: str, figure: Callable[[dict], object]) -> tuple[dict | None, object,
                                                                                         str | None]:
    """(the benchmark's JSON, its figure, None) from a shipped benchmark file that a lab's accordion
    shows, or (None, None, Markdown saying why not and how to produce it) for a missing or
    unreadable file (read when the tab is built; a bad file never stops the app)."""
    path = Path(path)
    how = f"Produce it with\n\n```\n{command}\n```\n\nand restart the app."
    if not path.exists():
        return None, None, f"No benchmark has been run for {model} on this machine yet (`{path.name}` is missing). {how}"
    try:
        bench = json.loads(path.read_text(encoding="utf-8"))
        return bench, figure(bench), None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        return None, None, f"`{path.name}` cannot be read ({esc(str(err)[:200], quote=False)}). {how}"


# Sliders: a number typed past a slider's end ----------------------------------------------------------
# The browser sets a number typed into a slider's box beyond its ends to the nearest end when the box
# loses focus, without a word; a run would then use another value than the one typed. Its `release`
# event carries the typed number, so the server can say what was changed. (The event takes no input:
# Gradio may read the slider before the browser has set it back, and refuse the typed number with a
# traceback in the log.)
MAX_NEW_TOKENS_SPEC = {"name": "max_new_tokens", "low": 1, "high": MAX_NEW_TOKENS_CAP,
                       "range": f"[1, {MAX_NEW_TOKENS_CAP}]"}


def clamp_message(label: str, typed, low: float, high: float, hint: str = "") -> str | None:
    """What the browser did to `typed` in a slider from `low` to `high`, or None when it kept it; `hint`
    says where more fits."""
    if not isinstance(typed, (int, float)) or isinstance(typed, bool) or low <= typed <= high:
        return None
    end, value = ("maximum", high) if typed > high else ("minimum", low)
    return f"{label}: {typed:g} is beyond this slider's {end}, so it was set to {value:g}." + (f" {hint}" if hint else "")


def range_hint(spec: dict | None, low: float, high: float) -> str:
    """For a slider from `low` to `high` over a parameter `spec` (a `decoding.params.describe` row): where
    the rest of the allowed range is, or "" when the slider reaches both of its ends."""
    if spec is None or (spec["low"] >= low and spec["high"] <= high):
        return ""
    return f"`{spec['name']}` allows {spec['range']} through the API and the CLI."


def slider_range_text(spec: dict, low: float, high: float) -> str:
    """The range a slider's info may claim: the allowed one when the slider reaches it, else the slider's own."""
    if not range_hint(spec, low, high):
        return f"Allowed: {spec['range']}."
    return f"This slider: {low:g} to {high:g} (allowed {spec['range']} through the API and the CLI)."


def explain_clamping(c: dict, specs: dict[str, dict | None]) -> None:
    """Wire the sliders of a tab (`c`, widgets by name) named in `specs` ({name: parameter spec or None}),
    and Max new tokens, to warn when the browser changed a typed number; a spec adds where the rest of the
    parameter's allowed range is. Only sliders whose ends never change: the warning names the end."""
    specs = {"max_new_tokens": MAX_NEW_TOKENS_SPEC} | specs
    for key, spec in specs.items():
        widget = c.get(key)
        if isinstance(widget, gr.Slider):
            low, high = widget.minimum, widget.maximum
            widget.release(_clamp_warning(widget.label or key, low, high, range_hint(spec, low, high)), None, None,
                           **QUIET)


def _clamp_warning(label: str, low: float, high: float, hint: str) -> Callable:
    def warn(evt: gr.EventData) -> None:
        message = clamp_message(label, getattr(evt, "_data", None), low, high, hint)
        if message:
            gr.Warning(esc(message, quote=False))

    return warn


def seed_box(elem_id: str) -> gr.Number:
    """The Seed box. It has no `minimum`: Gradio refuses a value below it before any callback runs and logs
    a traceback for it; the engine refuses a negative seed itself, with the allowed range, as a toast."""
    return gr.Number(0, label="Seed", precision=0, elem_id=elem_id, scale=1, min_width=90)


def lab_columns(c: dict, controls: Callable[[dict], None], views: Callable[[dict], None], elem_id: str) -> None:
    """A lab tab's layout: controls on the left, views on the right (each fills `c` by name)."""
    with gr.Row(equal_height=False, elem_id=elem_id):
        with gr.Column(scale=4, min_width=330, elem_classes="dl-controls"):
            controls(c)
        with gr.Column(scale=9, elem_classes="dl-views"):
            views(c)



QUIET = dict(show_progress="hidden", api_visibility="undocumented")  # quick view updates, not in the API page


def wire_lesson(c: dict, lab: str, chosen, chosen_outputs: list) -> None:
    """Next / Previous choose a preset, then `chosen` (the tab's preset callback, Gradio-bound, from
    the preset's name to `chosen_outputs`) sets the controls as a hand-picked preset does; choosing
    one by hand moves the lesson line too."""
    if "lesson_next" not in c:
        return
    outputs = {k: c[k] for k in ("preset", "lesson")}
    for button, direction in ((c["lesson_next"], 1), (c["lesson_prev"], -1)):
        step = bind(lambda name, d=direction: lesson_step(lab, name, d), outputs)
        button.click(step, c["preset"], list(outputs.values()), **QUIET).then(chosen, c["preset"], chosen_outputs,
                                                                               **QUIET)
    c["preset"].input(lambda name: lesson_line(lab, name), c["preset"], c["lesson"], **QUIET)


def wire_lab(c: dict, cb, outputs: dict, state: list, run_inputs: dict, controls: tuple, lab: str = "") -> dict:
    """The events every lab tab wires the same way: the preset menu, Generate (in the shared model
    queue), Stop (cancel, then show what ran) and the replay upload. `cb` is the tab's callbacks
    module (preset_chosen, generate_run, stop_run, replay); `c` its widgets by name; `run_inputs`
    {parameter name of `cb.generate_run`: component}, passed by name (see `bind`). Returns the events
    that leave new views ({"generate", "stop", "upload"}), for a tab to chain a view of its own with `.then`."""
    preset_outputs = {k: c[k] for k in controls + ("note",)}
    chosen = bind(cb.preset_chosen, preset_outputs)
    c["preset"].input(chosen, c["preset"], list(preset_outputs.values()), **QUIET)
    wire_lesson(c, lab, chosen, list(preset_outputs.values()))  # classroom mode's Next / Previous
    run = c["generate"].click(model_event(bind(cb.generate_run, outputs, run_inputs)), list(run_inputs.values()),
                              list(outputs.values()), concurrency_id=MODEL_CONCURRENCY_ID,
                              concurrency_limit=runs_at_once(),
                              show_progress="minimal", show_progress_on=[c["status"]], api_visibility="undocumented")
    # Cancel first (`model_event`: it returns once the worker has stopped), then show the result.
    stopped = c["stop"].click(None, cancels=[run], api_visibility="undocumented").then(
        bind(cb.stop_run, outputs), state, list(outputs.values()), **QUIET)
    replay_outputs = outputs | {k: c[k] for k in controls}
    uploaded = c["upload"].upload(bind(cb.replay, replay_outputs), [c["upload"]] + state,
                                  list(replay_outputs.values()), **QUIET)
    return {"generate": run, "stop": stopped, "upload": uploaded}


def load_replay(path, lab: str, what: str, accepts: Callable, render: Callable,
                hint: str = "replay it in the tab it came from."):
    """(trace, its rendered views, file name) of an uploaded trace a lab tab can show, None without a
    file; a gr.Error naming the problem for an unreadable file, another lab's run (`accepts` says
    no) or malformed `what` (rendering fails)."""
    from decoding.events import Trace

    if not path:
        return None
    name = Path(path).name
    try:
        loaded = Trace.load(path)
    except (ValueError, OSError, TypeError, KeyError, AttributeError) as err:
        raise error_toast(f"Cannot replay {name}: {err}", "Not a Decoding Lab trace") from None
    if not accepts(loaded):
        raise error_toast(f"Cannot replay {name}: it is a {short_repr(loaded.start.strategy, 80)} run without "
                          f"{what}; {hint}", f"Not a {lab} trace")
    budget = replay_budget_s()
    try:
        shown = within_budget(lambda: render(loaded), budget)  # stops drawing (and its CPU) at the budget
    except BudgetExceeded:
        raise error_toast(f"Cannot replay {name}: drawing it took longer than {budget} s, the limit for a "
                          "replay (DECODING_LAB_REPLAY_BUDGET_S)", "Replay too large") from None
    except RENDER_ERRORS as err:  # a consistent trace never gets here (decoding/trace_checks.py); a last guard
        raise error_toast(f"Cannot replay {name}: malformed {what} ({type(err).__name__}: {str(err)[:300]})",
                          "Not a Decoding Lab trace") from None
    return loaded, shown, name


RENDER_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, ArithmeticError, RecursionError)


# The tabs' shared skeleton: number formatting, stat cards, streaming a run into views --------------
EMPTY_STATS_HTML = '<div class="dl-stats dl-stats-empty">Statistics appear here once a run starts.</div>'


def as_int(value):
    """Sliders and number boxes may deliver 64.0; the engine wants an int (and reports anything else)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def check_names(given: dict, expected, what: str) -> None:
    """ValueError naming any value in `given` whose name is not `expected`, or an expected name without a
    value (a widget the tab did not wire, or a caller's typo); `what` says whose parameters they are."""
    unknown = [name for name in given if name not in expected]
    if unknown:
        raise ValueError(f"unknown {what} parameter{'s' * (len(unknown) > 1)} "
                         f"{', '.join(f'`{n}`' for n in unknown)}; the known ones are {', '.join(expected)}")
    missing = [name for name in expected if name not in given]
    if missing:
        raise ValueError(f"no value for the {what} parameter{'s' * (len(missing) > 1)} "
                         f"{', '.join(f'`{n}`' for n in missing)}")


def fmt(value, digits: int = 2, unit: str = "") -> str:
    """A statistic for a card: "–" when missing, numbers with `digits` decimals, anything else as text."""
    if value is None:
        return "–"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.{digits}f}{unit}"
    return str(value)


def stat_cards_html(cards: list[tuple[str, object]], caption: str) -> str:
    """One row of (label, value) cards under a caption; every value is escaped. A value in words ("end token")
    gets the class `w`: a smaller font that wraps, where a number stays large."""
    body = "".join(f'<div class="dl-stat"><div class="v{" w" * any(ch.isalpha() for ch in str(v))}">{esc(v)}</div>'
                   f'<div class="k">{esc(k)}</div></div>' for k, v in cards)
    return f'<div class="dl-stats"><div class="dl-caption">{esc(caption)}</div><div class="dl-cards">{body}</div></div>'


def stream_views(work, trace: Trace, render, what: str, quick=None) -> Iterator[dict]:
    """Append the worker's events to `trace` and stream views of it: `quick(progress)` (the cheap ones,
    e.g. the token chips) as soon as new events or a StepProgress arrive (`progress`: the step under way,
    None once its event is in), `render()` (every view, charts included) when `Redraw` says a redraw is
    due. Each comes with a status line. Without `quick`, only `render()` is shown.

    The quick update goes out first and the full one as a later yield, so a slow chart never holds
    back the tokens: Gradio sends each yield before the next is computed."""
    redraw, status, dirty, progress = Redraw(), None, False, None
    try:
        late = lambda item: trace.append(item) if isinstance(item, Event) else None  # after Stop
        with contextlib.closing(stream_in_thread(work, on_late=late)) as pump:  # closed (so waited for) on Stop
            for batch in pump:
                news = False
                for item in batch:
                    if isinstance(item, Status):
                        status = item.text
                    elif isinstance(item, StepProgress):
                        progress, news = item, True
                    else:
                        trace.append(item)
                        progress, news, dirty = None, True, True
                if news and quick is not None:
                    yield quick(progress) | {"status": _live_status(trace, status, what, progress)}
                elif batch and not dirty:  # a progress line (model loading) before any event
                    yield {"status": _live_status(trace, status, what, progress)}
                if dirty and redraw.due():
                    dirty = False
                    with redraw.timed():
                        update = render()
                    yield update | {"status": _live_status(trace, status, what, progress)}
    except USER_ERRORS as err:
        raise user_error(err) from None


def _live_status(trace: Trace, status: str | None, what: str, progress: StepProgress | None = None) -> str:
    count = sum(isinstance(e, (TokenStep, BeamStep, ParticleStep, DiffusionStep)) for e in trace.events)
    sampling = f" Sampling step {progress.step + 1}: {progress.tokens_spent} tokens so far." if progress else ""
    return md_esc(status or "Working…") + (f" {count} {what} so far." if count else "") + sampling


def finished_status(trace: Trace, what: str) -> str:
    s = stats(trace)
    return (f"**{what}**: {s['num_tokens']} tokens in {s['elapsed_s']:.1f} s ({fmt(s['tokens_per_s'], 1)} tokens/s), "
            f"stopped by {md_esc(s['stop_reason'].replace('_', ' '))}.")


def spec_widget(spec: dict, *, label: str | None = None, elem_id: str | None = None, visible: bool = True,
                value=None, ui_max: float = 100.0):
    """A widget for one parameter from its spec row (`decoding.params.describe`): a checkbox for a
    bool, a radio for choices, a model menu for a model id, a slider for a bounded number (stopping at the
    spec's `ui_high` hint, else at `ui_max` for an unbounded end; its `step` hint), a number box otherwise,
    a textbox for text. The label is `label`, the spec's `label` hint, or its name."""
    value = spec["default"] if value is None else value
    kw = dict(label=label or spec.get("label") or spec["name"].replace("_", " "), info=spec["help"], visible=visible,
              elem_id=elem_id)
    if spec["type"] == "bool":
        return gr.Checkbox(value, **kw)
    if spec.get("choices"):
        return gr.Radio(list(spec["choices"]), value=value, **kw)
    if spec["type"] == "str" and (spec.get("range") or "").endswith("name or hub id"):  # a model: the menu or any id
        kind = "diffusion" if spec["range"].startswith("diffusion") else "causal"
        return gr.Dropdown(model_choices(kind), value=value or None, allow_custom_value=True, **kw)
    if spec["type"] in ("int", "float"):
        low, high = spec["low"], spec["high"]
        if (not spec["interval"] and not spec.get("ui_high")) or low == float("-inf"):
            return gr.Number(value, precision=0 if spec["type"] == "int" else None, **kw)
        high = min(high, spec.get("ui_high") or max(ui_max, low + 1))
        step = spec.get("step") or (1 if spec["type"] == "int" else round((high - low) / 100, 6) or 0.01)
        if spec.get("step"):  # the slider's marks are multiples of the step: start at the first allowed one
            low = math.ceil(low / step - 1e-9) * step
        if not spec.get("low_inclusive", True) and low == spec["low"]:  # (0, 1]: the slider starts one step in
            low = low + step
        return gr.Slider(low, high, value=value, step=step, **kw)
    return gr.Textbox(value, max_lines=1, **kw)
