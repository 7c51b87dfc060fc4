"""Masked diffusion LM decoding: start from a canvas of masks and unmask it over a few steps.

Papers followed
    MDLM (Sahoo et al. 2024) and LLaDA (Nie et al. 2025): every step predicts all masked
    positions and commits a scheduled number of them (`num_transfer_tokens`, LLaDA's
    `get_num_transfer_tokens`), random or low-confidence remasking, semi-autoregressive blocks,
    Gumbel-max sampling in float64. Dream (Ye et al. 2025): margin and entropy remasking.
    Fast-dLLM (Wu et al. 2025): confidence-threshold parallel decoding (commit every masked
    token whose confidence >= threshold, at least the most confident one).
    LocalLeap ("Accelerating Diffusion LLM Inference via Local Determinism Propagation", arXiv
    2510.07081): anchors are masked positions with confidence >= `anchor_threshold`; within
    `radius` of an anchor (the paper's bounded neighbourhood) a position needs only the relaxed
    `threshold`; at least one position per step. The paper's second principle, "progressive
    spatial consistency decay" (agreement with the final answer falls with the distance from an
    anchor), is why the relaxation is bounded at all: `decay=none` (the default) is that bounded,
    flat window, and it is the rule of the LocalLeap `generate.py` found with the search tool (a
    Fast-dLLM-derived file in a public mirror of the method's code: every masked position within
    `radius` positions of an anchor, both sides inclusive, needs the relaxed threshold, every
    other one the anchor threshold, and the most confident one is always committed; its defaults
    are 0.9 / 0.75 / radius 4). The paper's own text could not be read. `decay=linear` is the
    project's own variant, in neither: the required confidence climbs from `threshold` next to
    the anchor to `anchor_threshold` just beyond `radius` (`localleap_required`).
    dKV-Cache (Ma et al. 2025): delayed key / value caching, see `decoding.diffusion.lm`.
    FreeDave (Wu & Zhang 2025, "Free Draft-and-Verification: Toward Lossless Parallel Decoding
    for Diffusion Large Language Models", arXiv 2510.00294; reference code github.com/cychomatica/FreeDave):
    from one prediction, draft the canvases of the next `draft_steps` scheduled steps; score
    all drafts in one batched call; keep the longest prefix of drafts that the sequential
    schedule would have produced from its predecessor. Same canvas as the sequential schedule,
    fewer sequential calls (`freedave`, below).
    Learn2PD (Bao et al. 2025, "Learning to Parallel"): a small learned filter predicts which
    masked positions already hold their final token; all of them are committed at once
    (`decoding.diffusion.learn2pd`, which also trains the filter).

Glossary
    mask / unmask  a hidden position / committing a prediction there (never changed afterwards).
    remask         the rule that leaves most predictions masked for later steps; its score is
                   the `confidence` the events record.
    block          a slice of `block_length` positions decoded before the next (semi-AR).
    NFE            model calls (number of function evaluations); a partial forward counts one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from decoding import bibliography as bib
from decoding.events import DiffusionStep, Event
from decoding.diffusion.lm import DiffusionLM, KVState
from decoding.params import Params, own_params, param
from decoding.registry import Registry, family_check, register_strategy

REMASKING = ("random", "low-confidence", "margin", "entropy")
CACHES = ("none", "delayed", "prefill", "greedy")  # dKV-Cache variants, see `active_positions`
# name -> select(scores (L,), candidates (L,) bool, params, scheduled k) -> (chosen (L,) bool, event extra).
# Capabilities a sampler declares when it registers:
#   needs_view   select also gets a `StepView` (the step's logits and canvas) as a fifth argument (Learn2PD)
#   own_loop     the sampler runs a loop of its own instead of one commit per model call (FreeDave drafts
#                several steps per call): `diffusion()` hands the whole run to `own_loop(ctx, params, outcome)`
#   check_model  check(loaded model) before a run: what the sampler needs of the model (Learn2PD: its filter)
SAMPLERS: Registry[Callable] = Registry("sampler", capabilities={"needs_view": False, "own_loop": None,
                                                                 "check_model": None})
DECAYS = ("none", "linear")  # LocalLeap: how the relaxed threshold varies across the radius


@dataclass(frozen=True)
class DiffusionParams(Params):
    steps: int = param(0, low=1, high=4096, off=0, note="0 or [1, length]",
                       help="Denoising steps over the whole canvas (0 = one per token); unused with a threshold.")
    block_length: int = param(0, low=0, high=4096, note="0 or divides length",
                              help="Semi-autoregressive blocks decoded left to right (0 = one block).")
    remasking: str = param("low-confidence", choices=REMASKING,
                           help="Which predictions are committed first: random key, top-1 prob, top1-top2 margin, -entropy.")
    threshold: float = param(0.0, low=0.0, high=1.0, low_inclusive=False, off=0.0,
                             help="Fast-dLLM: commit every token whose confidence >= this (0 = fixed schedule); "
                                  "localleap's relaxed threshold.")
    sampler: str = param("fixed", plugins=SAMPLERS,
                         help="Who picks the positions to commit each step: fixed (schedule or threshold), localleap "
                              "(anchors plus relaxed neighbours), learn2pd (a learned filter), freedave (draft and "
                              "verify several steps per call).")
    temperature: float = param(0.0, low=0.0, high=5.0, help="Gumbel-max token draw at this temperature (0 = argmax).")
    cache: str = param("none", choices=CACHES,
                       help="dKV-Cache. delayed: recompute masked and just-committed positions; prefill: recompute "
                            "the canvas, never the prompt; greedy: recompute masked positions only.")
    refresh_interval: int = param(4, low=1, high=64,
                                  help="cache=delayed or greedy: a full forward every this many steps (1 = no saving).")
    own: Params | None = own_params()  # the chosen sampler's own knobs (`localleap.radius`, ...)

    def __post_init__(self):
        super().__post_init__()
        if self.threshold > 0:
            _must(self, self.remasking in ("low-confidence", "margin"), "remasking",
                  "low-confidence or margin when a confidence threshold is used (threshold > 0 or sampler=localleap)")

    def check_length(self, length: int) -> None:
        """Checks that need the generation length (`max_new_tokens`)."""
        if self.steps > length:
            raise ValueError(f"`steps` must be in [1, max_new_tokens={length}], got {self.steps}")
        if self.block_length and length % self.block_length:
            raise ValueError(f"`block_length` must divide max_new_tokens={length} (0 = one block), got {self.block_length}")
        num_blocks = length // self.block_length if self.block_length else 1
        if self.steps and self.steps < num_blocks:
            raise ValueError(f"`steps` must be >= the number of blocks ({num_blocks}), got {self.steps}")


def _must(params, ok: bool, name: str, allowed: str) -> None:
    if not ok:
        raise ValueError(f"`{name}` must be {allowed}, got {getattr(params, name)!r}")


@dataclass(frozen=True)
class LocalLeapParams(Params):
    radius: int = param(4, low=0, high=64, help="Neighbours within this many positions of an anchor may leap.")
    anchor_threshold: float = param(0.95, low=0.0, high=1.0, low_inclusive=False,
                                    help="Confidence that makes a masked position an anchor.")
    decay: str = param("none", choices=DECAYS,
                       help="none = the relaxed threshold holds across the radius (LocalLeap's reference code); "
                            "linear = the project's own variant: it climbs toward the anchor threshold with the "
                            "distance from the anchor.")

    def check_with(self, family: DiffusionParams) -> None:
        _must(family, 0.0 < family.threshold <= self.anchor_threshold, "threshold",
              f"in (0, anchor_threshold={self.anchor_threshold}] for sampler=localleap (the relaxed threshold)")
        _must(family, family.remasking in ("low-confidence", "margin"), "remasking",
              "low-confidence or margin when a confidence threshold is used (threshold > 0 or sampler=localleap)")


@dataclass(frozen=True)
class FreeDaveParams(Params):
    draft_steps: int = param(4, low=1, high=16,
                             help="Future steps drafted from one prediction and verified in one batched call.")

    def check_with(self, family: DiffusionParams) -> None:
        _must(family, family.threshold == 0, "threshold", "0 for sampler=freedave (it verifies against the fixed schedule)")
        _must(family, family.temperature == 0, "temperature", "0 for sampler=freedave (its verification is exact "
              "for deterministic steps only)")
        _must(family, family.remasking != "random", "remasking", "low-confidence, margin or entropy for sampler=freedave")
        _must(family, family.cache == "none", "cache", "none for sampler=freedave")


@family_check("diffusion")
def check_run(lm: DiffusionLM, params: DiffusionParams, prompt_ids: list[int], length: int, prefix_ids: list[int]) -> None:
    """What a diffusion run needs before it starts: no branching, a cache the model supports, and
    a canvas (prompt + answer) that fits the model's positions."""
    if prefix_ids:
        raise ValueError("`prefix_ids` (branching) is not supported by the diffusion strategy")
    if params.cache != "none":
        lm.require_kv_cache()
    check_model = SAMPLERS.capability(params.sampler, "check_model")
    if check_model is not None:
        check_model(lm.loaded)
    if lm.max_length and len(prompt_ids) + length > lm.max_length:
        raise ValueError(f"`max_new_tokens` {length} plus the prompt's {len(prompt_ids)} tokens exceed "
                         f"{lm.name}'s {lm.max_length} positions; ask for at most {lm.max_length - len(prompt_ids)}")


# Pure decisions -------------------------------------------------------------------------------
def num_transfer_tokens(num_masked: int, steps: int) -> list[int]:
    """Tokens committed at each of `steps` steps: spread evenly, remainder to the first steps
    (LLaDA's get_num_transfer_tokens). 10 over 4 -> [3, 3, 2, 2]."""
    base, remainder = divmod(num_masked, steps)
    return [base + (i < remainder) for i in range(steps)]


def steps_per_block(steps: int, num_blocks: int) -> list[int]:
    """The run's steps spread over its blocks, remainder to the first blocks."""
    return num_transfer_tokens(steps, num_blocks)


def gumbel_argmax(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """Token ids (T,) drawn from softmax(logits / temperature) by the Gumbel-max trick in float64.

    LLaDA's add_gumbel_noise computes exp(l) / (-log u) ** T; we take its logarithm,
    l - T log(-log u), which has the same argmax and cannot overflow. T = 0 is argmax."""
    if temperature == 0:
        return logits.argmax(-1)
    u = torch.rand(logits.shape, generator=generator, dtype=torch.float64).to(logits.device)  # (T, V)
    return (logits.double() - temperature * torch.log(-torch.log(u.clamp_min(1e-300)))).argmax(-1)


def remasking_scores(logits: torch.Tensor, drawn_ids: torch.Tensor, rule: str,
                     generator: torch.Generator) -> torch.Tensor:
    """Score (T,) of each position's prediction; higher = committed first.

    random: a uniform key (MDLM, LLaDA "random"); low-confidence: probability of the drawn
    token (top-1 probability when drawn by argmax; LLaDA); margin: top-1 minus top-2
    probability; entropy: minus the entropy in nats (Dream)."""
    probs = torch.softmax(logits.double(), -1)  # (T, V)
    if rule == "random":
        return torch.rand(drawn_ids.shape, generator=generator, dtype=torch.float64).to(logits.device)
    if rule == "low-confidence":
        return probs.gather(-1, drawn_ids[:, None])[:, 0]
    if rule == "margin":
        top2 = probs.topk(2, dim=-1).values  # (T, 2)
        return top2[:, 0] - top2[:, 1]
    if rule == "entropy":
        return (probs * torch.log(probs.clamp_min(1e-300))).sum(-1)
    raise ValueError(f"`remasking` must be one of {', '.join(REMASKING)}, got {rule!r}")


def select_top_k(scores: torch.Tensor, candidates: torch.Tensor, k: int) -> torch.Tensor:
    """The k best-scoring candidate positions. scores (T,), candidates (T,) bool -> (T,) bool."""
    chosen = torch.zeros_like(candidates)
    k = min(k, int(candidates.sum()))
    if k > 0:
        chosen[torch.where(candidates, scores, torch.full_like(scores, -torch.inf)).topk(k).indices] = True
    return chosen


def select_threshold(scores: torch.Tensor, candidates: torch.Tensor, threshold: float) -> torch.Tensor:
    """Fast-dLLM: every candidate with score >= threshold, and at least the best one."""
    return (candidates & (scores >= threshold)) | select_top_k(scores, candidates, 1)


def localleap_required(anchors: torch.Tensor, anchor_threshold: float, threshold: float, radius: int,
                       decay: str = "none") -> torch.Tensor:
    """The confidence each position needs to leap: `threshold` within `radius` of an anchor (as the
    LocalLeap reference code; with decay="linear", the project's own variant, threshold +
    (anchor_threshold - threshold) * (d - 1) / radius at distance d, so the relaxation fades toward
    the border of the window), `anchor_threshold` elsewhere."""
    n = len(anchors)
    distance = torch.full((n,), radius + 1, dtype=torch.long, device=anchors.device)
    for offset in range(-radius, radius + 1):  # distance to the nearest anchor, up to `radius`
        hit = torch.roll(anchors, offset) & _no_wrap(n, offset, anchors.device)
        distance = torch.where(hit, distance.clamp(max=abs(offset)), distance)
    if decay == "linear" and radius > 0:
        inside = threshold + (anchor_threshold - threshold) * (distance.clamp(min=1) - 1).double() / radius
    else:
        inside = torch.full((n,), threshold, dtype=torch.float64, device=anchors.device)
    return torch.where(distance <= radius, inside, anchor_threshold)


def select_localleap(scores: torch.Tensor, candidates: torch.Tensor, anchor_threshold: float,
                     threshold: float, radius: int, decay: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """LocalLeap: anchors (score >= anchor_threshold) and, within `radius` of an anchor, every
    candidate whose score reaches the relaxed threshold (`localleap_required`); at least the
    best candidate. Returns (chosen (T,) bool, anchors (T,) bool)."""
    anchors = candidates & (scores >= anchor_threshold)
    required = localleap_required(anchors, anchor_threshold, threshold, radius, decay)
    chosen = anchors | (candidates & (scores.double() >= required)) | select_top_k(scores, candidates, 1)
    return chosen, anchors


@SAMPLERS.register("fixed", help="commit the scheduled number of best positions per step, or (threshold > 0) "
                                  "every position at least that confident (Fast-dLLM)",
                   papers=(bib.NIE_2025, bib.WU_2025))
def _fixed(scores, candidates, params: DiffusionParams, scheduled: int) -> tuple[torch.Tensor, dict]:
    if params.threshold > 0:
        return select_threshold(scores, candidates, params.threshold), {"threshold": params.threshold}
    return select_top_k(scores, candidates, scheduled), {"scheduled": scheduled}


@SAMPLERS.register("localleap", help="anchors plus the relaxed-threshold positions near them (LocalLeap)",
                   params=LocalLeapParams, papers=(bib.KONG_2025,))
def _localleap(scores, candidates, params: DiffusionParams, scheduled: int) -> tuple[torch.Tensor, dict]:
    own = params.own
    chosen, anchors = select_localleap(scores, candidates, own.anchor_threshold, params.threshold, own.radius, own.decay)
    return chosen, {"anchors": torch.nonzero(anchors)[:, 0].tolist(), "threshold": params.threshold,
                    "anchor_threshold": own.anchor_threshold, "decay": own.decay}


@dataclass
class StepView:
    """What a sampler with `needs_view` sees besides the scores: the canvas and its logits."""

    logits: torch.Tensor  # (L, V), the mask id excluded
    canvas: torch.Tensor  # (L,), mask ids where undecided
    lm: DiffusionLM  # the model (its mask id, stop ids, and what was loaded with it)


@SAMPLERS.register("freedave", help="draft several scheduled steps from one prediction, verify them in one batched "
                                     "call: the fixed schedule's canvas with fewer sequential calls (FreeDave)",
                   params=FreeDaveParams, own_loop=lambda ctx, params, outcome: freedave(ctx, params, outcome),
                   papers=(bib.WU_ZHANG_2025,))
def _freedave_step(scores, candidates, params: DiffusionParams, scheduled: int) -> tuple[torch.Tensor, dict]:
    """One scheduled step (FreeDave drafts and verifies whole runs of these, see `freedave`)."""
    return select_top_k(scores, candidates, scheduled), {"scheduled": scheduled}


def _no_wrap(length: int, offset: int, device) -> torch.Tensor:
    index = torch.arange(length, device=device)
    return (index >= offset) & (index < length + offset)


def active_positions(masked: torch.Tensor, just_committed: torch.Tensor, cache: str = "delayed",
                     num_prompt: int = 0) -> torch.Tensor:
    """Positions (A,) a partial forward recomputes under each dKV-Cache variant (Ma et al. 2025);
    the others attend with their cached keys / values. masked, just_committed (P + L,) bool.

    delayed  dKV-Cache-Decode: the masked positions and those committed at the previous step
             (a decoded token's keys / values change once after it is decoded, so they are
             cached one step late); a full forward every `refresh_interval` steps.
    prefill  dKV-Cache-Prefill: every canvas position, every step; the prompt's keys / values
             come from the first forward and are never recomputed.
    greedy   dKV-Cache-Greedy: only the masked positions; a decoded token keeps the keys /
             values computed while it was still masked until the next full forward (cheaper,
             staler). The paper's greedy variant also limits the recomputed masked positions to
             a window around the decoding position; this one recomputes all of them."""
    if cache == "prefill":
        return torch.arange(num_prompt, len(masked))
    if cache == "greedy":
        return torch.nonzero(masked)[:, 0]
    return torch.nonzero(masked | just_committed)[:, 0]


# The sampler ----------------------------------------------------------------------------------
@register_strategy("diffusion", params=DiffusionParams, family="diffusion", uses_seed=True,
                   help="masked diffusion LM: unmask a canvas of masks over steps (LLaDA / Dream / Fast-dLLM / LocalLeap)",
                   papers=(bib.SAHOO_2024, bib.NIE_2025, bib.YE_2025, bib.MA_2025))
def diffusion(ctx, params: DiffusionParams, outcome) -> Iterator[Event]:
    """Unmask a canvas of `max_new_tokens` masks, yielding a DiffusionStep after every model call.

    RunFinished gets the canvas ids cut after the first end-of-sequence token, if the model
    wrote one (LLaDA pads its answers with EOS); with `cancelled`, extra["canvas"] holds the
    canvas so far (-1 = masked)."""
    own_loop = SAMPLERS.capability(params.sampler, "own_loop")
    if own_loop is not None:
        yield from own_loop(ctx, params, outcome)
        return
    lm: DiffusionLM = ctx.lm
    length, num_prompt = ctx.max_new_tokens, len(ctx.prompt_ids)
    block_length = params.block_length or length
    ids = torch.tensor(list(ctx.prompt_ids) + [lm.mask_id] * length)  # (P + L,) prompt, then the canvas
    state = KVState() if params.cache != "none" else None
    just_committed = torch.zeros(num_prompt + length, dtype=torch.bool)  # (P + L,)
    nfe = step = 0
    for block, block_steps in enumerate(steps_per_block(params.steps or length, length // block_length)):
        lo, hi = block * block_length, (block + 1) * block_length  # canvas positions of this block
        schedule = num_transfer_tokens(block_length, block_steps)
        for block_step in range(length + 1):  # every step commits >= 1 token
            masked = ids == lm.mask_id  # (P + L,)
            if not masked[num_prompt + lo:num_prompt + hi].any():
                break
            if ctx.should_stop():
                _cancelled(lm, ids[num_prompt:].tolist(), outcome)
                return
            refresh = state is None or (step == 0 if params.cache == "prefill" else step % params.refresh_interval == 0)
            if refresh:
                logits = lm.logits(ids, state)  # (P + L, V)
            else:
                logits = lm.partial_logits(ids, active_positions(masked, just_committed, params.cache, num_prompt), state)
            nfe += 1
            logits = logits[num_prompt:].clone()  # (L, V) rows of the canvas
            logits[:, lm.mask_id] = -torch.inf  # never predict the mask itself
            drawn = gumbel_argmax(logits, params.temperature, ctx.generator)  # (L,)
            scores = remasking_scores(logits, drawn, params.remasking, ctx.generator)  # (L,)
            canvas_masked = masked[num_prompt:]
            candidates = torch.zeros_like(canvas_masked)
            candidates[lo:hi] = canvas_masked[lo:hi]
            scheduled = schedule[block_step] if block_step < len(schedule) else int(candidates.sum())
            select = SAMPLERS.get(params.sampler)
            if SAMPLERS.capability(params.sampler, "needs_view"):
                chosen, extra = select(scores, candidates, params, scheduled, StepView(logits, ids[num_prompt:], lm))
            else:
                chosen, extra = select(scores, candidates, params, scheduled)
            if state is not None:
                extra |= {"cache_refreshed": refresh,
                          "cached_positions": 0 if refresh else int(len(ids) - (masked | just_committed).sum())}
            ids[num_prompt:] = torch.where(chosen, drawn, ids[num_prompt:])
            just_committed = torch.cat([torch.zeros(num_prompt, dtype=torch.bool), chosen])
            yield _event(ctx, lm, ids[num_prompt:], chosen, drawn, scores, logits, canvas_masked & ~chosen,
                         step, block, nfe, extra)
            step += 1
    _finish(lm, ids[num_prompt:].tolist(), outcome)


def _cancelled(lm, canvas: list[int], outcome) -> None:
    """A stopped run: its canvas so far in extra["canvas"] (-1 = masked)."""
    outcome.stop_reason = "cancelled"
    outcome.extra["canvas"] = [-1 if t == lm.mask_id else t for t in canvas]


def _finish(lm, canvas: list[int], outcome) -> None:
    stop_at = next((i for i, t in enumerate(canvas) if t in lm.stop_ids), None)
    outcome.token_ids = canvas if stop_at is None else canvas[:stop_at + 1]
    outcome.stop_reason = "max_new_tokens" if stop_at is None else "eos"


def schedule_of(length: int, params: DiffusionParams) -> list[tuple[int, int, int, int]]:
    """The fixed schedule as (block, lo, hi, k) per step: step commits the k best masked positions
    of canvas slice [lo, hi). Every block starts fully masked, so its steps commit exactly
    `block_length` positions and the sequential loop runs exactly these steps."""
    block_length = params.block_length or length
    out = []
    for block, block_steps in enumerate(steps_per_block(params.steps or length, length // block_length)):
        lo, hi = block * block_length, (block + 1) * block_length
        out += [(block, lo, hi, k) for k in num_transfer_tokens(block_length, block_steps)]
    return out


def scheduled_step(canvas: torch.Tensor, logits: torch.Tensor, mask_id: int, rule: str, step: tuple,
                   generator: torch.Generator):
    """One deterministic scheduled step from a canvas (L,) and the model's logits for it (L, V):
    (next canvas, chosen (L,) bool, drawn ids (L,), scores (L,), masked logits (L, V))."""
    logits = logits.clone()
    logits[:, mask_id] = -torch.inf
    drawn = logits.argmax(-1)
    scores = remasking_scores(logits, drawn, rule, generator)
    _, lo, hi, k = step
    candidates = torch.zeros(len(canvas), dtype=torch.bool)
    candidates[lo:hi] = canvas[lo:hi] == mask_id
    chosen = select_top_k(scores, candidates, k)
    return torch.where(chosen, drawn, canvas), chosen, drawn, scores, logits


def freedave(ctx, params: DiffusionParams, outcome) -> Iterator[Event]:
    """FreeDave (see the module doc): the fixed schedule's greedy canvas, fewer sequential calls.

    State: the true canvas after `done` steps and the model's logits for it. One round drafts
    the next D = min(draft_steps, steps left) canvases by applying the schedule with those same
    (stale) logits; one batched call scores the drafts; draft j + 1 is verified when the true
    step from draft j (with draft j's fresh logits) reproduces it. With m drafts verified after
    the first (which is exact: its logits are fresh), the round advances m + 1 steps and keeps
    the last verified draft's logits for the next round, so no call is wasted on it. NFE counts
    calls: the first full forward, then one per round (a batch of D canvases is one call).
    The event of a round reports `drafted` / `verified` / `rejected` canvas positions."""
    lm: DiffusionLM = ctx.lm
    length, num_prompt = ctx.max_new_tokens, len(ctx.prompt_ids)
    prompt = torch.tensor(list(ctx.prompt_ids), dtype=torch.long)
    schedule = schedule_of(length, params)
    canvas = torch.full((length,), lm.mask_id, dtype=torch.long)
    if ctx.should_stop():
        _cancelled(lm, canvas.tolist(), outcome)
        return
    logits = lm.logits(torch.cat([prompt, canvas]))[num_prompt:]  # (L, V) fresh for `canvas`
    nfe, done, event_step = 1, 0, 0
    while done < len(schedule):
        if ctx.should_stop():
            _cancelled(lm, canvas.tolist(), outcome)
            return
        rounds = min(params.own.draft_steps, len(schedule) - done)
        drafts, stale = [], logits
        first = scheduled_step(canvas, logits, lm.mask_id, params.remasking, schedule[done], ctx.generator)
        drafts.append(first[0])
        for j in range(1, rounds):  # later drafts reuse the round's one (stale) prediction
            drafts.append(scheduled_step(drafts[-1], stale, lm.mask_id, params.remasking, schedule[done + j],
                                         ctx.generator)[0])
        verified = 0
        if done + 1 < len(schedule):  # more steps follow: score the drafts (also the next round's logits)
            batch = torch.stack([torch.cat([prompt, d]) for d in drafts])  # (D, P + L)
            fresh = lm.logits_batch(batch)[:, num_prompt:]  # (D, L, V)
            nfe += 1
            for j in range(rounds - 1):
                target = scheduled_step(drafts[j], fresh[j], lm.mask_id, params.remasking, schedule[done + j + 1],
                                        ctx.generator)[0]
                if not torch.equal(target, drafts[j + 1]):
                    break
                verified += 1
            logits = fresh[verified]
        new_canvas = drafts[verified]
        committed = (new_canvas != lm.mask_id) & (canvas == lm.mask_id)
        drafted = (drafts[-1] != lm.mask_id) & (canvas == lm.mask_id)
        drawn, scores = first[2], first[3]
        extra = {"draft_steps": rounds, "steps_advanced": verified + 1, "scheduled": schedule[done][3],
                 "drafted": torch.nonzero(drafted)[:, 0].tolist(),
                 "verified": torch.nonzero(committed)[:, 0].tolist(),
                 "rejected": torch.nonzero(drafted & ~committed)[:, 0].tolist()}
        drawn = torch.where(committed, new_canvas, drawn)
        still_masked = new_canvas == lm.mask_id
        canvas, done = new_canvas, done + verified + 1
        shown = logits.clone()  # the prediction for the new canvas (fresh unless this was the last round)
        shown[:, lm.mask_id] = -torch.inf
        yield _event(ctx, lm, canvas, committed, drawn, scores, shown, still_masked, event_step,
                     schedule[done - 1][0], nfe, extra)
        event_step += 1
    _finish(lm, canvas.tolist(), outcome)


def _event(ctx, lm, canvas_ids, chosen, drawn, scores, logits, still_masked, step, block, nfe, extra):
    positions = torch.nonzero(chosen)[:, 0]
    top1 = torch.softmax(logits, -1).max(-1).values  # (L,)
    canvas = [-1 if t == lm.mask_id else t for t in canvas_ids.tolist()]
    return DiffusionStep(
        step=step, block=block, canvas=canvas, canvas_text=[lm.token_text(t) if t >= 0 else "" for t in canvas],
        unmasked=positions.tolist(), unmasked_tokens=drawn[positions].tolist(),
        confidence=scores[positions].float().tolist(),
        masked_confidence=[float(p) if m else None for p, m in zip(top1.tolist(), still_masked.tolist())],
        nfe=nfe, elapsed_s=ctx.elapsed(), forward_passes=1, extra=extra,
    )
