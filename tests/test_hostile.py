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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    env = {"DECODING_LAB_SHOW_TEST_MODELS": "1", "DECODING_LAB_TRUST_PROXY": "1",
           "GRADIO_TEMP_DIR": str(folder / "gradio"), "DECODING_LAB_EXPORT_DIR": str(folder / "exports"),
           "DECODING_LAB_UPLOAD_CACHE_MB": str(UPLOAD_CACHE_MB), "DECODING_LAB_UPLOADS_PER_MIN": str(UPLOADS_PER_MIN),
           "DECODING_LAB_QUEUED_PER_CLIENT": str(QUEUED_PER_CLIENT), "DECODING_LAB_QUEUE_SIZE": "6",
           # remote engines on, with the operator's key, and no engine listed (a Space that forgot)
           "DECODING_LAB_ALLOW_REMOTE": "1", "DECODING_LAB_OPENAI_API_KEY": SECRET, "OPENAI_API_KEY": SECRET,
           "DECODING_LAB_REMOTE_ENGINES": ""}
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
