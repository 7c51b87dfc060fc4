"""Start-up as a user meets it: `python app.py` in a process of its own, with the default model preloaded,
twice: the first run on a fresh cache (the GGUF is there, as after its download, but not yet converted) and
the next (its converted copy kept by the first). The page must be served before the model is ready and say
meanwhile what is happening (a progress line under the header with a spinner drawn by CSS: "Loading
smollm2-135m…", then "smollm2-135m ready"). The times are printed (`pytest -s`) for the README's table; the
bounds asserted are generous (a loaded CI machine).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, free_port, stop_process, wait_until_up
from test_browser import open_page

pytestmark = pytest.mark.slow  # Chromium driving the app server, SmolLM2 converted and loaded

READY_S = 300  # importing, converting SmolLM2 and warming it up, on a loaded machine


def fresh_cache(folder: Path) -> Path:
    """A cache holding SmolLM2's GGUF (as after its first download) and nothing converted from it."""
    from decoding import embedded

    source = Path(embedded.ensure_gguf(embedded.SMOLLM2_135M, lambda m: None))
    target = folder / f"{embedded.SMOLLM2_135M.package}-{embedded.SMOLLM2_135M.version}" / source.name
    target.parent.mkdir(parents=True)
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copyfile(source, target)
    return folder


def start(tmp_path: Path, cache: Path, browse: bool) -> dict:
    """`python app.py` until its default model is ready: {"served", "ready"} seconds after launch, and with
    `browse` the page's first progress line and whether its spinner is drawn."""
    port = free_port()
    env = os.environ | {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
                        "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1",
                        "DECODING_LAB_EXPORT_DIR": str(tmp_path / "exports"), "DECODING_LAB_CACHE": str(cache)}
    env.pop("DECODING_LAB_PRELOAD", None)
    log = tmp_path / f"server-{port}.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    seen: dict = {}
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_up(url, process, log, start_s=READY_S)
        seen["served"] = time.monotonic() - started
        if browse:
            with open_page(url, "#dl-generate", timeout_ms=READY_S * 1000) as page:
                page.wait_for_function("() => (document.querySelector('#dl-startup') || {}).innerText?.trim()")
                seen["first"] = page.locator("#dl-startup").inner_text()
                spinner = page.locator("#dl-startup .dl-spinner")
                seen["spinner"] = spinner.count() == 1 and (spinner.bounding_box() or {}).get("width", 0) > 4
                page.wait_for_function("() => (document.querySelector('#dl-startup') || {}).innerText?.includes('ready')")
                seen["last"] = page.locator("#dl-startup").inner_text()
        deadline = started + READY_S
        while "smollm2-135m ready" not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"not ready in {READY_S} s:\n{log.read_text()[-3000:]}"
            time.sleep(0.1)
        seen["ready"] = time.monotonic() - started
        return seen
    finally:
        stop_process(process)


def test_the_page_comes_first_and_the_next_start_reads_the_converted_copy(tmp_path):
    cache = fresh_cache(tmp_path / "cache")
    first = start(tmp_path, cache, browse=True)
    second = start(tmp_path, cache, browse=False)
    print(f"\npython app.py on a fresh cache: page served after {first['served']:.1f} s, default model ready after "
          f"{first['ready']:.1f} s (first line seen: {first['first']!r}; last: {first['last']!r})"
          f"\npython app.py again (converted copy): page served after {second['served']:.1f} s, default model ready "
          f"after {second['ready']:.1f} s")
    # the page came before the model, and said so, with a spinner drawn by CSS (no emoji, which Debian's
    # Chromium draws as a box; Gradio may put its progress timer, "0.0s", before the line)
    assert "Loading" in first["first"] and "ready" not in first["first"] and first["spinner"], first
    assert "smollm2-135m ready" in first["last"] and "failed" not in first["last"] and "⏳" not in first["first"]
    assert second["ready"] < first["ready"]  # measured: see the README's Measured table
    assert any(p.name.startswith("SmolLM2") for p in (cache / "converted").iterdir())
