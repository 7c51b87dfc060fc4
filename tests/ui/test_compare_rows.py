"""Compare without JSON (issue 33): each Compare row shows its strategy's own widgets (the Playground's), the
values travel by name to the run, and the JSON field stays as an override for the API-minded."""

from __future__ import annotations

import gradio as gr
import pytest

from decoding.compare import MAX_RUNS
from ui import compare_callbacks as cb
from ui.playground_views import param_widgets, playground_strategies

TINY = "tiny-random"


@pytest.fixture(scope="module")
def built() -> dict:
    from ui.playground import build_playground

    with gr.Blocks():
        return build_playground()


def test_each_row_shows_its_strategys_widgets_at_the_rows_values(built):
    for k, (strategy, params) in enumerate(cb.DEFAULT_ROWS):
        for name in playground_strategies():
            group = built.get(f"compare_{k}:group:{name}")
            if not param_widgets(name):
                assert group is None  # greedy has nothing to set
                continue
            assert group.visible == (name == strategy)
            for w in param_widgets(name):
                widget = built[f"compare_{k}:{w.key}"]
                expected = params.get(w.name, w.default) if name == strategy else w.default
                assert widget.value == expected, (k, w.key)
                assert widget.elem_id == f"dl-compare-{k}-{name}-{w.name}"
        assert built[f"compare_params_{k}"].value == ""  # JSON: empty, an override only


def test_widgets_give_the_changed_values_and_json_overrides_them():
    values = {"param:sample.top_p": 0.8, "param:sample.temperature": 1.0, "param:sample.top_k": 20.0}
    assert cb.row_params("sample", values, "", 1) == {"top_p": 0.8, "top_k": 20}  # a default is left out
    assert cb.row_params("sample", values, '{"top_p": 0.9, "min_p": 0.05}', 1) == {"top_p": 0.9, "top_k": 20,
                                                                                   "min_p": 0.05}
    assert cb.row_params("greedy", {}, "  ", 2) == {}
    with pytest.raises(ValueError, match="run 3's JSON parameters must be an object"):
        cb.row_params("sample", {}, "[1, 2]", 3)
    with pytest.raises(ValueError, match="run 2's JSON parameters"):
        cb.row_params("sample", {}, "{top_p: 0.9", 2)


def test_the_rows_values_by_name_become_the_comparisons_settings():
    rows = {f"strategy_{k}": s for k, s in enumerate(["greedy", "sample", "mirostat", cb.OFF])}
    rows |= {f"params_{k}": "" for k in range(MAX_RUNS)}
    rows |= {"row1:param:sample.top_p": 0.9, "row1:param:sample.temperature": 1.0, "row2:param:mirostat.tau": 4.0,
             "row3:param:sample.top_p": 0.5}  # row 3 is off: its widgets do not matter
    settings = cb.settings_from_rows(cb.split_rows(rows))
    assert [s.name for s in settings] == ["greedy", "sample (top_p=0.9)", "mirostat (tau=4.0)"]


def test_a_preset_fills_the_rows_widgets():
    from decoding.presets import load_presets

    preset = next(p for p in load_presets(lab="playground") if p.strategy == "sample" and p.params)
    out = cb.preset_row(preset.name)
    assert out["strategy"] == "sample" and out["group:sample"]["visible"] is True
    for w in param_widgets("sample"):
        assert out[w.key] == preset.params.get(w.name, w.default)
    assert cb.preset_row("no-such-preset") == {}


def test_compare_runs_with_the_widgets_values():
    rows = {"strategy_0": "greedy", "strategy_1": "sample", "strategy_2": cb.OFF, "strategy_3": cb.OFF}
    rows |= {f"params_{k}": "" for k in range(MAX_RUNS)} | {"row1:param:sample.top_k": 5.0}
    final = {}
    for update in cb.compare_run(TINY, "Hello", 4, 0, False, "auto", "prob", cb.new_comparison(), **rows):
        final |= update
    settings = final["comparison"]["settings"]
    assert [s.name for s in settings] == ["greedy", "sample (top_k=5)"]
    traces = final["comparison"]["traces"]
    assert traces[1].start.params["top_k"] == 5 and all(t.finish for t in traces)
