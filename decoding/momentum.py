"""Momentum decoding: greedy search that pays a resistance to walk back into the text's own loops.

Paper followed
    Lan et al. 2022, "Momentum Decoding: Open-ended Text Generation As Graph Exploration". The text
    is a walk on a directed graph whose nodes are tokens; degeneration (greedy text repeating
    itself) is the walk going round a circuit it has already made. At each step the top-k
    candidates are scored p(candidate) - weight * resistance(r), where r is the length of the
    longest n-gram (n <= max_ngram) that the candidate would repeat: 0 for a token never seen,
    1 for a seen token whose bigram with the last token is new, n when the last n-1 tokens plus
    the candidate already occurred. The resistance grows with r, as in the authors' published
    table (0, 1, 3, 4, 5, 6 for r = 0..5); the highest score wins. weight = 0 is greedy.

The graph is the prompt plus the text so far (the paper includes the prefix). Each step records the
candidates, their probability, repeated length and score in the event's `extra`, so the picture
(the graph of visited tokens with the revisits marked) is drawn from the trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from decoding.autoregressive import point_mass, token_loop
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import Params, param
from decoding.registry import register_strategy

RESISTANCE = (0.0, 1.0, 3.0, 4.0, 5.0, 6.0)  # by repeated n-gram length 0..5 (Lan et al.'s table)


@dataclass(frozen=True)
class MomentumParams(Params):
    weight: float = param(0.3, low=0.0, high=5.0,
                          help="How hard returning to the text's own n-grams is resisted (0 = greedy).")
    top_k: int = param(5, low=1, high=50, help="Candidates scored at each step (the most probable ones).")
    max_ngram: int = param(5, low=1, high=5, help="Longest repeated n-gram looked for.")


def resistance(length: int) -> float:
    """The resistance of repeating an n-gram of this length (0 = a new token)."""
    return RESISTANCE[min(length, len(RESISTANCE) - 1)]


class NgramIndex:
    """Every n-gram (n <= max_n) of a growing token list, for 'how long a repeat would this token make'."""

    def __init__(self, ids: list[int], max_n: int):
        self.max_n, self.ids, self.seen = max_n, [], [set() for _ in range(max_n + 1)]
        for token in ids:
            self.add(token)

    def add(self, token: int) -> None:
        self.ids.append(token)
        for n in range(1, self.max_n + 1):
            if len(self.ids) >= n:
                self.seen[n].add(tuple(self.ids[-n:]))

    def repeat_length(self, candidate: int) -> int:
        """The longest n such that the last n - 1 tokens plus `candidate` already occurred (0: never seen)."""
        best = 0
        for n in range(1, self.max_n + 1):
            if n - 1 > len(self.ids):
                break
            gram = tuple(self.ids[len(self.ids) - (n - 1):]) + (candidate,) if n > 1 else (candidate,)
            if gram in self.seen[n]:
                best = n
            else:
                break  # a longer n-gram contains this one: it cannot have occurred either
        return best


@register_strategy("momentum", params=MomentumParams,
                   help="momentum decoding: greedy, with a resistance to repeating the text's own n-grams (loops)")
def momentum(ctx: RunContext, params: MomentumParams, outcome: Outcome) -> Iterator[Event]:
    index = NgramIndex(list(ctx.prompt_ids), params.max_ngram)

    def choose(logits, ids):
        probs = torch.softmax(logits.float(), dim=-1)
        top_probs, top_ids = probs.topk(min(params.top_k, probs.shape[-1]))
        lengths = [index.repeat_length(int(t)) for t in top_ids.tolist()]
        scores = [float(p) - params.weight * resistance(n) for p, n in zip(top_probs.tolist(), lengths)]
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))  # ties: the more probable
        token_id = int(top_ids[best])
        index.add(token_id)
        extra = {"candidates": top_ids.tolist(), "repeat_lengths": lengths,
                 "scores": [round(s, 6) for s in scores], "chosen": best, "revisit": lengths[best] > 0,
                 "greedy": best == 0}
        return token_id, point_mass(logits, token_id), extra

    yield from token_loop(ctx, outcome, choose)
