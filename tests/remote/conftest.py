"""The real engine for tests/remote: llama.cpp's OpenAI-compatible server (llama-cpp-python) serving
the embedded SmolLM2 GGUF on a free loopback port, started once per session and stopped after it."""

import pytest

from decoding.remote.source import ALLOW_ENV


@pytest.fixture(autouse=True)
def remote_allowed(monkeypatch):
    """What the operator of an app that serves remote engines sets."""
    monkeypatch.setenv(ALLOW_ENV, "1")


@pytest.fixture(scope="session")
def server():
    """The server's base URL (http://127.0.0.1:PORT/v1); skips when llama_cpp is not importable."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python[server] is not installed (requirements-dev.txt)")
    from decoding.remote.llama_server import running

    with running() as base_url:
        yield base_url
