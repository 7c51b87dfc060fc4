"""The serving timeline (issue 29): one row per request with its waiting, prefill and decoding phases, one panel
per policy, drawn from a real run on the tiny model, also while the run is under way."""

from __future__ import annotations

import pytest

from decoding.run import as_lm
from decoding.serving import Request, serve, serve_live
from visualizers.serving import serving_timeline_figure

TINY = "tiny-random"


@pytest.fixture(scope="module")
def reqs():
    lm = as_lm(TINY)
    return lm, [Request(i, tuple(lm.encode_prompt(p, chat=False)[0]), n, a)
                for i, (p, n, a) in enumerate([("a", 4, 0.0), ("hello", 6, 0.0), ("xyz", 3, 0.03)])]


def bars(fig, phase: str) -> dict:
    """{(panel's y axis, request label): (start, end)} of one phase."""
    out = {}
    for trace in fig.data:
        if trace.name == phase:
            for y, x, base in zip(trace.y, trace.x, trace.base):
                out[(trace.yaxis, y)] = (base, base + x)
    return out


def test_each_request_has_its_phases_in_order_and_each_policy_a_panel(reqs):
    lm, requests = reqs
    runs = [serve(lm, requests, p, batch_size=2) for p in ("static", "fusion")]
    fig = serving_timeline_figure(runs)
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("static: ") and titles[1].startswith("fusion: ") and "tokens/s" in titles[1]
    decoding, prefill = bars(fig, "decoding"), bars(fig, "prefill, first token")
    for axis, run in zip(("y", "y2"), runs):
        for served in run.served:
            key = (axis, f"#{served.request.id}")
            assert prefill[key] == pytest.approx((served.started_s, served.token_times[0]))
            if len(served.token_ids) > 1:
                assert decoding[key] == pytest.approx((served.token_times[0], served.token_times[-1]))
    late = bars(fig, "waiting").get(("y", "#2"))  # static: the late request waited for the batch
    assert late is not None and late[1] == pytest.approx(runs[0].served[2].started_s)


def test_a_run_under_way_draws_and_an_empty_one_says_so(reqs):
    lm, requests = reqs
    live = serve_live(lm, requests, "fusion", batch_size=2)
    next(live), next(live)  # started, first prefill
    run = next(live)
    fig = serving_timeline_figure(run)
    assert "running…" in fig.layout.annotations[0].text and fig.data
    live.close()
    assert "no requests yet" in serving_timeline_figure([]).layout.annotations[0].text
