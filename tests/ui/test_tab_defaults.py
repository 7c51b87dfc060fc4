"""Every lab tab opens on the declared defaults of the method it shows (issue 26): a family field that two
methods declare with different defaults (step-speculation's n = 1, the particle filter's n = 4) never
leaks into another method's widgets. A tab's own choices (the Speculative tab opens on prompt lookup, the Scaling
tab on the reward spare, and the Diffusion tab opens on preset 54, tests/ui/test_tab_lessons.py) are the only
exceptions, each named here."""

from __future__ import annotations

import gradio as gr
import pytest

from decoding.registry import param_specs


def built(build):
    with gr.Blocks():
        return build()


def value_of(widget):
    value = widget.value
    return int(value) if isinstance(value, float) and value.is_integer() else value


@pytest.mark.parametrize("tab", ["scaling", "diffusion", "speculative"])
def test_each_tab_opens_on_its_methods_declared_defaults(tab):
    if tab == "scaling":
        from ui.scaling import build_scaling
        from ui.scaling_views import COMMON, DEFAULT_METHOD, FIELDS, REWARD_KEYS

        c = built(build_scaling)
        method = c["method"].value
        assert method == DEFAULT_METHOD
        declared = {p["name"]: p["default"] for p in param_specs(method)}
        own = {f"{method}.{name}": name for name in declared if f"{method}.{name}" in FIELDS}  # the method's own
        fields = {name: name for name in COMMON + REWARD_KEYS} | own
        shown = {field: value_of(c[f"sc:{field}"]) for field in fields}
        from ui.scaling_views import DEFAULT_TASK

        from ui.scaling_views import OPENING_SETTINGS

        # the tab opens on a shipped problem, with its answer, and its lesson's reward (issue 43)
        tab_choices = {"reference": DEFAULT_TASK["answer"]} | OPENING_SETTINGS
        expected = {field: declared[name] for field, name in fields.items()} | tab_choices
        shown["lm-judge.judge_model"] = shown["lm-judge.judge_model"] or ""  # a model menu shows "" as no choice
        assert shown == expected
        assert shown["n"] == 4  # before: 1, step-speculation's default
    elif tab == "diffusion":
        from ui.diffusion import build_diffusion
        from ui.diffusion_views import FIELDS

        from decoding.presets import find_preset
        from ui.diffusion_views import OPENING_PRESET

        c = built(build_diffusion)
        declared = {p["name"]: p["default"] for p in param_specs("diffusion")}
        tab_choices = find_preset("diffusion", OPENING_PRESET).params  # the tab opens on its lesson (issue 33)
        assert tab_choices == {"threshold": 0.9, "remasking": "low-confidence", "temperature": 0.0}
        assert {f: value_of(c[f"df:{f}"]) for f in FIELDS} == {f: declared[f] for f in FIELDS} | tab_choices
    else:
        from ui.speculative import build_speculative
        from ui.speculative_views import SPEC_FIELDS

        c = built(build_speculative)
        declared = {p["name"]: p["default"] for p in param_specs("speculative")}
        from ui.speculative_views import DEFAULT_DRAFT_MODEL

        tab_choices = {"drafter": "prompt-lookup",  # the lab opens on the drafter that pays on its prompt
                       "model.draft_model": DEFAULT_DRAFT_MODEL,  # ready when the user picks a drafter that loads one
                       "rasd.draft_model": DEFAULT_DRAFT_MODEL}
        shown = {f: value_of(c[f"spec:{f}"]) for f in SPEC_FIELDS}
        shown["diffusion.draft_model"] = shown["diffusion.draft_model"] or ""  # a model menu shows "" as no choice
        assert shown == declared | tab_choices


def test_switching_method_moves_untouched_defaults_and_keeps_typed_values():
    from ui import scaling_callbacks as cb

    assert cb.method_switched("step-speculation", n=4.0) == {"sc:n": 1}
    assert cb.method_switched("particle-filter", n=1) == {"sc:n": 4}
    assert cb.method_switched("particle-filter", n=7) == {}  # the user's own N stays


def test_a_preset_starts_from_its_own_methods_defaults():
    from ui import scaling_callbacks as cb

    assert cb.preset_chosen("41-step-speculation")["sc:n"] == 1
    assert cb.preset_chosen("30-particle-filter-vs-best-of-n")["sc:n"] == 4
