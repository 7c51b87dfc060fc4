"""Inference-time scaling: N partial solutions, a reward, and a rule that keeps the good ones.

Methods (each a strategy; all decode their N particles as one batch, `decoding.particle_batch`):

- best-of-n: N independent samples; the highest score wins, or one is drawn from softmax(score /
  select_temperature) (selection by a judge at a temperature, as analysed in the LLM-as-a-judge
  and best-of-N literature, e.g. Brown et al. 2024, "Large Language Monkeys").
- majority-vote: self-consistency (Wang et al. 2023): the most frequent final answer; with
  `weighted`, answers are weighted by their scores (reward-weighted majority vote).
- reward-beam: beam search guided by a process reward (as in Snell et al. 2024 and its_hub's
  BeamSearch): after every step keep the best N / beam_width live particles, copy each
  beam_width times, and expand again; finished particles stay as they are.
- particle-filter: Puri et al. 2025 (arXiv:2502.01618): after every step each particle's reward
  r becomes a weight softmax(logit(r) / reward_temperature), and N particles are drawn from those
  weights (multinomial, as in the paper; systematic, or only when the ESS falls below
  ess_threshold * N, as options). The weight is always the current step's potential, as in
  the paper; with an ESS threshold a step without resampling simply keeps every particle
  (weights are not accumulated as importance ratios across steps). Finished particles keep their last reward and take part in
  resampling, but are not extended. With `entropic` > 0 the resampling weights are flattened
  until their entropy is at least that fraction of log N (entropic particle filtering, ePF,
  Giannone et al. 2025; see `decoding.particles.entropic_weights`). When all weights are equal
  there is nothing to select and the particles are kept (so a constant reward gives exactly
  independent sampling).
- first-finish: First Finish Search (Agarwal et al. 2025): N samples in lockstep, `chunk_tokens`
  tokens per event; the first to emit a stop token (fewest tokens) is the answer.

The final choice only considers particles that ended with a stop token (complete solutions) as
long as one did: a particle cut off at its token cap never wrote its answer.

A step ends at a newline (or a blank line) after some text, at a stop token, or after
`max_step_tokens` tokens. Hard text constraints that can be checked token by token (a forbidden
letter) are enforced while sampling, as in SMC steering (Lew et al. 2023): tokens containing the
letter are masked, and the step's reward is the probability mass the model kept, so the final
text never contains the letter and particles that fought the constraint lose weight.

Glossary: particle, weight, ESS, resample, ancestor, lineage: see `decoding.particles`; step,
final, hard violation: see `decoding.rewards`. score: a solution's step rewards aggregated
(`aggregate`: last, min, mean or product).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Generator, Iterator

import torch

from decoding import particles as pf
from decoding import rewards as rw
from decoding.events import Event, ParticleStep
from decoding.particle_batch import ParticleBatch, slot_generators
from decoding.contracts import Outcome, RunContext
from decoding.params import Params, param
from decoding.registry import register_strategy

STEP_DELIMITERS = {"newline": "\n", "blank-line": "\n\n"}
AGGREGATES = ("last", "min", "mean", "product")
REWARD_NAMES = ("arith-step", "final-answer", "forbid-letter", "max-word-length", "required-words",
                "lm-judge", "prm", "none")
REWARD_HELP = {
    "arith-step": "process reward: 0.05 + 0.9 x the share of 'a op b = c' in the newest step that are right (0.5 if none)",
    "final-answer": "outcome reward: 1 if the final answer equals `reference` (an oracle), 0 otherwise",
    "forbid-letter": "constraint: no word may contain `letter` (hard: masked while sampling; soft: share of clean words)",
    "max-word-length": "constraint: every word at most `max_word_length` letters (hard: weight 0 when broken)",
    "required-words": "constraint: the text must contain every word of `words`",
    "lm-judge": "LM as judge: P(Yes) / (P(Yes) + P(No)) of `judge_model` asked whether the step is correct",
    "prm": "a hub process reward model (`prm_model`, e.g. Qwen2.5-Math-PRM-7B; needs internet and a GPU)",
    "none": "a constant reward: weights stay uniform, every method becomes plain sampling",
}
assert set(REWARD_HELP) == set(REWARD_NAMES)
NEUTRAL = 0.5  # reward of a step an outcome-only reward cannot judge yet (weight logit 0)


@dataclass(frozen=True)
class ScalingParams(Params):
    """Parameters every scaling method shares: budget, reward, sampling and step shape."""

    n: int = param(4, low=1, high=64, help="Particles / samples / beams decoded together: the budget.")
    reward: str = param("arith-step", choices=REWARD_NAMES, help="What scores each step (list: python -m decoding list).")
    temperature: float = param(0.8, low=0.0, high=5.0, help="Token sampling temperature of every particle (0 = greedy).")
    top_p: float = param(0.95, low=0.0, high=1.0, low_inclusive=False, help="Nucleus mass kept for every token (1 = off).")
    step_delimiter: str = param("newline", choices=tuple(STEP_DELIMITERS), help="Where one reasoning step ends.")
    max_step_tokens: int = param(48, low=1, high=512, help="A step also ends after this many tokens.")
    aggregate: str = param("min", choices=AGGREGATES, help="How a solution's step rewards make its score.")
    letter: str = param("e", note="a letter", help="forbid-letter: no word may contain it (hard: masked while sampling).")
    max_word_length: int = param(5, low=1, high=40, help="max-word-length: letters per word at most.")
    words: str = param("", note="word,word", help="required-words: words the answer must contain.")
    reference: str = param("", note="a number", help="final-answer: the expected answer (an oracle: best-of-N becomes pass@N).")
    hard: bool = param(True, help="Constraints: a violation gives weight 0 (true) or lowers it (false).")
    judge_model: str = param("", note="name or hub id",
                             help="lm-judge: the model asked 'is this step correct?' (empty = the same model).")
    prm_model: str = param("Qwen/Qwen2.5-Math-PRM-7B", note="hub id",
                           help="prm: a process reward model from the hub (needs internet).")

    def __post_init__(self):
        super().__post_init__()
        if self.reward in ("forbid-letter", "max-word-length", "required-words", "final-answer"):
            build_rule_reward(self)  # validates the reward's own parameters now, not mid-run


@dataclass(frozen=True)
class BestOfNParams(ScalingParams):
    select: str = param("max", choices=("max", "softmax"),
                        help="Pick the highest score, or draw from softmax(score / select_temperature).")
    select_temperature: float = param(0.1, low=1e-3, high=10.0, help="select=softmax: lower = closer to the maximum.")


@dataclass(frozen=True)
class VoteParams(ScalingParams):
    weighted: bool = param(False, help="Weight each answer's votes by its score.")


@dataclass(frozen=True)
class RewardBeamParams(ScalingParams):
    beam_width: int = param(2, low=1, high=64, note="divides n",
                            help="Each kept beam is copied this many times; n / beam_width are kept.")

    def __post_init__(self):
        super().__post_init__()
        if self.n % self.beam_width:
            raise ValueError(f"`n` ({self.n}) must be a multiple of `beam_width` ({self.beam_width})")


@dataclass(frozen=True)
class ParticleFilterParams(ScalingParams):
    reward_temperature: float = param(1.0, low=1e-3, high=100.0,
                                      help="Weights = softmax(logit(reward) / this): lower = greedier.")
    resampling: str = param("multinomial", choices=pf.RESAMPLE_METHODS, help="How N particles are drawn from the weights.")
    ess_threshold: float = param(0.0, low=0.0, high=1.0,
                                 help="Resample only when ESS < this x N (0 = every step, as the paper).")
    entropic: float = param(0.0, low=0.0, high=1.0,
                            help="ePF: flatten weights to at least this fraction of the maximum entropy.")
    select: str = param("best", choices=("best", "vote"), help="Final answer: the highest weight, or the weighted majority.")


@dataclass(frozen=True)
class FirstFinishParams(ScalingParams):
    chunk_tokens: int = param(8, low=1, high=256, help="Tokens each sample generates between two pictures.")


# --------------------------------------------------------------------------- rewards


class ConstantReward:
    """reward=none: every step scores 1 (weights stay uniform; methods reduce to plain sampling)."""

    name = "none"

    def score(self, question, steps, final):
        return rw.RewardResult(1.0, False, "no reward")


def build_rule_reward(params: ScalingParams):
    """The programmatic reward named by `params.reward` (no model needed)."""
    name = params.reward
    if name == "arith-step":
        return rw.ArithmeticStepChecker(floor=0.05, ceiling=0.95, neutral=0.5)
    if name == "final-answer":
        if not params.reference.strip():
            raise ValueError("reward final-answer needs `reference`, the expected number (e.g. --set reference=42)")
        return rw.make_reward("final_answer", {"reference": params.reference})
    if name == "forbid-letter":
        return rw.make_reward("forbidden_letter", {"letter": params.letter, "hard": params.hard})
    if name == "max-word-length":
        return rw.make_reward("max_word_length", {"n": params.max_word_length, "hard": params.hard})
    if name == "required-words":
        if not params.words.strip():
            raise ValueError("reward required-words needs `words`, comma-separated (e.g. --set words=sun,moon)")
        return rw.make_reward("required_words", {"words": params.words, "hard": params.hard})
    return ConstantReward()


def lm_judge(lm) -> callable:
    """prompt -> P(Yes) / (P(Yes) + P(No)) of `lm`'s next token after the judging prompt.

    Normalised over the two answers because a small model spreads most mass elsewhere; the
    probability the judge gives to "Yes" relative to "No" is what ranks particles.
    """
    vocab = {}
    for word in ("Yes", " Yes", "yes", "No", " No", "no"):
        ids = lm.tokenizer(word, add_special_tokens=False).input_ids
        if len(ids) == 1:
            vocab.setdefault(word.strip().lower(), set()).add(ids[0])
    if "yes" not in vocab or "no" not in vocab:
        raise ValueError(f"the judge {lm.name}'s tokenizer has no single-token Yes/No")
    yes, no = sorted(vocab["yes"]), sorted(vocab["no"])

    def judge(prompt: str) -> float:
        ids, _, _ = lm.encode_prompt(prompt, chat=True)
        probs = torch.softmax(lm.forward(torch.tensor([ids]), last_only=True).logits[0, -1], -1)  # (V,)
        p_yes, p_no = float(probs[yes].sum()), float(probs[no].sum())
        return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else NEUTRAL

    return judge


def build_reward(params: ScalingParams, policy) -> tuple[object, list]:
    """(reward, extra LMs whose calls count as this run's forward passes)."""
    if params.reward == "lm-judge":
        from decoding.run import as_lm

        judge_lm = policy if not params.judge_model.strip() else as_lm(params.judge_model.strip())
        extra = [] if judge_lm is policy else [judge_lm]
        return rw.make_reward("lm_judge", {"judge": lm_judge(judge_lm)}), extra
    if params.reward == "prm":
        from decoding.prm import HubPRM

        prm = HubPRM.load(params.prm_model)
        return prm, [prm]
    return build_rule_reward(params), []


def banned_tokens(reward, lm) -> torch.Tensor | None:
    """(V,) bool mask of tokens a hard forbidden-letter constraint can never accept, else None."""
    if not isinstance(reward, rw.ForbiddenLetter) or not reward.hard:
        return None
    letter = reward.letter.lower()
    cached = getattr(lm, "_banned_by_letter", {})
    if letter in cached:
        return cached[letter]
    banned = torch.zeros(lm.vocab_size, dtype=torch.bool)
    special = set(lm.tokenizer.all_special_ids) | set(lm.stop_ids)
    for token_id in range(min(lm.vocab_size, len(lm.tokenizer))):
        if token_id not in special and letter in lm.token_text(token_id).lower():
            banned[token_id] = True
    lm._banned_by_letter = cached | {letter: banned}
    return banned


def aggregate(rewards: list[float], how: str) -> float:
    if not rewards:
        return NEUTRAL
    if how == "last":
        return rewards[-1]
    if how == "min":
        return min(rewards)
    if how == "mean":
        return sum(rewards) / len(rewards)
    return math.prod(rewards)


# --------------------------------------------------------------------------- the shared run


@dataclass
class Particle:
    """What a slot holds: its tokens, steps and rewards (copied whole on resampling)."""

    token_ids: list[int] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    detail: str = ""
    finished: bool = False
    parent: int = -1  # slot it continued at the previous step

    def copy(self, parent: int) -> Particle:
        return Particle(list(self.token_ids), list(self.steps), list(self.rewards), self.detail, self.finished, parent)


class ScalingRun:
    """N particles over one batch: extend a step, score, build the event, reorder."""

    def __init__(self, ctx: RunContext, params: ScalingParams, method: str):
        self.ctx, self.params, self.method = ctx, params, method
        self.lm = ctx.lm
        self.reward, self.extra_lms = build_reward(params, self.lm)
        self._passes_seen = self._passes()  # the prompt's prefill counts on the first event
        seed = int(torch.randint(0, 2**62, (1,), generator=ctx.generator))
        self.batch = ParticleBatch(self.lm, ctx.prompt_ids, slot_generators(seed, params.n),
                                   temperature=params.temperature, top_p=params.top_p,
                                   banned=banned_tokens(self.reward, self.lm))
        self.particles = [Particle() for _ in range(params.n)]
        self.outcome_only = isinstance(self.reward, rw.FinalAnswerChecker)
        self.delimiter = STEP_DELIMITERS[params.step_delimiter]
        self.step = 0

    def _passes(self) -> int:
        return self.lm.forward_passes + sum(m.forward_passes for m in self.extra_lms)

    def step_done(self, new_ids: list[int]) -> bool:
        text = self.lm.decode(new_ids).lstrip()
        return self.delimiter in text

    def extend(self, chunk_tokens: int | None = None) -> None:
        """Every unfinished particle grows by one step (or `chunk_tokens` tokens) and is scored."""
        live = [i for i, p in enumerate(self.particles) if not p.finished]
        budget = {i: self.ctx.max_new_tokens - len(self.particles[i].token_ids) for i in live}
        per_step = {i: min(budget[i], chunk_tokens or self.params.max_step_tokens) for i in live}
        done = (lambda ids: False) if chunk_tokens else self.step_done
        grown = self.batch.extend(live, done, [per_step.get(i, 0) for i in range(len(self.particles))])
        for i, (ids, end) in grown.items():
            p = self.particles[i]
            p.token_ids += ids
            p.steps.append(self.lm.decode(ids))
            p.finished = end == "eos" or len(p.token_ids) >= self.ctx.max_new_tokens
            self._score(i)

    def _score(self, i: int) -> None:
        p = self.particles[i]
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

    def cancelled(self, outcome: Outcome) -> bool:
        if self.ctx.should_stop():
            outcome.stop_reason = "cancelled"
            return True
        return False

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


def _score_weights(run: ScalingRun, temperature: float = 1.0) -> torch.Tensor:
    """Display / selection weights from solution scores: softmax(logit(score) / T)."""
    return pf.weights_from_rewards([run.score_of(i) for i in range(len(run.particles))], temperature)


def _identity(n: int) -> list[int]:
    return list(range(n))


# --------------------------------------------------------------------------- methods


def _independent(ctx: RunContext, params: ScalingParams, outcome: Outcome, method: str,
                 chunk_tokens: int | None = None) -> Generator[Event, None, ScalingRun]:
    """N samples with no selection until the end; yields the events and returns the run."""
    run = ScalingRun(ctx, params, method)
    while not run.all_finished:
        if run.step:
            run.keep()
        live = run.live()
        run.extend(chunk_tokens)
        weights = _score_weights(run)
        yield run.event(weights, _identity(params.n), False, weights, live)
        if method == "first-finish" and any(p.finished and p.token_ids and p.token_ids[-1] in ctx.lm.stop_ids
                                            for p in run.particles):
            break
        if run.cancelled(outcome):
            break
    return run


@register_strategy("best-of-n", params=BestOfNParams, family="scaling", uses_seed=True,
                   help="N samples as one batch; the one the reward scores highest wins")
def best_of_n(ctx: RunContext, params: BestOfNParams, outcome: Outcome) -> Iterator[Event]:
    run = yield from _independent(ctx, params, outcome, "best-of-n")
    scores = torch.tensor([run.score_of(i) for i in range(params.n)], dtype=torch.float64)
    if params.select == "max":
        chosen, rule = run.best(scores), f"highest score ({params.aggregate} of step rewards) among finished answers"
        weights = _score_weights(run)
    else:
        pool = torch.zeros(params.n, dtype=torch.bool)
        pool[run.ended() or list(range(params.n))] = True
        weights = torch.softmax((scores / params.select_temperature).masked_fill(~pool, float("-inf")), 0)
        chosen = int(torch.multinomial(weights, 1, generator=ctx.generator))
        rule = f"drawn from softmax(score / {params.select_temperature:g})"
    run.finish(outcome, chosen, weights, rule=rule)


def vote(answers: list[str | None], weights: list[float]) -> dict[str, float]:
    """Total weight per answer (missing answers do not vote), largest first."""
    totals: dict[str, float] = defaultdict(float)
    for answer, weight in zip(answers, weights):
        if answer is not None:
            totals[answer] += float(weight)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def _vote_choice(run: ScalingRun, weights: list[float]) -> tuple[int, dict]:
    """The particle carrying the winning answer (highest weight among its voters)."""
    answers = run.answers()
    votes = vote(answers, weights)
    if not votes:
        return max(range(len(weights)), key=lambda i: weights[i]), votes
    winner = next(iter(votes))
    voters = [i for i, a in enumerate(answers) if a == winner]
    return max(voters, key=lambda i: weights[i]), votes


@register_strategy("majority-vote", params=VoteParams, family="scaling", uses_seed=True,
                   help="self-consistency: N samples vote with their final answers (optionally reward-weighted)")
def majority_vote(ctx: RunContext, params: VoteParams, outcome: Outcome) -> Iterator[Event]:
    run = yield from _independent(ctx, params, outcome, "majority-vote")
    ballots = [run.score_of(i) if params.weighted else 1.0 for i in range(params.n)]
    chosen, votes = _vote_choice(run, ballots)
    rule = "answer with the largest total score" if params.weighted else "most frequent answer"
    run.finish(outcome, chosen, pf.normalize(ballots) if sum(ballots) > 0 else _score_weights(run), votes, rule)


@register_strategy("first-finish", params=FirstFinishParams, family="scaling", uses_seed=True,
                   help="First Finish Search: N samples in lockstep, the first to finish is the answer")
def first_finish(ctx: RunContext, params: FirstFinishParams, outcome: Outcome) -> Iterator[Event]:
    run = yield from _independent(ctx, params, outcome, "first-finish", chunk_tokens=params.chunk_tokens)
    ended = run.ended()
    pool = ended or range(params.n)
    chosen = min(pool, key=lambda i: (len(run.particles[i].token_ids), i))
    weights = torch.zeros(params.n, dtype=torch.float64)
    weights[chosen] = 1.0
    run.finish(outcome, chosen, weights, rule="first to finish (fewest tokens)" if ended else "none finished: shortest")


@register_strategy("reward-beam", params=RewardBeamParams, family="scaling", uses_seed=True,
                   help="beam search over reasoning steps: keep the N/beam_width best by reward, copy, expand")
def reward_beam(ctx: RunContext, params: RewardBeamParams, outcome: Outcome) -> Iterator[Event]:
    run = ScalingRun(ctx, params, "reward-beam")
    while not run.all_finished:
        new_steps = run.live()
        run.extend()
        weights = _score_weights(run)
        live = [i for i, p in enumerate(run.particles) if not p.finished]
        ancestors = _identity(params.n)
        if live:
            keep = max(1, len(live) // params.beam_width)
            best = sorted(live, key=lambda i: (-run.score_of(i), i))[:keep]
            for k, slot in enumerate(live):  # live slots are refilled with copies of the best, in turn
                ancestors[slot] = best[k * keep // len(live)]
        resampled = ancestors != _identity(params.n)
        after = [float(weights[a]) for a in ancestors]
        yield run.event(weights, ancestors, resampled, after, new_steps, {"kept": len(set(ancestors))})
        run.reorder(ancestors)
        if run.cancelled(outcome):
            break
    chosen = run.best([run.score_of(i) for i in range(params.n)])
    run.finish(outcome, chosen, _score_weights(run),
               rule=f"highest score ({params.aggregate} of step rewards) among finished answers")


@register_strategy("particle-filter", params=ParticleFilterParams, family="scaling", uses_seed=True,
                   help="particle filtering (Puri et al. 2025): weight steps by reward, resample, repeat")
def particle_filter(ctx: RunContext, params: ParticleFilterParams, outcome: Outcome) -> Iterator[Event]:
    run = ScalingRun(ctx, params, "particle-filter")
    weights = torch.full((params.n,), 1.0 / params.n, dtype=torch.float64)
    while not run.all_finished:
        new_steps = run.live()
        run.extend()
        weights = pf.weights_from_rewards(run.current_rewards(), params.reward_temperature)
        extra = {"ess_threshold": params.ess_threshold or None}
        draw_from = weights
        if params.entropic > 0:
            beta = pf.entropic_exponent(weights, params.entropic)
            draw_from = pf.entropic_weights(weights, params.entropic)
            extra["entropic_beta"] = beta
        uniform = bool(torch.allclose(weights, torch.full_like(weights, 1.0 / params.n), atol=1e-12))
        if uniform or run.all_finished:
            ancestors, resampled = _identity(params.n), False
        else:
            ancestors, resampled = pf.resample(draw_from, params.n, ctx.generator, params.resampling,
                                               params.ess_threshold or None)
        after = [1.0 / params.n] * params.n if resampled else weights.tolist()
        yield run.event(weights, ancestors, resampled, after, new_steps, extra)
        run.reorder(ancestors)
        weights = torch.tensor(after, dtype=torch.float64)  # the weights of the slots as they now are
        if run.cancelled(outcome):
            break
    if params.select == "vote":
        chosen, votes = _vote_choice(run, weights.tolist())
        run.finish(outcome, chosen, weights, votes, rule="weighted majority of final answers")
    else:
        chosen = run.best(weights.tolist())
        run.finish(outcome, chosen, weights, rule="highest final weight among finished answers")
