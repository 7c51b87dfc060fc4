"""Drafter `rapid` of the speculative strategy: a RAG drafter reads only the retrieved part of a long context and
drafts for a target that reads all of it (RAPID).

Paper: Chen et al. 2025, "Long-Context Inference with Retrieval-Augmented Speculative Decoding" (arXiv 2502.20330,
ICML 2025), and the authors' code. With a long context a draft model is no longer cheap: its cache is as long as
the target's. RAPID's drafter decodes on a short prompt instead, the retrieved chunks and the question, with a
cache of its own, while the target verifies on the full context; the drafter may be the target itself
(self-speculation, the default here) or another model of the same tokenizer.

    python -m decoding run --strategy speculative --set drafter=rapid --prompt-file /tmp/book.txt

The draft prompt. The prompt is the chat template's head, the context, and the question (after the context's last
blank line, with the template's tail). The context's tokens are cut into line-aligned chunks of
`rapid.chunk_tokens` (`retriever.make_chunks`), BM25 ranks them for the question's text, and the drafter's prompt
is the head, the `rapid.top_k` best chunks in document order (their own token ids, nothing re-tokenised) and the
question's tokens. The first round's record keeps the chunks, the retrieved ones in document order (`retrieved`)
and in rank order (`ranked`), with their BM25 scores in rank order (`scores`). After that the drafter's context
follows the target's: every token the run produces is appended to both. A prompt without a blank line has nothing
to retrieve: the drafter reads the whole prompt.

Verification (`rapid.target`):
    exact      the target's own distribution p: lossless, as for every drafter (greedy output = the target's greedy
               output; sampled output distributed as p). The default.
    augmented  RAPID's retrieval-augmented target, LOSSY: at each drafted position the target's logits take one
               step towards the drafter's distribution q, z' = z + eta * (q - p) on the tokens the drafter gives
               at least `rapid.alpha` of its top probability (the step of the authors' code: the gradient of the
               KL divergence from q to softmax(z) is p - q), and the round verifies against p' = softmax(z'):
               a draft token is accepted with probability min(1, p'/q), a rejection samples norm(max(0, p' - q)),
               so each drafted position follows p' (positions the drafter did not expand, a bonus token, follow p).
               Greedy verification takes the argmax of p'. The authors' code samples a rejection's replacement from
               max(p - q, p - p') instead; here p' is followed exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decoding import bibliography as bib
from decoding.longctx.retriever import BM25, make_chunks
from decoding.params import Params, param
from decoding.speculative.base import Drafter
from decoding.speculative.drafters import Draft, ModelDrafter, TreePlan
from decoding.speculative.strategy import DRAFTERS, SpeculativeParams, _load_draft_model

TARGETS = ("exact", "augmented")


@dataclass(frozen=True)
class RapidParams(Params):
    draft_model: str = param("", note="name or hub id; empty = the target itself",
                             help="The RAG drafter: a causal model sharing the target's tokenizer; empty = the target "
                                  "itself (RAPID's self-speculation).")
    top_k: int = param(4, low=1, high=64, help="Chunks of the context the drafter reads.")
    chunk_tokens: int = param(128, low=16, high=1024, ui_high=512,
                              help="Tokens per chunk of the context (whole lines where they fit).")
    target: str = param("exact", choices=TARGETS,
                        help="exact: verify against the target's own distribution (lossless); augmented: RAPID's "
                             "retrieval-augmented target, the target's logits moved towards the drafter's (lossy).")
    eta: float = param(10.0, low=0.0, high=100.0,
                       help="augmented: the step size towards the drafter (the authors' example uses 10).")
    alpha: float = param(0.1, low=0.0, high=1.0,
                         help="augmented: only tokens the drafter gives at least alpha times its top probability move.")


def prompt_parts(lm, ids: list[int]) -> tuple[int, int]:
    """(start, end) of the context within the prompt ids: after the chat template's head (when the prompt starts
    with it) and up to the last blank line; (start, start) when there is none."""
    start = len(_template_head(lm)) if ids[:len(_template_head(lm))] == _template_head(lm) else 0
    tail = ""
    for i in range(len(ids) - 1, start - 1, -1):
        tail = lm.token_text(ids[i]) + tail
        if "\n\n" in tail:  # token i starts the blank line; the line breaks after it belong to the context too
            end = i + 1
            while end < len(ids) and "\n" in lm.token_text(ids[end]) and not lm.token_text(ids[end]).strip():
                end += 1
            return start, end
    return start, start


def _template_head(lm) -> list[int]:
    """The tokens every chat prompt of `lm` starts with (the common prefix of two templated prompts)."""
    if not lm.has_chat_template:
        return []
    a, b = lm.encode_prompt("A", chat=True)[0], lm.encode_prompt("B", chat=True)[0]
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def augmented_target(p: torch.Tensor, q: torch.Tensor, eta: float, alpha: float) -> torch.Tensor:
    """RAPID's retrieval-augmented target at one position: softmax(log p + eta * (q - p) where q >= alpha * max q).
    `p` and `q` are (V,) probabilities; returns a new (V,) distribution (eta 0 gives p back)."""
    p = p.double()
    q = q.double().to(p.device)
    shift = torch.where(q >= alpha * q.max(), eta * (q - p), torch.zeros_like(p))
    return torch.softmax(torch.log(p.clamp_min(1e-300)) + shift, -1).to(torch.float32)


class RapidDrafter(Drafter):
    """The RAG drafter: a `ModelDrafter` (its own cache) over the retrieved chunks and the question."""

    name = "rapid"

    def __init__(self, target, draft, own: RapidParams):
        self.target, self.own = target, own
        self.inner = ModelDrafter(draft, f"rapid:{draft.name}")
        self.prompt_len: int | None = None  # the target's prompt length (set at the first round)
        self.draft_prompt: list[int] = []
        self.retrieved: dict = {}

    @property
    def changes_target(self) -> bool:
        return self.own.target == "augmented"

    def retrieve(self, prompt: list[int]) -> None:
        """Build the draft prompt from the target's prompt (once, at the first round)."""
        lm, own = self.target, self.own
        start, end = prompt_parts(lm, prompt)
        chunks = make_chunks(lm.tokenizer, prompt[start:end], own.chunk_tokens, offset=start) if end > start else []
        query = lm.decode(prompt[end:])
        hits = BM25([c.text for c in chunks]).rank(query, own.top_k) if chunks else []
        kept = sorted(h.index for h in hits)
        body = [t for i in kept for t in prompt[chunks[i].start:chunks[i].end]]
        self.prompt_len = len(prompt)
        self.draft_prompt = prompt[:start] + body + prompt[end:] if chunks else list(prompt)
        self.retrieved = {"context_tokens": end - start, "draft_prompt_tokens": len(self.draft_prompt),
                          "chunks": [[c.start, c.end] for c in chunks], "retrieved": kept,
                          "ranked": [h.index for h in hits], "scores": [round(h.score, 4) for h in hits]}

    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
        first = self.prompt_len is None
        if first:
            self.retrieve(list(context))
        mapped = self.draft_prompt + list(context[self.prompt_len:])  # the run's tokens follow the short prompt
        draft = self.inner.propose(mapped, plan, temperature, generator)
        draft.info |= (self.retrieved if first else {}) | {"draft_context_tokens": len(mapped)}
        return draft

    def target_probs(self, probs: torch.Tensor, draft: Draft) -> torch.Tensor:
        """`probs` (exact), or RAPID's retrieval-augmented target at every position the drafter expanded."""
        if not self.changes_target:
            return probs
        out = probs.clone()
        for parent, q in draft.q_dists.items():
            out[parent + 1] = augmented_target(probs[parent + 1], q, self.own.eta, self.own.alpha)
        return out

    def bytes_per_position(self) -> int:
        return self.inner.bytes_per_position()


@DRAFTERS.register("rapid", help="RAPID: the model drafts from the retrieved chunks and the question only (its own "
                                 "short cache); the target verifies on the whole context (rapid.target=augmented: "
                                 "lossy)",
                   params=RapidParams, default_draft_length=10, default_confidence=0.4,
                   papers=(bib.CHEN_2025_RAPID, bib.ROBERTSON_2009))
def _rapid_drafter(lm, params: SpeculativeParams) -> Drafter:
    own: RapidParams = params.own
    name = own.draft_model.strip()
    draft = lm if not name else _load_draft_model(lm, name)
    return RapidDrafter(lm, draft, own)
