"""Visitors' runs share the model's steps: one step batcher per loaded model (continuous batching).

The Serving lab's temporal fusion (decoding/serving.py, Flover) applied to the app's own visitors. Every strategy
stays the generator it is and calls `lm.forward` itself; a run admitted to its model's batch (`StepBatcher.join`)
gets a `BatchedLM`, a per-run wrapper whose `forward` hands the call to the batcher and waits for its answer:

    a step call      one new position (a token, or superposed decoding's one embedding) over a one-row cache, with
                     no mask, positions or hidden states asked: what greedy, sampling, mirostat, momentum, AdaDec
                     and superposed decoding make at every step. Every step call pending when a pass starts is
                     answered by ONE forward pass over all of them: each row's cache left-padded to the longest, an
                     attention mask over the padding, each row's own position (its cache's length, what it gets
                     alone), as serving.Batch does; each row gets back its logits and its own cache (views of the
                     pass's cache, the padding cut off), so its strategy goes on as if it ran alone
    a solo call      anything else (a prompt's prefill, AdaDec's k-row lookahead, a score over the whole text, a
                     model whose cache has sliding-window layers): made alone, in turn with the passes

One thread per batcher makes every pass, so the model computes one pass at a time. Continuous batching: the next
pass starts as soon as every member has its next call pending (or GATHER_S after the last pass ended, so a member
that is slow to ask, a paced run, does not hold the others); a run that arrives joins at the next pass, and a run
that ends or is stopped leaves at once (it simply asks no more). A pass of one row is the lone call itself.

What each row decides from its logits (sampling with its own generator, transforms, mirostat's mu, the events and
their entropy and alternatives) runs in its own thread, untouched: a row's tokens are those of its lone run, and its
probabilities equal them within float rounding (a padded pass sums the same numbers in another order;
tests/test_batching.py). Each row counts its own model calls (`forward_passes`), one per step, as alone.

Stop: a run's `should_stop` is asked while its call waits for a pass; a call not yet taken is withdrawn (`Cancelled`,
which `generate` turns into a cancelled run), one taken ends with its pass. The other rows are not touched.

Sharing the machine with methods that are not batched (speculative, scaling, diffusion, ...): the batch counts as one
holder of the app's compute slots (`slots`, ui.worker's ComputeSlots, first come first served). Its first member
takes a slot for the batch; the last to leave gives it back. While someone waits for a slot, the batch admits no new
member: it drains, gives the slot back, and the waiting run computes; the runs that arrived meanwhile wait for the
batch's next turn, behind it.

Glossary
    member   a run admitted to the batch (from `join` until its run ends)
    pass     one forward of the model: a batched step over every pending step call, or one solo call
    row      one member's place in a batched step
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from decoding.contracts import Cancelled, never
from decoding.lm import LM, Output
from decoding.loaded_model import LoadedModel

GATHER_S = 0.05  # how long a pass waits for members that have not asked yet (a slow or paced run)
MAX_ROWS = 64  # rows in one batched step at most (the others wait for the next)
WAIT_TICK_S = 0.02  # how often a waiting call asks its run's stop check
HISTORY = 2000  # passes (and joins / leaves) the server log keeps


class Slots(Protocol):
    """The app's compute slots (ui.worker.ComputeSlots): what the batch holds one of while it has members."""

    def acquire(self, should_stop: Callable[[], bool], waiting: Callable[[int], None]) -> bool: ...

    def release(self) -> None: ...

    def waiting_count(self) -> int: ...


# The server's log: what the "This server" view draws ------------------------------------------------------------
@dataclass(frozen=True)
class PassRecord:
    """One pass of a batcher: when, which runs' rows (a solo call: the one run), how many tokens it made."""

    model: str
    start: float  # time.monotonic()
    end: float
    runs: tuple[int, ...]  # run ids
    solo: bool  # a solo call (a prefill, a lookahead), not a batched step


@dataclass(frozen=True)
class MemberEvent:
    model: str
    at: float  # time.monotonic()
    run: int
    joined: bool  # False: left


@dataclass(frozen=True)
class ServerActivity:
    """A snapshot of the server's recent batches (`activity()`): plain values, for a pure view."""

    now: float
    window_s: float
    passes: list[PassRecord]
    members: list[MemberEvent]
    live: dict[str, int]  # model -> members now


class ServerLog:
    """The recent passes and joins/leaves of every batcher (bounded; deque appends are thread-safe)."""

    def __init__(self, size: int = HISTORY):
        self.passes: deque[PassRecord] = deque(maxlen=size)
        self.members: deque[MemberEvent] = deque(maxlen=size)


LOG = ServerLog()
_RUN_IDS = itertools.count(1)


# The batcher ---------------------------------------------------------------------------------------------------
@dataclass(eq=False)
class _Call:
    lm: BatchedLM
    step: bool
    input_ids: torch.Tensor | None
    cache: DynamicCache | None
    kwargs: dict
    context: contextvars.Context
    done: threading.Event = field(default_factory=threading.Event)
    taken: bool = False
    result: Output | None = None
    error: BaseException | None = None


class BatchedLM(LM):
    """One member's view of the shared model: `forward` goes through the batcher; everything else is LM's own."""

    def __init__(self, batcher: StepBatcher, should_stop: Callable[[], bool], run_id: int):
        super().__init__(batcher.loaded)
        self.batcher, self.should_stop, self.run_id = batcher, should_stop, run_id

    def forward(self, input_ids, cache=None, *, inputs_embeds=None, attention_mask=None, position_ids=None,
                output_hidden_states=False, last_only=False, logits_to_keep=0) -> Output:
        kwargs = dict(inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=position_ids,
                      output_hidden_states=output_hidden_states, last_only=last_only, logits_to_keep=logits_to_keep)
        step = (cache is not None and attention_mask is None and position_ids is None and not output_hidden_states
                and _one_position(input_ids, inputs_embeds) and _plain_layers(cache) is not None
                and cache.get_seq_length() > 0)
        return self.batcher.call(_Call(self, step, input_ids, cache, kwargs, contextvars.copy_context()))

    def solo(self, *args, **kwargs) -> Output:
        """The lone call (LM.forward on this wrapper: its counter counts it)."""
        return LM.forward(self, *args, **kwargs)


def _one_position(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> bool:
    if inputs_embeds is not None:
        return input_ids is None and inputs_embeds.dim() == 3 and inputs_embeds.shape[:2] == (1, 1)
    return input_ids is not None and input_ids.dim() == 2 and tuple(input_ids.shape) == (1, 1)


def _plain_layers(cache: DynamicCache) -> list[DynamicLayer] | None:
    """The cache's layers when each is a plain one-row key/value layer (no sliding window, no offloading)."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer or not layer.is_initialized for layer in layers):
        return None
    return layers if layers[0].keys.shape[0] == 1 else None


class StepBatcher:
    """One loaded model's running batch: its members, their pending calls, the thread that makes the passes."""

    def __init__(self, loaded: LoadedModel, slots: Slots | None = None, gather_s: float = GATHER_S,
                 max_rows: int = MAX_ROWS, log: ServerLog = LOG):
        self.loaded, self.slots, self.gather_s, self.max_rows, self.log = loaded, slots, gather_s, max_rows, log
        self.lm = LM(loaded)  # the batched passes' caller
        with _INSTALL:
            self.rowwise = install_rowwise(loaded.model)  # exact rows; else a padded, masked pass (rounding differs)
        self.cond = threading.Condition()
        self.members: set[int] = set()
        self.pending: list[_Call] = []
        self.holding = slots is None  # whether the batch holds a compute slot (always, without slots)
        self.acquiring = False
        self.thread: threading.Thread | None = None
        self.last_end = 0.0
        self.users = 0  # `batch_member`s using this batcher (joined or waiting to)

    # Membership -------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def join(self, should_stop: Callable[[], bool] = never,
             waiting: Callable[[int], None] = lambda ahead: None) -> Iterator[BatchedLM | None]:
        """Admit a run (waiting while the batch drains for a slot run, or for a slot): its `BatchedLM`, or None when
        `should_stop` turned True first. The run leaves when the block ends."""
        run_id = self._admit(should_stop, waiting)
        if run_id is None:
            yield None
            return
        try:
            yield BatchedLM(self, should_stop, run_id)
        finally:
            self._leave(run_id)

    def _admit(self, should_stop: Callable[[], bool], waiting: Callable[[int], None]) -> int | None:
        """A new member's run id, once the batch holds a slot and nobody waits for one (None: stopped first). The
        first joiner of an idle batch takes the slot for it, in the slots' first-come-first-served queue."""
        told = False

        def tell(ahead: int) -> None:
            nonlocal told
            if not told:
                told = True
                waiting(ahead)

        while True:
            with self.cond:
                while not (self.holding and not (self.slots is not None and self.slots.waiting_count())):
                    if should_stop():
                        return None
                    if not self.holding and not self.acquiring:
                        self.acquiring = True
                        break
                    self.cond.wait(WAIT_TICK_S)
                    if not told:  # the batch drains for a run waiting for a slot, or another joiner takes one
                        self.cond.release()
                        try:
                            tell(self.slots.waiting_count() + 1)
                        finally:
                            self.cond.acquire()
                else:
                    return self._member()
            held = False
            try:
                held = self.slots.acquire(should_stop, tell)
            finally:
                with self.cond:
                    self.acquiring, self.holding = False, held
                    self.cond.notify_all()
            if not held:
                return None
            with self.cond:
                return self._member()  # the batch is this run's, even if someone queued behind it meanwhile

    def _member(self) -> int:
        run_id = next(_RUN_IDS)
        self.members.add(run_id)
        self.log.members.append(MemberEvent(self.loaded.name, time.monotonic(), run_id, True))
        self.cond.notify_all()
        return run_id

    def _leave(self, run_id: int) -> None:
        with self.cond:
            self.members.discard(run_id)
            self.log.members.append(MemberEvent(self.loaded.name, time.monotonic(), run_id, False))
            if not self.members and self.slots is not None and self.holding:
                self.holding = False
                self.slots.release()
            self.cond.notify_all()

    # Calls ------------------------------------------------------------------------------------------------------
    def call(self, call: _Call) -> Output:
        """Queue a member's call and wait for its pass; withdrawn (`Cancelled`) if its run stops before the pass."""
        with self.cond:
            self.pending.append(call)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="decoding-batch", daemon=True)
                self.thread.start()
            self.cond.notify_all()
        while not call.done.wait(WAIT_TICK_S):
            if call.lm.should_stop():
                with self.cond:
                    if not call.taken:
                        self.pending.remove(call)
                        self.cond.notify_all()
                        raise Cancelled("stopped while waiting for the model")
        if call.error is not None:
            raise call.error
        return call.result

    def _loop(self) -> None:
        while True:
            with self.cond:
                while True:
                    if not self.pending and not self.members:
                        self.thread = None
                        return
                    asking = {c.lm.run_id for c in self.pending}
                    late = time.monotonic() - self.last_end >= self.gather_s
                    if self.pending and (late or self.members <= asking):
                        break
                    self.cond.wait(self.gather_s if self.pending else WAIT_TICK_S * 5)
                solo = [c for c in self.pending if not c.step]
                steps = [c for c in self.pending if c.step][:self.max_rows]
                for c in solo + steps:
                    c.taken = True
                    self.pending.remove(c)
            for c in solo:
                self._run([c], functools.partial(c.context.run, _solo, c), solo=True)
            if steps:
                self._run(steps, functools.partial(self._step, steps), solo=False)
            self.last_end = time.monotonic()

    def _run(self, calls: list[_Call], compute: Callable[[], list[Output]], solo: bool) -> None:
        start = time.monotonic()
        try:
            results = compute()
        except BaseException as error:  # noqa: BLE001 - each caller re-raises it in its own thread
            for c in calls:
                c.error = error
        else:
            for c, result in zip(calls, results):
                c.result = result
        self.log.passes.append(PassRecord(self.loaded.name, start, time.monotonic(),
                                          tuple(c.lm.run_id for c in calls), solo))
        for c in calls:
            c.done.set()

    def _step(self, calls: list[_Call]) -> list[Output]:
        """One forward over every call's one new position; each row's logits and its own cache back."""
        if len(calls) == 1:
            c = calls[0]
            return [c.lm.solo(c.input_ids, c.cache, **c.kwargs)]
        rows = [_plain_layers(c.cache) for c in calls]
        lengths = [r[0].keys.shape[-2] for r in rows]
        width = max(lengths)
        B, layers = len(calls), []
        for layer in range(len(rows[0])):
            keys, values = rows[0][layer].keys, rows[0][layer].values
            k = keys.new_zeros((B, keys.shape[1], width, keys.shape[3]))  # (B, H, L, D) left-padded
            v = values.new_zeros((B, values.shape[1], width, values.shape[3]))
            for i, (row, length) in enumerate(zip(rows, lengths)):
                k[i, :, width - length:] = row[layer].keys[0]
                v[i, :, width - length:] = row[layer].values[0]
            layers.append((k, v))
        cache = _cache_of(layers, self.lm)
        mask = torch.zeros(B, width + 1, dtype=torch.long)  # (B, L + 1) 1 = a real position
        for i, length in enumerate(lengths):
            mask[i, width - length:] = 1
        positions = torch.tensor([[length] for length in lengths])  # (B, 1) each row's next position
        device = self.lm.device
        _ROWS.pads = [width - length for length in lengths] if self.rowwise else None
        try:
            return self._forward(calls, cache, mask, positions, lengths, width, device)
        finally:
            _ROWS.pads = None

    def _forward(self, calls, cache, mask, positions, lengths, width, device) -> list[Output]:
        if any(c.kwargs["inputs_embeds"] is not None for c in calls):  # superposed decoding's row: embeddings for all
            embed = self.lm.model.get_input_embeddings()
            parts = [c.kwargs["inputs_embeds"] if c.kwargs["inputs_embeds"] is not None
                     else embed(c.input_ids.to(device)) for c in calls]
            out = self.lm.forward(None, cache, inputs_embeds=torch.cat(parts), attention_mask=mask.to(device),
                                  position_ids=positions.to(device))
        else:
            ids = torch.cat([c.input_ids.to(device) for c in calls])  # (B, 1)
            out = self.lm.forward(ids, cache, attention_mask=mask.to(device), position_ids=positions.to(device))
        results = []
        for i, (c, length) in enumerate(zip(calls, lengths)):
            cut = width - length  # this row's padding
            row = _cache_of([(layer.keys[i:i + 1, :, cut:], layer.values[i:i + 1, :, cut:])
                             for layer in out.cache.layers], self.lm)
            c.lm.forward_passes += 1
            results.append(Output(logits=out.logits[i:i + 1], cache=row))
        return results


def _solo(call: _Call) -> list[Output]:
    """A solo call, made in the context of the run that asked (its prefill's stop check)."""
    return [call.lm.solo(call.input_ids, call.cache, **call.kwargs)]


# Attention row by row: each row over its own cache, as alone ------------------------------------------------------
ROWWISE = "decoding_lab_rowwise"  # the attention implementation's name in transformers' registries
_ROWS = threading.local()  # during a batched step (its thread): each row's left padding in the pass's cache
_INSTALL = threading.Lock()


def _rowwise_attention(module, query, key, value, attention_mask, **kwargs):
    """The model's own attention, called for each row of a batched step over that row's cache without its padding
    and without a mask, as the row's lone call is made (so its numbers are the lone call's, to the bit: a padded,
    masked pass sums them in another order, which a bfloat16 model's tokens notice). Outside a step: as it is."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    inner = ALL_ATTENTION_FUNCTIONS[module.config.decoding_lab_inner_attention]
    pads = getattr(_ROWS, "pads", None)
    if pads is None or query.shape[0] != len(pads) or query.shape[2] != 1:
        return inner(module, query, key, value, attention_mask, **kwargs)
    outs = [inner(module, query[i:i + 1], key[i:i + 1, :, pad:], value[i:i + 1, :, pad:], None, **kwargs)[0]
            for i, pad in enumerate(pads)]
    return torch.cat(outs), None


def install_rowwise(model) -> bool:
    """Route `model`'s attention through `_rowwise_attention` (its own implementation inside); True when it can: an
    implementation transformers registers (sdpa, flash, the CPU's gqa_sdpa), not a model's own eager code."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    config = model.config
    current = getattr(config, "_attn_implementation", None)
    if current == ROWWISE:
        return True
    if current not in ALL_ATTENTION_FUNCTIONS or not hasattr(model, "set_attn_implementation"):
        return False
    mask = ALL_MASK_ATTENTION_FUNCTIONS.get(current) or ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    AttentionInterface.register(ROWWISE, _rowwise_attention)
    AttentionMaskInterface.register(ROWWISE, mask)
    for sub in (config, getattr(config, "get_text_config", lambda: config)()):
        sub.decoding_lab_inner_attention = current
    model.set_attn_implementation(ROWWISE)
    return True


def _cache_of(layers: list[tuple[torch.Tensor, torch.Tensor]], lm: LM) -> DynamicCache:
    """A cache holding each layer's (keys, values) as they are (views, no copy)."""
    cache = DynamicCache(config=lm.config)
    for layer, (keys, values) in zip(cache.layers, layers):
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return cache


# One batcher per loaded model ----------------------------------------------------------------------------------
_BATCHERS: dict[int, StepBatcher] = {}
_REGISTRY = threading.Lock()


@contextlib.contextmanager
def batch_member(loaded: LoadedModel, should_stop: Callable[[], bool] = never,
                 waiting: Callable[[int], None] = lambda ahead: None,
                 slots: Slots | None = None) -> Iterator[BatchedLM | None]:
    """Join `loaded`'s batch (made on first use, forgotten once nobody uses it): `StepBatcher.join`."""
    with _REGISTRY:
        batcher = _BATCHERS.get(id(loaded))
        if batcher is None or batcher.loaded is not loaded:
            batcher = _BATCHERS[id(loaded)] = StepBatcher(loaded, slots)
        batcher.users += 1
    try:
        with batcher.join(should_stop, waiting) as lm:
            yield lm
    finally:
        with _REGISTRY:
            batcher.users -= 1
            if not batcher.users and _BATCHERS.get(id(loaded)) is batcher:
                del _BATCHERS[id(loaded)]  # holds no model once idle (the model cache decides what stays loaded)


def activity(window_s: float = 30.0, log: ServerLog = LOG, now: float | None = None) -> ServerActivity:
    """The last `window_s` seconds of every batcher's passes, joins and leaves."""
    now = time.monotonic() if now is None else now
    since = now - window_s
    with _REGISTRY:
        live: dict[str, int] = {}
        for batcher in _BATCHERS.values():
            live[batcher.loaded.name] = live.get(batcher.loaded.name, 0) + len(batcher.members)
    return ServerActivity(now, window_s, [p for p in list(log.passes) if p.end >= since],
                          [m for m in list(log.members) if m.at >= since], live)


__all__ = ["BatchedLM", "LOG", "MemberEvent", "PassRecord", "ServerActivity", "ServerLog", "StepBatcher", "activity",
           "batch_member"]
