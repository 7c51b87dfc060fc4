"""The Streaming speech tab's event handlers as plain functions: values in, {output name: value} out.

The audio comes from a preset sentence (espeak-ng speaks it on demand, `decoding.speech.audio.speak`, cached with
its word times), an uploaded file (converted by sox to 16 kHz mono; refused with a sentence when unreadable or
longer than `max_audio_s()`), or the browser's microphone (`mic_*`: Gradio's streaming audio input; each piece
goes to the policy as it arrives, and latencies are measured on the timeline of what has arrived).

`generate_run` streams a clip through one policy, or two side by side (interleaved chunk by chunk on the same
clip, in one worker thread that holds the model slot): each chunk is fed when the audio clock reaches its end
when "real time" is ticked, at once otherwise. Closing it (Stop) stops the computation before the next chunk.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from decoding.events import Trace
from decoding.speech.audio import read_wav, speak
from decoding.speech.events import SpeechFinished
from decoding.speech.policies import chunk_ends, stream_params, transcribe, transcribe_live
from decoding.speech.whisper import DEFAULT_WHISPER, SAMPLE_RATE, load_whisper
from decoding.trace_checks import Bound
from ui.exports import NO_OTHER_RUN, download
from ui.widgets import USER_ERRORS, md_esc, user_error
from ui.wiring import as_int, load_replay
from ui.worker import Status, pump_views
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
    """An uploaded file as 16 kHz mono float32 samples, converted by sox (WAV, FLAC, OGG; MP3 where sox reads it);
    ValueError naming the file and what is allowed for one it cannot read or one over `max_audio_s()`."""
    name = Path(path).name
    try:
        info = subprocess.run(["sox", "--i", "-D", str(path)], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise ValueError("reading an uploaded file needs Debian's sox: apt-get install sox") from None
    if info.returncode != 0:
        why = (info.stderr.strip().splitlines() or ["unknown format"])[-1].removeprefix("sox FAIL formats: ")
        raise ValueError(f"`audio` {name} cannot be read ({why}); give a WAV, FLAC or OGG file (MP3 needs sox's "
                         f"MP3 support: apt-get install libsox-fmt-mp3)")
    seconds = float(info.stdout.strip() or 0)
    if seconds > max_audio_s():
        raise AUDIO_S.refuse(f"`audio` {name} lasts", round(seconds, 1), max_audio_s())
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "16k.wav"
        done = subprocess.run(["sox", str(path), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(target)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ValueError(f"`audio` {name} cannot be converted to 16 kHz mono: {done.stderr.strip()[-200:]}")
        audio = read_wav(target)
    if not len(audio):
        raise ValueError(f"`audio` {name} holds no samples")
    return audio


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
        asr = load_whisper()
        if should_stop():
            return
        runs = [transcribe(asr, audio, params=c, words=words, reference=reference, source=source,
                           should_stop=should_stop) for c in configs]
        ends = chunk_ends(len(audio), stream_params(configs[0]).chunk_s)
        emit(Status("Streaming the audio" + (" in real time" if realtime else "") + "…"))
        clock = time.monotonic()
        for i, run in enumerate(runs):
            emit((i, next(run)))  # the starts
        live = dict(enumerate(runs))
        for k in range(len(ends) + 1):  # each chunk (and then the finish) of every run
            if realtime and k < len(ends):  # chunk k has arrived once the audio clock reaches its end
                while not should_stop() and time.monotonic() - clock < ends[k] / SAMPLE_RATE:
                    time.sleep(0.02)
            for i, run in list(live.items()):
                event = next(run)
                emit((i, event))
                if isinstance(event, SpeechFinished):
                    del live[i]
            if not live:
                return

    return work


def _status(traces: list[Trace], status: str | None) -> str:
    chunks = chunks_of(traces[0])
    heard = f" {chunks[-1].audio_end_s:.1f} s heard, chunk {len(chunks)} of {start_of(traces[0]).num_chunks}." \
        if chunks else ""
    return md_esc(status or "Working…") + heard


def generate_run(source, preset, upload, reference, realtime, policy, policy2, **fields) -> Iterator[dict]:
    """Stream the clip through the policy (and the second one beside it) and show each chunk as it is decoded.

    `fields`: the shared parameters by name (`SHARED`) and every policy's own knobs ("<policy>.<field>", the
    second column's "2:<policy>.<field>")."""
    try:
        configs = validate(policy, policy2, fields)
        audio, words, ref, where = clip_of(source, preset, upload, reference)
    except USER_ERRORS as err:
        raise user_error(err) from None
    traces = [Trace() for _ in configs]
    other = traces[1] if len(traces) > 1 else None
    yield views(traces[0], other) | {"trace": traces[0], "other": other, "status": "Starting…"}

    def take(item) -> bool:
        if isinstance(item, tuple):
            traces[item[0]].append(item[1])
            return True
        return False

    work = speech_work(audio, words, ref, where, configs, bool(realtime))
    try:
        with contextlib.closing(pump_views(work, take, lambda: views(traces[0], other, live=True),
                                           lambda status, _: _status(traces, status),
                                           quick=lambda _: quick_views(traces[0], other), on_late=take)) as updates:
            for update in updates:
                yield update
    except USER_ERRORS as err:
        raise user_error(err) from None
    yield views(traces[0], other) | {"status": finished_status(traces)}


def finished_status(traces: list[Trace]) -> str:
    lines = [md_esc(stats_line(t)) for t in traces if t.events]
    stopped = any(f is not None and f.stop_reason == "cancelled" for f in map(finish_of, traces))
    return f"**{'Stopped' if stopped else 'Finished'}**: " + " · ".join(lines) + "."


def stop_run(trace, other, wait_s: float = 3.0) -> dict:
    """After Stop cancelled the running event: show what was transcribed (the export buttons offer it)."""
    if trace is None:
        return {"status": "Nothing is running."}
    deadline = time.monotonic() + wait_s
    while finish_of(trace) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if finish_of(trace) is not None and finish_of(trace).stop_reason != "cancelled" and (
            other is None or finish_of(other) is not None):
        return {"status": "Nothing is running."}
    return views(trace, other) | {"status": finished_status([t for t in (trace, other) if t is not None])}


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


# The microphone ---------------------------------------------------------------------------------------
class LiveRun:
    """A microphone run: the pieces Gradio streams go into a queue that `transcribe_live` reads in a worker thread
    (which holds the model slot); each stream event shows what the trace holds by then."""

    def __init__(self, configs: list[dict], reference: str):
        self.pieces: queue.SimpleQueue = queue.SimpleQueue()
        self.traces = [Trace() for _ in configs]
        self.stop, self.error = threading.Event(), None
        self.received_s = 0.0
        self.thread = threading.Thread(target=self._run, args=(configs, reference), daemon=True,
                                       name="decoding-run")
        self.thread.start()

    def _run(self, configs, reference):
        from ui.worker import model_slot

        try:
            with model_slot(self.stop.is_set) as held:
                if not held:
                    return
                asr = load_whisper()
                feeds = [queue.SimpleQueue() for _ in configs]
                runs = [transcribe_live(asr, _drain(f), params=c, reference=reference, source="microphone",
                                        should_stop=self.stop.is_set) for f, c in zip(feeds, configs)]
                threads = [threading.Thread(target=self._consume, args=(run, t), daemon=True)
                           for run, t in zip(runs, self.traces)]
                for t in threads:
                    t.start()
                while True:
                    piece = self.pieces.get()
                    for f in feeds:
                        f.put(piece)
                    if piece is None:
                        break
                for t in threads:
                    t.join()
        except Exception as err:  # noqa: BLE001 - shown by the next stream event
            self.error = err

    @staticmethod
    def _consume(run, trace):
        for event in run:
            trace.append(event)

    def feed(self, rate: int, samples: np.ndarray) -> None:
        audio = to_16k_mono(rate, samples)
        self.received_s += len(audio) / SAMPLE_RATE
        if self.received_s > max_audio_s():
            self.close()
            raise AUDIO_S.refuse("the recording lasts", round(self.received_s, 1), max_audio_s())
        self.pieces.put(audio)

    def close(self) -> None:
        self.pieces.put(None)


def _drain(feed: queue.SimpleQueue):
    while (piece := feed.get()) is not None:
        yield piece


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
    """Recording started: a live run that waits for the microphone's pieces."""
    try:
        configs = validate(policy, policy2, fields)
    except USER_ERRORS as err:
        raise user_error(err) from None
    live = LiveRun(configs, (reference or "").strip())
    other = live.traces[1] if len(live.traces) > 1 else None
    return views(live.traces[0], other) | {"live": live, "trace": live.traces[0], "other": other,
                                           "status": "Listening: speak, the transcript follows each chunk…"}


def mic_piece(piece, live) -> dict:
    """A piece of the recording arrived: feed it, show the transcripts so far."""
    if live is None or piece is None:
        return {}
    rate, samples = piece
    try:
        live.feed(rate, samples)
    except USER_ERRORS as err:
        raise user_error(err) from None
    other = live.traces[1] if len(live.traces) > 1 else None
    return quick_views(live.traces[0], other) | {"status": f"Listening: {live.received_s:.1f} s received."}


def mic_stopped(live, wait_s: float = 60.0) -> dict:
    """Recording stopped: the rest is the final chunk; wait for the runs to finish and draw everything."""
    if live is None:
        return {}
    live.close()
    live.thread.join(wait_s)
    if live.error is not None:
        raise user_error(live.error) if isinstance(live.error, USER_ERRORS) else live.error
    other = live.traces[1] if len(live.traces) > 1 else None
    return views(live.traces[0], other) | {"live": None, "status": finished_status(live.traces)}


def opening() -> dict:
    return {"source": SOURCES[0], "preset": OPENING_PRESET, "policy2": OPENING_SECOND}


