"""What the tabs do with input beyond their limits (issue 18): handled user errors reach the page as a
warning or an error toast and leave no traceback in the server log; the outputs of a refused event
keep their number.

Gradio prints a traceback for any exception of an event except a `gr.Error` with
`print_exception=False` (gradio/queueing.py), so the in-process tests check that condition on what
`Blocks.process_api` raises; tests/ui/test_browser_limits.py reads a real server's log.
"""

from __future__ import annotations

import asyncio
import os

import pytest

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr

from ui.playground_views import new_selection

TABS = ("playground", "speculative", "scaling", "diffusion")


def build(tab: str) -> tuple[gr.Blocks, dict]:
    import importlib

    module = importlib.import_module(f"ui.{tab}")
    with gr.Blocks() as blocks:
        c = getattr(module, f"build_{tab}")()
    return blocks, c


def event(blocks: gr.Blocks, name: str):
    (fn,) = [f for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == name]
    return fn


def process(blocks: gr.Blocks, fn, inputs: list) -> dict:
    """One event through Gradio's own pre- and post-processing, as the queue runs it."""
    return asyncio.run(blocks.process_api(fn, inputs, state=None))


def refused_quietly(blocks: gr.Blocks, fn, inputs: list) -> gr.Error:
    """The event's error, checked to be one Gradio shows as a toast without logging a traceback."""
    with pytest.raises(gr.Error) as refused:
        process(blocks, fn, inputs)
    assert not refused.value.print_exception, f"Gradio would log a traceback for {refused.value}"
    return refused.value


def test_a_step_out_of_range_warns_and_changes_nothing():
    blocks, c = build("playground")
    fn = event(blocks, "type_step")
    for step in (999, -3):  # a negative step is refused by the callback too, not by Gradio's Number
        with pytest.warns(UserWarning, match="Generate some text first"):
            out = process(blocks, fn, [step, None, None, new_selection(), "prob"])
        assert len(out["data"]) == len(fn.outputs)  # was 1 value for 19 outputs: a ValueError in the log


@pytest.mark.parametrize("tab", TABS)
def test_a_negative_seed_is_the_engines_message_without_a_traceback(tab):
    blocks, c = build(tab)
    fn = event(blocks, "generate_run")
    values = [-1 if component is c["seed"] else component.value for component in fn.inputs]
    error = refused_quietly(blocks, fn, values)
    assert "`seed` must be an integer in [0, 2**63), got -1" in str(error)


# Sliders: a number typed past a slider's end is said, not silently changed -------------------------
_RELEASES: dict[int, tuple[gr.Blocks, dict, object]] = {}


def release_events(blocks: gr.Blocks) -> tuple[dict, object]:
    """{slider id: its clamping warning's `release` event} and one session's state, made once per Blocks (a tab
    has hundreds of events; Gradio builds a session's state from every block's config, 0.1 s each time)."""
    from gradio.state_holder import SessionState

    if id(blocks) not in _RELEASES:
        found: dict = {}
        for fn in blocks.fns.values():
            if not fn.inputs and len(fn.targets) == 1 and fn.targets[0][1] == "release":
                assert fn.targets[0][0] not in found, "two clamping warnings on one slider"
                found[fn.targets[0][0]] = fn
        _RELEASES[id(blocks)] = (blocks, found, SessionState(blocks))  # the Blocks kept: its id stays its own
    return _RELEASES[id(blocks)][1:]


def release(blocks: gr.Blocks, slider, typed) -> list[str]:
    """The slider's `release` as the browser sends it when its box loses focus (the number typed is the
    event's data); the warnings it shows."""
    import warnings

    events, session = release_events(blocks)
    fn = events[slider._id]
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        asyncio.run(blocks.process_api(fn, [], state=session, event_data=gr.EventData(None, typed)))
    # only gr.Warning's (raised in gradio's helpers): a model loading in another thread of this test
    # process (an app server's preload) may warn at the same moment, and catch_warnings sees every thread
    return [str(w.message) for w in shown if f"{os.sep}gradio{os.sep}" in w.filename]


def test_a_number_typed_beyond_a_slider_says_what_it_became_and_where_more_fits():
    blocks, c = build("playground")
    assert release(blocks, c["param:sample.temperature"], 1000) == [
        "temperature: 1000 is beyond this slider's maximum, so it was set to 2. `temperature` allows (0, inf) "
        "through the API and the CLI."]
    assert release(blocks, c["param:beam.num_beams"], 500) == [
        "num beams: 500 is beyond this slider's maximum, so it was set to 32."]  # the slider reaches [1, 32]
    assert release(blocks, c["max_new_tokens"], 99999) == [
        "Max new tokens: 99999 is beyond this slider's maximum, so it was set to 512. `max_new_tokens` allows "
        "[1, 2048] through the API and the CLI."]
    assert release(blocks, c["param:sample.top_p"], -1)[0].startswith("top p: -1 is beyond this slider's minimum")
    assert release(blocks, c["param:sample.temperature"], 1.5) == []  # kept: nothing to say


@pytest.mark.parametrize("tab", TABS)
def test_every_control_slider_of_every_tab_explains_clamping(tab):
    blocks, c = build(tab)
    for name, widget in c.items():
        if isinstance(widget, gr.Slider) and name not in ("step", "round", "problem"):  # views: their ends move
            (message,) = release(blocks, widget, widget.maximum + 1000)
            assert message.startswith(f"{widget.label}: {widget.maximum + 1000:g} is beyond this slider's maximum, "
                                      f"so it was set to {widget.maximum:g}."), name


def test_slider_info_claims_only_the_range_the_slider_reaches():
    from decoding.registry import param_specs
    from ui.playground_views import playground_strategies

    blocks, c = build("playground")
    for strategy in playground_strategies():
        for spec in param_specs(strategy):
            widget = c[f"param:{strategy}.{spec['name']}"]
            if not isinstance(widget, gr.Slider):
                continue
            reaches = spec["low"] >= widget.minimum and spec["high"] <= widget.maximum
            assert (f"Allowed: {spec['range']}." in widget.info) == reaches, widget.info
            if not reaches:
                assert f"This slider: {widget.minimum:g} to {widget.maximum:g}" in widget.info
    assert "This slider: 0.05 to 2 (allowed (0, inf)" in c["param:sample.temperature"].info


@pytest.mark.parametrize("params, max_new_tokens, message", [
    ('{"num_beams": 500}', 8, r"`num_beams` must be .*\[1, 32\], got 500"),
    ("{}", 99999, r"`max_new_tokens` must be an integer in \[1, 2048\], got 99999"),
])
def test_the_api_refuses_values_beyond_the_allowed_range_with_that_range(params, max_new_tokens, message):
    from ui.api import api_generate

    with pytest.raises(gr.Error, match=message) as refused:
        next(api_generate("tiny-random", "beam", "hi", max_new_tokens, 0, params))
    assert not refused.value.print_exception


# Diffusion: the canvas length beside the prompt, said before the run ------------------------------
@pytest.mark.fast("reads llada-8b-instruct's declared context length; loads no model")
def test_the_length_note_says_what_fits_beside_the_prompt_before_the_run():
    from decoding.run import as_lm
    from ui import diffusion_callbacks as cb
    from ui.diffusion_views import DEFAULT_SETTINGS, FIELDS

    model, prompt = "tiny-random-diffusion", "x" * 900  # a byte tokenizer: the prompt takes 900+ of 1024 positions
    lm = as_lm(model, progress=None)
    used = len(lm.encode_prompt(prompt, chat=cb.CHAT)[0])
    left = lm.max_length - used
    fits = cb.length_checked(model, prompt, left)["length"]["info"]
    assert fits == f"{cb.LENGTH_INFO} {model} has {lm.max_length} positions; this prompt takes {used}, leaving {left}."
    too_long = cb.length_checked(model, prompt, left + 1)["length"]["info"]
    assert too_long.endswith(f"⚠ {left + 1} does not fit: set at most {left}, or shorten the prompt.")
    with pytest.raises(gr.Error, match=f"ask for at most {left}"):  # what the run says, the note said first
        list(cb.generate_run(model, prompt, left + 1, 0, "none", **{f: DEFAULT_SETTINGS[f] for f in FIELDS}))
    assert "shorten it" in cb.length_checked(model, "x" * 1100, 8)["length"]["info"]
    assert cb.length_checked("llada-8b-instruct", prompt, 64)["length"]["info"] == cb.LENGTH_INFO  # loads nothing


def test_the_length_note_follows_the_model_prompt_and_length():
    blocks, c = build("diffusion")
    triggers = {target for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "length_checked"
                for target in f.targets}
    assert triggers == {(c[k]._id, "change") for k in ("model", "prompt", "length")}
