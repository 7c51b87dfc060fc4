"""Classroom mode in a real headless Chromium: the lesson's Next / Previous walk a lab's presets in
order, Present (and the P key) hides the controls (but the lesson, its note and the prompt) and enlarges the
views, G generates, and the arrow keys step through the run on screen."""

from __future__ import annotations

import pytest

from conftest import screenshot_path
from decoding.presets import load_presets
from test_browser import TIMEOUT_MS, open_page

pytestmark = pytest.mark.slow  # Chromium driving the app server

SCREENSHOT = screenshot_path("classroom-scaling.png")


def test_a_scaling_lesson_presented_and_stepped_with_the_keyboard(app_url):
    lesson = load_presets(lab="scaling")
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.get_by_role("tab", name="Scaling").click()
        page.wait_for_selector("#sc-lesson-next")
        assert f"{len(lesson)} steps" in page.locator("#sc-lesson").inner_text()
        page.locator("#sc-lesson-next").click()  # the lesson's first step: the first scaling preset
        page.wait_for_function("t => document.querySelector('#sc-lesson').innerText.includes(t)", arg=lesson[0].title)
        assert f"step 1 of {len(lesson)}" in page.locator("#sc-lesson").inner_text()
        page.wait_for_function("t => document.querySelector('#sc-note').innerText.includes(t)",
                               arg=lesson[0].title)  # its note (the tab opened on a note of its own)
        assert page.locator("#sc-model input").input_value() == lesson[0].model
        assert page.locator("#sc-preset input").input_value() == lesson[0].title

        controls = page.locator(".dl-controls").filter(has=page.locator("#sc-generate"))
        assert controls.is_visible()
        page.locator("body").press("p")  # presentation layout: controls hidden but the lesson, its note and the prompt
        page.wait_for_function("() => document.body.classList.contains('dl-present')")
        assert not page.locator("#sc-generate").is_visible() and not page.locator("#sc-model").is_visible()
        assert page.locator("#sc-prompt").is_visible() and page.locator("#sc-note").is_visible()
        assert page.locator("#sc-particles").is_visible()
        page.locator("body").press("n")  # next lesson step, with the controls hidden
        page.wait_for_function("t => document.querySelector('#sc-lesson').innerText.includes(t)", arg=lesson[1].title)
        page.locator("body").press("b")
        page.wait_for_function("t => document.querySelector('#sc-lesson').innerText.includes(t)", arg=lesson[0].title)
        page.wait_for_function("m => document.querySelector('#sc-model input').value === m", arg=lesson[0].model)
        page.locator("body").press("g")  # generate the preset's run
        page.wait_for_function("() => (document.querySelector('#sc-status') || {}).innerText?.includes('Finished')",
                               timeout=TIMEOUT_MS)
        last = int(page.locator("#sc-step input[type=number]").input_value())
        assert last >= 2
        page.locator("body").press("ArrowLeft")  # step back through the run
        page.wait_for_function("s => document.querySelector('#sc-particles .dl-head').innerText.startsWith(`step ${s} `)",
                               arg=last - 1)
        page.locator("body").press("ArrowRight")
        page.wait_for_function("s => document.querySelector('#sc-particles .dl-head').innerText.startsWith(`step ${s} `)",
                               arg=last)
        page.wait_for_timeout(500)
        page.screenshot(path=str(SCREENSHOT))
        page.locator("#dl-present").click()  # the header button toggles back
        page.wait_for_function("() => !document.body.classList.contains('dl-present')")
        assert controls.is_visible() and page.locator("#sc-generate").is_visible()
