"""The Playground's preset menu in a real headless Chromium (issue 18): choosing a preset sets the
strategy, its parameters, the model and the prompt, shows the teaching note, and Generate runs it."""

from __future__ import annotations

import pytest

from conftest import screenshot_path
from test_browser import choose, error_toasts, open_page, wait_for_status

pytestmark = pytest.mark.slow  # Chromium driving the app server

TITLE = "Min-p keeps high temperature coherent"  # presets/03-min-p-at-high-temperature.yaml


def test_choosing_a_preset_sets_the_controls_and_generate_runs_it(app_url):
    with open_page(app_url, "#dl-generate") as page:
        page.set_viewport_size({"width": 1400, "height": 1000})  # the window
        assert page.locator("#dl-strategy input").input_value() == "greedy"
        choose(page, "dl-preset", TITLE)
        page.wait_for_function("() => document.querySelector('#dl-note').innerText.includes('Min-p keeps only')")
        assert page.locator("#dl-strategy input").input_value() == "sample"
        page.wait_for_selector("#dl-param-sample-min_p", state="visible")  # the strategy's parameters are shown
        assert page.locator("#dl-param-sample-temperature input[type=number]").input_value() == "1.5"
        assert page.locator("#dl-param-sample-min_p input[type=number]").input_value() == "0.1"
        assert page.locator("#dl-model input").input_value() == "smollm2-135m"
        assert page.locator("#dl-prompt textarea").input_value().startswith("Write a short paragraph about why cats")
        assert page.locator("#dl-seed input").input_value() == "1"
        page.screenshot(path=str(screenshot_path("playground-preset.png")))

        page.locator("#dl-generate").click()
        wait_for_status(page, "Finished")
        assert "sample (temperature=1.5, min_p=0.1), seed 1" in page.locator("#dl-stats").inner_text()
        assert page.locator("#dl-main-text .tok[data-step]").count() >= 10
        clipped = page.evaluate("""() => [...document.querySelectorAll('#dl-stats .dl-stat .v')]
            .filter(v => v.scrollWidth > v.clientWidth).map(v => v.innerText)""")
        assert clipped == []  # 1400 px wide: every statistic shows whole ("end tok…", "runnin…" were cut)
        assert error_toasts(page) == []
