"""Fitting compute-optimal's allocation table from per-problem records (pure: no model).

A record is one validation problem as `bench/bench_compute_optimal.py collect` measured it:
{"id", "answer" (the reference), "difficulty" (the true number of steps, kept for the report only),
"samples": [{"answer", "score", "ended", "tokens", "correct"}] (max N independent samples: the probes
are the first k, best-of-N and majority vote read the first N), "runs": {option label: {"correct",
"tokens"}} (each other option run once on its own)}.

For a budget level (named by the N of the uniform best-of-N it matches; its mean tokens on the records
are the budget) and each probe size k, the problems are binned by the probe's estimated difficulty
(`compute_optimal.probe_difficulty`, one bin per value, a bin with fewer than `min_count` problems
merged into the next), and one option per bin is chosen to maximise the number solved with mean tokens
(the probe's included) at most the budget: an exact search over the bins' Pareto-optimal options. The
k that solves most wins. As Snell et al. 2024 select per difficulty bin on held-out questions; unlike
them, the budget is shared across bins and the estimate's tokens count.
"""

from __future__ import annotations

import itertools
import statistics

from decoding.scaling.compute_optimal import POOLED, option_label, probe_difficulty
from decoding.scaling.methods import vote
from decoding.scaling.run import best_complete

OPTIONS = ([{"method": "best-of-n", "n": n} for n in (1, 2, 4, 8, 16)]
           + [{"method": "majority-vote", "n": n} for n in (4, 8, 16)]
           + [{"method": "particle-filter", "n": n} for n in (4, 8, 16)]
           + [{"method": "reward-beam", "n": n, "params": {"beam_width": 2}} for n in (4, 8)]
           + [{"method": "refine", "n": n, "params": {"rounds": 3}} for n in (1, 2, 4)])
RUN_OPTIONS = [o for o in OPTIONS if o["method"] not in POOLED]  # each run on its own per problem
PROBES = (1, 2, 4)
LEVELS = (1, 2, 4, 8, 16)  # at 1 nothing can move: the probe is the whole budget


def pooled_correct(samples: list[dict], method: str) -> bool:
    """Whether best-of-N (highest score among complete samples) or majority vote over `samples` is right."""
    if method == "majority-vote":
        votes = vote([s["answer"] for s in samples], [1.0] * len(samples))
        winner = next(iter(votes), None)
        return winner is not None and any(s["correct"] for s in samples if s["answer"] == winner)
    return samples[best_complete([s["score"] for s in samples], [s["ended"] for s in samples])]["correct"]


def outcome(record: dict, option: dict, k: int) -> tuple[bool, int]:
    """(solved, tokens) of `option` on this problem after a probe of k samples (k = 0: no probe). Best-of-N and
    the vote keep the probes as their first k samples; any other option spends the probe's tokens on top."""
    samples = record["samples"]
    if option["method"] in POOLED:
        first = samples[:max(option["n"], k)]
        return pooled_correct(first, option["method"]), sum(s["tokens"] for s in first)
    run = record["runs"][option_label(option)]
    return bool(run["correct"]), run["tokens"] + sum(s["tokens"] for s in samples[:k])


def difficulty(record: dict, k: int, accept: float = 0.5) -> float:
    probes = record["samples"][:k]
    return probe_difficulty([s["answer"] for s in probes], [s["score"] for s in probes],
                            [s["ended"] for s in probes], accept)["difficulty"]


def make_bins(values: list[float], min_count: int) -> list[dict]:
    """[{"name", "max_difficulty", "count"}] from the distinct values, sparse bins merged into the next harder one
    (the hardest into the one before it)."""
    bins = [{"max_difficulty": v, "count": sum(1 for x in values if abs(x - v) < 1e-9)} for v in sorted(set(values))]
    while len(bins) > 1:
        sparse = next((i for i, b in enumerate(bins) if b["count"] < min_count), None)
        if sparse is None:
            break
        low, high = sorted((sparse, sparse + 1 if sparse + 1 < len(bins) else sparse - 1))
        bins[high]["count"] += bins[low]["count"]  # bins are sorted: the merged one keeps the higher bound
        del bins[low]
    names = ["easy", "hard"] if len(bins) == 2 else ["easy"] + [f"medium {m + 1}" if len(bins) > 3 else "medium"
                                                                   for m in range(len(bins) - 2)] + ["hard"]
    for b, name in zip(bins, names if len(bins) > 1 else ["all"]):
        b["name"] = name
    return bins


def _pareto(cells: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """(solved, tokens, label) options not beaten by one that solves as many with fewer tokens."""
    kept = []
    for solved, tokens, label in sorted(cells, key=lambda c: (c[1], -c[0])):
        if not kept or solved > kept[-1][0]:
            kept.append((solved, tokens, label))
    return kept


def fit_probe(records: list[dict], budget: float, k: int, min_count: int, accept: float = 0.5) -> dict | None:
    """The best allocation with probes of k samples: {"probe", "bins", "allocation", "solved", "tokens"}, or
    None when even the cheapest options exceed the budget."""
    from decoding.scaling.compute_optimal import bin_of

    values = [difficulty(r, k, accept) for r in records]
    bins = make_bins(values, min_count)
    members = {b["name"]: [r for r, v in zip(records, values) if bin_of(bins, v) == b["name"]] for b in bins}
    fronts = []
    for b in bins:
        cells = []
        for option in OPTIONS:
            results = [outcome(r, option, k) for r in members[b["name"]]]
            cells.append((sum(ok for ok, _ in results), sum(t for _, t in results), option_label(option)))
        fronts.append(_pareto(cells))
    best = None
    for combo in itertools.product(*fronts):
        tokens = sum(c[1] for c in combo)
        if tokens > budget * len(records) + 1e-9:
            continue
        key = (sum(c[0] for c in combo), -tokens)
        if best is None or key > best[0]:
            best = (key, combo)
    if best is None:
        return None
    (solved, neg_tokens), combo = best
    by_label = {option_label(o): o for o in OPTIONS}
    return {"probe": k, "accept": accept, "bins": bins,
            "allocation": {b["name"]: by_label[c[2]] for b, c in zip(bins, combo)},
            "solved": solved, "tokens": -neg_tokens / len(records),
            "by_bin": {b["name"]: {"count": len(members[b["name"]]), "solved": c[0],
                                   "mean_steps": round(statistics.mean(r["difficulty"] for r in members[b["name"]]), 2)
                                   if members[b["name"]] else None} for b, c in zip(bins, combo)}}


def fit(records: list[dict], levels=LEVELS, probes=PROBES, min_count: int = 10) -> dict:
    """{level: {"budget", "probe", "bins", "allocation", "uniform", "val_accuracy", "val_tokens", ...}}."""
    out = {}
    count = len(records)
    for level in levels:
        uniform_bon = {"method": "best-of-n", "n": level}
        budget = statistics.mean(outcome(r, uniform_bon, 0)[1] for r in records)
        uniform = max(OPTIONS, key=lambda o: _uniform_key(records, o, budget))
        fits = [f for f in (fit_probe(records, budget, k, min_count) for k in probes) if f is not None]
        chosen = max(fits, key=lambda f: (f["solved"], -f["tokens"]))
        solved_u = sum(outcome(r, uniform, 0)[0] for r in records)
        out[str(level)] = chosen | {
            "budget_tokens": round(budget, 1), "val_accuracy": round(chosen["solved"] / count, 4),
            "val_tokens": round(chosen["tokens"], 1), "uniform": uniform,
            "uniform_val_accuracy": round(solved_u / count, 4),
            "uniform_val_tokens": round(statistics.mean(outcome(r, uniform, 0)[1] for r in records), 1),
            "best_of_n_val_accuracy": round(sum(outcome(r, uniform_bon, 0)[0] for r in records) / count, 4)}
        del out[str(level)]["solved"], out[str(level)]["tokens"]
    return out


def _uniform_key(records: list[dict], option: dict, budget: float) -> tuple:
    results = [outcome(r, option, 0) for r in records]
    tokens = statistics.mean(t for _, t in results)
    return (tokens <= budget + 1e-9, sum(ok for ok, _ in results), -tokens)
