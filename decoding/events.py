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
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import ClassVar

TRACE_FORMAT = "decoding-lab-trace"
TRACE_VERSION = 1


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"

    def to_dict(self) -> dict:
        return {"kind": self.kind} | dataclasses.asdict(self)


@dataclass(frozen=True)
class RunStarted(Event):
    kind: ClassVar[str] = "start"
    model: str  # registry name or hub id
    strategy: str  # strategy name as in the CLI
    params: dict  # the strategy's parameters, after defaults
    prompt: str  # what the user typed
    prompt_text: str  # what the model saw (chat template applied or not)
    prompt_ids: list[int]
    chat: bool  # whether the chat template was applied
    seed: int | None
    max_new_tokens: int
    device: str
    dtype: str
    vocab_size: int
    forward_passes: int = 0
    prefix_ids: list[int] = field(default_factory=list)  # generated ids a branch starts from (steps continue after them)


@dataclass(frozen=True)
class TokenStep(Event):
    kind: ClassVar[str] = "token"
    step: int  # 0-based index of the generated token
    token_id: int
    token_text: str  # the token's own text (may be part of a character)
    prob: float  # raw model probability of the chosen token (T = 1, nothing truncated)
    sampling_prob: float  # probability under the distribution it was drawn from
    rank: int  # 1-based rank of the token in the raw distribution
    entropy: float  # nats, raw full distribution
    entropy_truncated: float  # nats, the distribution it was drawn from
    kept_size: int  # tokens left after truncation
    top_ids: list[int]  # top alternatives by raw probability
    top_tokens: list[str]
    top_probs: list[float]  # raw probabilities of top_ids
    top_kept: list[bool]  # whether each alternative survived truncation
    elapsed_s: float  # seconds since the run started (model calls included)
    forward_passes: int = 1
    extra: dict = field(default_factory=dict)  # strategy-specific (mirostat mu, contrastive scores)


@dataclass(frozen=True)
class BeamStep(Event):
    kind: ClassVar[str] = "beams"
    step: int
    beams: list[dict]  # live beams after this step: {"token_ids", "text", "score", "parent", "token_id", "token_text", "logprob"}
    finished: list[dict]  # hypotheses that ended at this step: {"token_ids", "text", "score"}
    entropy: float  # nats, distribution of the best live beam's parent at this step
    elapsed_s: float
    forward_passes: int = 1


@dataclass(frozen=True)
class SpecRound(Event):
    """One speculative round: the drafter proposes a tree, the target verifies it in one call.

    Each node: {"id", "parent" (-1 = the context), "depth" (1 = first drafted position),
    "token_id", "token_text", "q" (draft probability of the token; 1.0 for deterministic
    drafters), "logq_cum" (cumulative draft log-prob from the root), "p" (target probability of
    the token at its parent position, temperature applied), "status" ("accepted", "rejected" or
    "unvisited"), "u" (the uniform draw, None for greedy or unvisited), "accept_prob"}.
    """

    kind: ClassVar[str] = "spec_round"
    round: int  # 0-based
    step: int  # index of the first token this round produced
    drafter: str  # e.g. "early-exit@L20", "prompt-lookup"
    nodes: list[dict]  # the draft tree
    accepted_path: list[int]  # node ids accepted, root to deepest
    extra_token_id: int  # the target's own token ending the round
    extra_token_text: str
    extra_kind: str  # "bonus" (all accepted to a leaf), "residual" (sampling) or "correction" (greedy)
    extra_p: float  # target probability of the extra token
    token_ids: list[int]  # accepted tokens then the extra token
    dists: list[dict]  # per expanded position: {"parent" (node id, -1 = root), "p_top_ids", "p_top_probs",
    #                    "q_top_ids", "q_top_probs" (empty for deterministic drafters), "overlap" = sum min(p, q)}
    draft_forward_passes: int
    target_forward_passes: int
    draft_time_s: float
    verify_time_s: float
    elapsed_s: float
    extra: dict = field(default_factory=dict)  # drafter state (exit layer, per-layer acceptance, draft length)
    forward_passes: int = 0  # target calls counted here too, so stats() treats all strategies alike


@dataclass(frozen=True)
class ParticleStep(Event):
    """One step of an inference-time scaling method over N particles (partial solutions).

    Every live particle has just extended by one reasoning step (or `chunk_tokens` tokens). Each
    entry of `particles` is slot i *before* resampling: {"id" (slot), "parent" (the slot at the
    previous step it continues; -1 = the prompt), "text" (all generated text so far),
    "step_text" (what this step added; "" for a particle that had already finished), "steps"
    (number of steps so far), "reward" (this step's reward in [0, 1]), "detail" (the reward's
    explanation), "score" (the solution score: step rewards aggregated), "weight" (normalised
    weight before resampling), "finished" (ended with a stop token or its token cap),
    "num_tokens" (generated tokens), "answer" (the final answer extracted, or None)}.
    After the event, new slot j continues old slot `ancestors[j]` with weight `weights_after[j]`.
    """

    kind: ClassVar[str] = "particles"
    step: int  # 0-based
    method: str  # best-of-n, majority-vote, reward-beam, particle-filter, first-finish
    particles: list[dict]
    ancestors: list[int]  # identity when nothing was selected or resampled
    resampled: bool  # whether particles were copied / dropped after this step
    weights_after: list[float]
    ess: float  # 1 / sum(w^2) of the weights before resampling
    tokens_spent: int  # generated tokens over all particles so far (padding excluded)
    elapsed_s: float
    forward_passes: int = 0  # model calls this step (policy and judge)
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
    step: int  # 0-based
    block: int  # semi-autoregressive block index (0 when the whole canvas is one block)
    canvas: list[int]
    canvas_text: list[str]
    unmasked: list[int]
    unmasked_tokens: list[int]
    confidence: list[float]
    masked_confidence: list  # float or None per position
    nfe: int  # model calls so far in this run (number of function evaluations)
    elapsed_s: float
    forward_passes: int = 1  # model calls at this step
    extra: dict = field(default_factory=dict)  # sampler state: threshold, anchors, cache refreshed, ...


@dataclass(frozen=True)
class RunFinished(Event):
    kind: ClassVar[str] = "finish"
    text: str  # the generated text (prompt excluded)
    token_ids: list[int]  # the generated ids (prompt excluded, a branch's prefix included, stop token included)
    stop_reason: str  # "eos", "max_new_tokens" or "cancelled"
    elapsed_s: float
    forward_passes: int = 0
    extra: dict = field(default_factory=dict)


EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in (RunStarted, TokenStep, BeamStep, SpecRound, ParticleStep, DiffusionStep, RunFinished)}


def event_from_dict(data: dict) -> Event:
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError(f"an event must be an object with a 'kind', got {str(data)[:80]!r}")
    cls = EVENT_TYPES.get(data["kind"])
    if cls is None:
        raise ValueError(f"unknown event kind {data['kind']!r}; known: {', '.join(EVENT_TYPES)}")
    names = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    fields = {k: v for k, v in data.items() if k != "kind"}
    missing, unknown = required - fields.keys(), fields.keys() - names
    if missing or unknown:
        raise ValueError(f"malformed {data['kind']!r} event: missing {sorted(missing)}, unknown {sorted(unknown)}")
    return cls(**fields)


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
            raise ValueError(f"unsupported trace version {data.get('version')!r}; this build reads version {TRACE_VERSION}")
        events = data.get("events")
        if not isinstance(events, list) or not events:
            raise ValueError("malformed trace: 'events' must be a non-empty list")
        trace = cls()
        for i, item in enumerate(events):
            try:
                trace.append(event_from_dict(item))
            except (TypeError, ValueError) as err:
                raise ValueError(f"malformed trace: event {i}: {err}") from None
        if not isinstance(trace.events[0], RunStarted):
            raise ValueError("malformed trace: the first event must be a 'start' event")
        return trace

    @classmethod
    def from_json(cls, text: str) -> Trace:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"not a Decoding Lab trace: invalid JSON ({err})") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path) -> Trace:
        with open(path, "rb") as f:
            raw = f.read()
        try:
            return cls.from_json(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError("not a Decoding Lab trace: the file is not UTF-8 text") from None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def stats(trace: Trace) -> dict:
    """The run's statistics, from its events only (UI, CLI and benchmarks all call this)."""
    tokens = trace.of_kind("token")
    beams = trace.of_kind("beams")
    finish = trace.finish
    prefix = len(trace.start.prefix_ids) if trace.start else 0
    num_tokens = len(finish.token_ids) - prefix if finish else len(tokens) or len(beams)
    timed = tokens + beams + trace.of_kind("spec_round") + trace.of_kind("particles") + trace.of_kind("diffusion_step")
    elapsed = finish.elapsed_s if finish else max((e.elapsed_s for e in timed), default=0.0)
    forward_passes = sum(getattr(e, "forward_passes", 0) for e in trace.events)
    first = (tokens or beams)[0].elapsed_s if (tokens or beams) else None
    entropies = [e.entropy for e in tokens] if tokens else [e.entropy for e in beams]
    out = {
        "num_tokens": num_tokens,
        "elapsed_s": round(elapsed, 4),
        "tokens_per_s": round(num_tokens / elapsed, 3) if elapsed > 0 else None,
        "time_to_first_token_s": round(first, 4) if first is not None else None,
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
