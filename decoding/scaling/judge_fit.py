"""The judge model's parameters from samples: candidate classes with Gaussian judge scores (our reading of
Halder and Pehlevan 2025, arXiv 2512.19905, for a task whose value is right / wrong; see judge.py).

Each problem j has its own mix of candidate classes (for tiny-math: right or wrong, with clean or slipped
arithmetic) and its own score offset b_j; within a class, the judge's score is b_j + N(mu_c, sd_c^2), with mu_c
and sd_c shared by every problem (candidates are i.i.d. given the problem: the paper's k draws). The selection
is within a problem and softmax(score / T) does not see a common shift, so b_j never enters the prediction:
only the class mix of each problem (its observed frequencies), each class's value and the shared (mu_c, sd_c).

    fit_classes(...)   b_j from the problem's right answers, (mu_c, sd_c) robustly from pooled residuals
    class_laws(...)    the class score laws on one shared grid of cells (judge.normal_cells), as judge.Law
    predict(...)       the model's value(k, T), averaged over problems (judge.mixture_value)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decoding.scaling import judge

SD_FLOOR = 1e-3  # a class whose scores all coincide still gets a proper (narrow) law
IQR_PER_SD = 1.3490  # a Gaussian's interquartile range in standard deviations


@dataclass(frozen=True)
class ClassFit:
    """`means` (C,) and `sds` (C,) of each class's score around its problem's offset (class 0's mean is 0),
    `offsets` (J,) the problems' b_j, `counts` (C,) how many samples each class had."""

    means: np.ndarray
    sds: np.ndarray
    offsets: np.ndarray
    counts: np.ndarray


def fit_classes(problems: list[tuple[np.ndarray, np.ndarray]], num_classes: int, anchor: int = 0) -> ClassFit:
    """Fit score = b_j + N(mu_c, sd_c^2) from `problems`: per problem (scores (M_j,), classes (M_j,) ints in
    [0, num_classes)). The offset b_j is the median score of the problem's `anchor` class (tiny-math: its
    right answers with clean arithmetic), and (mu_c, sd_c) are robust moments (median, interquartile range /
    1.349: both exact for a Gaussian) of the residuals s - b_j pooled over the problems that have an anchor
    sample (the others keep b_j = their median and add nothing: a problem with no right answer is worth 0 at
    every k whatever the scores). Robust because a policy's right answers to one problem are mostly ONE text
    with one score (sd ~ 0: the model then says so) and a few outliers would otherwise set the whole spread.
    A class with no residual gets mean 0, sd 1."""
    if not problems:
        raise ValueError("`problems` must hold at least one problem's (scores, classes)")
    if not 0 <= anchor < num_classes:
        raise ValueError(f"`anchor` must be a class in [0, {num_classes}), got {anchor!r}")
    scores = [np.asarray(s, dtype=np.float64) for s, _ in problems]
    classes = [np.asarray(c, dtype=np.int64) for _, c in problems]
    for j, (s, c) in enumerate(zip(scores, classes)):
        if s.shape != c.shape or s.size == 0 or np.any(c < 0) or np.any(c >= num_classes):
            raise ValueError(f"problem {j}: scores and classes must be equal-length, non-empty, classes in "
                             f"[0, {num_classes}); got {s.shape}, {c.shape}")
    anchored = [bool(np.any(c == anchor)) for c in classes]
    offsets = np.array([np.median(s[c == anchor] if a else s) for s, c, a in zip(scores, classes, anchored)])
    resid = np.concatenate([s - b for s, b, a in zip(scores, offsets, anchored) if a] or [np.zeros(0)])
    which = np.concatenate([c for c, a in zip(classes, anchored) if a] or [np.zeros(0, dtype=np.int64)])
    counts = np.bincount(which, minlength=num_classes)
    means, sds = np.zeros(num_classes), np.ones(num_classes)
    for c in np.flatnonzero(counts):
        low, means[c], high = np.percentile(resid[which == c], [25, 50, 75])
        sds[c] = max((high - low) / IQR_PER_SD, SD_FLOOR)
    return ClassFit(means, sds, offsets, counts)


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
