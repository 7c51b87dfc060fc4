"""Adaptive inference-time compute: the policy's own self-evaluation token decides when to stop
sampling and which partial samples to prune.

Manvi, Singh and Ermon 2024, "Adaptive Inference-Time Compute: LLMs Can Predict if They Can Do
Better, Even Mid-Generation" (arXiv 2410.02725). The policy is fine-tuned (the recipe:
`decoding.training.selfeval`) so that after a response, complete or partial, and a fixed query,
its next-token probability of one predefined answer is the probability that restarting would not
give a better response (capability-aware: measured against its own samples of the same prompt).
It costs one forward pass over the response and the query; no reward model (`reward=self-eval`).
On tiny-math the recipe did not give a working self-evaluation (docs/scaling.md: held-out AUC
about 0.5, and the fine-tuning cost the policy 20 points of pass@1), so no such model ships and the
default evaluator is the `arith-step` checker, which does see slips; any step reward can stand in.
The paper uses the evaluator three ways, and so does `adaptive`:

- **adaptive sampling**: samples are drawn in waves of exponentially growing size (1, 2, 4, ...)
  until `n` are spent; after each wave, if the best complete sample's self-evaluation reaches
  `threshold`, sampling stops (the policy says a new sample would not do better);
- **early pruning**: after `prune_after` steps of a wave, only the `keep` share of its samples
  with the highest mid-generation self-evaluation go on; the others stop there;
- **selection**: the complete sample with the highest self-evaluation is the answer.

At `threshold` = 1 and `prune_after` = 0 nothing stops early and nothing is pruned: the samples are
exactly best-of-N's with the reward `self-eval` and `aggregate` last (slot i has its own random
stream whenever it starts; tested). The paper also lowers the temperature of the first samples
(annealing); not done here: the waves share one batch and one temperature.

Events: one ParticleStep per step of a wave; `extra` holds "wave" (1-based), "wave_slots",
"dormant" (slots not started yet), "pruned" (slots stopped by pruning), "samples_started" and
"threshold"; the finish's `extra["adaptive"]` the samples started and pruned, the waves and
whether the self-evaluation stopped sampling early.

Glossary
    self-evaluation  P(no better) = P(N) / (P(N) + P(Y)) after `SELF_EVAL_QUERY`.
    wave             the samples started together after the previous wave ended.
    dormant          a slot whose sample has not started (and may never: sampling stopped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import param
from decoding.registry import register_strategy
from decoding.scaling.params import AGGREGATES, ScalingParams
from decoding.scaling.run import ScalingRun, identity_ancestors, score_weights
from decoding.scaling.scoring import REWARDS

SELF_EVAL_QUERY = "\nRestart?"  # read after the solution so far; the next token is the answer
NO_BETTER, BETTER = "N", "Y"  # one token each in tiny-math's byte-level vocabulary
SELF_EVAL_FILE = "self_eval.json"  # beside a model trained to answer the query (what the query is)


def query_text(prompt: str, lines: list[str]) -> str:
    """What the policy reads to evaluate itself: the prompt, the solution's lines so far, the query."""
    return prompt + "\n".join(line.strip() for line in lines if line.strip()) + SELF_EVAL_QUERY


def answer_ids(tokenizer) -> tuple[int, int]:
    """(no-better id, better id): each answer must be one token."""
    ids = [tokenizer(t, add_special_tokens=False).input_ids for t in (NO_BETTER, BETTER)]
    if any(len(i) != 1 for i in ids):
        raise ValueError(f"the self-evaluation answers {NO_BETTER!r} / {BETTER!r} must be one token each in this "
                         f"tokenizer, got {ids}")
    return ids[0][0], ids[1][0]


class SelfEvalReward:
    """reward=self-eval: the policy's own P(no better) after the solution so far (one forward pass)."""

    name = "self-eval"

    def __init__(self, lm):
        from decoding.models import file_beside

        path = file_beside(lm.loaded, SELF_EVAL_FILE)
        if path is None or not path.exists():
            raise ValueError(f"reward self-eval needs a policy fine-tuned to answer the self-evaluation query "
                             f"({SELF_EVAL_FILE} beside the model); {lm.name!r} was not (python -m "
                             f"decoding.training.selfeval makes one; none ships: on tiny-math it did not learn), or "
                             f"pick a step reward such as arith-step")
        self.lm = lm
        self.no_id, self.yes_id = answer_ids(lm.tokenizer)

    @torch.inference_mode()
    def probability(self, question: str, steps: list[str]) -> float:
        ids = self.lm.tokenizer(query_text(question, steps), add_special_tokens=False).input_ids
        logits = self.lm.forward(torch.tensor([ids]), last_only=True).logits[0, -1].float()  # (V,)
        return float(torch.softmax(logits[[self.no_id, self.yes_id]], 0)[0])

    def score(self, question: str, steps: list[str], final: bool):
        from decoding.scaling.rewards import RewardResult

        p = self.probability(question, steps)
        return RewardResult(p, False, f"self-evaluation: P(no better by restarting) = {p:.2f}")


@REWARDS.register("self-eval", help="the policy's own self-evaluation token: P(restarting would not do better), "
                                    "mid-generation (needs a policy trained for it: python -m decoding.training.selfeval)",
                  papers=(bib.MANVI_2024,))
def _self_eval(params, policy):
    from decoding.remote.lm import RemoteLM

    if isinstance(policy, RemoteLM):
        raise ValueError("reward self-eval reads the policy's next-token distribution after a query, which a remote "
                         "engine does not send; use a local policy trained for it")
    return SelfEvalReward(policy), []


@dataclass(frozen=True)
class AdaptiveParams(ScalingParams):
    n: int = param(16, low=1, high=64, ui_high=16, label="N (most samples)",
                   help="The most samples spent: waves of 1, 2, 4, ... until this many, unless the policy stops it.")
    reward: str = param("arith-step", plugins=REWARDS,
                        help="The evaluator that stops and prunes: self-eval (the policy's own token; needs a policy "
                             "trained for it) or any step reward (list: python -m decoding list).")
    aggregate: str = param("min", choices=AGGREGATES, help="How a solution's step rewards make its score (last for "
                                                           "self-eval: the whole solution's own verdict).")
    threshold: float = param(0.5, low=0.0, high=1.0, label="stop threshold",
                             help="Stop sampling once the best complete sample's score reaches this (arith-step, min: "
                                  "0.5 = no wrong step, the answer line being neutral; 1 = never stop early: plain "
                                  "best-of-N).")
    prune_after: int = param(0, low=0, high=16, label="prune after (steps)",
                             help="After this many steps of a wave, keep only its most promising samples (0 = never "
                                  "prune).")
    keep: float = param(0.5, low=0.0, high=1.0, low_inclusive=False, label="kept at pruning",
                        help="Share of a wave's unfinished samples that go on after pruning (at least one).")


def waves(n: int) -> list[int]:
    """Wave sizes 1, 2, 4, ... summing to n (the last one cut to fit)."""
    sizes, size = [], 1
    while sum(sizes) < n:
        sizes.append(min(size, n - sum(sizes)))
        size *= 2
    return sizes


def prune(scores: dict[int, float], keep: float) -> list[int]:
    """Slots to stop: all but the ceil(keep x count) best-scored (ties: the lower slot stays)."""
    kept = max(1, math.ceil(keep * len(scores)))
    ranked = sorted(scores, key=lambda i: (-scores[i], i))
    return sorted(ranked[kept:])


@register_strategy("adaptive", params=AdaptiveParams, family="scaling", uses_seed=True,
                   help="adaptive compute (Manvi et al.): waves of samples until the policy's self-evaluation says a "
                        "new one would not do better; prunes unpromising samples mid-way", papers=(bib.MANVI_2024,))
def adaptive(ctx: RunContext, params: AdaptiveParams, outcome: Outcome) -> Iterator[Event]:
    run = ScalingRun(ctx, params, "adaptive", outcome)
    dormant = set(range(params.n))
    for i in dormant:
        run.particles[i].finished = True  # not started: no step is taken for it
    pruned: set[int] = set()
    started, stopped_early, sizes = 0, False, waves(params.n)
    for wave, size in enumerate(sizes, 1):
        slots = list(range(started, started + size))
        started += size
        for i in slots:
            run.particles[i].finished = False
            dormant.discard(i)
        steps = 0
        while any(not run.particles[i].finished for i in slots):
            if run.step:  # every slot continues itself (the first picture has no earlier step)
                run.keep()
            live = run.live()
            if not run.extend(barrier=params.prune_after > 0):
                break
            steps += 1
            extra = {"wave": wave, "wave_slots": slots, "threshold": params.threshold}
            if steps == params.prune_after:
                rewards = run.current_rewards()
                going = {i: rewards[i] for i in slots if not run.particles[i].finished}
                stop = prune(going, params.keep)
                for i in stop:
                    run.particles[i].finished = True
                pruned.update(stop)
                extra["pruned_now"] = stop
            extra |= {"dormant": sorted(dormant), "pruned": sorted(pruned), "samples_started": started}
            weights = score_weights(run)
            yield run.event(weights, identity_ancestors(params.n), False, weights, live, extra)
            if run.cancelled():
                break
        if outcome.stop_reason == "cancelled":
            break
        complete = [i for i in run.ended() if i not in pruned]
        best = max((run.score_of(i) for i in complete), default=0.0)
        if params.threshold < 1 and best >= params.threshold and started < params.n:
            stopped_early = True
            break
    candidates = [i for i in range(params.n) if i not in dormant and i not in pruned]
    scores = [run.score_of(i) if i in candidates else -1.0 for i in range(params.n)]
    chosen = run.best(scores)
    weights = score_weights(run)
    weights[[i for i in range(params.n) if i not in candidates]] = 0.0  # never started, or stopped mid-way
    run.finish(outcome, chosen, weights / weights.sum() if weights.sum() > 0 else weights,
               rule=f"highest score ({params.aggregate} of step rewards) among complete, unpruned samples")
    outcome.extra["adaptive"] = {"samples": started, "pruned": len(pruned), "waves": sizes[:wave],
                                 "stopped_early": stopped_early, "tokens": run.batch.tokens_spent}
