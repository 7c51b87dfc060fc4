"""Every benchmark the README and its docs pages (docs/*.md) quote runs, on tiny inputs (issue 27:
`bench_scaling --quick --json` once crashed after its 14-minute run, and nothing noticed). Each command runs
in this process (`runpy`), so the models load once for all of them; each must end without an error and, with
`--json`, print one JSON object with the keys the documented table is read from. The figures themselves are
the benchmarks' job."""

from __future__ import annotations

import json
import runpy
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # real models (SmolLM2, the tiny ones), llama.cpp's server, Chromium

# (script, tiny arguments, keys its --json object must have; None: the script prints a table, no JSON)
SMOKE = [
    ("bench_app.py", ["--tokens", "4", "--rounds", "1"], None),
    ("bench_adaptive.py", ["--tasks", "1", "--json"], {"methods", "policies", "thresholds"}),
    ("bench_classroom.py", ["--quick", "--json"], {"refused", "first_token_p50_s", "first_token_p95_s",
                                                    "class_over_lone", "columns"}),
    ("bench_compare.py", ["--prompts", "1", "--seeds", "1", "--tokens", "4", "--json"], {"summary", "runs"}),
    ("bench_constraints.py", ["--n", "2", "--seeds", "1", "--tokens", "6", "--json"], None),
    ("bench_diffusion.py", ["--length", "16", "--prompts", "1", "--rounds", "1", "--samples", "0"], None),
    ("bench_diffusion.py", ["--model", "tiny-parallel", "--quick", "--per-task", "1", "--json"], {"model", "problems_per_task"}),
    ("bench_dtype.py", ["--tokens", "4", "--rounds", "1", "--json"], None),
    ("bench_eagle.py", ["--tokens", "4", "--rounds", "1", "--configs", "eagle chain 3", "--json"], None),
    ("bench_engine.py", ["--models", "tiny-ar", "--tokens", "4", "--rounds", "1", "--json"], {"rows"}),
    ("bench_faster.py", ["--quick", "--json"], {"configs", "cards", "specmemo"}),
    ("bench_hyperfit.py", ["--tokens", "4", "--json"], None),
    ("bench_long_context.py", ["--model", "tiny-random", "--sizes", "1024", "--tokens", "4", "--rounds", "1", "--json"],
     {"rows", "model"}),
    ("bench_needle.py", ["--model", "tiny-random", "--quick", "--json"], {"rows", "questions", "settings"}),
    ("bench_particles.py", ["--n", "2", "--tokens", "4", "--rounds", "1", "--json"], None),
    ("bench_remote.py", ["--tokens", "4", "--rounds", "1", "--json"], None),
    ("bench_scaling.py", ["--tasks", "1", "--budgets", "1,2", "--json"], {"accuracy", "tokens", "rows"}),
    ("bench_scaling.py", ["--tasks", "1", "--budgets", "1", "--skip-accuracy", "--sweep", "--json"], {"sweep"}),
    ("bench_scaling.py", ["--model", "smollm2-135m", "--tasks", "1", "--budgets", "1,2", "--max-new-tokens", "8",
                          "--json"], {"accuracy"}),
    ("bench_batching.py", ["--model", "tiny-random", "--runs", "3", "--tokens", "4", "--json"],
     {"one_at_a_time", "batched", "identical_tokens", "speedup"}),
    ("bench_serving.py", ["--model", "tiny-ar", "--requests", "3", "--tokens", "4", "--rate", "50", "--rounds", "1",
                          "--json"], {"throughput", "ttft_p95_s", "identical_tokens"}),
    ("bench_spec_trees.py", ["--tokens", "4", "--seeds", "1", "--json"], None),
    ("bench_speculative.py", ["--tokens", "4", "--rounds", "1", "--only", "tiny-ar", "--set-drafters",
                              "draft model,draft model (chain of 4 without cut-off)", "--set-limit", "2",
                              "--set-rounds", "1", "--json"], {"rows", "prompt_set"}),
    ("bench_step_speculation.py", ["--tasks", "1", "--router-thresholds", "0.5", "--json"], {"methods", "gates", "router"}),
    ("bench_streaming.py", ["--quick", "--json"], {"rows", "clips", "unavailable"}),
    ("bench_refine.py", ["--tasks", "1", "--rounds", "2", "--json"], {"rows"}),
]


SMOKED_ELSEWHERE = {  # run on tiny inputs by a test that also checks what they print
    "bench_extract.py": "tests/test_bench_extract.py (--smoke --json)",
    "bench_infalign.py": "tests/scaling/test_infalign.py (--quick --no-model --json; slow: --quick on tiny-math)",
    "bench_judge.py": "tests/scaling/test_judge.py (--from-json on the shipped result; slow: --quick --json on tiny-math)",
    "bench_compute_optimal.py": "tests/scaling/test_compute_optimal.py (slow: collect, fit and eval on one problem)",
    "bench_draw.py": "tests/visualizers/test_visualizer_bounds.py (--quick --rounds 1 --json)",
    "bench_self_spec.py": "tests/speculative/test_layerskip.py (--rounds 1 --tokens 12 --draft-lengths 2 --json)",
    "bench_startup.py": "tests/ui/test_browser_startup.py (its fresh_cache and start_app: one fresh, one cached start)",
}


def run_bench(script: str, args: list[str], monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / script), *args])
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    try:
        runpy.run_path(str(ROOT / "bench" / script), run_name="__main__")
    except SystemExit as done:
        assert done.code in (None, 0), f"{script} {' '.join(args)} exited with {done.code}"
    return capsys.readouterr().out


@pytest.mark.parametrize("script, args, keys", SMOKE, ids=[f"{s} {' '.join(a)}" for s, a, _ in SMOKE])
def test_the_benchmark_runs_on_tiny_inputs(script, args, keys, monkeypatch, capsys):
    out = run_bench(script, args, monkeypatch, capsys)
    if "--json" in args:
        result = json.loads(out)  # one JSON object, nothing else on stdout
        assert isinstance(result, dict) and (keys or set()) <= result.keys(), sorted(result)
    else:
        assert out.strip(), f"{script} printed nothing"


def test_the_budget_curve_draws_from_the_shipped_json(monkeypatch, capsys, tmp_path):
    png = tmp_path / "curve.png"
    run_bench("bench_scaling.py", ["--from-json", str(ROOT / "assets" / "tiny-math" / "bench.json"), "--png", str(png)],
              monkeypatch, capsys)
    assert png.stat().st_size > 10_000


def test_every_bench_script_the_readme_and_docs_name_is_smoked():
    import re

    from doc_pages import docs_text

    named = set(re.findall(r"bench/(bench_[a-z_]+\.py)", docs_text()))
    assert {"bench_compare.py", "bench_scaling.py", "bench_diffusion.py"} <= named  # the docs pages are read
    smoked = {script for script, _, _ in SMOKE} | set(SMOKED_ELSEWHERE)
    assert named <= smoked, named - smoked
