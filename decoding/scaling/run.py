"""The run every scaling method shares: N particles over one batch, extended one step at a time,
scored by the reward, turned into a ParticleStep event, reordered by the method's choice.

Stop is asked before every model call of a step (each batch call, each reward / judge call); a
step that Stop cuts short is dropped whole, so the particles stay as the last event showed them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from decoding.contracts import Cancelled, Outcome, RunContext, StepProgress, ignore
from decoding.events import ParticleStep
from decoding.remote.batch import RemoteParticleBatch
from decoding.remote.lm import RemoteLM
from decoding.scaling import particles as pf
from decoding.scaling import rewards as rw
from decoding.scaling.params import STEP_DELIMITERS, ScalingParams
from decoding.scaling.particle_batch import ParticleBatch, slot_generators
from decoding.scaling.scoring import NEUTRAL, aggregate, banned_tokens, build_reward

PROGRESS_S = 0.1  # at most this often a step's tokens so far go to a live view (`RunContext.progress`)

@dataclass
class Particle:
    """What a slot holds: its tokens, steps and rewards (copied whole on resampling)."""

    token_ids: list[int] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    detail: str = ""
    finished: bool = False
    parent: int = -1  # slot it continued at the previous step
    step_lengths: list[int] = field(default_factory=list)  # tokens per step (to cut a solution at a step)

    def copy(self, parent: int) -> Particle:
        return Particle(list(self.token_ids), list(self.steps), list(self.rewards), self.detail, self.finished, parent,
                        list(self.step_lengths))

    def prefix(self, steps: int) -> Particle:
        """The solution's first `steps` steps (unfinished, parent -1): where a rewrite starts."""
        kept = sum(self.step_lengths[:steps])
        return Particle(self.token_ids[:kept], self.steps[:steps], self.rewards[:steps], "", False, -1,
                        self.step_lengths[:steps])


class ScalingRun:
    """N particles over one batch: extend a step, score, build the event, reorder."""

    def __init__(self, ctx: RunContext, params: ScalingParams, method: str, outcome: Outcome):
        self.ctx, self.params, self.method, self.outcome = ctx, params, method, outcome
        self.lm = ctx.lm
        self.reward, self.extra_lms = build_reward(params, self.lm)  # may load a judge model
        self._passes_seen = self._passes()  # the prompt's prefill counts on the first event
        seed = int(torch.randint(0, 2**62, (1,), generator=ctx.generator))
        self.delimiter = STEP_DELIMITERS[params.step_delimiter]
        sampling = dict(temperature=params.temperature, top_p=params.top_p,
                        banned=banned_tokens(self.reward, self.lm), should_stop=ctx.should_stop)
        if isinstance(self.lm, RemoteLM):  # the engine grows each step; the reward still runs here
            self.batch = RemoteParticleBatch(self.lm, ctx.prompt, slot_generators(seed, params.n),
                                             delimiter=self.delimiter, **sampling)
        else:  # (Stop before the prefill raises Cancelled: `generate` ends the run)
            self.batch = ParticleBatch(self.lm, ctx.prompt_ids, slot_generators(seed, params.n), **sampling,
                                       on_tokens=None if ctx.progress is ignore else self._report)
        self.particles = [Particle() for _ in range(params.n)]
        self.outcome_only = isinstance(self.reward, rw.FinalAnswerChecker)
        self.step = 0
        self._reported = float("-inf")

    def _report(self, new: dict[int, list[int]]) -> None:
        """Tell `ctx.progress` what this step has sampled so far, at most every PROGRESS_S (decoding N
        texts costs time the batch would otherwise spend decoding)."""
        if time.perf_counter() - self._reported < PROGRESS_S:
            return
        self._reported = time.perf_counter()
        added = [self.lm.decode(new[i]) if new.get(i) else "" for i in range(len(self.particles))]
        self.ctx.progress(StepProgress(step=self.step, texts=self.texts(), new_texts=added,
                                       tokens_spent=self.batch.tokens_spent))

    def restart(self, prefix: Particle, seed: int) -> bool:
        """Every slot now continues `prefix` (a partial solution found earlier), from a new batch
        whose prompt is the run's prompt plus the prefix's tokens (one prefill), with fresh random
        streams from `seed`; the token count carries on. False (stop reason "cancelled") when Stop
        came before the prefill. A* and review-refine grow many prefixes this way."""
        spent = self.batch.tokens_spent
        try:
            self.batch = ParticleBatch(self.lm, self.ctx.prompt_ids + prefix.token_ids,
                                       slot_generators(seed, self.params.n), temperature=self.params.temperature,
                                       top_p=self.params.top_p, banned=self.batch.banned,
                                       should_stop=self.ctx.should_stop, on_tokens=self.batch.on_tokens)
        except Cancelled:
            self.outcome.stop_reason = "cancelled"
            return False
        self.batch.tokens_spent = spent
        self.particles = [prefix.copy(parent=-1) for _ in range(self.params.n)]
        return True

    def _passes(self) -> int:
        return self.lm.forward_passes + sum(m.forward_passes for m in self.extra_lms)

    def step_done(self, new_ids: list[int]) -> bool:
        text = self.lm.decode(new_ids).lstrip()
        return self.delimiter in text

    def extend(self, chunk_tokens: int | None = None, barrier: bool = True) -> bool:
        """Every unfinished particle grows by one step (or `chunk_tokens` tokens) and is scored.
        `barrier=False` (methods that select nothing between steps): rows that finish their step go
        on decoding their next ones instead of waiting (`ParticleBatch.extend_free`); the particles
        and rewards are the same, the model calls fewer.

        False when Stop came before one of the step's model calls: the step is dropped (the particles
        stay as they were), the stop reason is "cancelled" and the run must end."""
        live = [i for i, p in enumerate(self.particles) if not p.finished]
        budget = {i: self.ctx.max_new_tokens - len(self.particles[i].token_ids) for i in live}
        per_step = {i: min(budget[i], chunk_tokens or self.params.max_step_tokens) for i in live}
        done = (lambda ids: False) if chunk_tokens else self.step_done
        try:
            if not barrier and not chunk_tokens and hasattr(self.batch, "extend_free"):
                grown = self.batch.extend_free(live, done, self.params.max_step_tokens, budget)
            else:
                grown = self.batch.extend(live, done, [per_step.get(i, 0) for i in range(len(self.particles))])
        except Cancelled:
            self.outcome.stop_reason = "cancelled"
            return False
        return self.apply(grown)

    def apply(self, grown: dict) -> bool:
        """Add each slot's new step {slot: (token ids, end)} to its particle and score it. False when
        Stop came before a reward call (nothing is changed then)."""
        new = {}
        for i, (ids, end) in grown.items():
            if self.outcome.cancelled(self.ctx):  # before each reward (a judge or PRM is a model call)
                return False
            p = new[i] = self.particles[i].copy(parent=self.particles[i].parent)
            p.token_ids += ids
            p.steps.append(self.lm.decode(ids))
            p.step_lengths.append(len(ids))
            p.finished = end == "eos" or len(p.token_ids) >= self.ctx.max_new_tokens
            self._score(i, p)
        for i, p in new.items():
            self.particles[i] = p
        return True

    def look_ahead(self, seed: int) -> list[float] | None:
        """Each unfinished particle's reward after one more step, sampled (from `seed`'s streams) and
        then undone (`ParticleBatch.look_ahead`); a finished particle keeps its last reward. None when
        Stop came during the look-ahead (the run goes on to its end as after any step)."""
        if not hasattr(self.batch, "look_ahead"):  # a remote engine's batch: no look-ahead
            return None
        live = [i for i, p in enumerate(self.particles) if not p.finished]
        caps = [min(self.params.max_step_tokens, self.ctx.max_new_tokens - len(p.token_ids)) if i in live else 0
                for i, p in enumerate(self.particles)]
        try:
            grown = self.batch.look_ahead(live, self.step_done, caps, slot_generators(seed, len(self.particles)))
        except Cancelled:
            self.outcome.stop_reason = "cancelled"
            return None
        values = []
        for i, p in enumerate(self.particles):
            if i not in grown:
                values.append(p.rewards[-1] if p.rewards else NEUTRAL)
                continue
            ids, end = grown[i]
            steps = [s for s in p.steps + [self.lm.decode(ids)] if s.strip()] or [""]
            values.append(self.reward.score(self.ctx.prompt, steps, end == "eos").value)
        return values

    def _score(self, i: int, p: Particle) -> None:
        """Append the reward of particle `p` (slot i's next state) for its newest step."""
        steps = [s for s in p.steps if s.strip()] or [""]
        if self.outcome_only and not p.finished:
            value, detail = NEUTRAL, "judged when finished"
        else:
            result = self.reward.score(self.ctx.prompt, steps, p.finished)
            value, detail = result.value, result.detail
        if self.batch.banned is not None:
            kept = math.exp(self.batch.log_mass[i])
            value *= kept
            detail = f"{detail}; the model's mass on allowed tokens {kept:.3g}"
        p.rewards.append(value)
        p.detail = detail

    def score_of(self, i: int) -> float:
        return aggregate(self.particles[i].rewards, self.params.aggregate)

    def current_rewards(self) -> list[float]:
        return [p.rewards[-1] if p.rewards else NEUTRAL for p in self.particles]

    def texts(self) -> list[str]:
        return [self.lm.decode(p.token_ids) for p in self.particles]

    def answers(self, texts: list[str] | None = None) -> list[str | None]:
        out = []
        for p, text in zip(self.particles, texts or self.texts()):
            ended = bool(p.token_ids) and p.token_ids[-1] in self.lm.stop_ids  # not cut off at the token cap
            answer = rw.extract_answer(text, last_number=ended) if p.finished else None
            value = rw.parse_number(answer) if answer is not None else None
            out.append(None if value is None else f"{value:g}")
        return out

    def event(self, weights, ancestors, resampled, weights_after, new_steps: set[int], extra=None) -> ParticleStep:
        passes = self._passes()
        texts = self.texts()
        answers = self.answers(texts)
        particles = [{
            "id": i, "parent": p.parent, "text": texts[i],
            "step_text": p.steps[-1] if i in new_steps and p.steps else "",
            "steps": len(p.steps), "reward": p.rewards[-1] if p.rewards else None, "detail": p.detail,
            "score": self.score_of(i), "weight": float(weights[i]), "finished": p.finished,
            "cut_off": p.finished and not (p.token_ids and p.token_ids[-1] in self.lm.stop_ids),
            "num_tokens": len(p.token_ids), "answer": answers[i],
        } for i, p in enumerate(self.particles)]
        event = ParticleStep(step=self.step, method=self.method, particles=particles, ancestors=list(ancestors),
                             resampled=resampled, weights_after=[float(w) for w in weights_after],
                             ess=pf.ess(weights), tokens_spent=self.batch.tokens_spent,
                             elapsed_s=self.ctx.elapsed(), forward_passes=passes - self._passes_seen,
                             extra=extra or {})
        self._passes_seen = passes
        self.step += 1
        return event

    def reorder(self, ancestors: list[int]) -> None:
        self.particles = [self.particles[a].copy(parent=a) for a in ancestors]
        self.batch.reorder(ancestors)

    def keep(self) -> None:
        """No selection this step: every slot continues itself."""
        for i, p in enumerate(self.particles):
            p.parent = i

    def live(self) -> set[int]:
        """Slots that will grow at the next `extend`."""
        return {i for i, p in enumerate(self.particles) if not p.finished}

    def ended(self) -> list[int]:
        """Slots whose particle ended with a stop token (a complete solution, not cut off at its cap)."""
        return [i for i, p in enumerate(self.particles) if p.token_ids and p.token_ids[-1] in self.lm.stop_ids]

    def best(self, values) -> int:
        """`best_complete` over this run's particles."""
        ended = set(self.ended())
        return best_complete(values, [i in ended for i in range(len(self.particles))])

    @property
    def all_finished(self) -> bool:
        return all(p.finished for p in self.particles)

    def cancelled(self) -> bool:
        """True (stop reason "cancelled") when Stop was pressed: asked between steps, too."""
        return self.outcome.cancelled(self.ctx)

    def finish(self, outcome: Outcome, chosen: int, weights, votes: dict | None = None, rule: str = "") -> None:
        texts = self.texts()
        answers = self.answers(texts)
        ended = set(self.ended())
        p = self.particles[chosen]
        outcome.token_ids = list(p.token_ids)
        if outcome.stop_reason != "cancelled":
            outcome.stop_reason = "eos" if p.token_ids and p.token_ids[-1] in self.lm.stop_ids else "max_new_tokens"
        outcome.extra = {
            "method": self.method, "chosen": chosen, "answer": answers[chosen], "rule": rule,
            "votes": votes or {},
            "particles": [{"id": i, "text": texts[i], "weight": float(weights[i]),
                           "score": self.score_of(i), "answer": answers[i], "finished": q.finished,
                           "ended": i in ended, "num_tokens": len(q.token_ids)} for i, q in enumerate(self.particles)],
        }


def best_complete(values, ended: list[bool]) -> int:
    """The index with the largest value among complete solutions (all if none ended); ties: lowest index.

    A particle cut off at its token cap never wrote its answer, so it is no candidate while
    some particle did finish.
    """
    pool = [i for i, e in enumerate(ended) if e] or range(len(ended))
    return max(pool, key=lambda i: (float(values[i]), -i))


def score_weights(run: ScalingRun, temperature: float = 1.0) -> torch.Tensor:
    """Display / selection weights from solution scores: softmax(logit(score) / T) over the particles (N,).
    A method's `run.event(weights, ...)` and `run.finish(outcome, chosen, weights, ...)` take these."""
    return pf.weights_from_rewards([run.score_of(i) for i in range(len(run.particles))], temperature)


def identity_ancestors(n: int) -> list[int]:
    """The ancestors of a step without resampling: every slot continues itself."""
    return list(range(n))
