"""Serving many requests on one model: one at a time, static batches, and temporal fusion (Flover).

Requests arrive at chosen times (a Poisson stream, a classroom pressing Generate at once). A policy
decides which requests share each forward pass of the model:

    one-at-a-time   first come, first served; each request decodes alone to its end
    static          when the model is idle, the requests waiting (up to `batch_size`) form a batch that
                    decodes until its longest request ends; a request that ended keeps its row (its tokens
                    are discarded) and a request that arrives meanwhile waits for the next batch
    fusion          Flover's temporal fusion ("A Temporal Fusion Framework for Efficient Autoregressive
                    Model Parallel Inference", Yao et al. 2023): at every step the requests that have
                    arrived join the running batch (each prompt is prefilled alone, its cache fused into
                    the batch's), and a request that ended leaves the batch at once, its cache rows
                    dropped, so no step computes for a finished request and none waits for a batch

Decoding is greedy, so every request gets exactly the tokens it gets alone, whatever the policy and the
arrival order (tests/test_serving.py): rows of different lengths share a step through left padding, an
attention mask and each row's own position ids, and each cached key keeps the rotary position it was
computed at. The clock is the wall clock of this machine, except that time when the model has nothing to do (every
request that arrived has ended, and the next has not arrived yet) is skipped: the clock jumps to the next arrival
instead of sleeping, so a stream with long gaps never holds the model idle (nothing is computed in a gap, so no
request's times change). A request's time to first token counts its wait, its prefill and the steps it shares.

Glossary
    row        one request's place in the running batch: its cache rows, its next position
    step       one forward pass of the model over every row of the batch (one new token per row)
    arrival    seconds after the stream began at which a request may start
    ttft       time to first token: first token's time minus the arrival
    latency    the last token's time minus the arrival
"""

from __future__ import annotations

import collections
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from transformers import DynamicCache

from decoding.lm import LM

POLICIES = ("one-at-a-time", "static", "fusion")
SAMPLE_PROMPTS = [  # a stream's prompts, in turn; different lengths: the batch's rows are padded to each other
    "Why is the sky blue?", "Write a haiku about the sea.", "Name three animals that live in the desert.",
    "What is the capital of France?", "Explain in one sentence what a lighthouse does.", "Say hello.",
    "List the first five prime numbers.", "Give me a tip for learning to cook.",
    "Describe a rainy morning in a small town, briefly.", "What does a bee make?",
    "Tell me a fact about the moon.", "Suggest a name for a black cat.",
    "How many legs does a spider have?", "What colour are bananas when they are ripe?",
    "Write one line of a poem about autumn.", "What is two plus three?",
]


@dataclass(frozen=True)
class Request:
    """A prompt (token ids, chat template already applied) that may start `arrival_s` after the stream began."""

    id: int
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    arrival_s: float = 0.0


@dataclass
class Served:
    """What one request got: its tokens and when (seconds after the stream began)."""

    request: Request
    token_ids: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    started_s: float | None = None  # its prefill began
    stop_reason: str | None = None  # "eos" or "max_new_tokens"

    @property
    def ttft_s(self) -> float | None:
        return self.token_times[0] - self.request.arrival_s if self.token_times else None

    @property
    def latency_s(self) -> float | None:
        return self.token_times[-1] - self.request.arrival_s if self.token_times else None


@dataclass
class ServingRun:
    """A whole stream under one policy: each request's tokens and times, and each step's rows."""

    policy: str
    served: list[Served]
    steps: list[tuple[float, float, tuple[int, ...]]] = field(default_factory=list)  # (start, end, request ids)
    prefills: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, request id)

    def summary(self) -> dict:
        """Throughput (tokens / seconds from the first arrival to the last token) and p50/p95 ttft and latency."""
        tokens = sum(len(s.token_ids) for s in self.served)
        first = min(s.request.arrival_s for s in self.served)
        last = max(s.token_times[-1] for s in self.served if s.token_times)
        ttft = sorted(s.ttft_s for s in self.served if s.ttft_s is not None)
        latency = sorted(s.latency_s for s in self.served if s.latency_s is not None)
        return {"policy": self.policy, "requests": len(self.served), "tokens": tokens,
                "seconds": round(last - first, 4), "tokens_per_s": round(tokens / max(last - first, 1e-9), 3),
                "ttft_p50_s": round(percentile(ttft, 50), 4), "ttft_p95_s": round(percentile(ttft, 95), 4),
                "latency_p50_s": round(percentile(latency, 50), 4), "latency_p95_s": round(percentile(latency, 95), 4),
                "forward_passes": len(self.steps) + len(self.prefills)}


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile by linear interpolation between the closest ranks (numpy's default)."""
    if not sorted_values:
        return math.nan
    k = (len(sorted_values) - 1) * q / 100
    low, high = math.floor(k), math.ceil(k)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (k - low)


TEXT_PROMPTS = [  # for a base model without a chat template (tiny-ar writes KJV-style text): openings to continue
    "And it came to pass", "In the beginning", "And God said", "Blessed are they", "And the king answered",
    "Now the serpent was", "And he went out", "For the LORD", "And there was", "Then said Jesus unto them",
    "And the people", "Behold, I will", "And Moses said", "Hear, O Israel", "And when they had", "Thus saith",
]


def sample_prompts(lm: LM) -> list[str]:
    """Questions for a chat model; openings of text for a base model (a question would end it at once)."""
    return SAMPLE_PROMPTS if lm.has_chat_template else TEXT_PROMPTS


def sample_requests(lm: LM, count: int, max_new_tokens: int, arrivals: list[float]) -> list[Request]:
    """`count` requests with the model's sample prompts in turn (its chat template applied when it has one)."""
    prompts = sample_prompts(lm)
    return [Request(i, tuple(lm.encode_prompt(prompts[i % len(prompts)], chat=True)[0]), max_new_tokens, arrivals[i])
            for i in range(count)]


def poisson_arrivals(count: int, rate_per_s: float, seed: int = 0) -> list[float]:
    """`count` arrival times of a Poisson stream of `rate_per_s` requests a second (the first at 0)."""
    if count < 1 or not rate_per_s > 0:
        raise ValueError(f"need count >= 1 and rate_per_s > 0, got {count} and {rate_per_s}")
    rng = random.Random(seed)
    times, now = [0.0], 0.0
    for _ in range(count - 1):
        now += rng.expovariate(rate_per_s)
        times.append(now)
    return times


# The batch: rows of different lengths in one cache ----------------------------------------------------
class Batch:
    """The running rows: one left-padded cache, which positions are real, and each row's next position."""

    def __init__(self, lm: LM):
        self.lm = lm
        self.rows: list[Served] = []
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # (B, L) 1 = a real cached token, 0 = left padding
        self.positions: list[int] = []  # per row: its next token's position (its real length)
        self.pending: list[int] = []  # per row: its last token, not yet fed

    def add(self, served: Served, cache: DynamicCache, first_token: int) -> None:
        """A request whose prompt was prefilled alone (`cache`, one row) joins with its first token pending."""
        length = cache.get_seq_length()
        if self.cache is None:
            self.cache, self.mask = cache, torch.ones(1, length, dtype=torch.long)
        else:
            width = max(length, self.mask.shape[1])
            old = _pad_left(self.cache, self.mask, width)
            new = _pad_left(cache, torch.ones(1, length, dtype=torch.long), width)
            self.cache = _concat([old[0], new[0]], self.lm)
            self.mask = torch.cat([old[1], new[1]])
        self.rows.append(served)
        self.positions.append(len(served.request.prompt_ids))
        self.pending.append(first_token)

    def step(self) -> list[int]:
        """One forward pass over every row: feed each row's pending token, return each row's next (greedy)."""
        ids = torch.tensor([[t] for t in self.pending])  # (B, 1)
        mask = torch.cat([self.mask, torch.ones(len(self.rows), 1, dtype=torch.long)], dim=1)  # (B, L + 1)
        positions = torch.tensor([[p] for p in self.positions])  # (B, 1)
        out = self.lm.forward(ids, self.cache, attention_mask=mask.to(self.lm.device),
                              position_ids=positions.to(self.lm.device))
        self.cache, self.mask = out.cache, mask
        self.positions = [p + 1 for p in self.positions]
        return out.logits[:, -1].argmax(-1).tolist()

    def keep(self, keep: list[int]) -> None:
        """Only rows `keep` stay (the others' cache rows are dropped); padding no row needs any more goes."""
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[i] for i in keep]
        self.positions = [self.positions[i] for i in keep]
        self.pending = [self.pending[i] for i in keep]
        if not keep:
            self.cache = self.mask = None
            return
        index = torch.tensor(keep)
        self.mask = self.mask[index]
        cut = int((self.mask.sum(0) == 0).long().cumprod(0).sum())  # leading columns that are padding in every row
        self.mask = self.mask[:, cut:]
        self.cache = _rebuild(self.cache, self.lm, lambda t: t[index.to(t.device), :, cut:])


def _layers(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    layers = getattr(cache, "layers", None)
    if layers is None or any(not hasattr(layer, "keys") or getattr(layer, "is_sliding", False) for layer in layers):
        raise ValueError("temporal fusion needs a model with a plain key-value cache (no sliding-window layers)")
    return [(layer.keys, layer.values) for layer in layers]


def _from_layers(layers: list[tuple[torch.Tensor, torch.Tensor]], lm: LM) -> DynamicCache:
    """A new cache holding each layer's (keys, values), (B, H, L, D) tensors."""
    fresh = DynamicCache(config=lm.config)
    for layer, (keys, values) in enumerate(layers):
        fresh.update(keys.contiguous(), values.contiguous(), layer)
    return fresh


def _rebuild(cache: DynamicCache, lm: LM, edit: Callable[[torch.Tensor], torch.Tensor]) -> DynamicCache:
    """A new cache whose every layer's keys and values are `edit`ed."""
    return _from_layers([(edit(k), edit(v)) for k, v in _layers(cache)], lm)


def _pad_left(cache: DynamicCache, mask: torch.Tensor, width: int) -> tuple[list, torch.Tensor]:
    """Each layer's (keys, values) and the mask, left-padded with zeros to `width` positions."""
    extra = width - mask.shape[1]
    pad = lambda t: torch.nn.functional.pad(t, (0, 0, extra, 0)) if extra else t  # (B, H, L, D): pad L
    return ([(pad(k), pad(v)) for k, v in _layers(cache)],
            torch.nn.functional.pad(mask, (extra, 0)) if extra else mask)


def _concat(parts: list[list], lm: LM) -> DynamicCache:
    """One cache whose rows are those of `parts` (each a list of per-layer (keys, values), same width)."""
    return _from_layers([(torch.cat([p[i][0] for p in parts]), torch.cat([p[i][1] for p in parts]))
                         for i in range(len(parts[0]))], lm)


# The policies --------------------------------------------------------------------------------------
def serve(lm: LM, requests: list[Request], policy: str = "fusion", batch_size: int = 8, **kwargs) -> ServingRun:
    """Decode every request greedily under `policy`, in real time (a request is not started before its
    arrival); what each got and when, and what every forward pass computed."""
    return collections.deque(serve_live(lm, requests, policy, batch_size, **kwargs), maxlen=1)[0]


def serve_live(lm: LM, requests: list[Request], policy: str = "fusion", batch_size: int = 8,
               clock: Callable[[], float] = time.perf_counter,
               should_stop: Callable[[], bool] = lambda: False) -> Iterator[ServingRun]:
    """`serve` as it runs: the same growing `ServingRun` is yielded once at the start and after every forward
    pass (a prefill or a step), so a view can draw the stream live. `should_stop` is asked before each. When the
    model is idle until the next arrival, the stream's clock skips to it (no waiting while holding the model)."""
    if policy not in POLICIES:
        raise ValueError(f"`policy` must be one of {', '.join(POLICIES)}, got {policy!r}")
    if not 1 <= batch_size <= 256:
        raise ValueError(f"`batch_size` must be in [1, 256], got {batch_size}")
    for r in requests:
        lm.check_fits(len(r.prompt_ids), r.max_new_tokens)
    run = ServingRun(policy, [Served(r) for r in sorted(requests, key=lambda r: (r.arrival_s, r.id))])
    begun, skipped = clock(), 0.0
    now = lambda: clock() - begun + skipped  # the stream's clock: wall time plus the idle gaps skipped
    waiting = list(run.served)  # by arrival
    batch = Batch(lm)
    stops = lm.stop_ids
    limit = 1 if policy == "one-at-a-time" else batch_size

    def admit(served: Served) -> None:
        served.started_s = start = now()
        ids = torch.tensor([served.request.prompt_ids], device=lm.device)
        out = lm.forward(ids, last_only=True)
        token = int(out.logits[0, -1].argmax())
        run.prefills.append((start, now(), served.request.id))
        _emit(served, token, now(), stops)
        batch.add(served, out.cache, token)

    yield run
    while (waiting or batch.rows) and not should_stop():
        arrived = [s for s in waiting if s.request.arrival_s <= now()]
        joins = policy == "fusion" or not batch.rows  # static and one-at-a-time: only an idle model takes more
        for served in arrived[:max(0, limit - len(batch.rows))] if joins else []:
            if should_stop():
                return
            waiting.remove(served)
            admit(served)
            yield run
        live = [i for i, s in enumerate(batch.rows) if s.stop_reason is None]
        if policy != "static" or not live:  # a static batch keeps its ended rows until every row has ended
            batch.keep(live)
        if not batch.rows:
            if waiting:  # nothing to compute until the next arrival: the clock skips to it
                skipped += max(0.0, min(s.request.arrival_s for s in waiting) - now())
            continue
        start = now()
        tokens = batch.step()
        end = now()
        run.steps.append((start, end, tuple(s.request.id for s in batch.rows)))
        for i, (served, token) in enumerate(zip(batch.rows, tokens)):
            batch.pending[i] = token
            if served.stop_reason is None:
                _emit(served, token, end, stops)
        yield run


def _emit(served: Served, token: int, at: float, stops: frozenset[int]) -> None:
    served.token_ids.append(token)
    served.token_times.append(at)
    if token in stops:
        served.stop_reason = "eos"
    elif len(served.token_ids) >= served.request.max_new_tokens:
        served.stop_reason = "max_new_tokens"


__all__ = ["POLICIES", "SAMPLE_PROMPTS", "Batch", "Request", "Served", "ServingRun", "percentile", "poisson_arrivals",
           "TEXT_PROMPTS", "sample_prompts", "sample_requests", "serve", "serve_live"]
