"""Start-up as a user meets it: `python app.py` in a process of its own, with the default model preloaded.
The page must be served before the model is ready and say meanwhile what is happening (a progress line
under the header: "Loading smollm2-135m…", then "smollm2-135m ready"). The times are printed
(`pytest -s`) for the README's table; the bounds asserted are generous (a loaded CI machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, free_port, stop_process
from test_browser import open_page
from conftest import wait_until_up

pytestmark = pytest.mark.slow  # Chromium driving the app server

READY_S = 300  # importing, dequantising SmolLM2 and warming it up, on a loaded machine


def test_the_page_comes_first_and_says_while_the_model_loads(tmp_path):
    port = free_port()
    env = os.environ | {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
                        "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1",
                        "DECODING_LAB_EXPORT_DIR": str(tmp_path / "exports")}
    env.pop("DECODING_LAB_PRELOAD", None)
    log = tmp_path / "server.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_up(url, process, log)
        served = time.monotonic() - started
        with open_page(url, "#dl-generate", timeout_ms=READY_S * 1000) as page:
            line = page.locator("#dl-startup")
            page.wait_for_function("() => (document.querySelector('#dl-startup') || {}).innerText?.trim()")
            first = line.inner_text()
            page.wait_for_function("() => (document.querySelector('#dl-startup') || {}).innerText?.includes('ready')")
            ready = time.monotonic() - started
            text = line.inner_text()
        print(f"\npython app.py: page served after {served:.1f} s, default model ready after {ready:.1f} s "
              f"(first line seen: {first!r}; last: {text!r})")
        assert "⏳ Loading" in first and "ready" not in first, first  # the page came before the model, and said so
        #   (Gradio may put its progress timer, "0.0s", before the line while the loader updates it)
        assert "smollm2-135m ready" in text and "failed" not in text
    finally:
        stop_process(process)
