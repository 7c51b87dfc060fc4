"""The Diffusion tab in a real headless Chromium against the real app over HTTP: the tab's opening lesson
(Fast-dLLM's threshold on tiny-parallel's copy task beside one token per step) with nothing clicked but
Generate, saving the screenshot the README shows (assets/screenshot-diffusion.png, 1400 px wide); then
the embedded tiny-diffusion at confidence threshold 0.5, stepping back through the finished canvas; the
default pace; tiny-parallel's task picker: choose a task and another problem, generate, and read the
checker's verdict (screenshot-diffusion-task.png, in the temp folder unless DECODING_LAB_SCREENSHOTS=1).
"""

from __future__ import annotations

import html

import pytest

from conftest import screenshot_path
from decoding.diffusion.parallel_tasks import check
from test_browser import TIMEOUT_MS, check_labels_at_both_sizes, choose, error_toasts, open_page, set_number
from ui.diffusion_tasks import problem, reference_answer

pytestmark = pytest.mark.slow  # Chromium driving the app server

SCREENSHOT = screenshot_path("screenshot-diffusion.png")  # a temp folder; DECODING_LAB_SCREENSHOTS=1 retakes assets/
TASK_SCREENSHOT = screenshot_path("screenshot-diffusion-task.png")
WIDTH = 1400


def open_tab(page) -> None:
    page.get_by_role("tab", name="Diffusion").click()
    page.wait_for_selector("#df-generate")


def on_tiny_diffusion(page, length: int, threshold: float) -> None:
    """Leave the opening lesson for tiny-diffusion on its KJV prompt, no comparison."""
    choose(page, "df-model", "tiny-diffusion")
    page.locator("#df-prompt textarea").fill("And God said")
    choose(page, "df-compare", "none")
    set_number(page, "df-length", length)
    set_number(page, "df-threshold", threshold)


def test_the_opening_lesson_and_screenshot(app_url):
    """A fresh tab is preset 54 with its comparison: one click on Generate shows the whole canvas committed in
    one model call, beside the 32 calls of one token per step, and the checker's verdict."""
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        open_tab(page)
        assert page.locator("#df-model input").input_value() == "tiny-parallel"
        assert page.locator("#df-prompt textarea").input_value() == problem("copy", 1).prompt
        assert page.locator("#df-compare input").input_value() == "fixed schedule, steps = length"
        assert "Threshold decoding on a copy task" in page.locator("#df-note").inner_text()
        page.locator("#df-generate").click()
        page.wait_for_function("() => (document.querySelector('#df-status') || {}).innerText?.includes('Compared')")
        status = page.locator("#df-status").inner_text()
        assert "NFE 1 " in status and "32 model calls" in status, status
        assert page.locator("#df-canvas .cell").count() == 32 and page.locator("#df-canvas .cell.masked").count() == 0
        assert page.locator("#df-verdict .dl-verdict").first.get_attribute("data-correct") == "true"
        page.wait_for_function("document.querySelectorAll('#df-compare-plot .scatterlayer .trace').length >= 2")
        assert error_toasts(page) == []
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.wait_for_timeout(600)  # let plotly finish its transition
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        box = page.locator("#df-tokens").bounding_box()  # header to the confidence and NFE charts
        height = min(int(box["y"] + box["height"]) + 10, page.evaluate("document.documentElement.scrollHeight"))
        page.screenshot(path=str(SCREENSHOT), full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": height})
        check_labels_at_both_sizes(page, "#dl-diffusion")  # no figure label cut, laptop or projector
    assert SCREENSHOT.stat().st_size > 20_000


def test_threshold_decoding_on_tiny_diffusion_and_stepping_back(app_url):
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        open_tab(page)
        on_tiny_diffusion(page, 48, 0.5)
        page.wait_for_selector("#df-tasks", state="hidden")  # tiny-diffusion: no tasks
        assert page.locator("#df-localleap-radius").is_hidden() and page.locator("#df-refresh-interval").is_hidden()
        page.locator("#df-sampler input[value='localleap']").check()  # localleap shows its own controls
        page.wait_for_selector("#df-localleap-radius", state="visible")
        assert page.locator("#df-localleap-anchor-threshold").is_visible()
        page.locator("#df-sampler input[value='fixed']").check()
        page.wait_for_selector("#df-localleap-radius", state="hidden")
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


def test_the_default_pace_steps_through_the_run_in_the_browser(app_url):
    """The default Pace (8 steps/s at most) must show the canvas step by step, not only the finished one:
    the sampler waits between steps, so the page sees every step's canvas as it is computed."""
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        open_tab(page)
        assert page.locator("#df-playback input[value='8 steps/s']").is_checked()
        on_tiny_diffusion(page, 12, 0)  # one position per step
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
        open_tab(page)
        choose(page, "df-model", "tiny-diffusion")
        page.locator("#df-prompt textarea").fill("And God said")
        page.wait_for_selector("#df-tasks", state="hidden")  # tiny-diffusion: no tasks
        choose(page, "df-compare", "none")
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
        set_number(page, "df-threshold", 0)  # FreeDave drafts the fixed schedule's steps (no threshold)
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
