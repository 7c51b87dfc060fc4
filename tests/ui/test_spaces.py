"""As a Space runs it (issue 33): with the real `spaces` package (what a Gradio Space has installed) and the
environment a Space sets (SYSTEM=spaces, SPACE_ID), the app starts, serves and generates, the model-bound
events run under `spaces.GPU` where ZeroGPU would apply it and nothing else does, and no request leaves for
the hub (or anywhere else) while it starts and runs."""

from __future__ import annotations

import http.server
import inspect
import sys
import threading

import pytest

spaces = pytest.importorskip("spaces")  # requirements-dev.txt pins it, as a Space has it

from conftest import ROOT  # noqa: E402 (after the skip)
from ui import worker  # noqa: E402

SPACE_ENV = {"SYSTEM": "spaces", "SPACE_ID": "decoding-lab/test-space", "SPACES_GRADIO_AUTO_WRAP": "true"}


@pytest.fixture
def auto_wrap_restored():
    from spaces import gradio as spaces_gradio

    before = spaces_gradio.gradio_auto_wrap_enabled
    yield spaces_gradio
    spaces_gradio.gradio_auto_wrap_enabled = before


def test_on_a_space_the_auto_wrap_is_off_and_zero_gpu_gets_spaces_gpu(monkeypatch, auto_wrap_restored):
    for name, value in SPACE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    spaces.enable_gradio_auto_wrap()
    identity = worker._zero_gpu_decorator()  # a CPU Space: no GPU to ask for
    assert identity(len) is len and auto_wrap_restored.gradio_auto_wrap_enabled is False
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert worker._zero_gpu_decorator() is spaces.GPU
    monkeypatch.delenv("SYSTEM")
    monkeypatch.delenv("SPACES_ZERO_GPU")
    spaces.enable_gradio_auto_wrap()
    assert worker._zero_gpu_decorator()(len) is len and auto_wrap_restored.gradio_auto_wrap_enabled  # not a Space


@pytest.mark.slow  # builds the whole app (four tabs and the API: a few seconds)
def test_exactly_the_model_bound_events_run_under_spaces_gpu(monkeypatch):
    """What ZeroGPU would wrap: every event that computes with a model (each tab's Generate and its other
    model runs, Compare, the API), and nothing else (a view update must not wait for a GPU)."""
    wrapped = []

    def spy(fn):
        wrapped.append(fn)
        return fn

    monkeypatch.setattr(worker, "gpu", spy)
    sys.path.insert(0, str(ROOT))
    from app import build_app

    demo = build_app()
    model_bound, others = [], []
    for block_fn in demo.fns.values():
        if block_fn.fn is None:
            continue
        is_model = block_fn.concurrency_id == worker.MODEL_CONCURRENCY_ID
        under_gpu = getattr(block_fn.fn, "__wrapped__", None) in wrapped
        (model_bound if is_model else others).append((block_fn.name, under_gpu))
        assert not is_model or inspect.isasyncgenfunction(block_fn.fn), block_fn.name
    assert len(model_bound) >= 8  # Generate in four tabs, the Playground's branch, Compare, /generate, /compare
    assert all(under for _, under in model_bound), model_bound
    assert not any(under for _, under in others), [name for name, under in others if under]
    names = {name for name, _ in model_bound}
    assert {"api_generate", "api_compare"} <= names, names


class Recorder(http.server.BaseHTTPRequestHandler):
    """Stands in for the hub (HF_ENDPOINT) and for every outside host (as the HTTP(S) proxy): records each
    request and answers 404 (a CONNECT is refused the same way)."""

    seen: list[str] = []

    def _record(self):
        self.seen.append(f"{self.command} {self.path}")
        self.send_error(404)

    do_GET = do_HEAD = do_POST = do_PUT = do_CONNECT = _record

    def log_message(self, *args):
        pass


@pytest.mark.slow  # the app server in its own process, SmolLM2 preloaded
def test_the_app_starts_and_generates_as_a_space_without_a_request_outside(tmp_path):
    from gradio_client import Client

    from decoding import embedded
    from decoding.models import load_model

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_startup import start_app

    load_model("smollm2-135m", progress=None)  # its files in the cache first (a Space downloads them once)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    outside = f"http://127.0.0.1:{server.server_port}"
    env = SPACE_ENV | {"HF_ENDPOINT": outside, "HTTP_PROXY": outside, "HTTPS_PROXY": outside,
                       "NO_PROXY": "127.0.0.1,localhost", "HF_HUB_OFFLINE": "0"}
    got: dict = {}

    def generate(url):
        client = Client(url, verbose=False)
        job = client.submit("smollm2-135m", "greedy", "Hello", 4, 0, "{}", True, api_name="/generate")
        got["summary"] = job.result(timeout=240)

    Recorder.seen.clear()
    try:
        times = start_app(tmp_path, embedded.cache_dir(), env=env, on_served=generate)
    finally:
        server.shutdown()
    log = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("server-*.log"))
    # Gradio itself, under SYSTEM=spaces, logs a few "Exception ignored in BaseEventLoop.__del__" tracebacks at
    # start-up (a bare gr.Blocks app does too): those are its own; any other traceback is the app's
    gradio_noise = log.count("Exception ignored in: <function BaseEventLoop.__del__")
    assert log.count("Traceback") == gradio_noise, log[-3000:]
    assert Recorder.seen == [], Recorder.seen  # no hub, no analytics, nothing outside
    assert got["summary"]["stats"]["num_tokens"] == 4 and got["summary"]["model"] == "smollm2-135m", got
    print(f"\nAs a Space: page served after {times['served_s']:.1f} s, the default model ready after "
          f"{times['ready_s']:.1f} s")
