"""Child processes the project starts and stops: a free loopback port for a server, and stopping a server
politely, then firmly (the llama.cpp server, `python app.py` in the start-up benchmark and the tests)."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process: subprocess.Popen, wait_s: float = 30) -> None:
    """Terminate `process`, and kill it if it has not ended within `wait_s`."""
    process.terminate()
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=wait_s)
