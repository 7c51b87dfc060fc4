"""The shipped long document: deterministic from its seed, within its token budget, facts at their depths, and
checkers that accept the reference answers and reject corrupted ones."""

from __future__ import annotations

import re
import shutil

import pytest
from transformers import AutoTokenizer

from decoding.longctx import document as D

ROOT = D.ROOT


@pytest.fixture(scope="module")
def tok():
    """tiny-ar's BPE tokenizer (trained on the KJV): a real tokenizer that loads in a blink."""
    return AutoTokenizer.from_pretrained(str(ROOT / "assets" / "tiny-ar"))


def test_the_same_seed_builds_the_same_document_and_questions(tok):
    a, b = D.build_document(tok, 2048, seed=5), D.build_document(tok, 2048, seed=5)
    assert a == b
    others = {D.build_document(tok, 2048, seed=s).text for s in range(6)}
    assert len(others) == 6  # the seed picks the starting chapter, the names and the numbers
    assert {q.answer for q in a.questions} != {q.answer for q in D.build_document(tok, 2048, seed=6).questions}


@pytest.mark.parametrize("size", D.SIZES)
def test_the_document_fills_its_budget_and_no_more(tok, size):
    doc = D.build_document(tok, size, seed=1)
    assert doc.num_tokens == D.count_tokens(tok, doc.text) <= D.budget(size)
    longest = max(D.count_tokens(tok, line) for line in doc.text.split("\n"))
    assert doc.num_tokens > D.budget(size) - 2 * longest - 4  # cut at a verse: at most about one verse short
    assert doc.chapters and doc.text.startswith(doc.chapters[0])


@pytest.mark.parametrize("size", [2048, 8192])
def test_each_fact_is_planted_once_near_its_depth(tok, size):
    doc = D.build_document(tok, size, seed=2, depths=(0.0, 0.25, 0.5, 0.75, 1.0))
    lines = doc.text.split("\n")
    for needle in doc.needles:
        assert lines.count(needle.line) == 1 and doc.text.count(needle.name) == 1
        assert needle.token_offset / doc.num_tokens == pytest.approx(needle.depth, abs=0.04)
    asked = [q for q in doc.questions if q.kind == "needle"]
    assert [q.answer for q in asked] == [str(n.value) for n in doc.needles]
    assert len({n.value for n in doc.needles}) == len(doc.needles)


def test_the_invented_names_are_not_words_of_the_text():
    words = set(re.findall(r"[a-z]+", D.TEXT_PATH.read_text().lower()))
    assert not {n.lower() for n in D.NAMES + D.DEMO_NAMES} & words and not set(D.NAMES) & set(D.DEMO_NAMES)


def test_text_questions_quote_words_that_occur_once_and_answer_from_the_verse(tok):
    for seed in range(4):
        doc = D.build_document(tok, 4096, seed=seed)
        kinds = [q.kind for q in doc.questions]
        assert kinds == ["needle"] * 3 + ["continue", "chapter"]
        for q in doc.questions[3:]:
            quote = re.search(r'"(.+)"', q.question).group(1)
            assert doc.text.count(quote) == 1 and q.evidence.startswith(quote)
            assert q.evidence in doc.text.split("\n")
        cont, chapter = doc.questions[3:]
        assert cont.evidence.split()[len(re.search(r'"(.+)"', cont.question).group(1).split()):][:5] == \
            cont.answer.split()
        assert chapter.answer in doc.chapters
        before = doc.text[:doc.text.index(chapter.evidence)]
        assert [t for t in doc.chapters if t in before.split("\n")][-1] == chapter.answer  # the last title above it


def test_the_prompt_ends_with_the_question_as_its_own_paragraph(tok):
    doc = D.build_document(tok, 1024, seed=0)
    prompt = doc.prompt(doc.questions[0])
    head, _, last = prompt.rpartition(D.SEPARATOR)
    assert head == doc.text and last.startswith(doc.questions[0].question) and "\n" not in last


@pytest.mark.parametrize("reference, good, bad", [
    ("4821", ["4821", "The secret number of Tavor is 4821.", "It is 4821, I think"],
     ["4822", "1821", "48210", "", "I do not know", "Tavor's number is 1234, not 4821"]),
])
def test_the_number_checker(reference, good, bad):
    assert all(D.check_number(reference, g) for g in good)
    assert not any(D.check_number(reference, b) for b in bad)


def test_the_continuation_checker():
    ref = "the king, let it be"
    for good in [ref, '"The king, let it be given"', "The words are: the king let it be", "THE KING, LET IT BE."]:
        assert D.check_continuation(ref, good), good
    for bad in ["the king, let it", "the queen, let it be", "let it be the king", "king, let it be", "",
                "one two three four five six seven the king, let it be"]:
        assert not D.check_continuation(ref, bad), bad


def test_the_chapter_checker():
    for good in ["Esther 3", "It is in Esther 3.", "esther 3"]:
        assert D.check_chapter("Esther 3", good), good
    for bad in ["Esther 4", "Esther 33", "Ruth 3", "Esther 3 or Esther 4", "Esther", "chapter 3", ""]:
        assert not D.check_chapter("Esther 3", bad), bad


def test_every_question_accepts_its_reference_and_rejects_a_corrupted_one(tok):
    for seed in range(3):
        for q in D.build_document(tok, 2048, seed=seed).questions:
            assert q.check(q.answer)
            corrupt = {"needle": lambda a: str((int(a) + 1) % 10000).zfill(4),
                       "continue": lambda a: " ".join(reversed(a.split())),
                       "chapter": lambda a: re.sub(r"\d+", lambda m: str(int(m.group()) + 1), a)}[q.kind]
            corrupted = corrupt(q.answer)
            assert not q.check(corrupted), (q, corrupted)


def test_bad_arguments_say_what_is_allowed(tok):
    with pytest.raises(ValueError, match="`depths` must be fractions"):
        D.build_document(tok, 2048, depths=(1.5,))
    with pytest.raises(ValueError, match="`size` must exceed"):
        D.build_document(tok, 100)


@pytest.mark.skipif(shutil.which("bible") is None, reason="Debian's bible-kjv is not installed")
def test_the_shipped_copy_is_debians_text():
    assert D.render(D.debian_chapters()) == D.TEXT_PATH.read_text(encoding="utf-8")
    assert [c.title for c in D.load_chapters()][:5] == ["Ruth 1", "Ruth 2", "Ruth 3", "Ruth 4", "Esther 1"]
