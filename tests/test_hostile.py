"""One hostile visitor against a real `python app.py` on loopback (issue 25): each attack over real HTTP
with its own bound (time, memory, queue), and what another user must still get meanwhile.

The server trusts X-Forwarded-For here (DECODING_LAB_TRUST_PROXY=1, as behind a Space's proxy), so the
test can speak as several clients from one machine: "attacker" and "victim" are addresses to the
server. Every request loop is bounded in count and time and goes only to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, app_process

pytestmark = pytest.mark.slow  # a server process of its own

START_S = 240
UPLOAD_CACHE_MB = 12
UPLOADS_PER_MIN = 10
QUEUED_PER_CLIENT = 2
SECRET = "sk-operator-secret"
MAX_AUDIO_S = 20  # lowered, so the attack files stay small (a few minutes of audio)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    env = {"DECODING_LAB_SHOW_TEST_MODELS": "1", "DECODING_LAB_TRUST_PROXY": "1",
           "GRADIO_TEMP_DIR": str(folder / "gradio"), "DECODING_LAB_EXPORT_DIR": str(folder / "exports"),
           "DECODING_LAB_UPLOAD_CACHE_MB": str(UPLOAD_CACHE_MB), "DECODING_LAB_UPLOADS_PER_MIN": str(UPLOADS_PER_MIN),
           "DECODING_LAB_QUEUED_PER_CLIENT": str(QUEUED_PER_CLIENT), "DECODING_LAB_QUEUE_SIZE": "6",
           # remote engines on, with the operator's key, and no engine listed (a Space that forgot)
           "DECODING_LAB_ALLOW_REMOTE": "1", "DECODING_LAB_OPENAI_API_KEY": SECRET, "OPENAI_API_KEY": SECRET,
           "DECODING_LAB_REMOTE_ENGINES": "",
           "DECODING_LAB_MAX_AUDIO_S": str(MAX_AUDIO_S), "DECODING_LAB_RUN_LIMIT_S": "60"}
    with app_process(folder, START_S, **env) as started:
        yield started | {"folder": folder}


def client_as(server, who: str):
    from gradio_client import Client

    return Client(server["url"], verbose=False, headers={"X-Forwarded-For": who})


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> Path:
    """A real tiny-ar run's trace, as a student would share it."""
    from decoding.run import run_to_trace

    path = tmp_path_factory.mktemp("traces") / "run.json"
    run_to_trace("tiny-ar", "And God said", max_new_tokens=6, chat=False).save(path)
    return path


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def log_tracebacks(server) -> int:
    return server["log"].read_text(errors="replace").count("Traceback")


# Sessions ------------------------------------------------------------------------------------------
def test_flooding_new_sessions_does_not_evict_a_victims_replay(server, small_trace):
    import httpx
    from gradio_client import handle_file

    victim = client_as(server, "victim")
    victim.predict(handle_file(str(small_trace)), "prob", api_name="/replay")
    assert victim.predict(api_name="/partial")  # the Playground's trace export: the replay is in the session
    codes: dict[int, int] = {}
    start = time.monotonic()
    with httpx.Client(timeout=30) as http:
        for _ in range(201):  # the flood: every request names a new session
            r = http.post(server["url"] + "gradio_api/queue/join", headers={"X-Forwarded-For": "attacker"},
                          json={"data": [None], "fn_index": 0, "session_hash": uuid.uuid4().hex})
            codes[r.status_code] = codes.get(r.status_code, 0) + 1
            if time.monotonic() - start > 120:
                break
    assert sum(codes.values()) == 201, codes
    exported = victim.predict(api_name="/partial")
    assert exported and json.loads(Path(exported).read_text())["events"][0]["kind"] == "start"


# Uploads -------------------------------------------------------------------------------------------
def test_uploads_are_rate_limited_per_client_and_the_cache_is_bounded(server):
    import httpx

    blob = os.urandom(5 * 2**20)
    codes = []
    with httpx.Client(timeout=60) as http:
        for i in range(20):  # the 20 anonymous 5 MiB uploads
            r = http.post(server["url"] + "gradio_api/upload", files={"files": (f"junk{i}.bin", blob)},
                          headers={"X-Forwarded-For": "uploader"})
            codes.append(r.status_code)
        assert codes.count(200) == UPLOADS_PER_MIN and codes.count(429) == 20 - UPLOADS_PER_MIN, codes
        assert "DECODING_LAB_UPLOADS_PER_MIN" in r.text
        other = http.post(server["url"] + "gradio_api/upload", files={"files": ("mine.bin", b"x" * 1000)},
                          headers={"X-Forwarded-For": "someone-else"})
        assert other.status_code == 200  # another client still uploads
    cache = server["folder"] / "gradio"
    held = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert held <= (UPLOAD_CACHE_MB + 1) * 2**20, held  # before: 100 MiB kept for an hour


# The queue -----------------------------------------------------------------------------------------
def test_one_client_cannot_fill_the_queue_for_everyone(server):
    import httpx

    with httpx.Client(timeout=30) as http:
        codes, events = [], []
        for i in range(10):  # long runs: the first few process, the rest would wait
            r = http.post(server["url"] + "gradio_api/call/generate", headers={"X-Forwarded-For": "hog"},
                          json={"data": ["tiny-random", "sample", "And God said", 1000, i, "{}", False]})
            codes.append(r.status_code)
            if r.status_code == 200:
                events.append(r.json()["event_id"])
        assert codes.count(429) >= 10 - (3 + QUEUED_PER_CLIENT), codes  # 3 = runs at once by default
        victim = client_as(server, "victim-queue")
        start = time.monotonic()
        job = victim.submit("tiny-ar", "greedy", "And God said", 3, 0, "{}", False, api_name="/generate")
        result = job.result(timeout=300)  # before: "Queue is full" once one client had filled it
        assert result["stats"]["num_tokens"] == 3
        assert time.monotonic() - start < 300


# Bad values sent straight to an endpoint --------------------------------------------------------
def test_out_of_range_values_are_refused_without_a_traceback_in_the_log(server):
    from gradio_client.exceptions import AppError

    client = client_as(server, "prober")
    before = log_tracebacks(server)
    for api, args, message in [("/choose_step", (99999,), "greater than maximum"),
                               ("/preset_chosen_8", ("not a preset",), "not in the list of choices")]:
        for _ in range(5):
            with pytest.raises(AppError, match=message):
                client.predict(*args, api_name=api)
    assert log_tracebacks(server) == before  # before: one traceback per request


def test_generate_with_too_few_values_names_the_inputs(server):
    import httpx

    with httpx.Client(timeout=60) as http:
        r = http.post(server["url"] + "gradio_api/call/generate", json={"data": ["tiny-ar", "greedy", "hi", 3, 0, "{}"]})
        answer = http.get(server["url"] + f"gradio_api/call/generate/{r.json()['event_id']}").text
    assert "takes 7 values (model, strategy, prompt, max_new_tokens, seed, params, chat), got 6" in answer, answer
    assert '"error": null' not in answer  # before: {"error": null}


def test_api_messages_are_plain_text(server):
    from gradio_client.exceptions import AppError

    client = client_as(server, "api-user")
    with pytest.raises(AppError) as err:
        client.predict("tiny-diffusion", "diffusion", "hi", 32, 0, '{"steps": 1, "block_length": 8}', False,
                       api_name="/generate")
    assert "`steps` must be >= the number of blocks" in str(err.value)  # before: "&gt;="


# Secrets ----------------------------------------------------------------------------------------------
def test_the_operators_key_never_goes_to_a_host_a_visitor_names(server):
    """Before: the server sent `Authorization: Bearer <key>` to the visitor's listener and echoed its answer."""
    import http.server
    import threading

    seen = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def _any(self):
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            body = b'{"data": [{"id": "x"}], "leak": "<b>whatever the host says</b>"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _any

        def log_message(self, *args):
            pass

    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        from gradio_client.exceptions import AppError

        client = client_as(server, "visitor")
        url = f"openai:http://127.0.0.1:{listener.server_address[1]}/v1#x"
        with pytest.raises(AppError, match="DECODING_LAB_REMOTE_ENGINES") as err:
            client.predict(url, "greedy", "hi", 3, 0, "{}", False, api_name="/generate")
        assert SECRET not in str(err.value) and "whatever the host says" not in str(err.value)
        time.sleep(0.5)
        assert seen == []  # no request at all, so no key
    finally:
        listener.shutdown()


# Markdown in status lines ------------------------------------------------------------------------------
def test_a_replayed_answer_is_plain_text_in_the_status_line(server, tmp_path):
    from gradio_client import handle_file

    from decoding.run import run_to_trace
    from ui.scaling_views import DEFAULT_PROMPT

    trace = json.loads(run_to_trace("tiny-math", DEFAULT_PROMPT, strategy="best-of-n", params={"n": 2},
                                    max_new_tokens=120, chat=False).to_json())
    trace["events"][-1]["extra"]["answer"] = "[Session expired: click to sign in](http://evil.example/login)"
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    client = client_as(server, "student")
    outputs = client.predict(handle_file(str(path)), api_name="/replay_2")  # the Scaling tab's replay
    status = next(o for o in outputs if isinstance(o, str) and "Replaying" in o)
    assert "Session expired" in status and "](" not in status and "http://" not in status  # no Markdown link


# Replays: structures that loop, drawing that grew with the square of the marks -----------------------
def _bench_draw():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_draw", ROOT / "bench" / "bench_draw.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _finished(events, strategy: str, extra: dict | None = None):
    from decoding.events import RunFinished, Trace

    b = _bench_draw()
    return Trace([b.start(strategy), *events, RunFinished(text="", token_ids=[], stop_reason="max_new_tokens",
                                                         elapsed_s=1.0, extra=extra or {})])


@pytest.fixture(scope="module")
def hostile_traces(tmp_path_factory) -> dict[str, Path]:
    """The issue's small files: a looping A* tree; the three quadratic ones at the trace limits."""
    b = _bench_draw()
    folder = tmp_path_factory.mktemp("hostile-traces")
    steps, finish = b.astar_steps(expansions=3, n=2)
    looping = json.loads(_finished(steps, "a-star", finish).to_json())
    looping["events"][2]["extra"]["expanded"]["id"] = looping["events"][2]["extra"]["nodes"][0]["id"]  # its own parent
    traces = {"looping-astar": looping,
              "diffusion-block-1": json.loads(_finished(b.diffusion_steps(length=2048, steps=2), "diffusion").to_json()),
              "scaling-300-resamplings": json.loads(_finished(b.scaling_steps(steps=300, n=2), "particle-filter",
                                                              {"method": "particle-filter", "chosen": 0,
                                                               "answer": None, "votes": {}, "particles": []}).to_json()),
              "spec-400-root-children": json.loads(b.spec_trace(children=400).to_json())}
    paths = {}
    for name, trace in traces.items():
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(trace), encoding="utf-8")
    return paths


REPLAY_OF = {"looping-astar": "/replay_2", "scaling-300-resamplings": "/replay_2",
             "spec-400-root-children": "/replay_1", "diffusion-block-1": "/replay_3"}


def test_a_looping_search_tree_is_refused_at_once_without_growing_memory(server, hostile_traces):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    client = client_as(server, "looper")
    before = rss_mb(server["process"].pid)
    start = time.monotonic()
    with pytest.raises(AppError, match="loop"):
        client.predict(handle_file(str(hostile_traces["looping-astar"])), api_name="/replay_2")
    assert time.monotonic() - start < 30  # before: never (577 MB -> 3.1 GB in 20 s, then the process died)
    assert rss_mb(server["process"].pid) - before < 300
    assert server["process"].poll() is None


@pytest.mark.parametrize("name", ["diffusion-block-1", "scaling-300-resamplings", "spec-400-root-children"])
def test_traces_at_the_limits_replay_in_seconds(server, hostile_traces, name):
    from gradio_client import handle_file

    client = client_as(server, f"replayer-{name}")
    start = time.monotonic()
    client.predict(handle_file(str(hostile_traces[name])), api_name=REPLAY_OF[name])
    assert time.monotonic() - start < 15  # before: 28 s, 47.6 s, 20.8 s (and 20 min for a 2,048-position trace)


def test_another_users_short_request_is_not_held_by_a_hostile_replay(server, hostile_traces, small_trace):
    import threading

    from gradio_client import handle_file

    hostile = client_as(server, "hostile-replayer")
    done = threading.Event()

    def replay_all():
        try:
            for name in ("diffusion-block-1", "scaling-300-resamplings", "spec-400-root-children") * 2:
                with contextlib.suppress(Exception):
                    hostile.predict(handle_file(str(hostile_traces[name])), api_name=REPLAY_OF[name])
        finally:
            done.set()

    thread = threading.Thread(target=replay_all, daemon=True)
    thread.start()
    time.sleep(1.0)  # the hostile replays are under way
    user = client_as(server, "other-user")
    start = time.monotonic()
    result = user.predict("tiny-ar", "greedy", "And God said", 8, 0, "{}", False, api_name="/generate")
    took_generate = time.monotonic() - start
    start = time.monotonic()
    user.predict(handle_file(str(small_trace)), "prob", api_name="/replay")
    took_replay = time.monotonic() - start
    assert result["stats"]["num_tokens"] == 8
    assert took_generate < 10 and took_replay < 10, (took_generate, took_replay)  # before: 14 s and 26.5 s
    assert done.wait(120)


def test_a_replayed_formula_token_is_text_in_the_exported_csv(server, small_trace, tmp_path):
    import csv

    from gradio_client import handle_file

    trace = json.loads(small_trace.read_text())
    token = next(e for e in trace["events"] if e["kind"] == "token")
    token["token_text"] = '=HYPERLINK("http://evil.example","click")'
    path = tmp_path / "formula.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    client = client_as(server, "spreadsheet-user")
    client.predict(handle_file(str(path)), "prob", api_name="/replay")
    exported = client.predict(api_name="/partial_1")  # the Playground's token CSV
    assert str(exported).endswith(".csv")
    cells = [cell for row in csv.reader(Path(exported).read_text(encoding="utf-8").splitlines()) for cell in row]
    assert not any(cell.startswith(("=", "+", "-", "@")) for cell in cells)  # before: =HYPERLINK(...) as is
    assert any("HYPERLINK" in cell for cell in cells)


def test_deep_links_are_off(server):
    """Gradio's deep-link route writes any session's components (values included) to disk on request."""
    import httpx

    r = httpx.get(server["url"] + "gradio_api/deep_link", params={"session_hash": "anything"}, timeout=30)
    assert r.status_code == 404 and "export the trace" in r.text


# Issue 48: audio lengths, microphone pieces, a trace's settings, the document preview ---------------------------------
def _hidden_length_audio(folder: Path, fmt: str) -> Path:
    """Two and a half minutes of audio (8 kHz: a WAV stays under the upload cap); a FLAC whose STREAMINFO leaves the
    total sample count blank (the issue's attack: `sox --i -D` then says 0), the others as sox writes them."""
    import subprocess

    path = folder / f"long.{fmt}"
    subprocess.run(["sox", "-D", "-n", "-r", "8000", "-c", "1", *(["-b", "16"] if fmt != "ogg" else []), str(path),
                    "synth", "150", "whitenoise", "vol", "0.1"], check=True)
    if fmt == "flac":
        raw = bytearray(path.read_bytes())
        raw[21] &= 0xF0  # STREAMINFO's 36-bit total sample count: its high 4 bits, then bytes 22-25
        raw[22:26] = b"\0\0\0\0"
        path.write_bytes(bytes(raw))
        said = subprocess.run(["sox", "--i", "-D", str(path)], capture_output=True, text=True).stdout.strip()
        assert float(said or 0) == 0  # the header says nothing of its length
    return path


@pytest.mark.parametrize("fmt", ["flac", "wav", "ogg", "aiff", "au"])
def test_an_audio_file_is_measured_by_its_samples_not_its_header(server, tmp_path, fmt):
    """Before: a 364 KB FLAC of 2 h started a run of 7,200 chunks (a 6 h one: +3.1 GB and a 660 MB temporary WAV)."""
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    path = _hidden_length_audio(tmp_path, fmt)
    client = client_as(server, f"audio-{fmt}")
    before, tracebacks = rss_mb(server["process"].pid), log_tracebacks(server)
    start = time.monotonic()
    with pytest.raises(AppError, match=rf"`audio` long.{fmt} lasts more than {MAX_AUDIO_S} seconds") as err:
        client.predict(handle_file(str(path)), "local-agreement", 1.0, "{}", "", api_name="/transcribe")
    assert time.monotonic() - start < 20  # refused at the limit's worth of decoding, before any model work
    assert rss_mb(server["process"].pid) - before < 100
    assert str(server["folder"]) not in str(err.value) and "gradio" not in str(err.value)  # no server path
    assert log_tracebacks(server) == tracebacks


def test_a_path_the_server_will_not_read_is_refused_without_its_folders(server):
    """Before: Gradio's "Cannot move ..." message named the app's folder and the server's temp folder."""
    import httpx

    with httpx.Client(timeout=60) as http:
        r = http.post(server["url"] + "gradio_api/call/transcribe",
                      json={"data": [{"path": "/etc/hostname", "meta": {"_type": "gradio.FileData"}}, "local-agreement",
                                     1.0, "{}", ""]})
        answer = http.get(server["url"] + f"gradio_api/call/transcribe/{r.json()['event_id']}").text
    assert "error" in answer
    assert str(ROOT) not in answer and "/etc/" not in answer and str(server["folder"]) not in answer, answer


@pytest.mark.parametrize("rate, samples, message", [
    (1, (10_000,), "sample rate must be 8,000-192,000 Hz, got 1"),  # the 1 Hz header
    (0, (10_000,), "sample rate must be 8,000-192,000 Hz, got 0"),  # was a ZeroDivisionError
    (48_000, (480, 64), "must have 1-8 channels, got 64"),
    (16_000, (16_000 * 21,), "the recording lasts 21.0 seconds, more than the limit"),
])
def test_a_microphone_piece_is_checked_from_its_header_before_any_conversion(monkeypatch, rate, samples, message):
    """Before: a 20 KB WAV saying 1 Hz cost 12 s of CPU and +2.3 GB before its refusal; 0 Hz raised
    ZeroDivisionError. The header alone is read: no conversion runs for a piece that is refused."""
    import numpy as np

    from gradio.exceptions import Error

    from ui import speech_callbacks as cb

    monkeypatch.setenv("DECODING_LAB_MAX_AUDIO_S", str(MAX_AUDIO_S))
    monkeypatch.setattr(cb, "to_16k_mono", lambda *a: pytest.fail("converted before it was checked"))
    live = cb.LiveFeed([{}], "")
    start = time.monotonic()
    with pytest.raises(Error, match=message):
        cb.mic_piece((rate, np.zeros(samples, np.int16)), live)
    assert time.monotonic() - start < 1


def test_the_document_preview_is_linear_in_the_texts_length():
    """Before: 1,170 planted lines (39,863 characters) took 21.5 s in `/preview`, each fact re-counting the tokens
    before it. One tokenisation now; the spans are those of counting the text before each fact."""
    from decoding.longctx.document import count_tokens
    from decoding.models import load_model
    from ui.longctx_callbacks import MAX_NEEDLES, context_marks

    tokenizer = load_model("smollm2-135m", progress=None).tokenizer
    text = "\n".join(f"The secret number of N{i} is 7." for i in range(1170))
    start = time.monotonic()
    marks = context_marks(tokenizer, text, {"evidence": "The secret number of N1000 is 7."})
    took = time.monotonic() - start
    assert took < 3, took
    assert len(marks["needles"]) == MAX_NEEDLES and marks["context_tokens"] == count_tokens(tokenizer, text)
    for needle in marks["needles"][::16]:  # the slow count, for a few
        at = text.index(f"The secret number of {needle['name']} is")
        assert needle["start"] == count_tokens(tokenizer, text[:at])
    at = text.index("The secret number of N1000 is 7.")
    assert marks["evidence"][0] == count_tokens(tokenizer, text[:at])


def test_previews_do_not_wait_for_each_other(server):
    """Before: the preview served one request at a time for everyone (three attacker previews: a visitor waited 89 s)."""
    import threading

    text = "\n".join(f"The secret number of N{i} is 7." for i in range(1170))
    attacker, victim = client_as(server, "previewer"), client_as(server, "reader")
    args = ("smollm2-135m", "own", 0, "own", "What is the secret number of N7?", "", text)
    victim.predict(*args, api_name="/preview")  # the tokenizer is loaded
    threads = [threading.Thread(target=lambda: attacker.predict(*args, api_name="/preview"), daemon=True)
               for _ in range(2)]
    for thread in threads:
        thread.start()
    start = time.monotonic()
    shown = victim.predict(*args, api_name="/preview")
    assert time.monotonic() - start < 10
    assert "N7" in str(shown)
    for thread in threads:
        thread.join(60)


def _rag_trace(folder: Path) -> Path:
    """A real rag run (tiny-ar on a short text of its own) exported, its `mode` set to the issue's payload."""
    from decoding.run import run_to_trace

    context = "\n".join(f"And the {w} went out into the field." for w in ("king", "servant", "woman", "priest"))
    trace = json.loads(run_to_trace("tiny-ar", f"{context}\n\nWho went out?", strategy="rag", max_new_tokens=3,
                                    chat=False).to_json())
    trace["events"][0]["params"]["mode"] = HOSTILE_MODE
    path = folder / "rag.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path


HOSTILE_MODE = ('<img src="https://evil.example/pixel.gif?victim=1"><a href="https://evil.example/login">Session '
                'expired: sign in again</a>')


def test_a_traces_settings_are_checked_before_they_reach_the_page(server, tmp_path):
    """Before: a shared rag trace's `mode` went into the control, and Gradio's refusal at Generate rendered its HTML
    (a link and a tracking image) in the error popup. Chromium, on the real app: no <img>/<a> from the trace and no
    request to its host, after the replay and after Generate."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("test_browser", ROOT / "tests" / "ui" / "test_browser.py")
    browser = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(browser)
    path = _rag_trace(tmp_path)
    asked = []
    with browser.open_page(server["url"], "#dl-generate", timeout_ms=120_000) as page:
        page.on("request", lambda request: asked.append(request.url))
        page.get_by_role("tab", name="Long context").click()
        page.wait_for_selector("#lc-status")
        page.locator("#lc-export .label-wrap").first.click()
        page.locator("#lc-upload input[type=file]").set_input_files(str(path))
        page.wait_for_function("() => document.querySelector('#lc-status').innerText.includes('Replaying')")
        status = page.locator("#lc-status").inner_text()
        assert "settings are not restored" in status and "`mode` must be one of" in status.replace("‘", "`"), status
        page.locator("#lc-generate").click()
        page.wait_for_timeout(2000)  # a refusal of Gradio's comes at once
        page.screenshot(path=str(tmp_path / "rag-replay.png"))
        assert page.locator("img[src*='evil.example'], a[href*='evil.example']").count() == 0
        page.locator("#lc-stop").click()
    assert not [url for url in asked if "evil.example" in url]
