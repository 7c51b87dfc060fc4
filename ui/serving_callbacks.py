"""Serving tab handlers as plain functions (values in, {output name: value} out): one stream of requests
served under each chosen policy in turn, on the tab's model, drawn as it runs (`decoding/serving.py`)."""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from decoding.models import load_model
from decoding.run import as_lm
from decoding.serving import POLICIES, poisson_arrivals, sample_requests, serve_live
from ui.serving_views import ARRIVALS, LIMITS, new_state, views
from ui.widgets import USER_ERRORS, md_esc, user_error
from ui.wiring import as_int
from ui.worker import LimitReached, Status, check_model, limit_line, pump_views


def validate(model, requests, tokens, arrival, rate, batch_size, policies) -> tuple:
    """The settings as the scheduler takes them; ValueError naming a bad one."""
    values = {"requests": as_int(requests), "tokens": as_int(tokens), "rate": rate, "batch_size": as_int(batch_size)}
    for name, (low, high) in LIMITS.items():
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"`{name}` must be a number in [{low:g}, {high:g}], got {value!r}")
    if arrival not in ARRIVALS:
        raise ValueError(f"`arrival` must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    chosen = [p for p in POLICIES if p in (policies or [])]
    unknown = [p for p in policies or [] if p not in POLICIES]
    if unknown or not chosen:
        raise ValueError(f"choose at least one policy of {', '.join(POLICIES)}" + (f"; unknown: {unknown}" if unknown else ""))
    check_model(model)
    return values["requests"], values["tokens"], ARRIVALS[arrival], float(rate), values["batch_size"], chosen


def serving_work(model, count, tokens, arrival, rate, batch_size, policies) -> Callable:
    """A worker: load the model (Status lines), then each policy in turn, emitting (policy, run) after every
    forward pass of the model."""

    def work(emit, should_stop):
        loaded = load_model(model, progress=lambda message: emit(Status(message)))
        lm = as_lm(loaded)
        arrivals = poisson_arrivals(count, rate, seed=0) if arrival == "poisson" else [0.0] * count
        requests = sample_requests(lm, count, tokens, arrivals)
        emit(Status(f"Warming up {loaded.name}…"))  # the first forward pays one-off set-up: no policy should
        lm.forward(torch.tensor([requests[0].prompt_ids], device=lm.device), last_only=True)
        for policy in policies:
            if should_stop():
                return
            emit(Status(f"Serving {count} requests on {loaded.name}: **{policy}**…"))
            for run in serve_live(lm, requests, policy, batch_size, should_stop=should_stop):
                emit((policy, run))

    return work


def generate_run(model, requests, tokens, arrival, rate, batch_size, policies) -> Iterator[dict]:
    """Serve the stream under each chosen policy and stream the timeline; the table fills as each ends."""
    try:
        count, tokens, arrival, rate, batch_size, policies = validate(model, requests, tokens, arrival, rate,
                                                                       batch_size, policies)
    except USER_ERRORS as err:
        raise user_error(err) from None
    runs = new_state()
    yield views(runs) | {"runs": runs, "status": f"Starting {md_esc(model)}…"}
    limit: dict = {}

    def take(item) -> bool:
        if isinstance(item, tuple):
            runs[item[0]] = item[1]
            return True
        if isinstance(item, LimitReached):  # the app's time limit stopped the stream
            limit["s"] = item.limit_s
        return False

    line = lambda status, progress: status or "Working…"
    try:
        yield from pump_views(serving_work(model, count, tokens, arrival, rate, batch_size, policies), take,
                              lambda: views(runs), line)
    except USER_ERRORS as err:
        raise user_error(err) from None
    yield views(runs) | {"runs": runs, "status": finished_status(runs, policies) + limit_line(limit.get("s"))}


def finished_status(runs: dict, policies: list[str]) -> str:
    ended = [p for p in policies if p in runs and all(s.stop_reason for s in runs[p].served)]
    if len(ended) < len(policies):
        return f"**Stopped**: {len(ended)} of {len(policies)} policies served the whole stream; what ran is shown."
    summaries = {p: runs[p].summary() for p in ended}
    best = max(ended, key=lambda p: summaries[p]["tokens_per_s"])
    rates = ", ".join(f"{p} {summaries[p]['tokens_per_s']:.1f} tokens/s" for p in ended)
    return f"**Finished**: {rates}; the most: **{best}**."


def stop_run(runs) -> dict:
    """After Stop cancelled the run: what ran stays drawn."""
    runs = runs or {}
    return views(runs) | {"status": finished_status(runs, list(runs) or list(POLICIES)) if runs else "Nothing is running."}


__all__ = ["finished_status", "generate_run", "serving_work", "stop_run", "validate"]
