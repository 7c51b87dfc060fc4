"""Loaded models kept for reuse: the least recently used goes first, the cache is bounded in number
and in bytes, and a load never holds the lock other loads wait on.

A visitor of a public app names models; each one loaded stays in memory for the next request. So:

- at most `DECODING_LAB_MODEL_CACHE_MODELS` models (8) and `DECODING_LAB_MODEL_CACHE_MB` bytes
  (`decoding.model_budget.budget_bytes`: 60% of the machine's memory by default) are kept; before a
  load the least recently used are dropped until the new model fits, and a model whose estimated
  (or, once loaded, measured) size alone exceeds the budget is refused with the figures;
- a model that does not fit in the memory free now, less what loads in flight have reserved, is
  refused before anything is downloaded;
- `_lock` guards the bookkeeping only and is never held while loading: each key has its own
  loading lock, so two requests for one model load it once, and a slow hub download of one model
  stalls no request for another. A dropped model stays usable by the runs that hold it; its memory
  returns when they end;
- a request that waits for another's load of the same model hears that load's progress lines (a `Relay`
  per loading key: the line under way at once, then each new one), so no visitor waits in silence while a
  preload or another visitor's first load downloads and converts it.

Glossary
    key       what identifies a loaded model: (name, device, dtype, quantisation)
    entry     a cached model with its measured size in bytes
    need      the estimated bytes of a model not loaded yet (None: unknown until loaded)
    reserved  the needs of loads in flight, counted against free memory
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from typing import Callable, Generic, TypeVar

import torch

from decoding import model_budget
from decoding.env import env_int

MODELS_ENV = "DECODING_LAB_MODEL_CACHE_MODELS"  # the most models kept loaded at once
DEFAULT_MAX_MODELS = 8

T = TypeVar("T")
Say = Callable[[str], None]


class Relay:
    """One load's progress lines, told to every request waiting on it (`listen`), the latest one first."""

    def __init__(self):
        self.last, self._listeners, self._lock = "", [], threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self.last, listeners = line, list(self._listeners)
        for listener in listeners:
            listener(line)

    def finish(self) -> None:
        """The load is over: a later listener hears nothing old."""
        with self._lock:
            self.last = ""

    def listen(self, say: Say | None) -> Callable[[], None]:
        """Tell `say` the line under way and every later one, until the returned function is called."""
        if say is None:
            return lambda: None
        with self._lock:
            self._listeners.append(say)
            last = self.last
        if last:
            say(last)
        return lambda: self._forget(say)

    def _forget(self, say: Say) -> None:
        with self._lock:  # under the lock `__call__` copies the listeners with
            if say in self._listeners:
                self._listeners.remove(say)


def _mb(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


class ModelCache(Generic[T]):
    """`get(key, load, ...)`: the cached model of `key`, or `load()`'s, kept within the bounds."""

    def __init__(self, max_models: Callable[[], int] | None = None, max_bytes: Callable[[], int] | None = None,
                 free_bytes: Callable[[torch.device], int] = model_budget.available_memory_bytes,
                 error: type[Exception] = RuntimeError):
        self.max_models = max_models or (lambda: env_int(MODELS_ENV, DEFAULT_MAX_MODELS))
        self.max_bytes = max_bytes or model_budget.budget_bytes
        self.free_bytes = free_bytes
        self.error = error  # raised when a model cannot fit (decoding.models passes its ModelLoadError)
        self._entries: OrderedDict[tuple, tuple[T, int]] = OrderedDict()  # least recently used first
        self._loading: dict[tuple, tuple[threading.Lock, Relay]] = {}
        self._reserved = 0
        self._lock = threading.Lock()  # bookkeeping only: never held while a model loads

    def get(self, key: tuple, load: Callable[[Say], T], *, label: str, device: torch.device,
            need: Callable[[], int | None] = lambda: None, size: Callable[[T], int] = lambda _: 0,
            say: Say | None = None) -> T:
        """The model of `key`: from the cache, or `load(relay)` (called without `_lock` held, under `key`'s own
        lock; it tells its progress lines to the relay). `say` hears the progress of the load this request makes
        or waits for. `need` estimates its bytes before loading (it may ask the hub; also without `_lock`), `size`
        measures them after. `error`, naming `label`, when it cannot fit."""
        with self._lock:
            if key in self._entries:
                return self._touch(key)
            key_lock, relay = self._loading.setdefault(key, (threading.Lock(), Relay()))
        stop_listening = relay.listen(say)
        try:
            with key_lock:  # only requests for this same model wait here
                with self._lock:
                    if key in self._entries:  # loaded by the request we waited for
                        return self._touch(key)
                estimate = need() or 0
                self._reserve(label, device, estimate)
                try:
                    value = load(relay)
                finally:
                    with self._lock:
                        self._reserved -= estimate
                        if self._loading.get(key, (None,))[0] is key_lock:
                            del self._loading[key]
                self._insert(key, value, size(value), label)
                return value
        finally:
            stop_listening()

    # ------------------------------------------------------------------ bookkeeping
    def keys(self) -> list[tuple]:
        """Cached keys, least recently used first."""
        with self._lock:
            return list(self._entries)

    def total_bytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _touch(self, key: tuple) -> T:
        self._entries.move_to_end(key)
        return self._entries[key][0]

    def _reserve(self, label: str, device: torch.device, estimate: int) -> None:
        """Make room for a model of `estimate` bytes (dropping the least recently used), then reserve it;
        `error` when it exceeds the budget or the memory free now."""
        budget = self.max_bytes()
        if estimate > budget:
            raise self.error(
                f"{label} needs ~{_mb(estimate)}, more than the {_mb(budget)} this app gives loaded models "
                f"({model_budget.CACHE_MB_ENV}); pick a smaller model or dtype")
        with self._lock:
            dropped = self._evict(keep=None, incoming=estimate)
        if dropped:
            _release_memory()
        free = self.free_bytes(device)
        with self._lock:
            left = free - self._reserved
            if free and estimate > left:
                raise self.error(
                    f"{label} needs ~{_mb(estimate)}, but only {_mb(max(left, 0))} is free on {device}"
                    f"{' beside the models loading now' if self._reserved else ''}. Pick a smaller model, a smaller "
                    "dtype, or 4-bit/8-bit quantization on a CUDA GPU")
            self._reserved += estimate

    def _insert(self, key: tuple, value: T, size: int, label: str) -> None:
        budget = self.max_bytes()
        if size > budget:
            raise self.error(f"{label} takes {_mb(size)} loaded, more than the {_mb(budget)} this app gives "
                                   f"loaded models ({model_budget.CACHE_MB_ENV}); pick a smaller model or dtype")
        with self._lock:
            self._entries[key] = (value, size)
            self._entries.move_to_end(key)
            dropped = self._evict(keep=key, incoming=0)
        if dropped:
            _release_memory()

    def _evict(self, keep: tuple | None, incoming: int) -> int:
        """Drop least recently used entries (never `keep`) until the count and bytes, plus one incoming model
        of `incoming` bytes when `keep` is None, are within the bounds. Returns how many went. Holds `_lock`."""
        max_models, budget = self.max_models(), self.max_bytes()
        slots = max_models - (1 if keep is None else 0)
        dropped = 0
        for key in list(self._entries):
            total = sum(size for _, size in self._entries.values())
            if len(self._entries) <= slots and total + incoming <= budget:
                break
            if key != keep:
                del self._entries[key]
                dropped += 1
        return dropped


def _release_memory() -> None:
    """Let the memory of dropped models go now (they are freed once no run holds them)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
