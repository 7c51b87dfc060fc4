"""Momentum decoding: greedy search that pays to close a loop in the graph of what was written.

Paper followed
    Lan et al. 2022, "Momentum Decoding: Open-ended Text Generation As Graph Exploration"
    (arXiv:2212.02175). Text is a walk on a directed graph whose nodes are the tokens (and
    n-grams) written so far, prompt included. Greedy search degenerates because the walk falls
    into a cycle; momentum decoding lets the walk go back to a visited node only with a
    "momentum" that a resistance function cuts down the deeper the loop it would close.

Glossary
    candidate    one of the `top_k` most probable next tokens (the candidate pool).
    loop depth   d(v): the length of the longest n-gram (n <= max_ngram) ending with candidate v
                 that already occurs earlier in prompt + text, i.e. how many visited nodes in a
                 row the walk would repeat. 0 = a new node.
    resistance   R(d) = d / max_ngram, in [0, 1].
    score        (1 - alpha) * p(v) - alpha * R(d(v)); the best score wins.

Choices made here (the paper's lookup-table resistance is not reproduced): R grows linearly
with the loop depth and saturates at `max_ngram`; depth counts occurrences in the prompt too,
as the authors' graph starts from the prompt's tokens. With alpha = 0 the score is p(v), so
the choice is greedy's (tested). One model call per token: the depths need no lookahead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding.token.autoregressive import token_loop
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import Params, param
from decoding.registry import register_strategy


@dataclass(frozen=True)
class MomentumParams(Params):
    alpha: float = param(0.2, low=0.0, high=1.0, help="Weight of the loop resistance against the probability (0 = greedy).")
    top_k: int = param(5, low=1, high=64, help="How many of the most probable tokens are candidates at each step.")
    max_ngram: int = param(5, low=1, high=16, help="Longest repeated n-gram counted as loop depth (R saturates there).")


def loop_depth(ids: list[int], token_id: int, max_ngram: int) -> int:
    """Length of the longest n-gram (n <= max_ngram) ending in `token_id` after `ids` that occurs in `ids`."""
    seq = ids + [token_id]
    best = 0
    for n in range(1, min(max_ngram, len(ids)) + 1):
        gram = seq[-n:]
        if any(ids[i:i + n] == gram for i in range(len(ids) - n + 1)):
            best = n
        else:
            break  # a longer n-gram cannot occur if its suffix does not
    return best


def momentum_choice(probs: torch.Tensor, ids: list[int], params: MomentumParams) -> dict:
    """Pure decision from next-token probabilities (V,): candidates, their loop depths and scores."""
    k = min(params.top_k, probs.shape[-1])
    top_probs, top_ids = probs.topk(k)  # (k,), (k,)
    depths = [loop_depth(ids, int(t), params.max_ngram) for t in top_ids.tolist()]
    resistance = torch.tensor([d / params.max_ngram for d in depths])
    scores = (1 - params.alpha) * top_probs - params.alpha * resistance  # (k,)
    best = int(scores.argmax())  # ties keep the more probable candidate (topk order)
    return {"candidates": top_ids.tolist(), "depths": depths, "scores": scores.tolist(), "chosen": best}


@register_strategy("momentum", params=MomentumParams, batched=True,
                   help="momentum decoding: greedy, but returning to a visited n-gram (a loop) is penalised by its depth",
                   papers=(bib.LAN_2022,))
def momentum(ctx: RunContext, params: MomentumParams, outcome: Outcome) -> Iterator[Event]:
    prompt_len = len(ctx.prompt_ids)

    def choose(logits, ids):
        decision = momentum_choice(torch.softmax(logits, -1), ids, params)
        token_id = decision["candidates"][decision["chosen"]]
        kept = torch.full_like(logits, float("-inf"))
        kept[token_id] = 0.0
        # the node written: this token with its predecessor (for the graph picture)
        previous = ids[-1] if len(ids) > prompt_len else None
        extra = decision | {"depth": decision["depths"][decision["chosen"]], "previous_id": previous,
                            "alpha": params.alpha}
        return token_id, kept, extra

    yield from token_loop(ctx, outcome, choose)
