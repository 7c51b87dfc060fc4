"""Gradio is imported without regenerating its type stubs (ui/gradio_import.py), and nothing else of it changes."""

from __future__ import annotations

import gradio as gr
import gradio.component_meta

from ui.gradio_import import MODULE, STEP, _no_stub, _SkipStubs, skip_stub_generation


def test_the_stub_step_is_skipped_once_ui_is_imported_first():
    # tests/conftest.py imports `ui` before any test module imports Gradio, as app.py does
    assert getattr(gradio.component_meta, STEP) is _no_stub
    assert skip_stub_generation()  # already in effect: says so, installs nothing more


def test_components_keep_their_events_and_build():
    with gr.Blocks() as blocks:
        slider = gr.Slider(0, 4, value=2, step=1, label="n")
        box = gr.Textbox()
        slider.change(lambda n: str(n), slider, box)
    assert callable(gr.Slider.change) and callable(gr.Dropdown.select)
    assert blocks.get_config_file()["components"]


def test_the_finder_answers_for_gradios_metaclass_module_only():
    finder = _SkipStubs()
    assert finder.find_spec("gradio.blocks") is None and finder.find_spec("json") is None
    spec = finder.find_spec(MODULE, list(gradio.__path__))
    assert spec is not None and spec.name == MODULE
