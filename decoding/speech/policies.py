"""Streaming policies: what to show, and what to promise, while the audio is still arriving.

Audio arrives in chunks of `chunk_s` seconds (simulated real time: after chunk k the policy has heard the
clip's first t_k seconds, and may not look further). After each chunk the policy runs Whisper on what it
has heard and decides which tokens are committed (shown as final). `transcribe` yields a `SpeechChunk` after
every chunk's model calls, so the views update as the run goes; a token that was committed and is withdrawn
later is retracted, and counted.

    redecode         the naive baseline: decode all the audio heard so far from scratch at every chunk and show
                     the whole hypothesis. Its words change as more audio comes (retractions); on the last chunk
                     it is exactly offline decoding of the whole clip (with the same `encode` reading).
    local-agreement  Whisper-Streaming's LocalAgreement-n (Macháček, Dabre and Bojar 2023, "Turning Whisper into
                     Real-Time Transcription System", arXiv 2307.14743): commit the longest prefix that the
                     last n hypotheses (n = 2 in the paper) agree on. Here the committed tokens are forced as the
                     decoder's prefix for the next chunk (whisper-streaming finds them again through word
                     timestamps), so a committed token is never withdrawn, by construction. The last chunk commits
                     the rest (the paper's flush at the end of the stream).
    careless         CarelessWhisper (Krichli, Raj and Keshet 2025, "CarelessWhisper: Turning Whisper into a Causal
                     Streaming Model", arXiv 2508.12301): a chunk-causal encoder (`decoding.speech.causal`) that
                     encodes only each new chunk against cached keys/values, fine-tuned with LoRA
                     (`decoding.speech.lora`, trained by `decoding.training.careless`), and the authors' greedy
                     streaming rule: the newest `lookback` tokens are re-scored with each chunk and dropped from the
                     first one that became less likely and lost the argmax; older tokens are committed. Unavailable
                     (it says so) until the trained LoRA ships in assets/whisper-careless-lora.

Audio longer than Whisper's 30-second window streams through a buffer (Whisper-Streaming's buffer trimming,
adapted): the model sees only the audio since the buffer's start, and the text committed before it goes to the
decoder as its previous-text prompt (`Whisper.decode(context_ids=...)`). The buffer is cut at the end of a
chunk in one of two ways (the chunk's event says which, `SpeechChunk.trimmed`):

    trim   once the buffer holds `trim_s` seconds or more, at the end of an earlier chunk whose whole hypothesis
           has now been committed (`Policy.settled`): the audio up to that moment is exactly the committed text,
           and what the model wrote after it belongs to the audio after it, so no word is cut in two.
           Whisper-Streaming cuts at the end of a committed segment, which it finds with Whisper's timestamps; this
           project's decoding writes no timestamps, so a chunk end whose hypothesis was confirmed word for word
           stands for that end;
    flush  when the next chunk would overflow the 30-second window and no such moment came: the policy commits
           its whole hypothesis, as at the end of a stream, and a new buffer starts (a word spoken across
           the cut may be written twice or lost; the retraction-free promise holds).

`redecode` has nothing it could trim at (it never settles: every word may still change), so on audio over
30 s it re-decodes a window that grows to 30 s, then flushes: its hypothesis becomes final and it starts over
on the next window with that text as context. It stays exactly offline decoding only for a clip within one
window.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from decoding import bibliography as bib
from decoding.contracts import never
from decoding.events import Event
from decoding.papers import Uncited
from decoding.params import Params, flat, from_values, own_params, param
from decoding.registry import Registry
from decoding.speech.events import SpeechChunk, SpeechFinished, SpeechStarted
from decoding.speech.latency import behind, committed_words, summary
from decoding.speech.whisper import SAMPLE_RATE, WINDOW_S, Stopped, TokenChoice, Whisper

POLICIES: Registry = Registry("policy", capabilities={"unavailable": ""})  # unavailable: why it cannot run yet


@dataclass(frozen=True)
class StreamParams(Params):
    policy: str = param("local-agreement", plugins=POLICIES, help="How tokens are committed while the audio arrives.")
    chunk_s: float = param(1.0, low=0.5, high=2.0, help="Seconds of audio that arrive at once (simulated real time).")
    max_new_tokens: int = param(128, low=1, high=224, help="Most text tokens decoded after each chunk.")
    top_k: int = param(5, low=1, high=20, help="Alternatives recorded for every token (shown on hover).")
    trim_s: float = param(15.0, low=5.0, high=28.0, help="Audio over 30 s: once the buffer holds this many seconds, "
                                                          "cut it where everything heard is committed.")
    encode: str = param("window", choices=("window", "heard"),
                        help="What Whisper's encoder reads at each chunk (redecode, local-agreement): the whole 30 s "
                             "window zero-padded, as in Whisper's training, or only the audio heard, rounded up to 5 s "
                             "(half the cost on a short buffer, but on long streams it wrote a loop at one stream's "
                             "end: docs/speech.md). careless has its own causal encoder.")
    own: Params | None = own_params()  # the chosen policy's own knobs (`local-agreement.agree`)


@dataclass
class Step:
    """What a policy did with the audio heard so far."""

    hypothesis: list[TokenChoice]  # the whole hypothesis, committed tokens first
    committed: list[TokenChoice]  # every token committed so far (a policy that retracts may change earlier ones)
    encoder_passes: int
    decoder_passes: int
    extra: dict = field(default_factory=dict)
    settled: int | None = None  # samples into the buffer up to which the audio is exactly the committed text


class Policy:
    """A streaming policy: `step` sees the audio heard so far (and whether it is all of it) and returns a Step."""

    def __init__(self, asr: Whisper, params: StreamParams):
        self.asr, self.params = asr, params
        self.context: list[TokenChoice] = []  # committed tokens whose audio was cut off the buffer
        self.should_stop: Callable[[], bool] = never  # asked before every model call (`_stream` sets the run's)

    def decode(self, heard: np.ndarray, prefix: list[TokenChoice] = ()):
        """Whisper on the buffer's audio, after the forced `prefix`, with the text before the buffer as context."""
        context = {"context_ids": [t.token_id for t in self.context]} if self.context else {}
        encoded = self.asr.encode(heard, should_stop=self.should_stop, heard=self.params.encode == "heard")
        decoded = self.asr.decode(encoded, [t.token_id for t in prefix],
                                  max_new_tokens=self.params.max_new_tokens, top_k=self.params.top_k,
                                  should_stop=self.should_stop, **context)
        return decoded

    def step(self, heard: np.ndarray, final: bool) -> Step:
        """`heard`: the buffer's audio (all of it heard so far until a cut; see the module's docstring)."""
        raise NotImplementedError

    def settled(self, step: Step) -> int | None:
        """Samples into the buffer before which the audio is exactly the committed text, so the buffer may be cut
        there (`step.settled`; never, by default: None)."""
        return step.settled

    def window_samples(self) -> int:
        """The most audio the buffer may hold before it is flushed: Whisper's 30 s window unless a policy says less."""
        return round(WINDOW_S * SAMPLE_RATE)

    def flushed(self, step: Step) -> Step:
        """`step` with its whole hypothesis committed (the window is full: as at the end of a stream)."""
        return Step(step.hypothesis, list(step.hypothesis), step.encoder_passes, step.decoder_passes,
                    step.extra | {"unconfirmed": []} if "unconfirmed" in step.extra else step.extra)

    def restart(self, step: Step) -> None:
        """The buffer was cut after `step`: what is committed becomes the context of the next buffer."""
        self.context = list(step.committed)


def common_prefix(*sequences: list) -> int:
    """Length of the longest prefix all `sequences` share (tokens compared by id when they are TokenChoices)."""
    keys = [[getattr(t, "token_id", t) for t in s] for s in sequences]
    n = min(map(len, keys), default=0)
    for i in range(n):
        if any(k[i] != keys[0][i] for k in keys[1:]):
            return i
    return n


class Redecode(Policy):
    def step(self, heard, final):
        decoded = self.decode(heard)
        hypothesis = self.context + decoded.tokens  # the context: earlier windows' final text (audio over 30 s)
        return Step(hypothesis, list(hypothesis), 1, decoded.forward_passes)


@POLICIES.register("redecode", help="decode everything heard so far at every chunk and show it all (the naive "
                                    "baseline: words change, retractions counted)",
                   papers=Uncited("the naive baseline streaming papers compare against; decoding is Whisper's own"))
def _redecode(asr, params):
    return Redecode(asr, params)


@dataclass(frozen=True)
class AgreementParams(Params):
    agree: int = param(2, low=2, high=4, help="How many consecutive hypotheses must agree on a token before it is "
                                              "committed (LocalAgreement-n; the paper's n is 2).")


class LocalAgreement(Policy):
    def __init__(self, asr, params):
        super().__init__(asr, params)
        self.committed: list[TokenChoice] = []
        self.recent: list[list[TokenChoice]] = []  # the last n-1 hypotheses' uncommitted tails
        self.last: tuple[list[int], int] | None = None  # the buffer's previous hypothesis (ids) and its length

    def step(self, heard, final):
        decoded = self.decode(heard, self.committed[len(self.context):])  # forced: what was committed in the buffer
        tail = decoded.tokens
        n = self.params.own.agree
        if final:
            agreed = len(tail)  # the stream has ended: commit what is left
        elif len(self.recent) == n - 1:
            agreed = common_prefix(tail, *self.recent)
        else:
            agreed = 0
        hypothesis = self.committed + tail
        self.committed = self.committed + tail[:agreed]
        self.recent = [r[agreed:] for r in self.recent[-(n - 2):]] if n > 2 else []
        self.recent.append(tail[agreed:])
        in_buffer = [t.token_id for t in self.committed[len(self.context):]]
        settled = self.last[1] if self.last is not None and self.last[0] == in_buffer else None
        self.last = ([t.token_id for t in hypothesis[len(self.context):]], len(heard))
        return Step(hypothesis, list(self.committed), 1, decoded.forward_passes,
                    {"unconfirmed": [t.token_id for t in tail[agreed:]]}, settled=settled)

    def restart(self, step):
        """The audio of everything committed is gone from the buffer: it becomes context, and nothing is forced.
        After a flush the unconfirmed tails are committed too; after a trim they stand for the audio kept."""
        super().restart(step)
        self.committed, self.last = list(step.committed), None
        if step.extra.get("unconfirmed") == [] or len(step.committed) == len(step.hypothesis):
            self.recent = []


@POLICIES.register("local-agreement", help="commit the longest prefix the last n hypotheses agree on "
                                           "(Whisper-Streaming's LocalAgreement-2); never retracts",
                   params=AgreementParams, papers=(bib.MACHACEK_2023,))
def _local_agreement(asr, params):
    return LocalAgreement(asr, params)


# ---------------------------------------------------------------- CarelessWhisper (decoding/speech/causal.py)

CARELESS_LORA = Path(__file__).resolve().parents[2] / "assets" / "whisper-careless-lora"  # the shipped LoRA


@dataclass(frozen=True)
class CarelessParams(Params):
    lookback: int = param(2, low=1, high=4, help="How many of the newest tokens stay open to revision when the next "
                                                 "chunk arrives (the authors' n_tokens_look_back, 2); older ones are "
                                                 "committed.")
    lora: bool = param(True, help="Use the trained LoRA (off: the causal encoder untrained, for comparison).")
    flush_s: float = param(0.5, low=0.0, high=2.0, help="Seconds of silence heard after the last chunk, so the causal "
                                                        "model hears the speech end (0: none).")
    window_s: float = param(30.0, low=2.0, high=30.0,
                            help="The longest stream the causal encoder hears before its text is committed and it starts "
                                 "afresh (its positions end at Whisper's 30 s window; less: shorter streams, as the "
                                 "shipped LoRA was trained on clips of 2-10 s).")


@functools.lru_cache(maxsize=4)
def careless_model(asr: Whisper, lora: bool):
    """Whisper with CarelessWhisper's LoRA merged into a copy of its weights (or `asr`'s own model, untrained)."""
    from decoding.speech.lora import WEIGHTS, merged_copy

    if not lora:
        return asr.model
    if not (CARELESS_LORA / WEIGHTS).exists():
        raise ValueError(f"`careless.lora` needs the trained LoRA in {CARELESS_LORA}, which is missing; set "
                         f"careless.lora=false for the untrained causal encoder")
    return merged_copy(asr.model, CARELESS_LORA)


class Careless(Policy):
    """The causal encoder encodes only each new chunk (cached keys/values); the decoder re-scores the hypothesis,
    drops its newest tokens from the first one that became less likely and is no longer the argmax (only the last
    `lookback` are examined), and decodes on. Tokens older than `lookback` are committed, never retracted."""

    def __init__(self, asr, params, model=None):
        from decoding.speech.causal import CausalEncoder

        super().__init__(asr, params)
        self.model = model if model is not None else careless_model(asr, params.own.lora)
        self.stream = CausalEncoder(self.model, asr.features.mel_filters).stream()
        self.tokens: list[TokenChoice] = []
        self.committed = 0

    def step(self, heard, final):
        from decoding.speech.causal import careless_decode

        if final and self.params.own.flush_s > 0:  # the stream has ended: let the causal model hear silence after it
            heard = np.concatenate([heard, np.zeros(round(self.params.own.flush_s * SAMPLE_RATE), np.float32)])
        states = self.stream.extend(heard)
        if states is None:  # under 20 ms heard: no frame is ready
            return Step([], [], 0, 0, {"new_frames": 0, "unconfirmed": []})
        self.tokens, kept, passes = careless_decode(self.asr, self.model, states, self.tokens, self.committed,
                                                    max_new_tokens=self.params.max_new_tokens, top_k=self.params.top_k)
        lookback = self.params.own.lookback
        self.committed = len(self.tokens) if final else max(self.committed, len(self.tokens) - lookback)
        return Step(self.context + self.tokens, self.context + self.tokens[:self.committed], 1, passes,
                    {"new_frames": self.stream.new_frames, "kept": kept,
                     "unconfirmed": [t.token_id for t in self.tokens[self.committed:]]})


    def window_samples(self) -> int:
        return round(self.params.own.window_s * SAMPLE_RATE)

    def restart(self, step: Step) -> None:
        """Audio over `window_s`: the buffer was flushed (a chunk end where everything heard is committed never comes to a
        policy that commits by look-back, so it is never trimmed). Its text stays committed; the causal encoder starts
        a new stream on the next buffer, as its positions end at Whisper's 30 s (the decoder gets no previous text)."""
        from decoding.speech.causal import CausalEncoder

        super().restart(step)
        self.stream = CausalEncoder(self.model, self.asr.features.mel_filters).stream()
        self.tokens, self.committed = [], 0


def _careless_unavailable() -> str:
    from decoding.speech.lora import WEIGHTS

    if (CARELESS_LORA / WEIGHTS).exists():
        return ""
    return ("policy `careless` needs CarelessWhisper's causal encoder fine-tuned with LoRA (assets/whisper-careless-"
            "lora), which this project has not trained yet (python -m decoding.training.careless trains it); choose "
            "local-agreement or redecode")


@POLICIES.register("careless", help="CarelessWhisper: a chunk-causal encoder (LoRA) that encodes only the new audio, "
                                    "and its commit rule (the newest tokens stay open to revision)",
                   params=CarelessParams, papers=(bib.KRICHLI_2025, bib.HU_2021), unavailable=_careless_unavailable())
def _careless(asr, params):
    return Careless(asr, params)


def stream_params(values: dict | StreamParams | None) -> StreamParams:
    """The run's parameters from a dict (CLI strings converted; ValueError naming a bad one, or saying why the
    chosen policy cannot run yet), checked before any model is loaded."""
    config = values if isinstance(values, StreamParams) else from_values(StreamParams, values, where="transcribe")
    reason = POLICIES.capability(config.policy, "unavailable")
    if reason:
        raise ValueError(reason)
    return config


def chunk_ends(num_samples: int, chunk_s: float) -> list[int]:
    """The sample index at which each chunk's audio ends; the last chunk may be shorter."""
    step = round(chunk_s * SAMPLE_RATE)
    return list(range(step, num_samples, step)) + [num_samples]


def transcribe(asr: Whisper, audio: np.ndarray, *, params: dict | StreamParams | None = None,
               words: list[dict] | None = None, reference: str = "", source: str = "",
               should_stop: Callable[[], bool] = never) -> Iterator[Event]:
    """Stream `audio` (16 kHz mono float32; over 30 s through a trimmed buffer, see the module's docstring) through
    a policy: a SpeechStarted, a SpeechChunk after each chunk, a SpeechFinished with the final transcript and
    every committed word's latency. `words` are the reference word times ({"word", "start", "end"}, e.g.
    `audio.speak`'s); without them latencies are None. `source` says where the audio came from (the trace keeps it)."""
    config = stream_params(params)
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1 or not len(audio):
        raise ValueError(f"`audio` must be 16 kHz mono samples, more than none, got {len(audio) / SAMPLE_RATE:.2f} s "
                         f"of shape {audio.shape}")
    yield from _stream(asr, config, iter([audio]), len(audio), words, reference, source, should_stop)


def transcribe_live(asr: Whisper, pieces: Iterable[np.ndarray], *, params: dict | StreamParams | None = None,
                    words: list[dict] | None = None, reference: str = "", source: str = "",
                    should_stop: Callable[[], bool] = never) -> Iterator[Event]:
    """`transcribe` for audio that is still arriving (a microphone): `pieces` yields 16 kHz mono float32 arrays as
    they arrive, of any length; a chunk is decoded once `chunk_s` more seconds have arrived, and the end of `pieces`
    is the end of the stream (its rest is the final chunk). The length is unknown at the start: the start event
    says 0 s and 0 chunks. Latencies are on the timeline of what had arrived."""
    config = stream_params(params)
    yield from _stream(asr, config, iter(pieces), None, words, reference, source, should_stop)


def _stream(asr, config: StreamParams, pieces: Iterator[np.ndarray], total: int | None, words, reference: str,
            source: str, should_stop: Callable[[], bool]) -> Iterator[Event]:
    """The chunk loop of `transcribe` (`total` samples known) and `transcribe_live` (`total` None)."""
    policy = POLICIES.get(config.policy)(asr, config)
    policy.should_stop = should_stop
    size = round(config.chunk_s * SAMPLE_RATE)
    yield SpeechStarted(model=asr.name, policy=config.policy, params=flat(config),
                        audio_s=(total or 0) / SAMPLE_RATE, num_chunks=len(chunk_ends(total, config.chunk_s)) if total
                        else 0, words=list(words or []), reference=reference, source=source)
    window, trim = policy.window_samples(), round(config.trim_s * SAMPLE_RATE)
    audio, ended = np.zeros(0, np.float32), False  # every sample that has arrived; whether the source has ended
    start = heard = 0  # the sample where the buffer the policy sees begins; the end of the last chunk decoded
    committed: list[TokenChoice] = []
    times: list[float] = []  # the audio time each committed token was committed at
    retracted = retraction_events = encoder_passes = decoder_passes = 0
    cpu, stop_reason, k = 0.0, "end", 0
    free_at = lag = most_behind = 0.0  # live audio: when this policy would be free, alone on this machine
    while True:
        if should_stop():  # asked once before each chunk's model calls
            stop_reason = "cancelled"
            break
        while not ended and len(audio) < heard + size:  # wait for the next chunk's audio (a live source blocks)
            piece = next(pieces, None)
            if piece is None:
                ended = True
            else:
                audio = np.concatenate([audio, np.asarray(piece, dtype=np.float32).reshape(-1)])
        end = min(heard + size, len(audio))
        final = ended and end == len(audio) or (total is not None and end == total)
        if end == heard and not final or (end == heard == 0):
            break  # nothing arrived at all
        started = time.process_time()
        try:
            step = policy.step(audio[start:end], final=final)
        except Stopped:  # Stop came between the chunk's model calls: the chunk is dropped, its time counted
            cpu += time.process_time() - started
            stop_reason = "cancelled"
            break
        cut, settled = "", policy.settled(step)
        following = end + size if total is None else min(end + size, total)  # where the next chunk will end
        if not final and following - start > window:  # the next chunk would overflow Whisper's window
            cut, settled, step = "flush", end - start, policy.flushed(step)
        elif not final and end - start >= trim and settled is not None:
            cut = "trim"
        spent = time.process_time() - started
        keep = common_prefix(committed, step.committed)
        withdrawn = committed[keep:]
        now = end / SAMPLE_RATE
        free_at = behind(free_at, now, spent)
        lag = free_at - now
        most_behind = max(most_behind, lag)
        times = times[:keep] + [now] * (len(step.committed) - keep)
        committed = list(step.committed)
        retracted += len(withdrawn)
        retraction_events += bool(withdrawn)
        cpu += spent
        encoder_passes += step.encoder_passes
        decoder_passes += step.decoder_passes
        ids = [t.token_id for t in committed]
        yield SpeechChunk(chunk=k, audio_end_s=now, final=final,
                          hypothesis=[t.to_dict() for t in step.hypothesis],
                          hypothesis_text=asr.text([t.token_id for t in step.hypothesis]), committed_ids=ids,
                          committed_text=asr.text(ids), newly_committed=len(committed) - keep,
                          retracted=[{"id": t.token_id, "text": t.text} for t in withdrawn],
                          encoder_passes=step.encoder_passes, decoder_passes=step.decoder_passes, cpu_s=spent,
                          extra=step.extra, buffer_start_s=start / SAMPLE_RATE, trimmed=cut, behind_s=lag)
        heard, k = end, k + 1
        if cut:
            policy.restart(step)
            start += settled
        if final:
            break
    text = asr.text([t.token_id for t in committed]).strip()
    done = committed_words([t.text for t in committed], times, words)
    yield SpeechFinished(text=text, committed=done, stop_reason=stop_reason,
                         stats=summary(done, reference=reference, final_text=text, audio_s=heard / SAMPLE_RATE,
                                       retracted=retracted, retraction_events=retraction_events, cpu_s=cpu,
                                       encoder_passes=encoder_passes, decoder_passes=decoder_passes,
                                       behind_s=lag, max_behind_s=most_behind))
