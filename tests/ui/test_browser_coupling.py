"""The Speculative tab's coupling accordion in a real headless Chromium: MEC-B beside the verification rules
(its rate slider redraws it) and the Markov coding game (a message sent through an agent's moves), both
drawn from the app over HTTP, no figure label cut, no error."""

from __future__ import annotations

import pytest

from conftest import screenshot_path
from test_browser import error_toasts, open_page, set_number

pytestmark = pytest.mark.slow  # Chromium driving the app server


def plot_text(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} .js-plotly-plot").first.inner_text()


def test_mecb_and_the_markov_coding_game_draw_and_follow_their_controls(app_url):
    with open_page(app_url, "#dl-generate") as page:
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.get_by_role("tab", name="Speculative").click()
        page.locator("#spec-coupling").get_by_text("Verification rules, one position").click()
        page.wait_for_selector("#spec-mecb-plot .js-plotly-plot .heatmaplayer")
        page.wait_for_selector("#spec-mcg-plot .js-plotly-plot")
        for elem_id, name in (("spec-mecb-plot", "spec-mecb.png"), ("spec-mcg-plot", "spec-mcg.png")):  # as the tab opens
            page.locator(f"#{elem_id}").scroll_into_view_if_needed()
            page.locator(f"#{elem_id}").screenshot(path=str(screenshot_path(name)))
        before = page.locator("#spec-mecb-plot .gtitle").first.text_content()
        set_number(page, "spec-mecb-rate", 0)
        page.wait_for_function("b => document.querySelector('#spec-mecb-plot .gtitle')?.textContent !== b", arg=before)
        text = page.locator("#spec-mcg-text").inner_text()
        assert text.strip(), "the game's line is empty"
        set_number(page, "spec-mcg-rate", 0)  # no bits: the receiver can only guess
        page.wait_for_function("() => document.querySelector('#spec-mcg-text').innerText.includes('R = 0 bits')")
        after = page.locator("#spec-mcg-text").inner_text()
        assert "1 code word for" in after, after
        assert error_toasts(page) == []
