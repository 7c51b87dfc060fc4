"""Start-up as a user meets it: `python app.py` in a process of its own, with the default model preloaded,
twice: the first start on a fresh cache (the GGUF is there, as after its download, but not yet converted)
and the next (reading the converted copy the first kept). The page must be served before the model is
ready and say meanwhile what is happening (a progress line under the header with a spinner drawn by CSS:
"Loading smollm2-135m…" or "Dequantising SmolLM2…", then "smollm2-135m ready"). The starts are timed by `bench/bench_startup.py`'s
own function; the times are printed (`pytest -s`); the bounds asserted are generous (a loaded CI machine).
"""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT
from test_browser import open_page

sys.path.insert(0, str(ROOT / "bench"))
from bench_startup import LIMIT_S, fresh_cache, start_app

pytestmark = pytest.mark.slow  # Chromium driving the app server, SmolLM2 converted and loaded


def test_the_page_comes_first_and_the_next_start_reads_the_converted_copy(tmp_path):
    cache = fresh_cache(tmp_path / "cache")
    seen: dict = {}

    def look(url):  # the page while the model loads, then when it is ready
        with open_page(url, "#dl-generate", timeout_ms=LIMIT_S * 1000) as page:
            page.wait_for_function("() => (document.querySelector('#dl-startup') || {}).innerText?.trim()")
            seen["first"] = page.locator("#dl-startup").inner_text()
            spinner = page.locator("#dl-startup .dl-spinner")
            seen["spinner"] = spinner.count() == 1 and (spinner.bounding_box() or {}).get("width", 0) > 4
            page.wait_for_function("() => (document.querySelector('#dl-startup') || {}).innerText?.includes('ready')")
            seen["last"] = page.locator("#dl-startup").inner_text()

    first = start_app(tmp_path, cache, on_served=look)
    second = start_app(tmp_path, cache)
    print(f"\npython app.py on a fresh cache: page served after {first['served_s']:.1f} s, default model ready "
          f"after {first['ready_s']:.1f} s (first line seen: {seen['first']!r}; last: {seen['last']!r})"
          f"\npython app.py again (converted copy): page served after {second['served_s']:.1f} s, default model "
          f"ready after {second['ready_s']:.1f} s")
    # the page came before the model, and said so, with a spinner drawn by CSS (no emoji: Debian's Chromium
    # drew "⏳" as a box; Gradio may put its progress timer, "0.0s", before the line)
    assert "smollm2" in seen["first"].lower() and "ready" not in seen["first"] and seen["spinner"], seen
    assert "smollm2-135m ready" in seen["last"] and "failed" not in seen["last"] and "⏳" not in seen["first"]
    assert any(p.name.startswith("SmolLM2") for p in (cache / "converted").iterdir())  # the copy the first kept
    assert second["ready_s"] < first["ready_s"]  # measured: bench/bench_startup.py, the README's Measured table
