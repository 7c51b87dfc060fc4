"""Exports in a real headless Chromium after a comparison run, in every lab (issue 18): the Trace (JSON)
button downloads the main run and a second button the comparison run (the Playground's branch; the
Speculative tab's plain decoding; Diffusion's and Scaling's "Compare with"). Small models and few tokens:
each test takes seconds once the page is up.

Before, a tab's run handed its trace file to a DownloadButton mid-stream and the comparison's later
updates left that button out; Gradio streams a generator's updates as diffs, so the button's file was
diffed away and the click downloaded nothing. Now nothing is written until a button is clicked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decoding.events import Trace
from test_browser import TIMEOUT_MS, choose, error_toasts, open_page, set_number

pytestmark = pytest.mark.slow  # Chromium driving the app server

PROMPT = "And God said"


@pytest.fixture(scope="module")
def page(app_url):
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        yield page


def wait_for(page, status_id: str, text: str) -> None:
    page.wait_for_function("([id, t]) => (document.getElementById(id) || {}).innerText?.includes(t)",
                           arg=[status_id, text])


def downloaded(page, button_id: str):
    """Click an export button; (the downloaded file's name, its path)."""
    with page.expect_download(timeout=30_000) as info:
        page.locator(f"#{button_id}").click()
    download = info.value
    assert download.failure() is None
    return download.suggested_filename, download.path()


def run_and_its_comparison(page, prefix: str) -> tuple[Trace, Trace, Path]:
    """After a compared run in the tab whose ids start with `prefix`: the two downloaded traces (the
    main run, the comparison) and the comparison's file."""
    wait_for(page, f"{prefix}-status", "Compared")
    open_exports(page, f"{prefix}-export")
    _, main = downloaded(page, f"{prefix}-download-json")
    _, other = downloaded(page, f"{prefix}-download-other")
    return Trace.load(main), Trace.load(other), other


def open_exports(page, accordion_id: str) -> None:
    page.locator(f"#{accordion_id}").get_by_text("Export & replay").click()


def chips(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.step)")


def test_playground_exports_the_run_and_its_branch(page):
    page.get_by_role("tab", name="Playground").click()
    choose(page, "dl-model", "tiny-ar")
    set_number(page, "dl-max-new-tokens", 8)
    page.locator("#dl-prompt textarea").fill(PROMPT)
    page.locator("#dl-generate").click()
    wait_for(page, "dl-status", "Finished")
    page.locator("#dl-main-text .tok[data-step='2']").click()
    page.wait_for_function("() => document.querySelector('#dl-inspect').innerText.includes('Step 2')")
    page.locator("#dl-branch").click()
    wait_for(page, "dl-status", "Branch finished")
    open_exports(page, "dl-export")

    name, path = downloaded(page, "dl-download-json")
    main = Trace.load(path)
    assert name == "tiny-ar-greedy-trace.json" and main.start.prompt == PROMPT and main.start.model == "tiny-ar"
    assert len(main.of_kind("token")) == len(chips(page, "#dl-main-text .tok[data-step]"))
    name, path = downloaded(page, "dl-download-branch")
    branch = Trace.load(path)
    assert name == "tiny-ar-greedy-branch-trace.json"
    assert len(branch.start.prefix_ids) == len(main.start.prefix_ids) + 3  # the tokens before step 2, and the choice
    assert [str(e.step) for e in branch.of_kind("token")] == chips(page, "#dl-branch-text .tok[data-step]")
    name, path = downloaded(page, "dl-download-csv")
    assert name.endswith("-tokens.csv") and path.read_text().count("\n") == len(main.of_kind("token")) + 1
    name, path = downloaded(page, "dl-download-html")
    html = path.read_text()
    assert name.endswith("-entropy.html") and len(html) < 50_000 and "cdn.plot.ly" in html
    assert error_toasts(page) == []


def test_speculative_exports_the_run_and_plain_decoding(page):
    page.get_by_role("tab", name="Speculative").click()
    choose(page, "spec-model", "tiny-ar")
    page.locator("#spec-prompt textarea").fill(PROMPT)
    set_number(page, "spec-max-new-tokens", 12)
    assert page.locator("#spec-compare input").is_checked()  # "Also run plain decoding", on by default
    page.locator("#spec-generate").click()
    wait_for(page, "spec-status", "plain decoding")  # the comparison is reported when it has run
    wait_for(page, "spec-status", "Finished")
    open_exports(page, "spec-export")

    _, path = downloaded(page, "spec-download-json")
    spec = Trace.load(path)
    assert spec.start.strategy == "speculative" and spec.start.model == "tiny-ar" and spec.of_kind("spec_round")
    _, path = downloaded(page, "spec-download-plain")
    plain = Trace.load(path)
    assert plain.start.strategy == "greedy" and plain.start.prompt == PROMPT
    # greedy verification is lossless: both runs wrote the same tokens
    assert [e.token_id for e in plain.of_kind("token")] == [e.token_id for e in spec.of_kind("token")]
    assert error_toasts(page) == []


def test_diffusion_exports_the_run_and_the_comparison(page):
    page.get_by_role("tab", name="Diffusion").click()
    set_number(page, "df-length", 12)
    choose(page, "df-compare", "fixed schedule, steps = length")
    page.locator("#df-generate").click()
    main, other, path = run_and_its_comparison(page, "df")
    assert main.start.model == "tiny-parallel" and main.start.max_new_tokens == 12  # the tab's opening model
    assert other.start.params["sampler"] == "fixed" and other.start.params["threshold"] == 0.0
    assert len(other.of_kind("diffusion_step")) == 12  # steps = length: one position per step
    assert json.loads(path.read_text())["events"][0]["prompt"] == main.start.prompt
    assert error_toasts(page) == []


def test_scaling_exports_the_run_and_the_comparison(page):
    page.get_by_role("tab", name="Scaling").click()
    choose(page, "sc-model", "tiny-ar")
    page.locator("#sc-prompt textarea").fill(PROMPT)
    page.locator("#sc-method input[value='particle-filter']").check()
    set_number(page, "sc-n", 2)
    set_number(page, "sc-max-new-tokens", 8)
    choose(page, "sc-compare", "best-of-n")
    page.locator("#sc-generate").click()
    main, other, _ = run_and_its_comparison(page, "sc")
    assert main.start.strategy == "particle-filter" and main.start.model == "tiny-ar" and main.start.params["n"] == 2
    assert other.start.strategy == "best-of-n" and other.start.params["n"] == 2 and other.start.prompt == PROMPT
    assert error_toasts(page) == []
