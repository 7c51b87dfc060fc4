"""InfAlign: align a policy for the inference-time procedure it will be decoded with (here best-of-N),
computed exactly on a finite (categorical) base policy. Pure numpy; no model.

Balashankar, Sun et al. 2025, "InfAlign: Inference-aware language model alignment" (ICML 2025, arXiv
2412.19792). Standard RLHF maximises the reward of ONE sample minus beta KL(pi || pi0); if the aligned
policy is then decoded with best-of-N, what matters is the best-of-N win rate against the base policy
(also decoded with best-of-N). The paper shows the optimum of that objective is still a KL-regularised
tilt, pi(y) ∝ pi0(y) exp(R(y) / beta), of a *transformed* reward R, and proposes calibrate-and-transform
(InfAlign-CTRL): calibrate the reward against the base policy, then transform it. Our reading:

    calibrate   c(y) = P_{z~pi0}(r(z) < r(y)) + 1/2 P_{z~pi0}(r(z) = r(y)): y's win rate against one base
                sample (ties half). Uniform on [0, 1] under pi0 when rewards do not tie, so the problem no
                longer depends on the model or the reward's scale (the paper's point).
    transform   Phi(c): identity (optimal for the plain, one-sample win rate: exactly, see `optimal_reward`
                at n = 1) or exponential Phi_t(u) = exp(t u), the paper's family for best-of-N; t is
                chosen on the model-agnostic uniform problem (`best_t`), never on the task.
    optimal     the exact optimum of  W_bon(pi) - beta KL(pi || pi0)  on this support: a fixed point of
                R = dW/dpi (the paper's theorem: the transformed reward depends on the optimum itself),
                solved by damped iteration (`optimal_policy`). A reference the transforms are judged by.
    rlhf        the baseline: identity on the RAW reward, pi ∝ pi0 exp(r / beta) (standard RLHF).

Everything is compared at equal KL(pi || pi0) (beta found by bisection, `beta_for_kl`), as the paper's
win-rate-vs-KL curves do.

Glossary
    outcome     one element y of the finite support; p0 (K,) its base probabilities, r (K,) its rewards.
    level       the outcomes sharing one reward value. Best-of-N cannot tell them apart, every transform
                here gives them one value, so the aligned policy keeps pi0's proportions inside a level.
    bon_n(pi)   best-of-n: n i.i.d. draws from pi, the highest reward kept. Over sorted levels with
                cumulative mass Q_k it puts Q_k^n - Q_(k-1)^n on level k.
    win rate    W_n,m(pi) = P(reward of bon_n(pi) > reward of bon_m(pi0)) + 1/2 P(=), m = n by default
                (both sides decoded the same way); W = 1/2 at pi = pi0.
    KL          KL(pi || pi0) of the aligned policy itself (not of its best-of-N), in nats.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

METHODS = ("rlhf", "calibrated", "exp", "optimal")  # see the module docstring
T_GRID = tuple(round(0.25 * 1.1 ** i, 4) for i in range(59))  # the exponents `best_t` searches: 0.25 to 62
LAMBDA_MAX = 1e12  # the largest 1 / beta tried: past it the policy no longer moves
UNIFORM_K = 400  # cells of the model-agnostic uniform problem `best_t` chooses t on


@dataclass(frozen=True)
class Levels:
    """A base policy grouped by reward value, ascending: `p0` (L,) mass per level, `index` (K,) the level of
    each outcome, `values` (L,) the reward of each level."""

    p0: np.ndarray
    index: np.ndarray
    values: np.ndarray


def _check(p0, r) -> tuple[np.ndarray, np.ndarray]:
    p0, r = np.asarray(p0, dtype=np.float64), np.asarray(r, dtype=np.float64)
    if p0.ndim != 1 or p0.size == 0 or p0.shape != r.shape:
        raise ValueError(f"`p0` and `r` must be 1-D of one length, got shapes {p0.shape} and {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("`r` must be finite rewards, got a nan or inf")
    if np.any(p0 < 0) or not np.isfinite(p0).all() or abs(p0.sum() - 1) > 1e-9:
        raise ValueError(f"`p0` must be probabilities (>= 0, summing to 1), got sum {p0.sum()!r}")
    return p0, r


def levels(p0, r) -> Levels:
    p0, r = _check(p0, r)
    values, index = np.unique(r, return_inverse=True)
    return Levels(np.bincount(index, weights=p0, minlength=len(values)), index, values)


def calibrate(p0, r) -> np.ndarray:
    """(K,) c(y) = P0(r < r(y)) + 1/2 P0(r = r(y)): the calibrated reward, in (0, 1), mean 1/2 under p0."""
    lv = levels(p0, r)
    below = np.cumsum(lv.p0) - lv.p0
    return (below + lv.p0 / 2)[lv.index]


def transform(u, method: str, t: float = 0.0) -> np.ndarray:
    """Phi(u) of a calibrated reward: identity ("calibrated") or exp(t u) ("exp", t > 0)."""
    u = np.asarray(u, dtype=np.float64)
    if method == "calibrated":
        return u
    if method == "exp":
        if not t > 0:
            raise ValueError(f"`t` must be > 0 for the exponential transform, got {t!r}")
        return np.exp(t * u)
    raise ValueError(f"`method` must be 'calibrated' or 'exp' here, got {method!r}")


def tilt(p0, reward, beta: float) -> np.ndarray:
    """pi ∝ p0 exp(reward / beta): the KL-regularised optimum of E_pi[reward] - beta KL(pi || p0)."""
    if not beta > 0:
        raise ValueError(f"`beta` must be > 0, got {beta!r}")
    p0 = np.asarray(p0, dtype=np.float64)
    logits = np.where(p0 > 0, np.log(np.where(p0 > 0, p0, 1.0)) + np.asarray(reward, np.float64) / beta, -np.inf)
    w = np.exp(logits - logits.max())
    return w / w.sum()


def kl(p, p0) -> float:
    """KL(p || p0) in nats (p must vanish where p0 does)."""
    p, p0 = np.asarray(p, np.float64), np.asarray(p0, np.float64)
    on = p > 0
    return float(np.sum(p[on] * (np.log(p[on]) - np.log(p0[on]))))


def _level_mass(p, lv: Levels) -> np.ndarray:
    return np.bincount(lv.index, weights=np.asarray(p, np.float64), minlength=len(lv.p0))


def bon_mass(q, n: int) -> np.ndarray:
    """(L,) best-of-n's mass on each level, given `q` (L,), the mass on the levels in ascending reward order."""
    cum = np.minimum(np.cumsum(q), 1.0)
    return cum ** n - np.concatenate(([0.0], cum[:-1])) ** n


def _against(lv: Levels, m: int) -> np.ndarray:
    """(L,) w_k: a level-k output's win rate against bon_m(p0) (ties half)."""
    h = bon_mass(lv.p0, m)
    return np.cumsum(h) - h / 2


def _win(q, lv: Levels, n: int, m: int) -> float:
    return float(bon_mass(q, n) @ _against(lv, m))


def win_rate(p, p0, r, n: int, m: int | None = None) -> float:
    """W: P(bon_n(p) beats bon_m(p0) in reward) + 1/2 P(tie); m = n unless given (exact)."""
    lv = levels(p0, r)
    return _win(_level_mass(p, lv), lv, n, n if m is None else m)


def bon_accuracy(p, p0, r, correct, n: int) -> float:
    """P(bon_n(p)'s pick is correct), `correct` (K,) in [0, 1]: within a tied level the pick follows p."""
    lv = levels(p0, r)
    q = _level_mass(p, lv)
    inside = np.bincount(lv.index, weights=np.asarray(p, np.float64) * np.asarray(correct, np.float64),
                         minlength=len(q))
    share = np.divide(inside, q, out=np.zeros_like(q), where=q > 0)
    return float(bon_mass(q, n) @ share)


def _gradient(q, lv: Levels, n: int, m: int) -> np.ndarray:
    w = _against(lv, m)
    cum = np.minimum(np.cumsum(q), 1.0)
    steps = (w - np.append(w[1:], 0.0)) * cum ** (n - 1)
    return n * np.cumsum(steps[::-1])[::-1]


def optimal_reward(p, p0, r, n: int, m: int | None = None) -> np.ndarray:
    """(K,) R(y) = dW_n,m / dpi(y) at pi = p: the transformed reward of the paper's theorem (up to a constant).
    Over levels, R_i = n sum_{k >= i} (w_k - w_(k+1)) Q_k^(n-1) with w_(L+1) = 0; at n = m = 1 it is exactly
    the calibrated reward c (so calibrate-then-identity is optimal for the one-sample win rate)."""
    lv = levels(p0, r)
    return _gradient(_level_mass(p, lv), lv, n, n if m is None else m)[lv.index]


def optimal_policy(p0, r, n: int, beta: float, *, start=None, iters: int = 5000, tol: float = 1e-10) -> np.ndarray:
    """The InfAlign optimum of J(pi) = W_n(pi) - beta KL(pi || p0), from p0: mirror ascent, i.e. the fixed-point
    step pi <- p0 exp(R(pi) / beta) taken a fraction `step` of the way in log space; a step that lowers J is
    retried at half the fraction. Starts from `start` (a nearby beta's optimum) or p0; stops when the policy moves
    less than `tol`; ValueError if it never does. Solved over levels (the optimum keeps p0's proportions inside
    a level, as R is constant there), then spread back over the outcomes."""
    p0, r = _check(p0, r)
    if not beta > 0:
        raise ValueError(f"`beta` must be > 0, got {beta!r}")
    lv = levels(p0, r)
    base = lv.p0
    on = base > 0
    log_base = np.log(np.where(on, base, 1.0))

    def objective(q):
        return _win(q, lv, n, n) - beta * kl(q, base)

    q = base.copy() if start is None else _level_mass(start, lv)
    step, value = 1.0, objective(q)
    for _ in range(iters):
        target = np.where(on, log_base + _gradient(q, lv, n, n) / beta, -np.inf)
        logs = np.where(on, (1 - step) * np.log(np.maximum(q, 1e-300)) + step * target, -np.inf)
        new = np.exp(logs - logs[on].max())
        new /= new.sum()
        new_value = objective(new)
        if new_value < value - 1e-15:
            step /= 2
            if step < 1e-9:  # no step raises J any more, to float precision: q is the optimum
                break
            continue
        moved = np.abs(new - q).max()
        q, value = new, new_value
        if moved < tol:
            break
    else:
        raise ValueError(f"the optimal transform's fixed point did not settle at beta={beta!r}, n={n}")
    share = np.divide(p0, base[lv.index], out=np.zeros_like(p0), where=base[lv.index] > 0)
    return q[lv.index] * share


def aligned(p0, r, method: str, beta: float, *, n: int = 1, t: float = 0.0, start=None) -> np.ndarray:
    """The aligned policy of `method` (see METHODS) at KL weight `beta` (`start`: where "optimal" starts)."""
    p0, r = _check(p0, r)
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "rlhf":
        return tilt(p0, r, beta)
    if method == "optimal":
        return optimal_policy(p0, r, n, beta, start=start)
    return tilt(p0, transform(calibrate(p0, r), method, t), beta)


def max_kl(p0, r) -> float:
    """The KL of the limit beta -> 0 of every method: all mass on the top reward level, -log P0(top)."""
    return float(-np.log(levels(p0, r).p0[-1]))


def beta_for_kl(kl_of, target: float, *, steps: int = 200) -> float:
    """beta with kl_of(beta) = target, by bisection on lambda = 1 / beta (KL is 0 at lambda = 0 and grows with
    it): lambda doubles until the KL passes the target, then the bracket halves."""
    hi, before = 1.0, -1.0
    while (reached := kl_of(1.0 / hi)) < target:
        hi *= 2
        stalled, before = hi > 1e3 and reached - before < 1e-9 * max(reached, 1e-12), reached
        if hi > LAMBDA_MAX or stalled:
            raise ValueError(f"`kl` {target!r} is out of reach for this method: as beta -> 0 its policy stops at "
                             f"KL {reached:.4g} (for the optimum: more KL would win nothing more)")
    lo = 0.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kl_of(1.0 / mid) < target else (lo, mid)
        if hi - lo < 1e-7 * hi:
            break
    return float(2.0 / (lo + hi))


def at_kl(p0, r, method: str, target: float, *, n: int = 1, t: float = 0.0) -> tuple[np.ndarray, float]:
    """(aligned policy, beta) of `method` at KL(pi || p0) = target."""
    p0, r = _check(p0, r)
    top = max_kl(p0, r)
    if not 0 < target < top:
        raise ValueError(f"`kl` must be in (0, {top:.4g}) for this base policy (all mass on its best level), "
                         f"got {target!r}")
    last = [None]  # "optimal" starts each solve from the previous one

    def kl_of(b):
        last[0] = aligned(p0, r, method, b, n=n, t=t, start=last[0])
        return kl(last[0], p0)

    beta = beta_for_kl(kl_of, target)
    return aligned(p0, r, method, beta, n=n, t=t, start=last[0]), beta


def uniform_problem(k: int = UNIFORM_K) -> tuple[np.ndarray, np.ndarray]:
    """The model-agnostic problem: k equally likely outcomes with distinct rewards (a calibrated reward
    (i - 1/2) / k, the uniform law on [0, 1] in cells)."""
    return np.full(k, 1.0 / k), np.arange(k, dtype=np.float64)


@functools.lru_cache(maxsize=256)
def best_t(n: int, target: float, grid=T_GRID, k: int = UNIFORM_K) -> float:
    """The exponent t of Phi_t(u) = exp(t u) with the highest best-of-n win rate at KL `target` on the uniform
    problem (`uniform_problem`), so it is chosen once per (n, KL), never on the task's own samples."""
    p0, r = uniform_problem(k)
    return max(grid, key=lambda t: win_rate(at_kl(p0, r, "exp", target, n=n, t=t)[0], p0, r, n))


def random_categorical(k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A small base policy to play with: p0 ~ Dirichlet(1, ..., 1), rewards skewed (standard log-normal), so
    the raw reward's spacing is far from its calibrated one."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 2 <= k <= 1000:
        raise ValueError(f"`k` (outcomes) must be an integer in [2, 1000], got {k!r}")
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(k)), np.exp(rng.standard_normal(k))


def curves(p0, r, n: int, kls, methods=METHODS, t: float | None = None) -> dict:
    """{method: [win rate at each KL of `kls`]} for best-of-n against best-of-n, and the t used ("exp" at each
    KL uses best_t(n, kl) unless `t` is given): {"kl": [...], "t": [...], "win": {method: [...]}}."""
    out = {"kl": [float(x) for x in kls], "t": [], "win": {m: [] for m in methods}}
    for target in kls:
        tt = best_t(n, target) if t is None else t
        out["t"].append(tt)
        for m in methods:
            out["win"][m].append(win_rate(at_kl(p0, r, m, target, n=n, t=tt)[0], p0, r, n))
    return out


def curve(p0, r, method: str, n: int, kl_high: float, *, t: float = 0.0, max_points: int = 400,
          points: int = 40) -> tuple[list[float], list[float]]:
    """(KLs, best-of-n win rates) along `method`'s trade-off from KL 0 to just past `kl_high`, about `points`
    apart: 1/beta grows geometrically, its factor shrinking where the KL jumps ("optimal" warm-starts each
    point from the last). No bisection."""
    p0, r = _check(p0, r)
    kl_high = min(kl_high, 0.999 * max_kl(p0, r))
    if method == "rlhf":
        reward = r
    elif method == "optimal":
        reward = calibrate(p0, r) * n
    else:
        reward = transform(calibrate(p0, r), method, t)
    lam = 0.02 / max(np.sqrt(p0 @ (reward - p0 @ reward) ** 2), 1e-12)  # KL ~ (lam sd)^2 / 2 ~ 2e-4 at first
    kls, wins, pi, growth, gap = [0.0], [0.5], None, 1.5, kl_high / points
    while len(kls) < max_points and kls[-1] < kl_high and lam < LAMBDA_MAX:
        try:
            new = aligned(p0, r, method, 1.0 / (lam * growth), n=n, t=t, start=pi)
        except ValueError:  # the optimum's fixed point no longer settles: the curve ends where it did
            break
        jump = kl(new, p0) - kls[-1]
        if jump > 2 * gap and growth > 1.0001:
            growth = np.sqrt(growth)
            continue
        lam, pi = lam * growth, new
        if jump < 1e-9 * max(kls[-1], 1e-12) and growth >= 4.0:  # the policy no longer moves (the optimum's
            break  # KL can stop short of the maximum: more KL would win nothing more)
        kls.append(kl(pi, p0))
        wins.append(win_rate(pi, p0, r, n))
        if jump < gap / 2:
            growth = min(growth ** 2, 4.0)
    return kls, wins


def pooled(problems, method: str, n: int, target: float, *, t: float = 0.0) -> dict:
    """One beta for all `problems` (one alignment run over every prompt), set so their mean KL is `target`.
    `problems`: (p0, r, correct) per prompt. Returns the means over prompts of KL, best-of-n win rate against
    the base's best-of-n, and best-of-n accuracy, with the beta: {"beta", "kl", "win", "accuracy"}."""
    if not problems:
        raise ValueError("`problems` is empty")
    top = float(np.mean([max_kl(p0, r) for p0, r, _ in problems]))
    if not 0 < target < top:
        raise ValueError(f"`kl` must be in (0, {top:.4g}) for these problems, got {target!r}")
    starts: list = [None] * len(problems)

    def policies(beta):
        for i, (p0, r, _) in enumerate(problems):
            starts[i] = aligned(p0, r, method, beta, n=n, t=t, start=starts[i])
        return starts

    beta = beta_for_kl(lambda b: float(np.mean([kl(pi, p0) for pi, (p0, _, _) in zip(policies(b), problems)])),
                       target)
    pis = policies(beta)
    rows = [(kl(pi, p0), win_rate(pi, p0, r, n), bon_accuracy(pi, p0, r, c, n)) for pi, (p0, r, c) in zip(pis, problems)]
    kls, wins, accs = (float(np.mean(col)) for col in zip(*rows))
    return {"beta": beta, "kl": kls, "win": wins, "accuracy": accs}
