"""The Scaling tab's accordion "LLM-as-a-Judge: how many candidates?" (ui/judge.py): its callback, its wiring,
and the tiny-math panel read from the benchmark's file. No model, no browser."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from ui.judge import BENCH_COMMAND, DEFAULTS, judge_view, tiny_math_view


def table_rows(table: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_the_view_shows_a_finite_best_k_at_its_defaults():
    out = judge_view(**DEFAULTS)
    assert set(out) == {"jd_table", "jd_curves"}
    rows = table_rows(out["jd_table"])
    assert list(rows) == ["0", "0.15", "0.3", "0.6", "∞"]
    k_star = int(rows["0"][0].split()[0])
    assert 1 < k_star < DEFAULTS["k_max"] and "finite" in rows["0"][0]
    assert float(rows["0"][1]) > float(rows["0"][2]) + 0.3  # past k*, the greedy judge loses most of it
    assert float(rows["0.3"][2]) > float(rows["0"][2])  # at large k a warmer judge does better
    assert rows["∞"][1] == "0.400" and "every k alike" in rows["∞"][0]  # a uniform pick: one sample
    names = [d.name for d in out["jd_curves"].data]
    assert "T = 0 (model)" in names and "k* (model)" in names


def test_a_well_specified_judge_has_no_finite_best_k():
    rows = table_rows(judge_view(0.4, 0.0, 0.3, 48)["jd_table"])
    assert all("no finite optimum" in cells[0] or "every k alike" in cells[0] for cells in rows.values())


@pytest.mark.parametrize("bad, field", [
    ((1.5, 0.1, 0.3, 48), "`p_right`"), ((0.4, 0.9, 0.3, 48), "`misspecified`"),
    ((0.4, 0.1, -1.0, 48), "`temperature`"), ((0.4, 0.1, 0.3, 1), "`k_max`"), ((0.4, 0.1, 0.3, 4.5), "`k_max`"),
])
def test_bad_input_is_a_toast_naming_the_field(bad, field):
    with pytest.raises(gr.Error, match=field):
        judge_view(*bad)


def test_the_accordion_is_in_the_scaling_tab_and_wired():
    from ui.scaling import build_scaling

    with gr.Blocks() as blocks:
        c = build_scaling()
    assert {"jd_p_right", "jd_misspecified", "jd_temperature", "jd_k_max", "jd_table", "jd_curves"} <= c.keys()
    assert c["jd_accordion"].label == "LLM-as-a-Judge: how many candidates?" and c["jd_accordion"].open is False
    fns = [d for d in blocks.fns.values() if getattr(d.fn, "__name__", "") == "judge_view"]
    triggers = {(t[0], t[1]) for d in fns for t in d.targets}
    assert (c["jd_accordion"]._id, "expand") in triggers and (c["jd_temperature"]._id, "release") in triggers
    assert (c["jd_k_max"]._id, "release") in triggers


def test_the_tiny_math_panel_reads_the_benchmark_file(tmp_path):
    missing, figure = tiny_math_view(tmp_path / "none.json")
    assert figure is None and BENCH_COMMAND in missing
    result = {"problems": 3, "samples": 4, "single_sample": 0.5, "ks": [1, 2, 3], "fit": {"weight": 20.0},
              "measured": {"0": [0.5, 0.7, 0.6]}, "predicted": {"0": [0.5, 0.68, 0.62]},
              "k_star": {"0": {"measured": [2, True], "predicted": [2, True]}}}
    path = tmp_path / "judge.json"
    path.write_text(json.dumps(result))
    text, figure = tiny_math_view(path)
    assert "3 held-out problems × 4 samples" in text and "the measured best k is 2" in text
    assert [d.name for d in figure.data][:3] == ["T = 0 (model)", None, "T = 0 (measured)"]
    path.write_text("{not json")
    broken, figure = tiny_math_view(path)
    assert figure is None and "cannot be read" in broken
