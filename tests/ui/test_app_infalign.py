"""The Scaling tab's accordion "InfAlign: aligning for best-of-N" (ui/infalign.py): its callback, its wiring,
and the tiny-math panel read from the benchmark's file. No model, no browser."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from ui.infalign import BENCH_COMMAND, DEFAULTS, infalign_view, tiny_math_view


def table_rows(table: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_the_view_shows_the_effect_at_its_defaults():
    out = infalign_view(DEFAULTS["k"], DEFAULTS["seed"], DEFAULTS["n"], DEFAULTS["kl"])
    assert set(out) == {"ia_table", "ia_curves", "ia_transform"}
    rows = table_rows(out["ia_table"])
    assert len(rows) == 4 and "At KL = 0.5 nats" in out["ia_table"]
    one = {name: float(cells[0]) for name, cells in rows.items()}
    bon = {name: float(cells[1]) for name, cells in rows.items()}
    calibrated, exp = "calibrated, identity", "calibrated, exp(t·u) (InfAlign)"
    assert bon[exp] > bon[calibrated] + 0.05  # aligned for best-of-4, it wins more under best-of-4 ...
    assert one[calibrated] > one[exp]  # ... and less under plain sampling
    curves = out["ia_curves"]
    assert [a.text for a in curves.layout.annotations][:2] == ["plain sampling (N = 1)", "best-of-4 against best-of-4"]
    assert len(curves.data) == 8  # four methods, two panels
    assert {d.name for d in out["ia_transform"].data} >= {"raw reward r", "calibrated, identity"}


def test_a_kl_past_the_policy_is_capped_and_said():
    out = infalign_view(3, 2, 16, 3.0)
    assert "asked 3; this base policy allows at most" in out["ia_table"]
    assert "never spends this much KL" in out["ia_table"]  # best-of-16 already wins all it can with less


@pytest.mark.parametrize("bad, field", [((2, 0, 4, 0.5), "`k`"), ((8, -1, 4, 0.5), "`seed`"),
                                        ((8, 0, 0, 0.5), "`n`"), ((8, 0, 4, 0.0), "`kl`")])
def test_bad_input_is_a_toast_naming_the_field(bad, field):
    with pytest.raises(gr.Error, match=field):
        infalign_view(*bad)


def test_the_accordion_is_in_the_scaling_tab_and_wired():
    from ui.scaling import build_scaling

    with gr.Blocks() as blocks:
        c = build_scaling()
    assert {"ia_n", "ia_kl", "ia_k", "ia_seed", "ia_table", "ia_curves", "ia_transform"} <= c.keys()
    assert c["ia_accordion"].label == "InfAlign: aligning for best-of-N" and c["ia_accordion"].open is False
    fns = [d for d in blocks.fns.values() if getattr(d.fn, "__name__", "") == "infalign_view"]
    triggers = {(t[0], t[1]) for d in fns for t in d.targets}
    assert (c["ia_accordion"]._id, "expand") in triggers and (c["ia_kl"]._id, "release") in triggers


def test_the_tiny_math_panel_reads_the_benchmark_file(tmp_path):
    missing, figure = tiny_math_view(tmp_path / "none.json")
    assert figure is None and BENCH_COMMAND in missing
    curve = {"n": 4, "kl": [0.1, 0.2], "t": [9.0, 10.0], "win": {"rlhf": [0.6, 0.65], "exp": [0.62, 0.7]}}
    path = tmp_path / "infalign.json"
    path.write_text(json.dumps({"tiny_math": {"problems": 3, "samples": 4, "probe": {"curve": curve}}}))
    text, figure = tiny_math_view(path)
    assert "3 held-out problems × 4 samples" in text
    assert [d.name for d in figure.data] == ["standard RLHF (raw reward)", "calibrated, exp(t·u) (InfAlign)"]
    assert list(figure.data[1].y) == [0.5, 0.62, 0.7]  # from the base policy (KL 0, win rate 1/2)
    path.write_text("{not json")
    broken, figure = tiny_math_view(path)
    assert figure is None and "cannot be read" in broken
