"""AdaDec: greedy decoding that pauses where the model is unsure and reranks by a short lookahead.

Paper followed
    He et al. 2025, "Towards Better Code Generation: Adaptive Decoding with Uncertainty Guidance"
    (AdaDec). Their finding: many errors are misrankings at high-entropy steps, where the right
    token is among the top candidates but not first. AdaDec decodes greedily; when the entropy of
    the next-token distribution exceeds a threshold it pauses, extends each of the top-k candidates
    by a short greedy lookahead, and picks the candidate whose lookahead scores best.

What we chose where the paper could not be read offline: the threshold is a parameter (the paper
learns one per model from its entropy statistics); a candidate's score is its log-probability plus
`lookahead_weight` times the mean log-probability of its `lookahead` greedy tokens. The k
lookaheads run as k rows of one batch (`lookahead` calls per pause); every call is counted. With an
infinite threshold (the maximum) AdaDec is greedy.

Each step's `extra` says whether it paused and, for a pause, each candidate's lookahead text and
score, so the picture (the entropy timeline with the pauses marked) is drawn from the trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import sampling
from decoding.autoregressive import point_mass, token_event
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.lm import crop_cache, reorder_cache
from decoding.params import Params, param
from decoding.registry import register_strategy

NEVER = 100.0  # a threshold no entropy reaches (nats): AdaDec is then greedy


@dataclass(frozen=True)
class AdaDecParams(Params):
    threshold: float = param(1.5, low=0.0, high=NEVER,
                             help=f"Pause and rerank when the next-token entropy (nats) exceeds this ({NEVER:g} = never: greedy).")
    top_k: int = param(3, low=2, high=10, help="Candidates reranked at a pause.")
    lookahead: int = param(4, low=1, high=32, help="Greedy tokens generated after each candidate to score it.")
    lookahead_weight: float = param(1.0, low=0.0, high=10.0,
                                    help="Weight of the lookahead's mean log-probability in a candidate's score.")


@register_strategy("adadec", params=AdaDecParams,
                   help="AdaDec: greedy, but where entropy is high, rerank the top candidates by a short lookahead")
def adadec(ctx: RunContext, params: AdaDecParams, outcome: Outcome) -> Iterator[Event]:
    lm = ctx.lm
    out = lm.prefill(ctx.prompt_ids)
    cache, logits = out.cache, out.logits[0, -1]  # (V,)
    passes = 1
    for step in range(ctx.max_new_tokens):
        if step == 0 and outcome.cancelled(ctx):
            return
        entropy = float(sampling.entropy(logits))
        if entropy <= params.threshold:
            token_id = int(logits.argmax())
            yield token_event(ctx, ctx.step_offset + step, token_id, logits, point_mass(logits, token_id), passes,
                              {"paused": False})
            passes = 0
            if outcome.add(ctx, token_id):
                return
            if step + 1 < ctx.max_new_tokens:
                nxt = lm.forward(torch.tensor([[token_id]], device=lm.device), cache)
                cache, logits, passes = nxt.cache, nxt.logits[0, -1], 1
            continue
        # pause: k candidates, each followed by `lookahead` greedy tokens, as k rows of one batch
        logprobs = sampling.log_softmax(logits)  # (V,)
        k = min(params.top_k, logprobs.shape[-1])
        top_lp, top_ids = logprobs.topk(k)
        base = cache.get_seq_length()
        cache = reorder_cache(cache, torch.zeros(k, dtype=torch.long))  # k copies of the context
        feed, ahead_lp, ahead_ids, first_logits = top_ids.view(k, 1), [[] for _ in range(k)], [[] for _ in range(k)], None
        for j in range(params.lookahead):
            if outcome.cancelled(ctx):
                return
            nxt = lm.forward(feed.to(lm.device), cache)
            passes += 1
            cache, row_logits = nxt.cache, nxt.logits[:, -1]  # (k, V)
            if first_logits is None:
                first_logits = row_logits  # after each candidate: what the chosen row continues from
            row_lp = sampling.log_softmax(row_logits)
            best_next = row_lp.argmax(dim=-1)  # (k,)
            for r in range(k):
                ahead_lp[r].append(float(row_lp[r, best_next[r]]))
                ahead_ids[r].append(int(best_next[r]))
            feed = best_next.view(k, 1)
        scores = [float(top_lp[r]) + params.lookahead_weight * (sum(ahead_lp[r]) / len(ahead_lp[r])) for r in range(k)]
        best = max(range(k), key=lambda r: (scores[r], -r))
        token_id = int(top_ids[best])
        extra = {"paused": True, "candidates": top_ids.tolist(),
                 "candidate_tokens": [lm.token_text(int(t)) for t in top_ids.tolist()],
                 "lookahead_texts": [lm.decode(ids) for ids in ahead_ids],
                 "scores": [round(s, 5) for s in scores], "chosen": best, "changed": best != 0}
        yield token_event(ctx, ctx.step_offset + step, token_id, logits, point_mass(logits, token_id), passes, extra)
        passes = 0
        crop_cache(cache, base + 1)  # the context and each row's candidate
        cache = reorder_cache(cache, torch.tensor([best]))
        logits = first_logits[best]
        if outcome.add(ctx, token_id):
            return

