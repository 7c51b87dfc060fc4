"""Compute-optimal scaling per prompt (decoding.scaling.compute_optimal, compute_fit): the difficulty estimate, the
fit on hand-made records, and the strategy on tiny-math with a hand-made table (and with the shipped one)."""

import json
import runpy
import sys

import pytest

from conftest import ROOT
from decoding import run_to_trace
from decoding.events import stats
from decoding.scaling import compute_fit as cf
from decoding.scaling import compute_optimal as co
from decoding.scaling.tasks import menu_tasks

TASKS = {t["id"]: t for t in menu_tasks() if t["model"] == "tiny-math"}
MATH = {"reward": "arith-step", "temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}


def test_the_probe_difficulty_counts_checked_samples_that_agree():
    d = lambda answers, scores, ended=None: co.probe_difficulty(answers, scores, ended or [True] * len(answers), 0.5)
    assert d(["5", "5"], [0.5, 0.5])["difficulty"] == 0.0  # both pass every check and agree: easy
    assert d(["5", "6"], [0.5, 0.5]) == {"n": 2, "passed": 2, "agree": 1, "difficulty": 0.5}
    assert d(["5", "5"], [0.5, 0.05])["difficulty"] == 0.5  # one slipped
    assert d(["5", "5"], [0.05, 0.05])["difficulty"] == 1.0  # none passed: hard
    assert d(["5", None], [0.5, 0.5], [True, False])["difficulty"] == 0.5  # cut off: no answer, no vote
    assert d(["5", "5", "7", "7"], [0.5] * 4)["difficulty"] == 0.5  # a tie: the plurality has 2 of 4


def test_sparse_bins_merge_into_the_next_harder_one():
    bins = cf.make_bins([0.0] * 20 + [0.25] * 3 + [0.5] * 12 + [0.75] * 2 + [1.0] * 30, min_count=10)
    assert [(b["name"], b["max_difficulty"], b["count"]) for b in bins] == [
        ("easy", 0.0, 20), ("medium", 0.5, 15), ("hard", 1.0, 32)]
    assert co.bin_of(bins, 0.25) == "medium" and co.bin_of(bins, 0.0) == "easy" and co.bin_of(bins, 1.0) == "hard"


def record(i: int, easy: bool) -> dict:
    """An easy problem: every sample right and checked (20 tokens each). A hard one: samples slip and disagree,
    only the particle filter of 8 solves it."""
    samples = [{"answer": "5" if easy else str(i), "score": 0.5 if easy else 0.05, "ended": True, "tokens": 20,
                "correct": easy} for i in range(16)]
    runs = {co.option_label(o): {"correct": easy or o == {"method": "particle-filter", "n": 8}, "tokens": 50 * o["n"]}
            for o in cf.RUN_OPTIONS}
    return {"id": f"val-{i}", "answer": 5, "difficulty": 3 if easy else 8, "samples": samples, "runs": runs}


def test_the_fit_spends_little_on_easy_prompts_and_searches_on_hard_ones():
    records = [record(i, easy=i % 2 == 0) for i in range(40)]
    level = cf.fit(records, levels=(16,), probes=(1, 2), min_count=5)["16"]
    assert level["budget_tokens"] == 16 * 20  # best-of-16's mean tokens
    assert level["probe"] == 1 and [b["name"] for b in level["bins"]] == ["easy", "hard"]
    assert level["allocation"]["easy"] == {"method": "best-of-n", "n": 1}  # the probe is the answer
    assert level["allocation"]["hard"] == {"method": "particle-filter", "n": 8}  # 20 + 400 tokens: over the budget
    # ... on its own, but the easy half's savings pay for it: the mean stays within best-of-16's 320 tokens
    assert level["val_accuracy"] == 1.0 and level["val_tokens"] <= level["budget_tokens"]
    assert level["uniform"] == {"method": "best-of-n", "n": 1} and level["uniform_val_accuracy"] == 0.5
    assert level["best_of_n_val_accuracy"] == 0.5


def table_file(tmp_path, allocation: dict, probe: int = 2, uniform=None):
    table = {"model": "tiny-math", "split": "val", "problems": 0, "sampling": MATH, "levels": {"4": {
        "probe": probe, "accept": 0.5, "allocation": allocation, "uniform": uniform or {"method": "best-of-n", "n": 4},
        "bins": [{"name": "easy", "max_difficulty": 0.0}, {"name": "hard", "max_difficulty": 1.0}]}}}
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    return path


def run(task_id, strategy="compute-optimal", **params):
    return run_to_trace("tiny-math", TASKS[task_id]["prompt"], strategy=strategy,
                        params=MATH | {"n": 4} | params, max_new_tokens=160, seed=0, chat=False)


def test_a_hard_prompt_runs_the_bins_method_after_the_probe(tmp_path, monkeypatch):
    # every bin runs a particle filter of 4: the probe's two samples, then the filter's steps continue them
    monkeypatch.setattr(co, "TABLE_PATH", table_file(tmp_path, {"easy": {"method": "particle-filter", "n": 4},
                                                                "hard": {"method": "particle-filter", "n": 4}}))
    trace = run("m6")
    steps = trace.of_kind("particles")
    phases = [s.extra["allocation"]["phase"] for s in steps]
    probe = [s for s in steps if s.extra["allocation"]["phase"] == "probe"]
    assert phases == sorted(phases, key=["probe", "run"].index) and probe and len(probe[0].particles) == 2
    after = [s for s in steps if s.extra["allocation"]["phase"] == "run"]
    assert {s.method for s in after} == {"particle-filter"} and len(after[0].particles) == 4
    assert [s.step for s in steps] == list(range(len(steps)))  # one step numbering across both
    assert all(a.tokens_spent <= b.tokens_spent for a, b in zip(steps, steps[1:]))
    assert after[0].tokens_spent > probe[-1].tokens_spent
    alloc = trace.finish.extra["allocation"]
    assert alloc["choice"] == "particle-filter N=4" and alloc["bin"] in ("easy", "hard")
    assert alloc["probe"]["n"] == 2 and 0 <= alloc["difficulty"] <= 1
    assert trace.finish.extra["method"] == "compute-optimal" and "particle-filter N=4" in trace.finish.extra["rule"]


def test_best_of_n_keeps_the_probe_samples_in_its_pool(tmp_path, monkeypatch):
    monkeypatch.setattr(co, "TABLE_PATH", table_file(tmp_path, {"easy": {"method": "best-of-n", "n": 4},
                                                                "hard": {"method": "best-of-n", "n": 4}}))
    trace = run("m1")
    pool = trace.of_kind("particles")[-1]
    assert pool.extra["allocation"]["phase"] == "pool" and len(pool.particles) == 4
    assert pool.extra["allocation"]["choice"] == "best-of-n N=4: the 2 probes and 2 more"
    plain = run("m1", strategy="best-of-n", n=2)  # the probe: the same seed, the same two samples
    probe_texts = sorted(p["text"] for p in plain.finish.extra["particles"])
    assert sorted(p["text"] for p in pool.particles[2:]) == probe_texts
    assert stats(trace)["tokens_spent"] == sum(p["num_tokens"] for p in pool.particles)  # nothing spent twice


def test_an_easy_prompt_stops_at_the_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(co, "TABLE_PATH", table_file(tmp_path, {"easy": {"method": "best-of-n", "n": 1},
                                                                "hard": {"method": "particle-filter", "n": 4}}))
    trace = run("m0")  # a 3-step problem both probes solve and check
    alloc = trace.finish.extra["allocation"]
    assert (alloc["bin"], alloc["difficulty"]) == ("easy", 0.0)
    assert alloc["choice"] == "best-of-n N=2: the probes only, nothing more spent"
    assert {s.extra["allocation"]["phase"] for s in trace.of_kind("particles")} == {"probe"}
    assert trace.finish.extra["answer"] == TASKS["m0"]["answer"]
    from visualizers.particles import choice_html, particles_html

    assert "estimating the difficulty" in particles_html(trace.of_kind("particles")[-1])  # the probe under way
    decided = choice_html(trace.finish.extra)  # the decision, with the final choice
    assert "estimated difficulty 0" in decided and "bin <b>easy</b>" in decided and "the probes only" in decided


def test_uniform_runs_the_tables_single_option_without_a_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(co, "TABLE_PATH", table_file(tmp_path, {"easy": {"method": "best-of-n", "n": 1},
                                                                "hard": {"method": "best-of-n", "n": 1}},
                                                     uniform={"method": "refine", "n": 1, "params": {"rounds": 2}}))
    trace = run("m6", allocation="uniform")
    assert {s.method for s in trace.of_kind("particles")} == {"refine"}
    assert trace.finish.extra["allocation"]["bin"] == "all (uniform)"
    from visualizers.particles import choice_html

    assert "<b>uniform allocation</b>: refine N=1 (rounds=2) for every prompt" in choice_html(trace.finish.extra)


def test_the_budget_level_must_be_one_of_the_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(co, "TABLE_PATH", table_file(tmp_path, {"easy": {"method": "best-of-n", "n": 1},
                                                                "hard": {"method": "best-of-n", "n": 1}}))
    with pytest.raises(ValueError, match=r"`n` must be a budget level of the compute-optimal table \(4\), got 3"):
        run("m0", n=3)


@pytest.mark.fast("names tiny-math, loads no model")
def test_the_shipped_table_fits_every_level_within_its_budget():
    table = co.load_table()
    assert table["model"] == "tiny-math" and table["split"] == "val" and set(table["levels"]) == {"1", "2", "4", "8", "16"}
    for level in table["levels"].values():
        assert level["val_tokens"] <= level["budget_tokens"] + 1e-6
        assert set(level["allocation"]) == {b["name"] for b in level["bins"]}


@pytest.mark.slow  # the real model tiny-math, every option on one problem
def test_the_benchmark_collects_fits_and_evaluates_on_tiny_inputs(tmp_path, monkeypatch, capsys):
    script = ROOT / "bench" / "bench_compute_optimal.py"
    monkeypatch.setattr(co, "TABLE_PATH", co.TABLE_PATH)  # the bench points the strategy at its table: put it back
    records, table = tmp_path / "val.jsonl", tmp_path / "table.json"
    for args in (["collect", "--tasks", "1", "--out", str(records)],
                 ["fit", "--records", str(records), "--write", str(table), "--min-count", "1", "--levels", "2"],
                 ["eval", "--tasks", "1", "--table", str(table), "--json"]):
        monkeypatch.setattr(sys, "argv", [str(script), *args])
        runpy.run_path(str(script), run_name="__main__")
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"rows", "side_by_side", "by_bin"} <= result.keys() and result["side_by_side"][0]["level"] == 2
