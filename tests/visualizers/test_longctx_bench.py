"""The Long context lab's cross-run pictures from its benchmarks' JSON: accuracy against compute from the shipped
needle result (assets/longctx/needle.json, bench_needle.py's --json object), speed and acceptance against context
length from bench_long_context.py's --json object in both its formats, and bench/plot_longctx.py drawing them."""

from __future__ import annotations

import json
import runpy
import sys

import pytest

from conftest import ROOT
from visualizers.longctx_bench import context_speed_figure, needle_compute_figure

NEEDLE = ROOT / "assets" / "longctx" / "needle.json"


def test_accuracy_against_compute_draws_each_method_through_its_windows_from_the_shipped_result():
    report = json.loads(NEEDLE.read_text())
    fig = needle_compute_figure(report)
    assert [t.name for t in fig.data] == ["full context", "DRAG (top 4)", "IterDRAG", "TTT (train)",
                                          "thinking (matched FLOPs)"]
    rows = [r for r in report["rows"] if r["depth"] == "all"]
    for trace, method in zip(fig.data, report["settings"]):
        assert list(trace.x) == [r[method]["gflops"] for r in rows]
        assert list(trace.y) == [r[method]["accuracy"] for r in rows] and list(trace.text) == ["1K", "2K", "4K"]
    assert fig.layout.xaxis.type == "log"
    assert "full context 7/9" in fig.layout.title.text and "IterDRAG 0/9" in fig.layout.title.text


ROW = {"size": 4096, "prompt_tokens": 3900, "plain_ms_per_token": 50.0}


@pytest.mark.parametrize("row", [
    ROW | {"drafters": {"rapid": {"s": 2.0, "ms_per_token": 40.0, "speedup": 1.2, "decode_speedup": 1.25,
                                  "acceptance_rate": 0.5, "draft_cache_mb": 1.0},
                        "longspec": {"s": 1.5, "ms_per_token": 25.0, "speedup": 1.6, "decode_speedup": 2.0,
                                     "acceptance_rate": 0.75, "draft_cache_mb": 0.1}}},
    ROW | {"rapid_s": 2.0, "rapid_ms_per_token": 40.0, "speedup": 1.2, "decode_speedup": 1.25, "acceptance_rate": 0.5},
], ids=["per-drafter format", "older RAPID-only format"])
def test_speed_and_acceptance_against_context_length_read_both_formats(row):
    fig = context_speed_figure({"model": "m", "tokens": 32, "rows": [row, row | {"size": 1024, "prompt_tokens": 900,
                                                                                  "plain_ms_per_token": 20.0}]})
    plain = fig.data[0]
    assert plain.name == "plain greedy" and list(plain.x) == [900, 3900] and list(plain.y) == [50.0, 20.0]
    rapid_speed, rapid_accept = fig.data[1], fig.data[2]
    assert rapid_speed.name == "rapid" and list(rapid_speed.y) == [25.0, 25.0] and list(rapid_accept.y) == [0.5, 0.5]
    if "drafters" in row:
        assert [t.name for t in fig.data[3:]] == ["longspec", "longspec"] and list(fig.data[3].y) == [40.0, 40.0]
    else:
        assert len(fig.data) == 3


def plot(args, monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / "plot_longctx.py"), *args])
    try:
        runpy.run_path(str(ROOT / "bench" / "plot_longctx.py"), run_name="__main__")
    except SystemExit as done:
        assert done.code in (None, 0)
    return capsys.readouterr().out


def test_the_plot_script_prints_the_figure_without_png(monkeypatch, capsys, tmp_path):
    fig = json.loads(plot(["--needle", str(NEEDLE)], monkeypatch, capsys))
    assert len(fig["data"]) == 5
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    monkeypatch.setattr(sys, "argv", ["plot_longctx.py", "--speed", str(bad)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "bench" / "plot_longctx.py"), run_name="__main__")
    assert done.value.code == 2 and "expected the benchmark's --json object" in capsys.readouterr().err


@pytest.mark.slow  # Chromium
def test_the_plot_script_draws_a_png(monkeypatch, capsys, tmp_path):
    png = tmp_path / "needle.png"
    assert "wrote" in plot(["--needle", str(NEEDLE), "--png", str(png)], monkeypatch, capsys)
    assert png.stat().st_size > 10_000
