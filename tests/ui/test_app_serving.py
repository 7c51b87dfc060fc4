"""The Serving tab (issue 29): its callback serves one stream under each chosen policy, streams the timeline,
fills the table as each policy ends, and every policy gives each request the same greedy tokens; bad settings
are named; Stop (closing the callback's generator) stops the model's calls; in the browser, one Generate draws
the three panels and the table."""

from __future__ import annotations

import time

import gradio as gr
import pytest

from decoding.lm import LM
from decoding.serving import POLICIES
from ui import serving_callbacks as cb

TINY = "tiny-random"
ALL_AT_ONCE = "all at once (a class pressing Generate)"


def final(updates) -> dict:
    out: dict = {}
    for update in updates:
        out |= update
    return out


def test_one_generate_serves_the_stream_under_each_policy_and_compares_them(monkeypatch):
    forward = LM.forward
    monkeypatch.setattr(LM, "forward", lambda *a, **k: (time.sleep(0.02), forward(*a, **k))[1])  # a real model's pace
    updates = list(cb.generate_run(TINY, 4, 5, ALL_AT_ONCE, 2.0, 4, list(POLICIES)))
    out = final(updates)
    runs = out["runs"]
    assert list(runs) == list(POLICIES) and "**Finished**" in out["status"]
    tokens = {p: [s.token_ids for s in runs[p].served] for p in POLICIES}
    assert tokens["static"] == tokens["fusion"] == tokens["one-at-a-time"]  # greedy: the same text, other timing
    assert out["table"].count("<tr>") == 1 + len(POLICIES) and "tokens/s" in out["table"]
    assert [a.text.split(":")[0] for a in out["timeline"].layout.annotations[:3]] == list(POLICIES)
    live = [u["timeline"] for u in updates[1:-1] if "timeline" in u]  # drawn while the stream was served
    assert any("running…" in a.text for fig in live for a in fig.layout.annotations), len(updates)
    assert runs["one-at-a-time"].summary()["forward_passes"] > runs["fusion"].summary()["forward_passes"]


@pytest.mark.parametrize("change, message", [
    ({"requests": 0}, "`requests` must be a number in \\[1, 32\\]"),
    ({"rate": 0.0}, "`rate` must be a number in"),
    ({"policies": []}, "choose at least one policy"),
    ({"policies": ["fifo"]}, "unknown: \\['fifo'\\]"),
    ({"arrival": "whenever"}, "`arrival` must be one of"),
    ({"model": "no-such-model"}, "unknown model"),
])
def test_bad_settings_are_named(change, message):
    args = {"model": TINY, "requests": 4, "tokens": 4, "arrival": ALL_AT_ONCE, "rate": 2.0, "batch_size": 4,
            "policies": ["fusion"]} | change
    with pytest.raises(gr.Error, match=message):
        next(cb.generate_run(**args))


def test_closing_the_run_stops_the_model(monkeypatch):
    calls = {"n": 0}
    forward = LM.forward

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        time.sleep(0.01)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(LM, "forward", counted)
    run = cb.generate_run(TINY, 32, 200, ALL_AT_ONCE, 2.0, 4, ["one-at-a-time"])
    while calls["n"] < 10:
        next(run)
    run.close()  # what Stop does
    time.sleep(0.3)
    settled = calls["n"]
    time.sleep(0.5)
    assert calls["n"] == settled < 100
    assert cb.stop_run({})["status"] == "Nothing is running."
