"""AdaDec: greedy decoding that pauses to look ahead where the model is unsure.

Paper followed
    He et al. 2025, "Towards Better Code Generation: Adaptive Decoding with Uncertainty Guidance"
    (AdaDec; arXiv:2506.08980, for code generation). At each step the entropy of the next-token
    distribution is compared with a threshold. Below it the step is plain greedy. Above it decoding pauses: each of the top-k
    candidates is extended by a few greedy lookahead tokens and the candidates are reranked by
    the log-probability of candidate + lookahead; the winner is written, the lookahead thrown away.

Glossary
    pause        a step whose entropy exceeds `threshold` (nats): candidates are reranked.
    lookahead    `lookahead` greedy tokens after a candidate, decoded for scoring only.
    score        mean log-probability of the candidate and its lookahead tokens.

Choices made here: the paper learns the threshold per model; here it is a parameter (the
maximum never pauses, so the run equals greedy: tested). The k candidates run as k rows of one
batched call per lookahead position, so a pause costs `lookahead` extra batched forward passes
(recorded on the step's `forward_passes`; `extra["rows"]` says how many rows each carried).
A lookahead continues through a stop token (it only scores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding import sampling
from decoding.token.autoregressive import point_mass, token_event
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.lm import crop_cache, reorder_cache
from decoding.params import Params, param
from decoding.registry import register_strategy

MAX_THRESHOLD = 20.0  # nats: above log V for any vocabulary below e^20 tokens, so never a pause


@dataclass(frozen=True)
class AdaDecParams(Params):
    threshold: float = param(1.5, low=0.0, high=MAX_THRESHOLD,
                             help="Entropy (nats) above which decoding pauses to rerank (the maximum = greedy).")
    top_k: int = param(3, low=1, high=16, help="How many candidates a pause reranks.")
    lookahead: int = param(3, low=1, high=16, help="Greedy tokens decoded after each candidate to score it.")


def rerank(candidate_logprobs: torch.Tensor, lookahead_logprobs: torch.Tensor) -> torch.Tensor:
    """Scores (k,) from candidates' log-probs (k,) and their lookahead tokens' log-probs (k, L): the mean."""
    return torch.cat([candidate_logprobs[:, None], lookahead_logprobs], 1).mean(1)


@register_strategy("adadec", params=AdaDecParams, batched=True,
                   help="AdaDec: greedy, but where entropy exceeds a threshold rerank the top-k by a short lookahead",
                   papers=(bib.HE_2025,))
def adadec(ctx: RunContext, params: AdaDecParams, outcome: Outcome) -> Iterator[Event]:
    lm = ctx.lm
    out = lm.prefill(ctx.prompt_ids)
    logits, cache = out.logits[0, -1], out.cache  # (V,)
    length = len(ctx.prompt_ids)  # positions in the cache
    passes = 1  # model calls since the last event (the prefill, here)
    for step in range(ctx.max_new_tokens):
        entropy = sampling.entropy(logits).item()
        extra: dict = {"threshold": params.threshold, "paused": False}
        next_logits = next_cache = None
        room = params.lookahead if lm.max_length is None else min(params.lookahead, lm.max_length - length - 1)
        if entropy > params.threshold and params.top_k > 1 and room >= 1:  # near the context's end: a shorter lookahead
            k = min(params.top_k, lm.vocab_size)
            logprobs = sampling.log_softmax(logits)  # (V,)
            cand_logprobs, cand_ids = logprobs.topk(k)  # (k,), (k,)
            rows = reorder_cache(cache, torch.zeros(k, dtype=torch.long))  # k copies of the context
            tokens = cand_ids.view(k, 1).to(lm.device)  # (k, 1)
            look_ids, look_logprobs, first_logits = [], [], None
            for _ in range(room):
                if outcome.cancelled(ctx):  # Stop during the lookahead ends the run before its next call
                    return
                o = lm.forward(tokens, rows)
                passes += 1
                rows = o.cache
                step_logprobs = sampling.log_softmax(o.logits[:, -1])  # (k, V)
                if first_logits is None:
                    first_logits = o.logits[:, -1]  # (k, V): each candidate's next distribution
                best_lp, tokens = step_logprobs.max(-1, keepdim=True)  # (k, 1)
                look_ids.append(tokens[:, 0].tolist())
                look_logprobs.append(best_lp[:, 0])
            scores = rerank(cand_logprobs, torch.stack(look_logprobs, 1))  # (k,)
            best = int(scores.argmax())
            token_id = int(cand_ids[best])
            look = [[look_ids[j][r] for j in range(room)] for r in range(k)]
            extra |= {"paused": True, "candidates": cand_ids.tolist(),
                      "candidate_texts": [lm.token_text(int(t)) for t in cand_ids.tolist()],
                      "lookahead_texts": [lm.decode(row) for row in look], "scores": scores.tolist(),
                      "chosen": best, "rows": k}
            # keep the chosen row, without its lookahead tokens beyond the candidate itself
            next_cache = crop_cache(reorder_cache(rows, torch.tensor([best])), length + 1)
            next_logits = first_logits[best]
        else:
            token_id = int(logits.argmax())
        yield token_event(ctx, ctx.step_offset + step, token_id, logits, point_mass(logits, token_id), passes, extra)
        passes = 0
        if outcome.add(ctx, token_id):
            return
        length += 1
        if step + 1 >= ctx.max_new_tokens:
            return
        if next_logits is not None:
            logits, cache = next_logits, next_cache  # the first lookahead call already fed the winner
        else:
            out = lm.forward(torch.tensor([[token_id]], device=lm.device), cache)
            passes += 1
            logits, cache = out.logits[0, -1], out.cache
