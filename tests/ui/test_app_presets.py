"""The Playground's preset menu (issue 18): the shipped Playground presets fill every control a run
needs (strategy, its parameters, model, prompt, limits) and show the preset's teaching note."""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import pytest

from decoding.presets import load_presets
from ui import playground_callbacks as cb
from ui.widgets import model_choices
from ui.playground_views import param_widgets, playground_strategies


def test_the_menu_lists_the_playground_presets():
    shipped = [p for p in load_presets() if p.lab == "playground"]
    assert len(shipped) >= 6
    assert cb.preset_choices() == [(p.title, p.name) for p in shipped]


@pytest.mark.fast("a preset names smollm2-135m; choosing it loads no model")
def test_a_preset_sets_strategy_parameters_model_prompt_and_the_note():
    out = cb.preset_chosen("03-min-p-at-high-temperature")
    assert (out["model"], out["strategy"], out["seed"], out["max_new_tokens"]) == ("smollm2-135m", "sample", 1, 80)
    assert out["prompt"].startswith("Write a short paragraph about why cats sleep")
    assert out["param:sample.temperature"] == 1.5 and out["param:sample.min_p"] == 0.1
    assert out["param:sample.top_p"] == 1.0  # what the preset leaves out goes back to its default
    assert out["note"].startswith("**Min-p keeps high temperature coherent.** Min-p keeps only tokens")
    assert not any(key.startswith("param:beam.") for key in out)  # other strategies' widgets keep their values


def test_every_shipped_preset_fits_the_playground_widgets():
    keys = {w.key for w in param_widgets()}
    for _, name in cb.preset_choices():
        out = cb.preset_chosen(name)
        assert out["strategy"] in playground_strategies() and out["model"] in model_choices()
        assert {k for k in out if k.startswith("param:")} <= keys


def test_no_preset_clears_the_note():
    assert cb.preset_chosen(None) == {"note": ""}
    assert cb.preset_chosen("30-particle-filter-vs-best-of-n") == {"note": ""}  # another tab's preset
