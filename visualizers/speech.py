"""Streaming speech pictures: the live transcript, when each word was committed against when it was spoken, and
what the policy showed and promised after every chunk. Pure functions of a speech trace (or its prefix).

    transcript_html(trace, chunk=None)   the transcript after a chunk: committed tokens as the Playground's chips
                                         (coloured by probability, entropy and alternatives on hover), the
                                         unconfirmed tail dashed and pale, tokens withdrawn at that chunk struck
                                         through where they stood
    word_timeline_figure(trace)          per committed word: the interval it was spoken (the reference word times)
                                         and the moment it was committed; the gap is its latency
    lengths_figure(trace)                per chunk: hypothesis and committed length in tokens, retractions marked,
                                         buffer cuts (audio over 30 s) as dotted lines
    committed_so_far(trace)              the committed words with their latencies, from the chunks (while live)

Glossary: chunk / hypothesis / committed / retracted / latency: see `decoding/speech/__init__.py`.
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding.events import Trace
from decoding.speech.events import SpeechChunk, SpeechFinished, SpeechStarted
from decoding.speech.latency import committed_words
from visualizers._common import TEMPLATE, cap, empty_figure, esc, note_capped, plotly_safe, MARKS, NODES
from visualizers.tokens import alternatives_lines, chip_html, tokens_css, visible

WAITING_AUDIO = "waiting for the first chunk of audio…"
_CSS = """<style>
.dl-speech .tok.tail{background:transparent !important;border:1px dashed #8a8a8a;color:#555;font-style:italic}
.dl-speech .tok.gone{background:#fde2e1 !important;text-decoration:line-through;text-decoration-color:#c0392b;
 color:#8b1d13}
.dl-speech .dl-speech-key{display:flex;flex-wrap:wrap;gap:.9em;font-size:12px;opacity:.85;margin-bottom:.3em}
.dl-speech .dl-speech-key span.k{padding:0 .35em;border-radius:3px}
.dl-speech .dl-speech-when{font-size:12px;opacity:.75;margin-top:.3em}
</style>"""


def start_of(trace: Trace | None) -> SpeechStarted | None:
    return trace.events[0] if trace is not None and trace.events and isinstance(trace.events[0], SpeechStarted) \
        else None


def chunks_of(trace: Trace | None) -> list[SpeechChunk]:
    return [e for e in trace.events if isinstance(e, SpeechChunk)] if trace is not None else []


def finish_of(trace: Trace | None) -> SpeechFinished | None:
    return next((e for e in reversed(trace.events) if isinstance(e, SpeechFinished)), None) if trace else None


def _tooltip(token: dict, state: str) -> str:
    head = (f"'{visible(token['text'])}' · {state} · p={token['prob']:.3g} · H={token['entropy']:.2f} nats")
    return "\n".join([head, *alternatives_lines(token["id"], token["top_ids"], token["top_tokens"], token["top_probs"])])


def _retracted_chip(token: dict) -> str:
    return chip_html(token["text"], 0.0, f"'{visible(token['text'])}' · retracted at this chunk: it had been "
                                         "committed, and the new hypothesis no longer has it", ("tok", "gone"))


def transcript_html(trace: Trace | None, chunk: int | None = None) -> str:
    """The transcript after chunk `chunk` (None: the latest)."""
    chunks = chunks_of(trace)
    if not chunks:
        return f'<div class="dl-tokens dl-speech">{tokens_css()}{_CSS}<div class="dl-empty">{esc(WAITING_AUDIO)}</div></div>'
    c = chunks[chunk] if chunk is not None and 0 <= chunk < len(chunks) else chunks[-1]
    hypothesis, num_committed = c.hypothesis, len(c.committed_ids)
    kept = num_committed - c.newly_committed  # committed before this chunk and still there
    chips = []
    for i, token in enumerate(hypothesis):
        if i == kept and c.retracted:
            chips += [_retracted_chip(r) for r in c.retracted]
        if i < num_committed:
            fresh = i >= kept
            chips.append(chip_html(token["text"], token["prob"], _tooltip(token, "committed at this chunk" if fresh
                                                                         else "committed"),
                                   ("tok", "committed", "new") if fresh else ("tok", "committed"), {"index": i}))
        else:
            chips.append(chip_html(token["text"], token["prob"], _tooltip(token, "unconfirmed: shown, not promised"),
                                   ("tok", "tail"), {"index": i}))
    if c.retracted and kept >= len(hypothesis):
        chips += [_retracted_chip(r) for r in c.retracted]
    key = ('<div class="dl-speech-key"><span>colour = the token\'s probability; hover for entropy and '
           'alternatives</span><span class="k tok committed" style="background:#cfe8cf">committed</span>'
           '<span class="k tok tail" style="border:1px dashed #8a8a8a;font-style:italic">unconfirmed</span>'
           '<span class="k tok gone" style="background:#fde2e1;text-decoration:line-through">retracted</span></div>')
    when = (f'<div class="dl-speech-when">after chunk {c.chunk + 1} · {c.audio_end_s:.1f} s heard'
            + (f" · {len(c.retracted)} token{'s' * (len(c.retracted) != 1)} retracted" if c.retracted else "")
            + (" · final" if c.final else "") + "</div>")
    return (f'<div class="dl-tokens dl-speech" data-chunk="{esc(c.chunk)}">{tokens_css()}{_CSS}{key}'
            f'<div class="dl-text">{"".join(chips)}</div>{when}</div>')


def committed_so_far(trace: Trace | None) -> list[dict]:
    """Each committed word {"word", "committed_at_s", "spoken_end_s", "latency_s", "matches"}: the finish event's,
    or (while the run goes) computed from the chunks as `transcribe` does at the end."""
    finish = finish_of(trace)
    if finish is not None:
        return list(finish.committed)
    chunks, start = chunks_of(trace), start_of(trace)
    texts: list[str] = []
    times: list[float] = []
    ids: list[int] = []
    for c in chunks:
        keep = 0
        while keep < min(len(ids), len(c.committed_ids)) and ids[keep] == c.committed_ids[keep]:
            keep += 1
        committed = c.hypothesis[:len(c.committed_ids)]
        times = times[:keep] + [c.audio_end_s] * (len(c.committed_ids) - keep)
        texts = [t["text"] for t in committed]
        ids = list(c.committed_ids)
    return committed_words(texts[:len(times)], times, start.words if start else None)


def word_timeline_figure(trace: Trace | None) -> go.Figure:
    """Each committed word: a bar where the reference says it was spoken, a dot when it was committed (the audio
    time heard by then), and the latency between; without reference times only the commit moments."""
    words, start = committed_so_far(trace), start_of(trace)
    if not words:
        return empty_figure(WAITING_AUDIO if start is None or not chunks_of(trace) else "no word committed yet",
                            title="When each word was spoken, and committed", height=320)
    limit = cap(NODES)
    shown = words[:limit]
    refs = {round(w["end"], 3): w for w in (start.words if start else [])}
    ys = [plotly_safe(f"{i + 1}. {w['word']}") for i, w in enumerate(shown)]
    fig = go.Figure()
    spoken_x, spoken_y = [], []
    for y, w in zip(ys, shown):
        ref = refs.get(w["spoken_end_s"]) if w["spoken_end_s"] is not None else None
        if ref is not None:
            spoken_x += [ref["start"], ref["end"], None]
            spoken_y += [y, y, None]
    if spoken_x:
        fig.add_trace(go.Scatter(x=spoken_x, y=spoken_y, mode="lines", line=dict(width=9, color="#9ecae1"),
                                 name="spoken", hoverinfo="skip"))
    gap_x, gap_y = [], []
    for y, w in zip(ys, shown):
        if w["spoken_end_s"] is not None:
            gap_x += [w["spoken_end_s"], w["committed_at_s"], None]
            gap_y += [y, y, None]
    if gap_x:
        fig.add_trace(go.Scatter(x=gap_x, y=gap_y, mode="lines", line=dict(width=1.5, color="#e4572e", dash="dot"),
                                 name="latency", hoverinfo="skip"))
    hover = [plotly_safe(f"'{w['word']}' committed at {w['committed_at_s']:.2f} s"
                         + (f", spoken until {w['spoken_end_s']:.2f} s: latency {w['latency_s']:+.2f} s"
                            if w["latency_s"] is not None else "")
                         + ("" if w["matches"] in (None, True) else " (not the reference word)")) for w in shown]
    fig.add_trace(go.Scatter(x=[w["committed_at_s"] for w in shown], y=ys, mode="markers", name="committed",
                             marker=dict(size=9, color=["#2a9d8f" if w["matches"] in (None, True) else "#e4572e"
                                                        for w in shown], line=dict(width=1, color="#333")),
                             hovertext=hover, hoverinfo="text"))
    fig.update_layout(template=TEMPLATE, height=max(320, min(1200, 110 + 22 * len(shown))),
                      xaxis_title="audio time (s)", margin=dict(l=10, r=10, t=80, b=40),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1),
                      hovermode="closest")
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=ys, automargin=True,
                     tickmode="array", tickvals=ys)
    if start is not None and start.audio_s:
        fig.update_xaxes(range=[0, max(start.audio_s, max(w["committed_at_s"] for w in shown)) + 0.3])
    return note_capped(fig, [f"showing the first {limit} of {len(words)} words"] if len(words) > limit else [])


def lengths_figure(trace: Trace | None) -> go.Figure:
    """Hypothesis and committed length (tokens) after each chunk; a red x where tokens were retracted (its size
    grows with how many), dotted lines where the buffer was cut (audio over 30 s)."""
    chunks = chunks_of(trace)
    if not chunks:
        return empty_figure(WAITING_AUDIO, title="Hypothesis and committed tokens per chunk", height=320)
    limit = cap(NODES)
    shown = chunks[-limit:]
    x = [c.audio_end_s for c in shown]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[len(c.hypothesis) for c in shown], mode="lines+markers", name="hypothesis",
                             line=dict(color="#8a8a8a", dash="dash"),
                             hovertext=[plotly_safe(c.hypothesis_text[-120:]) for c in shown], hoverinfo="text+y"))
    fig.add_trace(go.Scatter(x=x, y=[len(c.committed_ids) for c in shown], mode="lines+markers", name="committed",
                             line=dict(color="#2a9d8f", width=3), line_shape="hv",
                             hovertext=[plotly_safe(c.committed_text[-120:]) for c in shown], hoverinfo="text+y"))
    gone = [c for c in shown if c.retracted]
    if gone:
        fig.add_trace(go.Scatter(
            x=[c.audio_end_s for c in gone], y=[len(c.committed_ids) - c.newly_committed for c in gone],
            mode="markers", name="retracted", marker=dict(symbol="x", color="#c0392b",
                                                          size=[min(24, 8 + 2 * len(c.retracted)) for c in gone]),
            hovertext=[plotly_safe(f"{len(c.retracted)} retracted: " + "".join(r["text"] for r in c.retracted)[:120])
                       for c in gone], hoverinfo="text"))
    cuts = [c for c in shown if c.trimmed][:cap(MARKS)]
    if cuts:
        top = max(len(c.hypothesis) for c in shown) + 1
        xs, ys = [], []
        for c in cuts:
            xs += [c.audio_end_s, c.audio_end_s, None]
            ys += [0, top, None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="buffer cut (over 30 s)", hoverinfo="skip",
                                 line=dict(color="#6c5ce7", dash="dot", width=1)))
    fig.update_layout(template=TEMPLATE, height=320, xaxis_title="audio heard (s)", yaxis_title="tokens",
                      margin=dict(l=10, r=10, t=80, b=40),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1))
    return note_capped(fig, [f"showing the last {limit} of {len(chunks)} chunks"] if len(chunks) > limit else [])
