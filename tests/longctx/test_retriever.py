"""The shipped retriever: line-aligned chunks that cover the context, BM25 as its formula says, deterministic,
and on the shipped document the chunk holding a planted fact ranks first for the question about it."""

from __future__ import annotations

import math

import pytest
from transformers import AutoTokenizer

from decoding.longctx import document as D
from decoding.longctx.retriever import BM25, chunk_spans, make_chunks, retrieve, terms


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(D.ROOT / "assets" / "tiny-ar"))


def test_chunks_cover_every_position_once_and_keep_lines_whole_where_they_fit():
    ends = [False, False, True, False, True, False, False, False, False, False, False, True, False]
    spans = chunk_spans(ends, 4)
    assert spans[0][0] == 0 and spans[-1][1] == len(ends)
    assert all(a < b <= a + 4 for a, b in spans) and all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    assert spans[:2] == [(0, 3), (3, 5)]  # lines of 3 and 2 tokens do not share a chunk of 4
    assert spans[2:] == [(5, 9), (9, 13)]  # a 7-token line is cut into 4 + 3, and the 1-token tail joins the 3
    assert chunk_spans([True, True, True, True], 2) == [(0, 2), (2, 4)]  # short lines are packed
    with pytest.raises(ValueError, match="`chunk_tokens` must be at least 1"):
        chunk_spans(ends, 0)


def test_chunk_texts_are_the_context_cut_at_line_ends(tok):
    doc = D.build_document(tok, 1024, seed=0)
    ids = tok(doc.text, add_special_tokens=False)["input_ids"]
    chunks = make_chunks(tok, ids, 64, offset=10)
    assert "".join(c.text for c in chunks) == tok.decode(ids)
    assert [(c.start, c.end) for c in chunks][0][0] == 10 and chunks[-1].end == 10 + len(ids)
    assert all(c.end - c.start <= 64 for c in chunks)
    # a chunk ends at a line end, or is a full piece of a line longer than 64 tokens, or is the last
    assert all(c.text.endswith("\n") or c.end - c.start == 64 or c is chunks[-1] for c in chunks)


def test_bm25_scores_follow_the_formula():
    texts = ["the king spake unto Esther", "Esther the queen and the king", "Jonah went down to Joppa"]
    bm = BM25(texts)
    assert terms(texts[1]) == ["esther", "queen", "king"]
    n, avg = 3, (3 + 3 + 4) / 3

    def one(tf, length, df):
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * length / avg))

    got = bm.scores("Esther queen")
    assert got[0] == pytest.approx(one(1, 3, 2))
    assert got[1] == pytest.approx(one(1, 3, 2) + one(1, 3, 1))
    assert got[2] == 0.0
    assert [h.index for h in bm.rank("Esther queen", 2)] == [1, 0]


def test_ranking_is_deterministic_and_ties_go_to_the_earlier_chunk():
    bm = BM25(["a ship", "a ship", "the sea"])
    assert [h.index for h in bm.rank("ship", 3)] == [0, 1, 2]
    assert bm.rank("ship", 3) == bm.rank("ship", 3)
    assert [h.index for h in bm.rank("nothing here", 3)] == [0, 1, 2]  # all zero: document order
    assert retrieve([], "ship", 3) == []


@pytest.mark.parametrize("size", [2048, 8192])
def test_the_chunk_with_a_planted_fact_ranks_first_for_its_question(tok, size):
    for seed in range(3):
        doc = D.build_document(tok, size, seed=seed)
        ids = tok(doc.text, add_special_tokens=False)["input_ids"]
        chunks = make_chunks(tok, ids, 128)
        for q, needle in zip(doc.questions, doc.needles):
            best = retrieve(chunks, q.question, 1)[0]
            assert needle.line in chunks[best.index].text, (seed, q.question)
    # (the text questions quote common words, "And he said unto them, I": BM25 often misses their verse)
