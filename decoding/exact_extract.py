"""Exact extraction: for a question about a passage, the passage span the model finds most probable.

Paper followed
    Ozeri et al. 2024, "How Optimal is Greedy Decoding for Extractive Question Answering?" For
    extractive QA the answer is a span of the context, so instead of decoding greedily (which may
    wander off the passage) every span can be scored by its exact probability as the answer and
    the best one returned.

Here a span is a run of the passage's own tokens (as the tokenizer splits the passage), at most
`max_span` long. Its score is log P(span tokens, then the end of the answer | prompt): the end is
the model's first stop token (the chat turn's end for an instruct model, end-of-text otherwise).
One forward pass per start position gives every span from it (the logits after each prefix give
both the next token's and the end's probability); the starts run as rows of one batch, `BATCH`
at a time, each continuing a copy of the prompt's cache. The prompt must hold the passage after
`Context:` and the question after `Question:`.

Events: the chosen span streams as token events (each with the model's real distribution at that
position, so the Playground's charts read as for any run); the finish carries the span table
(start x length log-probabilities) for the heat-map, the best spans, and greedy's answer for
comparison (greedy runs too, `max_new_tokens` tokens, its calls counted).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import sampling
from decoding.autoregressive import point_mass, token_event
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.lm import repeat_cache
from decoding.params import Params, param
from decoding.registry import register_strategy

BATCH = 16  # start positions scored per model call
_PARTS = re.compile(r"Context:\s*(?P<context>.+?)\s*Question:\s*(?P<question>.+)", re.S | re.I)


@dataclass(frozen=True)
class ExactExtractParams(Params):
    max_span: int = param(12, low=1, high=64, help="Longest span considered, in tokens.")


def passage_of(prompt: str) -> tuple[str, str]:
    """(passage, question) from a prompt with 'Context: ...' before 'Question: ...'."""
    match = _PARTS.search(prompt)
    if not match or not match.group("context").strip() or not match.group("question").strip():
        raise ValueError("exact-extract needs a prompt with the passage after 'Context:' and the question after "
                         "'Question:' (e.g. 'Context: The Nile flows north. Question: Which way does the Nile flow?')")
    return match.group("context").strip(), match.group("question").strip()


def span_table(lm, prompt_ids: list[int], passage_ids: list[int], max_span: int, end_id: int,
               should_stop=lambda: False) -> tuple[torch.Tensor, int]:
    """(P, max_span) log P(passage[i:i+l+1] then end | prompt) for every start i and length l + 1
    (-inf past the passage's end), and the model calls made."""
    out = lm.prefill(prompt_ids)
    first = sampling.log_softmax(out.logits[0, -1].float())  # (V,) the answer's first token
    n, table, calls = len(passage_ids), torch.full((len(passage_ids), max_span), float("-inf")), 1
    for lo in range(0, n, BATCH):
        if should_stop():
            break
        starts = list(range(lo, min(n, lo + BATCH)))
        ids = torch.full((len(starts), max_span), passage_ids[-1], dtype=torch.long)  # right padding: never read
        for r, i in enumerate(starts):
            span = passage_ids[i:i + max_span]
            ids[r, :len(span)] = torch.tensor(span)
        cache = repeat_cache(copy.deepcopy(out.cache), len(starts))
        logits = lm.forward(ids.to(lm.device), cache).logits.float()  # (R, max_span, V)
        calls += 1
        logprobs = torch.log_softmax(logits, dim=-1)
        for r, i in enumerate(starts):
            length = min(max_span, n - i)
            total = float(first[passage_ids[i]])
            for j in range(length):  # span passage[i..i+j]
                table[i, j] = total + float(logprobs[r, j, end_id])
                if j + 1 < length:
                    total += float(logprobs[r, j, passage_ids[i + j + 1]])
    return table, calls


@register_strategy("exact-extract", params=ExactExtractParams,
                   help="extractive QA: score every span of the passage by its exact probability, return the best")
def exact_extract(ctx: RunContext, params: ExactExtractParams, outcome: Outcome) -> Iterator[Event]:
    lm = ctx.lm
    passage, question = passage_of(ctx.prompt)
    passage_ids = lm.tokenizer(passage, add_special_tokens=False).input_ids
    if not passage_ids:
        raise ValueError("exact-extract: the passage after 'Context:' is empty")
    eos = lm.tokenizer.eos_token_id
    end_id = eos if eos in lm.stop_ids else min(lm.stop_ids)  # the end of an answer
    before = lm.forward_passes
    max_span = max(1, min(params.max_span, ctx.max_new_tokens - 1))  # the span and the answer's end fit the budget
    table, _ = span_table(lm, list(ctx.prompt_ids), passage_ids, max_span, end_id, ctx.should_stop)
    if outcome.cancelled(ctx):
        return
    flat = int(table.argmax())
    start, length = divmod(flat, max_span)
    span = passage_ids[start:start + length + 1]
    # greedy's answer, for comparison (the paper's point: it may not be the best span, or any span)
    greedy_ids, out = [], lm.prefill(ctx.prompt_ids)
    for _ in range(ctx.max_new_tokens):
        token = int(out.logits[0, -1].argmax())
        if token in lm.stop_ids:
            break
        greedy_ids.append(token)
        if ctx.should_stop():
            break
        out = lm.forward(torch.tensor([[token]], device=lm.device), out.cache)
    top = sorted(((float(table[i, j]), i, j) for i in range(table.shape[0]) for j in range(table.shape[1])
                  if torch.isfinite(table[i, j])), key=lambda t: (-t[0], t[1], t[2]))[:5]  # ties: the earliest,
    #                                                                                       as argmax
    passes = lm.forward_passes - before
    # stream the chosen span: each token with the model's distribution where it stands
    out = lm.prefill(ctx.prompt_ids)
    for k, token in enumerate(span + [end_id]):
        logits = out.logits[0, -1]
        yield token_event(ctx, ctx.step_offset + k, token, logits, point_mass(logits, token),
                          passes + 1 if k == 0 else 1,
                          {"span": [start, start + length + 1]} if k == 0 else {})
        if outcome.add(ctx, token) or k == len(span):
            break
        out = lm.forward(torch.tensor([[token]], device=lm.device), out.cache)
    greedy_text = lm.decode(greedy_ids).strip()
    outcome.extra = {
        "question": question, "passage_tokens": [lm.token_text(t) for t in passage_ids],
        "span": [start, start + length + 1], "span_text": lm.decode(span).strip(),
        "span_logprob": round(float(table[start, length]), 4),
        "table": [[round(v, 3) if v != float("-inf") else None for v in row] for row in table.tolist()],
        "top_spans": [{"start": i, "end": i + j + 1, "text": lm.decode(passage_ids[i:i + j + 1]).strip(),
                       "logprob": round(v, 4)} for v, i, j in top],
        "greedy_text": greedy_text, "greedy_is_span": bool(greedy_text) and greedy_text in passage,
    }
