"""LLM-as-a-judge at inference time: draw k candidates, let a judge pick one by softmax(score / T), and ask
what the pick is worth, exactly, as a function of k and T. Pure numpy; no model.

Halder and Pehlevan 2025, "Demystifying LLM-as-a-Judge: Analytically Tractable Model for Inference-Time
Scaling" (arXiv 2512.19905). The paper's setting (from its abstract; its full text was not readable offline):
Bayesian linear regression, k samples drawn from the posterior predictive at inference time, one kept by a
softmax at temperature T over a quadratic reward computed by a second linear model (the judge); the
generalization error against the teacher. Its findings: with a reward close to the teacher the error falls
monotonically in k; a substantially misspecified reward has a FINITE optimal k past which more samples hurt;
at fixed k there is an optimal temperature; with the teacher as reward and T -> 0 the error decays as 1/k^2.

Our reading, which is this module (the paper derives its closed forms in the high-dimensional limit; we do not
reproduce those): the same selection rule on ANY finite candidate law, computed exactly.

    law         candidate types i with probability p_i, a value c_i (1 right / 0 wrong, or a squared error)
                and the judge's score s_i. A continuous law is put on fine cells (`normal_cells`).
    selection   k i.i.d. candidates; candidate j is kept with probability exp(s_j / T) / sum exp(s / T);
                T = 0 keeps the highest score (ties: uniformly), T = inf keeps a uniform one.
    value(k,T)  E[c of the kept candidate]. With the identity 1/x = int_0^inf exp(-t x) dt and t = e^-v,
                    value = k int E[c e^z exp(-e^z)] E[exp(-e^z)]^(k-1) dv,   z = s / T - v,
                a one-dimensional integral of smooth, doubly-exponentially decaying terms (trapezoid rule on
                the v where some type's z is in [-40, 4]: exact to ~1e-12). T = 0: over the score levels,
                sum (F(l)^k - F(l-)^k) E[c | level l], F the score's CDF. T = inf: E[c].
    k*(T)       the k in 1..k_max with the best value. An interior k* (below k_max, strictly better than
                k_max) is the paper's finite optimum; a judge that ranks by the value itself has none.

`regression_cells` is the paper's own scalar picture at one test input (our reduction): candidates
y ~ N(mean, sd^2), value (y - teacher)^2, score -(y - reward)^2; reward = teacher is the well-specified judge.
`brute_force` enumerates all k-tuples of a small law: the check of the formulas (tests/scaling/test_judge.py).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

Z_LOW, Z_HIGH, STEP = -40.0, 4.0, 0.05  # the z window where a type's integrand is not negligible; v step
V_CHUNK = 4096  # v points per block (memory: types x chunk floats)


@dataclass(frozen=True)
class Law:
    """A finite candidate law: `probs` (N,) summing to 1, `values` (N,) what keeping type i is worth, `scores`
    (N,) the judge's score of type i. Arrays are float64 copies."""

    probs: np.ndarray
    values: np.ndarray
    scores: np.ndarray

    def __post_init__(self):
        arrays = {}
        for name in ("probs", "values", "scores"):
            a = np.asarray(getattr(self, name), dtype=np.float64).ravel()
            if a.size == 0 or not np.all(np.isfinite(a)):
                raise ValueError(f"`{name}` must be a non-empty array of finite numbers, got {a[:5].tolist()}")
            arrays[name] = a
        if len({a.size for a in arrays.values()}) != 1:
            raise ValueError(f"`probs`, `values` and `scores` must have one length, got "
                             f"{[a.size for a in arrays.values()]}")
        p = arrays["probs"]
        if np.any(p < 0) or abs(p.sum() - 1) > 1e-6:
            raise ValueError(f"`probs` must be >= 0 and sum to 1, got sum {p.sum():.6g}")
        arrays["probs"] = p / p.sum()
        for name, a in arrays.items():
            object.__setattr__(self, name, a)

    @property
    def mean(self) -> float:
        """E[value]: one sample's worth (k = 1, or any k at T = inf)."""
        return float(self.probs @ self.values)


def check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ValueError(f"`temperature` must be a number >= 0 (0: the top score, inf: uniform), got {temperature!r}")
    return float(temperature)


def check_ks(ks) -> np.ndarray:
    ks = np.atleast_1d(np.asarray(ks))
    if ks.size == 0 or ks.dtype.kind not in "iu" or np.any(ks < 1):
        raise ValueError(f"`k` must be integers >= 1, got {ks.tolist()}")
    return ks.astype(np.int64)


def value(law: Law, ks, temperature: float) -> np.ndarray:
    """E[value of the kept candidate] for each k in `ks` (len(ks),), exact (see the module docstring)."""
    return mixture_value([law], np.ones((1, 1)), ks, temperature)[0]


def mixture_value(components: list[Law], weights, ks, temperature: float) -> np.ndarray:
    """(J, len(ks)): `value` of J laws, law j = sum_c weights[j, c] x components[c] (a candidate is of
    component c with probability weights[j, c]). The components' terms are computed once and reused for every
    row and k: the fitted model of bench/bench_judge.py is one mixture per problem over shared class laws."""
    ks, temperature = check_ks(ks), check_temperature(temperature)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape[1] != len(components) or np.any(w < 0) or np.any(np.abs(w.sum(1) - 1) > 1e-6):
        raise ValueError(f"`weights` must be (J, {len(components)}) rows of probabilities, got shape {w.shape}")
    if np.isinf(temperature):
        return np.repeat((w @ np.array([c.mean for c in components]))[:, None], len(ks), axis=1)
    if temperature == 0:
        return _top_value(components, w, ks)
    a, phi, dv = _integrand_terms(components, temperature)  # (C, V) each
    big_a, big_phi = w @ a, np.clip(w @ phi, 0.0, 1.0)  # (J, V)
    # value_k = k sum_v A(v) Phi(v)^(k-1) dv (trapezoid weights in dv); Phi^(k-1) by logs, Phi > 0 where A is
    logphi = np.log(np.maximum(big_phi, 1e-300))
    return np.stack([k * ((big_a * np.exp((k - 1) * logphi)) @ dv) for k in ks], axis=1)


def _integrand_terms(components: list[Law], temperature: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """On a v grid covering every type's window z = s / T - v in [Z_LOW, Z_HIGH] (elsewhere every term is
    below e^-40): per component, A_c(v) = sum_i p_i c_i e^z exp(-e^z) and phi_c(v) = sum_i p_i exp(-e^z),
    and the trapezoid weights dv of the grid (gaps between windows weigh nothing)."""
    u = np.concatenate([c.scores for c in components]) / temperature
    grid = _windows(np.unique(u))
    dv = np.zeros_like(grid)
    same = np.diff(grid) <= STEP * 1.0001  # neighbours inside one window
    half = np.where(same, np.diff(grid) / 2, 0.0)
    dv[:-1] += half
    dv[1:] += half
    a = np.zeros((len(components), grid.size))
    phi = np.zeros_like(a)
    for start in range(0, grid.size, V_CHUNK):
        v = grid[start : start + V_CHUNK]
        for ci, comp in enumerate(components):
            z = comp.scores[:, None] / temperature - v[None, :]  # (N, chunk)
            ez = np.exp(np.minimum(z, 700.0))
            kernel = np.exp(-ez)
            a[ci, start : start + V_CHUNK] = (comp.probs * comp.values) @ (ez * kernel)
            phi[ci, start : start + V_CHUNK] = comp.probs @ kernel
    return a, phi, dv


def _windows(u: np.ndarray) -> np.ndarray:
    """Sorted v points, STEP apart, covering the union of [u_i - Z_HIGH, u_i - Z_LOW]."""
    pieces, lo, hi = [], u[0] - Z_HIGH, u[0] - Z_LOW
    for x in u[1:]:
        if x - Z_HIGH <= hi:
            hi = x - Z_LOW
        else:
            pieces.append((lo, hi))
            lo, hi = x - Z_HIGH, x - Z_LOW
    pieces.append((lo, hi))
    return np.concatenate([np.linspace(a, b, int(np.ceil((b - a) / STEP)) + 1) for a, b in pieces])


def _top_value(components: list[Law], w: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """T = 0: the top score is kept, ties uniformly (so a tied level is worth its mean value)."""
    levels, where = np.unique(np.concatenate([c.scores for c in components]), return_inverse=True)
    mass = np.zeros((len(components), levels.size))  # (C, L) each component's mass on each level
    worth = np.zeros_like(mass)  # (C, L) its mass x value there
    offset = 0
    for ci, comp in enumerate(components):
        idx = where[offset : offset + comp.probs.size]
        offset += comp.probs.size
        np.add.at(mass[ci], idx, comp.probs)
        np.add.at(worth[ci], idx, comp.probs * comp.values)
    m, v = w @ mass, w @ worth  # (J, L)
    cdf = np.clip(np.cumsum(m, axis=1), 0.0, 1.0)
    below = np.concatenate([np.zeros((len(w), 1)), cdf[:, :-1]], axis=1)
    mean_at = np.divide(v, m, out=np.zeros_like(v), where=m > 0)
    return np.stack([((cdf ** k - below ** k) * mean_at).sum(1) for k in ks], axis=1)


def optimal_k(curve, ks, margin: float = 1e-6) -> tuple[int, bool]:
    """(k*, interior): the k of `ks` with the highest `curve` value (the first on ties within 1e-9), and whether
    it is a finite optimum the paper means: below the largest k and better than it by more than `margin` (a
    measured curve's plateau is not an optimum: the bench asks for half a point). For a loss pass -curve."""
    curve, ks = np.asarray(curve, dtype=np.float64), check_ks(ks)
    best = int(np.flatnonzero(curve >= curve.max() - 1e-9)[0])
    return int(ks[best]), bool(best < len(ks) - 1 and curve[best] > curve[-1] + margin)


def brute_force(law: Law, k: int, temperature: float) -> float:
    """The same expectation by enumerating all N^k ordered k-tuples of types (small N and k only)."""
    k, temperature = int(check_ks([k])[0]), check_temperature(temperature)
    if law.probs.size ** k > 200_000:
        raise ValueError(f"`k` too large to enumerate: {law.probs.size}^{k} tuples (at most 200000)")
    total = 0.0
    for tup in itertools.product(range(law.probs.size), repeat=k):
        idx = np.array(tup)
        s, c = law.scores[idx], law.values[idx]
        if np.isinf(temperature):
            keep = np.full(k, 1 / k)
        elif temperature == 0:
            keep = (s == s.max()) / np.sum(s == s.max())
        else:
            e = np.exp((s - s.max()) / temperature)
            keep = e / e.sum()
        total += np.prod(law.probs[idx]) * float(keep @ c)
    return total


def normal_cdf(x: np.ndarray, mean: float, sd: float) -> np.ndarray:
    """P(N(mean, sd^2) <= x) for each x, through erfc as scipy's `ndtr` computes it (accurate in both tails)."""
    return np.array([0.5 * math.erfc(-(v - mean) / (sd * math.sqrt(2))) for v in np.asarray(x, dtype=np.float64)])


def normal_cells(mean: float, sd: float, lo: float, hi: float, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """(probs, midpoints): N(mean, sd^2) put on `cells` equal cells of [lo, hi] (exact cell masses, the two
    tails added to the end cells). A shared grid for several laws makes their ties exact at T = 0."""
    if not sd > 0 or not hi > lo or cells < 2:
        raise ValueError(f"need sd > 0, hi > lo and cells >= 2, got sd={sd!r}, [{lo!r}, {hi!r}], cells={cells!r}")
    edges = np.linspace(lo, hi, cells + 1)
    cdf = normal_cdf(edges, mean, sd)
    probs = np.diff(cdf)
    probs[0] += cdf[0]
    probs[-1] += 1 - cdf[-1]
    return probs / probs.sum(), (edges[:-1] + edges[1:]) / 2


def regression_cells(mean: float, sd: float, teacher: float, reward: float, cells: int = 801) -> Law:
    """The paper's picture at one test input (our reduction): candidates y ~ N(mean, sd^2) on cells over
    mean +- 8 sd, value = squared error (y - teacher)^2 (lower is better), judge score = -(y - reward)^2."""
    probs, y = normal_cells(mean, sd, mean - 8 * sd, mean + 8 * sd, cells)
    return Law(probs, (y - teacher) ** 2, -((y - reward) ** 2))
