"""The Diffusion tab in a real headless Chromium against the real app over HTTP: unmask 48 positions with
the embedded tiny-diffusion at confidence threshold 0.5, wait for the finished canvas, step back through
it, and save the screenshot the README shows (assets/screenshot-diffusion.png, 1400 px wide); then
tiny-parallel's task picker: choose a task and another problem, generate, and read the checker's verdict
(screenshot-diffusion-task.png, in the temp folder unless DECODING_LAB_SCREENSHOTS=1).
"""

from __future__ import annotations

import html

import pytest

from conftest import screenshot_path
from decoding.diffusion.parallel_tasks import check
from test_browser import TIMEOUT_MS, choose, error_toasts, open_page, set_number
from ui.diffusion_tasks import problem, reference_answer

pytestmark = pytest.mark.slow  # Chromium driving the app server

SCREENSHOT = screenshot_path("screenshot-diffusion.png")  # a temp folder; DECODING_LAB_SCREENSHOTS=1 retakes assets/
TASK_SCREENSHOT = screenshot_path("screenshot-diffusion-task.png")
WIDTH = 1400


def test_threshold_decoding_and_screenshot(app_url):
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        page.get_by_role("tab", name="Diffusion").click()
        page.wait_for_selector("#df-generate")
        assert page.locator("#df-model input").input_value() == "tiny-diffusion"
        assert page.locator("#df-prompt textarea").input_value() == "And God said"
        assert page.locator("#df-localleap-radius").is_hidden() and page.locator("#df-refresh-interval").is_hidden()
        page.locator("#df-sampler input[value='localleap']").check()  # localleap shows its own controls
        page.wait_for_selector("#df-localleap-radius", state="visible")
        assert page.locator("#df-localleap-anchor-threshold").is_visible()
        page.locator("#df-sampler input[value='fixed']").check()
        page.wait_for_selector("#df-localleap-radius", state="hidden")
        set_number(page, "df-threshold", 0.5)
        page.locator("#df-generate").click()

        page.wait_for_function("() => (document.querySelector('#df-status') || {}).innerText?.includes('Finished')")
        assert page.locator("#df-canvas .cell").count() == 48
        assert page.locator("#df-canvas .cell.masked").count() == 0  # the finished canvas
        assert "threshold 0.5" in page.locator("#df-stats").inner_text()
        page.wait_for_function("document.querySelectorAll('#df-order .heatmaplayer .hm, #df-order image').length >= 1")
        last = page.locator("#df-step input[type=number]").input_value()
        assert int(last) >= 1  # the step slider looks back once the run is over
        set_number(page, "df-step", 0)
        page.wait_for_function("() => document.querySelector('#df-canvas .dl-head').innerText.startsWith('step 0 ')")
        assert page.locator("#df-canvas .cell.masked").count() > 0
        set_number(page, "df-step", last)
        page.wait_for_function("s => document.querySelector('#df-canvas .dl-head').innerText.startsWith(`step ${s} `)",
                               arg=last)
        assert error_toasts(page) == []
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.wait_for_timeout(600)  # let plotly finish its transition
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        box = page.locator("#df-confidence").bounding_box()  # header to the confidence and NFE charts
        height = min(int(box["y"] + box["height"]) + 10, page.evaluate("document.documentElement.scrollHeight"))
        page.screenshot(path=str(SCREENSHOT), full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": height})
    assert SCREENSHOT.stat().st_size > 20_000


def test_the_default_pace_steps_through_the_run_in_the_browser(app_url):
    """The default Pace (8 steps/s at most) must show the canvas step by step, not only the finished one:
    the sampler waits between steps, so the page sees every step's canvas as it is computed."""
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.get_by_role("tab", name="Diffusion").click()
        page.wait_for_selector("#df-generate")
        assert page.locator("#df-playback input[value='8 steps/s']").is_checked()
        set_number(page, "df-length", 12)
        page.evaluate("""() => {  // the masked-cell count of every canvas the page shows
            window.__masked = [];
            new MutationObserver(() => {
                const cells = document.querySelectorAll('#df-canvas .cell');
                const masked = document.querySelectorAll('#df-canvas .cell.masked').length;
                if (cells.length === 12 && window.__masked.at(-1) !== masked) window.__masked.push(masked);
            }).observe(document.querySelector('#df-canvas'), {childList: true, subtree: true});
        }""")
        page.locator("#df-generate").click()
        page.wait_for_function("() => (document.querySelector('#df-status') || {}).innerText?.includes('Finished')")
        seen = page.evaluate("window.__masked")
        assert seen[-1] == 0 and seen == sorted(seen, reverse=True), seen
        assert len(seen) >= 8, seen  # most of the 12 steps (a frame may merge into the next during a chart redraw)
        assert error_toasts(page) == []


def test_task_picker_generate_and_verdict(app_url):
    """tiny-parallel: the picker appears with the model, fills the prompt with held-out problems, and after
    the run the verdict is the task's checker on what the model wrote (its answers may be poor: no assertion
    on being right)."""
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        page.get_by_role("tab", name="Diffusion").click()
        page.wait_for_selector("#df-generate")
        assert page.locator("#df-tasks").is_hidden()  # tiny-diffusion: no tasks
        choose(page, "df-model", "tiny-parallel")
        page.wait_for_selector("#df-tasks", state="visible")
        prompt = page.locator("#df-prompt textarea")
        page.wait_for_function("p => document.querySelector('#df-prompt textarea').value === p",
                               arg=problem("copy", 1).prompt)  # a task model starts on a task
        assert page.locator("#df-length input[type=number]").input_value() == "32"
        choose(page, "df-task", "reverse · the list backwards (determined: one right answer)")
        page.wait_for_function("p => document.querySelector('#df-prompt textarea').value === p",
                               arg=problem("reverse", 1).prompt)
        page.locator("#df-another").click()
        chosen = problem("reverse", 2).prompt
        page.wait_for_function("p => document.querySelector('#df-prompt textarea').value === p", arg=chosen)
        assert page.locator("#df-problem input[type=number]").input_value() == "2"
        assert prompt.input_value() == chosen
        page.locator("#df-sampler input[value='freedave']").check()  # its own field appears
        page.wait_for_selector("#df-freedave-draft-steps", state="visible")
        assert page.locator("#df-learn2pd-filter-threshold").is_hidden() and page.locator("#df-localleap-radius").is_hidden()
        page.locator("#df-generate").click()

        page.wait_for_function("() => (document.querySelector('#df-status') || {}).innerText?.includes('Finished')")
        verdict = page.locator("#df-verdict .dl-verdict")
        verdict.wait_for()
        assert verdict.get_attribute("data-task") == "reverse"
        wrote = html.unescape(verdict.locator("code").first.inner_html()) if "wrote: <code>" in verdict.inner_html() else ""
        assert verdict.get_attribute("data-correct") == str(check("reverse", chosen, wrote)).lower()
        assert f"the answer: {reference_answer('reverse', chosen)}" in verdict.inner_text()
        assert "chat template" in page.locator("#df-stats").inner_text()
        assert page.locator("#df-canvas .cell").count() == 32 and page.locator("#df-canvas .cell.masked").count() == 0
        assert error_toasts(page) == []
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.wait_for_timeout(600)
        page.evaluate("window.scrollTo(0, 0)")
        box = page.locator("#df-verdict").bounding_box()
        height = min(int(box["y"] + box["height"]) + 40, page.evaluate("document.documentElement.scrollHeight"))
        page.screenshot(path=str(TASK_SCREENSHOT), full_page=True,
                        clip={"x": 0, "y": 0, "width": WIDTH, "height": max(height, 900)})
    assert TASK_SCREENSHOT.stat().st_size > 20_000
