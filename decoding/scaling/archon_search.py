"""Archon's search (ITAS): Bayesian optimisation over the space of `decoding.scaling.archon` under a token budget.

Saad-Falcon et al. 2024 (arXiv 2409.15254) search their layered architectures with Bayesian
optimisation: a few random configurations first, then a Gaussian-process surrogate of the benchmark
score proposes the next one; a configuration whose count of inference calls exceeds the budget is
scored as a failure; the best few are re-scored on a larger sample of the benchmark before one is
kept. Here, as there, but on a finite space (every candidate is scored by the acquisition, no rounding
of continuous proposals), and with the budget measured rather than counted: a candidate's tokens per
problem are only known once it ran, so a second surrogate models log tokens and the acquisition is
the expected improvement in accuracy times the probability of staying within the budget (constrained
EI, Gardner et al. 2014, "Bayesian Optimization with Inequality Constraints"). A candidate already
clearly over the budget after its first problems stops there (`PRUNE_AFTER`, `PRUNE_FACTOR`): it
is never kept, and its tokens still teach the surrogate.

    anchors     best-of-N and the particle filter at the largest N within the budget (the baselines; they
                are candidates too, evaluated first, so the search starts from them)
    random      `init` candidates drawn with the seed
    bo          `iters` candidates, each the argmax of EI x P(tokens <= budget)
    finalists   the best `finalists` within the budget, re-scored on `final_tasks` validation problems;
                the best of them there is the found architecture
    test        the found architecture, the baselines and greedy on held-out test problems

Deterministic under a seed: the random draws come from `random.Random(seed)`, the surrogate is plain
float64 algebra with its length scale chosen from a fixed grid, ties go to the earlier candidate, and
every run is seeded by its problem's index (tested with a stub scorer).

    python -m decoding.scaling.archon search --budget 600 --tasks 30 --seed 0 --out assets/tiny-math/archon.json
"""

from __future__ import annotations

import itertools
import math
import random
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from decoding.scaling.archon_space import (NS, REWARD_CHOICES, SAMPLERS, TECHNIQUES, Candidate,
                                           describe, space)


PRUNE_AFTER = 8  # problems run before a candidate clearly over the budget is stopped
PRUNE_FACTOR = 1.3  # "clearly": mean tokens so far above this x the budget
LENGTH_SCALES = (0.5, 1.0, 2.0, 4.0)  # the surrogate's length scales: the combination of highest marginal likelihood
TOKEN_NOISE = 0.005  # variance of log tokens per sample between like candidates (about 7% per sd)
MAX_N = 64  # the largest N a baseline may get (ScalingParams' range)
XI = 0.005  # the improvement EI asks for beyond the best so far (half a problem in 100)


@dataclass(frozen=True)
class Evaluation:
    accuracy: float  # share of the problems solved
    tokens: float  # mean tokens generated per problem (every model's)
    problems: int  # problems run (fewer than asked when pruned)
    pruned: bool = False  # stopped after PRUNE_AFTER problems: clearly over the budget
    cpu_s: float = 0.0


# The surrogate -----------------------------------------------------------------------------------------
def features(c: Candidate, techniques=TECHNIQUES, rewards=REWARD_CHOICES) -> list[float]:
    """A candidate as a point: one-hot technique, one-hot reward (zero where the reward changes nothing),
    log2 N, 2 x temperature and 10 x (1 - top_p); the surrogate's length scales are fitted per group of
    axes (`GROUPS`)."""
    tech = [float(c.technique.name == t.name) for t in techniques]
    matters = c.technique.uses_reward and (c.n > 1 or c.technique.layer != "rank")
    reward = [float(matters and c.reward == r) for r in rewards]
    return tech + reward + [math.log2(c.n), 2 * c.temperature, 10 * (1 - c.top_p)]


def groups(width: int) -> torch.Tensor:
    """Each axis's group: 0 the one-hot technique and reward, 1 log2 N, 2 the sampler."""
    return torch.tensor([0] * (width - 3) + [1, 2, 2])


def matern52(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    d = torch.cdist(a / scale, b / scale)  # (A, B); scale: one length per axis
    s = math.sqrt(5) * d
    return (1 + s + s * s / 3) * torch.exp(-s)


class GP:
    """Gaussian-process regression with a Matern-5/2 kernel on standardised targets; one length scale per group
    of axes, the grid's combination of highest log marginal likelihood."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, noise: float, group: torch.Tensor | None = None):
        self.x, self.mean = x, float(y.mean())
        self.sd = float(y.std()) if len(y) > 1 and float(y.std()) > 1e-9 else 1.0
        z = (y - self.mean) / self.sd
        self.noise = noise / self.sd ** 2 + 1e-6
        group = torch.zeros(x.shape[1], dtype=torch.long) if group is None else group
        best = None
        for combo in itertools.product(LENGTH_SCALES, repeat=int(group.max()) + 1):
            scale = torch.tensor(combo, dtype=torch.float64)[group]
            k = matern52(x, x, scale) + self.noise * torch.eye(len(x), dtype=torch.float64)
            chol = torch.linalg.cholesky(k)
            alpha = torch.cholesky_solve(z[:, None], chol)[:, 0]
            fit = float(-0.5 * z @ alpha - torch.log(torch.diagonal(chol)).sum())
            if best is None or fit > best[0] + 1e-12:
                best = (fit, scale, chol, alpha)
        _, self.scale, self.chol, self.alpha = best

    def predict(self, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and standard deviation at xs, in the targets' units."""
        ks = matern52(xs, self.x, self.scale)  # (S, A)
        mu = ks @ self.alpha
        v = torch.linalg.solve_triangular(self.chol, ks.T, upper=False)
        var = (1.0 - (v * v).sum(0)).clamp_min(1e-12)
        return self.mean + self.sd * mu, self.sd * var.sqrt()


def acquisition(acc_mu, acc_sd, tok_mu, tok_sd, best: float | None, budget: float) -> torch.Tensor:
    """Constrained EI: E[max(0, accuracy - best - XI)] x P(log tokens <= log budget); only P(feasible) while no
    candidate within the budget has been seen."""
    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    feasible = normal.cdf((math.log(budget) - tok_mu) / tok_sd)
    if best is None:
        return feasible
    z = (acc_mu - best - XI) / acc_sd
    ei = (acc_mu - best - XI) * normal.cdf(z) + acc_sd * torch.exp(normal.log_prob(z))
    return ei.clamp_min(0.0) * feasible


# The search --------------------------------------------------------------------------------------------
def rank_key(entry: dict) -> tuple:
    """Best first: higher accuracy, then fewer tokens, then the earlier evaluation."""
    return (-entry["accuracy"], entry["tokens"], entry["order"])


def itas(candidates: list[Candidate], evaluate: Callable[[Candidate], Evaluation], budget: float, *, seed: int = 0,
         init: int = 6, iters: int = 24, anchors: list[Candidate] = (), log: Callable[[str], None] = lambda s: None
         ) -> list[dict]:
    """Evaluate the anchors, `init` random candidates, then `iters` chosen by constrained EI; the log of every
    evaluation in order ({"key", "phase", "accuracy", "tokens", "problems", "pruned", "feasible", ...})."""
    rng = random.Random(seed)
    x_all = torch.tensor([features(c) for c in candidates], dtype=torch.float64)
    group = groups(x_all.shape[1])
    index = {c.key: i for i, c in enumerate(candidates)}
    entries: list[dict] = []

    def run(i: int, phase: str, extra: dict | None = None) -> None:
        result = evaluate(candidates[i])
        entry = {"key": candidates[i].key, "phase": phase, **asdict(result) | {
                     "accuracy": round(result.accuracy, 4), "tokens": round(result.tokens, 1),
                     "cpu_s": round(result.cpu_s, 2)},
                 "feasible": not result.pruned and result.tokens <= budget, "order": len(entries), **(extra or {})}
        entries.append(entry)
        log(f"{len(entries):>3} {phase:<6} {entry['key']:<52} acc {result.accuracy:.3f} tokens {result.tokens:7.1f}"
            + (" (pruned)" if result.pruned else "" if entry["feasible"] else " (over budget)"))

    done = lambda: {index[e["key"]] for e in entries}
    for anchor in anchors:
        if index[anchor.key] not in done():
            run(index[anchor.key], "anchor")
    pool = [i for i in range(len(candidates)) if i not in done()]
    for i in rng.sample(pool, min(init, len(pool))):
        run(i, "random")
    for _ in range(iters):
        left = [i for i in range(len(candidates)) if i not in done()]
        if not left:
            break
        full = [e for e in entries if not e["pruned"]]
        xs = x_all[left]
        # tokens grow about as N (N samples): the surrogate models log(tokens / N), the rest is known
        log_n = torch.tensor([math.log(c.n) for c in candidates], dtype=torch.float64)
        seen = [index[e["key"]] for e in entries]
        per_sample = torch.tensor([math.log(max(e["tokens"], 1.0)) for e in entries], dtype=torch.float64) - log_n[seen]
        tok_mu, tok_sd = GP(x_all[seen], per_sample, TOKEN_NOISE, group).predict(xs)
        tok_mu, tok_sd = tok_mu + log_n[left], (tok_sd ** 2 + TOKEN_NOISE).sqrt()
        feasible = [e["accuracy"] for e in full if e["feasible"]]
        best = max(feasible) if feasible else None
        if full:
            acc_y = torch.tensor([e["accuracy"] for e in full], dtype=torch.float64)
            noise = sum(max(e["accuracy"] * (1 - e["accuracy"]), 0.05) / e["problems"] for e in full) / len(full)
            acc_mu, acc_sd = GP(x_all[[index[e["key"]] for e in full]], acc_y, noise, group).predict(xs)
        else:  # every run so far was pruned: look for one within the budget first
            acc_mu, acc_sd, best = torch.zeros(len(left), dtype=torch.float64), torch.ones(len(left), dtype=torch.float64), None
        score = acquisition(acc_mu, acc_sd, tok_mu, tok_sd, best, budget)
        k = int(torch.argmax(score))  # ties: the earlier candidate
        run(left[k], "bo", {"acquisition": round(float(score[k]), 6), "predicted_accuracy": round(float(acc_mu[k]), 4),
                            "predicted_tokens": round(math.exp(float(tok_mu[k])), 1)})
    return entries


def finalists(entries: list[dict], count: int) -> list[dict]:
    """The best `count` evaluations within the budget (none pruned)."""
    return sorted((e for e in entries if e["feasible"]), key=rank_key)[:count]


# Runs on tiny-math --------------------------------------------------------------------------------------
def tokens_of(trace) -> int:
    """Tokens generated by every model in a run: the policy's (`stats`' tokens_spent) plus a drafter's."""
    from decoding.events import stats

    return int(stats(trace)["tokens_spent"]) + int(trace.finish.extra.get("speculation", {}).get("draft_tokens", 0))


def solved(answer: str | None, reference: int) -> bool:
    from decoding.scaling.rewards import parse_number

    value = parse_number(answer) if answer is not None else None
    return value is not None and abs(value - reference) < 1e-6


def evaluate_on(lm, problems: list, strategy: str, params: dict, *, seed: int, max_new_tokens: int,
                budget: float | None = None) -> Evaluation:
    """Run `strategy` on every problem (seed + the problem's index); stop after PRUNE_AFTER problems when the
    mean tokens so far exceed PRUNE_FACTOR x budget."""
    from decoding import run_to_trace
    from decoding.scaling import math_tasks

    t0, right, spent = time.process_time(), 0, []
    for k, problem in enumerate(problems):
        trace = run_to_trace(lm, math_tasks.prompt(problem.question), strategy=strategy, params=params,
                             max_new_tokens=max_new_tokens, chat=False, seed=seed + k)
        right += solved(trace.finish.extra.get("answer"), problem.answer)
        spent.append(tokens_of(trace))
        if budget is not None and k + 1 == PRUNE_AFTER < len(problems) and sum(spent) / len(spent) > PRUNE_FACTOR * budget:
            return Evaluation(right / len(spent), sum(spent) / len(spent), len(spent), True, time.process_time() - t0)
    return Evaluation(right / len(problems), sum(spent) / len(problems), len(problems), False, time.process_time() - t0)


def baseline_n(evaluate: Callable[[Candidate], Evaluation], make: Callable[[int], Candidate], per_sample: float,
               budget: float, ns) -> Candidate | None:
    """The largest N of `ns` whose run stays within the budget: start from budget / tokens per sample, step down."""
    fits = [n for n in ns if n * per_sample <= budget] or [ns[0]]
    for n in sorted(fits, reverse=True):
        candidate = make(n)
        if evaluate(candidate).tokens <= budget:
            return candidate
    return None


def search(lm, *, budget: float, tasks: int, seed: int, init: int, iters: int, final_tasks: int, count: int,
           test_tasks: int, rewards: tuple, max_new_tokens: int, log) -> dict:
    """The whole search on tiny-math (module docstring): the result `archon.json` holds."""
    from decoding.scaling import math_tasks

    splits = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})  # the benchmark's test split
    val, test = splits["val"], splits["test"][:test_tasks]
    candidates = space(rewards=rewards)
    by_key = {c.key: c for c in candidates}
    cache: dict[tuple, Evaluation] = {}
    tried: list[Candidate] = []  # the anchors, in the order they ran

    def on(problems: list, label: str, c: Candidate, prune: bool = True) -> Evaluation:
        if (c.key, label) not in cache:
            cache[(c.key, label)] = evaluate_on(lm, problems, c.strategy, c.params(), seed=seed,
                                                max_new_tokens=max_new_tokens, budget=budget if prune else None)
        return cache[(c.key, label)]

    def anchor(c: Candidate) -> Evaluation:
        tried.append(c)
        return on(val[:tasks], "search", c)

    pick = lambda name, n, temperature=1.0: Candidate(next(t for t in TECHNIQUES if t.name == name), n, temperature,
                                                      1.0, "arith-step")
    t0 = time.process_time()
    single = anchor(pick("best-of-n", 1))  # one sample at temperature 1: tokens per sample
    bon = baseline_n(anchor, lambda n: pick("best-of-n", n), single.tokens, budget, range(1, MAX_N + 1))
    pf = baseline_n(anchor, lambda n: pick("particle-filter", n), single.tokens, budget, range(2, MAX_N + 1))
    candidates += [c for c in dict.fromkeys(tried) if c.key not in by_key]  # a baseline's N off the grid
    by_key = {c.key: c for c in candidates}
    entries = itas(candidates, lambda c: on(val[:tasks], "search", c), budget, seed=seed, init=init, iters=iters,
                   anchors=list(dict.fromkeys(tried)), log=log)
    final_set = val[:max(final_tasks, tasks)]
    ranked = []
    for e in finalists(entries, count):
        result = on(final_set, "final", by_key[e["key"]], prune=False)
        ranked.append({"key": e["key"], "search_accuracy": e["accuracy"], "accuracy": result.accuracy,
                       "tokens": result.tokens, "problems": result.problems, "order": e["order"],
                       "feasible": result.tokens <= budget})
        log(f"finalist {e['key']:<52} acc {result.accuracy:.3f} on {result.problems} val problems, "
            f"tokens {result.tokens:.1f}")
    kept = sorted((r for r in ranked if r["feasible"]), key=rank_key)
    found = by_key[kept[0]["key"]] if kept else None
    out = {"budget": budget, "seed": seed, "tasks": tasks, "final_tasks": len(final_set), "max_new_tokens": max_new_tokens,
           "space": {"techniques": [t.name for t in TECHNIQUES], "samplers": [list(s) for s in SAMPLERS],
                     "ns": list(NS), "rewards": list(rewards), "size": len(candidates)},
           "search": {"init": init, "iters": iters, "finalists": count, "prune_after": PRUNE_AFTER,
                      "prune_factor": PRUNE_FACTOR},
           "log": entries, "finalists": ranked,
           "architecture": found.architecture() if found else None,
           "baselines": {name: (c.key if c else None) for name, c in (("best-of-n", bon), ("particle-filter", pf))}}
    if found is None:
        log("no candidate within the budget")
        out["search_cpu_s"] = round(time.process_time() - t0, 1)
        return out
    log(f"found: {found.key}  {describe(found.architecture())}")
    out["search_cpu_s"] = round(time.process_time() - t0, 1)
    t1 = time.process_time()
    rows = {"archon": found, "best-of-n": bon, "particle-filter": pf, "greedy": pick("best-of-n", 1, 0.0)}
    out["test"] = {"tasks": len(test), "problems": "tiny-math held-out test split (the benchmark's)"}
    for name, c in rows.items():
        if c is None:
            continue
        result = evaluate_on(lm, test, c.strategy, c.params(), seed=seed, max_new_tokens=max_new_tokens)
        out["test"][name] = {"key": c.key, "accuracy": round(result.accuracy, 4), "tokens": round(result.tokens, 1)}
        log(f"test {name:<16} {c.key:<52} acc {result.accuracy:.3f} tokens {result.tokens:.1f}")
    out["test_cpu_s"] = round(time.process_time() - t1, 1)
    return out
