"""Step-level speculation: a cheap drafter writes each reasoning step; a gate keeps it or has the policy
write the step itself.

Papers followed
    Pan et al. 2025, "SpecReason: Fast and Accurate Inference-Time Compute via Speculative
    Reasoning" (a small model proposes each reasoning step; the large model judges the step and
    regenerates it when the judgement is low). Here the judgement is the run's step reward (the
    `arith-step` checker by default, a process reward), compared with a fixed `accept`
    (`gate=threshold`); SpecReason's judge is the large model scoring the step by a prompt.
    Maheswaran et al. 2025, "Arbitrage: Efficient Reasoning via Advantage-Aware Speculation" (arXiv
    2512.05033) routes by the policy's advantage instead: `gate=oracle` writes both steps and keeps the
    policy's when its reward exceeds the draft's by more than `oracle_margin` (the paper's oracle, an
    upper bound that pays for both); `gate=router` asks a small trained router
    (`decoding.scaling.arbitrage`) for P(the policy's step would be better), from the draft alone, and
    has the policy write the step when that is above `router_threshold`.

One step, for every unfinished particle at once (each model's rows are one batch):
    1. the drafter (`draft_model`, at `draft_temperature`) samples a step;
    2. the reward scores the particle's steps plus the drafted one; the gate keeps the draft (the
       policy reads it in ONE forward pass, `ParticleBatch.feed_block`: a verification, like
       speculative decoding's, whose log-probabilities are recorded) or escalates the step;
    3. an escalated draft is undone (`rewind`) and the policy writes the step itself, token by
       token; the drafter then reads the policy's step in one pass. (The oracle has the policy write
       every step before deciding; a kept draft then undoes the policy's step instead.)
A kept step costs the policy one call instead of one call per token. The events carry, per step,
which slots were kept or rewritten, the drafts' text and reward, the gate's numbers (the router's
P, the policy's reward under the oracle) and the running calls of each model, so the tab and the
benchmark show the cost saved from what ran. `oracle_peek_calls` counts the policy calls the oracle
spent on steps it then discarded: without them its calls are what its choices would cost a router
that made them (`routed_policy_calls`, the paper's accounting of the oracle).
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
from decoding.scaling import arbitrage as arb
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
    gate: str = param("threshold", choices=("threshold", "router", "oracle"),
                      help="What decides that the policy rewrites a step: the draft's reward below `accept` (SpecReason), "
                           "Arbitrage's trained router, or Arbitrage's oracle (writes both steps; an upper bound).")
    accept: float = param(0.5, low=0.0, high=1.0,
                          help="gate=threshold: a drafted step whose reward is at least this is kept; below it, the "
                               "policy rewrites it.")
    router_threshold: float = param(0.5, low=0.0, high=1.0, step=0.01, label="router threshold",
                                    help="gate=router: the policy rewrites a step when the router's P(its step would "
                                         "score higher than the draft) is above this.")
    oracle_margin: float = param(0.0, low=0.0, high=1.0, step=0.05, label="oracle margin",
                                 help="gate=oracle: the policy's step replaces the draft when its reward exceeds the "
                                      "draft's by more than this.")


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
                   help="SpecReason / Arbitrage: a cheap drafter writes each step; a gate (the reward against a "
                        "threshold, Arbitrage's router or its oracle) keeps it (one policy pass) or the policy "
                        "rewrites it", papers=(bib.PAN_2025, bib.MAHESWARAN_2025))
def step_speculation(ctx: RunContext, params: StepSpeculationParams, outcome: Outcome) -> Iterator[Event]:
    draft_lm = _drafter(ctx, params)
    router = arb.router_for(ctx.lm, draft_lm.name, params.reward) if params.gate == "router" else None
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
            top_p=params.top_p, banned=run.batch.banned, should_stop=ctx.should_stop,
            token_stats=params.gate != "threshold"))
    except Cancelled:
        outcome.stop_reason = "cancelled"
        run.finish(outcome, 0, score_weights(run))
        return
    totals = {"accepted_steps": 0, "rewritten_steps": 0, "draft_tokens": 0, "policy_tokens": 0, "accepted_tokens": 0}
    if params.gate == "oracle":
        calls["oracle_peek_calls"] = 0
    by_policy = [False] * params.n  # whether a slot's last step is the policy's (the router reads it)
    while not run.all_finished:
        if run.step:
            run.keep()
        live = sorted(run.live())
        caps = [min(params.max_step_tokens, ctx.max_new_tokens - len(p.token_ids)) if i in live else 0
                for i, p in enumerate(run.particles)]
        mark = drafter.checkpoint()
        try:
            drafts = counted("draft_calls", drafter.extend, live, run.step_done, caps)
        except Cancelled:
            outcome.stop_reason = "cancelled"
            break
        judged = {i: _step_reward(run, i, *drafts[i]) for i in live}
        gate = {}  # the gate's own numbers, for the event
        written = {}
        try:
            if params.gate == "threshold":
                accepted = [i for i in live if judged[i] >= params.accept]
            else:
                features = {i: arb.draft_features(judged[i], drafter.stats.get(i, []), len(run.particles[i].steps),
                                                  by_policy[i], ctx.lm.decode(drafts[i][0])) for i in live}
                gate["features"] = {str(i): [round(v, 4) for v in f] for i, f in features.items()}
            if params.gate == "router":
                p_better = router(torch.tensor([features[i] for i in live], dtype=torch.float64)).tolist()
                gate["router_p"] = {str(i): round(p, 4) for i, p in zip(live, p_better)}
                accepted = [i for i, p in zip(live, p_better) if p <= params.router_threshold]
            if params.gate == "oracle":  # the policy writes every step too; the better one (by the margin) stays
                policy_mark = run.batch.checkpoint()
                before = calls["policy_calls"]
                written = counted("policy_calls", run.batch.extend, live, run.step_done, caps)
                theirs = {i: _step_reward(run, i, *written[i]) for i in live}
                gate["policy_rewards"] = {str(i): round(float(r), 4) for i, r in theirs.items()}
                gate["policy_steps"] = {str(i): ctx.lm.decode(written[i][0]) for i in live}
                accepted = [i for i in live if theirs[i] - judged[i] <= params.oracle_margin]
                run.batch.rewind(accepted, policy_mark)  # a kept draft: the policy's own step is undone
                calls["oracle_peek_calls"] += _peek_calls(calls["policy_calls"] - before, written, live, accepted,
                                                          policy_mark)
            rewritten = [i for i in live if i not in accepted]
            verified = counted("policy_calls", run.batch.feed_block, {i: drafts[i][0] for i in accepted})
            grown = {i: drafts[i] for i in accepted}
            if rewritten:
                drafter.rewind(rewritten, mark)
                if params.gate != "oracle":
                    written = counted("policy_calls", run.batch.extend, rewritten, run.step_done, caps)
                counted("draft_calls", drafter.feed_block, {i: written[i][0] for i in rewritten})
                grown |= {i: written[i] for i in rewritten}
        except Cancelled:
            outcome.stop_reason = "cancelled"
            break
        for i in live:
            by_policy[i] = i in rewritten
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
            **({"gate": params.gate} | gate if params.gate != "threshold" else {}), **calls, **totals}}
        yield run.event(weights, identity_ancestors(params.n), False, weights, set(live), extra)
        if run.cancelled():
            break
    chosen = run.best([run.score_of(i) for i in range(params.n)])
    run.finish(outcome, chosen, score_weights(run),
               rule=f"highest score ({params.aggregate} of step rewards) among finished answers")
    outcome.extra["speculation"] = {**totals, **calls, "draft_model": draft_lm.name}
    if params.gate != "threshold":
        outcome.extra["speculation"] |= {
            "gate": params.gate, "routed_policy_calls": calls["policy_calls"] - calls.get("oracle_peek_calls", 0)}


def _step_reward(run: ScalingRun, i: int, ids: list[int], end: str) -> float:
    """The run's reward of slot i's steps plus a candidate step (token ids, end), as the particle would get it."""
    p = run.particles[i]
    steps = [s for s in p.steps + [run.lm.decode(ids)] if s.strip()] or [""]
    finished = end == "eos" or len(p.token_ids) + len(ids) >= run.ctx.max_new_tokens
    return run.reward.score(run.ctx.prompt, steps, finished).value if steps != [""] else NEUTRAL


def _peek_calls(spent: int, written: dict, live: list[int], accepted: list[int], mark: tuple) -> int:
    """Of the `spent` policy calls in which the oracle wrote every live slot's step, those that only the
    discarded steps needed: the rest is what writing the escalated slots' steps alone costs (as many calls as
    the longest has tokens, one fewer when no row had a token waiting to be fed)."""
    escalated = [i for i in live if i not in accepted]
    if not escalated:
        return spent
    needed = max(len(written[i][0]) for i in escalated) - (0 if any(t is not None for t in mark[2]) else 1)
    return max(0, spent - needed)
