"""InfAlign on a categorical base policy (decoding/scaling/infalign.py): calibration, the exact best-of-N win
rate, the transforms against their closed forms in the continuous (uniform) limit, the optimal transform, and
the effect the paper reports (aligning for best-of-N beats aligning for one sample, under best-of-N)."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest

from decoding.scaling import infalign as ia

# ------------------------------------------------------------- closed forms of the continuous (uniform) model


def uniform_identity(lam: float, n: int) -> tuple[float, float]:
    """(KL, best-of-n vs best-of-n win rate) of p(u) = lam e^(lam u) / (e^lam - 1) on [0, 1], the
    calibrated-identity tilt at beta = 1 / lam, in closed form (finite sums, no quadrature):
    KL = lam E[u] - log((e^lam - 1) / lam), E[u] = 1 / (1 - e^-lam) - 1 / lam;
    W = 1 - n int_0^1 u^(n-1) F(u)^n du with F = (e^(lam u) - 1) / (e^lam - 1), expanded binomially."""
    mean = 1 / (1 - math.exp(-lam)) - 1 / lam
    kl = lam * mean - math.log((math.exp(lam) - 1) / lam)

    def moment(a: float, m: int) -> float:  # int_0^1 u^m e^(a u) du
        if a == 0:
            return 1 / (m + 1)
        total = sum((-1) ** k * math.factorial(m) / math.factorial(m - k) * math.exp(a) / a ** (k + 1)
                    for k in range(m + 1))
        return total - (-1) ** m * math.factorial(m) / a ** (m + 1)

    integral = sum(math.comb(n, j) * (-1) ** (n - j) * moment(j * lam, n - 1) for j in range(n + 1))
    return kl, 1 - n * integral / (math.exp(lam) - 1) ** n


def uniform_exp(beta: float, t: float, n: int) -> tuple[float, float]:
    """(KL, win rate) of p(u) ∝ exp(e^(t u) / beta) on [0, 1], the exponential transform: with w = e^(tu) / beta,
    Z = (Ei(e^t / beta) - Ei(1 / beta)) / t, F(u) = (Ei(e^(tu) / beta) - Ei(1 / beta)) / (t Z),
    KL = (exp(e^t / beta) - exp(1 / beta)) / (t Z) - log Z; the win rate integrates the closed-form F once."""
    ei0 = mpmath.ei(1 / beta)
    z = (mpmath.ei(mpmath.e ** t / beta) - ei0) / t
    kl = (mpmath.exp(mpmath.e ** t / beta) - mpmath.exp(1 / beta)) / (t * z) - mpmath.log(z)

    def cdf(u):
        return (mpmath.ei(mpmath.exp(t * u) / beta) - ei0) / (t * z)

    win = 1 - n * mpmath.quad(lambda u: u ** (n - 1) * cdf(u) ** n, [0, 1])
    return float(kl), float(win)


@pytest.mark.parametrize("lam, n", [(1.0, 1), (3.0, 1), (3.0, 2), (6.0, 4), (10.0, 8)])
def test_the_calibrated_identity_matches_its_closed_form_as_k_grows(lam, n):
    kl_true, win_true = uniform_identity(lam, n)
    errors = []
    for k in (50, 200, 1000):
        p0, r = ia.uniform_problem(k)
        pi = ia.aligned(p0, r, "calibrated", 1 / lam)
        errors.append((abs(ia.kl(pi, p0) - kl_true), abs(ia.win_rate(pi, p0, r, n) - win_true)))
    assert errors[-1][0] < 1e-5 and errors[-1][1] < 2e-3, errors
    assert errors[-1][0] < errors[0][0] and errors[-1][1] < errors[0][1]  # converging, not a coincidence


@pytest.mark.parametrize("beta, t, n", [(0.5, 1.0, 1), (5.0, 3.0, 4), (20.0, 5.0, 4), (50.0, 6.0, 8)])
def test_the_exponential_transform_matches_its_closed_form_as_k_grows(beta, t, n):
    kl_true, win_true = uniform_exp(beta, t, n)
    assert kl_true > 0.05  # a real tilt, not the base policy
    p0, r = ia.uniform_problem(2000)
    pi = ia.aligned(p0, r, "exp", beta, t=t)
    assert ia.kl(pi, p0) == pytest.approx(kl_true, abs=1e-4)
    assert ia.win_rate(pi, p0, r, n) == pytest.approx(win_true, abs=1e-3)
    assert np.allclose(ia.transform(np.linspace(0, 1, 5), "exp", t), np.exp(t * np.linspace(0, 1, 5)))


def test_best_of_n_of_the_base_matches_the_known_limits():
    """bon_n(p0) against one base sample wins n / (n + 1) and has KL log n - (n - 1) / n (continuous rewards)."""
    p0, r = ia.uniform_problem(4000)
    for n in (2, 4, 16):
        assert ia.win_rate(p0, p0, r, n, m=1) == pytest.approx(n / (n + 1), abs=1e-4)
        lv = ia.levels(p0, r)
        q = ia.bon_mass(lv.p0, n)
        assert ia.kl(q, lv.p0) == pytest.approx(math.log(n) - (n - 1) / n, abs=1e-3)


# ------------------------------------------------------------------------------ exact, against enumeration


def enumerated_win_rate(pi, p0, r, n, m):
    """Every tuple of n draws from pi and m from p0, the best of each kept: the win rate by brute force."""
    k, total = len(p0), 0.0
    for ours in itertools.product(range(k), repeat=n):
        for theirs in itertools.product(range(k), repeat=m):
            prob = np.prod(pi[list(ours)]) * np.prod(p0[list(theirs)])
            a, b = max(r[i] for i in ours), max(r[i] for i in theirs)
            total += prob * (1.0 if a > b else 0.5 if a == b else 0.0)
    return total


@pytest.mark.parametrize("n, m", [(1, 1), (2, 2), (3, 1), (2, 3)])
def test_the_win_rate_equals_enumeration_with_ties(n, m):
    p0 = np.array([0.1, 0.3, 0.2, 0.25, 0.15])
    r = np.array([0.5, 2.0, 2.0, -1.0, 3.0])  # two outcomes tie
    pi = ia.aligned(p0, r, "exp", 0.3, t=2.0)
    assert ia.win_rate(pi, p0, r, n, m) == pytest.approx(enumerated_win_rate(pi, p0, r, n, m), abs=1e-12)
    assert ia.win_rate(p0, p0, r, n) == pytest.approx(0.5, abs=1e-12)


def test_calibration_is_the_win_rate_against_one_base_sample():
    p0 = np.array([0.1, 0.3, 0.2, 0.25, 0.15])
    r = np.array([0.5, 2.0, 2.0, -1.0, 3.0])
    c = ia.calibrate(p0, r)
    assert c == pytest.approx([0.25 + 0.05, 0.35 + 0.25, 0.35 + 0.25, 0.125, 0.85 + 0.075])
    assert p0 @ c == pytest.approx(0.5)
    # the calibrated methods ignore the reward's scale (any increasing map of r); standard RLHF does not
    squashed = np.exp(3 * r)
    for method in ("calibrated", "exp"):
        assert np.allclose(ia.aligned(p0, r, method, 0.2, t=3), ia.aligned(p0, squashed, method, 0.2, t=3))
    assert not np.allclose(ia.aligned(p0, r, "rlhf", 0.5), ia.aligned(p0, squashed, "rlhf", 0.5))


def test_bon_accuracy_splits_a_tied_level_by_the_policy():
    p0, r = np.array([0.5, 0.25, 0.25]), np.array([0.0, 1.0, 1.0])
    correct = np.array([0.0, 1.0, 0.0])
    # best of 2 from p0 reaches the top level with prob 1 - 0.5^2; inside it, half the mass is correct
    assert ia.bon_accuracy(p0, p0, r, correct, 2) == pytest.approx(0.75 * 0.5)


# ------------------------------------------------------------------------------------ the optimal transform


def test_the_optimal_transform_is_the_win_rate_gradient_and_is_calibrated_identity_at_n_1():
    p0, r = ia.random_categorical(7, 3)
    assert np.allclose(ia.optimal_reward(p0, p0, r, 1), ia.calibrate(p0, r))  # closed form at n = 1
    pi = ia.aligned(p0, r, "calibrated", 0.4)
    grad = ia.optimal_reward(pi, p0, r, 4)
    eps = 1e-6
    for i, j in [(0, 1), (2, 5), (6, 3)]:
        d = np.zeros(7)
        d[i], d[j] = eps, -eps
        numeric = (ia.win_rate(pi + d, p0, r, 4) - ia.win_rate(pi - d, p0, r, 4)) / (2 * eps)
        assert numeric == pytest.approx(grad[i] - grad[j], abs=1e-6)
    order = np.argsort(r)
    assert np.all(np.diff(grad[order]) >= -1e-12)  # increasing in the reward: a transform of it


def test_the_optimum_is_a_fixed_point_and_beats_every_transform_at_equal_kl():
    p0, r = ia.random_categorical(8, 0)
    for n in (1, 4):
        opt, beta = ia.at_kl(p0, r, "optimal", 0.4, n=n)
        assert ia.kl(opt, p0) == pytest.approx(0.4, rel=1e-6)
        assert np.allclose(opt, ia.tilt(p0, ia.optimal_reward(opt, p0, r, n), beta), atol=1e-8)
        best = ia.win_rate(opt, p0, r, n)
        for method in ("rlhf", "calibrated", "exp"):
            pi, _ = ia.at_kl(p0, r, method, 0.4, n=n, t=8.0)
            assert ia.win_rate(pi, p0, r, n) <= best + 1e-7, method


# ---------------------------------------------------------------------------------------- the paper's effect


def test_aligning_for_best_of_n_beats_aligning_for_one_sample():
    p0, r = ia.uniform_problem(200)
    for target in (0.25, 1.0):
        t = ia.best_t(4, target)
        exp, _ = ia.at_kl(p0, r, "exp", target, n=4, t=t)
        cal, _ = ia.at_kl(p0, r, "calibrated", target)
        assert ia.win_rate(exp, p0, r, 4) > ia.win_rate(cal, p0, r, 4) + 0.02  # under best-of-4
        assert ia.win_rate(cal, p0, r, 1) >= ia.win_rate(exp, p0, r, 1)  # under plain sampling, the other way
    assert 1 < ia.best_t(4, 0.5) < max(ia.T_GRID)  # an interior choice: the grid brackets it


def test_curve_and_pooled():
    p0, r = ia.random_categorical(6, 1)
    kls, wins = ia.curve(p0, r, "exp", 4, 1.0, t=6.0)
    assert kls[0] == 0 and wins[0] == 0.5 and kls[-1] >= min(1.0, 0.999 * ia.max_kl(p0, r)) - 1e-9
    assert np.all(np.diff(kls) > 0) and np.all(np.diff(wins) > -1e-12) and max(np.diff(kls)) < 0.06
    problems = [(*ia.random_categorical(5, s), np.array([0, 0, 1, 1, 0.0])) for s in range(3)]
    row = ia.pooled(problems, "rlhf", 2, 0.3)
    assert row["kl"] == pytest.approx(0.3, rel=1e-6) and 0.5 < row["win"] < 1 and 0 <= row["accuracy"] <= 1


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="`p0`"):
        ia.calibrate([0.5, 0.6], [1, 2])
    with pytest.raises(ValueError, match="`p0` and `r`"):
        ia.calibrate([0.5, 0.5], [1, 2, 3])
    with pytest.raises(ValueError, match="`r` must be finite"):
        ia.calibrate([0.5, 0.5], [1, np.nan])
    with pytest.raises(ValueError, match="`kl` must be in"):
        ia.at_kl([0.5, 0.5], [1, 2], "exp", 0.8, t=1)  # -log 0.5 = 0.69 is the most any policy can move
    with pytest.raises(ValueError, match="`method`"):
        ia.aligned([0.5, 0.5], [1, 2], "dpo", 1.0)
    with pytest.raises(ValueError, match="`t` must be > 0"):
        ia.transform([0.5], "exp", 0.0)
    with pytest.raises(ValueError, match="`beta`"):
        ia.tilt([0.5, 0.5], [1, 2], 0.0)
    with pytest.raises(ValueError, match="`k`"):
        ia.random_categorical(1, 0)


# ------------------------------------------------------------------------------------ the benchmark, smoked

def run_bench(args, monkeypatch, capsys) -> dict:
    import json
    import runpy
    import sys

    from conftest import ROOT

    script = ROOT / "bench" / "bench_infalign.py"
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as done:
        assert done.code in (None, 0)
    return json.loads(capsys.readouterr().out)  # one JSON object, nothing else on stdout


def test_the_bench_without_a_model(monkeypatch, capsys):
    out = run_bench(["--quick", "--no-model", "--json"], monkeypatch, capsys)
    rows = out["categorical"]["uniform K=16"]["rows"]
    four = rows["N=4"]["kl=0.25"]
    assert four["exp"]["win"] > four["calibrated"]["win"] + 0.03 and four["optimal"]["win"] >= four["exp"]["win"]
    assert rows["N=1"]["kl=0.25"]["calibrated"]["win"] == rows["N=1"]["kl=0.25"]["optimal"]["win"]
    assert "tiny_math" not in out


@pytest.mark.slow
def test_the_bench_on_tiny_math(monkeypatch, capsys, tmp_path):
    written = tmp_path / "infalign.json"
    out = run_bench(["--quick", "--json", "--problems", "2", "--samples", "4", "--write", str(written)],
                    monkeypatch, capsys)
    tm = out["tiny_math"]
    assert tm["problems"] == 2 and tm["samples"] == 4 and set(tm["probe"]["rows"]) == {"N=4"}
    assert 0 <= tm["base_accuracy"] <= 1 and tm["probe"]["curve"]["n"] == 4
    from ui.infalign import tiny_math_view

    text, figure = tiny_math_view(written)  # the file the tab reads
    assert figure is not None and "2 held-out problems × 4 samples" in text
