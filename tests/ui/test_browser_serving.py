"""The Serving tab in a real headless Chromium against the real app over HTTP: a class of 6 pressing Generate
at once, served by the shipped tiny-ar under the three policies; the timeline draws a panel per policy and the
table compares them; no figure label is cut; the screenshot goes to docs/ (assets/screenshot-serving.png with
DECODING_LAB_SCREENSHOTS=1)."""

from __future__ import annotations

import pytest

from conftest import screenshot_path
from test_browser import TIMEOUT_MS, check_labels_at_both_sizes, choose, error_toasts, open_page, set_number

pytestmark = pytest.mark.slow  # Chromium driving the app server

SCREENSHOT = screenshot_path("screenshot-serving.png")
WIDTH = 1400


def test_a_class_served_three_ways_and_screenshot(app_url):
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        page.get_by_role("tab", name="Serving").click()
        page.wait_for_selector("#sv-generate")
        choose(page, "sv-model", "tiny-ar")
        set_number(page, "sv-requests", 6)
        set_number(page, "sv-tokens", 24)
        page.locator("#sv-arrival").get_by_text("all at once").click()
        page.locator("#sv-generate").click()
        page.wait_for_function("() => (document.querySelector('#sv-status') || {}).innerText?.includes('Finished')")
        rows = page.locator("#sv-table tr")
        assert rows.count() == 4  # the header and one row per policy
        assert [rows.nth(k).locator("td").first.inner_text() for k in (1, 2, 3)] == ["one-at-a-time", "static", "fusion"]
        titles = page.locator("#sv-timeline .annotation-text").all_text_contents()
        assert [t.split(":")[0] for t in titles[:3]] == ["one-at-a-time", "static", "fusion"], titles
        assert page.locator("#sv-timeline .barlayer .bars path").count() >= 6 * 3  # each request, each policy
        assert error_toasts(page) == []
        page.wait_for_timeout(600)  # let plotly finish its transition
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        box = page.locator("#sv-timeline").bounding_box()
        height = min(int(box["y"] + box["height"]) + 10, page.evaluate("document.documentElement.scrollHeight"))
        page.screenshot(path=str(SCREENSHOT), full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": height})
        check_labels_at_both_sizes(page, "#dl-serving")
    assert SCREENSHOT.stat().st_size > 20_000
