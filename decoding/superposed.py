"""Superposed decoding: k drafts from ONE forward pass per step.

Paper followed
    Shen et al. 2024, "Superposed Decoding: Multiple Generations from a Single Autoregressive
    Inference Pass". Instead of running k sequences, the model is fed one superposed input per
    step: the weighted sum of the k drafts' newest token embeddings (weights = the drafts'
    normalised probabilities). The next-token distribution of that one pass proposes the top-k
    tokens; every draft x token pair is scored, and the k best pairs are the next drafts. Because
    the superposed distribution mixes the drafts, each candidate's probability is interpolated
    with an n-gram model conditioned on that draft's own last tokens, which keeps each draft
    coherent.

What we chose: the paper builds its n-gram models from a large corpus; here the n-gram table is
built from the prompt's own tokens (bigrams and trigrams, backing off to the bigram), so the
interpolation weight `ngram_weight` pulls drafts towards continuations the prompt contains. A
candidate's probability is (1 - ngram_weight) p_superposed + ngram_weight p_ngram; a draft's score
is the sum of its log-probabilities. With k = 1 the superposition is the one draft's embedding and
the one candidate is the top token: greedy decoding (tested).

Events are BeamStep (the Playground's beam view shows the k drafts as they grow): each step's k
drafts, their scores and one forward pass per step (k independent runs would need k).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import sampling
from decoding.contracts import Outcome, RunContext
from decoding.events import BeamStep, Event
from decoding.params import Params, param
from decoding.registry import register_strategy


@dataclass(frozen=True)
class SuperposedParams(Params):
    drafts: int = param(3, low=1, high=8, help="Drafts advanced together by one forward pass per step (k).")
    ngram_weight: float = param(0.3, low=0.0, high=1.0,
                                help="Weight of the prompt's n-gram statistics against the superposed distribution.")


class PromptNgrams:
    """Bigram and trigram next-token distributions from a token list (trigram, else bigram, else none)."""

    def __init__(self, ids: list[int]):
        self.bi: dict[int, Counter] = defaultdict(Counter)
        self.tri: dict[tuple[int, int], Counter] = defaultdict(Counter)
        for a, b in zip(ids, ids[1:]):
            self.bi[a][b] += 1
        for a, b, c in zip(ids, ids[1:], ids[2:]):
            self.tri[(a, b)][c] += 1

    def prob(self, history: list[int], token: int) -> float:
        table = self.tri.get(tuple(history[-2:])) if len(history) >= 2 else None
        table = table or (self.bi.get(history[-1]) if history else None)
        if not table:
            return 0.0
        return table[token] / sum(table.values())


@register_strategy("superposed", params=SuperposedParams, family="beam",
                   help="superposed decoding: k drafts advanced by ONE forward pass per step on mixed embeddings")
def superposed(ctx: RunContext, params: SuperposedParams, outcome: Outcome) -> Iterator[Event]:
    lm, k, lam = ctx.lm, params.drafts, params.ngram_weight
    ngrams = PromptNgrams(list(ctx.prompt_ids))
    embed = lm.model.get_input_embeddings()
    out = lm.prefill(ctx.prompt_ids)
    cache, logits = out.cache, out.logits[0, -1].float()
    drafts: list[dict] = [{"ids": [], "score": 0.0}]
    finished: list[dict] = []
    for step in range(ctx.max_new_tokens):
        probs = torch.softmax(logits, -1)  # (V,) the superposed distribution
        top_p, top_ids = probs.topk(min(k, probs.shape[-1]))
        candidates = []
        for d, draft in enumerate(drafts):
            history = list(ctx.prompt_ids) + draft["ids"]
            for p, t in zip(top_p.tolist(), top_ids.tolist()):
                mixed = (1 - lam) * p + lam * ngrams.prob(history, t)
                candidates.append((draft["score"] + float(torch.log(torch.tensor(max(mixed, 1e-30)))), d, t, mixed))
        candidates.sort(key=lambda c: -c[0])
        new, ended = [], []
        for score, d, t, mixed in candidates:
            if len(new) == k:
                break
            entry = {"ids": drafts[d]["ids"] + [t], "score": score, "parent": d, "token": t, "prob": mixed}
            (ended if t in lm.stop_ids else new).append(entry)
        finished += ended
        beams = [{"token_ids": e["ids"], "text": lm.decode(e["ids"]), "score": e["score"], "parent": e["parent"],
                  "token_id": e["token"], "token_text": lm.token_text(e["token"]), "logprob": float(torch.log(
                      torch.tensor(max(e["prob"], 1e-30))))} for e in new]
        yield BeamStep(step=ctx.step_offset + step, beams=beams,
                       finished=[{"token_ids": e["ids"], "text": lm.decode(e["ids"]), "score": e["score"]}
                                 for e in ended],
                       entropy=float(sampling.entropy(logits)), elapsed_s=ctx.elapsed(), forward_passes=1)
        drafts = new
        if not drafts:
            outcome.stop_reason = "eos"
            break
        if ctx.should_stop():
            outcome.stop_reason = "cancelled"
            break
        if step + 1 == ctx.max_new_tokens:
            break
        weights = torch.softmax(torch.tensor([d["score"] for d in drafts]), 0)  # (k,) the drafts' probabilities
        tokens = torch.tensor([d["ids"][-1] for d in drafts], device=lm.device)
        mixed_embedding = (weights.to(lm.device, embed.weight.dtype)[:, None] * embed(tokens)).sum(0)  # (D,)
        with torch.inference_mode():
            step_out = lm.model(inputs_embeds=mixed_embedding.view(1, 1, -1), past_key_values=cache, use_cache=True)
        lm.forward_passes += 1
        cache, logits = step_out.past_key_values, step_out.logits[0, -1].float()
    pool = finished + drafts
    best = max(pool, key=lambda d: d["score"]) if pool else {"ids": [], "score": 0.0}
    outcome.token_ids = list(best["ids"])
    outcome.extra = {"drafts": [{"text": lm.decode(d["ids"]), "score": round(d["score"], 4)} for d in pool],
                     "best_score": best["score"]}
