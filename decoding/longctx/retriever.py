"""The shipped retriever: BM25 over chunks of the context, in pure Python (nothing to download).

    chunks = make_chunks(tokenizer, context_ids, size=128)   # line-aligned runs of at most 128 tokens
    ranked = BM25([c.text for c in chunks]).rank("What is the secret number of Tavor?", k=4)

Chunks. The context's tokens are cut into runs of at most `size` tokens that end at a line break where they can
(lines are packed whole; a line longer than `size` is cut into pieces of `size`). A chunk is a token span of the
context, so the drafter of `rapid` can feed its ids as they are, and its text is the decoding of those ids.

Scoring. Okapi BM25 (Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009), as
Lucene computes it: for each distinct query term t in the chunk,
    idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen)),   idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))
with k1 = 1.5 and b = 0.75; terms are lower-cased words (digits kept) without a short list of English stop words.
Ties are broken by chunk index, so the ranking is the same on every run and machine.

Glossary
    tf / df   how often a term occurs in a chunk / in how many chunks it occurs; N chunks, avglen their mean length.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

K1, B = 1.5, 0.75
STOP_WORDS = frozenset(
    "a an and are as at be but by for from had has have he her him his i in is it its of on or she so that the "
    "their them then there they this thou thee thy to unto was we were what which who whom with ye you your".split())


@dataclass(frozen=True)
class Chunk:
    index: int  # its place among the context's chunks
    start: int  # first token, counted in the ids it was cut from
    end: int  # one past its last token
    text: str  # the decoding of its tokens


@dataclass(frozen=True)
class Hit:
    index: int  # the chunk's index
    score: float


def terms(text: str) -> list[str]:
    """The words BM25 counts: lower-case letters, digits and apostrophes, stop words left out."""
    return [w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in STOP_WORDS]


def chunk_spans(line_ends: list[bool], size: int) -> list[tuple[int, int]]:
    """(start, end) spans covering positions 0..len-1: whole lines (a line ends at a position whose flag is True)
    packed into spans of at most `size` positions; a longer line is cut into pieces of `size`."""
    if size < 1:
        raise ValueError(f"`chunk_tokens` must be at least 1, got {size}")
    lines, start = [], 0
    for i, end in enumerate(line_ends):
        if end:
            lines.append((start, i + 1))
            start = i + 1
    if start < len(line_ends):
        lines.append((start, len(line_ends)))
    spans: list[tuple[int, int]] = []
    for a, b in lines:
        if spans and b - spans[-1][0] <= size and spans[-1][1] == a:
            spans[-1] = (spans[-1][0], b)  # the line joins the open chunk
            continue
        spans += [(s, min(s + size, b)) for s in range(a, b, size)]
    return spans


def make_chunks(tokenizer, ids: list[int], size: int, offset: int = 0) -> list[Chunk]:
    """The chunks of `ids` (spans counted from `offset`, the position of ids[0] in a longer sequence)."""
    texts = [tokenizer.decode([t]) for t in ids]
    spans = chunk_spans(["\n" in t for t in texts], size)
    return [Chunk(i, offset + a, offset + b, tokenizer.decode(ids[a:b])) for i, (a, b) in enumerate(spans)]


class BM25:
    """Okapi BM25 over a fixed list of texts (see the module docstring)."""

    def __init__(self, texts: list[str], k1: float = K1, b: float = B):
        self.k1, self.b = k1, b
        self.counts = [Counter(terms(t)) for t in texts]
        self.lengths = [sum(c.values()) for c in self.counts]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df = Counter(t for c in self.counts for t in c)
        n = len(texts)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    def scores(self, query: str) -> list[float]:
        """One score per text (0 where no query term occurs)."""
        wanted = list(dict.fromkeys(terms(query)))  # distinct terms, in query order
        out = []
        for counts, length in zip(self.counts, self.lengths):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg) if self.avg else self.k1
            out.append(sum(self.idf[t] * counts[t] * (self.k1 + 1) / (counts[t] + norm) for t in wanted if t in counts))
        return out

    def rank(self, query: str, k: int) -> list[Hit]:
        """The `k` best texts, best first (ties: the earlier text first)."""
        scores = self.scores(query)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [Hit(i, scores[i]) for i in order[:max(0, k)]]


def retrieve(chunks: list[Chunk], query: str, k: int) -> list[Hit]:
    """The `k` chunks BM25 ranks highest for `query`, best first."""
    return BM25([c.text for c in chunks]).rank(query, k) if chunks else []
