"""Review, refine, repeat: sample, check every step, keep the best, rewrite from its first bad step.

A loop in the spirit of generate-verify-refine methods (e.g. Madaan et al. 2023, "Self-Refine",
with the critique replaced by the step reward, as in step-level verifiers used for refinement):
round 1 samples `n` solutions; the best so far (complete solutions first, then the highest
score) is reviewed step by step; if a step's reward is below `accept` it is the first bad step,
and the next round samples `n` new continuations of the steps before it (one batch, the prefix
prefilled once). The best solution over all rounds wins. It stops after `rounds` rounds, or
early once the best solution is complete with no bad step. Each round's steps stream as
ParticleStep events with `extra` {"round", "kept_steps" (the prefix the round continues),
"bad_step" (the step it rewrites, 0-based)}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import param
from decoding.registry import register_strategy
from decoding.scaling.params import ScalingParams
from decoding.scaling.run import Particle, ScalingRun, identity_ancestors, score_weights
from decoding.scaling.scoring import aggregate


@dataclass(frozen=True)
class RefineParams(ScalingParams):
    rounds: int = param(3, low=1, high=16, help="refine: rounds of sampling; each after the first rewrites from the "
                                                "best solution's first bad step.")
    accept: float = param(0.5, low=0.0, high=1.0, help="refine: a step whose reward is below this is a bad step.")


def first_bad_step(p: Particle, accept: float) -> int | None:
    """Index of the first step whose reward is below `accept`, None when every step passes."""
    return next((i for i, r in enumerate(p.rewards) if r < accept), None)


@register_strategy("refine", params=RefineParams, family="scaling", uses_seed=True,
                   help="review, refine, repeat: sample n, check each step, rewrite the best one from its first "
                        "bad step, for a few rounds", papers=(bib.MADAAN_2023,))
def refine(ctx: RunContext, params: RefineParams, outcome: Outcome) -> Iterator[Event]:
    run = ScalingRun(ctx, params, "refine", outcome)
    seed = int(torch.randint(0, 2**62, (1,), generator=ctx.generator))
    seen: list[Particle] = []  # every complete or cut-off solution of every round
    prefix, bad = Particle(), None
    for round_ in range(params.rounds):
        if round_ and not run.restart(prefix, seed + round_):
            break
        first = True
        while not run.all_finished:  # one round: n solutions grow a step at a time, no selection
            if not first:
                run.keep()
            first = False
            live = run.live()
            if not run.extend():
                break
            weights = score_weights(run)
            extra = {"round": round_ + 1, "kept_steps": len(prefix.steps), "bad_step": bad}
            yield run.event(weights, identity_ancestors(params.n), False, weights, live, extra)
            if run.cancelled():
                break
        seen += [p.copy(parent=-1) for p in run.particles]
        if outcome.stop_reason == "cancelled":
            break
        best = _best(run, seen)
        bad = first_bad_step(best, params.accept)
        if bad is None and best.token_ids and best.token_ids[-1] in run.lm.stop_ids:
            break  # complete and every step passes: nothing to refine
        prefix = best.prefix(bad if bad is not None else len(best.steps))
    ranked = sorted(range(len(seen)), key=lambda i: _rank(run, seen[i], i))[: params.n]
    run.particles = [seen[i] for i in ranked] or run.particles  # the best first, then the runners-up
    run.finish(outcome, 0, score_weights(run),
               rule="best solution over all rounds (complete first, then the highest score)")


def _ended(run: ScalingRun, p: Particle) -> bool:
    return bool(p.token_ids) and p.token_ids[-1] in run.lm.stop_ids


def _rank(run: ScalingRun, p: Particle, i: int) -> tuple:
    return (not _ended(run, p), -aggregate(p.rewards, run.params.aggregate), i)


def _best(run: ScalingRun, seen: list[Particle]) -> Particle:
    return min(((p, i) for i, p in enumerate(seen)), key=lambda pi: _rank(run, *pi))[0]
