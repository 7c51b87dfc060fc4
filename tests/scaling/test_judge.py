"""The LLM-as-a-judge model (decoding/scaling/judge.py, judge_fit.py; Halder and Pehlevan 2025, arXiv
2512.19905): its exact value against brute-force enumeration, its limits, the finite optimum k* under a
misspecified judge and none under a well-specified one, and the fit. No model."""

from __future__ import annotations

import json
import runpy
import sys

import numpy as np
import pytest

from conftest import ROOT
from decoding.scaling import judge
from decoding.scaling import judge_fit as jf

TEMPERATURES = (0.0, 0.05, 0.3, 1.0, 5.0, float("inf"))


def random_law(rng, n: int, ties: bool) -> judge.Law:
    p = rng.dirichlet(np.ones(n))
    scores = rng.integers(0, 2, n).astype(float) if ties else rng.normal(size=n)
    return judge.Law(p, rng.random(n), scores)


@pytest.mark.parametrize("seed, n, ties", [(0, 2, False), (1, 3, False), (2, 4, True), (3, 3, True)])
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_the_value_equals_brute_force_enumeration(seed, n, ties, temperature):
    law = random_law(np.random.default_rng(seed), n, ties)
    ks = np.arange(1, 6)
    got = judge.value(law, ks, temperature)
    want = [judge.brute_force(law, k, temperature) for k in ks]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_k_1_is_one_sample_and_the_limits_in_t():
    law = random_law(np.random.default_rng(5), 6, ties=False)
    ks = np.arange(1, 20)
    for t in TEMPERATURES:
        assert judge.value(law, [1], t)[0] == pytest.approx(law.mean, abs=1e-10)
    np.testing.assert_allclose(judge.value(law, ks, 1e-3), judge.value(law, ks, 0.0), atol=1e-8)  # T -> 0: argmax
    np.testing.assert_allclose(judge.value(law, ks, 1e5), law.mean, atol=1e-4)  # T -> inf: uniform


def misspecified() -> judge.Law:
    """Right (score 0), an obvious wrong the judge rejects (score -2, common) and a plausible wrong it prefers
    (score 1, rare): the judge helps at small k and hurts once a plausible wrong is likely among the k."""
    return judge.Law([0.4, 0.55, 0.05], [1.0, 0.0, 0.0], [0.0, -2.0, 1.0])


def test_a_misspecified_judge_has_a_finite_optimal_k():
    ks = np.arange(1, 65)
    for t in (0.0, 0.2, 0.5):
        curve = judge.value(misspecified(), ks, t)
        k_star, interior = judge.optimal_k(curve, ks)
        assert interior and 1 < k_star < 30, (t, k_star)
        assert curve[k_star - 1] > curve[0] + 0.1 and curve[-1] < curve[k_star - 1] - 0.1
    # closed form at T = 0: P(a plausible wrong among k) kills it, else right wins if present
    k = np.arange(1, 10)
    np.testing.assert_allclose(judge.value(misspecified(), k, 0.0), 0.95 ** k - 0.55 ** k, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_a_judge_that_ranks_by_the_value_never_stops_paying(seed):
    rng = np.random.default_rng(seed)
    values = rng.random(5)
    law = judge.Law(rng.dirichlet(np.ones(5)), values, 3 * values)  # score increasing in the value
    ks = np.arange(1, 41)
    for t in (0.0, 0.1, 1.0):
        curve = judge.value(law, ks, t)
        assert np.all(np.diff(curve) >= -1e-12) and not judge.optimal_k(curve, ks)[1]


def test_the_papers_regression_picture():
    """Candidates y ~ N(0, 1), squared error to the teacher at 0: a judge centred on the teacher drives the
    error down like 1/k^2 (the paper's best-of-k law); one centred a standard deviation away has a finite k*."""
    ks = np.arange(1, 33)
    right = judge.value(judge.regression_cells(0.0, 1.0, 0.0, 0.0), ks, 0.0)
    assert np.all(np.diff(right) < 0) and right[0] == pytest.approx(1.0, abs=1e-3)
    assert 3.0 < right[15] / right[31] < 4.5  # doubling k divides the error by about 4
    off = judge.value(judge.regression_cells(0.0, 1.0, 0.0, 1.0), ks, 0.0)
    k_star, interior = judge.optimal_k(-off, ks)
    assert interior and k_star == 2 and off[-1] > off[0] - 0.01  # past k*, worse than one sample at k = 32


def test_a_mixture_is_the_mixed_law():
    rng = np.random.default_rng(7)
    a, b = random_law(rng, 3, False), random_law(rng, 4, True)
    w = np.array([[0.3, 0.7], [1.0, 0.0]])
    for t in (0.0, 0.4, float("inf")):
        got = judge.mixture_value([a, b], w, [1, 3, 7], t)
        for row, (wa, wb) in zip(got, w):
            mixed = judge.Law(np.r_[wa * a.probs, wb * b.probs], np.r_[a.values, b.values], np.r_[a.scores, b.scores])
            np.testing.assert_allclose(row, judge.value(mixed, [1, 3, 7], t), atol=1e-10)


def test_gaussian_classes_on_cells_match_monte_carlo():
    """Right ~ N(0, 0.5^2) and wrong ~ N(-1, 1.5^2) judge scores (a wider wrong class: its tail wins at large k),
    put on shared cells, against 200000 simulated best-of-k draws."""
    fit = jf.ClassFit(np.array([0.0, -1.0]), np.array([0.5, 1.5]), np.zeros(1), np.array([1, 1]))
    ks = np.array([1, 4, 16])
    model = jf.predict(fit, [1.0, 0.0], np.array([[0.5, 0.5]]), ks, 0.0)
    rng = np.random.default_rng(0)
    for k, want in zip(ks, model):
        right = rng.random((200_000, k)) < 0.5
        s = np.where(right, rng.normal(0, 0.5, right.shape), rng.normal(-1, 1.5, right.shape))
        got = right[np.arange(len(s)), s.argmax(1)].mean()
        assert abs(got - want) < 0.005, (k, got, want)


def test_the_fit_recovers_its_parameters():
    rng = np.random.default_rng(1)
    problems = []
    for _ in range(60):
        c = rng.integers(0, 3, 40)
        problems.append((rng.normal(5, 3) + np.array([0.0, 1.0, -4.0])[c] + np.array([0.3, 0.8, 1.5])[c]
                         * rng.normal(size=40), c))
    fit = jf.fit_classes(problems, 3)
    np.testing.assert_allclose(fit.means, [0.0, 1.0, -4.0], atol=0.1)
    assert abs(fit.means[0]) < 1e-12  # around the problem's right answers
    np.testing.assert_allclose(fit.sds, [0.3, 0.8, 1.5], rtol=0.1)
    np.testing.assert_allclose(fit.sds[1:], [0.8, 1.5], rtol=0.05)


@pytest.mark.parametrize("call, field", [
    (lambda: judge.Law([0.5, 0.6], [1, 0], [0, 1]), "`probs`"),
    (lambda: judge.Law([0.5, 0.5], [1, 0], [0, np.nan]), "`scores`"),
    (lambda: judge.Law([1.0], [1, 0], [0, 1]), "one length"),
    (lambda: judge.value(misspecified(), [0, 1], 0.0), "`k`"),
    (lambda: judge.value(misspecified(), [1], -1.0), "`temperature`"),
    (lambda: judge.brute_force(misspecified(), 40, 0.0), "`k` too large"),
    (lambda: jf.fit_classes([(np.zeros(3), np.array([0, 1, 5]))], 3), "classes in"),
])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def run_bench(args, monkeypatch, capsys) -> str:
    script = ROOT / "bench" / "bench_judge.py"
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as done:
        assert done.code in (None, 0)
    return capsys.readouterr().out


@pytest.mark.fast("reads the shipped result file; loads no model")
def test_the_bench_prints_a_written_result(monkeypatch, capsys, tmp_path):
    path = tmp_path / "judge.json"
    path.write_text((ROOT / "assets" / "tiny-math" / "judge.json").read_text(encoding="utf-8"), encoding="utf-8")
    out = run_bench(["--from-json", str(path)], monkeypatch, capsys)
    assert "k* measured / predicted" in out and "T=0 " in out


@pytest.mark.slow
def test_the_bench_on_tiny_math(monkeypatch, capsys, tmp_path):
    out = run_bench(["--quick", "--problems", "3", "--samples", "6", "--json", "--write", str(tmp_path / "j.json")],
                    monkeypatch, capsys)
    result = json.loads(out)
    assert result["ks"] == list(range(1, 17)) and set(result["measured"]) == {"0", "0.5", "1", "2", "4"}
    for t in result["temperatures"]:  # k = 1 is one sample, measured and predicted alike
        assert result["measured"][t][0] == pytest.approx(result["single_sample"], abs=1e-3)
        assert result["predicted"][t][0] == pytest.approx(result["single_sample"], abs=1e-3)
    assert json.loads((tmp_path / "j.json").read_text())["problems"] == 3
