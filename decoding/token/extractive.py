"""Exact extraction: the most probable answer span of a passage, scored exactly, not decoded greedily.

Follows Castel, Ram, Efrat and Levy, "How Optimal is Greedy Decoding for Extractive Question
Answering?" (AKBC 2022, arXiv 2108.05857): when the answer must be a span of the given passage, the span with the
highest probability under the model can be found exactly, because there are only O(n * L) candidate spans. Greedy
decoding may leave the passage or commit early to a worse span; exact search never does.

How a span is scored here (one prefill + one batched pass per `batch_rows` start positions):
    log P(span) = sum over the span's tokens of log p(token | prompt, earlier span tokens)
                + log p(end | prompt, span)
where the prompt is the whole text the model sees (it carries `Context:` and `Question:`, and
should end with `Answer:`) and `end` is "the answer stops here": the probability of a newline
token plus that of the model's stop tokens (eos, or `<|im_end|>` for a chat model), summed.
All spans from one start share one row of a batched call: the row feeds the passage's tokens
from that start, so its logits score every length at once (the prompt's cache is shared).

What the paper does, and what differs here. Its prompt is `Text: <passage>\nQuestion: <question>\nAnswer:`
followed by T5's mask sentinel; the answer is the mask's filling, ended by the next sentinel (the
authors' code, github.com/ocastel/exact-extract, `--pattern` and `src/decoding/exact_extract.py`).
Its headline setting is zero-shot; "few-shot" there means fine-tuning on 16-1024 examples, not
examples in the prompt. Both `Context:` and the paper's `Text:` mark the passage here, and a
decoder-only model has no sentinel, so `end` is a newline or a stop token. The paper's code scores
every span of T5's SentencePiece tokens; SmolLM2's tokenizer writes each digit as its own token
(" 1871" is " ", "1", "8", "7", "1"), so a token span can be a fragment of a word that no answer
is (`1` of `1871` won such runs). With `whole_words` (the default) a candidate starts and ends at a
word boundary of the passage and holds a letter or digit; off, every token span counts, as in
the paper's code.

Glossary
    passage   the text between `Context:` and `Question:` in the prompt, tokenized on its own
              with a leading space (so a span starting at a word carries the word's space).
    span      passage tokens [start, end] (inclusive), at most `max_span_tokens` long; spans whose
              text is only whitespace are left out (a blank answer answers nothing).
    word boundary  a place in the passage that is not between two letters/digits; a whole-word
              span starts and ends at one (`whole_word_spans`).
    end       the answer-stop mass: p(newline) + p(stop tokens) after the span.
    greedy    the answer greedy decoding gives from the same prompt (up to an end token),
              recorded to compare; marked on the picture when it is a span of the passage.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding import sampling
from decoding.token.autoregressive import point_mass, token_event
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.lm import repeat_cache
from decoding.params import Params, param
from decoding.registry import register_strategy

CONTEXT_MARK, TEXT_MARK, QUESTION_MARK = "Context:", "Text:", "Question:"  # `Text:` is the paper's passage mark


@dataclass(frozen=True)
class ExactExtractParams(Params):
    max_span_tokens: int = param(12, low=1, high=64, help="Longest answer span scored, in tokens.")
    batch_rows: int = param(16, low=1, high=256, help="Start positions scored per forward pass (rows of one batched call).")
    top_spans: int = param(10, low=1, high=50, help="How many of the best spans the trace records (for the picture and the CLI).")
    whole_words: bool = param(True, help="Only spans that start and end at word boundaries of the passage and hold a letter "
                                         "or digit; off: every token span, as the paper's T5 code scores (a digit of a "
                                         "year can then win).")


def passage_of(prompt: str) -> str:
    """The passage between `Context:` (or the paper's `Text:`) and `Question:` (ValueError saying what the
    prompt lacks)."""
    mark = CONTEXT_MARK if CONTEXT_MARK in prompt or TEXT_MARK not in prompt else TEXT_MARK
    where_c, where_q = prompt.find(mark), prompt.find(QUESTION_MARK)
    if where_c < 0 or where_q < 0:
        missing = " and ".join(m for m, w in ((CONTEXT_MARK, where_c), (QUESTION_MARK, where_q)) if w < 0)
        raise ValueError(f"exact-extract needs a prompt with a `Context:` passage then a `Question:`, and "
                         f"ending with `Answer:`; this prompt has no {missing}")
    passage = prompt[where_c + len(mark):where_q].strip()
    if where_q < where_c or not passage:
        raise ValueError("exact-extract: put the passage after `Context:` and before `Question:`; "
                         "the text between them is empty")
    return passage


def span_logprobs(first_logprobs: torch.Tensor, row_logprobs: torch.Tensor, passage_ids: list[int],
                  end_ids: list[int]) -> torch.Tensor:
    """Exact log-probabilities of every span (pure; the test's brute force checks it).

    first_logprobs (V,): after the prompt. row_logprobs (N, L, V): row i fed passage[i:i+L]
    (padded past the passage's end), position k predicting what follows passage[i+k].
    Returns (N, L): entry [i, l-1] = log P(passage[i:i+l] then end); -inf past the passage's end.
    """
    n, length = row_logprobs.shape[0], row_logprobs.shape[1]
    ids = torch.tensor(passage_ids)
    end = torch.logsumexp(row_logprobs[:, :, end_ids], dim=-1)  # (N, L) end after span [i, i+k]
    nxt = torch.full((n, length), float("-inf"))  # (N, L) log p(passage[i+k+1] | ..., passage[i+k])
    for k in range(length):
        valid = torch.arange(n) + k + 1 < n
        rows = torch.arange(n)[valid]
        nxt[rows, k] = row_logprobs[rows, k, ids[rows + k + 1]]
    prefix = first_logprobs[ids].unsqueeze(1) + torch.cat([torch.zeros(n, 1), nxt[:, :-1].cumsum(1)], dim=1)  # (N, L)
    scores = prefix + end
    past_end = torch.arange(n)[:, None] + torch.arange(length)[None, :] >= n  # span leaves the passage
    return scores.masked_fill(past_end, float("-inf"))


def char_offsets(tokenizer, text: str, ids: list[int]) -> list[tuple[int, int]]:
    """Where each token of `ids` (the tokenization of `text`) lies in `text`, as (start, end) characters."""
    if tokenizer.is_fast:
        return [tuple(o) for o in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True).offset_mapping]
    ends = [len(tokenizer.decode(ids[:k + 1])) for k in range(len(ids))]  # a slow tokenizer has no offsets
    return list(zip([0] + ends[:-1], ends))


def whole_word_spans(text: str, offsets: list[tuple[int, int]], length: int) -> torch.Tensor:
    """(N, L) bool: span [i, i+k] is a candidate answer (pure; N = len(offsets)).

    A candidate's text, leading and trailing whitespace aside, holds a letter or digit, and starts and
    ends at a word boundary of `text`: not between two letters/digits (`1` of `1871` is out, ` 1871`
    and `Vell.` are in)."""
    def inside_word(at: int) -> bool:  # the boundary before character `at` cuts a word
        return 0 < at < len(text) and text[at - 1].isalnum() and text[at].isalnum()

    n = len(offsets)
    keep = torch.zeros(n, length, dtype=torch.bool)
    for i in range(n):
        for k in range(min(length, n - i)):
            start, end = offsets[i][0], offsets[i + k][1]
            piece = text[start:end]
            start, end = start + len(piece) - len(piece.lstrip()), end - (len(piece) - len(piece.rstrip()))
            keep[i, k] = (any(c.isalnum() for c in piece) and not inside_word(start) and not inside_word(end))
    return keep


def candidate_logprob(scores: torch.Tensor, span: list[int] | None) -> float | None:
    """The (N, L) score of span [start, end], or None when it is no span or no candidate (-inf)."""
    value = scores[span[0], span[1] - span[0]].item() if span else float("-inf")
    return value if value > float("-inf") else None


def end_token_ids(lm) -> list[int]:
    """The newline token (when "\\n" is one token) and the model's stop tokens."""
    newline = lm.tokenizer("\n", add_special_tokens=False).input_ids
    return sorted(set(lm.stop_ids) | ({newline[0]} if len(newline) == 1 else set()))


def greedy_answer(ctx: RunContext, cache, first_logits: torch.Tensor, end_ids: list[int]) -> list[int]:
    """Greedy tokens from the prompt until an end token (excluded) or `max_new_tokens`."""
    lm, ids, logits = ctx.lm, [], first_logits
    for _ in range(ctx.max_new_tokens):
        token_id = int(logits.argmax())
        if token_id in end_ids or ctx.should_stop():
            break
        ids.append(token_id)
        out = lm.forward(torch.tensor([[token_id]], device=lm.device), cache)
        cache, logits = out.cache, out.logits[0, -1]
    return ids


@register_strategy("exact-extract", params=ExactExtractParams,
                   help="extractive QA: the passage span with the highest exact probability (prompt with Context: and Question:)",
                   papers=(bib.CASTEL_2022,))
def exact_extract(ctx: RunContext, params: ExactExtractParams, outcome: Outcome) -> Iterator[Event]:
    lm = ctx.lm
    passage = passage_of(ctx.prompt)
    passage_ids = lm.tokenizer(" " + passage, add_special_tokens=False).input_ids
    n, length = len(passage_ids), min(params.max_span_tokens, len(passage_ids))
    if params.whole_words:
        candidates = whole_word_spans(" " + passage, char_offsets(lm.tokenizer, " " + passage, passage_ids), length)
    else:  # every token span but the blank ones
        candidates = torch.tensor([[bool(lm.decode(passage_ids[i:i + k + 1]).strip()) if i + k < n else False
                                    for k in range(length)] for i in range(n)], dtype=torch.bool)
    if not candidates.any():
        raise ValueError(f"exact-extract: the passage has no span of at most max_span_tokens={params.max_span_tokens} "
                         f"tokens that is {'whole words' if params.whole_words else 'not blank'}; "
                         f"raise max_span_tokens or write a passage with words")
    lm.check_fits(len(ctx.prompt_ids), max(length, ctx.max_new_tokens))
    end_ids = end_token_ids(lm)
    out = lm.prefill(ctx.prompt_ids)
    passes = 1
    first_logits = out.logits[0, -1]  # (V,)
    first_logprobs = sampling.log_softmax(first_logits)
    padded = passage_ids + [passage_ids[-1]] * length  # rows near the end are padded (those positions are ignored)
    rows_lp = []
    for start in range(0, n, params.batch_rows):
        if outcome.cancelled(ctx):
            return
        starts = range(start, min(start + params.batch_rows, n))
        batch = torch.tensor([padded[i:i + length] for i in starts], device=lm.device)  # (B, L)
        cache = repeat_cache(copy.deepcopy(out.cache), len(starts))
        logits = lm.forward(batch, cache).logits  # (B, L, V)
        passes += 1
        logprobs = sampling.log_softmax(logits)
        rows_lp.append(logprobs[:, :, end_ids + sorted(set(passage_ids))].cpu())  # only the columns spans need
    columns = end_ids + sorted(set(passage_ids))  # re-index: scores need only these vocabulary columns
    col = {t: c for c, t in enumerate(columns)}
    row_lp = torch.cat(rows_lp)  # (N, L, C)
    scores = span_logprobs(first_logprobs[columns].cpu(), row_lp, [col[t] for t in passage_ids],
                           list(range(len(end_ids))))  # (N, L)
    scores = scores.masked_fill(~candidates, float("-inf"))  # no candidate: a word cut in two, or a blank
    greedy_ids = greedy_answer(ctx, repeat_cache(copy.deepcopy(out.cache), 1), first_logits, end_ids)
    passes += len(greedy_ids)
    if outcome.cancelled(ctx):  # Stop during the greedy answer: no span call
        return
    flat = scores.flatten()
    order = [i for i in flat.argsort(descending=True)[:params.top_spans].tolist() if flat[i] > float("-inf")]
    best_start, best_len = divmod(order[0], length)
    span_ids = passage_ids[best_start:best_start + best_len + 1]
    greedy_span = next(([i, i + len(greedy_ids) - 1] for i in range(n) if greedy_ids and
                        passage_ids[i:i + len(greedy_ids)] == greedy_ids and len(greedy_ids) <= length), None)
    record = {
        "passage_tokens": [lm.token_text(t) for t in passage_ids],
        "max_span_tokens": length,
        "logprobs": [[round(v, 3) if v > float("-inf") else None for v in row] for row in scores.tolist()],  # (N, L)
        "best": {"start": best_start, "end": best_start + best_len, "logprob": flat[order[0]].item(),
                 "text": lm.decode(span_ids)},
        "top": [{"start": i // length, "end": i // length + i % length, "logprob": flat[i].item(),
                 "text": lm.decode(passage_ids[i // length:i // length + i % length + 1])} for i in order],
        "greedy": {"text": lm.decode(greedy_ids), "token_ids": greedy_ids, "span": greedy_span,
                   "logprob": candidate_logprob(scores, greedy_span)},  # None: no span, or no candidate
        "num_spans": int(torch.isfinite(flat).sum()), "end_ids": end_ids,
    }
    # the chosen span's own rows, for its token events (one more call; the batched rows were not kept)
    span_logits = lm.forward(torch.tensor([span_ids], device=lm.device), repeat_cache(copy.deepcopy(out.cache), 1)).logits[0]
    passes += 1
    for k, token_id in enumerate(span_ids):
        raw = first_logits if k == 0 else span_logits[k - 1]  # (V,)
        yield token_event(ctx, ctx.step_offset + k, token_id, raw, point_mass(raw, token_id),
                          forward_passes=passes if k == 0 else 0, extra={"extract": record} if k == 0 else {})
        if outcome.add(ctx, token_id):
            return
    outcome.stop_reason = "eos"
    outcome.extra = {"span": record["best"], "greedy": record["greedy"], "num_spans": record["num_spans"]}
