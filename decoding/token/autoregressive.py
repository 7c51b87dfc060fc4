"""Token-level strategies: greedy, sampling (with truncation rules), mirostat, beam, contrastive.

Each strategy is a generator over one model: it calls `LM.forward`, decides with a pure helper
from `decoding.sampling`, and yields an event after every model call. Nothing is precomputed.
Stop is asked before every model call (`outcome.add` asks it after each token).

Papers followed
    Holtzman et al. 2020 (top-p), Fan et al. 2018 (top-k), Nguyen et al. 2024 (min-p),
    Meister et al. 2023 (typical), Hewitt et al. 2022 (epsilon / eta), Keskar et al. 2019
    (repetition penalty), Top-H (Baghaei Potraghloo et al. 2025), Basu et al. 2021 (mirostat),
    Su et al. 2022 (contrastive search); beam search as in transformers' `generate`.

Glossary
    raw distribution      softmax of the model's logits, temperature 1, nothing removed.
    sampling distribution what the token is drawn from after penalties, temperature, truncation.
    kept set              tokens with non-zero probability in the sampling distribution.
    beam / hypothesis     a live partial sequence / a finished one (ended with a stop token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from decoding import bibliography as bib
from decoding.papers import Uncited
from decoding import sampling
from decoding.contracts import Outcome, RunContext
from decoding.params import Params, param
from decoding.registry import family_check, register_strategy
from decoding.events import BeamStep, Event, TokenStep
from decoding.lm import reorder_cache

TOP_ALTERNATIVES = 10  # alternatives recorded per step


@dataclass(frozen=True)
class GreedyParams(Params):
    """Greedy decoding has no parameters: always the most probable token."""


@dataclass(frozen=True)
class BeamParams(Params):
    num_beams: int = param(4, low=1, high=32, help="How many partial sequences stay alive after each step.")
    length_penalty: float = param(1.0, low=-5.0, high=5.0,
                                  help="Finished scores are divided by the length to this power: above 0 favours longer answers.")


@dataclass(frozen=True)
class ContrastiveParams(Params):
    top_k: int = param(4, low=2, high=64, help="How many likely candidates are re-ranked at each step.")
    penalty_alpha: float = param(0.6, low=0.0, high=1.0, help="Weight of the penalty for repeating the context (0 = greedy).")


def token_event(ctx: RunContext, step: int, token_id: int, raw_logits: torch.Tensor,
                final_logits: torch.Tensor, forward_passes: int, extra: dict | None = None) -> TokenStep:
    """Record one chosen token from the raw (V,) and final (V,) logits of its step.

    The recording runs at every token, so it is kept to a few vector ops (its cost is the engine's
    overhead over `generate()`, `bench/bench_engine.py`): the raw log-probabilities are computed once
    (entropy reuses them), final logits that ARE the raw ones reuse them, and a greedy choice's point
    mass (`point_mass`) is recognised and needs none."""
    raw_logprobs = sampling.log_softmax(raw_logits)  # (V,)
    raw_probs = raw_logprobs.exp()
    entropy = _entropy(raw_probs, raw_logprobs)
    top_probs, top_ids = raw_probs.topk(min(TOP_ALTERNATIVES, raw_probs.shape[-1]))  # a vocabulary may be smaller
    prob = raw_probs[token_id]
    top_list = top_ids.tolist()
    if getattr(final_logits, "point_mass_of", None) == token_id:  # greedy: all mass on the chosen token
        sampling_prob, entropy_truncated, kept_size = 1.0, 0.0, 1
        top_kept = [i == token_id for i in top_list]
    else:
        if final_logits is raw_logits:
            final_logprobs, final_entropy = raw_logprobs, entropy
        else:
            final_logprobs = sampling.log_softmax(final_logits)
            final_entropy = _entropy(final_logprobs.exp(), final_logprobs)
        kept = torch.isfinite(final_logits)
        sampling_prob, entropy_truncated = final_logprobs[token_id].exp().item(), final_entropy.item()
        kept_size, top_kept = int(kept.sum().item()), kept[top_ids].tolist()
    lm = ctx.lm
    return TokenStep(
        step=step,
        token_id=token_id,
        token_text=lm.token_text(token_id),
        prob=prob.item(),
        sampling_prob=sampling_prob,
        rank=int((raw_probs > prob).sum().item()) + 1,
        entropy=entropy.item(),
        entropy_truncated=entropy_truncated,
        kept_size=kept_size,
        top_ids=top_list,
        top_tokens=[lm.token_text(i) for i in top_list],
        top_probs=top_probs.tolist(),
        top_kept=top_kept,
        elapsed_s=ctx.elapsed(),
        forward_passes=forward_passes,
        extra=extra or {},
    )


def _entropy(probs: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """Entropy in nats from a distribution's probabilities and log-probabilities (as `sampling.entropy`)."""
    return torch.where(probs > 0, -probs * logprobs, 0.0).sum(-1)


def point_mass(logits: torch.Tensor, token_id: int) -> torch.Tensor:
    """Logits (V,) of a deterministic choice: 0 at `token_id`, -inf elsewhere (what greedy draws from).
    The tensor carries `point_mass_of = token_id`, so `token_event` records it without computing on it."""
    point = torch.full_like(logits, float("-inf"))
    point[token_id] = 0.0
    point.point_mass_of = token_id
    return point


def pick_token(raw: torch.Tensor, temperature: float, generator: torch.Generator,
               banned=()) -> tuple[int, torch.Tensor]:
    """(token, final logits) of one step of a strategy with a `temperature` knob: the most probable token at 0 (final:
    a point mass on it), else a sample after temperature. `banned` ids (the stop tokens a part must not end on) are
    never chosen; `raw` (V,) is left as it is."""
    allowed = raw
    if banned:
        allowed = raw.clone()
        allowed[list(banned)] = float("-inf")
    if temperature == 0:
        token = int(allowed.argmax())
        return token, point_mass(raw, token)
    final = sampling.tempered(allowed, temperature)
    return int(sampling.sample_from_logits(final[None], generator)[0]), final


def token_loop(ctx: RunContext, outcome: Outcome,
               choose: Callable[[torch.Tensor, list[int]], tuple[int, torch.Tensor, dict]]) -> Iterator[Event]:
    """One token per model call. `choose(logits (V,), ids so far)` -> (token, final logits, extra)."""
    lm = ctx.lm
    out = lm.prefill(ctx.prompt_ids)
    ids = list(ctx.prompt_ids)
    for step in range(ctx.max_new_tokens):
        logits = out.logits[0, -1]  # (V,)
        token_id, final_logits, extra = choose(logits, ids)
        yield token_event(ctx, ctx.step_offset + step, token_id, logits, final_logits, forward_passes=1, extra=extra)
        ids.append(token_id)
        if outcome.add(ctx, token_id):
            return
        if step + 1 < ctx.max_new_tokens:
            out = lm.forward(torch.tensor([[token_id]], device=lm.device), out.cache)


@family_check("token", "beam")
def check_causal_run(lm, params, prompt_ids: list[int], max_new_tokens: int, prefix_ids: list[int]) -> None:
    """Before a causal run: the prompt, a branch's prefix and the new tokens fit the model's context."""
    lm.check_fits(len(prompt_ids) + len(prefix_ids), max_new_tokens)


@register_strategy("greedy", params=GreedyParams, batched=True, help="always the most probable token",
                   papers=Uncited("the classic argmax decoder; no one paper introduced it"))
def greedy(ctx: RunContext, params: GreedyParams, outcome: Outcome) -> Iterator[Event]:
    def choose(logits, ids):
        token_id = int(logits.argmax())
        return token_id, point_mass(logits, token_id), {}

    yield from token_loop(ctx, outcome, choose)


@register_strategy("sample", params=sampling.SamplingParams, uses_seed=True, batched=True,
                   help="sample after temperature, penalties and truncation (top-k/p, min-p, typical, epsilon, eta, top-H)",
                   papers=(bib.FAN_2018, bib.HOLTZMAN_2020, bib.NGUYEN_2024, bib.MEISTER_2023, bib.HEWITT_2022,
                           bib.KESKAR_2019, bib.BAGHAEI_POTRAGHLOO_2025))
def sample(ctx: RunContext, params: sampling.SamplingParams, outcome: Outcome) -> Iterator[Event]:
    transforms = sampling.build_transforms(params)

    def choose(logits, ids):
        input_ids = torch.tensor([ids], device=logits.device)  # (1, T) for repetition penalty
        final = sampling.apply_transforms(transforms, logits[None], input_ids)  # (1, V)
        token_id = int(sampling.sample_from_logits(final, ctx.generator)[0])
        return token_id, final[0], {}

    yield from token_loop(ctx, outcome, choose)


@register_strategy("mirostat", params=sampling.MirostatParams, uses_seed=True, batched=True,
                   help="mirostat v2: truncate to keep the surprise near a target tau", papers=(bib.BASU_2021,))
def mirostat(ctx: RunContext, params: sampling.MirostatParams, outcome: Outcome) -> Iterator[Event]:
    mu = params.initial_mu

    def choose(logits, ids):
        nonlocal mu
        token_id, kept_logits, mu_next = sampling.mirostat_v2_step(logits, mu, params, ctx.generator)
        extra = {"mu": mu, "mu_next": mu_next}
        mu = mu_next
        return int(token_id), kept_logits, extra

    yield from token_loop(ctx, outcome, choose)


@register_strategy("contrastive", params=ContrastiveParams,
                   help="contrastive search: top-k re-ranked by probability minus similarity to the context",
                   papers=(bib.SU_2022,))
def contrastive(ctx: RunContext, params: ContrastiveParams, outcome: Outcome) -> Iterator[Event]:
    """Contrastive search (Su et al. 2022): re-rank the top-k by (1-a) p - a max cos(h, context).

    Each step runs the k candidates as k rows of one batched call, then keeps the chosen row.
    """
    lm = ctx.lm
    k = min(params.top_k, lm.vocab_size)  # a vocabulary may be smaller than top_k
    out = lm.prefill(ctx.prompt_ids, output_hidden_states=True)
    context_hidden = out.hidden[0]  # (T, D)
    logits = out.logits[0, -1]  # (V,)
    cache = out.cache
    forward_passes = 1
    for step in range(ctx.max_new_tokens):
        if step == 0 and outcome.cancelled(ctx):  # after the prefill (later steps ask in `outcome.add`)
            return
        top_probs, top_ids = torch.softmax(logits, -1).topk(k)  # (k,), (k,)
        cache = reorder_cache(cache, torch.zeros(k, dtype=torch.long))  # (k rows of the context)
        cand = lm.forward(top_ids.view(k, 1), cache, output_hidden_states=True)
        forward_passes += 1
        cand_hidden = cand.hidden[:, -1]  # (k, D)
        scores = sampling.contrastive_scores(top_probs, cand_hidden, context_hidden, params.penalty_alpha)
        best = int(scores.argmax())
        token_id = int(top_ids[best])
        kept = torch.full_like(logits, float("-inf"))
        kept[top_ids] = torch.log(top_probs)
        extra = {"candidates": top_ids.tolist(), "scores": scores.tolist(), "chosen": best}
        yield token_event(ctx, ctx.step_offset + step, token_id, logits, kept, forward_passes, extra)
        forward_passes = 0
        if outcome.add(ctx, token_id):
            return
        cache = reorder_cache(cand.cache, torch.tensor([best]))  # keep the chosen row
        context_hidden = torch.cat([context_hidden, cand_hidden[best : best + 1]], 0)
        logits = cand.logits[best, -1]


@register_strategy("beam", params=BeamParams, family="beam",
                   help="beam search: keep the num_beams best partial sequences",
                   papers=Uncited("the classic algorithm, as transformers' generate runs it; no one paper is followed"))
def beam(ctx: RunContext, params: BeamParams, outcome: Outcome) -> Iterator[Event]:
    """Beam search with length-normalised finished hypotheses (as transformers' `generate`).

    Per step: the best 2 * num_beams (beam, token) continuations; those ending in a stop token
    among the first num_beams become hypotheses, the best num_beams others stay live. Stops
    when num_beams hypotheses exist and no live beam can beat the worst of them.
    """
    lm, stop_ids, n = ctx.lm, ctx.lm.stop_ids, params.num_beams
    out = lm.prefill(ctx.prompt_ids)
    seqs: list[list[int]] = [[]]
    scores = torch.zeros(1)  # (B,) cumulative log-probs of live beams
    finished: list[dict] = []
    lp = params.length_penalty

    def norm(score: float, length: int) -> float:
        return score / (max(length, 1) ** lp)

    for step in range(ctx.max_new_tokens):
        logprobs = sampling.log_softmax(out.logits[:, -1])  # (B, V)
        parents, tokens, new_scores = sampling.beam_step(scores, logprobs, min(2 * n, logprobs.numel()))
        live, ended = [], []
        for rank, (p, t, s) in enumerate(zip(parents.tolist(), tokens.tolist(), new_scores.tolist())):
            if t in stop_ids:
                if rank < n:
                    ended.append({"token_ids": seqs[p] + [t], "score": norm(s, len(seqs[p]) + 1), "sum_logprob": s})
            elif len(live) < n:
                live.append((p, t, s, logprobs[p, t].item()))
        finished = sorted(finished + ended, key=lambda h: -h["score"])[:n]
        entropy = sampling.entropy(out.logits[live[0][0] if live else 0, -1]).item()
        beams = [{"token_ids": seqs[p] + [t], "text": lm.decode(seqs[p] + [t]), "score": s, "parent": p,
                  "token_id": t, "token_text": lm.token_text(t), "logprob": lp_t} for p, t, s, lp_t in live]
        yield BeamStep(step=ctx.step_offset + step, beams=beams,
                       finished=[{"token_ids": h["token_ids"], "text": lm.decode(h["token_ids"]), "score": h["score"]}
                                 for h in ended],
                       entropy=entropy, elapsed_s=ctx.elapsed(), forward_passes=1)
        seqs = [b["token_ids"] for b in beams]
        scores = torch.tensor([b["score"] for b in beams])
        best_possible = max((norm(s, len(q)) for s, q in zip(scores.tolist(), seqs)), default=float("-inf"))
        if not live or (len(finished) >= n and best_possible <= finished[-1]["score"]):
            outcome.stop_reason = "eos"
            break
        if ctx.should_stop():
            outcome.stop_reason = "cancelled"
            break
        if step + 1 < ctx.max_new_tokens:
            cache = reorder_cache(out.cache, torch.tensor([b["parent"] for b in beams]))
            out = lm.forward(torch.tensor([[b["token_id"]] for b in beams], device=lm.device), cache)
    candidates = finished + [{"token_ids": q, "score": norm(s, len(q))} for q, s in zip(seqs, scores.tolist())]
    best = max(candidates, key=lambda h: h["score"])
    outcome.token_ids = list(best["token_ids"])
    outcome.extra = {"best_score": best["score"], "num_finished": len(finished)}
