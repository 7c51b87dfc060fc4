"""One bibliography: every method, plug-in and model declares its papers where it is registered.

    @register_strategy("exact-extract", ..., papers=(bib.CASTEL_2022,))
    @DRAFTERS.register("eagle", ..., papers=(bib.LI_2024_EAGLE, bib.LI_2024_EAGLE2))
    @register_strategy("greedy", ..., papers=Uncited("the classic argmax decoder; no one paper"))
    ModelSpec(name="tiny-ar-hyperfit", ..., papers=(bib.CARLSSON_2024,))

`python -m decoding papers` (and `--json`) lists each paper with who uses it, collected from the
registries by `collect`; the shipped entries live in `decoding.bibliography`, each checked once
against the paper's own page when written (an entry that could not be checked offline says so in
its note and carries no arXiv id). `tests/test_papers.py` checks that every arXiv id the README and
the docstrings cite is one a registration declares.

Glossary
    declaration  what a registration passes as `papers=`: a non-empty tuple of `Paper`, or
                 `Uncited(reason)`; None (the default) means "not declared" (a third party's plug-in).
    note         what the project implements of the paper ("our reading", "cited for context: ...").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Union

ARXIV_ID = re.compile(r"\d{4}\.\d{4,5}")
KINDS = ("strategy", "drafter", "sampler", "reward", "policy", "model")  # the `kind` of a user, in listing order


@dataclass(frozen=True)
class Paper:
    title: str  # as the paper's own page gives it
    authors: str  # short: "A, B and C" or "A et al."
    year: int
    arxiv: str = ""  # e.g. "2108.05857"; empty when there is none or it could not be checked offline
    venue: str = ""  # e.g. "AKBC 2022", or where a non-paper lives ("GitHub: owner/repo")
    note: str = ""  # what the project implements of it, or what could not be verified

    def __post_init__(self):
        for name in ("title", "authors"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise TypeError(f"Paper.{name} must be a non-empty string, got {getattr(self, name)!r}")
        if not isinstance(self.year, int) or not 1900 <= self.year <= 2100:
            raise TypeError(f"Paper.year must be an int in 1900..2100, got {self.year!r} ({self.title!r})")
        if self.arxiv and not ARXIV_ID.fullmatch(self.arxiv):
            raise TypeError(f"Paper.arxiv must look like 2108.05857 (or be empty), got {self.arxiv!r} ({self.title!r})")
        if not (self.arxiv or self.venue or self.note):
            raise TypeError(f"Paper {self.title!r}: give its arxiv id or venue, or a note saying why neither")


@dataclass(frozen=True)
class Uncited:
    """A registration that cites no paper, with the one-line reason (a classic, a test model, a rule of ours)."""

    reason: str

    def __post_init__(self):
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise TypeError("Uncited needs a reason: one line saying why no paper is cited")


Declaration = Union[tuple, Uncited, None]


def check_declaration(papers, where: str) -> Declaration:
    """The normalised `papers=` of a registration; TypeError naming `where` for anything else."""
    if papers is None or isinstance(papers, Uncited):
        return papers
    if isinstance(papers, Paper):
        return (papers,)
    if isinstance(papers, (tuple, list)):
        if not papers:
            raise TypeError(f"{where}: papers=() says nothing; give papers=Uncited('why no paper is cited')")
        bad = [p for p in papers if not isinstance(p, Paper)]
        if bad:
            raise TypeError(f"{where}: papers must hold decoding.papers.Paper entries, got {bad[0]!r}")
        return tuple(papers)
    raise TypeError(f"{where}: papers must be a tuple of Paper or Uncited(reason), got {papers!r}")


def cited(declaration: Declaration) -> tuple[Paper, ...]:
    return declaration if isinstance(declaration, tuple) else ()


def collect(users: Iterable[tuple[str, str, Declaration]]) -> dict:
    """{"papers": [paper fields + used_by [{kind, name}]], "uncited": [{kind, name, reason}], "undeclared":
    [{kind, name}]} from (kind, name, declaration) triples; papers in order of first use."""
    papers: dict[Paper, list] = {}
    uncited, undeclared = [], []
    for kind, name, declaration in users:
        if declaration is None:
            undeclared.append({"kind": kind, "name": name})
        elif isinstance(declaration, Uncited):
            uncited.append({"kind": kind, "name": name, "reason": declaration.reason})
        for paper in cited(declaration):
            papers.setdefault(paper, []).append({"kind": kind, "name": name})
    return {"papers": [{"title": p.title, "authors": p.authors, "year": p.year, "arxiv": p.arxiv, "venue": p.venue,
                        "note": p.note, "used_by": used_by} for p, used_by in papers.items()],
            "uncited": uncited, "undeclared": undeclared}


def render(listing: dict) -> str:
    """The human-readable form of `collect`'s result: per paper, who uses it; then who cites none and why."""
    lines = []
    for p in listing["papers"]:
        where = ", ".join(x for x in (p["venue"], f"arXiv {p['arxiv']}" if p["arxiv"] else "") if x)
        lines.append(f'{p["authors"]} {p["year"]}. "{p["title"]}"' + (f". {where}" if where else ""))
        if p["note"]:
            lines.append(f"    note: {p['note']}")
        lines.append("    used by: " + ", ".join(f"{u['kind']} {u['name']}" for u in p["used_by"]))
    if listing["uncited"]:
        lines.append("\nNo paper cited:")
        lines += [f"    {u['kind']} {u['name']}: {u['reason']}" for u in listing["uncited"]]
    if listing["undeclared"]:
        lines.append("\nNot declared (registered without papers=):")
        lines += [f"    {u['kind']} {u['name']}" for u in listing["undeclared"]]
    return "\n".join(lines)
