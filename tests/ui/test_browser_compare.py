"""Compare mode (issue 16) in a real headless Chromium against the real app over HTTP, on the
embedded SmolLM2-135M: three strategies stream side by side, the table fills, a click shows every
run's distribution at a step, the export holds a trace per run and the table; Stop stops all runs.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from conftest import screenshot_path
from decoding.events import Trace
from test_browser import TIMEOUT_MS, choose, error_toasts, open_page, set_number

pytestmark = pytest.mark.slow  # Chromium driving the app server

SCREENSHOT = screenshot_path("screenshot-compare.png")
PROMPT = "Write a short story about a lighthouse keeper."
STRATEGIES = ("greedy", "sample", "mirostat")


@pytest.fixture(scope="module")
def page(app_url):
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        yield page


def wait_for_status(page, text: str) -> None:
    page.wait_for_function("t => (document.querySelector('#dl-compare-status') || {}).innerText?.includes(t)",
                           arg=text)


def set_rows(page, rows) -> None:
    """Each row's strategy and, through the strategy's own widgets, the parameters given."""
    for k, (strategy, params) in enumerate(rows):
        if page.locator(f"#dl-compare-strategy-{k} input").input_value() != strategy:
            choose(page, f"dl-compare-strategy-{k}", strategy)
        for name, value in params.items():
            set_number(page, f"dl-compare-{k}-{strategy}-{name}", value)


def test_three_strategies_stream_side_by_side_with_their_table_and_export(page):
    page.get_by_text("Compare strategies side by side").click()
    page.wait_for_selector("#dl-compare-go")
    page.locator("#dl-prompt textarea").fill(PROMPT)
    set_number(page, "dl-max-new-tokens", 20)
    assert page.locator("#dl-compare-1-sample-top_p").is_visible()  # the row shows its strategy's widgets
    assert page.locator("#dl-compare-1-mirostat-tau").is_hidden()
    set_rows(page, [("greedy", {}), ("sample", {"top_p": 0.8}), ("mirostat", {}), ("(off)", {})])
    page.wait_for_selector("#dl-compare-2-mirostat-tau", state="visible")  # the strategy brought its own widgets
    page.locator("#dl-compare-json-1").get_by_text("parameters as JSON").click()  # the advanced field
    box = page.locator("#dl-compare-params-1 input, #dl-compare-params-1 textarea").first
    box.fill('{"top_p": 0.9}')  # overrides the widget: the column says top_p=0.9
    box.press("Tab")
    page.evaluate("""() => {  // the chip count of every run column after each update
        window.__runs = [];
        new MutationObserver(() => window.__runs.push([...document.querySelectorAll('#dl-compare-columns .dl-compare-run')]
            .map(col => col.querySelectorAll('.tok[data-step]').length)))
          .observe(document.querySelector('#dl-compare-columns'), {childList: true, subtree: true});
    }""")
    page.locator("#dl-compare-go").click()
    wait_for_status(page, "Finished")

    columns = page.locator("#dl-compare-columns .dl-compare-run")
    assert columns.count() == 3
    for k, strategy in enumerate(STRATEGIES):
        assert strategy in columns.nth(k).locator("h4").inner_text()
        assert columns.nth(k).locator(".tok[data-step]").count() >= 2
    assert "top_p=0.9" in columns.nth(1).locator("h4").inner_text()
    seen = page.evaluate("window.__runs")
    growing = [counts for counts in seen if len(counts) == 3 and 0 < max(counts) < 20]
    assert len({tuple(c) for c in growing}) >= 3, f"the runs did not stream: {seen}"
    assert any(0 < min(c) and max(c) - min(c) <= 1 for c in growing), f"the runs did not take turns: {seen}"
    rows = page.locator("#dl-compare-stats tbody tr")
    assert rows.count() == 3
    assert "log P(text)" in page.locator("#dl-compare-stats thead").inner_text()
    assert all(rows.nth(k).locator("td").nth(1).inner_text().startswith(s) for k, s in enumerate(STRATEGIES))
    page.wait_for_selector("#dl-compare-entropy .js-plotly-plot .scatterlayer .trace:nth-child(3)", state="attached")

    columns.nth(1).locator(".tok[data-step='3']").click()  # every run's distribution at step 3
    page.wait_for_function("() => document.querySelectorAll('#dl-compare-distributions .barlayer .trace').length >= 3")
    assert page.locator("#dl-compare-columns .tok.sel[data-step='3']").count() == 3
    assert page.locator("#dl-compare-step input").input_value() == "3"

    with page.expect_download(timeout=30_000) as info:
        page.locator("#dl-compare-export").click()
    archive = zipfile.ZipFile(info.value.path())
    names = sorted(archive.namelist())
    assert names == ["compare-table.csv", "run-1-greedy.json", "run-2-sample.json", "run-3-mirostat.json"]
    table = list(csv.DictReader(io.StringIO(archive.read("compare-table.csv").decode())))
    traces = [Trace.from_dict(json.loads(archive.read(n))) for n in names[1:]]
    assert [int(r["tokens"]) for r in table] == [len(t.finish.token_ids) for t in traces]
    assert error_toasts(page) == []

    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.locator("#dl-compare").screenshot(path=str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 20_000


def test_stop_all_stops_every_run(page):
    page.locator("#dl-compare-go").wait_for()
    set_number(page, "dl-max-new-tokens", 400)
    page.locator("#dl-compare-go").click()
    wait_for_status(page, "Steps so far")  # this run is under way (the columns still held the last run's tokens)
    page.wait_for_function("() => document.querySelectorAll('#dl-compare-columns .dl-compare-run .tok').length >= 9")
    page.locator("#dl-compare-stop").click()
    wait_for_status(page, "Stopped")
    counts = page.evaluate("""() => [...document.querySelectorAll('#dl-compare-columns .dl-compare-run')]
        .map(col => col.querySelectorAll('.tok[data-step]').length)""")
    assert len(counts) == 3 and max(counts) < 400
    page.wait_for_timeout(1500)  # nothing grows after Stop
    again = page.evaluate("""() => [...document.querySelectorAll('#dl-compare-columns .dl-compare-run')]
        .map(col => col.querySelectorAll('.tok[data-step]').length)""")
    assert again == counts
    assert error_toasts(page) == []
