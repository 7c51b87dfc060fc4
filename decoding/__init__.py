"""Decoding Lab: watch language models decode, one event at a time.

Public entry points::

    from decoding import load_model, generate, Trace
    lm = load_model("smollm2-135m")
    for event in generate(lm, "Why is the sky blue?", strategy="sample", params={"top_p": 0.9}):
        ...

See DESIGN.md in the project docs: strategies are generators of typed events; a Trace collects
them; visualizers and statistics read traces, never models.
"""

from decoding.env import configure_offline_env

configure_offline_env()

from decoding.events import Trace  # noqa: E402
from decoding.models import load_model  # noqa: E402
from decoding.run import generate, run_to_trace  # noqa: E402

__all__ = ["Trace", "generate", "load_model", "run_to_trace"]
