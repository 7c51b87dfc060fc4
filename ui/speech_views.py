"""The Streaming speech tab's views as plain functions: one or two speech traces (the policy, and the one beside it)
rendered into {output name: value} (see `OUTPUTS`), and the tab's control <-> parameter map.

    trace      the run of the first column's policy (a `Trace` of speech events, growing while it streams)
    other      the second column's run on the same clip ("side by side"), or None
    chunk      which chunk's transcript is shown (None = the latest)

The controls come from `StreamParams` (`decoding.params.describe`): the family's fields once ("sp:chunk_s"),
the policy selector and each policy's own knobs once per column ("sp:policy", "sp:local-agreement.agree";
"sp2:policy", "sp2:local-agreement.agree"), shown for the chosen policy only.
"""

from __future__ import annotations

import gradio as gr

from decoding.params import describe
from decoding.speech.policies import POLICIES, StreamParams
from ui.widgets import EMPTY_STATS_HTML, fmt, stat_cards_html
from ui.wiring import check_names
from visualizers.speech import (chunks_of, finish_of, lengths_figure, start_of, transcript_html,
                                word_timeline_figure)

ROWS = describe(StreamParams)
SHARED = tuple(r["name"] for r in ROWS if r["plugin"] is None and r["name"] != "policy")  # both columns' fields
PLUGIN_ROWS = [r for r in ROWS if r["plugin"] is not None]  # each policy's own knobs
COLUMNS = ("sp", "sp2")  # the first column's policy, the second's ("side by side")
NO_SECOND = "none"
DEFAULT_POLICY = next(r["default"] for r in ROWS if r["name"] == "policy")
OPENING_SECOND = "redecode"  # the tab opens on local agreement beside the naive baseline: the lesson is the contrast
OUTPUTS = ("status", "chunk", "stats", "transcript", "timeline", "lengths", "stats2", "transcript2", "timeline2",
           "lengths2", "trace", "other")


def policy_choices() -> list[str]:
    return [name for name in POLICIES.names() if not POLICIES.capability(name, "unavailable")]


def unavailable_policies() -> dict[str, str]:
    return {name: POLICIES.capability(name, "unavailable") for name in POLICIES.names()
            if POLICIES.capability(name, "unavailable")}


def spec(name: str) -> dict:
    return next(r for r in ROWS if r["name"] == name)


def visibility(prefix: str, policy: str) -> dict:
    """{widget key: gr.update(visible=...)}: the chosen policy's own knobs in that column, the others hidden."""
    return {f"{prefix}:{r['name']}": gr.update(visible=r["plugin"] == policy) for r in PLUGIN_ROWS}


def collect_params(policy: str, shared: dict, own: dict) -> dict:
    """A run's parameters: the shared fields and the chosen policy's own (`own`: {"<policy>.<field>": value} for
    every policy; the others' are left out, as `ui.plugin_fields.chosen_values` does). Sliders give 2.0 for 2."""
    check_names(shared, SHARED, "streaming speech")
    params = {"policy": policy} | {k: v for k, v in shared.items() if v is not None}
    for row in PLUGIN_ROWS:
        value = own.get(row["name"])
        if row["plugin"] == policy and value is not None:
            params[row["name"]] = int(value) if row["type"] == "int" and float(value).is_integer() else value
    for name in SHARED:
        if spec(name)["type"] == "int" and isinstance(params.get(name), float) and params[name].is_integer():
            params[name] = int(params[name])
    return params


# Views ----------------------------------------------------------------------------------------------
def views(trace, other=None, chunk: int | None = None, *, live: bool = False) -> dict:
    """Every display output from the state; `live=True` while the runs stream (the latest chunk)."""
    chunks = chunks_of(trace)
    index = chunk if chunk is not None and 0 <= chunk < len(chunks) else None
    slider = gr.update(minimum=1, maximum=max(2, len(chunks)), value=(index + 1) if index is not None else max(1, len(chunks)),
                       interactive=len(chunks) > 1 and not live,
                       label=f"Chunk ({len(chunks)} heard)" if chunks else "Chunk")
    return {"chunk": slider} | column_views(trace, "", index) | column_views(other, "2", index)


def column_views(trace, suffix: str, chunk: int | None = None) -> dict:
    """One column: the stats cards, the transcript after `chunk`, the word timeline and the lengths per chunk."""
    if trace is None or start_of(trace) is None:
        return {f"stats{suffix}": EMPTY_STATS_HTML, f"transcript{suffix}": transcript_html(None),
                f"timeline{suffix}": word_timeline_figure(None), f"lengths{suffix}": lengths_figure(None)}
    return {f"stats{suffix}": stats_html(trace), f"transcript{suffix}": transcript_html(trace, chunk),
            f"timeline{suffix}": word_timeline_figure(trace), f"lengths{suffix}": lengths_figure(trace)}


def quick_views(trace, other=None) -> dict:
    """The transcripts only: cheap, so every chunk's hypothesis reaches the page as it is computed."""
    return {"transcript": transcript_html(trace)} | ({"transcript2": transcript_html(other)} if other else {})


def run_label(trace) -> str:
    """"local-agreement (agree 2), 1 s chunks": a speech run's setting in a few words."""
    start = start_of(trace)
    if start is None:
        return ""
    own = ", ".join(f"{k.partition('.')[2].replace('_', ' ')} {v}" for k, v in start.params.items()
                    if k.startswith(f"{start.policy}."))
    return f"{start.policy}{f' ({own})' if own else ''}, {start.params.get('chunk_s', 0):g} s chunks"


def stats_html(trace) -> str:
    """One row of cards: WER, mean and p95 latency, retractions a minute, CPU s per audio s and how far behind live
    audio the policy would be (`SpeechChunk.behind_s`), chunks."""
    start, finish = start_of(trace), finish_of(trace)
    s = dict(finish.stats) if finish else {}
    chunks = chunks_of(trace)
    if not finish:
        heard = chunks[-1].audio_end_s if chunks else 0.0
        retracted = sum(len(c.retracted) for c in chunks)
        cpu = sum(c.cpu_s for c in chunks)
        s = {"retractions_per_minute": retracted / (heard / 60) if heard else None,
             "cpu_s_per_audio_s": cpu / heard if heard else None, "committed_words": None,
             "behind_s": chunks[-1].behind_s if chunks else 0.0}
    cards = [("WER", fmt(s.get("wer"), 3) if finish and start.reference else "–"),
             ("mean latency (s)", fmt(s.get("mean_latency_s"))), ("p95 latency (s)", fmt(s.get("p95_latency_s"))),
             ("retractions / min", fmt(s.get("retractions_per_minute"), 1)),
             ("CPU s per audio s · behind live (s)", f"{fmt(s.get('cpu_s_per_audio_s'))} · {fmt(s.get('behind_s'), 1)}"),
             ("chunks", f"{len(chunks)} / {start.num_chunks}" if start.num_chunks else len(chunks))]
    state = ("stopped" if finish and finish.stop_reason == "cancelled" else "finished" if finish else "streaming")
    caption = f"{run_label(trace)} · {start.model} · {state}" + (f" · {start.source}" if start.source else "")
    return stat_cards_html(cards, caption)


def stats_line(trace) -> str:
    """A run in one sentence (status bar, tests)."""
    finish = finish_of(trace)
    if finish is None:
        chunks = chunks_of(trace)
        lag = chunks[-1].behind_s if chunks else 0.0
        late = f", {lag:.1f} s behind live audio" if lag >= LATE_S else ""
        return f"{run_label(trace)}: {len(chunks)} chunks so far{late}"
    s = finish.stats
    wer = f"WER {s['wer']:.3f}, " if s.get("wer") is not None else ""
    return (f"{run_label(trace)}: {wer}latency mean {fmt(s.get('mean_latency_s'))} s / p95 "
            f"{fmt(s.get('p95_latency_s'))} s, {s.get('retracted_tokens', 0)} tokens retracted, "
            f"{fmt(s.get('cpu_s_per_audio_s'))} CPU s per audio s, {live_line(s)}")


LATE_S = 0.5  # behind live audio by more than this: said


def live_line(s: dict) -> str:
    """Whether the policy keeps up with live audio on this machine, and if not by how much (from its chunks' CPU
    time, as if it ran alone: a microphone's audio queues behind a policy slower than real time)."""
    lag = s.get("behind_s")
    if lag is None:  # a trace saved before this was recorded
        return "live: not recorded"
    if lag < LATE_S:
        return "keeps up with live audio"
    return f"falls behind live audio: {lag:.1f} s behind at the end of {s.get('audio_s', 0):.0f} s"
