"""Strategy `rag`: retrieval-augmented generation over the prompt's own context, DRAG and IterDRAG.

Paper: Yue et al. 2024, "Inference Scaling for Long-Context Retrieval Augmented Generation" (arXiv 2410.04343):
spend inference compute on more retrieved documents, more in-context demonstrations and more retrieve-and-answer
iterations, and measure it as the effective context length (the input tokens of all the model's requests).

The prompt is the context, a blank line, and the question (the last paragraph: `document.Document.prompt` builds
such prompts; a prompt without a blank line is all question and nothing is retrieved). The context is cut into
chunks of `chunk_tokens` tokens (`retriever.make_chunks`) and BM25 ranks them (`retriever.BM25`); the model never
reads the whole context, only what a query retrieves, so the context may even be longer than its window.

    drag      the `top_k` chunks retrieved for the question (in document order) and the question, after
              `demonstrations` in-context examples (each a passage of the shipped text with a planted fact, its
              question and its answer), then the answer (one line).
    iterdrag  the same prompt; the model then writes a follow-up query ("Follow up: ..."), the `top_k` chunks that
              query retrieves are put into its context with "Intermediate answer:" and it answers the follow-up;
              `iterations` times; then "So the final answer is:" and the final answer (Self-Ask's labels, which
              the paper's IterDRAG prompts use). The labels and the retrieved chunks are fed to the model, not
              generated: the run's tokens are what the model wrote. Each part ends at the line break after its
              first words; stop tokens are kept out of follow-ups and intermediate answers (as transformers'
              `min_new_tokens` keeps EOS out), and the end of the final answer's line ends the run (stop reason
              "eos", as a stop token would).

Each generated token is a TokenStep (its `extra`: the part, "query", "intermediate" or "answer", and the
iteration). The finish record's `extra` holds the chunks ([start, end) token spans of the context), every
retrieval (its query, the chunks in rank order and their BM25 scores), the final `answer`, and the compute:
`effective_context_tokens` (the paper's measure: the input length of every generation request, as if each part
were its own request) and `tokens_processed` (what this run, which keeps its cache between parts, fed the model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.longctx.document import DEMO_NAMES, RESERVE, SEPARATOR, build_document
from decoding.longctx.retriever import BM25, Chunk, make_chunks
from decoding.params import Params, param
from decoding.registry import register_strategy
from decoding.token.autoregressive import pick_token, token_event

MODES = ("drag", "iterdrag")
FOLLOW_UP, INTERMEDIATE, FINAL = "Follow up:", "Intermediate answer:", "So the final answer is:"
DEMO_TOKENS = 64  # a demonstration's passage has at least this many tokens


@dataclass(frozen=True)
class RagParams(Params):
    mode: str = param("drag", choices=MODES,
                      help="drag: the top-k chunks and the question, then the answer; iterdrag: follow-up queries, each "
                           "retrieving chunks of its own and answered in turn, then the final answer.")
    top_k: int = param(4, low=1, high=32, help="Chunks retrieved for each query (the question, and each follow-up).")
    chunk_tokens: int = param(128, low=16, high=1024,
                              help="Tokens per chunk of the context (whole lines where they fit).")
    demonstrations: int = param(0, low=0, high=8,
                                help="In-context examples before the question: each a passage of the shipped text with "
                                     "a planted fact, its question and its answer (DRAG's demonstrations).")
    iterations: int = param(2, low=1, high=8, help="IterDRAG: follow-up queries before the final answer.")
    step_tokens: int = param(32, low=4, high=256,
                             help="IterDRAG: the most tokens of one follow-up query or intermediate answer.")
    temperature: float = param(0.0, low=0.0, high=5.0, help="0 decodes greedily; above 0 samples at this temperature.")


def split_prompt(prompt: str) -> tuple[str, str]:
    """(context, question): the question is the prompt's last paragraph (all of it when there is no blank line)."""
    context, sep, question = prompt.rpartition(SEPARATOR)
    return (context, question.strip()) if sep and context.strip() else ("", prompt.strip())


class Retrieval:
    """The context's chunks and their BM25 index, built once per run."""

    def __init__(self, tokenizer, context: str, chunk_tokens: int):
        ids = tokenizer(context, add_special_tokens=False)["input_ids"] if context else []
        self.num_tokens = len(ids)
        self.chunks: list[Chunk] = make_chunks(tokenizer, ids, chunk_tokens) if ids else []
        self.index = BM25([c.text for c in self.chunks])
        self.log: list[dict] = []  # every retrieval, for the finish record

    def __call__(self, query: str, k: int, iteration: int) -> str:
        """The text of the `k` best chunks for `query`, in document order ("" without a context)."""
        hits = self.index.rank(query, k) if self.chunks else []
        self.log.append({"iteration": iteration, "query": query, "chunks": [h.index for h in hits],
                         "scores": [round(h.score, 4) for h in hits]})
        return "".join(self.chunks[i].text for i in sorted(h.index for h in hits)).strip()


def demonstration(tokenizer, seed: int, chunk_tokens: int, mode: str) -> str:
    """One in-context example: a short passage of the shipped text with a planted fact, its question, its answer."""
    doc = build_document(tokenizer, RESERVE + max(chunk_tokens, DEMO_TOKENS), seed, depths=(0.5,), names=DEMO_NAMES)
    q, needle = doc.questions[0], doc.needles[0]
    head = "Documents:\n" + doc.prompt(q)
    if mode == "drag":
        return f"{head}\nAnswer: {q.answer}"
    return f"{head}\n{FOLLOW_UP} {q.question}\n{INTERMEDIATE} {needle.line}\n{FINAL} {q.answer}"


def user_prompt(demos: list[str], docs: str, question: str, mode: str) -> str:
    last = (f"Documents:\n{docs}{SEPARATOR}" if docs else "") + question + ("\nAnswer:" if mode == "drag" else "")
    return SEPARATOR.join([*demos, last])


class Decoder:
    """One growing sequence: feed text, generate parts of the answer, count what the model reads."""

    def __init__(self, ctx: RunContext, outcome: Outcome, temperature: float):
        self.ctx, self.outcome, self.temperature = ctx, outcome, temperature
        self.lm = ctx.lm
        self.cache, self.logits, self.length = None, None, 0
        self.step, self.calls = ctx.step_offset, 0  # calls not yet on an event
        self.unfed: list[int] = []  # the last generated token, fed with what follows it
        self.processed = self.effective = 0
        self.done = False  # the run ended (a stop token, the token budget, Stop)
        self.last_part = ""  # the text of the last part generated

    def text_ids(self, text: str) -> list[int]:
        return self.lm.tokenizer(text, add_special_tokens=False)["input_ids"]

    def feed(self, ids: list[int]) -> bool:
        """Run the unfed token and `ids` through the model (one call); False (the run ends) once Stop is pressed."""
        ids = self.unfed + list(ids)
        if self.outcome.cancelled(self.ctx):
            self.done = True
            return False
        out = self.lm.forward(torch.tensor([ids], device=self.lm.device), self.cache, last_only=True)
        self.cache, self.logits = out.cache, out.logits[0, -1]  # (V,)
        self.length += len(ids)
        self.processed += len(ids)
        self.calls += 1
        self.unfed = []
        return True

    def part(self, name: str, iteration: int, limit: int) -> Iterator[Event]:
        """Generate one part, up to `limit` tokens: it ends after the line break that follows its first words. A
        follow-up or intermediate answer never emits a stop token; the final answer may, and once its line ends
        the run ends (stop reason "eos": the answer is complete). Sets `self.done` when the run ends."""
        final = name == "answer"
        self.effective += self.length + len(self.unfed)
        ids: list[int] = []
        while len(ids) < limit and not self.done:
            if self.unfed and not self.feed([]):
                return
            raw = self.logits
            token, final_logits = pick_token(raw, self.temperature, self.ctx.generator,
                                             () if final else self.lm.stop_ids)
            yield token_event(self.ctx, self.step, token, raw, final_logits, forward_passes=self.calls,
                              extra={"part": name, "iteration": iteration})
            self.calls, self.step = 0, self.step + 1
            ids.append(token)
            self.unfed = [token]
            if self.outcome.add(self.ctx, token) or self.step - self.ctx.step_offset >= self.ctx.max_new_tokens:
                self.done = True
            elif "\n" in self.lm.token_text(token) and self.lm.decode(ids).strip():
                if final:
                    self.outcome.stop_reason, self.done = "eos", True
                break
        self.last_part = self.lm.decode(ids).strip()


@register_strategy("rag", params=RagParams, family="longctx", uses_seed=True,
                   help="retrieval-augmented generation over the prompt's context: DRAG (top-k chunks) or IterDRAG "
                        "(follow-up queries, each retrieving and answered)",
                   papers=(bib.YUE_2024, bib.ROBERTSON_2009))
def rag(ctx: RunContext, params: RagParams, outcome: Outcome) -> Iterator[Event]:
    lm, mode = ctx.lm, params.mode
    context, question = split_prompt(ctx.prompt)
    retrieval = Retrieval(lm.tokenizer, context, params.chunk_tokens)
    seeds = torch.randint(0, 2**31 - 1, (params.demonstrations,), generator=ctx.generator).tolist()
    demos = [demonstration(lm.tokenizer, s, params.chunk_tokens, mode) for s in seeds]
    text = user_prompt(demos, retrieval(question, params.top_k, 0), question, mode)
    chat = _chat_applied(ctx)
    prompt_ids = lm.encode_prompt(text, chat=chat)[0]
    dec = Decoder(ctx, outcome, params.temperature)
    prefix = list(ctx.prompt_ids[len(ctx.prompt_ids) - ctx.step_offset:])  # a branch's first generated tokens
    lead = dec.text_ids(FOLLOW_UP) if mode == "iterdrag" else []
    injected = params.iterations * (params.top_k * params.chunk_tokens + 32) if mode == "iterdrag" else 0
    _check_window(lm, len(prompt_ids) + len(lead) + len(prefix), ctx.max_new_tokens, injected)
    outcome.extra.update(mode=mode, context_tokens=retrieval.num_tokens, prompt_tokens=len(prompt_ids),
                         chunks=[[c.start, c.end] for c in retrieval.chunks], retrievals=retrieval.log)
    if not dec.feed(prompt_ids + lead + prefix):
        return
    budget = ctx.max_new_tokens
    if mode == "iterdrag":
        for it in range(1, params.iterations + 1):
            yield from dec.part("query", it, params.step_tokens)
            if dec.done:
                break
            docs = retrieval(dec.last_part or question, params.top_k, it)
            dec.unfed += dec.text_ids(("Documents:\n" + docs + "\n" if docs else "") + INTERMEDIATE)
            yield from dec.part("intermediate", it, params.step_tokens)
            if dec.done:
                break
            dec.unfed += dec.text_ids(FOLLOW_UP if it < params.iterations else FINAL)
    answer = ""
    if not dec.done:
        yield from dec.part("answer", 0, budget)
        answer = dec.last_part
    outcome.extra.update(answer=answer, effective_context_tokens=dec.effective, tokens_processed=dec.processed)


def _chat_applied(ctx: RunContext) -> bool:
    """Whether the run's prompt went through the chat template (then the rebuilt prompt does too)."""
    lm = ctx.lm
    if not lm.has_chat_template:
        return False
    templated = lm.encode_prompt(ctx.prompt, chat=True)[0]
    return list(ctx.prompt_ids[:len(templated)]) == templated


def _check_window(lm, prompt_tokens: int, max_new_tokens: int, injected: int) -> None:
    limit = lm.max_length
    if limit is not None and prompt_tokens + max_new_tokens + injected > limit:
        raise ValueError(f"the retrieval prompt's {prompt_tokens} tokens, `max_new_tokens` {max_new_tokens} and "
                         f"{injected} tokens of IterDRAG's retrieved chunks exceed {lm.name}'s context of {limit} "
                         "positions; lower `top_k`, `chunk_tokens`, `demonstrations` or `iterations`")
