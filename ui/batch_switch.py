"""DECODING_LAB_BATCH: whether visitors' runs of one model share its forward passes (issue 44's batch engine
in `ui/worker.py`: continuous batching of the app's own visitors), or compute one at a time as before (`0`).

`ENGINE_HONOURS_SWITCH` says whether this build's worker has such an engine at all; until it does, the app
computes one run at a time whatever the switch says, and `bench/bench_classroom.py` says so beside its columns.
The engine sets it to True where it reads `batching()`.
"""

from __future__ import annotations

import os

ENGINE_HONOURS_SWITCH = False


def batching() -> bool:
    """DECODING_LAB_BATCH (default on): `0`, `false`, `no` or `off` serve one run at a time."""
    return os.environ.get("DECODING_LAB_BATCH", "1").strip().lower() not in {"0", "false", "no", "off"}
