"""The user documentation as the tests read it: README.md (the front page) and one page per topic in docs/.

A test that checks what the documentation says reads it through here, so a section that moves between the
README and a docs page stays checked. (Named doc_pages, not docs, so that it never meets the docs/ folder on
the import path.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def doc_paths() -> list[Path]:
    """README.md, then every docs/*.md in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


DOC_PATHS = doc_paths()


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def docs_text() -> str:
    """README.md and every docs page, one after the other."""
    return "\n\n".join(read(path) for path in DOC_PATHS)


def headings(text: str) -> list[tuple[int, str, int, int]]:
    """(level, title, offset of the heading line, offset after it) of each Markdown heading of `text`, leaving out
    fenced code blocks (a shell comment there is no heading) and a YAML front matter."""
    found, fence, offset = [], None, 0
    lines = text.splitlines(keepends=True)
    if lines and lines[0].strip() == "---":  # front matter: up to the next ---
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), 0)
        offset = sum(len(line) for line in lines[:end + 1])
        lines = lines[end + 1:]
    for line in lines:
        marker = re.match(r" {0,3}(```+|~~~+)", line)
        if marker:
            if fence is None:
                fence = marker.group(1)[0] * 3
            elif marker.group(1).startswith(fence):
                fence = None
        elif fence is None:
            match = re.match(r"(#{1,6}) +(.+?) *#* *$", line.rstrip("\n"))
            if match:
                found.append((len(match.group(1)), match.group(2), offset, offset + len(line)))
        offset += len(line)
    return found


def sections_of(text: str, title: str, own_only: bool = False) -> list[str]:
    """Each section of `text` headed `title`: from the heading to the next heading of the same or a higher level
    (`own_only`: to the next heading of any level)."""
    found, marks = [], headings(text)
    for i, (level, name, _, after) in enumerate(marks):
        if name == title:
            limit = 6 if own_only else level
            end = next((start for lv, _, start, _ in marks[i + 1:] if lv <= limit), len(text))
            found.append(text[after:end])
    return found


def section(title: str, own_only: bool = False) -> str:
    """Every section headed `title` in README.md and the docs pages, joined: the README's short summary of a
    topic and the docs page that has its depth are checked together."""
    found = [part for path in DOC_PATHS for part in sections_of(read(path), title, own_only)]
    assert found, f"neither README.md nor docs/*.md has a section {title!r}"
    return "\n\n".join(found)
