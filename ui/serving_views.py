"""Serving tab views as plain functions: the state (one ServingRun per policy, as they grow) into the timeline
figure and the comparison table."""

from __future__ import annotations

from decoding.serving import POLICIES
from visualizers._common import esc
from visualizers.serving import serving_timeline_figure

DEFAULT_MODEL = "smollm2-135m"
ARRIVALS = {"Poisson stream": "poisson", "all at once (a class pressing Generate)": "together"}
DEFAULTS = {"requests": 8, "tokens": 32, "arrival": "Poisson stream", "rate": 2.0, "batch_size": 8,
            "policies": list(POLICIES)}
LIMITS = {"requests": (1, 32), "tokens": (1, 256), "rate": (0.1, 50.0), "batch_size": (1, 32)}
POLICY_HELP = {
    "one-at-a-time": "first come, first served: each request alone, to its end",
    "static": "the requests waiting when the model is idle form a batch that runs until its longest ends",
    "fusion": "Flover's temporal fusion: arrivals join the running batch at the next step, ended requests leave",
}
OUTPUTS = ("status", "timeline", "table", "runs")


def new_state() -> dict:
    return {}


def table_html(runs: dict) -> str:
    """Per policy that has finished: throughput (and its ratio to one-at-a-time), time to first token and
    latency (p50 / p95), forward passes."""
    done = {p: r.summary() for p, r in runs.items() if r.served and all(s.stop_reason for s in r.served)}
    if not done:
        return ""
    base = done.get("one-at-a-time", {}).get("tokens_per_s")
    head = ("<tr><th>policy</th><th>tokens/s</th><th>× one at a time</th><th>first token p50 / p95 (s)</th>"
            "<th>latency p50 / p95 (s)</th><th>forward passes</th></tr>")
    rows = []
    for policy in POLICIES:
        if policy not in done:
            continue
        s = done[policy]
        ratio = f"{s['tokens_per_s'] / base:.2f}×" if base else "–"
        rows.append(f"<tr><td title='{esc(POLICY_HELP[policy])}'><b>{esc(policy)}</b></td><td>{s['tokens_per_s']:.1f}</td>"
                    f"<td>{ratio}</td><td>{s['ttft_p50_s']:.2f} / {s['ttft_p95_s']:.2f}</td>"
                    f"<td>{s['latency_p50_s']:.2f} / {s['latency_p95_s']:.2f}</td><td>{s['forward_passes']}</td></tr>")
    return f"<table class='dl-serving-table'>{head}{''.join(rows)}</table>"


def views(runs: dict) -> dict:
    return {"timeline": serving_timeline_figure([runs[p] for p in POLICIES if p in runs]), "table": table_html(runs)}


__all__ = ["ARRIVALS", "DEFAULTS", "DEFAULT_MODEL", "LIMITS", "OUTPUTS", "POLICY_HELP", "new_state", "table_html",
           "views"]


SERVER_POLL_S = 2.0  # how often a watching page asks for the server's batch


def server_line(summary: dict) -> str:
    """The "This server" panel's line: runs in the batch now, steps, rows per step, step time, tokens/s."""
    if not summary["steps"] and not summary["solo_calls"]:
        return "No batched run in the last 30 s."
    step = f"{summary['mean_step_s'] * 1000:.0f} ms a step" if summary["mean_step_s"] is not None else "no step yet"
    return (f"**{summary['runs_now']}** run{'s' * (summary['runs_now'] != 1)} in the batch now · last 30 s: "
            f"{summary['steps']} steps, {summary['mean_rows']:.1f} rows a step (at most {summary['max_rows']}), {step}, "
            f"**{summary['tokens_per_s']:.1f} tokens/s**, the model busy {summary['busy_share']:.0%} of the time.")


def server_view(window_s: float = 30.0) -> list:
    """[line, figure] of the server's batch over the last `window_s` seconds (decoding.batching.activity)."""
    from decoding.batching import activity
    from visualizers.server import server_figure, server_summary

    snapshot = activity(window_s)
    return [server_line(server_summary(snapshot)), server_figure(snapshot)]
