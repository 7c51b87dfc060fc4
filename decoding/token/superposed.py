"""Superposed decoding: k drafts from one forward pass per step.

Paper followed
    Shen et al. 2024, "Superposed Decoding: Multiple Generations from a Single Autoregressive
    Inference Pass" (arXiv:2405.18400). The k drafts share one KV cache: each step feeds ONE
    input, the superposition sum_i w_i * embed(last token of draft i) with w the drafts'
    normalised probabilities. The top tokens of that one distribution are the candidates for
    every draft; each (draft, token) pair is scored by the draft's probability times an
    interpolation of the model's probability with an n-gram model's, and the best k pairs are
    the next drafts (like a beam of width k that costs one call per step).

Glossary
    draft          one of the k generations, with its probability (product of its tokens').
    superposition  the weighted sum of the drafts' last-token embeddings fed to the model.
    n-gram model   counts of (previous n-1 tokens -> next token); it tells which candidate fits
                   which draft, since the superposed distribution mixes all of them.

Choices made here: the paper's n-gram models come from a large corpus; here a small table is
built from the prompt's tokens (n = 2 and 3 backed off), so on short prompts the model's
probability dominates. With k = 1 the superposition is the one draft and the candidate is the
argmax: exactly greedy (tested). Events: one TokenStep per step for the best draft's newest
token, with every draft in `extra["drafts"]`; the run's text is the best draft at the end (the
steps' tokens form that text only while the lead never changes hands).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding.token.autoregressive import point_mass, token_event
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import Params, param
from decoding.registry import register_strategy


@dataclass(frozen=True)
class SuperposedParams(Params):
    num_drafts: int = param(3, low=1, high=8, help="How many drafts grow together (k; 1 = greedy).")
    ngram_weight: float = param(0.1, low=0.0, high=1.0,
                                help="Weight of the prompt's n-gram statistics against the model's probability.")


class NGrams:
    """Back-off n-gram probabilities (trigram, then bigram) counted from a token sequence."""

    def __init__(self, ids: list[int]):
        self.counts: dict[tuple, Counter] = defaultdict(Counter)
        for n in (2, 3):
            for i in range(len(ids) - n + 1):
                self.counts[tuple(ids[i:i + n - 1])][ids[i + n - 1]] += 1

    def prob(self, context: list[int], token_id: int) -> float | None:
        for n in (3, 2):
            c = self.counts.get(tuple(context[-(n - 1):])) if len(context) >= n - 1 else None
            if c:
                return c[token_id] / sum(c.values())
        return None  # no statistics for this context


def superposed_step(draft_probs: torch.Tensor, token_probs: torch.Tensor, drafts: list[list[int]],
                    ngrams: NGrams, ngram_weight: float, k: int) -> list[tuple[int, int, float]]:
    """Pure choice of the next k drafts: (parent draft, token, new draft probability), best first.

    draft_probs (k0,), token_probs (V,) from the superposed pass; candidates are its top-k tokens.
    """
    top_probs, top_ids = token_probs.topk(min(k, token_probs.shape[-1]))
    pairs = []
    for d, (draft, dp) in enumerate(zip(drafts, draft_probs.tolist())):
        for p, t in zip(top_probs.tolist(), top_ids.tolist()):
            q = ngrams.prob(draft, t)
            mixed = p if q is None else (1 - ngram_weight) * p + ngram_weight * q
            pairs.append((d, t, dp * mixed))
    pairs.sort(key=lambda x: -x[2])  # stable: ties keep draft order, then token rank
    return pairs[:k]


@register_strategy("superposed", params=SuperposedParams, batched=True,
                   help="superposed decoding: k drafts advanced by one forward pass per step on their superposed embeddings",
                   papers=(bib.SHEN_2024,))
def superposed(ctx: RunContext, params: SuperposedParams, outcome: Outcome) -> Iterator[Event]:
    lm, k = ctx.lm, params.num_drafts
    prompt = list(ctx.prompt_ids)
    ngrams = NGrams(prompt)
    embed = lm.model.get_input_embeddings()
    out = lm.prefill(prompt)
    logits, cache = out.logits[0, -1], out.cache  # (V,)
    drafts: list[list[int]] = [[]]
    draft_probs = torch.ones(1)  # (k0,)
    for step in range(ctx.max_new_tokens):
        token_probs = torch.softmax(logits, -1)  # (V,) of the superposed input
        chosen = superposed_step(draft_probs, token_probs, [prompt + d for d in drafts], ngrams, params.ngram_weight, k)
        drafts = [drafts[d] + [t] for d, t, _ in chosen]
        probs = torch.tensor([p for _, _, p in chosen])
        draft_probs = probs / probs.sum()  # the weights of the next superposition
        best = drafts[0]
        extra = {"drafts": [{"token_ids": d, "text": lm.decode(d), "prob": p} for d, (_, _, p) in zip(drafts, chosen)],
                 "parents": [d for d, _, _ in chosen], "independent_passes": len(drafts)}
        yield token_event(ctx, ctx.step_offset + step, best[-1], logits, point_mass(logits, best[-1]), 1, extra)
        if best[-1] in lm.stop_ids:
            outcome.stop_reason = "eos"
            break
        if outcome.cancelled(ctx) or step + 1 >= ctx.max_new_tokens:
            break
        ids = torch.tensor([d[-1] for d in drafts], device=lm.device)
        weights = draft_probs.to(device=lm.device, dtype=embed.weight.dtype)
        mixed = (weights[:, None] * embed(ids)).sum(0)  # (D,) the superposition
        o = lm.forward(None, cache, inputs_embeds=mixed.view(1, 1, -1))  # the superposition goes in as an embedding
        logits, cache = o.logits[0, -1], o.cache
    outcome.token_ids = list(drafts[0])
