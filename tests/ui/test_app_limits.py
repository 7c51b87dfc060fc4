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

import gradio as gr  # noqa: E402

from ui.playground_views import new_selection  # noqa: E402

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
