"""The compare benchmark (bench/bench_compare.py) end to end on the tiny random model: the --json shape."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_compare as bc


def test_quick_json_has_every_method_and_every_statistic_a_number_or_null(capsys):
    assert bc.main(["--model", "tiny-random", "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # ONE JSON object, nothing else on stdout
    assert (result["prompts"], result["seeds"], result["tokens"]) == (2, 1, 24)
    assert list(result["summary"]) == list(bc.METHODS)
    assert result["settings"]["top-h 0.4"] == {"strategy": "sample", "params": {"top_h": 0.4, "temperature": 1.0}}
    for method, row in result["summary"].items():
        assert row["runs"] == 2, method  # 2 prompts x 1 seed, deterministic or not
        assert set(bc.STATS) <= row.keys()
        for key in bc.STATS:
            assert row[key] is None or isinstance(row[key], (int, float)), (method, key, row[key])
        assert 0 < row["tokens"] <= 24 and row["cpu_ms_per_token"] > 0
        assert row["logprob_per_token"] < 0 and 0 <= row["distinct_2"] <= 1
    assert len(result["runs"]) == 2 * len(bc.METHODS)
    assert {r["strategy"] for r in result["runs"]} == {"greedy", "sample", "mirostat", "momentum", "adadec"}


def test_deterministic_methods_run_one_seed_and_samplers_every_seed(capsys):
    assert bc.main(["--model", "tiny-random", "--prompts", "1", "--seeds", "2", "--tokens", "6", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert {m: s["runs"] for m, s in summary.items()} == {m: 1 if m in bc.DETERMINISTIC else 2 for m in bc.METHODS}
