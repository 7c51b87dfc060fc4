"""The shipped long document: KJV chapters cut to a token budget, key-value facts planted at chosen depths, and
questions about the facts and about the text itself, each with a checker.

    doc = build_document(tokenizer, size=4096, seed=0)      # the same text and questions for the same seed
    prompt = doc.prompt(doc.questions[0])                   # the document, a blank line, the question
    doc.questions[0].check("The secret number of Tavor is 4821.")

Source. The text is the books of Ruth, Esther and Jonah of the King James Version, as Debian's `bible-kjv-text`
prints them (`bible ruth1:1-ruth4:22`, ...), shipped as `assets/longctx/kjv-ruth-esther-jonah.txt` (18 chapters,
45 KB, about 12,500 SmolLM2 tokens). The runtime always reads that copy, never the Debian package: a seed then
gives the same document on every machine (a Space or CI without the package, a laptop with it), so traces,
questions and benchmark numbers reproduce. `python -m decoding.longctx.document --refresh` rebuilds the copy from
the package, and tests/longctx checks that the copy is the package's text wherever the package is installed.

The document. A seed picks the chapter to start from; chapters follow in order (wrapping around) until the token
budget is filled, cut at a verse so that the document has at most `budget(size)` tokens (room is left for the
question, the chat template and the answer in a `size`-token window: SmolLM2's is 8,192). One fact per depth is
planted as a line of its own at the verse boundary nearest that depth ("The secret number of Tavor is 4821.": an
invented name, a random four-digit number), as needle-in-a-haystack tests plant a fact in a long distractor text.

Questions (each a `Question` with its reference answer, the depth of its evidence and a checker):
    needle    "What is the secret number of Tavor?"            -> "4821": the first number the answer gives
    continue  'In the text, which words come right after "..."?' -> the next five words, in order
    chapter   'Which chapter of the text contains the words "..."?' -> "Esther 3": the only chapter named
The quoted words of the text questions occur exactly once in the document.
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT_PATH = ROOT / "assets" / "longctx" / "kjv-ruth-esther-jonah.txt"
PASSAGES = ("ruth1:1-ruth4:22", "esther1:1-esther10:3", "jonah1:1-jonah4:11")  # what the shipped copy holds
BOOKS = ("Ruth", "Esther", "Jonah")
SIZES = (1024, 2048, 4096, 8192)  # the context windows the lab measures (SmolLM2-135M's window is 8,192)
RESERVE = 160  # tokens of a window left for the question, the chat template, the answer and a draft's lookahead
DEPTHS = (0.1, 0.5, 0.9)  # default depths of the planted facts
ANSWER_WORDS = 5  # words a "continue" question asks for
QUOTE_WORDS = 6  # at least this many words of the text are quoted (more where needed to be unique)
NAMES = ("Tavor", "Quillon", "Merrisa", "Dovrek", "Ysolde", "Karbeth", "Lunet", "Orvane", "Pellim", "Zarith",
         "Cadmor", "Fennick")  # invented: none is a word of the shipped text (tested)
DEMO_NAMES = ("Halvey", "Corrin", "Tesmond", "Brielle", "Vantor", "Ostrid", "Mirel", "Galwen")  # demonstrations' own
SEPARATOR = "\n\n"  # between the document and the question: the question is the prompt's last paragraph


@dataclass(frozen=True)
class Chapter:
    title: str  # "Ruth 1"
    verses: tuple[str, ...]


@dataclass(frozen=True)
class Needle:
    name: str
    value: int
    depth: float  # the depth asked for
    line: str  # the sentence planted
    token_offset: int  # tokens of the document before it (measured)


@dataclass(frozen=True)
class Question:
    kind: str  # "needle", "continue" or "chapter"
    question: str
    answer: str  # the reference answer
    depth: float  # fraction of the document's tokens before the evidence
    evidence: str  # the line that holds the answer

    def check(self, answer: str) -> bool:
        """Whether `answer` (a model's text) gives this question's answer (see the module docstring)."""
        return CHECKERS[self.kind](self.answer, answer)


@dataclass(frozen=True)
class Document:
    text: str
    num_tokens: int  # tokens of `text` under the tokenizer it was built with
    size: int  # the window it was cut for
    seed: int
    chapters: tuple[str, ...]  # the titles, in order
    needles: tuple[Needle, ...]
    questions: tuple[Question, ...] = field(default=())

    def prompt(self, question: Question | str) -> str:
        """The document, a blank line, the question (one paragraph: `rag` and `rapid` split the prompt there)."""
        text = question.question if isinstance(question, Question) else question
        return f"{self.text}{SEPARATOR}{text} Answer in a few words."


def load_chapters(path: Path = TEXT_PATH) -> list[Chapter]:
    """The shipped chapters: blocks separated by a blank line, each a title line then one verse per line."""
    blocks = [b for b in path.read_text(encoding="utf-8").split(SEPARATOR) if b.strip()]
    chapters = []
    for block in blocks:
        title, *verses = block.strip().split("\n")
        chapters.append(Chapter(title.strip(), tuple(v.strip() for v in verses if v.strip())))
    return chapters


def parse_bible(raw: str) -> list[Chapter]:
    """Chapters from the `bible` program's output: a title line ("Ruth 1") between blank lines, then verses that
    start with an indented number and may wrap onto the following lines."""
    chapters: list[tuple[str, list[str]]] = []
    prev_blank = True
    for line in raw.splitlines():
        if not line.strip():
            prev_blank = True
            continue
        start = re.match(r"^\s+\d+\s+(.*)$", line)
        if prev_blank and not line.startswith(" ") and re.search(r"\d+$", line):
            chapters.append((line.strip(), []))
        elif start:
            chapters[-1][1].append(start.group(1).strip())
        elif chapters and chapters[-1][1]:
            chapters[-1][1][-1] += " " + line.strip()
        prev_blank = False
    return [Chapter(title, tuple(verses)) for title, verses in chapters]


def debian_chapters() -> list[Chapter]:
    """The passages of the shipped copy as Debian's `bible` program prints them (OSError where it is missing)."""
    raw = "".join(subprocess.run(["bible", p], capture_output=True, text=True, check=True).stdout for p in PASSAGES)
    return parse_bible(raw)


def _register_book() -> None:
    """The shipped book is what a Long context preset's `document` names (`decoding.presets`)."""
    from decoding.presets import BOOK

    BOOK.update(sizes=SIZES, build=lambda tokenizer, size, seed: build_document(tokenizer, size, seed))


def render(chapters: list[Chapter]) -> str:
    return SEPARATOR.join("\n".join((c.title, *c.verses)) for c in chapters) + "\n"


def budget(size: int) -> int:
    """The most tokens a document for a `size`-token window has."""
    if size <= RESERVE:
        raise ValueError(f"`size` must exceed the {RESERVE} tokens kept for the question and answer, got {size}")
    return size - RESERVE


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_document(tokenizer, size: int = 2048, seed: int = 0, depths: tuple[float, ...] = DEPTHS,
                   chapters: list[Chapter] | None = None, names: tuple[str, ...] = NAMES) -> Document:
    """The document for a `size`-token window and its questions, the same for the same seed and tokenizer.
    `names`: who the planted facts are about (`rag`'s demonstrations use DEMO_NAMES, never a question's)."""
    if not depths or any(not 0.0 <= d <= 1.0 for d in depths):
        raise ValueError(f"`depths` must be fractions in [0, 1], got {depths!r}")
    if len(depths) > len(names):
        raise ValueError(f"at most {len(names)} depths, got {len(depths)}")
    rng = random.Random(seed)
    chapters = chapters if chapters is not None else load_chapters()
    limit = budget(size)
    start = rng.randrange(len(chapters))
    names = rng.sample(names, len(depths))
    values = rng.sample(range(1000, 10000), len(depths))
    facts = [f"The secret number of {n} is {v}." for n, v in zip(names, values)]
    # Verse lines from the starting chapter on (wrapping), each with its chapter, until the budget is passed
    lines: list[tuple[str, str]] = []  # (chapter title, line); a title line is its own entry
    used, room = 0, limit - sum(count_tokens(tokenizer, f) + 1 for f in facts)
    for k in range(len(chapters)):
        chapter = chapters[(start + k) % len(chapters)]
        for line in ([chapter.title] if not lines else ["", chapter.title]) + list(chapter.verses):
            lines.append((chapter.title, line))
            used += count_tokens(tokenizer, line) + 1
        if used > room:
            break
    text = _fit(tokenizer, lines, facts, depths, limit)
    planted = [text.split("\n").index(f) for f in facts]
    all_lines = text.split("\n")
    needles = tuple(Needle(n, v, d, f, count_tokens(tokenizer, "\n".join(all_lines[:i]) + "\n"))
                    for n, v, d, f, i in zip(names, values, depths, facts, planted))
    total = count_tokens(tokenizer, text)
    known = {c.title for c in chapters}
    titles = tuple(line for line in all_lines if line in known)
    doc = Document(text, total, size, seed, titles, needles)
    questions = [Question("needle", f"What is the secret number of {n.name}?", str(n.value),
                          round(n.token_offset / total, 4), n.line) for n in needles]
    questions += _text_questions(tokenizer, doc, rng)
    return Document(text, total, size, seed, titles, needles, tuple(questions))


def _fit(tokenizer, lines: list[tuple[str, str]], facts: list[str], depths, limit: int) -> str:
    """The text of the longest prefix of `lines` that, with the facts planted, has at most `limit` tokens."""
    low, high = 1, len(lines)  # binary search on the number of lines kept: few tokenizations of the whole text
    best = None
    while low <= high:
        mid = (low + high) // 2
        text = _plant([line for _, line in lines[:mid]], facts, depths, tokenizer)
        if count_tokens(tokenizer, text) <= limit:
            best, low = text, mid + 1
        else:
            high = mid - 1
    if best is None:
        raise ValueError(f"a budget of {limit} tokens does not hold the facts and one line of text")
    return best


def _plant(lines: list[str], facts: list[str], depths, tokenizer) -> str:
    """`lines` with each fact inserted at the line boundary nearest its depth (by tokens before it)."""
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    cumulative, total = [0], 0
    for line in lines:
        total += count_tokens(tokenizer, line) + 1
        cumulative.append(total)
    slots: dict[int, list[str]] = {}
    for fact, depth in zip(facts, depths):
        target = depth * total
        at = min(range(1, len(lines) + 1) if depth > 0 else [0], key=lambda i: abs(cumulative[i] - target))
        slots.setdefault(at, []).append(fact)
    out = []
    for i, line in enumerate(lines):
        out += slots.get(i, [])
        out.append(line)
    out += slots.get(len(lines), [])
    return "\n".join(out)


def _text_questions(tokenizer, doc: Document, rng: random.Random) -> list[Question]:
    """One "continue" and one "chapter" question about verses of the document (not the planted facts)."""
    lines = doc.text.split("\n")
    titles = set(doc.chapters)
    facts = {n.line for n in doc.needles}
    chapter_of, current = {}, ""
    for i, line in enumerate(lines):
        if line in titles:
            current = line
        elif line.strip() and line not in facts:
            chapter_of[i] = current
    words = _words(doc.text)
    candidates = [i for i in chapter_of if len(lines[i].split()) >= QUOTE_WORDS + ANSWER_WORDS]
    questions = []
    for kind in ("continue", "chapter"):
        for i in rng.sample(candidates, len(candidates)):
            verse = lines[i].split()
            quote = _unique_quote(verse, words)
            if quote is None or (kind == "continue" and len(quote) + ANSWER_WORDS > len(verse)):
                continue
            offset = count_tokens(tokenizer, "\n".join(lines[:i]) + "\n") / doc.num_tokens
            text = " ".join(quote)
            if kind == "continue":
                answer = " ".join(verse[len(quote):len(quote) + ANSWER_WORDS])
                q = f'In the text, which {ANSWER_WORDS} words come right after "{text}"?'
            else:
                answer = chapter_of[i]
                q = f'Which chapter of the text contains the words "{text}"?'
            questions.append(Question(kind, q, answer, round(offset, 4), lines[i]))
            candidates.remove(i)
            break
    return questions


def _unique_quote(verse: list[str], words: list[str]) -> list[str] | None:
    """The shortest opening of `verse` (at least QUOTE_WORDS words) that occurs once in the document."""
    for k in range(QUOTE_WORDS, len(verse) - ANSWER_WORDS + 1):
        needle = _words(" ".join(verse[:k]))
        hits = sum(1 for j in range(len(words) - len(needle) + 1) if words[j:j + len(needle)] == needle)
        if hits == 1:
            return verse[:k]
    return None


# ------------------------------------------------------------------ checkers


def _words(text: str) -> list[str]:
    """Lower-case words without punctuation (apostrophes kept)."""
    return re.findall(r"[a-z0-9']+", text.lower())


def check_number(reference: str, answer: str) -> bool:
    """The first whole number the answer gives is the reference."""
    numbers = re.findall(r"\d+", answer)
    return bool(numbers) and numbers[0] == reference


def check_continuation(reference: str, answer: str) -> bool:
    """The answer's words start with the reference's words, in order (quotes, case and punctuation ignored);
    a short lead-in such as "The words are" is allowed before them."""
    ref, got = _words(reference), _words(answer)
    return any(got[i:i + len(ref)] == ref for i in range(min(len(got) - len(ref), 6) + 1)) if ref else False


def check_chapter(reference: str, answer: str) -> bool:
    """The answer names one chapter of the shipped books, and it is the reference."""
    named = {f"{b} {n}" for b, n in re.findall(r"\b(" + "|".join(BOOKS) + r")\s+(\d+)\b", answer, re.IGNORECASE)}
    return {n.title() for n in named} == {reference}


CHECKERS = {"needle": check_number, "continue": check_continuation, "chapter": check_chapter}


_register_book()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.longctx.document", description=__doc__.split("\n")[0])
    parser.add_argument("--refresh", action="store_true", help=f"rewrite {TEXT_PATH.relative_to(ROOT)} from Debian's "
                                                               "`bible` program (package bible-kjv)")
    parser.add_argument("--size", type=int, default=2048, help=f"the window, in tokens ({', '.join(map(str, SIZES))})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--question", type=int, default=0, help="which question's prompt to print")
    parser.add_argument("--model", default="smollm2-135m", help="whose tokenizer counts the tokens")
    args = parser.parse_args(argv)
    if args.refresh:
        TEXT_PATH.write_text(render(debian_chapters()), encoding="utf-8")
        print(f"wrote {TEXT_PATH}")
        return 0
    from decoding.models import load_model

    doc = build_document(load_model(args.model, progress=None).tokenizer, args.size, args.seed)
    print(doc.prompt(doc.questions[args.question]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
