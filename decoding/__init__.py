"""Decoding Lab: watch language models decode, one event at a time.

Public entry points::

    from decoding import load_model, generate, Trace
    lm = load_model("smollm2-135m")
    for event in generate(lm, "Why is the sky blue?", strategy="sample", params={"top_p": 0.9}):
        ...

See ARCHITECTURE.md: strategies are generators of typed events; a Trace collects them;
visualizers and statistics read traces, never models. Importing this package registers every
shipped method (each family's strategy module registers itself).
"""

from decoding.env import configure_offline_env

configure_offline_env()

from decoding.events import Trace
from decoding.models import load_model
from decoding.run import generate, run_to_trace

# the shipped methods register themselves on import; registration order is menu order
import decoding.autoregressive
import decoding.momentum
import decoding.adadec
import decoding.superposed
import decoding.extractive
import decoding.speculative.strategy
import decoding.scaling.methods
import decoding.scaling.astar
import decoding.scaling.refine
import decoding.scaling.specreason
import decoding.diffusion.samplers  # noqa: F401 (imported to register its samplers, like the lines above)

__all__ = ["Trace", "generate", "load_model", "run_to_trace"]
