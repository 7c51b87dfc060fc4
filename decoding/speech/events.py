"""The events of a streaming transcription: one start, one per chunk of audio, one finish (JSON-serialisable).

A hypothesis token is a dict {"id", "text", "prob", "entropy", "top_ids", "top_tokens", "top_probs"}: the
distribution it was chosen from (suppressed tokens removed), as the Playground shows a token's entropy and
alternatives. A committed word is a dict {"word", "committed_at_s", "spoken_end_s", "latency_s", "matches"}
(`decoding.speech.latency`).

The three kinds register with the core's trace loader (`decoding.events.register_events`), so a saved run loads
back with every field checked against the annotations below (the TypedDicts are the records inside the lists),
and `speech_checks` checks what types cannot say (each hypothesis token's alternatives as long as their
probabilities, the committed tokens a prefix of the hypothesis, chunks in order on the audio timeline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, ClassVar, TypedDict

from decoding.events import Count, Event, Nats, Prob, Seconds, Trace, register_events
from decoding.schema import Range, SchemaError


class SpeechToken(TypedDict):
    """One hypothesis token and the distribution it was chosen from (`whisper.TokenChoice.to_dict`)."""

    id: Count
    text: str
    prob: Prob
    entropy: Nats
    top_ids: list[Count]
    top_tokens: list[str]
    top_probs: list[Prob]


class ReferenceWord(TypedDict):
    word: str
    start: Seconds
    end: Seconds


class CommittedWord(TypedDict):
    word: str
    committed_at_s: Seconds
    spoken_end_s: Seconds | None
    latency_s: float | None  # may be negative: committed before the reference word's end (Whisper guessed it)
    matches: bool | None


class SpeechStats(TypedDict, total=False):
    """A run's statistics (`decoding.speech.latency.summary`)."""

    wer: Annotated[float, Range(0)] | None
    mean_latency_s: float | None
    p95_latency_s: float | None
    committed_words: Count
    retracted_tokens: Count
    retraction_events: Count
    retractions_per_minute: Annotated[float, Range(0)] | None
    audio_s: Seconds
    cpu_s: Seconds
    cpu_s_per_audio_s: Annotated[float, Range(0)] | None
    behind_s: Seconds  # live audio: how far behind it the last chunk was finished (0: kept up)
    max_behind_s: Seconds
    encoder_passes: Count
    decoder_passes: Count


class Retracted(TypedDict):
    id: Count
    text: str


@dataclass(frozen=True)
class SpeechStarted(Event):
    kind: ClassVar[str] = "speech_start"
    opens_run: ClassVar[bool] = True
    describes: ClassVar[str] = "a streaming speech run (replay it in the Streaming speech tab)"
    model: str
    policy: str
    params: dict  # the flat parameters (`decoding.params.flat`), the policy's own as "<policy>.<field>"
    audio_s: Seconds  # the clip's length
    num_chunks: Count
    words: list[ReferenceWord] = field(default_factory=list)  # the reference words when known
    reference: str = ""  # the reference transcript when known
    source: str = ""  # where the audio came from: "preset: …", "upload: …", "microphone" (the tab), "" (CLI)


@dataclass(frozen=True)
class SpeechChunk(Event):
    """What the policy did once chunk `chunk` arrived: the audio heard so far ends at `audio_end_s`."""

    kind: ClassVar[str] = "speech_chunk"
    chunk: Count  # 0-based
    audio_end_s: Seconds  # the audio timeline: everything before this moment has been heard
    final: bool  # the last chunk (the policy commits what it has)
    hypothesis: list[SpeechToken]  # the tokens the model wrote for the audio so far (committed ones first)
    hypothesis_text: str
    committed_ids: list[Count]  # every committed token so far, in order
    committed_text: str
    newly_committed: Count  # how many of committed_ids this chunk committed
    retracted: list[Retracted]  # tokens committed before and withdrawn now
    encoder_passes: Count
    decoder_passes: Count
    cpu_s: Seconds  # process time of this chunk's model calls and decisions
    extra: dict = field(default_factory=dict)  # policy state (local agreement: the tokens still unconfirmed)
    buffer_start_s: Seconds = 0.0  # where the audio the model saw begins (> 0 once the buffer was trimmed)
    trimmed: str = ""  # how the buffer was cut after this chunk: "" (not), "trim" (at an earlier chunk's end whose
    #                    hypothesis is all committed now) or "flush" (the window was full); the next chunk's
    #                    `buffer_start_s` says where
    behind_s: Seconds = 0.0  # live audio: how long after this chunk arrived the policy would finish it, had it run
    #                          alone on this machine (its CPU time queued behind its earlier chunks; 0: it keeps up)


@dataclass(frozen=True)
class SpeechFinished(Event):
    kind: ClassVar[str] = "speech_finish"
    closes_run: ClassVar[bool] = True
    text: str  # the final transcript: what was committed by the end
    committed: list[CommittedWord]  # each committed word with its latency
    stop_reason: str  # "end" (all audio heard) or "cancelled"
    stats: SpeechStats  # `decoding.speech.latency.summary`


def _chunk(checker, e: SpeechChunk, previous: SpeechChunk | None) -> None:
    for i, token in enumerate(e.hypothesis):
        if not len(token["top_ids"]) == len(token["top_tokens"]) == len(token["top_probs"]):
            raise SchemaError(f"hypothesis[{i}].top_probs", None, "as long as `top_ids` and `top_tokens`",
                              got=f"{len(token['top_ids'])}, {len(token['top_tokens'])} and "
                                  f"{len(token['top_probs'])} items")
    if e.newly_committed > len(e.committed_ids):
        raise SchemaError("newly_committed", e.newly_committed, f"at most len(committed_ids) = {len(e.committed_ids)}")
    if e.buffer_start_s > e.audio_end_s:
        raise SchemaError("buffer_start_s", e.buffer_start_s, f"at most `audio_end_s` ({e.audio_end_s})")
    if previous is not None and (e.chunk != previous.chunk + 1 or e.audio_end_s < previous.audio_end_s):
        raise SchemaError("chunk", e.chunk, f"chunk {previous.chunk + 1}, heard after {previous.audio_end_s} s "
                                            "(chunks come in order)")
    if e.trimmed not in ("", "trim", "flush"):
        raise SchemaError("trimmed", e.trimmed, "one of '', 'trim', 'flush'")


def speech_stats(trace: Trace) -> dict:
    """A speech trace's statistics: the finish event's (`latency.summary`) with its stop reason, or while it
    runs what the chunks so far say."""
    finish = next((e for e in reversed(trace.events) if isinstance(e, SpeechFinished)), None)
    if finish is not None:
        return dict(finish.stats) | {"stop_reason": finish.stop_reason}
    chunks = [e for e in trace.events if isinstance(e, SpeechChunk)]
    return {"chunks": len(chunks), "audio_s": chunks[-1].audio_end_s if chunks else 0.0,
            "retracted_tokens": sum(len(c.retracted) for c in chunks),
            "cpu_s": round(sum(c.cpu_s for c in chunks), 3), "stop_reason": "running"}


register_events(SpeechStarted, SpeechChunk, SpeechFinished, stats=speech_stats, checks={"speech_chunk": _chunk})
