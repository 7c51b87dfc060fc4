"""Process-wide environment for offline, telemetry-free operation.

Imported first by the package: Hugging Face telemetry and Gradio analytics are switched off
before either library is imported, so starting the app or the CLI contacts no outside host.
Whether the hub is reachable is only checked when a hub model is first requested
(`hub_reachable`), and the answer is remembered by setting ``HF_HUB_OFFLINE=1`` so that
later calls fail fast instead of waiting on network time-outs.
"""

from __future__ import annotations

import os
import socket

HUB_HOST = "huggingface.co"  # the host from_pretrained talks to (HF_ENDPOINT may override)
PROBE_TIMEOUT_S = 2.0  # one TCP connect; DNS failure on a closed network answers at once

_probe_result: bool | None = None


def env_int(name: str, default: int, low: int = 1) -> int:
    """An integer setting from the environment: `default` when unset or blank; ValueError naming the
    variable when it is not an integer >= `low`."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw[:40]!r}") from None
    if value < low:
        raise ValueError(f"environment variable {name} must be >= {low}, got {value}")
    return value


def configure_offline_env() -> None:
    """Switch off telemetry and analytics; keep any value the user has set."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def hub_offline_forced() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def hub_reachable() -> bool:
    """True when the Hugging Face hub answers a TCP connect; sets HF_HUB_OFFLINE=1 otherwise.

    Checked once per process, and only when a model is loaded by hub id.
    """
    global _probe_result
    if hub_offline_forced():
        return False
    if _probe_result is None:
        endpoint = os.environ.get("HF_ENDPOINT", f"https://{HUB_HOST}")
        host = endpoint.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
        try:
            with socket.create_connection((host, 443), timeout=PROBE_TIMEOUT_S):
                _probe_result = True
        except OSError:
            _probe_result = False
        if not _probe_result:
            os.environ["HF_HUB_OFFLINE"] = "1"
            _set_hf_offline_constant()
    return _probe_result


def _set_hf_offline_constant() -> None:
    """huggingface_hub reads HF_HUB_OFFLINE at import time; update it if already imported."""
    import sys

    for module_name in ("huggingface_hub.constants", "transformers.utils.hub"):
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, "HF_HUB_OFFLINE"):
            module.HF_HUB_OFFLINE = True


def configure_torch_threads() -> int:
    """Give torch all cores but one (DECODING_LAB_TORCH_THREADS or OMP_NUM_THREADS override).

    The web server, the live redraws (and, on a laptop, the browser) need a core of their own:
    on a 2-core machine two busy intra-op threads plus that work oversubscribe the CPU and decoding
    slows several-fold; the command line is as busy a neighbour on a shared machine (a run there went at 2.8
    tokens/s with every core and 14.4 with one). Called by the app's and the CLI's entry points, not on import.
    """
    import torch

    if os.environ.get("DECODING_LAB_TORCH_THREADS", "").strip():
        threads = env_int("DECODING_LAB_TORCH_THREADS", 1)
    elif os.environ.get("OMP_NUM_THREADS", "").strip():
        return torch.get_num_threads()
    else:
        threads = max(1, (os.cpu_count() or 1) - 1)
    torch.set_num_threads(threads)
    return threads
