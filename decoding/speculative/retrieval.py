"""Drafters that run no model: prompt lookup (n-gram matching) and Token Recycling.

Papers followed
    Saxena 2023, "Prompt Lookup Decoding" (transformers' `prompt_lookup_num_tokens`): find the
    last n tokens earlier in the context and propose what followed them;
    Luo et al. 2024, "Turning Trash into Treasure: Accelerating Inference of Large Language Models
    with Token Recycling": keep, for every token, the top-k tokens the target predicted after it
    in earlier verification passes (an adjacency table), and expand it breadth-first into a tree.

Both choose their tokens deterministically, so each draft token is a point mass (q = 1): a
sampled draft token x is accepted with probability p(x) and on rejection x is removed from the
residual, which keeps sampling lossless (see `decoding.speculative.verify`).

Glossary
    n-gram      the last n context tokens used as the lookup key (n from `ngram` down to 1).
    adjacency   token -> its recycled successor candidates, best first.
"""

from __future__ import annotations

import time

import torch

from decoding.speculative.base import Drafter, Feedback
from decoding.speculative.drafters import Draft, TreePlan
from decoding.speculative.verify import ROOT, DraftTree


class PromptLookupDrafter(Drafter):
    """Continuations of earlier occurrences of the context's last n-gram (a trie of up to `width`)."""

    def __init__(self, ngram: int = 3):
        if not 1 <= ngram <= 8:
            raise ValueError(f"`ngram` must be in [1, 8], got {ngram}")
        self.ngram = ngram
        self.name = "prompt-lookup"

    def continuations(self, context: list[int], length: int, limit: int) -> list[list[int]]:
        """Up to `limit` distinct continuations, most recent match first, longest n-gram first.

        A match of two or more tokens proposes `length` tokens (copying from the context). A match of
        the last token alone is weak evidence when the token recurs (a frequent token such as " the"
        is followed by something different each time): it then proposes only what every earlier
        occurrence agrees on next (at least one token, the most recent one's), so open-ended text,
        where such matches are most of what prompt lookup finds, pays for short verifications only.
        A token that occurred once before (a name, a number, the start of a sentence being quoted)
        is followed by one thing: that continuation is proposed at full length, as transformers'
        prompt lookup proposes after any match. On SmolLM2-135M the one-token rule kept the
        copy-heavy prompt's 0.22 target passes per token and cut the open-ended prompt's CPU time by a
        third; proposing in full after a token seen once closes most of the gap to the library on
        answers that start by quoting the prompt (`bench/bench_speculative.py --set-only`)."""
        found: list[list[int]] = []
        for n in range(min(self.ngram, len(context) - 1), 0, -1):
            key = context[-n:]
            starts = [s for s in range(len(context) - n - 1, -1, -1)  # most recent earlier occurrence first
                      if context[s:s + n] == key]
            take = length if n > 1 else self._one_token_take(context, starts, length)
            for start in starts:
                cont = context[start + n:start + n + take]
                if cont and cont not in found:
                    found.append(cont)
                    if len(found) >= limit:
                        return found
            if found:
                return found
        return found

    @staticmethod
    def _one_token_take(context: list[int], starts: list[int], length: int) -> int:
        """How far to copy after a one-token match at `starts`: `length` after a token seen once, else
        the continuation every occurrence shares (at least 1)."""
        if len(starts) == 1:
            return length
        agreed = 0
        while agreed < length:
            nxt = {context[s + 1 + agreed] if s + 1 + agreed < len(context) else None for s in starts}
            if len(nxt) != 1 or None in nxt:
                break
            agreed += 1
        return max(1, agreed)

    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator) -> Draft:
        t0 = time.perf_counter()
        limit = 1 if plan.shape == "chain" else plan.width
        tree = build_trie(self.continuations(context, plan.depth, limit), plan.budget)
        return Draft(tree, seconds=time.perf_counter() - t0, info={"ngram": self.ngram})
    # observe: prompt lookup keeps no state (the base's no-op); the context is its memory


def build_trie(sequences: list[list[int]], budget: int) -> DraftTree:
    """Merge token sequences into a tree sharing common prefixes (at most `budget` nodes)."""
    tree = DraftTree()
    index: dict[tuple[int, int], int] = {}  # (parent, token) -> node
    for seq in sequences:
        parent = ROOT
        for token in seq:
            key = (parent, token)
            if key not in index:
                if len(tree) >= budget:
                    break
                index[key] = tree.add(parent, token, 1.0)
            parent = index[key]
    return tree


class TokenRecyclingDrafter(Drafter):
    """Trees from recycled candidates: adjacency[token] = the target's top-k after that token."""

    def __init__(self, vocab_size: int, top_k: int = 8):
        self.top_k = min(top_k, vocab_size)  # a vocabulary may be smaller
        self.adjacency = torch.full((vocab_size, self.top_k), -1, dtype=torch.long)  # (V, k); -1 = unknown
        self.name = "token-recycling"
        self.prefill_rows = -1  # every prompt row seeds the table

    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator) -> Draft:
        """Breadth-first expansion from the last context token: `width` children at depth 1,
        half as many at depth 2, then one (a chain), within the node budget."""
        t0 = time.perf_counter()
        tree = DraftTree()
        frontier = [(ROOT, context[-1])]
        widths = [plan.width, max(1, plan.width // 2)] if plan.shape != "chain" else [1]
        for depth in range(plan.depth):
            width = widths[min(depth, len(widths) - 1)] if plan.shape != "chain" else 1
            nxt = []
            for parent, token in frontier:
                for candidate in self.adjacency[token, :width].tolist():
                    if candidate < 0 or len(tree) >= plan.budget:
                        continue
                    nxt.append((tree.add(parent, candidate, 1.0), candidate))
            frontier = nxt
        filled = int((self.adjacency[:, 0] >= 0).sum())
        return Draft(tree, seconds=time.perf_counter() - t0, info={"adjacency_rows": filled})

    def observe(self, feedback: Feedback) -> None:
        """Recycle the verification pass: every row's token gets that row's top-k as successors."""
        top = feedback.row_logits.topk(self.top_k, dim=-1).indices.cpu()  # (R, k)
        self.adjacency[torch.as_tensor(feedback.row_tokens)] = top
