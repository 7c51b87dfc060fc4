"""A bounded load test against `python app.py` on loopback (issue 12): 20 clients at once, each with its
own seed, through the `/generate` API on tiny-ar; each must get exactly the tokens it gets when it runs
alone (no cross-talk between requests), every request must be answered, and the server must write no
file. The server is a process of its own, started and stopped here; every wait has a generous limit
(a busy CI machine is slow) and nothing asserts on tight timings.
"""

from __future__ import annotations

import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import api_run, app_process

pytestmark = pytest.mark.slow  # a server process of its own

MODEL = "tiny-ar"
CLIENTS = 20
TOKENS = 6
START_S = 240  # importing torch and gradio and building the tabs, on a loaded machine
RUN_S = 300  # all requests together; each alone takes well under a second


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`python app.py` on a free loopback port; its URL, log and export folder."""
    folder = tmp_path_factory.mktemp("load")
    # the 20 clients share one address here, as a class behind one school address would: the default bounds hold
    # them (each is a session of its own; ui/admission.py)
    with app_process(folder, START_S, DECODING_LAB_EXPORT_DIR=str(folder / "exports")) as started:
        yield started | {"exports": folder / "exports"}


def tokens_of(client, seed: int) -> list[int]:
    """A sampled run of tiny-ar with `seed`; the token ids it got."""
    _, result = api_run(client, MODEL, "sample", "And God said", TOKENS, seed, json.dumps({"temperature": 1.5}), False)
    assert result["stats"]["stop_reason"] in ("max_new_tokens", "eos"), result
    return result["token_ids"]


def client_run(client, seed: int) -> list[int]:
    """One client's run (its own session); the client is closed after."""
    try:
        return tokens_of(client, seed)
    finally:
        client.close()


def test_twenty_clients_at_once_get_what_each_gets_alone(server):
    seeds = range(1, CLIENTS + 1)
    from gradio_client import Client

    with contextlib.closing(Client(server["url"], verbose=False)) as client:
        alone = {seed: tokens_of(client, seed) for seed in seeds}  # one at a time
    assert len({tuple(t) for t in alone.values()}) >= CLIENTS // 2  # distinct seeds differ: cross-talk would show

    # each client opens its session first (it reads the app's config: 0.9 MB, a fraction of a second each), then
    # all 20 runs are submitted at once: what is under test is 20 runs in the queue together, not 20 page loads
    clients = {seed: Client(server["url"], verbose=False) for seed in seeds}
    start = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = {seed: pool.submit(client_run, clients[seed], seed) for seed in seeds}
        together = {seed: future.result(timeout=RUN_S) for seed, future in futures.items()}
    took = time.monotonic() - start

    assert together == alone, [s for s in seeds if together[s] != alone[s]]
    assert took < RUN_S
    assert not server["exports"].exists()  # 40 runs, no file
    assert "Traceback" not in server["log"].read_text()
