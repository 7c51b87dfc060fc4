"""Input beyond the tabs' limits in a real headless Chromium, against `python app.py` in a subprocess
whose log the tests read (issue 18): handled user errors show a toast and log no traceback; a number
typed past a slider's end is set to that end and the page says so."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import ROOT, free_port, screenshot_path
from test_browser import choose, open_page, set_number

pytestmark = pytest.mark.slow  # Chromium driving the app server

TRACEBACK_SIGNS = ("Traceback (most recent call last)", "didn't return enough output values")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`python app.py` on a free port (no preload: these inputs never reach a model); (url, its log file)."""
    log = tmp_path_factory.mktemp("server") / "app.log"
    port = free_port()
    env = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", DECODING_LAB_PRELOAD="0", PYTHONUNBUFFERED="1")
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"app.py did not start:\n{log.read_text()}")
                time.sleep(0.5)
        yield url, log
    finally:
        proc.terminate()
        proc.wait(30)


def toasts(page, kind: str) -> list[str]:
    return [t for t in page.locator(".toast-body").all_inner_texts() if t.lower().startswith(kind)]


def wait_for_toast(page, text: str) -> None:
    page.wait_for_function("t => [...document.querySelectorAll('.toast-body')].some(e => e.innerText.includes(t))",
                           arg=text)


def test_handled_user_errors_show_a_toast_and_log_no_traceback(server):
    url, log = server
    with open_page(url, "#dl-generate", timeout_ms=60_000) as page:
        set_number(page, "dl-seed", -1)
        page.locator("#dl-generate").click()
        wait_for_toast(page, "`seed` must be an integer in [0, 2**63), got -1")
        set_number(page, "dl-step", 999)
        wait_for_toast(page, "Generate some text first")
        page.get_by_role("tab", name="Diffusion").click()
        set_number(page, "df-seed", -5)
        page.locator("#df-generate").click()
        wait_for_toast(page, "got -5")
        page.wait_for_timeout(1000)  # the server has written what it writes for these events
    text = log.read_text()
    assert not any(sign in text for sign in TRACEBACK_SIGNS), text


def test_a_number_typed_past_a_slider_end_is_set_to_it_and_the_page_says_so(server):
    url, log = server
    with open_page(url, "#dl-generate", timeout_ms=60_000) as page:
        choose(page, "dl-strategy", "sample")
        box = page.locator("#dl-param-sample-temperature input[type=number]")
        box.fill("1000")
        box.press("Tab")
        wait_for_toast(page, "temperature: 1000 is beyond this slider's maximum, so it was set to 2.")
        assert box.input_value() == "2"
        assert "allows (0, inf) through the API and the CLI" in toasts(page, "warning")[-1]
        info = page.locator("#dl-param-sample-temperature").inner_text()
        assert "This slider: 0.05 to 2 (allowed (0, inf)" in info and "Allowed: (0, inf)" not in info
        tokens = page.locator("#dl-max-new-tokens input[type=number]")
        tokens.fill("99999")
        tokens.press("Tab")
        wait_for_toast(page, "Max new tokens: 99999 is beyond this slider's maximum, so it was set to 512.")
        assert tokens.input_value() == "512"
    text = log.read_text()
    assert not any(sign in text for sign in TRACEBACK_SIGNS), text


def test_the_diffusion_length_note_says_what_fits_before_the_run(server):
    url, log = server
    with open_page(url, "#dl-generate", timeout_ms=60_000) as page:
        page.get_by_role("tab", name="Diffusion").click()
        choose(page, "df-model", "tiny-diffusion")  # the tab opens on tiny-parallel's lesson
        page.locator("#df-prompt textarea").fill("And God said")
        set_number(page, "df-length", 256)
        page.wait_for_function("() => document.querySelector('#df-length').innerText.includes('does not fit')")
        note = page.locator("#df-length").inner_text()
        assert "tiny-diffusion has 256 positions; this prompt takes" in note and "⚠ 256 does not fit" in note
        left = int(note.split("leaving ")[1].split(".")[0])
        set_number(page, "df-length", left)
        page.wait_for_function("() => !document.querySelector('#df-length').innerText.includes('does not fit')")
        page.locator("#df-prompt textarea").fill("And God said, Let there be light: and there was light. " * 3)
        page.wait_for_function("() => document.querySelector('#df-length').innerText.includes('does not fit')")
        page.locator("#df-length").screenshot(path=str(screenshot_path("diffusion-length-note.png")))
    text = log.read_text()
    assert not any(sign in text for sign in TRACEBACK_SIGNS), text


def overlaps(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_labels_and_the_error_pill_do_not_cover_text(server):
    """At 1400x1000: each tab's replay label above "Drop File Here", and the "Error" pill of a refused
    Generate beside the status text, not over it."""
    url, log = server
    with open_page(url, "#dl-generate", timeout_ms=60_000) as page:
        page.set_viewport_size({"width": 1400, "height": 1000})
        for tab, prefix in (("Playground", "dl"), ("Speculative", "spec"), ("Scaling", "sc"), ("Diffusion", "df")):
            page.get_by_role("tab", name=tab).click()
            page.locator(f"#{prefix}-export").click()
            upload = page.locator(f"#{prefix}-upload")
            upload.scroll_into_view_if_needed()
            label = upload.locator("label[data-testid='block-label']").bounding_box()
            icon = upload.locator("[data-testid='upload-icon']").bounding_box()  # above "Drop File Here"
            assert label["y"] + label["height"] <= icon["y"], tab
            set_number(page, f"{prefix}-seed", -1)
            page.locator(f"#{prefix}-generate").click()
            pill = page.locator(f"#{prefix}-status .error")
            pill.wait_for()
            lines = page.evaluate("""s => {  // the status text's line boxes
                const range = document.createRange();
                range.selectNodeContents(document.querySelector(s + ' [data-testid=markdown]'));
                return [...range.getClientRects()].map(r => ({x: r.x, y: r.y, width: r.width, height: r.height}));
            }""", f"#{prefix}-status")
            assert lines and not any(overlaps(pill.bounding_box(), line) for line in lines if line["width"]), tab
            set_number(page, f"{prefix}-seed", 0)
