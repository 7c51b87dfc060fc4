"""DECODING_LAB_BATCH: whether visitors' runs of one model share its forward passes (issue 44's batch engine,
`decoding/batching.py`, joined by `ui.worker.run_work`: continuous batching of the app's own visitors), or compute one
at a time (`0`, the default while the engine is new: it is exact in its tests, but not yet checked over real HTTP
nor measured on a quiet machine).

`ENGINE_HONOURS_SWITCH`: this build's worker reads `batching()` (`bench/bench_classroom.py` reports it).
"""

from __future__ import annotations

import os

ENGINE_HONOURS_SWITCH = True


def batching() -> bool:
    """DECODING_LAB_BATCH (default off for now): `1`, `true`, `yes` or `on` let batched strategies share their model's
    steps; anything else serves one run at a time."""
    return os.environ.get("DECODING_LAB_BATCH", "0").strip().lower() in {"1", "true", "yes", "on"}
