"""Serve the embedded SmolLM2 GGUF with llama.cpp's OpenAI-compatible server (llama-cpp-python).

    python -m decoding.remote.llama_server --port 8000
    python -m decoding run --model "openai:http://127.0.0.1:8000/v1#smollm2-135m" --prompt "..."

The tests and `bench/bench_remote.py` start it the same way, as a real engine on loopback. It needs
`pip install 'llama-cpp-python[server]'` (requirements-dev.txt). `logits_all` is on: without it the
server cannot return per-token log-probabilities. `interrupt_requests` is off: by default a new
request aborts the stream in progress, so two users of one server would cut each other's runs;
off, requests queue, and a run ends only when its client closes the stream (Stop).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from typing import Iterator

from decoding import embedded
from decoding.processes import free_port, stop
from decoding.remote.client import Client, RemoteError

ALIAS = "smollm2-135m"  # the model name the server answers to (what comes after # in the source)


def command(port: int, threads: int = 1, gguf: str | None = None) -> list[str]:
    gguf = gguf or embedded.ensure_gguf(embedded.SMOLLM2_135M, lambda message: None)
    return [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", ALIAS,
            "--logits_all", "true", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--interrupt_requests", "false"]


@contextlib.contextmanager
def running(port: int | None = None, threads: int = 1, wait_s: float = 120.0, log=subprocess.DEVNULL) -> Iterator[str]:
    """Start the server, wait until it lists its model, yield its base URL; stop it on the way out."""
    port = port or free_port()
    process = subprocess.Popen(command(port, threads), stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait(process, Client(base_url, timeout_s=5.0), wait_s)
        yield base_url
    finally:
        stop(process, wait_s=10)


def _wait(process: subprocess.Popen, client: Client, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama.cpp's server exited with status {process.returncode} before answering")
        with contextlib.suppress(RemoteError):
            if ALIAS in client.models():
                return
        time.sleep(0.25)
    raise RuntimeError(f"llama.cpp's server did not answer within {wait_s:g} s")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m decoding.remote.llama_server", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    subprocess.run(command(args.port, args.threads), check=False)


if __name__ == "__main__":
    main()
