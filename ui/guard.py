"""What keeps one visitor of a public server from taking it down or evicting other users' work.

Gradio keeps one session per `session_hash` a request names, and drops the least recently used one
beyond its capacity: 201 requests from one address (10 s) evicted another user's replayed trace. Its
upload route stores any file for an hour: 20 anonymous 5 MiB uploads grew the cache by 100 MiB. Here:

- `ClientMiddleware` (ASGI) learns each request's client address and limits its uploads
  (DECODING_LAB_UPLOADS_PER_MIN); after each upload the upload cache is swept to its size
  (DECODING_LAB_UPLOAD_CACHE_MB) and age limits (`sweep_uploads`). Who joins the queue (per browser
  session, per address) and in what order is `ui/admission.py`, installed with the session store.
- `GuardedStateHolder` replaces Gradio's session store: a client holds at most
  DECODING_LAB_SESSIONS_PER_CLIENT sessions (a new one beyond it drops that client's own oldest),
  and when the server holds DECODING_LAB_SESSION_CAP sessions, or their traces more than
  DECODING_LAB_SESSION_MEMORY_MB, it drops sessions that hold no run first, then those of the client
  holding the most. One address's traffic only ever evicts its own sessions.
- `within_budget` gives drawing a replay a time limit (DECODING_LAB_REPLAY_BUDGET_S).
- `quiet_refusals` keeps Gradio from logging a traceback for every out-of-range value a client sends
  straight to an endpoint (anyone could flood the log): the client still gets the message.

Glossary
    client      the address a request comes from; behind a proxy (a Hugging Face Space) the last
                address of X-Forwarded-For, which the proxy appends (DECODING_LAB_TRUST_PROXY, on
                where SPACE_ID is set).
    held        a session holds a run when one of its states is a Trace (a run, a replay).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import ctypes
import datetime
import html
import os
import re
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

from gradio.exceptions import Error
from gradio.state_holder import SessionState, StateHolder
from gradio.utils import get_upload_folder

from decoding.env import env_int
from decoding.events import Trace
from ui import admission
from ui.admission import client_of, queue_size, queued_per_client, trust_proxy  # noqa: F401  (where they were)

CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("decoding_lab_client", default="unknown")
UPLOAD_WINDOW_S = 60.0


def uploads_per_min() -> int:
    """Uploads one client may make a minute (DECODING_LAB_UPLOADS_PER_MIN, default 60: a class behind one
    address replaying a shared trace at once)."""
    return env_int("DECODING_LAB_UPLOADS_PER_MIN", 60)


def upload_cache_bytes() -> int:
    """The most Gradio's upload cache may hold, exports aside (DECODING_LAB_UPLOAD_CACHE_MB, default 100)."""
    return env_int("DECODING_LAB_UPLOAD_CACHE_MB", 100) * 2**20


def sessions_per_client() -> int:
    """Sessions one client address may hold at once (DECODING_LAB_SESSIONS_PER_CLIENT, default 64: a
    classroom behind one school address is one client to the server)."""
    return env_int("DECODING_LAB_SESSIONS_PER_CLIENT", 64)


def session_memory_bytes() -> int:
    """What all sessions' traces may take in memory, estimated (DECODING_LAB_SESSION_MEMORY_MB, default 4096)."""
    return env_int("DECODING_LAB_SESSION_MEMORY_MB", 4096) * 2**20


def replay_budget_s() -> int:
    """Seconds drawing one replayed trace may take (DECODING_LAB_REPLAY_BUDGET_S, default 15)."""
    return env_int("DECODING_LAB_REPLAY_BUDGET_S", 15)


class RateWindow:
    """At most `limit()` events per client in any `window_s` seconds."""

    def __init__(self, limit: Callable[[], int], window_s: float = UPLOAD_WINDOW_S):
        self.limit, self.window_s = limit, window_s
        self.seen: dict[str, deque] = {}
        self.lock = threading.Lock()

    def allow(self, client: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self.lock:
            if len(self.seen) > 10_000:  # forget clients that went quiet (bounds the table itself)
                self.seen = {c: q for c, q in self.seen.items() if q and now - q[-1] < self.window_s}
            times = self.seen.setdefault(client, deque())
            while times and now - times[0] >= self.window_s:
                times.popleft()
            if len(times) >= self.limit():
                return False
            times.append(now)
            return True


UPLOADS = RateWindow(uploads_per_min)


def _is_upload(scope: dict) -> bool:
    return scope.get("method") == "POST" and scope.get("path", "").rstrip("/").endswith("/gradio_api/upload")


class ClientMiddleware:
    """Pure ASGI middleware: sets CLIENT for the request (the session store reads it), refuses uploads
    past the client's rate with 429, and sweeps the upload cache after each upload."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = client_of(scope)
        token = CLIENT.set(client)
        try:
            if scope.get("path", "").rstrip("/").endswith("/gradio_api/deep_link"):
                await _plain(send, 404, "Deep links are off in this app: export the trace (JSON) to share a run.")
                return
            if not _is_upload(scope):
                await self.app(scope, receive, send)
                return
            if not UPLOADS.allow(client):
                await _plain(send, 429, f"Too many uploads from this address: at most {uploads_per_min()} a minute "
                                        "(DECODING_LAB_UPLOADS_PER_MIN). Try again in a minute.")
                return
            await self.app(scope, receive, send)
            await asyncio.to_thread(sweep_uploads)
        finally:
            CLIENT.reset(token)


async def _plain(send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def sweep_uploads(folder: Path | None = None, *, max_bytes: int | None = None) -> list[Path]:
    """Sweep Gradio's upload cache like the export folder (ui/exports.py): entries older than the export
    age limit, then the oldest until the rest holds `max_bytes` (default upload_cache_bytes()). The
    export folder inside it has its own sweep and is left alone."""
    from ui.exports import export_dir, sweep

    folder = Path(get_upload_folder()) if folder is None else folder
    return sweep(folder, max_bytes=upload_cache_bytes() if max_bytes is None else max_bytes,
                 exclude={export_dir().resolve()})


# Sessions ------------------------------------------------------------------------------------------
def trace_bytes(trace: Trace) -> int:
    """An estimate of what `trace` takes in memory: ~48 bytes per list item and per scalar field of its
    events (a Python object and its pointer), measured against tracemalloc within a factor of two."""
    cached = getattr(trace, "_bytes_estimate", None)
    if cached is not None and cached[0] == len(trace.events):
        return cached[1]
    total = 0
    for event in trace.events:
        total += 200
        for value in vars(event).values():
            total += _items(value) * 48
    with contextlib.suppress(AttributeError):
        object.__setattr__(trace, "_bytes_estimate", (len(trace.events), total))
    return total


def _items(value, depth: int = 0) -> int:
    """How many scalars `value` holds, three levels deep at most (events are that shallow)."""
    if depth > 3:
        return 1
    if isinstance(value, (list, tuple)):
        return 1 + sum(_items(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return 1 + sum(_items(v, depth + 1) for v in value.values())
    return 1


def value_bytes(value) -> int:
    if isinstance(value, Trace):
        return trace_bytes(value)
    if isinstance(value, (list, tuple)):
        return sum(trace_bytes(v) for v in value if isinstance(v, Trace))
    return 0


class _LazyConfigs(dict):
    """A session's `config_values` (each block's config), computed for a block when first used. Gradio
    computes all of them when a session is created: 0.16 s of the event loop and 0.7 MB for this app's
    ~800 blocks, so 201 requests naming new sessions held every other request for 30 s."""

    def __init__(self, blocks_config, ids):
        super().__init__()
        self._config, self._pending = blocks_config, set(ids)

    def _fill(self, key) -> None:
        if key in self._pending:
            self._pending.discard(key)
            dict.__setitem__(self, key, self._config.config_for_block(key, [], self._config.blocks[key]))

    def _fill_all(self) -> None:
        for key in list(self._pending):
            self._fill(key)

    def __getitem__(self, key):
        self._fill(key)
        return dict.__getitem__(self, key)

    def __setitem__(self, key, value) -> None:
        self._pending.discard(key)
        dict.__setitem__(self, key, value)

    def __contains__(self, key) -> bool:
        return key in self._pending or dict.__contains__(self, key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):
        self._fill_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        return dict.__len__(self) + len(self._pending)

    def items(self):
        self._fill_all()
        return dict.items(self)

    def values(self):
        self._fill_all()
        return dict.values(self)

    def keys(self):
        self._fill_all()
        return dict.keys(self)


class GuardedSession(SessionState):
    """Gradio's session state (gradio 6.31's fields), with block configs computed lazily and telling its
    holder when a state changes (so memory is accounted)."""

    def __init__(self, blocks, holder: GuardedStateHolder, session_id: str):
        # no super().__init__(): its eager copy of every block's config is the cost this class avoids
        self.blocks_config = copy.copy(blocks.default_config)
        self.config_values = _LazyConfigs(self.blocks_config,
                                          [k for k in self.blocks_config.blocks if k in blocks.blocks])
        self.state_data, self._state_ttl, self.is_closed = {}, {}, False
        self.STATE_TTL_WHEN_CLOSED = 1 if os.getenv("GRADIO_IS_E2E_TEST", None) else 3600  # as Gradio's
        self._holder, self._id = holder, session_id

    def __setitem__(self, key: int, value) -> None:
        super().__setitem__(key, value)
        if key in self.state_data:
            self._holder.changed(self._id)

    def _update_value_in_config(self, key: int, value) -> None:
        """Gradio keeps every output's latest value (whole figures) in the session's config, for deep links
        only; this app offers none (`ClientMiddleware` refuses the route), so a session keeps its traces and
        nothing drawn from them."""

    def held_bytes(self) -> int:
        return sum(value_bytes(v) for v in self.state_data.values())

    def holds_run(self) -> bool:
        return any(value_bytes(v) or isinstance(v, Trace) for v in self.state_data.values())


class GuardedStateHolder(StateHolder):
    """Gradio's StateHolder with the eviction rules of the module docstring."""

    def __init__(self):
        super().__init__()
        self.owner: dict[str, str] = {}  # session -> client
        self.bytes: dict[str, int] = {}  # session -> its traces' estimated bytes
        self.evicted = 0  # sessions dropped (tests and the log read it)

    def __getitem__(self, session_id: str) -> SessionState:
        with self.lock:
            if session_id not in self.session_data:
                client = CLIENT.get()
                self._make_room(client)
                self.session_data[session_id] = GuardedSession(self.blocks, self, session_id)
                self.owner[session_id] = client
            self.session_data.move_to_end(session_id)
            self.time_last_used[session_id] = datetime.datetime.now()
            return self.session_data[session_id]

    def update(self, session_id: str) -> None:  # Gradio's LRU eviction by count is replaced by _make_room
        with self.lock:
            if session_id in self.session_data:
                self.session_data.move_to_end(session_id)

    def changed(self, session_id: str) -> None:
        """A state of `session_id` was set: account its bytes, and drop others' sessions over the budget."""
        with self.lock:
            session = self.session_data.get(session_id)
            if session is None:
                return
            self.bytes[session_id] = session.held_bytes()
            budget = session_memory_bytes()
            while sum(self.bytes.values()) > budget:
                victim = self._victim(spare=session_id, by_bytes=True)
                if victim is None:
                    break
                self._drop(victim)

    def _make_room(self, client: str) -> None:
        mine = [sid for sid in self.session_data if self.owner.get(sid) == client]  # oldest first
        while len(mine) >= max(1, sessions_per_client()):
            self._drop(mine.pop(0))
        while len(self.session_data) >= max(1, self.capacity):
            victim = self._victim()
            if victim is None:
                break
            self._drop(victim)

    def _victim(self, spare: str | None = None, by_bytes: bool = False) -> str | None:
        """The session to drop: the least recently used one holding no run; else the least recently used
        one of the client holding the most sessions (or bytes)."""
        candidates = [sid for sid in self.session_data if sid != spare]  # least recently used first
        if not candidates:
            return None
        if not by_bytes:
            for sid in candidates:
                if not self.session_data[sid].holds_run():
                    return sid
        load: dict[str, int] = {}
        for sid in candidates:
            load[self.owner.get(sid, "unknown")] = load.get(self.owner.get(sid, "unknown"), 0) + (
                self.bytes.get(sid, 0) if by_bytes else 1)
        heaviest = max(load, key=load.get)
        if by_bytes and load[heaviest] == 0:
            return None
        return next(sid for sid in candidates if self.owner.get(sid, "unknown") == heaviest
                    and (not by_bytes or self.bytes.get(sid, 0)))

    def _drop(self, session_id: str) -> None:
        self.session_data.pop(session_id, None)
        self.time_last_used.pop(session_id, None)
        self.owner.pop(session_id, None)
        self.bytes.pop(session_id, None)
        self.evicted += 1


def install(app) -> GuardedStateHolder:
    """Give a launched Gradio app (its FastAPI `App`) the guarded session store, and its queue the admission
    rules of `ui.admission`."""
    holder = GuardedStateHolder()
    if getattr(app, "blocks", None) is not None:
        holder.set_blocks(app.blocks)
        if getattr(app.blocks, "_queue", None) is not None:
            admission.install(app.blocks._queue)
    app.state_holder = holder
    return holder


def guarded_app_kwargs() -> dict:
    """`launch(app_kwargs=...)`: the client middleware, and the guarded session store installed at start-up."""
    from starlette.middleware import Middleware

    @contextlib.asynccontextmanager
    async def lifespan(app):
        install(app)
        yield

    return {"middleware": [Middleware(ClientMiddleware)], "lifespan": lifespan}


# Replays -------------------------------------------------------------------------------------------
class BudgetExceeded(Exception):
    """Raised inside a computation that ran past its time budget (`within_budget`)."""


def within_budget(fn: Callable, seconds: float):
    """`fn()`, interrupted with BudgetExceeded when it runs longer than `seconds`.

    A watchdog thread raises the exception in this thread (CPython's PyThreadState_SetAsyncExc), which
    lands at the next Python bytecode: drawing is Python (plotly), so a replay stops within
    milliseconds of its budget and its CPU is free again. A pending exception that did not land before
    `fn` returned is withdrawn."""
    tid, lock, state = threading.get_ident(), threading.Lock(), {"done": False, "fired": False}

    def fire():
        with lock:
            if not state["done"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(BudgetExceeded))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    try:
        timer.start()
        try:
            return fn()
        finally:
            with lock:
                state["done"] = True
                timer.cancel()
                if state["fired"]:
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)
    except BudgetExceeded:
        raise BudgetExceeded(f"drawing took longer than its budget of {seconds:g} s") from None


# Quiet refusals ------------------------------------------------------------------------------------
_PATH = re.compile(r"(?<![\w:/.])(?:/[\w.+~@-]+)+/?")  # an absolute path (not a URL's)


def no_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part (a file's name): a message never shows where the
    server keeps its uploads or its code (Gradio's "Cannot move ..." names the app's folder)."""
    return _PATH.sub(lambda m: Path(m.group(0).rstrip("/")).name or "/", text)


def refusal_text(text: str) -> str:
    """A message of Gradio's own for a visitor: no server path, and escaped, since the page's error popup renders
    HTML and the message may quote the refused value (a replayed trace's setting)."""
    return html.escape(no_paths(text)[:500], quote=False)


def quiet_refusals(blocks) -> None:
    """A value Gradio refuses before any callback runs (a slider's number past its end, a choice not in
    a menu, a file path it will not read) reaches the client as plain text (`refusal_text`), without a
    traceback in the server log."""
    original = blocks.preprocess_data

    async def preprocess_data(block_fn, inputs, *args, **kwargs):
        if isinstance(inputs, list) and len(inputs) < len(block_fn.inputs):  # Gradio's own message names no input
            raise Error(f"`{block_fn.api_name or block_fn.name}` takes {len(block_fn.inputs)} values "
                        f"({', '.join(_input_names(block_fn))}), got {len(inputs)}", print_exception=False)
        try:
            return await original(block_fn, inputs, *args, **kwargs)
        except Error as err:
            err.message = refusal_text(str(err.message))
            err.print_exception = False
            raise
        except (ValueError, TypeError) as err:
            raise Error(refusal_text(str(err)), print_exception=False) from None

    blocks.preprocess_data = preprocess_data


def _input_names(block_fn) -> list[str]:
    """The names of an endpoint's inputs: an API function's parameters, else the components' labels."""
    import inspect

    with contextlib.suppress(TypeError, ValueError):
        names = list(inspect.signature(block_fn.fn).parameters)
        if len(names) == len(block_fn.inputs) and not any(n in ("args", "values") for n in names):
            return names
    return [str(getattr(b, "label", None) or type(b).__name__) for b in block_fn.inputs]


__all__ = ["BudgetExceeded", "CLIENT", "ClientMiddleware", "GuardedStateHolder", "client_of", "guarded_app_kwargs",
           "install", "queued_per_client", "quiet_refusals", "replay_budget_s", "session_memory_bytes", "sessions_per_client",
           "sweep_uploads", "trace_bytes", "upload_cache_bytes", "uploads_per_min", "within_budget"]
