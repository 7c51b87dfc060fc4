"""The Scaling tab in a real headless Chromium against the real app over HTTP: the tab's opening lesson (a
particle filter of N = 4 on held-out tiny-math problem m5, best-of-N compared) with nothing clicked but
Generate; step back through it and save the screenshot the README shows (assets/screenshot-scaling.png,
1400 px wide); then the task picker (a task picks its policy) and the method's and reward's own fields.
"""

from __future__ import annotations

import pytest

from decoding.scaling.tasks import load_tasks, menu_tasks
from conftest import screenshot_path
from test_browser import TIMEOUT_MS, check_labels_at_both_sizes, choose, error_toasts, open_page, set_number

pytestmark = pytest.mark.slow  # Chromium driving the app server

SCREENSHOT = screenshot_path("screenshot-scaling.png")  # a temp folder; DECODING_LAB_SCREENSHOTS=1 retakes assets/
WIDTH = 1400


def test_the_opening_lesson_then_the_task_picker_and_screenshot(app_url):
    task, word_problem = menu_tasks()[4], load_tasks()[0]
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        page.get_by_role("tab", name="Scaling").click()
        page.wait_for_selector("#sc-generate")
        assert page.locator("#sc-model input").input_value() == "tiny-math"
        assert page.locator("#sc-compare input").input_value() == "best-of-n"
        assert page.locator("#sc-prompt textarea").input_value().startswith("Zoe has 63 books.")
        assert "particle filter against best-of-N" in page.locator("#sc-note").inner_text()
        page.locator("#sc-generate").click()  # nothing else: the opening lesson

        page.wait_for_selector("#sc-particles .card[data-slot]")  # particle cards while streaming
        page.wait_for_selector("#sc-choice .dl-choice")
        page.wait_for_function("document.querySelectorAll('#sc-lineage .scatterlayer .trace').length >= 3")
        page.wait_for_function("() => (document.querySelector('#sc-status') || {}).innerText?.includes('Compared')")
        status = page.locator("#sc-status").inner_text()
        assert "particle-filter chose answer 220 ✓" in status and "best-of-n chose answer 220 ✓" in status, status
        assert page.locator("#sc-particles .card[data-slot]").count() == 4
        assert page.locator("#sc-choice .dl-verdict").count() == 1  # ✓ / ✗ against the task's answer
        assert "particle-filter, reward spare, N = 4" in page.locator("#sc-stats").inner_text()
        last = page.locator("#sc-step input[type=number]").input_value()
        assert int(last) >= 1  # the step slider looks back at earlier steps once the run is over
        set_number(page, "sc-step", 0)
        page.wait_for_function("() => document.querySelector('#sc-particles .dl-head').innerText.startsWith('step 0 ')")
        set_number(page, "sc-step", last)
        page.wait_for_function("s => document.querySelector('#sc-particles .dl-head').innerText.startsWith(`step ${s} `)",
                               arg=last)
        assert error_toasts(page) == []
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.wait_for_timeout(600)  # let plotly finish its transition
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        box = page.locator("#sc-particles").bounding_box()  # header to the particle cards
        height = min(int(box["y"] + box["height"]) + 10, page.evaluate("document.documentElement.scrollHeight"))
        page.screenshot(path=str(SCREENSHOT), full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": height})
        check_labels_at_both_sizes(page, "#dl-scaling")  # no figure label cut, laptop or projector

        for chosen, model in ((word_problem, "smollm2-135m"), (task, "tiny-math")):  # the task picks its policy
            page.locator("#sc-task input").click()
            page.get_by_role("option", name=f"#{chosen['id']} ·").click()
            page.wait_for_function("q => document.querySelector('#sc-prompt textarea').value.startsWith(q)",
                                   arg=chosen["question"])
            page.wait_for_function("m => document.querySelector('#sc-model input').value === m", arg=model)
        page.locator("#sc-method input[value='reward-beam']").check()
        page.wait_for_selector("#sc-reward-beam-beam-width", state="visible")
        assert page.locator("#sc-particle-filter-reward-temperature").is_hidden()
        page.locator("#sc-method input[value='particle-filter']").check()
        page.wait_for_selector("#sc-particle-filter-reward-temperature", state="visible")
        assert page.locator("#sc-reward-beam-beam-width").is_hidden()
        assert page.locator("#sc-first-finish-chunk-tokens").is_hidden()
        choose(page, "sc-reward", "final-answer")
        page.wait_for_selector("#sc-reference", state="visible")
        assert page.locator("#sc-reference input, #sc-reference textarea").first.input_value() == task["answer"]
        choose(page, "sc-reward", "arith-step")
        page.wait_for_selector("#sc-reference", state="hidden")
        assert error_toasts(page) == []
    assert SCREENSHOT.stat().st_size > 20_000
