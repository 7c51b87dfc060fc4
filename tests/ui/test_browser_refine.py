"""Review, refine, repeat in the Scaling tab, in a real headless Chromium against the app over HTTP: preset 36 (one
sample, three rounds, the checker's correction forced into round 2) shows the feedback each round was given, over
the particle cards and in the final choice. One short run (N = 1, two rounds played)."""

from __future__ import annotations

import pytest

from conftest import screenshot_path
from test_browser import TIMEOUT_MS, choose, error_toasts, open_page

pytestmark = pytest.mark.slow  # Chromium driving the app server

TITLE = "Review, refine, repeat: the checker's verdict goes into the next round (tiny-math)"  # presets/36-...


def test_the_feedback_of_each_round_is_shown(app_url):
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.get_by_role("tab", name="Scaling").click()
        page.wait_for_selector("#sc-generate")
        choose(page, "sc-preset", TITLE)
        page.wait_for_function("() => document.querySelector('#sc-note').innerText.includes('Iterative Agent Decoding')")
        assert page.locator("#sc-method input[value='refine']").is_checked()
        page.locator("#sc-generate").click()
        page.wait_for_selector("#sc-choice .dl-rounds tr[data-round='2']")
        feedback = page.locator("#sc-particles .dl-feedback").inner_text()  # the last step: round 2's
        assert "feedback from round 1" in feedback and "714 + 87 = 701" in feedback and "forced: 714 + 87 = 801" in feedback
        rounds = page.locator("#sc-choice .dl-rounds").inner_text()
        assert "forced 714 + 87 = 801" in rounds and "801" in page.locator("#sc-choice .ans").inner_text()
        assert error_toasts(page) == []
        page.locator("#sc-particles").screenshot(path=str(screenshot_path("scaling-refine-feedback.png")))
