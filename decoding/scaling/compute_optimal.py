"""Compute-optimal test-time scaling per prompt: estimate how hard the prompt is, then spend by the table.

Snell, Lee, Xu and Kumar 2024, "Scaling LLM Test-Time Compute Optimally can be More Effective than
Scaling Model Parameters" (arXiv 2408.03314): the best way to spend a test-time budget depends on
how hard the question is for the policy, so the paper bins questions by difficulty and picks, per
bin and budget, the method and its settings that did best on held-out questions. Its deployable
variant bins by the policy's own predicted difficulty (the verifier's average score over samples,
no ground truth), not by the oracle's. Here, as the paper's predicted difficulty, from a few samples:

1. **Probe**: `probe` samples (the table's k: 1, 2 or 4) are drawn and scored by the reward.
2. **Estimate**: difficulty = 1 - (1/k) x the number of probe samples that end with every step
   passing (score >= `accept`) and carry the plurality answer among the passing ones (0 = every
   probe checked and agreed; 1 = none passed). A discrete form of the paper's averaged verifier
   score, with answer agreement (self-consistency) folded in. `probe_difficulty` computes it.
3. **Allocate**: the difficulty's bin picks an option from the table fitted on tiny-math's `val`
   split (`decoding/scaling/compute_fit.py`; `python bench/bench_compute_optimal.py fit` writes
   assets/tiny-math/compute_optimal.json): a method and its N, e.g. "stop: best of the probes" for
   an easy prompt, "particle-filter N=8" for a hard one. Unlike the paper (which fixes the budget
   per question and does not count the estimate), the table spreads a mean budget over the bins
   and every token counts, the probe's included: the fit keeps the mean tokens on `val` at most
   those of uniform best-of-N at the level's N (`n`, one of the table's levels).
4. **Run** it: best-of-N and majority vote keep the probe samples as their first k (so a probe is
   never wasted) and draw N - k more; any other method runs on its own after the probe.

`allocation=uniform` runs, without a probe, the single option the fit found best for every prompt at
the same level: the stronger of the two uniform baselines (the other is best-of-N at N). The table
was fitted at temperature 1, top_p 1, `max_step_tokens` 40, reward `arith-step` (as the benchmark and
preset 42 run it); other settings or another policy use it as it is, and the allocation record says
what it was fitted for.

Events: the probe's steps, then the chosen method's (their `method` is the method's, steps and tokens
continue the probe's), each with `extra["allocation"]` {"phase" (probe, run or pool), "probe" {"n",
"passed", "agree"}, "difficulty", "bin", "choice", "level"}; the final record has the same under
"allocation". Glossary: level (the budget, named by the uniform best-of-N it matches), bin (a
difficulty range), option (a method with its N and settings), probe (the samples that estimate).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator


from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.models import ASSETS_DIR
from decoding.params import flat, from_values, param
from decoding.registry import get_strategy, register_strategy
from decoding.scaling.methods import independent_samples, vote
from decoding.scaling.params import ScalingParams
from decoding.scaling.run import ScalingRun, identity_ancestors, score_weights

TABLE_PATH = ASSETS_DIR / "tiny-math" / "compute_optimal.json"
FIT_COMMAND = "python bench/bench_compute_optimal.py fit"
POOLED = ("best-of-n", "majority-vote")  # methods that reuse the probe samples as their first k


def load_table(path: Path | None = None) -> dict:
    """The allocation table (levels, bins, options): `path`, else `TABLE_PATH` (a benchmark or a test may point
    that at another fit); ValueError saying how to make it when it is missing."""
    return _read_table(Path(path or TABLE_PATH))


@lru_cache(maxsize=4)
def _read_table(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"compute-optimal needs its allocation table {path} (made by `{FIT_COMMAND}`)")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class ComputeOptimalParams(ScalingParams):
    n: int = param(4, low=1, high=64, ui_high=16, label="budget level N",
                   help="compute-optimal: the budget level: on average as many tokens as best-of-N at this N (a level "
                        "of the fitted table: 1, 2, 4, 8 or 16).")
    allocation: str = param("per-prompt", choices=("per-prompt", "uniform"),
                            help="compute-optimal: per-prompt (probe, estimate the difficulty, run the bin's option) "
                                 "or uniform (the one option the fit found best for every prompt at this level).")

    def __post_init__(self):
        super().__post_init__()
        if not Path(TABLE_PATH).is_file():  # a copy without the assets: the run says how to make the table
            return
        levels = load_table()["levels"]
        if str(self.n) not in levels:
            raise ValueError(f"`n` must be a budget level of the compute-optimal table ({', '.join(levels)}), "
                             f"got {self.n}")


def probe_difficulty(answers: list[str | None], scores: list[float], ended: list[bool], accept: float) -> dict:
    """{"n", "passed", "agree", "difficulty"} of k probe samples: passed = complete with score >= accept;
    agree = passed samples carrying the plurality answer among them; difficulty = 1 - agree / k."""
    passed = [i for i in range(len(scores)) if ended[i] and scores[i] >= accept and answers[i] is not None]
    counts = Counter(answers[i] for i in passed)
    agree = counts.most_common(1)[0][1] if counts else 0
    return {"n": len(scores), "passed": len(passed), "agree": agree, "difficulty": 1.0 - agree / max(1, len(scores))}


def bin_of(bins: list[dict], difficulty: float) -> str:
    """The name of the first bin whose `max_difficulty` is at least `difficulty` (the last one otherwise)."""
    return next((b["name"] for b in bins if difficulty <= b["max_difficulty"] + 1e-9), bins[-1]["name"])


def option_label(option: dict) -> str:
    extra = ", ".join(f"{k}={v}" for k, v in option.get("params", {}).items())
    return f"{option['method']} N={option['n']}" + (f" ({extra})" if extra else "")


def _params_for(params: ComputeOptimalParams, method: str, n: int, own: dict | None = None):
    """`method`'s parameter dataclass with this run's shared settings (reward and its knobs included)."""
    shared = {k: v for k, v in flat(params).items() if k != "allocation"}
    return from_values(get_strategy(method).params_cls, shared | {"n": n} | (own or {}))


def _tagged(events, alloc: dict, step0: int, tokens0: int, counter: list):
    """A sub-run's events with their steps and tokens continuing the run's and the allocation in `extra`;
    returns what the sub-run returns. `counter` ends holding [the next step, tokens at the last event]."""
    events = iter(events)
    try:
        while True:
            try:
                event = next(events)
            except StopIteration as stop:
                return stop.value
            event = dataclasses.replace(event, step=event.step + step0, tokens_spent=event.tokens_spent + tokens0,
                                        extra=event.extra | {"allocation": alloc})
            counter[:] = [event.step + 1, event.tokens_spent]
            yield event
    finally:  # closed early (Stop, or the caller is done): close the sub-run now, as `yield from` would
        events.close()


@register_strategy("compute-optimal", params=ComputeOptimalParams, family="scaling", uses_seed=True,
                   help="compute-optimal scaling per prompt (Snell et al.): a few probe samples estimate the "
                        "difficulty; the bin's method and budget, fitted on val, are run; on val at most the mean "
                        "tokens of best-of-N at N", papers=(bib.SNELL_2024,))
def compute_optimal(ctx: RunContext, params: ComputeOptimalParams, outcome: Outcome) -> Iterator[Event]:
    table = load_table()
    level = table["levels"][str(params.n)]
    counter = [0, 0]
    fitted = (f"fitted on {table['model']}'s {table['split']} split at temperature {table['sampling']['temperature']:g}, "
              f"reward {table['sampling']['reward']}")
    if params.allocation == "uniform":
        option = level["uniform"]
        alloc = {"phase": "run", "level": params.n, "choice": option_label(option), "bin": "all (uniform)",
                 "fitted": fitted}
        sub = get_strategy(option["method"])
        yield from _tagged(sub.fn(ctx, _params_for(params, option["method"], option["n"], option.get("params")),
                                  outcome), alloc, 0, 0, counter)
        _relabel(outcome, alloc)
        return
    k = level["probe"]
    alloc = {"phase": "probe", "level": params.n, "probe": {"n": k}, "fitted": fitted}
    probe = yield from _tagged(independent_samples(ctx, _params_for(params, "best-of-n", k), outcome, "compute-optimal"),
                               alloc, 0, 0, counter)
    scores = [probe.score_of(i) for i in range(k)]
    ended = set(probe.ended())
    features = probe_difficulty(probe.answers(), scores, [i in ended for i in range(k)], level.get("accept", 0.5))
    name = bin_of(level["bins"], features["difficulty"])
    option = level["allocation"][name]
    alloc = alloc | {"phase": "run", "probe": {key: features[key] for key in ("n", "passed", "agree")},
                     "difficulty": round(features["difficulty"], 4), "bin": name, "choice": _choice(option, k)}
    if probe.cancelled() or outcome.stop_reason == "cancelled":
        probe.finish(outcome, probe.best(scores), score_weights(probe), rule="stopped after the probe")
        _relabel(outcome, alloc)
        return
    if option["method"] in POOLED and option["n"] <= k:  # the probes are the answer: nothing more is spent
        _choose(probe, outcome, option["method"])
    elif option["method"] in POOLED:
        more = _params_for(params, option["method"], option["n"] - k)
        steps0, tokens0 = counter
        run = yield from _tagged(independent_samples(ctx, more, outcome, "compute-optimal"), alloc, steps0, tokens0,
                                 counter)
        run.particles = run.particles + [p.copy(parent=-1) for p in probe.particles]  # the pool: new ones, then probes
        weights = score_weights(run)
        pool = alloc | {"phase": "pool"}
        event = run.event(weights, identity_ancestors(len(run.particles)), False, weights, set(), {"allocation": pool})
        yield dataclasses.replace(event, step=counter[0], tokens_spent=event.tokens_spent + tokens0)
        _choose(run, outcome, option["method"])
    else:
        sub = get_strategy(option["method"])
        yield from _tagged(sub.fn(ctx, _params_for(params, option["method"], option["n"], option.get("params")),
                                  outcome), alloc, counter[0], counter[1], counter)
    _relabel(outcome, alloc)


def _choice(option: dict, k: int) -> str:
    """What the bin runs, as the record says it (a pooled method counts the probes among its N)."""
    if option["method"] not in POOLED:
        return option_label(option)
    if option["n"] <= k:
        return f"{option_label(option | {'n': k})}: the probes only, nothing more spent"
    return f"{option_label(option)}: the {k} probes and {option['n'] - k} more"


def _choose(run: ScalingRun, outcome: Outcome, method: str) -> None:
    """Best-of-N's or majority vote's choice over the run's particles (the probes among them)."""
    scores = [run.score_of(i) for i in range(len(run.particles))]
    if method == "majority-vote":
        answers = run.answers()
        votes = vote(answers, [1.0] * len(answers))
        winner = next(iter(votes), None)
        voters = [i for i, a in enumerate(answers) if a == winner] or list(range(len(answers)))
        chosen = max(voters, key=lambda i: (scores[i], -i))
        run.finish(outcome, chosen, score_weights(run), votes, rule="most frequent answer")
    else:
        run.finish(outcome, run.best(scores), score_weights(run),
                   rule="highest score among finished answers")


def _relabel(outcome: Outcome, alloc: dict) -> None:
    """The final record says compute-optimal chose, with what and why."""
    extra = outcome.extra
    if not extra:
        return
    extra["rule"] = f"{alloc.get('choice', 'the probe')} ({alloc.get('bin', '')}): {extra.get('rule', '')}"
    extra["method"] = "compute-optimal"
    extra["allocation"] = alloc
