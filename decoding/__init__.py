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

from decoding.events import Trace  # noqa: E402
from decoding.models import load_model  # noqa: E402
from decoding.run import generate, run_to_trace  # noqa: E402

# the shipped methods register themselves on import; registration order is menu order
import decoding.autoregressive  # noqa: E402, F401, I001
import decoding.momentum  # noqa: E402, F401
import decoding.adadec  # noqa: E402, F401
import decoding.superposed  # noqa: E402, F401
import decoding.extractive  # noqa: E402, F401
import decoding.speculative.strategy  # noqa: E402, F401
import decoding.scaling.methods  # noqa: E402, F401
import decoding.scaling.astar  # noqa: E402, F401
import decoding.scaling.refine  # noqa: E402, F401
import decoding.scaling.specreason  # noqa: E402, F401
import decoding.diffusion.samplers  # noqa: E402, F401

__all__ = ["Trace", "generate", "load_model", "run_to_trace"]
