"""Token-level strategies: greedy, sampling (with truncation rules), mirostat, beam, contrastive.

Each strategy is a generator over one model: it calls `LM.forward`, decides with a pure helper
from `decoding.sampling`, and yields an event after every model call. Nothing is precomputed.

Papers followed
    Holtzman et al. 2020 (top-p), Fan et al. 2018 (top-k), Nguyen et al. 2024 (min-p),
    Meister et al. 2023 (typical), Hewitt et al. 2022 (epsilon / eta), Keskar et al. 2019
    (repetition penalty), Top-H (Baghaei et al. 2025), Basu et al. 2021 (mirostat),
    Su et al. 2022 (contrastive search); beam search as in transformers' `generate`.

Glossary
    raw distribution      softmax of the model's logits, temperature 1, nothing removed.
    sampling distribution what the token is drawn from after penalties, temperature, truncation.
    kept set              tokens with non-zero probability in the sampling distribution.
    beam / hypothesis     a live partial sequence / a finished one (ended with a stop token).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from decoding import sampling
from decoding.events import BeamStep, Event, TokenStep
from decoding.lm import LM, reorder_cache

TOP_ALTERNATIVES = 10  # alternatives recorded per step


@dataclass(frozen=True)
class GreedyParams:
    """Greedy decoding has no parameters: always the most probable token."""


@dataclass(frozen=True)
class BeamParams:
    num_beams: int = 4  # live beams kept per step, >= 1
    length_penalty: float = 1.0  # finished score = sum logprob / length ** length_penalty

    def __post_init__(self):
        if not isinstance(self.num_beams, int) or not 1 <= self.num_beams <= 32:
            raise ValueError(f"`num_beams` must be an integer in [1, 32], got {self.num_beams!r}")
        if not -5.0 <= self.length_penalty <= 5.0:
            raise ValueError(f"`length_penalty` must be in [-5, 5], got {self.length_penalty!r}")


@dataclass(frozen=True)
class ContrastiveParams:
    top_k: int = 4  # candidates re-ranked per step, >= 2
    penalty_alpha: float = 0.6  # weight of the degeneration penalty, in [0, 1]

    def __post_init__(self):
        if not isinstance(self.top_k, int) or not 2 <= self.top_k <= 64:
            raise ValueError(f"`top_k` must be an integer in [2, 64], got {self.top_k!r}")
        if not 0.0 <= self.penalty_alpha <= 1.0:
            raise ValueError(f"`penalty_alpha` must be in [0, 1], got {self.penalty_alpha!r}")


@dataclass
class RunContext:
    """What every strategy gets: the model, the prompt, limits, randomness and a stop check."""

    lm: LM
    prompt_ids: list[int]  # what the model is fed first (prompt, plus a branch's prefix)
    max_new_tokens: int
    generator: torch.Generator
    should_stop: Callable[[], bool]
    started: float  # perf_counter() at the start of the run
    step_offset: int = 0  # index of the first generated step (a branch continues numbering)
    prompt: str = ""  # what the user typed (rewards and judges read the question from it)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


class Outcome:
    """Filled by a strategy as it runs: the generated ids and why it stopped."""

    def __init__(self):
        self.token_ids: list[int] = []
        self.stop_reason = "max_new_tokens"
        self.extra: dict = {}

    def add(self, ctx: RunContext, token_id: int) -> bool:
        """Record a token; True when the run must end here (stop token or cancelled)."""
        self.token_ids.append(token_id)
        if token_id in ctx.lm.stop_ids:
            self.stop_reason = "eos"
        elif ctx.should_stop():
            self.stop_reason = "cancelled"
        else:
            return False
        return True


def token_event(ctx: RunContext, step: int, token_id: int, raw_logits: torch.Tensor,
                final_logits: torch.Tensor, forward_passes: int, extra: dict | None = None) -> TokenStep:
    """Record one chosen token from the raw (V,) and final (V,) logits of its step."""
    raw_logprobs = sampling.log_softmax(raw_logits)  # (V,)
    raw_probs = raw_logprobs.exp()
    final_logprobs = sampling.log_softmax(final_logits)  # (V,)
    kept = torch.isfinite(final_logits)
    top_probs, top_ids = raw_probs.topk(min(TOP_ALTERNATIVES, raw_probs.shape[-1]))  # a vocabulary may be smaller
    prob = raw_probs[token_id]
    lm = ctx.lm
    return TokenStep(
        step=step,
        token_id=token_id,
        token_text=lm.token_text(token_id),
        prob=prob.item(),
        sampling_prob=final_logprobs[token_id].exp().item(),
        rank=int((raw_probs > prob).sum().item()) + 1,
        entropy=sampling.entropy(raw_logits).item(),
        entropy_truncated=sampling.entropy(final_logits).item(),
        kept_size=int(kept.sum().item()),
        top_ids=top_ids.tolist(),
        top_tokens=[lm.token_text(i) for i in top_ids.tolist()],
        top_probs=top_probs.tolist(),
        top_kept=kept[top_ids].tolist(),
        elapsed_s=ctx.elapsed(),
        forward_passes=forward_passes,
        extra=extra or {},
    )


def point_mass(logits: torch.Tensor, token_id: int) -> torch.Tensor:
    """Logits (V,) of a deterministic choice: 0 at `token_id`, -inf elsewhere (what greedy draws from)."""
    point = torch.full_like(logits, float("-inf"))
    point[token_id] = 0.0
    return point


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


def greedy(ctx: RunContext, params: GreedyParams, outcome: Outcome) -> Iterator[Event]:
    def choose(logits, ids):
        token_id = int(logits.argmax())
        return token_id, point_mass(logits, token_id), {}

    yield from token_loop(ctx, outcome, choose)


def sample(ctx: RunContext, params: sampling.SamplingParams, outcome: Outcome) -> Iterator[Event]:
    transforms = sampling.build_transforms(params)

    def choose(logits, ids):
        input_ids = torch.tensor([ids], device=logits.device)  # (1, T) for repetition penalty
        final = sampling.apply_transforms(transforms, logits[None], input_ids)  # (1, V)
        token_id = int(sampling.sample_from_logits(final, ctx.generator)[0])
        return token_id, final[0], {}

    yield from token_loop(ctx, outcome, choose)


def mirostat(ctx: RunContext, params: sampling.MirostatParams, outcome: Outcome) -> Iterator[Event]:
    mu = 2.0 * params.tau  # the paper's initial value

    def choose(logits, ids):
        nonlocal mu
        token_id, kept_logits, mu_next = sampling.mirostat_v2_step(logits, mu, params, ctx.generator)
        extra = {"mu": mu, "mu_next": mu_next}
        mu = mu_next
        return int(token_id), kept_logits, extra

    yield from token_loop(ctx, outcome, choose)


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
                       finished=[{"token_ids": h["token_ids"], "text": lm.decode(h["token_ids"]), "score": h["score"]} for h in ended],
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
