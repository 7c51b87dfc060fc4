"""One bibliography: every registration declares its papers, and what the texts cite is what it declares.

The texts scanned are the README and its docs pages (docs/*.md), ARCHITECTURE.md, the presets, the model
cards (assets/*/README.md) and every Python file of decoding/, ui/, visualizers/ and bench/ (docstrings and
comments included).
An arXiv id found there must be one a registration declares, and the text around it must name that
paper (its first author's surname or the start of its title), so "Kim et al. 2025, arXiv
2510.04767" fails when the registry says the paper at 2510.04767 is by Kang et al.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import decoding  # noqa: F401  (registers every shipped method)
from decoding import bibliography as bib
from decoding.__main__ import main, paper_users
from decoding.models import REGISTRY
from decoding.papers import KINDS, Paper, Uncited, check_declaration, cited, collect
from decoding.registry import STRATEGIES
from doc_pages import DOC_PATHS, docs_text

ROOT = Path(__file__).resolve().parents[1]
CITED_ID = re.compile(r"arxiv(?::|\s)*(\d{4}\.\d{4,5})|arxiv\.org/(?:abs|pdf|html)/(\d{4}\.\d{4,5})", re.IGNORECASE)
BEFORE, AFTER = 400, 160  # characters around an id in which the paper must be named


def texts() -> dict[str, str]:
    paths = [*DOC_PATHS, ROOT / "ARCHITECTURE.md", *sorted((ROOT / "presets").glob("*.yaml")),
             *sorted((ROOT / "assets").glob("*/README.md"))]
    for tree in ("decoding", "ui", "visualizers", "bench"):
        paths += sorted((ROOT / tree).rglob("*.py"))
    paths.append(ROOT / "app.py")
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in paths if p.is_file()}


def citations(text: str) -> list[tuple[str, int]]:
    """(arXiv id, offset) of every id `text` cites, on one line or broken across lines."""
    return [(m.group(1) or m.group(2), m.start()) for m in CITED_ID.finditer(text)]


def declared() -> dict[str, Paper]:
    return {p.arxiv: p for _, _, d in paper_users() for p in cited(d) if p.arxiv}


def names_paper(text: str, at: int, paper: Paper) -> bool:
    window = re.sub(r"\s+", " ", text[max(0, at - BEFORE): at + AFTER]).lower()
    surname = re.split(r",| et al\.| and ", paper.authors)[0].strip().lower()
    return surname in window or paper.title[:24].lower() in window


def test_the_scanner_finds_ids_in_every_form():
    text = 'see arXiv 2108.05857, arXiv:2509.02510, "LocalLeap" (arXiv\n    2510.07081) and arxiv.org/abs/2506.15498'
    assert [i for i, _ in citations(text)] == ["2108.05857", "2509.02510", "2510.07081", "2506.15498"]
    found = {i for t in texts().values() for i, _ in citations(t)}
    assert {"2108.05857", "2506.15498", "2510.04767"} <= found  # the docs pages and docstrings are really read


def test_every_cited_arxiv_id_is_declared_and_named():
    papers = declared()
    unknown, misnamed = [], []
    for path, text in texts().items():
        for arxiv, at in citations(text):
            if arxiv not in papers:
                unknown.append(f"{path}: arXiv {arxiv}")
            elif not names_paper(text, at, papers[arxiv]):
                misnamed.append(f"{path}: arXiv {arxiv} is {papers[arxiv].authors} \"{papers[arxiv].title}\"")
    assert not unknown, "cited but declared by no registration (add it to decoding/bibliography.py and " \
                        "papers=(...) where the method registers): " + "; ".join(unknown)
    assert not misnamed, "cited next to another paper's name: " + "; ".join(misnamed)


def test_every_shipped_registration_declares_its_papers():
    from decoding.diffusion.samplers import SAMPLERS
    from decoding.scaling.scoring import REWARDS
    from decoding.speculative.strategy import DRAFTERS

    missing = [f"strategy {n}" for n, info in STRATEGIES.items()
               if info.fn.__module__.startswith("decoding.") and info.papers is None]
    for kind, registry in (("drafter", DRAFTERS), ("sampler", SAMPLERS), ("reward", REWARDS)):
        missing += [f"{kind} {n}" for n, e in registry.entries.items()
                    if getattr(e.item, "__module__", "").startswith("decoding.") and e.papers is None]
    missing += [f"model {n}" for n, spec in REGISTRY.items() if spec.papers is None]
    assert not missing, "declare papers=(...) or papers=Uncited('why none') for: " + ", ".join(missing)


def test_the_corrected_entries_and_arbitrage():
    assert STRATEGIES["exact-extract"].papers == (bib.CASTEL_2022,)
    castel = bib.CASTEL_2022
    assert (castel.authors, castel.year, castel.arxiv, castel.venue) == (
        "Castel, Ram, Efrat and Levy", 2022, "2108.05857", "AKBC 2022")
    assert castel.title == "How Optimal is Greedy Decoding for Extractive Question Answering?"
    from decoding.scaling.scoring import REWARDS

    spare = REWARDS.entry("spare").papers
    assert spare == (bib.RIZVI_2025,) and (spare[0].authors, spare[0].year, spare[0].arxiv) == (
        "Rizvi, Zhu and Gurevych", 2025, "2506.15498")
    gate = STRATEGIES["step-speculation"].papers
    assert bib.PAN_2025 in gate and bib.MAHESWARAN_2025 in gate
    assert "gate=oracle" in bib.MAHESWARAN_2025.note and "gate=router" in bib.MAHESWARAN_2025.note  # both built
    assert REWARDS.entry("spare-prm").papers == (bib.RIZVI_2025,) and "spare-prm" in bib.RIZVI_2025.note
    mentions = [paragraph for paragraph in re.split(r"\n\s*\n", docs_text()) if "Arbitrage" in paragraph]
    assert mentions, "the docs (docs/scaling.md's step-speculation row) no longer mention Arbitrage"
    assert not [paragraph for paragraph in mentions if "not implemented" in paragraph or "for context only" in paragraph]


def test_papers_json(capsys):
    assert main(["papers", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert set(listing) == {"papers", "uncited", "undeclared"} and listing["undeclared"] == []
    for paper in listing["papers"]:
        assert set(paper) == {"title", "authors", "year", "arxiv", "venue", "note", "used_by"}
        assert paper["used_by"] and all(u["kind"] in KINDS and u["name"] for u in paper["used_by"])
    users = {(u["kind"], u["name"]) for p in listing["papers"] for u in p["used_by"]}
    users |= {(u["kind"], u["name"]) for u in listing["uncited"]}
    assert {("strategy", name) for name in STRATEGIES if STRATEGIES[name].fn.__module__.startswith("decoding.")} <= users
    castel = next(p for p in listing["papers"] if p["arxiv"] == "2108.05857")
    assert castel["used_by"] == [{"kind": "strategy", "name": "exact-extract"}]
    assert main(["papers"]) == 0
    text = capsys.readouterr().out
    assert "Castel, Ram, Efrat and Levy 2022" in text and "used by: strategy exact-extract" in text


def test_bad_declarations_fail_with_a_sentence():
    with pytest.raises(TypeError, match="Uncited"):
        check_declaration((), "strategy 'x'")
    with pytest.raises(TypeError, match="reason"):
        Uncited(" ")
    with pytest.raises(TypeError, match="arxiv"):
        Paper("T", "A et al.", 2024, arxiv="2401.1")
    with pytest.raises(TypeError, match="venue"):
        Paper("T", "A et al.", 2024)
    with pytest.raises(TypeError, match="strategy 'x'"):
        check_declaration(("Castel 2022",), "strategy 'x'")
    listing = collect([("strategy", "a", (bib.CASTEL_2022,)), ("drafter", "b", (bib.CASTEL_2022,)),
                       ("model", "c", Uncited("tests only")), ("reward", "d", None)])
    assert [u["name"] for u in listing["papers"][0]["used_by"]] == ["a", "b"]
    assert listing["uncited"] == [{"kind": "model", "name": "c", "reason": "tests only"}]
    assert listing["undeclared"] == [{"kind": "reward", "name": "d"}]
