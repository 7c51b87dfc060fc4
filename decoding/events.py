"""Typed, JSON-serialisable events, the Trace that collects them, and statistics derived from it.

Every strategy is a generator of these events; the UI, the CLI, the tests and the benchmarks all
read them. Statistics that users compare are computed here, from the events, in one place.

Glossary
    step            one generated position (autoregressive strategies).
    prob            probability of the chosen token under the model's raw distribution (T = 1).
    sampling_prob   its probability under the distribution it was actually drawn from (after
                    temperature, penalties and truncation).
    kept_size       how many tokens survived truncation at this step (vocabulary size if none).
    forward_passes  model calls made for this event (a batched call counts once).

Loading a trace checks every field against its annotation (`decoding.schema`): the aliases below
(`Count`, `Prob`, ...) carry the ranges, and the records inside list fields (draft-tree nodes,
beams, particles) are TypedDicts, so the annotations are the trace format's one schema. What types
cannot say (a file's size, how many events, canvas positions and particles, lists whose lengths or
indices must agree) `decoding/trace_checks.py` checks on the same load.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Annotated, Callable, ClassVar, TypedDict

from decoding.errors import short_repr
from decoding.schema import Range, check_fields
from decoding.trace_checks import UPLOAD_MB, TraceChecker, upload_bytes

TRACE_FORMAT = "decoding-lab-trace"
TRACE_VERSION = 1

# Field types with their ranges (checked when a trace is loaded; see decoding/schema.py)
Count = Annotated[int, Range(0)]  # steps, counts, token ids, indices
Parent = Annotated[int, Range(-1)]  # an index, or -1 for the context / prompt / a masked position
Prob = Annotated[float, Range(0, 1, slack=1e-4)]  # slack: float32 sums may end at 1.00001
Nats = Annotated[float, Range(0, slack=1e-6)]
LogProb = Annotated[float, Range(high=0, slack=1e-4)]  # a (sum of) natural-log probabilities: <= 0
Seconds = Annotated[float, Range(0)]
Seed = Annotated[int, Range(0, 2**63 - 1)]


class Beam(TypedDict):
    """A live beam after a step (BeamStep.beams)."""

    token_ids: list[Count]
    text: str
    score: LogProb  # sum of log-probabilities
    parent: Count  # index of the beam it extends among the previous step's beams
    token_id: Count
    token_text: str
    logprob: LogProb


class Hypothesis(TypedDict):
    """A finished beam hypothesis (BeamStep.finished)."""

    token_ids: list[Count]
    text: str
    score: LogProb  # length-normalised


class _DraftNodeKeys(TypedDict):
    id: Count
    parent: Parent
    depth: Count
    token_id: Count
    token_text: str
    status: str  # "accepted", "rejected" or "unvisited"


class DraftNode(_DraftNodeKeys, total=False):
    """A node of a speculative round's draft tree (SpecRound.nodes)."""

    q: Prob
    logq_cum: LogProb
    p: Prob
    u: Prob | None
    accept_prob: Prob | None


class _DraftDistKeys(TypedDict):
    parent: Parent
    overlap: Prob


class DraftDist(_DraftDistKeys, total=False):
    """Target and draft distributions at one expanded position (SpecRound.dists)."""

    p_top_ids: list[Count]
    p_top_probs: list[Prob]
    p_top_tokens: list[str]
    q_top_ids: list[Count]
    q_top_probs: list[Prob]
    q_top_tokens: list[str]
    rho: Annotated[float, Range(1)]  # rule spectr: SpecTr's rho* where sampled siblings were tried


class _ParticleKeys(TypedDict):
    id: Count
    parent: Parent
    weight: Prob


class Particle(_ParticleKeys, total=False):
    """One particle of a ParticleStep (see its docstring for the keys' meaning)."""

    text: str
    step_text: str
    steps: Count
    reward: Prob | None  # None: no step yet (adaptive's slots that have not started)
    detail: str
    score: float
    finished: bool
    cut_off: bool  # finished at its token cap, without a stop token (so no answer was written)
    num_tokens: Count
    answer: str | None


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"
    opens_run: ClassVar[bool] = False  # a trace's first event: RunStarted, or a family's own start (`register_events`)
    closes_run: ClassVar[bool] = False  # a run's last event: RunFinished, or a family's own finish

    def to_dict(self) -> dict:
        return {"kind": self.kind} | dataclasses.asdict(self)


@dataclass(frozen=True)
class RunStarted(Event):
    kind: ClassVar[str] = "start"
    opens_run: ClassVar[bool] = True
    model: str  # registry name or hub id
    strategy: str  # strategy name as in the CLI
    params: dict  # the strategy's parameters, after defaults
    prompt: str  # what the user typed
    prompt_text: str  # what the model saw (chat template applied or not)
    prompt_ids: list[Count]
    chat: bool  # whether the chat template was applied
    seed: Seed | None
    max_new_tokens: Count
    device: str
    dtype: str
    vocab_size: Count
    forward_passes: Count = 0
    prefix_ids: list[Count] = field(default_factory=list)  # generated ids a branch starts from (steps continue after them)
    source: dict = field(default_factory=dict)  # a remote engine's {"engine", "base_url", "model"} (never a key)
    waited_s: float = 0.0  # seconds from the request to the run's start: the model's load (a first use downloads and
    # converts it) and the wait for other runs; not in any elapsed_s, shown apart beside the first token


@dataclass(frozen=True)
class TokenStep(Event):
    kind: ClassVar[str] = "token"
    step: Count  # 0-based index of the generated token
    token_id: Count
    token_text: str  # the token's own text (may be part of a character)
    prob: Prob  # raw model probability of the chosen token (T = 1, nothing truncated)
    sampling_prob: Prob  # probability under the distribution it was drawn from
    rank: Annotated[int, Range(1)]  # 1-based rank of the token in the raw distribution
    entropy: Nats  # raw full distribution
    entropy_truncated: Nats  # the distribution it was drawn from
    kept_size: Count  # tokens left after truncation
    top_ids: list[Count]  # top alternatives by raw probability
    top_tokens: list[str]
    top_probs: list[Prob]  # raw probabilities of top_ids
    top_kept: list[bool]  # whether each alternative survived truncation
    elapsed_s: Seconds  # since the run started (model calls included)
    forward_passes: Count = 1
    extra: dict = field(default_factory=dict)  # strategy-specific (mirostat mu, contrastive scores)


@dataclass(frozen=True)
class BeamStep(Event):
    kind: ClassVar[str] = "beams"
    step: Count
    beams: list[Beam]  # live beams after this step
    finished: list[Hypothesis]  # hypotheses that ended at this step
    entropy: Nats  # distribution of the best live beam's parent at this step
    elapsed_s: Seconds
    forward_passes: Count = 1


@dataclass(frozen=True)
class SpecRound(Event):
    """One speculative round: the drafter proposes a tree, the target verifies it in one call.

    Each node: {"id", "parent" (-1 = the context), "depth" (1 = first drafted position),
    "token_id", "token_text", "q" (draft probability of the token; 1.0 for deterministic
    drafters), "logq_cum" (cumulative draft log-prob from the root), "p" (target probability of
    the token at its parent position, temperature applied), "status" ("accepted", "rejected" or
    "unvisited"), "u" (the uniform draw, None for greedy or unvisited), "accept_prob" (the
    probability it was accepted with: min(1, p/q) for its residual p and q under rule rsd, min(1,
    p/(rho q)) under rule spectr; 1 or 0 for greedy agreement)}.
    """

    kind: ClassVar[str] = "spec_round"
    round: Count  # 0-based
    step: Count  # index of the first token this round produced
    drafter: str  # e.g. "early-exit@L20", "prompt-lookup"
    nodes: list[DraftNode]  # the draft tree
    accepted_path: list[Count]  # node ids accepted, root to deepest
    extra_token_id: Count  # the target's own token ending the round
    extra_token_text: str
    extra_kind: str  # "bonus" (all accepted to a leaf), "residual" (sampling) or "correction" (greedy)
    extra_p: Prob  # target probability of the extra token
    token_ids: list[Count]  # accepted tokens then the extra token
    dists: list[DraftDist]  # per expanded position: {"parent" (node id, -1 = root), "p_top_ids", "p_top_probs",
    #                    "q_top_ids", "q_top_probs" (empty for deterministic drafters), "overlap" = sum min(p, q),
    #                    "rho" (rule spectr, where sampled siblings were tried: SpecTr's rho*)}
    draft_forward_passes: Count
    target_forward_passes: Count
    draft_time_s: Seconds
    verify_time_s: Seconds
    elapsed_s: Seconds
    extra: dict = field(default_factory=dict)  # drafter state (exit layer, per-layer acceptance, draft length)
    forward_passes: Count = 0  # target calls counted here too, so stats() treats all strategies alike


@dataclass(frozen=True)
class ParticleStep(Event):
    """One step of an inference-time scaling method over N particles (partial solutions).

    Every live particle has just extended by one reasoning step (or `chunk_tokens` tokens). Each
    entry of `particles` is slot i *before* resampling: {"id" (slot), "parent" (the slot at the
    previous step it continues; -1 = the prompt), "text" (all generated text so far),
    "step_text" (what this step added; "" for a particle that had already finished), "steps"
    (number of steps so far), "reward" (this step's reward in [0, 1]), "detail" (the reward's
    explanation), "score" (the solution score: step rewards aggregated), "weight" (normalised
    weight before resampling), "finished" (ended with a stop token or its token cap), "cut_off"
    (finished at its token cap, so no answer was written), "num_tokens" (generated tokens), "answer" (the final
    answer extracted, or None)}.
    After the event, new slot j continues old slot `ancestors[j]` with weight `weights_after[j]`.
    """

    kind: ClassVar[str] = "particles"
    step: Count  # 0-based
    method: str  # best-of-n, majority-vote, reward-beam, particle-filter, first-finish
    particles: list[Particle]
    ancestors: list[Count]  # identity when nothing was selected or resampled
    resampled: bool  # whether particles were copied / dropped after this step
    weights_after: list[Prob]
    ess: Annotated[float, Range(0)]  # 1 / sum(w^2) of the weights before resampling
    tokens_spent: Count  # generated tokens over all particles so far (padding excluded)
    elapsed_s: Seconds
    forward_passes: Count = 0  # model calls this step (policy and judge)
    extra: dict = field(default_factory=dict)  # e.g. ePF's tempering exponent


@dataclass(frozen=True)
class DiffusionStep(Event):
    """One denoising step of a masked diffusion LM over a canvas of `len(canvas)` positions.

    Positions are counted from the first generated position (the prompt is not on the canvas).
    `canvas[i]` is the token id at position i after this step, or -1 while it is still masked;
    `canvas_text[i]` its text ("" while masked). `unmasked` lists the positions committed at this
    step, with their `unmasked_tokens` and `confidence` (the score the remasking rule ranked them
    by: top-1 probability, top-1 minus top-2 margin, minus entropy, or a random key).
    `masked_confidence[i]` is the top-1 probability the model gave every position still masked
    after this step (None for committed positions): the confidence map of what is left.
    """

    kind: ClassVar[str] = "diffusion_step"
    step: Count  # 0-based
    block: Count  # semi-autoregressive block index (0 when the whole canvas is one block)
    canvas: list[Parent]  # token id, or -1 while masked
    canvas_text: list[str]
    unmasked: list[Count]
    unmasked_tokens: list[Count]
    confidence: list[float]
    masked_confidence: list[Prob | None]  # top-1 probability per position, None once committed
    nfe: Count  # model calls so far in this run (number of function evaluations)
    elapsed_s: Seconds
    forward_passes: Count = 1  # model calls at this step
    extra: dict = field(default_factory=dict)  # sampler state: threshold, anchors, cache refreshed, ...


@dataclass(frozen=True)
class TrainStep(Event):
    """One gradient step of test-time training on the prompt's context (strategy `ttt`): the next-token loss on a
    span of the context, measured before the step's update, and what the run has trained on so far."""

    kind: ClassVar[str] = "train_step"
    step: Count  # 0-based index of the gradient step
    loss: Nats  # mean next-token cross-entropy on the span, before this step's update
    span_start: Count  # the span's first position in the prompt
    span_tokens: Count  # tokens whose next token the span predicts
    tokens_trained: Count  # span tokens over all steps so far
    grad_norm: Annotated[float, Range(0)]  # of the trained parameters' gradient, before clipping
    elapsed_s: Seconds
    forward_passes: Count = 1  # one forward and one backward pass through the model
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunFinished(Event):
    kind: ClassVar[str] = "finish"
    closes_run: ClassVar[bool] = True
    text: str  # the generated text (prompt excluded)
    token_ids: list[Count]  # the generated ids (prompt excluded, a branch's prefix included, stop token included)
    stop_reason: str  # "eos", "max_new_tokens" or "cancelled"
    elapsed_s: Seconds
    forward_passes: Count = 0  # every model call of the run, as its events counted them: the target's or
    # policy's, a judge's, and a drafter's (stats()' forward_passes leaves a drafter's out: the headline counts
    # what the decoded model spends)
    extra: dict = field(default_factory=dict)


EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in (RunStarted, TokenStep, BeamStep, SpecRound, ParticleStep,
                                                                 DiffusionStep, TrainStep, RunFinished)}
FAMILY_STATS: dict[str, Callable[[Trace], dict]] = {}  # a family's start kind -> the statistics of its traces


def register_events(*classes: type[Event], stats: Callable[[Trace], dict] | None = None,
                    checks: dict[str, Callable] | None = None) -> None:
    """Make a family's own events load back from JSON (`Trace.from_dict`), for a family whose runs are not
    strategies of `generate` (streaming speech: its own start, chunk and finish events). Each class needs a
    unique `kind`; one with `opens_run` may begin a trace, and `stats(trace)` then gives such a trace's
    statistics (`stats` below, `Trace.to_dict`). `checks` {kind: rule(checker, event, previous)}: the links a
    loaded event must satisfy beyond its field types (`decoding.trace_checks`), SchemaError naming the field.
    The core imports no family: the family calls this when it is imported."""
    from decoding.trace_checks import add_rule

    for cls in classes:
        taken = EVENT_TYPES.get(cls.kind)
        if taken is not None and taken is not cls:
            raise ValueError(f"event kind {cls.kind!r} is taken by {taken.__module__}.{taken.__qualname__}")
        if not (dataclasses.is_dataclass(cls) and issubclass(cls, Event)):
            raise TypeError(f"{cls!r} must be a dataclass subclass of decoding.events.Event")
    for cls in classes:
        EVENT_TYPES[cls.kind] = cls
        if cls.opens_run and stats is not None:
            FAMILY_STATS[cls.kind] = stats
    for kind, rule in (checks or {}).items():
        add_rule(kind, rule)


def event_from_dict(data: dict) -> Event:
    """The event a JSON object describes, every field checked against its annotation (ValueError
    naming the field, the value and what is allowed otherwise)."""
    kind, fields = _kind_and_fields(data)
    try:
        check_fields(EVENT_TYPES[kind], fields)
    except ValueError as err:
        raise ValueError(f"malformed {kind!r} event: {err}") from None
    return EVENT_TYPES[kind](**fields)


def _kind_and_fields(data) -> tuple[str, dict]:
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError(f"an event must be an object with a 'kind', got {short_repr(data, 80)}")
    kind = data["kind"]
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        raise ValueError(f"unknown event kind {short_repr(kind, 80)}; known: {', '.join(EVENT_TYPES)}")
    return kind, {k: v for k, v in data.items() if k != "kind"}


@dataclass
class Trace:
    """The events of one run, in order. Saves to JSON and loads back unchanged."""

    events: list[Event] = field(default_factory=list)

    def append(self, event: Event) -> None:
        self.events.append(event)

    @property
    def start(self) -> RunStarted | None:
        return next((e for e in self.events if isinstance(e, RunStarted)), None)

    @property
    def finish(self) -> RunFinished | None:
        return next((e for e in reversed(self.events) if isinstance(e, RunFinished)), None)

    @property
    def ended(self) -> bool:
        """Whether the run has ended (its last event closes it: RunFinished, or a family's own finish)."""
        return bool(self.events) and self.events[-1].closes_run

    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def to_dict(self) -> dict:
        return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "events": [e.to_dict() for e in self.events],
                "stats": stats(self)}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def save(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())

    @classmethod
    def from_dict(cls, data) -> Trace:
        if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
            raise ValueError(f"not a Decoding Lab trace: expected an object with \"format\": \"{TRACE_FORMAT}\"")
        if data.get("version") != TRACE_VERSION:
            raise ValueError(f"unsupported trace version {short_repr(data.get('version'), 80)}; "
                             f"this build reads version {TRACE_VERSION}")
        events = data.get("events")
        if not isinstance(events, list) or not events:
            raise ValueError("malformed trace: 'events' must be a non-empty list")
        checker = TraceChecker()  # the bounds (events, canvas, particles, items per list) and links
        checker.check_count(len(events))
        trace = cls()
        for i, item in enumerate(events):
            kind = item.get("kind") if isinstance(item, dict) else None
            where = f"event {i} ({kind!r})" if isinstance(kind, str) and kind in EVENT_TYPES else f"event {i}"
            try:
                kind, fields = _kind_and_fields(item)
                check_fields(EVENT_TYPES[kind], fields, max_items=checker.max_items)
                event = EVENT_TYPES[kind](**fields)
                checker.check(event)
            except ValueError as err:
                raise ValueError(f"malformed trace: {where}: {err}") from None
            trace.append(event)
        if not trace.events[0].opens_run:
            others = "".join(f" or {k!r}" for k, c in EVENT_TYPES.items() if c.opens_run and k != RunStarted.kind)
            raise ValueError(f"malformed trace: the first event must be a 'start' event{others}, "
                             f"got {trace.events[0].kind!r}")
        return trace

    @classmethod
    def from_json(cls, text: str) -> Trace:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"not a Decoding Lab trace: invalid JSON ({err})") from None
        except RecursionError:
            raise ValueError("not a Decoding Lab trace: its JSON is nested too deeply") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path) -> Trace:
        """The trace in a JSON file, refused (ValueError) beyond DECODING_LAB_MAX_UPLOAD_MB or the bounds
        of `decoding.trace_checks`."""
        limit = upload_bytes()
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            size = os.path.getsize(path)
            raise UPLOAD_MB.refuse("the file is", math.ceil(size / 2**20 * 10) / 10, limit // 2**20)
        try:
            return cls.from_json(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError("not a Decoding Lab trace: the file is not UTF-8 text") from None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def stats(trace: Trace) -> dict:
    """The run's statistics, from its events only (UI, CLI and benchmarks all call this)."""
    family = FAMILY_STATS.get(trace.events[0].kind) if trace.events else None
    if family is not None:  # a family's own run (`register_events`): its statistics
        return family(trace)
    tokens = trace.of_kind("token")
    beams = trace.of_kind("beams")
    finish = trace.finish
    prefix = len(trace.start.prefix_ids) if trace.start else 0
    num_tokens = len(finish.token_ids) - prefix if finish else len(tokens) or len(beams)
    timed = tokens + beams + trace.of_kind("spec_round") + trace.of_kind("particles") + trace.of_kind("diffusion_step")
    elapsed = finish.elapsed_s if finish else max((e.elapsed_s for e in timed), default=0.0)
    forward_passes = sum(getattr(e, "forward_passes", 0) for e in trace.events if e is not finish)  # finish: the total
    first = (tokens or beams)[0].elapsed_s if (tokens or beams) else None
    entropies = [e.entropy for e in tokens] if tokens else [e.entropy for e in beams]
    out = {
        "num_tokens": num_tokens,
        "elapsed_s": round(elapsed, 4),
        "tokens_per_s": round(num_tokens / elapsed, 3) if elapsed > 0 else None,
        "time_to_first_token_s": round(first, 4) if first is not None else None,
        "waited_s": round(trace.start.waited_s, 3) if trace.start else 0.0,
        "forward_passes": forward_passes,
        "forward_passes_per_token": round(forward_passes / num_tokens, 3) if num_tokens else None,
        "mean_entropy": _round(_mean(entropies)),
        "mean_prob": _round(_mean(e.prob for e in tokens)),
        "mean_kept_size": _round(_mean(e.kept_size for e in tokens)),
        "stop_reason": finish.stop_reason if finish else "running",
    }
    rounds = trace.of_kind("spec_round")
    if rounds:
        out |= speculative_stats(rounds, num_tokens)
    diffusion = trace.of_kind("diffusion_step")
    if diffusion:
        committed = sum(len(e.unmasked) for e in diffusion)
        out |= {"nfe": diffusion[-1].nfe, "diffusion_steps": len(diffusion),
                "tokens_per_step": round(committed / len(diffusion), 3),
                "nfe_per_token": round(diffusion[-1].nfe / committed, 3) if committed else None,
                "time_to_first_token_s": round(diffusion[0].elapsed_s, 4)}
    particle_steps = trace.of_kind("particles")
    if particle_steps:
        out |= scaling_stats(particle_steps, finish, elapsed)
        out["time_to_first_token_s"] = None
    return out


def scaling_stats(steps: list, finish, elapsed: float) -> dict:
    """Particle statistics: budget spent, resampling, and the final effective sample size."""
    last = steps[-1]
    spent = last.tokens_spent
    extra = finish.extra if finish else {}
    grown, previous = 0, None  # particle extensions: one particle growing by one step
    for step in steps:
        for p in step.particles:
            before = previous.particles[p["parent"]]["num_tokens"] if previous and p["parent"] >= 0 else 0
            grown += p["num_tokens"] > before
        previous = step
    return {
        "num_particles": len(last.particles),
        "particle_steps": len(steps),
        "tokens_per_particle_step": round(spent / grown, 2) if grown else None,
        "ess": round(last.ess, 4),
        "resampling_events": sum(1 for s in steps if s.resampled),
        "tokens_spent": spent,
        "tokens_spent_per_s": round(spent / elapsed, 3) if elapsed > 0 else None,
        "answer": extra.get("answer"),
    }


def speculative_stats(rounds: list, num_tokens: int) -> dict:
    """Acceptance statistics of speculative rounds (drafted = draft tokens the target judged)."""
    accepted = [len(r.accepted_path) for r in rounds]
    judged = sum(sum(1 for n in r.nodes if n["status"] != "unvisited") for r in rounds)
    target = sum(r.target_forward_passes for r in rounds)
    return {
        "rounds": len(rounds),
        "target_forward_passes": target,
        "draft_forward_passes": sum(r.draft_forward_passes for r in rounds),
        "target_forward_passes_per_token": round(target / num_tokens, 3) if num_tokens else None,
        "mean_accepted_length": round(sum(accepted) / len(rounds), 3),
        "acceptance_rate": round(sum(accepted) / judged, 3) if judged else None,
        "mean_draft_nodes": round(sum(len(r.nodes) for r in rounds) / len(rounds), 2),
        "draft_efficiency": round(sum(accepted) / max(1, sum(len(r.nodes) for r in rounds)), 3),
        "draft_time_s": round(sum(r.draft_time_s for r in rounds), 4),
        "verify_time_s": round(sum(r.verify_time_s for r in rounds), 4),
    }


def _round(x, digits=4):
    return None if x is None else round(x, digits)
