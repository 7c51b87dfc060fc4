"""The worker that streams a run: compute slots, the worker thread and its pump, the async bridge that
makes Stop stop compute, redraw throttling and the live status line.

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
              drawn. A run of a batched strategy (greedy, sampling, ...: `StrategyInfo.batched`) holds
              none of its own: it joins its model's batch (`decoding.batching`), which holds one slot
              for all its members and drains when another run waits for one. Gradio's queue group
              (`MODEL_CONCURRENCY_ID`) lets `runs_at_once()` model-bound events in at once, so one
              run's drawing overlaps the next run's compute; a run whose worker outlived STOP_WAIT_S
              still blocks the next.
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
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)

from decoding.contracts import StepProgress
from decoding.env import env_int
from decoding.events import BeamStep, DiffusionStep, Event, ParticleStep, TokenStep, Trace, stats
from decoding.batching import batch_member
from decoding.loaded_model import LoadedModel
from decoding.models import CACHE, load_model, model_kind, resolve_spec
from decoding.registry import STRATEGIES
from decoding.remote.source import is_remote
from ui.batch_switch import batching
from decoding.contracts import Cancelled
from decoding.lm import PREFILL_STOP
from decoding.run import RUN_CLOCK, RUN_TIME_LIMIT, TimeLimit, generate
from ui.widgets import USER_ERRORS, failed_line, fmt, md_esc, user_error


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

    def waiting_count(self) -> int:
        """How many wait for a slot now (the batch admits no new member while someone does)."""
        with self.cond:
            return len(self.queue)

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


def slot_hold(emit: Callable, should_stop: Callable[[], bool]):
    """A `work`'s default hold: one compute slot, saying how many runs are ahead while it waits."""
    return model_slot(should_stop, lambda ahead: emit(Status(waiting_line(ahead))))


def waiting_line(ahead: int) -> str:
    return (f"Waiting for the model: {ahead} run{'s' * (ahead != 1)} ahead of this one "
            "(other users', or a stopped run finishing its model call)…")


def _zero_gpu_decorator() -> Callable:
    """`spaces.GPU` on a ZeroGPU Space, a no-op everywhere else (the package is never required).

    On any Space with the `spaces` package, its auto-wrap of every Gradio event in `spaces.GPU` (which Gradio
    applies when a Space sets SPACES_GRADIO_AUTO_WRAP) is switched off before a tab is built: `model_event`
    puts `spaces.GPU` on exactly the events that compute with a model, so a view update, a preset or an
    export never waits for a GPU, and the async generators Gradio runs are not functions `spaces.GPU` takes."""
    zero_gpu = os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in {"1", "true"}
    if not zero_gpu and os.environ.get("SYSTEM") != "spaces":
        return lambda fn: fn
    try:
        import spaces
    except ImportError:
        return lambda fn: fn
    disable = getattr(spaces, "disable_gradio_auto_wrap", None)
    if callable(disable):
        disable()
    return spaces.GPU if zero_gpu else (lambda fn: fn)


gpu = _zero_gpu_decorator()


@dataclass(frozen=True)
class Status:
    """A progress line from the worker (model loading), shown in the status bar."""

    text: str


@dataclass(frozen=True)
class LimitReached:
    """The worker's run reached the app's time limit (`run_limit_s`, counted from when it took the model) and was
    stopped there: the last item a worker emits then, for a view to say so (`limit_line`)."""

    limit_s: float


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

    limit = run_limit_s()
    hold = getattr(work, "hold", slot_hold)  # what the run computes under: a compute slot, or its model's batch

    def target():
        try:
            with hold(emit, should_stop) as held:
                if held:  # the run's clock starts now: loading, preparing and computing all count
                    limited = TimeLimit(should_stop, limit)
                    RUN_TIME_LIMIT.set(limit)  # this thread's runs (its own context): `generate` stops them there,
                    RUN_CLOCK.set(limited.started)  # counted from the same moment, and says it was the limit
                    PREFILL_STOP.set(limited)  # a long prefill asks it between chunks
                    try:
                        work(emit, limited)  # any other work (Serving, speech) asks it before each model call
                    except Cancelled:  # a prefill found it set
                        pass
                    if limited.reached:
                        emit(LimitReached(limit))
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

    requested = time.perf_counter()  # the click: the run's first token is counted from here too (`waited_s`)
    member: dict = {}  # a batched run's model and its place in the model's batch (`batch_hold`)

    def work(emit, should_stop):
        loaded = member.get("loaded") or load_model(model, dtype=dtype, progress=lambda message: emit(Status(message)))
        if should_stop():
            return
        emit(Status(f"Generating with {loaded.name}…"))
        for event in generate(member.get("lm") or loaded, prompt, should_stop=should_stop, progress=emit,
                              waited_s=time.perf_counter() - requested, **generate_kwargs):
            emit(event)

    strategy = STRATEGIES.get(generate_kwargs.get("strategy", "greedy"))
    if strategy is not None and strategy.batched and not is_remote(model) and batching():
        work.hold = functools.partial(batch_hold, model, dtype, member)
    return work


@contextlib.contextmanager
def batch_hold(model: str, dtype: str, member: dict, emit: Callable, should_stop: Callable[[], bool]):
    """A batched run's hold: its model (the loaded one at once; else loaded holding a compute slot, as any run loads
    it), then a place in the model's batch (`decoding.batching`), which holds one compute slot for all its members.
    `member` gets "loaded" and "lm" (the run's `BatchedLM`). A model that is not a causal LM holds a slot instead."""
    name = resolve_spec(model).name
    if any(key[0] == name for key in CACHE.keys()):
        loaded = load_model(model, dtype=dtype, progress=lambda message: emit(Status(message)))
    else:
        with slot_hold(emit, should_stop) as held:
            loaded = load_model(model, dtype=dtype, progress=lambda message: emit(Status(message))) if held else None
    if loaded is None:
        yield False
        return
    member["loaded"] = loaded
    if not isinstance(loaded, LoadedModel) or model_kind(loaded) != "causal":
        with slot_hold(emit, should_stop) as held:
            yield held
        return
    with batch_member(loaded, should_stop, lambda ahead: emit(Status(waiting_line(ahead))), slots=_SLOTS) as lm:
        member["lm"] = lm
        yield lm is not None


QUEUED_LOAD_WAIT_S = 30.0  # how long a preview or a replay waits for the model slot to load a model


def load_queued(model: str, wait_s: float = QUEUED_LOAD_WAIT_S):
    """A model for work outside a run (a document preview, a replay's marks): the loaded one at once when it is
    loaded; otherwise loaded holding a compute slot, as a run loads it (so in turn with the runs, and within the
    model cache's memory budget). ValueError when no slot came free within `wait_s`."""
    name = resolve_spec(model).name
    if any(key[0] == name for key in CACHE.keys()):
        return load_model(model, progress=None)
    deadline = time.monotonic() + wait_s
    with model_slot(lambda: time.monotonic() > deadline) as held:
        if not held:
            raise ValueError(f"{name} is not loaded and the model is busy with other runs; try again in a moment")
        return load_model(model, progress=None)


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


def wait_for_finish(trace, wait_s: float) -> bool:
    """After Stop: wait up to `wait_s` for the cancelled run's worker to record its RunFinished.
    True when the run ended because it was cancelled (False: finished on its own, or still going)."""
    deadline = time.monotonic() + wait_s
    while trace.finish is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return trace.finish is not None and trace.finish.stop_reason == "cancelled"


def pump_views(work, take: Callable, render: Callable, line: Callable, quick: Callable | None = None,
               on_late: Callable | None = None, status_key: str = "status") -> Iterator[dict]:
    """Run `work` in a thread and stream views of what it makes: each item goes to `take(item)` (True when it
    changed what is shown); `quick(progress)` (the cheap views, e.g. token chips) goes out as soon as
    something new or a StepProgress arrives (`progress`: the step under way, None once its event is in),
    `render()` (every view, charts included) when `Redraw` says a redraw is due, each with the status line
    `line(status, progress)` under `status_key`. Without `quick`, only `render()` is shown.

    A step's progress is shown before its event even when both arrive in one batch (a loaded machine
    batches them), so every reported step's sampling is seen once. The quick update goes out first and the
    full one as a later yield, so a slow chart never holds back the tokens: Gradio sends each yield before
    the next is computed. Stop closes this generator, which closes (and so waits for) the worker."""
    redraw, status, dirty, progress, shown = Redraw(), None, False, None, True
    with contextlib.closing(stream_in_thread(work, on_late=on_late)) as pump:
        for batch in pump:
            news = False
            for item in batch:
                if isinstance(item, Status):
                    status = item.text
                elif isinstance(item, StepProgress):
                    progress, news, shown = item, True, False
                else:
                    if not shown and quick is not None:  # the step's progress, not yet seen, before its event
                        shown = True
                        yield quick(progress) | {status_key: line(status, progress)}
                    if take(item):
                        progress, news, dirty, shown = None, True, True, True
            if news and quick is not None:
                shown = True
                yield quick(progress) | {status_key: line(status, progress)}
            elif batch and not news:  # a progress line (model loading), or a status without new events
                yield {status_key: line(status, progress)}
            if dirty and redraw.due():
                dirty = False
                with redraw.timed():
                    update = render()
                yield update | {status_key: line(status, progress)}


def stream_views(work, trace: Trace, render, what: str, quick=None) -> Iterator[dict]:
    """`pump_views` into one trace: the worker's events are appended to `trace` (also those that arrive after
    Stop), and the status line counts its steps of `what`."""

    def take(item) -> bool:  # while the run streams, and for what arrives after Stop
        if isinstance(item, Event):
            trace.append(item)
            return True
        return False

    try:
        yield from pump_views(work, take, render, lambda status, progress: _live_status(trace, status, what, progress),
                              quick, on_late=take)
    except USER_ERRORS as err:
        yield {"status": failed_line(err)}  # the reason in the status line too, not only in the toast
        raise user_error(err) from None


def _live_status(trace: Trace, status: str | None, what: str, progress: StepProgress | None = None) -> str:
    count = sum(isinstance(e, (TokenStep, BeamStep, ParticleStep, DiffusionStep)) for e in trace.events)
    sampling = f" Sampling step {progress.step + 1}: {progress.tokens_spent} tokens so far." if progress else ""
    return md_esc(status or "Working…") + (f" {count} {what} so far." if count else "") + sampling


def finished_status(trace: Trace, what: str) -> str:
    s = stats(trace)
    return (f"**{what}**: {s['num_tokens']} tokens in {s['elapsed_s']:.1f} s ({fmt(s['tokens_per_s'], 1)} tokens/s), "
            f"stopped by {md_esc(s['stop_reason'].replace('_', ' '))}.{limit_note(trace)}")


def run_limit_s() -> float | None:
    """The longest one run of the app may compute, in seconds (DECODING_LAB_RUN_LIMIT_S; 0: no limit). Default: 600
    on a Hugging Face Space (`SPACE_ID` set), so one visitor's run cannot hold the model for hours; no limit
    elsewhere (a classroom's own machine)."""
    return float(env_int("DECODING_LAB_RUN_LIMIT_S", 600 if os.environ.get("SPACE_ID") else 0, low=0)) or None


def limit_line(limit_s: float | None) -> str:
    """The sentence for a run that the time limit ended ("" without one)."""
    return (f" It reached the app's limit of {limit_s:g} s of computing a run (DECODING_LAB_RUN_LIMIT_S, counted from "
            "when it took the model) and stopped there; what it made is kept." if limit_s else "")


def limit_note(trace: Trace) -> str:
    """A sentence for a run that the time limit ended ("" for any other)."""
    return limit_line((trace.finish.extra or {}).get("time_limit_s") if trace.finish is not None else None)
