"""Step-level speculation: a cheap drafter writes each reasoning step, the reward accepts it or the
policy rewrites it.

Papers followed
    Pan et al. 2025, "SpecReason: Fast and Accurate Inference-Time Compute via Speculative
    Reasoning" (a small model proposes each reasoning step; the large model judges the step and
    regenerates it when the judgement is low). Here the judgement is the run's step reward (the
    `arith-step` checker by default, a process reward), compared with a fixed `accept`;
    SpecReason's judge is the large model scoring the step by a prompt.
Cited for context, not implemented
    Maheswaran et al. 2025, "Arbitrage: Efficient Reasoning via Advantage-Aware Speculation"
    (arXiv 2512.05033) replaces exactly this fixed-threshold gate with a router trained to predict
    when the policy would write a meaningfully better step (approximating an oracle that compares
    both steps). Neither the router nor the oracle is implemented here.

One step, for every unfinished particle at once (each model's rows are one batch):
    1. the drafter (`draft_model`, at `draft_temperature`) samples a step;
    2. the reward scores the particle's steps plus the drafted one; at or above `accept` the step
       is accepted and the policy reads it in ONE forward pass (`ParticleBatch.feed_block`: a
       verification, like speculative decoding's, whose log-probabilities are recorded);
    3. below it, the drafter's step is undone (`rewind`) and the policy writes the step itself,
       token by token; the drafter then reads the policy's step in one pass.
A step costs the policy one call when accepted instead of one call per token. The events carry,
per step, which slots were accepted or rewritten, the drafts' text and reward, and the running
calls of each model, so the tab and the benchmark show the cost saved from what ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding.contracts import Cancelled, Outcome, RunContext
from decoding.events import Event
from decoding.params import param
from decoding.registry import register_strategy
from decoding.scaling.params import ScalingParams
from decoding.scaling.particle_batch import ParticleBatch, slot_generators
from decoding.scaling.run import ScalingRun, identity_ancestors, score_weights
from decoding.scaling.scoring import NEUTRAL


@dataclass(frozen=True)
class StepSpeculationParams(ScalingParams):
    n: int = param(1, low=1, high=64, help="Solutions written side by side (each step drafted and judged per solution).")
    draft_model: str = param("", note="name",
                             help="The drafter: a smaller model with the policy's tokenizer (empty = the policy itself).")
    draft_temperature: float = param(1.0, low=0.0, high=5.0, help="The drafter's sampling temperature (0 = greedy).")
    accept: float = param(0.5, low=0.0, high=1.0,
                          help="A drafted step whose reward is at least this is kept; below it, the policy rewrites it.")


def _drafter(ctx: RunContext, params: StepSpeculationParams):
    from decoding.remote.lm import RemoteLM
    from decoding.run import as_lm

    if isinstance(ctx.lm, RemoteLM):
        raise ValueError("step speculation feeds drafted steps into the policy's cache, which a remote engine does "
                         "not expose; pick a local model")
    name = params.draft_model.strip()
    draft = ctx.lm if not name or name == ctx.lm.name else as_lm(name)
    if getattr(draft, "tokenizer", None) is None or draft.tokenizer.get_vocab() != ctx.lm.tokenizer.get_vocab():
        raise ValueError(f"`draft_model` {name!r} does not share the policy's tokenizer; pick a model of the same "
                         f"family (for tiny-math: tiny-math-draft, or empty for the policy itself)")
    return draft


@register_strategy("step-speculation", params=StepSpeculationParams, family="scaling", uses_seed=True,
                   help="SpecReason: a cheap drafter writes each step; the reward keeps it (one policy pass) or "
                        "the policy rewrites it", papers=(bib.PAN_2025, bib.MAHESWARAN_2025))
def step_speculation(ctx: RunContext, params: StepSpeculationParams, outcome: Outcome) -> Iterator[Event]:
    draft_lm = _drafter(ctx, params)
    run = ScalingRun(ctx, params, "step-speculation", outcome)
    seed = int(torch.randint(0, 2**62, (1,), generator=ctx.generator))
    if draft_lm is not ctx.lm:
        run.extra_lms.append(draft_lm)  # the events' forward passes count both models
    calls = {"draft_calls": 0, "policy_calls": 0}

    def counted(key, fn, *args):
        """fn(*args), its model calls added to calls[key] (the drafter may be the policy itself)."""
        before = draft_lm.forward_passes if key == "draft_calls" else ctx.lm.forward_passes
        try:
            return fn(*args)
        finally:
            calls[key] += (draft_lm.forward_passes if key == "draft_calls" else ctx.lm.forward_passes) - before

    try:
        drafter = counted("draft_calls", lambda: ParticleBatch(
            draft_lm, ctx.prompt_ids, slot_generators(seed + 1, params.n), temperature=params.draft_temperature,
            top_p=params.top_p, banned=run.batch.banned, should_stop=ctx.should_stop))
    except Cancelled:
        outcome.stop_reason = "cancelled"
        run.finish(outcome, 0, score_weights(run))
        return
    totals = {"accepted_steps": 0, "rewritten_steps": 0, "draft_tokens": 0, "policy_tokens": 0, "accepted_tokens": 0}
    while not run.all_finished:
        if run.step:
            run.keep()
        live = sorted(run.live())
        caps = {i: min(params.max_step_tokens, ctx.max_new_tokens - len(run.particles[i].token_ids)) for i in live}
        mark = drafter.checkpoint()
        try:
            drafts = counted("draft_calls", drafter.extend, live, run.step_done,
                             [caps.get(i, 0) for i in range(params.n)])
        except Cancelled:
            outcome.stop_reason = "cancelled"
            break
        judged = {}
        for i in live:
            ids, end = drafts[i]
            p = run.particles[i]
            steps = [s for s in p.steps + [ctx.lm.decode(ids)] if s.strip()] or [""]
            finished = end == "eos" or len(p.token_ids) + len(ids) >= ctx.max_new_tokens
            judged[i] = run.reward.score(ctx.prompt, steps, finished).value if steps != [""] else NEUTRAL
        accepted = [i for i in live if judged[i] >= params.accept]
        rewritten = [i for i in live if i not in accepted]
        try:
            verified = counted("policy_calls", run.batch.feed_block, {i: drafts[i][0] for i in accepted})
            grown = {i: drafts[i] for i in accepted}
            if rewritten:
                drafter.rewind(rewritten, mark)
                written = counted("policy_calls", run.batch.extend, rewritten, run.step_done,
                                  [caps.get(i, 0) for i in range(params.n)])
                counted("draft_calls", drafter.feed_block, {i: written[i][0] for i in rewritten})
                grown |= written
        except Cancelled:
            outcome.stop_reason = "cancelled"
            break
        totals["accepted_steps"] += len(accepted)
        totals["rewritten_steps"] += len(rewritten)
        totals["draft_tokens"] += sum(len(drafts[i][0]) for i in live)
        totals["accepted_tokens"] += sum(len(drafts[i][0]) for i in accepted)
        totals["policy_tokens"] += sum(len(grown[i][0]) for i in rewritten)
        if not run.apply(grown):
            break
        weights = score_weights(run)
        extra = {"speculation": {
            "accepted": accepted, "rewritten": rewritten,
            "drafts": {str(i): ctx.lm.decode(drafts[i][0]) for i in live},
            "draft_rewards": {str(i): round(float(judged[i]), 4) for i in live},
            "policy_logprob": {str(i): round(sum(v) / max(1, len(v)), 4) for i, v in verified.items()},
            **calls, **totals}}
        yield run.event(weights, identity_ancestors(params.n), False, weights, set(live), extra)
        if run.cancelled():
            break
    chosen = run.best([run.score_of(i) for i in range(params.n)])
    run.finish(outcome, chosen, score_weights(run),
               rule=f"highest score ({params.aggregate} of step rewards) among finished answers")
    outcome.extra["speculation"] = {**totals, **calls, "draft_model": draft_lm.name}
