"""Particle filtering math: reward -> weight, effective sample size, resampling, lineage.

Pure helpers only (tensors or lists of floats in, tensors or lists out); the strategy that calls
the model and the rewards lives elsewhere. Papers followed (definitions checked against, never
copied from, the its_hub and llamppl code):

- Puri et al. 2025, "A Probabilistic Inference Approach to Inference-Time Scaling of LLMs using
  Particle-Based Monte Carlo Methods" (arXiv:2502.01618): particles are partial solutions, a
  process reward r in [0, 1] is turned into a weight by softmax(logit(r) / temperature) and
  the particles are resampled after every step.
- Lew et al. 2023, "Sequential Monte Carlo Steering of Large Language Models using
  Probabilistic Programs" (llamppl): hard constraints give weight exactly 0, ESS-triggered
  (adaptive) resampling.
- Giannone et al. 2025, "Mitigating Premature Exploitation in Particle-based Monte Carlo for
  Inference-Time Scaling" (entropic particle filtering, ePF; arXiv:2510.05825): overconfident
  early rewards collapse the particle set ("premature exploitation", particle impoverishment);
  their Entropic Annealing flattens the resampling distribution when diversity drops.
  `annealing_temperature` / `annealed_weights` implement Entropic Annealing as the authors' own
  library writes it (its_hub, Red Hat AI Innovation Team: `EntropicParticleFiltering`, its
  `_temperature_annealing`); `entropic_weights` is the project's own budget-free variant, kept
  under its own name (`entropic`); `lookahead_weights` is the project's own variant of their
  Look-ahead Modulation (its_hub leaves it unimplemented and the paper's formula was not read).
- Resampling schemes: Douc, Cappé & Moulines 2005, "Comparison of Resampling Schemes for
  Particle Filtering" (multinomial, systematic); Kong, Liu & Wong 1994 for the ESS.

Glossary
- particle: one partial solution (prompt + generated steps) carried in parallel; N of them.
- weight: normalised importance of a particle, w_i >= 0, sum_i w_i = 1.
- ESS: effective sample size 1 / sum_i w_i^2, between 1 (one-hot) and N (uniform).
- resample: draw N ancestor indices from the weights; particle i of the next step is a copy of
  particle ancestors[i] of this step.
- ancestor: the index, at the previous step, of the particle a particle was copied from.
- lineage: the ancestor indices of all steps; follows a final particle back to step 0.
- hard zero: a reward of exactly 0 (a violated hard constraint); such a particle gets weight 0.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

EPS = 1e-6  # rewards are clamped to [EPS, 1 - EPS] before the logit
RESAMPLE_METHODS = ("multinomial", "systematic")


# --------------------------------------------------------------------------- validation


def _check_temperature(temperature: float) -> None:
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"`temperature` must be a finite number > 0, got {temperature!r}")


def _check_method(method: str) -> None:
    if method not in RESAMPLE_METHODS:
        raise ValueError(f"`method` must be one of {', '.join(RESAMPLE_METHODS)}, got {method!r}")


def _check_ess_threshold(ess_threshold: float | None) -> None:
    if ess_threshold is not None and not (isinstance(ess_threshold, (int, float)) and 0 < ess_threshold <= 1):
        raise ValueError(f"`ess_threshold` must be None or in (0, 1], got {ess_threshold!r}")


def _check_fraction(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"`{name}` must be in [0, 1], got {value!r}")


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"`n` must be an integer >= 1, got {n!r}")


def _vector(values: Sequence[float] | Tensor, name: str) -> Tensor:
    """A new 1-D float64 tensor (N,); rejects empty, non-finite and non-1-D input."""
    x = torch.as_tensor(values, dtype=torch.float64).clone()  # (N,)
    if x.dim() != 1 or x.numel() == 0:
        raise ValueError(f"`{name}` must be a non-empty 1-D sequence, got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"`{name}` must be finite, got {x.tolist()}")
    return x


def normalize(weights: Sequence[float] | Tensor) -> Tensor:
    """Weights divided by their sum (N,), float64; they must be non-negative and not all zero."""
    w = _vector(weights, "weights")  # (N,)
    if (w < 0).any():
        raise ValueError(f"`weights` must be non-negative, got {w.tolist()}")
    total = w.sum()
    if total <= 0:
        raise ValueError("`weights` must not all be zero")
    return w / total


# --------------------------------------------------------------------------- weights


def weights_from_rewards(rewards: Sequence[float] | Tensor, temperature: float = 1.0) -> Tensor:
    """softmax(logit(r) / temperature) over particles (N,), float64.

    Rewards must lie in [0, 1]; they are clamped to [EPS, 1 - EPS] so the logit is finite. A
    reward of exactly 0 (a hard violation) gets weight exactly 0, unless every reward is 0, in
    which case the weights are uniform (nothing to prefer).
    """
    _check_temperature(temperature)
    r = _vector(rewards, "rewards")  # (N,)
    if ((r < 0) | (r > 1)).any():
        raise ValueError(f"`rewards` must be in [0, 1], got {r.tolist()}")
    hard_zero = r == 0  # (N,)
    if hard_zero.all():
        return torch.full_like(r, 1.0 / r.numel())
    clamped = r.clamp(EPS, 1 - EPS)
    logits = torch.log(clamped) - torch.log1p(-clamped)  # logit(r), (N,)
    logits = (logits / temperature).masked_fill(hard_zero, float("-inf"))
    return torch.softmax(logits, dim=0)


def ess(weights: Sequence[float] | Tensor) -> float:
    """Effective sample size 1 / sum(w^2) of the normalised weights: 1 (one-hot) ... N (uniform)."""
    w = normalize(weights)  # (N,)
    return float(1.0 / (w * w).sum())


def weight_entropy(weights: Sequence[float] | Tensor) -> float:
    """Entropy in nats of the normalised weights; 0 log 0 counts as 0."""
    w = normalize(weights)  # (N,)
    return float(-(w[w > 0] * w[w > 0].log()).sum())


def _tempered(w: Tensor, beta: float) -> Tensor:
    """w^beta renormalised over the support of w (zeros stay zero, also at beta = 0)."""
    support = w > 0
    out = torch.zeros_like(w)
    out[support] = w[support] ** beta
    return out / out.sum()


def entropic_exponent(weights: Sequence[float] | Tensor, min_entropy_fraction: float) -> float:
    """The largest beta in [0, 1] with entropy(w^beta / Z) >= min_entropy_fraction * log N.

    The entropy of w^beta / Z decreases as beta grows (beta = 0 is uniform over the support), so
    bisection finds it. Returns 1.0 when w already meets the target, 0.0 when even uniform over
    the support cannot (particles with weight 0 are never revived).
    """
    _check_fraction("min_entropy_fraction", min_entropy_fraction)
    w = normalize(weights)  # (N,)
    target = min_entropy_fraction * math.log(w.numel())
    if weight_entropy(w) >= target - 1e-12:
        return 1.0
    if weight_entropy(_tempered(w, 0.0)) < target:
        return 0.0
    low, high = 0.0, 1.0  # entropy(low) >= target > entropy(high)
    for _ in range(60):
        mid = 0.5 * (low + high)
        if weight_entropy(_tempered(w, mid)) >= target:
            low = mid
        else:
            high = mid
    return low


def entropic_weights(weights: Sequence[float] | Tensor, min_entropy_fraction: float) -> Tensor:
    """Flatten weights until their entropy is at least `min_entropy_fraction` * log N (N,).

    The project's own variant of ePF's Entropic Annealing (Giannone et al. 2025), not the
    paper's rule (that is `annealing_temperature`, which raises the temperature by a factor
    driven by N / ESS and the step budget): budget-free, the weights are tempered as w^beta / Z
    with beta in [0, 1] chosen by bisection as the smallest flattening (largest beta) whose
    entropy reaches the requested fraction of the maximum log N. Weights that already meet the
    floor come back unchanged (normalised); weight-0 particles (hard violations) stay at 0.
    """
    w = normalize(weights)  # (N,)
    beta = entropic_exponent(w, min_entropy_fraction)
    return w if beta == 1.0 else _tempered(w, beta)


def lookahead_weights(rewards: Sequence[float] | Tensor, ahead: Sequence[float] | Tensor, strength: float,
                      temperature: float = 1.0) -> Tensor:
    """The project's own variant of ePF's Look-ahead Modulation (LaM, Giannone et al. 2025): a
    particle's weight also reflects the reward of a successor, one more step sampled from it and
    then discarded: softmax((logit(r) + strength * logit(r_ahead)) / temperature) (N,). Not the
    paper's formula: its abstract says only that LaM "adds a predictive guide to evaluate a
    state's potential based on its successors"; the paper's method section could not be read with
    the search tool, and the authors' library (its_hub) raises NotImplementedError for it.
    strength = 0 gives `weights_from_rewards(rewards)`. Weight-0 particles (a hard violation now
    or in the look-ahead) get weight 0, unless all do."""
    if not 0 <= strength <= 10:
        raise ValueError(f"`strength` must be in [0, 10], got {strength}")
    now = weights_from_rewards(rewards, temperature)  # (N,)
    if strength == 0:
        return now
    later = weights_from_rewards(ahead, temperature / strength)  # (N,) softmax(strength * logit(a) / T)
    product = now * later
    return normalize(product) if product.sum() > 0 else now


ANNEALING_METHODS = ("none", "ess", "entropy")
EA_ESS_THRESHOLD = 0.5  # its_hub's defaults: anneal only while ESS / N < 0.5 ...
EA_EARLY_PHASE = 0.5  # ... and in the first half of the step budget (t / T_max < 0.5)


def annealing_temperature(weights: Sequence[float] | Tensor, step: int, max_steps: int, method: str = "ess",
                          ess_threshold: float = EA_ESS_THRESHOLD, early_phase: float = EA_EARLY_PHASE) -> float:
    """ePF's Entropic Annealing temperature tau >= 1 (Giannone et al. 2025), as the authors' library
    its_hub computes it (`EntropicParticleFiltering._temperature_annealing`; read, not copied).

    With progress p = step / max_steps (step t = 1 after the first step) and the normalised
    weights w of N particles: when ESS(w) / N < `ess_threshold` and p < `early_phase`,
      method="ess":      tau = max(1, (1 - p) * N / ESS(w))
      method="entropy":  tau = max(1, 1 / (H + (1 - H) * p)),  H = entropy(w) / log N
    else tau = 1. The particles are then resampled from softmax(log w / tau) (`annealed_weights`).
    its_hub clips probabilities to [1e-7, 1 - 1e-7] inside its ESS and entropy; here they are exact.
    One particle: tau = 1.
    """
    if method not in ANNEALING_METHODS[1:]:
        raise ValueError(f"`method` must be one of {', '.join(ANNEALING_METHODS[1:])}, got {method!r}")
    for name, value in (("step", step), ("max_steps", max_steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
    _check_fraction("ess_threshold", ess_threshold)
    _check_fraction("early_phase", early_phase)
    w = normalize(weights)  # (N,)
    n = w.numel()
    if n == 1:
        return 1.0
    progress = step / max_steps
    ratio = ess(w) / n
    if not (ratio < ess_threshold and progress < early_phase):
        return 1.0
    if method == "ess":
        return max(1.0, (1.0 - progress) / ratio)
    h = weight_entropy(w) / math.log(n)
    return max(1.0, 1.0 / (h + (1.0 - h) * progress))  # h + (1 - h) p >= p > 0


def annealed_weights(weights: Sequence[float] | Tensor, temperature: float) -> Tensor:
    """softmax(log w / temperature) (N,): the weights tempered by Entropic Annealing's tau; weight-0
    particles stay at 0. temperature = 1 gives the normalised weights back."""
    _check_temperature(temperature)
    w = normalize(weights)  # (N,)
    return w if temperature == 1.0 else _tempered(w, 1.0 / temperature)


# --------------------------------------------------------------------------- resampling


def multinomial_resample(weights: Sequence[float] | Tensor, n: int, generator: torch.Generator) -> list[int]:
    """n ancestor indices drawn i.i.d. from the normalised weights."""
    _check_n(n)
    w = normalize(weights)  # (N,)
    return torch.multinomial(w, n, replacement=True, generator=generator).tolist()


def systematic_resample(weights: Sequence[float] | Tensor, n: int, generator: torch.Generator) -> list[int]:
    """n sorted ancestor indices from one uniform offset: positions (u + k) / n, k = 0..n-1.

    Each particle i is copied floor(n w_i) or ceil(n w_i) times, so counts vary less than with
    multinomial resampling while staying unbiased (E[count_i] = n w_i).
    """
    _check_n(n)
    w = normalize(weights)  # (N,)
    u = torch.rand(1, generator=generator, dtype=torch.float64)  # (1,)
    positions = (u + torch.arange(n, dtype=torch.float64)) / n  # (n,), in [0, 1)
    cumulative = torch.cumsum(w, dim=0)  # (N,)
    cumulative[-1] = 1.0  # guard against rounding below the last position
    ancestors = torch.searchsorted(cumulative, positions, right=True)  # (n,)
    return ancestors.clamp(max=w.numel() - 1).tolist()


def resample(
    weights: Sequence[float] | Tensor,
    n: int,
    generator: torch.Generator,
    method: str = "multinomial",
    ess_threshold: float | None = None,
) -> tuple[list[int], bool]:
    """(ancestors, did_resample). With `ess_threshold`, resample only when ESS < threshold * N;
    otherwise the ancestors are the identity (which needs n == N)."""
    _check_method(method)
    _check_ess_threshold(ess_threshold)
    _check_n(n)
    w = normalize(weights)  # (N,)
    if ess_threshold is not None:
        if n != w.numel():
            raise ValueError(f"`ess_threshold` needs `n` equal to the number of particles {w.numel()}, got {n}")
        if ess(w) >= ess_threshold * w.numel():
            return list(range(n)), False
    draw = multinomial_resample if method == "multinomial" else systematic_resample
    return draw(w, n, generator), True


# --------------------------------------------------------------------------- lineage


class Lineage:
    """Ancestor indices per step: particle i at step t + 1 descends from particle a_t[i] at step t.

    Step 0 holds the N initial particles; every `record(ancestors)` adds one step.
    """

    def __init__(self, num_particles: int):
        if not isinstance(num_particles, int) or isinstance(num_particles, bool) or num_particles < 1:
            raise ValueError(f"`num_particles` must be an integer >= 1, got {num_particles!r}")
        self.num_particles = num_particles
        self.ancestors: list[tuple[int, ...]] = []  # one tuple of N indices per recorded step

    @property
    def num_steps(self) -> int:
        return len(self.ancestors)

    def record(self, ancestors: Sequence[int]) -> None:
        ancestors = tuple(int(a) for a in ancestors)
        if len(ancestors) != self.num_particles:
            raise ValueError(f"`ancestors` must have {self.num_particles} entries, got {len(ancestors)}")
        if any(not 0 <= a < self.num_particles for a in ancestors):
            raise ValueError(f"`ancestors` must be in [0, {self.num_particles - 1}], got {list(ancestors)}")
        self.ancestors.append(ancestors)

    def paths(self) -> list[list[int]]:
        """For each final particle, its index at steps 0, 1, ..., num_steps (last = itself)."""
        result = []
        for i in range(self.num_particles):
            path = [i]
            for step_ancestors in reversed(self.ancestors):
                path.append(step_ancestors[path[-1]])
            result.append(path[::-1])
        return result

    def alive_at(self, step: int) -> list[int]:
        """Sorted indices of the particles at `step` that have descendants at the final step."""
        if not isinstance(step, int) or not 0 <= step <= self.num_steps:
            raise ValueError(f"`step` must be an integer in [0, {self.num_steps}], got {step!r}")
        return sorted({path[step] for path in self.paths()})
