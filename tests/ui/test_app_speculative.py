"""The Speculative tab: callbacks as plain functions on the real SmolLM2-135M (prompt lookup), replay,
bad input, Stop; then one browser run that saves the screenshot the README shows (see conftest.screenshot_path).
"""

from __future__ import annotations


import pytest

from conftest import screenshot_path

import gradio as gr

from decoding.events import Trace
from decoding.run import run_to_trace
from test_app import assert_closing_stops_compute, count_forward_passes
from ui import speculative_callbacks as cb
from ui.exports import download
from ui.speculative_views import DEFAULT_PROMPT, DEFAULT_SETTINGS, SPEC_FIELDS

MODEL = "smollm2-135m"
SCREENSHOT = screenshot_path("screenshot-speculative.png")  # a temp folder; DECODING_LAB_SCREENSHOTS=1 retakes assets/


def values(**changes) -> dict:
    """Every speculative field by name (what the tab's Generate passes): the defaults with `changes`."""
    settings = DEFAULT_SETTINGS | changes
    return {name: settings[name] for name in SPEC_FIELDS}


def run_ui(prompt=DEFAULT_PROMPT, max_new_tokens=16, compare=True, model=MODEL, **params) -> list[dict]:
    return list(cb.generate_run(model, prompt, max_new_tokens, 0, True, compare, **values(**params)))


@pytest.fixture(scope="module")
def run() -> tuple[list[dict], Trace]:
    updates = run_ui()
    return updates, updates[0]["trace"]


@pytest.mark.slow  # the module's real-model run
def test_generate_streams_rounds_then_compares_with_plain_decoding(run):
    updates, trace = run
    final = {}
    for update in updates:
        final |= update
    assert trace.finish.stop_reason in ("max_new_tokens", "eos") and trace.start.params["drafter"] == "prompt-lookup"
    rounds = trace.of_kind("spec_round")
    assert rounds and final["text"].count("data-round=") == len(trace.of_kind("token")) == 16
    assert final["tree"].data and final["acceptance"].data and final["overlap"].data
    assert "acceptance rate" in final["stats"] and "target passes / token" in final["stats"]
    assert "target passes per token" in final["status"] and "mean accepted length" in final["status"]
    assert "×" in final["status"] and "speed-up" in final["summary"] and "vs" in final["summary"]
    assert final["baseline"]["num_tokens"] >= 1 and final["baseline"]["tokens_per_s"] > 0
    assert final["round"]["maximum"] == max(1, len(rounds) - 1) and final["round"]["interactive"] == (len(rounds) > 1)
    assert [p for _, p in final["position"]["choices"]] == [d["parent"] for d in rounds[-1].dists]
    assert "dl_json" not in final and Trace.load(download(final["trace"])).to_dict() == trace.to_dict()
    plain = final["plain"]  # the comparison run, exported by its own button
    assert plain.start.strategy in ("greedy", "sample") and len(plain.of_kind("token")) == final["baseline"]["num_tokens"]
    assert Trace.load(download(plain)).to_dict() == plain.to_dict()


@pytest.mark.slow  # the module's real-model run
def test_round_and_position_pick_the_tree_and_the_overlap_view(run):
    _, trace = run
    first = trace.of_kind("spec_round")[0]
    out = cb.choose_round(0.0, trace, None)
    assert out["round"]["value"] == 0 and "round 0" in out["tree"].layout.title.text.lower()
    parent = first.dists[-1]["parent"]
    out = cb.choose_position(parent, 0, trace, None)
    assert out["position"]["value"] == parent and out["overlap"].data
    assert cb.choose_round(3, None, None) == {}


@pytest.mark.slow  # the module's real-model run
def test_replay_restores_views_and_settings(run):
    updates, trace = run
    out = cb.replay(download(trace), None, None)
    assert out["trace"].to_dict() == trace.to_dict() and out["baseline"] is None
    assert out["spec:drafter"] == "prompt-lookup" and out["prompt"] == DEFAULT_PROMPT and out["model"] == MODEL
    assert out["text"].count("data-round=") == 16 and "Replaying" in out["status"]


@pytest.mark.parametrize("content, message", [
    ("not json at all", "invalid JSON"),
    ('{"format": "decoding-lab-trace", "version": 1, "events": [{"kind": "token"}]}', "malformed"),
    ("greedy", "without speculative rounds"),
])
def test_a_bad_or_non_speculative_upload_is_refused(tmp_path, content, message):
    path = tmp_path / "upload.json"
    if content == "greedy":
        run_to_trace("tiny-random", "Hello", strategy="greedy", max_new_tokens=3, chat=False).save(path)
    else:
        path.write_text(content)
    with pytest.raises(gr.Error, match=message):
        cb.replay(str(path), None, None)


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": "  "}, "`prompt` is empty"),
    ({"draft_length": 17}, r"`draft_length` must be an integer in \[0, 16\]"),
    ({"drafter": "model", "model.draft_model": ""}, "`model.draft_model` is required"),
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"max_new_tokens": 0}, "`max_new_tokens`"),
])
def test_bad_input_raises_a_clear_gr_error(kwargs, message):
    with pytest.raises(gr.Error, match=message):
        next(cb.generate_run(kwargs.pop("model", MODEL), kwargs.pop("prompt", DEFAULT_PROMPT),
                             kwargs.pop("max_new_tokens", 16), 0, True, True, **values(**kwargs)))


def test_fields_travel_by_name():
    from ui.speculative_views import collect_spec_params

    fields = values(drafter="model", draft_length=4.0, **{"model.draft_model": " org/draft-model ",
                                                          "early-exit.exit_layer": 2.0})
    params = collect_spec_params(dict(reversed(fields.items())))  # the order does not matter
    assert params == collect_spec_params(fields) and params["model.draft_model"] == "org/draft-model"
    assert params["draft_length"] == 4 and isinstance(params["draft_length"], int)
    assert not any(k.startswith(("early-exit.", "rasd.", "prompt-lookup.")) for k in params)  # the chosen's only
    with pytest.raises(ValueError, match="no value for the speculative parameter `drafter`"):
        collect_spec_params({k: v for k, v in fields.items() if k != "drafter"})
    with pytest.raises(ValueError, match="unknown speculative parameters `widht`, `depth`"):
        collect_spec_params(fields | {"widht": 2, "depth": 3})
    with pytest.raises(gr.Error, match="unknown speculative parameter `widht`"):
        next(cb.generate_run(MODEL, DEFAULT_PROMPT, 16, 0, True, True, **fields, widht=2))


@pytest.mark.slow  # SmolLM2 (MODEL): 256 tokens with prompt lookup
def test_closing_the_run_stops_compute(monkeypatch):
    """What Stop does: Gradio closes the callback's generator; the worker thread must stop decoding."""
    calls = count_forward_passes(monkeypatch)
    run = cb.generate_run(MODEL, "Count from one to two hundred in words.", 256, 0, True, True,
                          **values(drafter="prompt-lookup"))
    trace = assert_closing_stops_compute(run, calls, limit=60)
    after = cb.stop_run(trace, None)
    assert "**Stopped** the run after" in after["status"] and after["text"].count("data-round=") >= 5
    assert Trace.load(download(trace)).finish.stop_reason == "cancelled"


def test_the_coupling_view_follows_the_round_and_position(tiny_lm):
    """The accordion "Verification rules, one position": the built-in example before a run, then the chosen
    round's recorded p and q, with the chosen k."""
    before = cb.coupling_view(2.0, 0, None, None)["coupling"]
    assert "built-in example" in before.layout.title.text and "k = 2" in before.layout.annotations[1].text
    trace = run_to_trace(tiny_lm, "the cat sat on the mat", strategy="speculative", max_new_tokens=8, seed=0,
                         params={"drafter": "model", "draft_model": "tiny-random-draft", "tree": "static",
                                 "temperature": 1.0, "rule": "spectr"})
    last = trace.of_kind("spec_round")[-1]
    fig = cb.coupling_view(3.0, float(last.round), -1, trace)["coupling"]
    assert f"round {last.round}, after" in fig.layout.title.text and "k = 3" in fig.layout.annotations[2].text
    parent = last.dists[-1]["parent"]
    fig = cb.coupling_view(1, last.round, parent, trace)["coupling"]
    assert (f"after node {parent}" if parent >= 0 else "after") in fig.layout.title.text


def test_mecb_and_the_markov_coding_game_views():
    """Beside the rules: MEC-B at the shown position and rate bound; the game's episode, text and trade-off;
    bad input becomes a toast."""
    fig = cb.mecb_view(1.5, 0, None, None)["mecb"]
    assert "built-in example" in fig.layout.title.text and "R = 1.50" in fig.layout.annotations[0].text
    out = cb.mcg_view("F", 4.0, 1.0, 0)
    assert "Message **F**" in out["mcg_text"] and "decoded **F**: **right**" in out["mcg_text"]
    assert "message F" in out["mcg"].layout.title.text
    assert cb.mcg_view("F", 4.0, 1.0, 0)["mcg_text"] == out["mcg_text"]  # seeded
    for bad in (("Z", 2.0, 0.3, 0), ("F", -1.0, 0.3, 0), ("F", 2.0, 0.3, -1)):
        with pytest.raises(gr.Error):
            cb.mcg_view(*bad)


def test_presets_set_every_control_and_show_the_note():
    choices = cb.preset_choices()
    assert len(choices) >= 3
    out = cb.preset_chosen("22-speculative-token-recycling")
    assert out["spec:drafter"] == "token-recycling" and out["spec:width"] == 4 and out["spec:tree"] == "static"
    assert out["spec:temperature"] == 0.0 and out["max_new_tokens"] == 64 and "Token Recycling" in out["note"]
    assert {f"spec:{k}" for k in SPEC_FIELDS} <= out.keys()
    shown = cb.drafter_changed("model")
    assert shown["spec:model.draft_model"]["visible"] is True and shown["spec:prompt-lookup.ngram"]["visible"] is False
    assert shown["spec:rasd.draft_model"]["visible"] is False and "**model**" in shown["drafter_help"]


# In a real browser -------------------------------------------------------------------------------

@pytest.mark.slow  # the HTTP server
def test_browser_generates_with_prompt_lookup_and_saves_a_screenshot(app_url):
    from test_browser import TIMEOUT_MS, check_labels_at_both_sizes, error_toasts, open_page

    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS // 2) as page:
        page.get_by_role("tab", name="Speculative").click()
        page.wait_for_selector("#spec-generate")
        assert page.locator("#spec-model input").input_value() == MODEL
        assert page.locator("#spec-drafter input[value='prompt-lookup']").is_checked()
        assert "a draft that costs nothing" in page.locator("#spec-note").inner_text()
        page.locator("#spec-generate").click()  # the tab's opening run: nothing else touched
        page.wait_for_selector("#spec-text .tok[data-round]")
        page.wait_for_function("document.querySelectorAll('#spec-tree-plot .scatterlayer .trace').length >= 2")
        page.wait_for_function("() => (document.querySelector('#spec-status') || {}).innerText?.includes('×')")
        assert "speed-up" in page.locator("#spec-summary").inner_text()
        assert error_toasts(page) == []
        page.wait_for_timeout(500)  # let plotly finish its transition
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        box = page.locator("#spec-summary").bounding_box()  # header to the comparison table
        height = min(int(box["y"] + box["height"]) + 24, page.evaluate("document.documentElement.scrollHeight"))
        page.screenshot(path=str(SCREENSHOT), full_page=True, clip={"x": 0, "y": 0, "width": 1280, "height": height})
        check_labels_at_both_sizes(page, "#dl-speculative")  # the draft tree's first label was cut ("natic'")
    assert SCREENSHOT.stat().st_size > 20_000
