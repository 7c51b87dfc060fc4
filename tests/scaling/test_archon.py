"""Archon (decoding/scaling/archon.py, archon_search.py): the space as data, the search (deterministic under a
seed, within the budget; a stub scorer, so it runs in milliseconds), and strategy `archon`, which runs a stored
architecture exactly as the composed strategy runs from the same seed."""

import json
from pathlib import Path

import pytest
import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.models import ASSETS_DIR, load_model
from decoding.run import make_params
from decoding.scaling import archon_space as A
from decoding.scaling import archon_search as S
from decoding.scaling.archon import main as A_main

TINY_SPACE = (A.Technique("best-of-n", "best-of-n", "rank"),
              A.Technique("particle-filter", "particle-filter", "search", min_n=2),
              A.Technique("majority-vote", "majority-vote", "vote", (("weighted", False),), uses_reward=False, min_n=2))


def tiny_space() -> list[A.Candidate]:
    return A.space(TINY_SPACE, samplers=((1.0, 1.0), (0.5, 1.0)), ns=(1, 2, 4, 8), rewards=("arith-step", "spare"))


def stub(c: A.Candidate) -> S.Evaluation:
    """A made-up scorer: accuracy grows with N, the filter and spare help, a low temperature helps a little;
    tokens are 80 per sample (the filter 10% more). The best of all (the filter, N = 8) is over a 600 budget."""
    accuracy = min(1.0, 0.5 + 0.05 * c.n + (0.1 if c.technique.name == "particle-filter" else 0)
                   + (0.05 if c.reward == "spare" and c.technique.uses_reward else 0) + (0.02 if c.temperature < 1 else 0))
    tokens = 80.0 * c.n * (1.1 if c.technique.name == "particle-filter" else 1.0)
    return S.Evaluation(round(accuracy, 4), tokens, 30)


def brute_force_best(candidates, budget):
    feasible = [(stub(c), i, c) for i, c in enumerate(candidates) if stub(c).tokens <= budget]
    return min(feasible, key=lambda t: (-t[0].accuracy, t[0].tokens, t[1]))[2]


def test_the_space_is_data_and_every_candidate_is_a_runnable_strategy():
    candidates = A.space()
    assert len({c.key for c in candidates}) == len(candidates) > 500
    assert [c.key for c in candidates if c.temperature == 0] == ["best-of-n N=1 T=0 top_p=1"]  # greedy, once
    assert all(c.n % 2 == 0 for c in candidates if c.strategy == "reward-beam")
    for c in candidates[::7]:  # the mapping onto the lab's strategies: params each strategy accepts
        make_params(c.strategy, c.params())
    refine = next(c for c in candidates if c.technique.name == "refine-3")
    assert [layer["layer"] for layer in refine.layers()] == ["generate", "rank", "refine"]
    assert refine.architecture()["params"]["rounds"] == 3 and refine.strategy == "refine"
    vote = next(c for c in candidates if c.technique.name == "majority-vote")
    assert "reward" not in vote.layers()[1] and "arith-step" not in vote.key  # a plain vote ignores the reward


def test_the_search_is_deterministic_under_a_seed():
    candidates = tiny_space()
    runs = [S.itas(candidates, stub, 600, seed=seed, init=3, iters=5) for seed in (0, 0, 1, 2, 3)]
    assert runs[0] == runs[1]  # the same seed: the same candidates in the same order, the same log
    assert len(runs[0]) == 8 and [e["phase"] for e in runs[0]] == ["random"] * 3 + ["bo"] * 5
    assert len({tuple(e["key"] for e in run if e["phase"] == "random") for run in runs}) > 1  # the seed matters


def test_the_budget_is_respected_and_the_best_within_it_is_found():
    candidates = tiny_space()
    budget = 600
    over = max(candidates, key=lambda c: stub(c).accuracy)
    assert stub(over).tokens > budget  # the most accurate one is too expensive
    entries = S.itas(candidates, stub, budget, seed=0, init=3, iters=len(candidates))  # every candidate, in the end
    assert {e["key"] for e in entries} == {c.key for c in candidates}
    assert all(e["feasible"] == (e["tokens"] <= budget) for e in entries)
    kept = S.finalists(entries, 3)
    assert all(e["tokens"] <= budget for e in kept) and over.key not in [e["key"] for e in kept]
    assert kept[0]["key"] == brute_force_best(candidates, budget).key
    first_bo = next(e for e in entries if e["phase"] == "bo")
    assert first_bo["predicted_tokens"] > 0 and 0 <= first_bo["acquisition"]


def test_the_token_surrogate_predicts_what_the_runs_spend():
    """Tokens grow as N: once a few candidates ran, the surrogate's prediction of a proposal's tokens (what
    its P(within the budget) rests on) is within 10% of what the proposal then spent."""
    entries = S.itas(tiny_space(), stub, 600, seed=0, init=4, iters=8)
    proposed = [e for e in entries if e["phase"] == "bo"]
    assert len(proposed) == 8
    assert all(abs(e["predicted_tokens"] - e["tokens"]) < 0.1 * e["tokens"] for e in proposed)


def test_a_pruned_candidate_is_never_kept():
    candidates = tiny_space()
    pruned = lambda c: S.Evaluation(1.0, 2000.0, 8, pruned=True) if c.n == 8 else stub(c)
    entries = S.itas(candidates, pruned, 600, seed=0, init=3, iters=len(candidates))
    assert any(e["pruned"] for e in entries) and all(not e["feasible"] for e in entries if e["pruned"])
    assert all(not e["pruned"] for e in S.finalists(entries, 5))


def test_the_surrogate_fits_what_it_saw():
    x = torch.tensor([[0.0], [0.5], [1.0], [2.0]], dtype=torch.float64)
    y = torch.tensor([0.1, 0.4, 0.8, 0.2], dtype=torch.float64)
    mu, sd = S.GP(x, y, noise=1e-6).predict(x)
    assert mu.tolist() == pytest.approx(y.tolist(), abs=1e-3) and float(sd.max()) < 0.05
    far_mu, far_sd = S.GP(x, y, noise=1e-6).predict(torch.tensor([[30.0]], dtype=torch.float64))
    assert float(far_sd) > 0.1 and float(far_mu) == pytest.approx(float(y.mean()), abs=0.05)


def test_baseline_n_is_the_largest_n_within_the_budget():
    make = lambda n: A.Candidate(TINY_SPACE[0], n, 1.0, 1.0, "arith-step")
    tried = []

    def evaluate(c):
        tried.append(c.n)
        return S.Evaluation(0.5, 79.0 * c.n, 30)

    assert S.baseline_n(evaluate, make, 75.0, 600, ns=(1, 2, 4, 6, 8)).n == 6  # 8 x 75 fits, 8 x 79 does not
    assert tried == [8, 6]


# Strategy archon -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def math_lm():
    return LM(load_model("tiny-math", progress=None))


QUESTION = "Zoe has 63 books. She gives away 13, gets 49 more, then gets 22 more. How many books now?\n"
SMALL = {"key": "test", "strategy": "particle-filter",
         "params": {"n": 3, "reward": "arith-step", "temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40},
         "layers": [{"layer": "generate", "n": 3}, {"layer": "search", "technique": "particle-filter"}]}


def untimed(trace, drop_archon=False) -> list[dict]:
    out = []
    for event in trace.events[1:]:  # the start event names the strategy run (archon or the composed one)
        d = {k: v for k, v in event.to_dict().items() if not k.endswith("_s")}
        if drop_archon and isinstance(d.get("extra"), dict):
            d["extra"] = {k: v for k, v in d["extra"].items() if k != "archon"}
        out.append(d)
    return out


def test_archon_runs_the_stored_architecture_as_the_composed_strategy_runs(math_lm, monkeypatch):
    monkeypatch.setitem(A.SHIPPED, "test", SMALL)
    ours = run_to_trace(math_lm, QUESTION, strategy="archon", params={"config": "test"}, max_new_tokens=80,
                        chat=False, seed=5)
    direct = run_to_trace(math_lm, QUESTION, strategy=SMALL["strategy"], params=SMALL["params"], max_new_tokens=80,
                          chat=False, seed=5)
    assert untimed(ours, drop_archon=True) == untimed(direct)
    steps = ours.of_kind("particles")
    assert steps and all(s.extra["archon"]["strategy"] == "particle-filter" for s in steps)
    assert ours.finish.extra["archon"]["layers"] == SMALL["layers"] and ours.finish.text == direct.finish.text
    from decoding.events import Trace
    from visualizers.particles import particles_html

    assert Trace.from_json(ours.to_json()).events == ours.events  # the extra passes the loaded-trace checks
    assert "archon (test): test" in particles_html(steps[-1])  # the particles' header names the architecture


def test_archon_reads_the_architecture_beside_the_model(math_lm):
    from decoding.models import file_beside

    stored = json.loads(file_beside(math_lm.loaded, A.ARCHON_FILE).read_text())["architecture"]
    assert A.architecture_for("found", math_lm) == stored
    assert A.checked(stored, "archon.json") is stored


def test_the_shipped_architectures_are_the_searches_results():
    """Each architecture shipped in the code is copied from the JSON its search wrote (so the two never differ)."""
    assert set(A.SHIPPED) == set(A.SHIPPED_FROM)
    for name, arch in A.SHIPPED.items():
        assert arch == json.loads((ASSETS_DIR / A.SHIPPED_FROM[name]).read_text())["architecture"]
        A.checked(arch, name)


@pytest.mark.parametrize("arch, message", [
    ({"strategy": "archon", "params": {}}, "other than archon"),
    ({"strategy": "particle-filter", "params": {"n": 0}}, "`n` must be"),
])
def test_a_bad_architecture_is_refused_with_its_name(arch, message):
    with pytest.raises(ValueError, match=message):
        A.checked(arch, "archon.json")


def test_an_unknown_config_is_named(math_lm):
    with pytest.raises(ValueError, match="`config` must be found or one of"):
        A.architecture_for("nope", math_lm)
    with pytest.raises(ValueError, match="`config` must be"):
        run_to_trace(math_lm, QUESTION, strategy="archon", params={"config": "nope"}, max_new_tokens=8, chat=False)


def test_found_needs_a_file_beside_the_model(tiny_lm):
    with pytest.raises(ValueError, match="`config` found needs archon.json beside the model"):
        A.architecture_for("found", tiny_lm)


@pytest.mark.slow  # about 40 short runs of tiny-math
def test_the_search_command_runs_on_a_few_problems(tmp_path):
    """The command the docs give, on 2 problems and 2 candidates (a smoke test of the wiring)."""
    out = tmp_path / "archon.json"
    assert A_main(["search", "--budget", "200", "--tasks", "2", "--init", "1", "--iters", "1", "--final-tasks", "2",
                   "--test-tasks", "1", "--rewards", "arith-step", "--max-new-tokens", "64", "--out", str(out)]) in (0, 1)
    result = json.loads(out.read_text())
    assert {"log", "finalists", "architecture", "baselines", "space"} <= result.keys()
    assert result["log"][0]["phase"] == "anchor" and result["space"]["rewards"] == ["arith-step"]
    assert Path(out).stat().st_size < 100_000


@pytest.mark.slow  # two full runs of tiny-math (A* expands 9 nodes; best-of-7)
def test_the_archon_preset_does_what_its_note_says(math_lm):
    from decoding.presets import find_preset
    from decoding.scaling.archon_search import tokens_of

    preset = find_preset("scaling", "42-archon-found-architecture")
    run = dict(max_new_tokens=preset.max_new_tokens, chat=False, seed=preset.seed)
    ours = run_to_trace(math_lm, preset.prompt, strategy="archon", params=preset.params, **run)
    shared = {k: v for k, v in preset.params.items() if k != "config"}  # what "Compare with" gets
    other = run_to_trace(math_lm, preset.prompt, strategy="best-of-n", params=shared, **run)
    steps = ours.of_kind("particles")
    assert ours.finish.extra["answer"] == "45" and len(steps) == 9 and tokens_of(ours) == 532
    wrong = [sum(node["f"] > 0.5 for node in s.extra["nodes"]) for s in steps]
    assert wrong[2] == 4 and wrong[4] == 3  # the third and fifth lines' candidates
    assert other.finish.extra["answer"] == "162" and tokens_of(other) == 768
    assert [p["score"] < 0.5 for p in other.finish.extra["particles"]].count(True) == 5  # five slipped a digit
    for claim in ("45", "532", "768", "162", "9 nodes", "four are wrong", "three are"):
        assert claim in preset.note


@pytest.mark.parametrize("name", ["tiny-math-600", "tiny-math-600-no-reference"])
def test_the_shipped_search_logs_are_what_the_search_chooses_from_their_measurements(name):
    """Replaying a shipped search with its own logged measurements as the scorer proposes the same candidates
    in the same order: the log is this code's search, not an edited one."""
    result = json.loads((ASSETS_DIR / A.SHIPPED_FROM[name]).read_text())
    measured = {e["key"]: S.Evaluation(e["accuracy"], e["tokens"], e["problems"], e["pruned"]) for e in result["log"]}
    recorded = result["space"]  # the space as it was searched (TECHNIQUES may have grown since)
    candidates = A.space([t for t in A.TECHNIQUES if t.name in recorded["techniques"]],
                         tuple(map(tuple, recorded["samplers"])), tuple(recorded["ns"]), tuple(recorded["rewards"]))
    assert len(candidates) == result["space"]["size"]
    by_key = {c.key: c for c in candidates}
    anchors = [by_key[e["key"]] for e in result["log"] if e["phase"] == "anchor"]
    replay = S.itas(candidates, lambda c: measured[c.key], result["budget"], seed=result["seed"],
                    init=result["search"]["init"], iters=result["search"]["iters"], anchors=anchors)
    assert [(e["key"], e["phase"]) for e in replay] == [(e["key"], e["phase"]) for e in result["log"]]
    assert S.finalists(replay, 3)[0]["key"] in [f["key"] for f in result["finalists"]]
    kept = min((f for f in result["finalists"] if f["feasible"]), key=S.rank_key)  # the best on 100 val problems
    assert result["architecture"]["key"] == kept["key"] and kept["tokens"] <= result["budget"]
