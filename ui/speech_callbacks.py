"""The Streaming speech tab's event handlers as plain functions: values in, {output name: value} out.

The audio comes from a preset sentence (espeak-ng speaks it on demand, `decoding.speech.audio.speak`, cached with
its word times), an uploaded file (converted by sox to 16 kHz mono; refused with a sentence when unreadable or
longer than `max_audio_s()`), or the browser's microphone (`mic_*`: Gradio's streaming audio input; each piece
goes to the policy as it arrives, and latencies are measured on the timeline of what has arrived).

`generate_run` streams a clip through one policy, or two side by side (interleaved chunk by chunk on the same
clip, in one worker thread that holds the model slot): each chunk is fed when the audio clock reaches its end
when "real time" is ticked, at once otherwise. A recording is the same kind of run: `mic_started` makes a
`LiveFeed` that Gradio's stream events fill (`mic_piece`), and `mic_run`, a model-bound event like Transcribe,
decodes each chunk as its audio arrives until the recording stops (`mic_stopped`).

Stop cancels whichever run is going: the event is closed, its worker stops within one model pass (Whisper asks
`should_stop` before each encoder and decoder pass) and the pump waits for it. `stop_run` then waits on the
run's `Run.done` (Stop's own event is not sequenced after the cancel), so what it shows is how the run ended.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from decoding.events import Trace
from decoding.speech.audio import read_audio, speak
from decoding.speech.events import SpeechFinished
from decoding.speech.policies import chunk_ends, stream_params, transcribe, transcribe_live
from decoding.speech.whisper import DEFAULT_WHISPER, SAMPLE_RATE, load_whisper
from decoding.trace_checks import Bound
from ui.exports import NO_OTHER_RUN, download
from ui.widgets import USER_ERRORS, failed_line, md_esc, user_error
from ui.wiring import as_int, load_replay
from ui.worker import STOP_WAIT_S, LimitReached, Status, limit_line, pump_views
from ui.speech_views import (NO_SECOND, OPENING_SECOND, collect_params, quick_views, stats_line, unavailable_policies,
                             views)
from visualizers.speech import chunks_of, finish_of, start_of

# A few sentences espeak-ng speaks on demand (the first is the opening clip); the last runs over Whisper's window
PRESETS = {
    "Market (one sentence, 3 s)": "She sells fresh bread at the market every morning.",
    "Directions (two sentences, 7 s)": "Turn left at the old church. The station is next to the bridge.",
    "Numbers and names (6 s)": "Doctor Patel will call you back at half past four on Tuesday.",
    "A paragraph over 30 s (the buffer is trimmed)": (
        "The train to the coast leaves every morning at seven. Please bring your ticket and a warm coat. "
        "The weather in the mountains changes quickly in the spring. My brother works at the hospital near the "
        "river. We will meet again next week to talk about the garden. The children played in the park until "
        "the sun went down. Our teacher reads a short story to the class every Friday."),
}
OPENING_PRESET = next(iter(PRESETS))
SOURCES = ("preset sentence", "uploaded file", "microphone")
AUDIO_S = Bound("DECODING_LAB_MAX_AUDIO_S", 120, "seconds")  # an uploaded or recorded clip


def max_audio_s() -> int:
    """The longest clip the tab takes, in seconds (DECODING_LAB_MAX_AUDIO_S, default 120)."""
    return AUDIO_S.value()


def read_audio_file(path) -> np.ndarray:
    """An uploaded file as 16 kHz mono float32 samples (`decoding.speech.audio.read_audio`), at most `max_audio_s()`
    long; ValueError naming the file (never the server's folder) and what is allowed."""
    return read_audio(path, max_s=max_audio_s(), limit_env=AUDIO_S.env)


def clip_of(source, preset, upload, reference) -> tuple[np.ndarray, list[dict] | None, str, str]:
    """(samples, reference word times or None, reference text, where it came from) for a preset or an upload."""
    if source == SOURCES[0]:
        if preset not in PRESETS:
            raise ValueError(f"`preset` must be one of {', '.join(PRESETS)}, got {preset!r}")
        clip = speak(PRESETS[preset])
        return clip.audio, clip.words, PRESETS[preset], f"preset: {preset}"
    if source == SOURCES[1]:
        if not upload:
            raise ValueError("no file uploaded: drop a WAV, FLAC or OGG file on “Audio file”, or pick a preset")
        return read_audio_file(upload), None, (reference or "").strip(), f"upload: {Path(upload).name}"
    raise ValueError(f"`source` must be one of {', '.join(SOURCES[:2])} for Transcribe (the microphone streams as "
                     f"you speak), got {source!r}")


def split_fields(fields: dict) -> tuple[dict, dict, dict]:
    """(shared fields, the first column's policy knobs, the second's) from the tab's values by name: the second
    column's own knobs come as "2:<policy>.<field>"."""
    shared = {k: as_int(v) for k, v in fields.items() if "." not in k}
    own = {k: v for k, v in fields.items() if "." in k and not k.startswith("2:")}
    return shared, own, {k[2:]: v for k, v in fields.items() if k.startswith("2:")}


def validate(policy, policy2, fields: dict) -> list[dict]:
    """Each column's parameters (one or two), checked before any model loads (ValueError naming the bad one)."""
    shared, own, own2 = split_fields(fields)
    configs = [collect_params(policy, shared, own)]
    if policy2 not in (None, "", NO_SECOND):
        configs.append(collect_params(policy2, shared, own2 or own))
    for config in configs:
        stream_params(config)
    return configs


def speech_work(audio, words, reference, source, configs: list[dict], realtime: bool):
    """A `work(emit, should_stop)` for `pump_views`: load Whisper, then run each config's `transcribe` on the same
    clip, interleaved chunk by chunk, emitting (column, event); paced to the audio clock with `realtime`."""

    def work(emit, should_stop):
        emit(Status(f"Loading {DEFAULT_WHISPER}…"))
        asr = load_whisper(say=lambda line: emit(Status(line)))  # a first use's download and assembly, as they go
        runs = [transcribe(asr, audio, params=c, words=words, reference=reference, source=source,
                           should_stop=should_stop) for c in configs]
        ends = chunk_ends(len(audio), stream_params(configs[0]).chunk_s)
        emit(Status("Streaming the audio" + (" in real time" if realtime else "") + "…"))
        clock = time.monotonic()

        def arrived(k: int) -> None:  # chunk k has arrived once the audio clock reaches its end
            while realtime and k < len(ends) and not should_stop() and time.monotonic() - clock < ends[k] / SAMPLE_RATE:
                time.sleep(0.02)

        interleave(runs, emit, arrived)

    return work


def interleave(runs: list[Iterator], emit: Callable, before_chunk: Callable[[int], None] = lambda k: None) -> None:
    """Step the runs (one per column, on the same audio) chunk by chunk, emitting (column, event) until each has
    finished. Stopped before it started (during the model load), a run still emits its start and its finish
    ("cancelled"): `transcribe` asks `should_stop` before any model call, so nothing more is computed."""
    for i, run in enumerate(runs):
        emit((i, next(run)))  # the starts
    live = dict(enumerate(runs))
    k = 0
    while live:  # each chunk (and then the finish) of every run
        before_chunk(k)
        for i, run in list(live.items()):
            event = next(run)
            emit((i, event))
            if isinstance(event, SpeechFinished):
                del live[i]
        k += 1


def _status(traces: list[Trace], status: str | None) -> str:
    chunks, start = chunks_of(traces[0]), start_of(traces[0])
    of = f" of {start.num_chunks}" if start is not None and start.num_chunks else ""  # a recording's count is open
    heard = f" {chunks[-1].audio_end_s:.1f} s heard, chunk {len(chunks)}{of}." if chunks else ""
    return md_esc(status or "Working…") + heard


def generate_run(source, preset, upload, reference, realtime, policy, policy2, **fields) -> Iterator[dict]:
    """Stream the clip through the policy (and the second one beside it) and show each chunk as it is decoded.

    `fields`: the shared parameters by name (`SHARED`) and every policy's own knobs ("<policy>.<field>", the
    second column's "2:<policy>.<field>")."""
    try:
        configs = validate(policy, policy2, fields)
    except USER_ERRORS as err:
        raise user_error(err) from None
    run = Run(len(configs))
    try:
        yield {"live": run, "status": "Preparing the audio…"}  # Stop finds this run from now on
        audio, words, ref, where = clip_of(source, preset, upload, reference)
    except BaseException as err:  # refused, or cancelled right away: the run has ended
        run.done.set()
        if isinstance(err, USER_ERRORS):
            yield {"status": failed_line(err)}  # in place of "Preparing the audio…" (sox missing, a bad file)
            raise user_error(err) from None
        raise
    yield from run.stream(speech_work(audio, words, ref, where, configs, bool(realtime)), "Starting…")


def finished_status(traces: list[Trace]) -> str:
    lines = [md_esc(stats_line(t)) for t in traces if t.events]
    stopped = any(f is None or f.stop_reason == "cancelled" for f in map(finish_of, traces))
    return f"**{'Stopped' if stopped else 'Finished'}**: " + " · ".join(lines) + "."


def stop_run(live, wait_s: float = STOP_WAIT_S + 5) -> dict:
    """After Stop cancelled the running event (a Transcribe run or a recording's): wait until that event has
    ended (its worker stops within one model call, and the pump waits for it), then show what was transcribed
    (the export buttons offer it). Stop's own event is not sequenced after the cancel, so it waits for the run."""
    if live is None:
        return {"status": "Nothing is running."}
    if isinstance(live, LiveFeed):
        live.close()  # the browser may still be recording: what it sends now goes nowhere
        if not live.stop():  # its run had not started (waiting for the model): it never will
            live.done.set()
    if not live.done.wait(wait_s):
        return {"status": f"Stopping: the run has not ended after {wait_s:g} s (a model call is still under way)."}
    finishes = [finish_of(t) for t in live.traces]
    if all(f is not None and f.stop_reason != "cancelled" for f in finishes):
        return {"status": "Nothing is running."}  # it had finished on its own: its views are shown already
    if not any(t.events for t in live.traces):
        return {"status": "**Stopped** before the run started (it was waiting for the model)."}
    trace, other = live.traces[0], live.traces[1] if len(live.traces) > 1 else None
    return views(trace, other) | {"status": finished_status(live.traces)}


def choose_chunk(chunk, trace, other) -> dict:
    """The chunk slider: both transcripts after that chunk (after the run; while it streams the latest is shown)."""
    if trace is None or start_of(trace) is None:
        return {}
    return views(trace, other, as_int(chunk) - 1 if chunk else None)


def shown_policy(prefix: str, policy) -> dict:
    from ui.speech_views import visibility

    return visibility(prefix, policy)


def second_shown(policy2) -> dict:
    from gradio import update

    on = policy2 not in (None, "", NO_SECOND)
    return {"column2": update(visible=on)}


def source_shown(source) -> dict:
    from gradio import update

    return {"preset": update(visible=source == SOURCES[0]), "upload": update(visible=source == SOURCES[1]),
            "mic": update(visible=source == SOURCES[2]), "reference": update(visible=source != SOURCES[0]),
            "generate": update(visible=source != SOURCES[2])}


def replay(path, trace, other) -> dict:
    """Load a saved speech trace into the first column (the second is cleared); anything else changes nothing."""
    got = load_replay(path, "Streaming speech", "speech chunks", lambda t: start_of(t) is not None,
                      lambda t: views(t, None), hint="replay it in the tab it came from.")
    if got is None:
        return {}
    loaded, shown, name = got
    return shown | {"trace": loaded, "other": None, "column2": _visible(False),
                    "status": f"**Replaying** {md_esc(name)}: {md_esc(stats_line(loaded))}."}


def _visible(on: bool):
    from gradio import update

    return update(visible=on)


def download_first(trace):
    return download(trace)


def download_second(other):
    return download(other, missing=NO_OTHER_RUN.replace("“Compare with”", "“Side by side with”").replace(
        "and Generate", "and Transcribe"))


def unavailable_note() -> str:
    reasons = unavailable_policies()
    return " ".join(f"`{name}`: {reason}." for name, reason in reasons.items())


# Runs, and the microphone -----------------------------------------------------------------------------
class Run:
    """One Transcribe or microphone run as Stop sees it (the tab's `live` state): the traces its worker fills
    (one per column), and `done` once its event has ended, however it ended (finished, stopped, failed)."""

    def __init__(self, columns: int):
        self.traces = [Trace() for _ in range(columns)]
        self.done = threading.Event()
        self.limit_s: float | None = None  # the app's time limit, once it stopped this run

    def stream(self, work, opening: str, line: Callable[[list[Trace], str | None], str] | None = None
               ) -> Iterator[dict]:
        """`work` through `pump_views` into the traces: every view and status update as it streams, then the
        final views. Stop closes this generator (and so the pump, which waits for the worker)."""
        traces, line = self.traces, line or _status
        other = traces[1] if len(traces) > 1 else None

        def take(item) -> bool:  # while the run streams, and what arrives after Stop
            if isinstance(item, tuple):
                traces[item[0]].append(item[1])
                return True
            if isinstance(item, LimitReached):
                self.limit_s = item.limit_s
            return False

        try:
            yield views(traces[0], other) | {"trace": traces[0], "other": other, "live": self, "status": opening}
            with contextlib.closing(pump_views(work, take, lambda: views(traces[0], other, live=True),
                                               lambda status, _: line(traces, status),
                                               quick=lambda _: quick_views(traces[0], other), on_late=take)) as ups:
                for update in ups:
                    yield update
            yield views(traces[0], other) | {"status": finished_status(traces) + limit_line(self.limit_s)}
        except USER_ERRORS as err:
            yield {"status": failed_line(err)}
            raise user_error(err) from None
        finally:
            self.done.set()


class LiveFeed(Run):
    """A recording: the pieces Gradio streams from the microphone (as 16 kHz mono) wait in a queue for the run's
    worker (`mic_run`, a model-bound event like Transcribe, so Stop and the model slot work the same way)."""

    def __init__(self, configs: list[dict], reference: str):
        super().__init__(len(configs))
        self.configs, self.reference = configs, reference
        self.pieces: queue.SimpleQueue = queue.SimpleQueue()
        self.received_s, self.closed = 0.0, False
        self.started = self.stopped = False  # whether `mic_run` began; whether Stop came (`begin`, `stop`)
        self.lock = threading.Lock()

    def begin(self) -> bool:
        """`mic_run` starts: False when Stop came first (the run then never starts)."""
        with self.lock:
            self.started = not self.stopped
            return self.started

    def stop(self) -> bool:
        """Stop came: True when the run had started (wait for it to end)."""
        with self.lock:
            self.stopped = True
            return self.started

    def feed(self, rate, samples) -> None:
        """A piece: checked from its header (rate, channels, length) before any conversion, then queued at 16 kHz."""
        if self.closed:
            return
        seconds = check_piece(rate, samples)
        if self.received_s + seconds > max_audio_s():
            self.close()
            raise AUDIO_S.refuse("the recording lasts", round(self.received_s + seconds, 1), max_audio_s())
        audio = to_16k_mono(rate, samples)
        self.received_s += len(audio) / SAMPLE_RATE
        self.pieces.put(audio)

    def close(self) -> None:
        """The recording ended (or was stopped): the worker takes what came so far as the end of the stream."""
        if not self.closed:
            self.closed = True
            self.pieces.put(None)

    def source(self, should_stop: Callable[[], bool]) -> Iterator[np.ndarray]:
        """The pieces as they arrive, until the recording ends or the run is asked to stop."""
        while True:
            try:
                piece = self.pieces.get(timeout=0.1)
            except queue.Empty:
                if should_stop():
                    return
                continue
            if piece is None:
                return
            yield piece

    def work(self, emit, should_stop) -> None:
        """`work` for `pump_views`: load Whisper, then each column's `transcribe_live` on the same pieces."""
        emit(Status(f"Loading {DEFAULT_WHISPER}…"))
        asr = load_whisper(say=lambda line: emit(Status(line)))  # a first use's download and assembly, as they go
        sources = itertools.tee(self.source(should_stop), len(self.configs))
        runs = [transcribe_live(asr, feed, params=c, reference=self.reference, source="microphone",
                                should_stop=should_stop) for feed, c in zip(sources, self.configs)]
        emit(Status("Listening: speak, the transcript follows each chunk…"))
        interleave(runs, emit)


MIC_RATES = (8_000, 192_000)  # sample rates a microphone piece may have, in Hz (browsers record at 16-48 kHz)
MIC_CHANNELS = 8  # the most channels a piece may have


def check_piece(rate, samples) -> float:
    """A microphone piece's length in seconds, from its header alone (rate, shape, type: nothing is converted); a
    ValueError naming what is wrong for a rate outside MIC_RATES (0 Hz included), more than MIC_CHANNELS channels,
    or samples that are not numbers."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or not MIC_RATES[0] <= rate <= MIC_RATES[1]:
        raise ValueError(f"a microphone piece's sample rate must be {MIC_RATES[0]:,}-{MIC_RATES[1]:,} Hz, got "
                         f"{str(rate)[:40]}")
    if not isinstance(samples, np.ndarray) or samples.ndim not in (1, 2) or samples.dtype.kind not in "if":
        raise ValueError("a microphone piece must be an array of samples (frames, or frames x channels), got "
                         f"{type(samples).__name__}")
    if samples.ndim == 2 and not 1 <= samples.shape[1] <= MIC_CHANNELS:
        raise ValueError(f"a microphone piece must have 1-{MIC_CHANNELS} channels, got {samples.shape[1]}")
    return samples.shape[0] / int(rate)


def to_16k_mono(rate: int, samples: np.ndarray) -> np.ndarray:
    """Gradio's (rate, int16 or float samples, maybe stereo) as 16 kHz mono float32 (linear interpolation)."""
    samples = np.asarray(samples)
    if samples.dtype.kind == "i":  # before mixing the channels down, which would make them floats
        samples = samples.astype(np.float32) / float(-np.iinfo(samples.dtype).min)
    samples = samples.astype(np.float32)
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    if rate != SAMPLE_RATE and len(samples):
        n = max(1, round(len(samples) * SAMPLE_RATE / rate))
        samples = np.interp(np.linspace(0, len(samples) - 1, n), np.arange(len(samples)), samples).astype(np.float32)
    return samples


def mic_started(reference, policy, policy2, **fields) -> dict:
    """Recording started: a feed for its pieces (the run itself is `mic_run`, which follows)."""
    try:
        configs = validate(policy, policy2, fields)
    except USER_ERRORS as err:
        raise user_error(err) from None
    live = LiveFeed(configs, (reference or "").strip())
    other = live.traces[1] if len(live.traces) > 1 else None
    return views(live.traces[0], other) | {"live": live, "trace": live.traces[0], "other": other,
                                           "status": "Listening: speak, the transcript follows each chunk…"}


def mic_run(live) -> Iterator[dict]:
    """The recording's run: the policies decode each chunk as its audio arrives, and the views follow; it ends
    with the final chunk after the recording stops (or at Stop)."""
    if not isinstance(live, LiveFeed) or live.done.is_set():
        return
    if not live.begin():
        live.done.set()
        return
    yield from live.stream(live.work, "Listening: speak, the transcript follows each chunk…",
                           lambda traces, status: _status(traces, status) + f" {live.received_s:.1f} s received.")


def mic_piece(piece, live) -> dict:
    """A piece of the recording arrived: it goes to the run (which shows the transcripts as it decodes)."""
    if isinstance(live, LiveFeed) and piece is not None:
        rate, samples = piece
        try:
            live.feed(rate, samples)
        except USER_ERRORS as err:
            raise user_error(err) from None
    return {}


def mic_stopped(live) -> dict:
    """Recording stopped: what came is the whole stream; the run decodes its last chunk and draws everything."""
    if isinstance(live, LiveFeed):
        live.close()
    return {}


def opening() -> dict:
    return {"source": SOURCES[0], "preset": OPENING_PRESET, "policy2": OPENING_SECOND}


