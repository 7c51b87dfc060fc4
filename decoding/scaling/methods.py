"""Inference-time scaling: N partial solutions, a reward, and a rule that keeps the good ones.

Methods (each a strategy; all decode their N particles as one batch, `decoding.scaling.particle_batch`):

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
  resampling, but are not extended. Entropic particle filtering (ePF, Giannone et al. 2025):
  `annealing=ess|entropy` is its Entropic Annealing as the authors' its_hub code writes it (the
  particles are drawn from softmax(log w / tau), `decoding.scaling.particles.annealing_temperature`;
  t counts the steps taken, T_max is `annealing_steps`); `entropic` > 0 is the project's own
  variant (weights flattened until their entropy is at least that fraction of log N,
  `entropic_weights`); `lookahead` is the project's own variant of its Look-ahead Modulation
  (`lookahead_weights`). When all weights are equal
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

Glossary: particle, weight, ESS, resample, ancestor, lineage: see `decoding.scaling.particles`; step,
final, hard violation: see `decoding.scaling.rewards`. score: a solution's step rewards aggregated
(`aggregate`: last, min, mean or product).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Generator, Iterator

import torch

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.token.autoregressive import check_causal_run
from decoding.registry import family_check, register_strategy
from decoding.scaling import particles as pf
from decoding.scaling.params import (BestOfNParams, FirstFinishParams, ParticleFilterParams, RewardBeamParams,
                                     ScalingParams, VoteParams)
from decoding.scaling.run import ScalingRun, identity_ancestors, score_weights

family_check("scaling")(check_causal_run)  # every particle's prompt + tokens fit the policy's context


def independent_samples(ctx: RunContext, params: ScalingParams, outcome: Outcome, method: str,
                        chunk_tokens: int | None = None, first_finish: bool = False) -> Generator[Event, None, ScalingRun]:
    """N samples with no selection until the end; yields the events and returns the run (`run.finish(...)` is
    the caller's: it picks the answer). A method built on independent samples (best-of-N, majority vote, a
    new one) starts here. `chunk_tokens`: a picture every this many tokens instead of every step;
    `first_finish`: stop when the first sample has ended with a stop token."""
    run = ScalingRun(ctx, params, method, outcome)
    while not run.all_finished:
        if run.step:
            run.keep()
        live = run.live()
        if not run.extend(chunk_tokens, barrier=False):  # Stop during the step; no step barrier: nothing
            #                                            is selected before the end
            break
        weights = score_weights(run)
        yield run.event(weights, identity_ancestors(params.n), False, weights, live)
        if first_finish and any(p.finished and p.token_ids and p.token_ids[-1] in ctx.lm.stop_ids
                                            for p in run.particles):
            break
        if run.cancelled():
            break
    return run


@register_strategy("best-of-n", params=BestOfNParams, family="scaling", uses_seed=True,
                   help="N samples as one batch; the one the reward scores highest wins",
                   papers=(bib.BROWN_2024, bib.BALASHANKAR_2025, bib.HALDER_2025, bib.LIU_CHAO_2025))
def best_of_n(ctx: RunContext, params: BestOfNParams, outcome: Outcome) -> Iterator[Event]:
    run = yield from independent_samples(ctx, params, outcome, "best-of-n")
    scores = torch.tensor([run.score_of(i) for i in range(params.n)], dtype=torch.float64)
    if params.select == "max":
        chosen, rule = run.best(scores), f"highest score ({params.aggregate} of step rewards) among finished answers"
        weights = score_weights(run)
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


def shortest_share(lengths: list[int], ended: list[int], share: float) -> set[int]:
    """The slots that vote under Think Deep, Think Fast's length signal (Wang et al. 2025): the
    ceil(share x complete) shortest complete answers (ties: the lower slot); every slot at share 1
    or when none is complete."""
    if share >= 1 or not ended:
        return set(range(len(lengths)))
    ranked = sorted(ended, key=lambda i: (lengths[i], i))
    return set(ranked[:max(1, math.ceil(len(ranked) * share))])


def _vote_choice(run: ScalingRun, weights: list[float], voters: set[int] | None = None) -> tuple[int, dict]:
    """The particle carrying the winning answer (highest weight among its voters); `voters`: the slots
    whose answers vote (all when None)."""
    answers = [a if voters is None or i in voters else None for i, a in enumerate(run.answers())]
    votes = vote(answers, weights)
    if not votes:
        return max(range(len(weights)), key=lambda i: weights[i]), votes
    winner = next(iter(votes))
    voters = [i for i, a in enumerate(answers) if a == winner]
    return max(voters, key=lambda i: weights[i]), votes


@register_strategy("majority-vote", params=VoteParams, family="scaling", uses_seed=True,
                   help="self-consistency: N samples vote with their final answers (optionally reward-weighted, "
                        "optionally only the shortest)", papers=(bib.WANG_2023, bib.WANG_J_2025))
def majority_vote(ctx: RunContext, params: VoteParams, outcome: Outcome) -> Iterator[Event]:
    run = yield from independent_samples(ctx, params, outcome, "majority-vote")
    ballots = [run.score_of(i) if params.weighted else 1.0 for i in range(params.n)]
    voters = shortest_share([len(p.token_ids) for p in run.particles], run.ended(), params.shortest)
    chosen, votes = _vote_choice(run, ballots, voters)
    rule = "answer with the largest total score" if params.weighted else "most frequent answer"
    if params.shortest < 1:
        rule += f" among the shortest {len(voters)} complete answers"
    run.finish(outcome, chosen, pf.normalize(ballots) if sum(ballots) > 0 else score_weights(run), votes, rule)


@register_strategy("first-finish", params=FirstFinishParams, family="scaling", uses_seed=True,
                   help="First Finish Search: N samples in lockstep, the first to finish is the answer",
                   papers=(bib.AGARWAL_2025,))
def first_finish(ctx: RunContext, params: FirstFinishParams, outcome: Outcome) -> Iterator[Event]:
    run = yield from independent_samples(ctx, params, outcome, "first-finish", chunk_tokens=params.chunk_tokens,
                                         first_finish=True)
    ended = run.ended()
    pool = ended or range(params.n)
    chosen = min(pool, key=lambda i: (len(run.particles[i].token_ids), i))
    weights = torch.zeros(params.n, dtype=torch.float64)
    weights[chosen] = 1.0
    run.finish(outcome, chosen, weights, rule="first to finish (fewest tokens)" if ended else "none finished: shortest")


@register_strategy("reward-beam", params=RewardBeamParams, family="scaling", uses_seed=True,
                   help="beam search over reasoning steps: keep the N/beam_width best by reward, copy, expand",
                   papers=(bib.SNELL_2024,))
def reward_beam(ctx: RunContext, params: RewardBeamParams, outcome: Outcome) -> Iterator[Event]:
    run = ScalingRun(ctx, params, "reward-beam", outcome)
    while not run.all_finished:
        new_steps = run.live()
        if not run.extend():  # Stop during the step
            break
        weights = score_weights(run)
        live = [i for i, p in enumerate(run.particles) if not p.finished]
        ancestors = identity_ancestors(params.n)
        if live:
            keep = max(1, len(live) // params.beam_width)
            best = sorted(live, key=lambda i: (-run.score_of(i), i))[:keep]
            for k, slot in enumerate(live):  # live slots are refilled with copies of the best, in turn
                ancestors[slot] = best[k * keep // len(live)]
        resampled = ancestors != identity_ancestors(params.n)
        after = [float(weights[a]) for a in ancestors]
        yield run.event(weights, ancestors, resampled, after, new_steps, {"kept": len(set(ancestors))})
        run.reorder(ancestors)
        if run.cancelled():
            break
    chosen = run.best([run.score_of(i) for i in range(params.n)])
    run.finish(outcome, chosen, score_weights(run),
               rule=f"highest score ({params.aggregate} of step rewards) among finished answers")


@register_strategy("particle-filter", params=ParticleFilterParams, family="scaling", uses_seed=True,
                   help="particle filtering (Puri et al. 2025): weight steps by reward, resample, repeat",
                   papers=(bib.PURI_2025, bib.GIANNONE_2025, bib.LEW_2023))
def particle_filter(ctx: RunContext, params: ParticleFilterParams, outcome: Outcome) -> Iterator[Event]:
    run = ScalingRun(ctx, params, "particle-filter", outcome)
    weights = torch.full((params.n,), 1.0 / params.n, dtype=torch.float64)
    unscored = params.reward == "none"  # weights stay uniform, nothing is resampled: no step barrier
    while not run.all_finished:
        new_steps = run.live()
        if not run.extend(barrier=not unscored):  # Stop during the step
            break
        weights = pf.weights_from_rewards(run.current_rewards(), params.reward_temperature)
        extra = {"ess_threshold": params.ess_threshold or None}
        if params.lookahead > 0 and not run.all_finished and not unscored:
            ahead = run.look_ahead(int(torch.randint(0, 2**62, (1,), generator=ctx.generator)))
            if ahead is not None:
                weights = pf.lookahead_weights(run.current_rewards(), ahead, params.lookahead, params.reward_temperature)
                extra["lookahead_rewards"] = [round(float(a), 4) for a in ahead]
        draw_from = weights
        if params.annealing != "none" and not unscored:
            tau = pf.annealing_temperature(weights, run.step + 1, params.annealing_steps, params.annealing)
            draw_from = pf.annealed_weights(weights, tau)
            extra["annealing_temperature"] = tau
        if params.entropic > 0:
            beta = pf.entropic_exponent(weights, params.entropic)
            draw_from = pf.entropic_weights(weights, params.entropic)
            extra["entropic_beta"] = beta
        uniform = bool(torch.allclose(weights, torch.full_like(weights, 1.0 / params.n), atol=1e-12))
        if uniform or run.all_finished:
            ancestors, resampled = identity_ancestors(params.n), False
        else:
            ancestors, resampled = pf.resample(draw_from, params.n, ctx.generator, params.resampling,
                                               params.ess_threshold or None)
        after = [1.0 / params.n] * params.n if resampled else weights.tolist()
        yield run.event(weights, ancestors, resampled, after, new_steps, extra)
        run.reorder(ancestors)
        weights = torch.tensor(after, dtype=torch.float64)  # the weights of the slots as they now are
        if run.cancelled():
            break
    if params.select == "vote":
        chosen, votes = _vote_choice(run, weights.tolist())
        run.finish(outcome, chosen, weights, votes, rule="weighted majority of final answers")
    else:
        chosen = run.best(weights.tolist())
        run.finish(outcome, chosen, weights, rule="highest final weight among finished answers")
