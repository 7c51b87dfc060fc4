"""Compare: two to four decoding settings on one prompt, run side by side from the same seed.

    settings = parse_settings('[{"strategy": "greedy"}, {"strategy": "sample", "params": {"top_p": 0.9}}]')
    for index, item in compare_runs(lm, "Once upon a time", settings, max_new_tokens=64, seed=0):
        ...  # item: an Event of run `index` (its start, tokens, finish), then that run's RunScore

The runs are interleaved in one thread, one event of each live run in turn, so they share the model
(one copy in memory, one decoding thread) and a user watches them grow together; each run keeps its
own KV cache and its own random generator seeded with `seed`, so a run's events are exactly those of
the same run made alone. Stop (`should_stop`) reaches every run: each ends before its next model call.

Each run's wall-clock time is the time spent inside ITS generator only, so tokens/s is that run's
own speed and not slowed by the others it was interleaved with.

The statistics table (`compare_stats`, a pure function of a trace and its score):
    tokens          generated tokens (the stop token included, as `stats` counts them)
    tokens_per_s    tokens / the run's own seconds
    mean_entropy    mean raw entropy of the model's distribution per step (nats, T = 1)
    mean_prob       mean raw probability of the chosen token (T = 1)
    distinct_2/3    distinct n-grams / n-grams of the generated tokens (1.0 = no n-gram twice)
    repeated_4grams 4-grams that occurred earlier in the same text (loops show up here)
    logprob         log P(text | prompt) under the model at temperature 1, by one scoring call over
                    the generated tokens; also per token. Scored, not summed from the events, so
                    every method is measured alike: beam search has no per-token events, and a
                    superposed draft's events carry the superposition's distribution, not the text's.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from decoding.contracts import never
from decoding.errors import short_repr
from decoding.events import Event, RunFinished, Trace, stats
from decoding.lm import LM
from decoding.run import generate, validate_request

MIN_RUNS, MAX_RUNS = 2, 4
COLUMNS = ("run", "strategy", "params", "tokens", "tokens_per_s", "mean_entropy", "mean_prob", "distinct_2",
           "distinct_3", "repeated_4grams", "logprob", "logprob_per_token", "stop_reason")


@dataclass(frozen=True)
class Setting:
    """One column of a comparison: a strategy, its parameters and the label it is shown under."""

    strategy: str
    params: dict = dataclasses.field(default_factory=dict)
    label: str = ""

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        shown = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.strategy} ({shown})" if shown else self.strategy


@dataclass(frozen=True)
class RunScore:
    """What a run's events cannot say, measured once it has finished: its own compute time and the
    log-probability of its text under the model (None when Stop came first)."""

    compute_s: float
    logprob: float | None
    scored_tokens: int


def parse_settings(settings) -> list[Setting]:
    """2-4 settings from a list of {"strategy", "params"?, "label"?} (or its JSON text); ValueError naming
    the problem: not a list, too few or too many, an unknown strategy or parameter."""
    if isinstance(settings, str):
        try:
            settings = json.loads(settings)
        except (json.JSONDecodeError, RecursionError) as err:
            raise ValueError(f"`settings` must be a JSON list such as [{{\"strategy\": \"greedy\"}}, "
                             f"{{\"strategy\": \"sample\", \"params\": {{\"top_p\": 0.9}}}}] ({err})") from None
    if not isinstance(settings, list):
        raise ValueError(f"`settings` must be a list of {MIN_RUNS}-{MAX_RUNS} settings, got {short_repr(settings, 80)}")
    if not MIN_RUNS <= len(settings) <= MAX_RUNS:
        raise ValueError(f"compare needs {MIN_RUNS} to {MAX_RUNS} settings, got {len(settings)}")
    out = []
    for i, item in enumerate(settings, 1):
        if isinstance(item, str):
            item = {"strategy": item}
        if not isinstance(item, dict) or not isinstance(item.get("strategy"), str):
            raise ValueError(f"setting {i} must be an object with a \"strategy\", got {short_repr(item, 80)}")
        unknown = sorted(set(item) - {"strategy", "params", "label"})
        if unknown:
            raise ValueError(f"setting {i} has unknown key(s) {', '.join(map(short_repr, unknown))}; "
                             "allowed: strategy, params, label")
        params = item.get("params") or {}
        if not isinstance(params, dict):
            raise ValueError(f"setting {i}'s `params` must be an object such as {{\"top_p\": 0.9}}, got "
                             f"{short_repr(params, 80)}")
        label = item.get("label") or ""
        if not isinstance(label, str) or len(label) > 80:
            raise ValueError(f"setting {i}'s `label` must be text of at most 80 characters")
        out.append(Setting(item["strategy"], dict(params), label))
    return out


def validate_settings(prompt, settings: list[Setting], max_new_tokens, seed) -> None:
    """Every setting checked as a run of its own would be (ValueError saying which setting)."""
    for i, s in enumerate(settings, 1):
        try:
            validate_request(prompt, s.strategy, s.params, max_new_tokens, seed)
        except ValueError as err:
            raise ValueError(f"setting {i} ({s.strategy[:40]}): {err}") from None


def sequence_logprob(lm: LM, prompt_ids: list[int], token_ids: list[int]) -> float:
    """log P(token_ids | prompt_ids) under the model at temperature 1: one forward over the whole text."""
    if not token_ids:
        return 0.0
    ids = torch.tensor([list(prompt_ids) + list(token_ids)], device=lm.device)
    logits = lm.forward(ids, logits_to_keep=len(token_ids) + 1).logits[0, :-1]  # (T, V): row t predicts token t
    logprobs = torch.log_softmax(logits.float(), -1)
    return float(logprobs.gather(1, torch.tensor(token_ids, device=logprobs.device)[:, None]).sum())


def compare_runs(lm: LM, prompt: str, settings: list[Setting], *, max_new_tokens: int = 64, seed: int | None = 0,
                 chat: bool = True, should_stop: Callable[[], bool] | None = None
                 ) -> Iterator[tuple[int, Event | RunScore]]:
    """Yield (run index, event) round-robin, one event of each live run in turn; after a run's finish,
    (run index, RunScore). Every run starts from `seed`; Stop ends each before its next model call.
    Each run gets its own `LM` wrapper of the one loaded model, so a method that counts its model calls
    on the wrapper (the scaling methods) counts only its own."""
    should_stop = should_stop or never
    runs = [generate(LM(lm.loaded), prompt, strategy=s.strategy, params=s.params, max_new_tokens=max_new_tokens, seed=seed,
                     chat=chat, should_stop=should_stop) for s in settings]
    own = [0.0] * len(runs)
    prompt_ids: dict[int, list[int]] = {}
    live = list(range(len(runs)))
    try:
        while live:
            for i in list(live):
                began = time.perf_counter()
                event = next(runs[i], None)
                own[i] += time.perf_counter() - began
                if event is None:
                    live.remove(i)
                    continue
                if event.kind == "start":
                    prompt_ids[i] = list(event.prompt_ids)
                yield i, event
                if isinstance(event, RunFinished):
                    logprob = None
                    if not should_stop() and event.stop_reason != "cancelled":
                        logprob = sequence_logprob(lm, prompt_ids[i], event.token_ids)
                    yield i, RunScore(round(own[i], 4), logprob, len(event.token_ids))
    finally:
        for run in runs:
            run.close()


def _ngrams(ids: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]


def distinct(ids: list[int], n: int) -> float | None:
    """Distinct n-grams / n-grams (None for a text shorter than n)."""
    grams = _ngrams(ids, n)
    return round(len(set(grams)) / len(grams), 4) if grams else None


def repeated_ngrams(ids: list[int], n: int = 4) -> int:
    """How many of the text's n-grams occurred earlier in it."""
    grams = _ngrams(ids, n)
    return len(grams) - len(set(grams))


def generated_ids(trace: Trace) -> list[int]:
    """The run's own tokens (a branch's prefix left out)."""
    prefix = len(trace.start.prefix_ids) if trace.start else 0
    return list(trace.finish.token_ids[prefix:]) if trace.finish else [e.token_id for e in trace.of_kind("token")]


def compare_stats(trace: Trace, score: RunScore | None = None) -> dict:
    """One row of the comparison table, from a run's trace and its score (see the module docstring)."""
    s, ids = stats(trace), generated_ids(trace)
    logprob = score.logprob if score else None
    own = score.compute_s if score else None
    return {
        "tokens": s["num_tokens"],
        "tokens_per_s": round(s["num_tokens"] / own, 2) if own else s["tokens_per_s"],
        "mean_entropy": s["mean_entropy"], "mean_prob": s["mean_prob"],
        "distinct_2": distinct(ids, 2), "distinct_3": distinct(ids, 3), "repeated_4grams": repeated_ngrams(ids, 4),
        "logprob": round(logprob, 3) if logprob is not None else None,
        "logprob_per_token": round(logprob / len(ids), 4) if logprob is not None and ids else None,
        "stop_reason": s["stop_reason"],
    }


def table_rows(settings: list[Setting], traces: list[Trace], scores: list[RunScore | None]) -> list[dict]:
    """The comparison table: one row per run, COLUMNS in order."""
    return [{"run": i + 1, "strategy": s.name, "params": json.dumps(t.start.params if t.start else s.params,
                                                                      sort_keys=True)}
            | compare_stats(t, score) for i, (s, t, score) in enumerate(zip(settings, traces, scores))]


def table_csv(rows: list[dict]) -> str:
    """The table as CSV text (COLUMNS as the header)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


__all__ = ["COLUMNS", "MAX_RUNS", "MIN_RUNS", "RunScore", "Setting", "compare_runs", "compare_stats", "distinct",
           "parse_settings", "repeated_ngrams", "sequence_logprob", "table_csv", "table_rows", "validate_settings"]
