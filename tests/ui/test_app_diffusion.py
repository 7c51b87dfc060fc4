"""The Diffusion tab: callbacks as plain functions on the real embedded tiny-diffusion (a short canvas,
then the autoregressive tiny-ar for comparison), the step slider, control visibility, presets, replay,
bad input, Stop; then one diffusion run over real HTTP through the `/generate` API.
"""

from __future__ import annotations

import json
import time

import pytest

import gradio as gr

from decoding.diffusion.lm import DiffusionLM
from decoding.events import Trace, stats
from decoding.models import load_model
from decoding.run import run_to_trace
from conftest import api_run
from ui import diffusion_callbacks as cb
from ui.diffusion_views import DEFAULT_PROMPT, DEFAULT_SETTINGS, FIELDS, views

MODEL = "tiny-diffusion"
LENGTH = 24


def values(**changes) -> dict:
    """Every sampler field by name (what the tab's Generate passes): the defaults with `changes`."""
    settings = DEFAULT_SETTINGS | changes
    return {name: settings[name] for name in FIELDS}


def run_ui(prompt=DEFAULT_PROMPT, length=LENGTH, compare="none", model=MODEL, seed=0, **params) -> list[dict]:
    return list(cb.generate_run(model, prompt, length, seed, compare, **values(**params)))


def merged(updates: list[dict]) -> dict:
    final = {}
    for update in updates:
        final |= update
    return final


def masked_cells(canvas: str) -> int:
    return canvas.count('class="cell masked')


@pytest.fixture(scope="module")
def run() -> tuple[list[dict], Trace, Trace]:
    """24 positions in 8 steps (3 tokens per step), then tiny-ar greedy on the same prompt and length."""
    updates = run_ui(steps=8.0, compare="tiny-ar, greedy")
    final = merged(updates)
    return updates, final["trace"], final["other"]


def test_generate_streams_steps_and_ends_unmasked(run):
    updates, trace, _ = run
    steps = trace.of_kind("diffusion_step")
    assert trace.start.strategy == "diffusion" and trace.start.params["steps"] == 8 and trace.start.chat is False
    assert len(steps) == 8 and trace.finish.stop_reason in ("eos", "max_new_tokens")
    main = updates[: updates.index(next(u for u in updates if u.get("other"))) + 1]
    live = [u for u in main[1:-1] if "canvas" in u]  # while the main run streams (a fast run may show no step)
    assert len(main) >= 3 and live and all(u["step"]["interactive"] is False for u in live)  # slider waits
    s = stats(trace)
    assert s["nfe"] == s["diffusion_steps"] == 8 and s["tokens_per_step"] == 3.0
    assert s["nfe_per_token"] == pytest.approx(1 / 3, abs=1e-3)
    assert -1 not in steps[-1].canvas
    mask = load_model(MODEL).tokenizer.mask_token
    assert trace.finish.text.strip() and mask not in trace.finish.text
    final = merged(main)
    assert masked_cells(final["canvas"]) == 0 and "NFE 8" in final["canvas"]
    for card in ("tokens", "steps", "NFE (model calls)", "tokens per step", "NFE per token", "elapsed (s)"):
        assert f'<div class="k">{card}</div>' in final["stats"]
    assert '<div class="v">3.00</div>' in final["stats"] and "fixed, 8 steps" in final["stats"]
    assert final["order"].data and final["confidence"].data and final["tokens"].data
    assert final["step"]["maximum"] == 7 and final["step"]["value"] == 7 and final["step"]["interactive"] is True
    assert Trace.load(final["dl_json"]).to_dict() == trace.to_dict()


def test_compare_with_the_autoregressive_model(run):
    updates, trace, other = run
    assert other.start.model == "tiny-ar" and other.start.strategy == "greedy" and other.finish is not None
    assert (other.start.prompt, other.start.seed, other.start.max_new_tokens) == \
        (trace.start.prompt, trace.start.seed, trace.start.max_new_tokens)
    last = updates[-1]
    assert "Compared (tiny-ar, greedy)" in last["status"]
    assert "dl-ar-vs-diffusion" in last["compare_html"] and "forward passes (NFE)" in last["compare_html"]
    assert "NFE (model calls)" in last["summary"]


def test_compare_samplers_draws_one_line_each():
    updates = run_ui(length=16, compare="fixed schedule, steps = length / 4")
    final = merged(updates)
    trace, other = final["trace"], final["other"]
    assert stats(trace)["nfe"] == 16 and stats(other)["nfe"] == 4 and other.start.params["steps"] == 4
    names = [t.name for t in final["compare_plot"].data]
    assert names == ["fixed, 16 steps", "fixed, 4 steps"] and final["compare_html"] == ""
    assert "fixed, 4 steps): 16 tokens with 4 model calls" in final["status"]


def test_step_slider_shows_an_earlier_canvas(run):
    _, trace, other = run
    first = cb.choose_step(0.0, trace, other)
    assert first["step"]["value"] == 0 and "step 0 ·" in first["canvas"]
    assert masked_cells(first["canvas"]) == LENGTH - 3  # 3 of 24 unmasked after the first step
    middle = cb.choose_step(3, trace, other)
    assert masked_cells(middle["canvas"]) == LENGTH - 12 and "dl-ar-vs-diffusion" in middle["compare_html"]
    assert masked_cells(cb.choose_step(7, trace, other)["canvas"]) == 0
    assert cb.choose_step(1, None, None) == {}


@pytest.mark.parametrize("sampler, cache, shown", [
    ("fixed", "none", set()),
    ("localleap", "none", {"radius", "anchor_threshold"}),
    ("fixed", "delayed", {"refresh_interval"}),
    ("localleap", "delayed", {"radius", "anchor_threshold", "refresh_interval"}),
])
def test_only_the_relevant_controls_are_shown(sampler, cache, shown):
    out = cb.shown_controls(sampler, cache)
    assert set(out) == {"df:radius", "df:anchor_threshold", "df:refresh_interval"}
    assert {k.removeprefix("df:") for k, v in out.items() if v["visible"]} == shown


def test_hidden_controls_keep_their_defaults():
    from ui.diffusion_views import collect_params

    params = collect_params(values(radius=9.0, refresh_interval=2.0, steps=4.0, threshold=1))
    assert params["radius"] == 4 and params["refresh_interval"] == 4 and params["steps"] == 4
    assert isinstance(params["steps"], int) and params["threshold"] == 1.0 and isinstance(params["threshold"], float)
    params = collect_params(values(sampler="localleap", radius=9.0, threshold=0.5, cache="delayed", refresh_interval=2))
    assert params["radius"] == 9 and params["refresh_interval"] == 2


def test_fields_travel_by_name():
    from ui.diffusion_views import collect_params

    fields = values(steps=4.0)
    assert collect_params(dict(reversed(fields.items()))) == collect_params(fields)  # the order does not matter
    with pytest.raises(ValueError, match="no value for the diffusion parameter `steps`"):
        collect_params({k: v for k, v in fields.items() if k != "steps"})
    with pytest.raises(ValueError, match="unknown diffusion parameter `stepz`; the known ones are steps, block_length, "):
        collect_params(fields | {"stepz": 4})
    with pytest.raises(gr.Error, match="unknown diffusion parameter `stepz`"):
        next(cb.generate_run(MODEL, DEFAULT_PROMPT, LENGTH, 0, "none", **fields, stepz=4))


def test_presets_set_every_control(tmp_path, monkeypatch):
    from decoding import presets

    for _, name in cb.preset_choices():  # the shipped diffusion presets run this strategy
        assert cb.preset_chosen(name)["df:sampler"] in ("fixed", "localleap")
    preset = ("title: Threshold decoding\nmodel: tiny-diffusion\nstrategy: diffusion\nlab: diffusion\n"
              "prompt: In the beginning\nmax_new_tokens: 400\nchat: false\n"
              "params: {threshold: 0.7, block_length: 8}\nnote: Count the model calls.\n")
    (tmp_path / "30-diffusion-test.yaml").write_text(preset)
    monkeypatch.setattr(presets, "PRESETS_DIR", tmp_path)
    assert cb.preset_choices() == [("Threshold decoding", "30-diffusion-test")]
    out = cb.preset_chosen("30-diffusion-test")
    assert out["df:threshold"] == 0.7 and out["df:block_length"] == 8 and out["prompt"] == "In the beginning"
    assert out["length"] == 256 and out["df:steps"] == DEFAULT_SETTINGS["steps"] and "Count the model" in out["note"]
    assert {f"df:{f}" for f in FIELDS} <= out.keys()
    assert cb.preset_chosen("no-such-preset") == {"note": ""}


def test_replay_restores_views_and_settings(run):
    updates, trace, _ = run
    path = next(u["dl_json"] for u in updates if u.get("dl_json"))
    out = cb.replay(path, None, None)
    assert out["trace"].to_dict() == trace.to_dict() and out["other"] is None
    assert out["model"] == MODEL and out["prompt"] == DEFAULT_PROMPT and out["length"] == LENGTH
    assert out["df:steps"] == 8 and out["df:sampler"] == "fixed" and out["df:remasking"] == "low-confidence"
    assert "Replaying" in out["status"] and masked_cells(out["canvas"]) == 0 and out["order"].data


@pytest.mark.parametrize("content, message", [
    ("not json at all", "invalid JSON"),
    ('{"format": "decoding-lab-trace", "version": 1, "events": [{"kind": "diffusion_step"}]}', "malformed"),
    ("greedy", "'greedy' run without diffusion steps"),
    ("best-of-n", "'best-of-n' run without diffusion steps"),
])
def test_a_bad_or_non_diffusion_upload_is_refused(tmp_path, content, message):
    path = tmp_path / "upload.json"
    if content == "greedy":  # a Playground trace
        run_to_trace("tiny-random", "Hello", strategy="greedy", max_new_tokens=3, chat=False).save(path)
    elif content == "best-of-n":  # a Scaling trace
        params = {"n": 2, "max_step_tokens": 2, "reward": "none"}
        trace = run_to_trace("tiny-random", "1+1=", strategy="best-of-n", params=params, max_new_tokens=2, chat=False)
        trace.save(path)
    else:
        path.write_text(content)
    with pytest.raises(gr.Error, match=message):
        cb.replay(str(path), None, None)


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": "  "}, "`prompt` is empty"),
    ({"steps": 25}, r"`steps` must be in \[1, max_new_tokens=24\]"),
    ({"block_length": 5}, "`block_length` must divide max_new_tokens=24"),
    ({"threshold": 1.5}, r"`threshold` must be 0 \(off\) or in \(0, 1\]"),
    ({"threshold": 0.5, "remasking": "random"}, "`remasking` must be low-confidence or margin"),
    ({"sampler": "localleap", "threshold": 0.0}, r"`threshold` must be in \(0, anchor_threshold"),
    ({"model": "tiny-ar"}, "`model` 'tiny-ar' is a causal"),
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"length": 0}, "`max_new_tokens`"),
    ({"compare": "no-such-run"}, "`compare` must be one of"),
])
def test_bad_input_raises_a_clear_gr_error(kwargs, message):
    args = {k: kwargs.pop(k) for k in ("prompt", "length", "compare", "model") if k in kwargs}
    with pytest.raises(gr.Error, match=message):
        next(cb.generate_run(args.get("model", MODEL), args.get("prompt", DEFAULT_PROMPT), args.get("length", LENGTH),
                             0, args.get("compare", "none"), **values(**kwargs)))


def test_closing_the_run_stops_compute(monkeypatch):
    """What Stop does: Gradio closes the callback's generator; the worker thread must stop unmasking."""
    calls = {"n": 0}
    logits = DiffusionLM.logits

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        return logits(self, *args, **kwargs)

    monkeypatch.setattr(DiffusionLM, "logits", counted)
    run = cb.generate_run(MODEL, DEFAULT_PROMPT, 240, 0, "tiny-ar, greedy", **values())  # 240 steps
    trace = next(run)["trace"]
    update = {}
    while "steps so far" not in update.get("status", ""):
        update = next(run)
    assert 'class="cell' in update["canvas"] and update["step"]["interactive"] is False  # the live canvas
    assert masked_cells(update["canvas"]) > 0 and "NFE" in update["status"]
    run.close()
    deadline = time.monotonic() + 10
    while trace.finish is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    settled = calls["n"]
    time.sleep(0.5)
    assert calls["n"] == settled < 200 and trace.finish is not None and trace.finish.stop_reason == "cancelled"
    after = cb.stop_run(trace, None)
    assert "**Stopped** the run after" in after["status"] and masked_cells(after["canvas"]) > 0
    assert Trace.load(after["dl_json"]).finish.stop_reason == "cancelled"
    assert cb.stop_run(None, None) == {"status": "Nothing is running."}


def test_views_before_any_run_and_the_tab_alone():
    out = views(None)
    assert "Statistics appear" in out["stats"] and "waiting" in out["canvas"] and out["summary"] == ""
    assert out["step"]["interactive"] is False
    from ui.diffusion import demo

    assert isinstance(demo(), gr.Blocks)


# Over real HTTP ----------------------------------------------------------------------------------
def test_diffusion_over_the_generate_api(client):
    outputs, result = api_run(client, MODEL, "diffusion", DEFAULT_PROMPT, 16, 0, json.dumps({"steps": 4}), False)
    kinds = [o.get("kind") for o in outputs[:-1]]
    assert kinds[0] == "start" and kinds[-1] == "finish" and kinds.count("diffusion_step") == 4
    assert result["strategy"] == "diffusion" and result["params"]["steps"] == 4
    assert result["stats"]["nfe"] == 4 and result["stats"]["tokens_per_step"] == 4.0


def test_slow_motion_plays_every_step_once_in_order(monkeypatch):
    naps = []
    monkeypatch.setattr(cb, "_pause", naps.append)
    updates = list(cb.generate_run(MODEL, DEFAULT_PROMPT, 12, 0, "none", playback="slow motion, 4 steps/s",
                                   **values(steps=12)))
    frames = [u for u in updates if str(u.get("status", "")).startswith("Slow motion")]
    assert [int(u["status"].split()[3]) for u in frames] == list(range(1, 13)) and naps == [0.25] * 12
    masked = [u["canvas"].count('class="cell masked') for u in frames]
    assert masked == list(range(11, -1, -1))  # one more position committed in every frame
    assert updates[-1]["status"].startswith("**Finished**") and updates[-1]["trace"].finish is not None
    assert cb.playback_rate("live") == 0 and cb.playback_rate(None) == 0
    with pytest.raises(gr.Error, match="`playback` must be one of"):
        list(cb.generate_run(MODEL, DEFAULT_PROMPT, 12, 0, "none", playback="fast forward", **values()))
