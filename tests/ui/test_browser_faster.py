"""LUD, HAMburger, FTP and SpecMemo in a real headless Chromium against the real app over HTTP: each
Playground preset runs its model and draws its method picture (units, slots, the layer map); the
Speculative tab's memory plot draws the bytes per part against the budget, and a second run at another
budget adds a second point to acceptance-against-budget. No figure label is cut."""

from __future__ import annotations

import pytest

from conftest import screenshot_path
from test_browser import check_labels_at_both_sizes, choose, error_toasts, open_page, set_number, wait_for_status
from test_browser_exports import wait_for

pytestmark = pytest.mark.slow  # Chromium driving the app server

PRESETS = {  # title -> what the method picture's title says
    "LUD: several tokens of a lexical unit per forward": "LUD:",
    "HAMburger: several tokens per big forward, one cache slot": "HAMburger:",
    "FTP: a router lets each token skip decoder blocks": "FTP:",
}


@pytest.mark.parametrize("title, picture", list(PRESETS.items()))
def test_each_preset_draws_its_method_picture(app_url, title, picture):
    with open_page(app_url, "#dl-generate") as page:
        page.set_viewport_size({"width": 1400, "height": 1000})
        choose(page, "dl-preset", title)
        page.wait_for_function("t => document.querySelector('#dl-note').innerText.includes(t)",
                               arg=title)  # the preset's note, past the opening one
        page.locator("#dl-generate").click()
        wait_for_status(page, "Finished")
        page.wait_for_selector("#dl-method .js-plotly-plot .gtitle")
        heading = page.locator("#dl-method .gtitle").first.text_content()
        assert heading.startswith(picture), heading
        if picture == "FTP:":
            assert page.locator("#dl-method .heatmaplayer image, #dl-method .heatmaplayer path").count() >= 1
        else:
            assert page.locator("#dl-method .barlayer .bars path").count() >= 10  # one bar per token
        assert error_toasts(page) == []
        page.locator("#dl-method").scroll_into_view_if_needed()
        page.wait_for_timeout(400)
        page.locator("#dl-method").screenshot(path=str(screenshot_path(f"method-{picture[:-1].lower()}.png")))
        check_labels_at_both_sizes(page, "#dl-method")


def test_the_memory_plot_shows_bytes_per_part_and_acceptance_against_budget(app_url):
    with open_page(app_url, "#dl-generate") as page:
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.get_by_role("tab", name="Speculative").click()
        page.wait_for_selector("#spec-generate")
        choose(page, "spec-preset", "SpecMemo: the tree cut to a memory budget")
        page.wait_for_function("() => document.querySelector('#spec-note').innerText.includes('SpecMemo')")
        page.locator("#spec-generate").click()
        wait_for(page, "spec-status", "plain decoding")  # the speculative run, then plain decoding for the speed-up
        page.wait_for_function("() => document.querySelectorAll('#spec-memory .barlayer .bars path').length >= 4")
        # the blank 'a run is under way' figure may still be in the page for a moment beside the new one (it was
        # read first once, under load): wait for the run's own heading
        page.wait_for_function("() => [...document.querySelectorAll('#spec-memory .gtitle')]"
                               ".some(t => t.textContent.startsWith('SpecMemo:'))")
        heading = next(t for t in page.locator("#spec-memory .gtitle").all_text_contents() if t.startswith("SpecMemo:"))
        assert heading.startswith("SpecMemo: budget 20.90 MB"), heading
        assert page.locator("#spec-memory .scatterlayer .trace").count() >= 2  # the budget line and the run's point
        set_number(page, "spec-memory-budget-mb", 21.5)
        page.locator("#spec-generate").click()
        page.wait_for_function("() => document.querySelector('#spec-memory .gtitle')?.textContent"
                               ".startsWith('SpecMemo: budget 21.50 MB')")
        points = page.evaluate("""() => {  // the lower panel's line: one point per run
            const plot = document.querySelector('#spec-memory .js-plotly-plot');
            const trace = plot.data.find(t => t.meta === 'budget runs' && t.mode.includes('lines'));
            return trace ? trace.x.length : 0; }""")
        assert points == 2
        assert error_toasts(page) == []
        page.locator("#spec-memory").scroll_into_view_if_needed()
        page.wait_for_timeout(400)
        page.locator("#spec-memory").screenshot(path=str(screenshot_path("spec-memory.png")))
        check_labels_at_both_sizes(page, "#spec-memory")
