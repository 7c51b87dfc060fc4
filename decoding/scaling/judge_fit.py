"""The judge model's parameters from samples: candidate classes with Gaussian judge scores (our reading of
Halder and Pehlevan 2025, arXiv 2512.19905, for a task whose value is right / wrong; see judge.py).

Each problem j has its own mix of candidate classes (for tiny-math: right, wrong with clean arithmetic, and
slipped arithmetic) and its own score offset b_j; within a class, the judge's score is b_j + N(mu_c, sd_c^2),
with mu_c and sd_c shared by every problem. The selection is within a problem and softmax(score / T) does not
see a common shift, so b_j never enters the prediction: only the class mix of each problem (its observed
frequencies), each class's value (its observed accuracy) and the shared (mu_c, sd_c) do.

    fit_classes(...)   maximum likelihood for (b_j, mu_c, sd_c) by alternating closed-form updates
    class_laws(...)    the class score laws on one shared grid of cells (judge.normal_cells), as judge.Law
    predict(...)       the model's value(k, T), averaged over problems (judge.mixture_value)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decoding.scaling import judge

SD_FLOOR = 1e-3  # a class whose scores all coincide still gets a proper (narrow) law


@dataclass(frozen=True)
class ClassFit:
    """`means` (C,) and `sds` (C,) of each class's score around its problem's offset (class 0's mean is 0),
    `offsets` (J,) the problems' b_j, `counts` (C,) how many samples each class had."""

    means: np.ndarray
    sds: np.ndarray
    offsets: np.ndarray
    counts: np.ndarray


def fit_classes(problems: list[tuple[np.ndarray, np.ndarray]], num_classes: int, iterations: int = 100) -> ClassFit:
    """ML fit of score = b_j + N(mu_c, sd_c^2) from `problems`: per problem (scores (M_j,), classes (M_j,)
    ints in [0, num_classes)). A class with no sample gets mean 0 and sd 1 (it never enters a prediction: its
    weight is 0 everywhere)."""
    if not problems:
        raise ValueError("`problems` must hold at least one problem's (scores, classes)")
    scores = [np.asarray(s, dtype=np.float64) for s, _ in problems]
    classes = [np.asarray(c, dtype=np.int64) for _, c in problems]
    for j, (s, c) in enumerate(zip(scores, classes)):
        if s.shape != c.shape or s.size == 0 or np.any(c < 0) or np.any(c >= num_classes):
            raise ValueError(f"problem {j}: scores and classes must be equal-length, non-empty, classes in "
                             f"[0, {num_classes}); got {s.shape}, {c.shape}")
    all_c = np.concatenate(classes)
    counts = np.bincount(all_c, minlength=num_classes)
    means, var = np.zeros(num_classes), np.ones(num_classes)
    offsets = np.array([s.mean() for s in scores])
    for _ in range(iterations):
        resid = np.concatenate([s - b for s, b in zip(scores, offsets)])
        for c in np.flatnonzero(counts):
            means[c] = resid[all_c == c].mean()
            var[c] = max(np.mean((resid[all_c == c] - means[c]) ** 2), SD_FLOOR ** 2)
        offsets = np.array([np.sum((s - means[c]) / var[c]) / np.sum(1 / var[c]) for s, c in zip(scores, classes)])
    shift = means[np.flatnonzero(counts)[0]]
    means[counts > 0] -= shift
    return ClassFit(means, np.sqrt(var), offsets + shift, counts)


def class_laws(fit: ClassFit, values, cells: int = 401) -> list[judge.Law]:
    """Each class's score law N(mu_c, sd_c^2) on one grid of `cells` cells spanning every class +- 8 sd, with
    value `values[c]` (for right / wrong: the class's accuracy)."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != fit.means.shape:
        raise ValueError(f"`values` must have one entry per class ({fit.means.size}), got {values.shape}")
    lo, hi = float(np.min(fit.means - 8 * fit.sds)), float(np.max(fit.means + 8 * fit.sds))
    laws = []
    for mean, sd, val in zip(fit.means, fit.sds, values):
        probs, mids = judge.normal_cells(mean, sd, lo, hi, cells)
        laws.append(judge.Law(probs, np.full(cells, val), mids))
    return laws


def predict(fit: ClassFit, values, weights, ks, temperature: float, cells: int = 401) -> np.ndarray:
    """(len(ks),): the model's value at each k, averaged over the problems whose class mix is `weights` (J, C)."""
    return judge.mixture_value(class_laws(fit, values, cells), weights, ks, temperature).mean(0)
