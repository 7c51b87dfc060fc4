"""The events of a streaming transcription: one start, one per chunk of audio, one finish (JSON-serialisable).

A hypothesis token is a dict {"id", "text", "prob", "entropy", "top_ids", "top_tokens", "top_probs"}: the
distribution it was chosen from (suppressed tokens removed), as the Playground shows a token's entropy and
alternatives. A committed word is a dict {"word", "committed_at_s", "spoken_end_s", "latency_s", "matches"}
(`decoding.speech.latency`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from decoding.events import Event


@dataclass(frozen=True)
class SpeechStarted(Event):
    kind: ClassVar[str] = "speech_start"
    model: str
    policy: str
    params: dict  # the flat parameters (`decoding.params.flat`), the policy's own as "<policy>.<field>"
    audio_s: float  # the clip's length
    num_chunks: int
    words: list[dict] = field(default_factory=list)  # the reference words {"word", "start", "end"} when known
    reference: str = ""  # the reference transcript when known


@dataclass(frozen=True)
class SpeechChunk(Event):
    """What the policy did once chunk `chunk` arrived: the audio heard so far ends at `audio_end_s`."""

    kind: ClassVar[str] = "speech_chunk"
    chunk: int  # 0-based
    audio_end_s: float  # the audio timeline: everything before this moment has been heard
    final: bool  # the last chunk (the policy commits what it has)
    hypothesis: list[dict]  # the tokens the model wrote for the audio so far (committed ones first)
    hypothesis_text: str
    committed_ids: list[int]  # every committed token so far, in order
    committed_text: str
    newly_committed: int  # how many of committed_ids this chunk committed
    retracted: list[dict]  # tokens committed before and withdrawn now: {"id", "text"}
    encoder_passes: int
    decoder_passes: int
    cpu_s: float  # process time of this chunk's model calls and decisions
    extra: dict = field(default_factory=dict)  # policy state (local agreement: the tokens still unconfirmed)


@dataclass(frozen=True)
class SpeechFinished(Event):
    kind: ClassVar[str] = "speech_finish"
    text: str  # the final transcript: what was committed by the end
    committed: list[dict]  # each committed word with its latency
    stop_reason: str  # "end" (all audio heard) or "cancelled"
    stats: dict  # `decoding.speech.latency.summary`
