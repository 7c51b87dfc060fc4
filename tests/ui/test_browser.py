"""The Playground in a real headless Chromium against the real app over HTTP: generate on the
embedded SmolLM2-135M, watch tokens stream in, click a token, branch from it, and save the
screenshot the README shows (assets/screenshot-playground.png).

Needs the `playwright` Python package and a Chromium binary (Debian: `apt-get install chromium`;
elsewhere set CHROMIUM_PATH). No `playwright install` download is used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from conftest import screenshot_path

pytestmark = pytest.mark.slow  # Chromium driving the app server


SCREENSHOT = screenshot_path("screenshot-playground.png")  # a temp folder; DECODING_LAB_SCREENSHOTS=1 retakes assets/
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
PROMPT = "Explain why the sky is blue in two sentences."
TIMEOUT_MS = 150_000  # first use loads the model (~15 s; more on a busy CI machine)


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM_PATH"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@contextlib.contextmanager
def open_page(url: str, ready_selector: str, timeout_ms: int = TIMEOUT_MS, args: list[str] = ()):
    """A headless Debian Chromium page on `url`, once `ready_selector` is on it (skips if no browser);
    `args`: more command-line switches (a fake microphone)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium binary (apt-get install chromium, or set CHROMIUM_PATH)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS + list(args))
        context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        page.goto(url, wait_until="load")
        page.wait_for_selector(ready_selector)
        yield page
        context.close()
        browser.close()


@pytest.fixture(scope="module")
def page(app_url):
    with open_page(app_url, "#dl-generate") as page:
        yield page


def wait_for_status(page, text: str) -> None:
    page.wait_for_function("t => (document.querySelector('#dl-status') || {}).innerText?.includes(t)", arg=text)


def error_toasts(page) -> list[str]:
    return [t for t in page.locator(".toast-body").all_inner_texts() if "error" in t.lower()]


def choose(page, dropdown_id: str, option: str) -> None:
    page.locator(f"#{dropdown_id} input").click()
    page.get_by_role("option", name=option, exact=True).click()


def labels_cut(page, scope: str) -> list[str]:
    """The text labels of the Plotly figures under `scope` that are cut: reaching past the plot area when their
    layer is clipped to it (Plotly's default), or past their figure when drawn unclipped."""
    return page.evaluate("""scope => [...document.querySelectorAll(scope + ' .js-plotly-plot')].flatMap(plot => {
        const svg = plot.querySelector('.main-svg'), drag = plot.querySelector('.nsewdrag');
        if (!svg || !drag || !plot.offsetParent) return [];  // not drawn, not cartesian, or hidden
        const figure = svg.getBoundingClientRect(), area = drag.getBoundingClientRect();
        return [...plot.querySelectorAll('.textpoint text, text.textpoint')]
            .filter(t => t.textContent)
            .filter(t => {
                const box = t.closest('[clip-path]') !== null ? area : figure, b = t.getBoundingClientRect();
                return b.left < box.left - 0.5 || b.right > box.right + 0.5 || b.top < box.top - 0.5;
            })
            .map(t => (plot.closest('[id]') || plot).id + ': ' + t.textContent);
    })""", scope)


def check_labels_at_both_sizes(page, scope: str) -> None:
    """No figure label is cut on a laptop (1400x1000) or a 1280x720 projector; the page's size is restored."""
    before = page.viewport_size
    for width, height in ((1280, 720), (1400, 1000)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(400)  # plotly redraws on resize
        assert labels_cut(page, scope) == [], (width, height)
    if before:
        page.set_viewport_size(before)
        page.wait_for_timeout(400)


def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def test_generate_click_branch_and_screenshot(page):
    assert page.locator("#dl-model input").input_value() == "smollm2-135m"
    choose(page, "dl-strategy", "sample")
    set_number(page, "dl-param-sample-top_p", 0.9)
    set_number(page, "dl-max-new-tokens", 24)
    page.locator("#dl-prompt textarea").fill(PROMPT)
    page.evaluate("""() => {  // record the chip count and status line after each update, with a timestamp
        window.__seen = [];
        const log = () => window.__seen.push([performance.now() | 0,
            document.querySelectorAll('#dl-main-text .tok').length,
            (document.querySelector('#dl-status') || {}).innerText || '']);
        for (const id of ['#dl-main-text', '#dl-status'])
            new MutationObserver(log).observe(document.querySelector(id), {childList: true, subtree: true,
                                                                         characterData: true});
    }""")
    page.locator("#dl-generate").click()

    page.wait_for_selector("#dl-main-text .tok[data-step]")  # streamed text
    page.wait_for_selector("#dl-entropy .js-plotly-plot svg.main-svg .scatterlayer .trace")  # the entropy chart
    wait_for_status(page, "Finished")
    chips = page.locator("#dl-main-text .tok[data-step]")
    assert chips.count() >= 2
    seen = page.evaluate("window.__seen")
    counts = sorted({count for _, count, _ in seen} - {0})
    assert len(counts) >= 2 and counts[-1] == chips.count(), f"text did not stream: {seen}"
    assert "sample (top_p=0.9)" in page.locator("#dl-stats").inner_text()

    step = page.evaluate("""() => {  // the most uncertain step (highest entropy in its tooltip), not at the ends
        let best = null, most = -1;
        for (const chip of [...document.querySelectorAll('#dl-main-text .tok[data-step]')].slice(2, -4)) {
            const h = /H=([0-9.]+) nats/.exec(chip.title);
            if (h && Number(h[1]) > most) { most = Number(h[1]); best = Number(chip.dataset.step); }
        }
        return best;
    }""")
    page.locator(f"#dl-main-text .tok[data-step='{step}']").click()
    page.wait_for_function("s => document.querySelector('#dl-inspect').innerText.includes('Step ' + s)", arg=step)
    assert page.locator(f"#dl-main-text .tok.sel[data-step='{step}']").count() == 1
    page.wait_for_selector("#dl-entropy .shapelayer path", state="attached")  # the selected-step marker

    page.locator("#dl-branch").click()
    page.wait_for_selector("#dl-branch-text .tok[data-step]")
    wait_for_status(page, "Branch finished")
    assert page.locator("#dl-branch-text .dl-forced").count() == 1
    assert page.locator("#dl-branch-text .tok[data-step]").first.get_attribute("data-step") == str(step + 1)
    assert "Branched at step" in page.locator("#dl-branch-box").inner_text()

    page.locator(f"#dl-main-text .tok[data-step='{step}']").click()  # back to the original, for the picture
    page.wait_for_function("s => document.querySelector('#dl-inspect').innerText.includes('Step ' + s)", arg=step)
    assert error_toasts(page) == []
    page.wait_for_timeout(500)  # let plotly finish its transition
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    box = page.locator("#dl-branch-box").bounding_box()  # header to the branch, at the page's top
    height = min(int(box["y"] + box["height"]) + 24, page.evaluate("document.documentElement.scrollHeight"))
    page.screenshot(path=str(SCREENSHOT), full_page=True, clip={"x": 0, "y": 0, "width": 1280, "height": height})
    assert SCREENSHOT.stat().st_size > 20_000
    check_labels_at_both_sizes(page, "#dl-playground")


def test_stop_ends_the_run_and_keeps_its_tokens(page):
    set_number(page, "dl-max-new-tokens", 400)
    page.locator("#dl-generate").click()
    wait_for_status(page, "tokens so far")  # the new run is streaming (the old text is gone)
    page.wait_for_function("document.querySelectorAll('#dl-main-text .tok[data-step]').length >= 3")
    page.locator("#dl-stop").click()
    wait_for_status(page, "Stopped the run after")
    shown = page.locator("#dl-main-text .tok[data-step]").count()
    page.wait_for_timeout(1500)
    assert page.locator("#dl-main-text .tok[data-step]").count() == shown < 400  # nothing more arrives
    assert "Stop" in page.locator("#dl-stats").inner_text()
    assert error_toasts(page) == []
