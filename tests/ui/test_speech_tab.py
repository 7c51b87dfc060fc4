"""The Streaming speech tab's callbacks and views without a browser or Whisper: audio inputs refused with a
sentence, parameters from the tab's knobs, the views of a scripted run, its export and replay (and another tab
refusing it by name); the microphone's run and Stop (for a recording, before a run started, during the model load)
with a scripted recogniser."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import gradio as gr
import numpy as np
import pytest

from decoding.events import Trace
from decoding.speech.audio import write_wav
from decoding.speech.policies import transcribe
from decoding.speech.whisper import SAMPLE_RATE
from ui import diffusion_callbacks
from ui import speech_callbacks as cb
from ui.speech_views import collect_params, views

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speech"))
from test_policies import SCRIPT, WORDS, Scripted

FIELDS = {"chunk_s": 1.0, "max_new_tokens": 128.0, "top_k": 5.0, "trim_s": 15.0, "encode": "window", "local-agreement.agree": 2.0,
          "2:local-agreement.agree": 3.0}


def scripted(policy: str) -> Trace:
    return Trace(list(transcribe(Scripted(SCRIPT), np.zeros(4 * SAMPLE_RATE, np.float32), params={"policy": policy},
                                 words=WORDS, reference="one two three four five")))


def test_each_column_gets_its_policy_and_its_own_knobs():
    first, second = cb.validate("local-agreement", "local-agreement", FIELDS)
    assert first["local-agreement.agree"] == 2 and second["local-agreement.agree"] == 3
    assert isinstance(first["max_new_tokens"], int)
    assert [c["policy"] for c in cb.validate("redecode", "none", FIELDS)] == ["redecode"]
    assert "local-agreement.agree" not in collect_params("redecode", {k: v for k, v in FIELDS.items() if "." not in k}, {})
    with pytest.raises(ValueError, match="`chunk_s` must be in"):
        cb.validate("redecode", "none", FIELDS | {"chunk_s": 5.0})
    assert [c["policy"] for c in cb.validate("local-agreement", "careless", FIELDS)] == ["local-agreement", "careless"]


def test_careless_without_its_lora_is_refused_with_a_sentence(monkeypatch, tmp_path):
    """As in a checkout where CarelessWhisper's LoRA has not been trained (no assets/whisper-careless-lora)."""
    from decoding.speech import policies

    monkeypatch.setattr(policies, "CARELESS_LORA", tmp_path / "no-lora")
    monkeypatch.setitem(policies.POLICIES.entry("careless").capabilities, "unavailable",
                        policies._careless_unavailable())
    with pytest.raises(ValueError, match="has not trained yet"):
        cb.validate("local-agreement", "careless", FIELDS)


def test_uploads_are_converted_and_bad_ones_refused_with_a_sentence(tmp_path, monkeypatch):
    stereo = tmp_path / "stereo.wav"
    write_wav(tmp_path / "mono44.wav", np.zeros(44100, np.float32), 44100)
    subprocess.run(["sox", str(tmp_path / "mono44.wav"), "-c", "2", str(stereo)], check=True)
    audio = cb.read_audio_file(stereo)
    assert audio.dtype == np.float32 and len(audio) == SAMPLE_RATE
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not audio at all")
    with pytest.raises(ValueError, match="`audio` junk.wav cannot be read"):
        cb.read_audio_file(junk)
    monkeypatch.setenv("DECODING_LAB_MAX_AUDIO_S", "1")
    write_wav(tmp_path / "long.wav", np.zeros(3 * SAMPLE_RATE, np.float32), SAMPLE_RATE)
    with pytest.raises(ValueError, match=r"`audio` long.wav lasts more than 1 seconds, the limit for a clip "
                                         r"\(set by DECODING_LAB_MAX_AUDIO_S\)"):
        cb.read_audio_file(tmp_path / "long.wav")
    with pytest.raises(ValueError, match="no file uploaded"):
        cb.clip_of(cb.SOURCES[1], None, None, "")


def test_microphone_pieces_become_16k_mono():
    piece = (np.ones((4800, 2), np.int16) * 16384)  # 0.1 s of 48 kHz stereo int16
    out = cb.to_16k_mono(48000, piece)
    assert out.dtype == np.float32 and len(out) == 1600 and np.allclose(out, 0.5)


def test_views_of_a_run_show_committed_tail_retracted_and_both_pictures():
    trace, other = scripted("local-agreement"), scripted("redecode")
    shown = views(trace, other)
    assert 'class="tok committed' in shown["transcript"] and 'class="tok tail"' not in shown["transcript"]
    assert "WER" in shown["stats"] and "0.000" in shown["stats"]
    at_chunk_3 = views(trace, other, 2)["transcript2"]  # redecode withdrew " for" after chunk 4, " free" after 3
    assert 'class="tok gone"' in at_chunk_3 and "free" in at_chunk_3
    assert 'class="tok tail"' in views(trace, other, 1)["transcript"]  # "two free" waits for agreement
    timeline = shown["timeline"]
    assert [t.name for t in timeline.data] == ["spoken", "latency", "committed"]
    assert list(timeline.data[2].x) == [2.0, 3.0, 4.0, 4.0, 4.0]
    assert "retracted" in [t.name for t in shown["lengths2"].data]


def test_a_speech_trace_exports_and_replays_here_and_is_refused_by_another_tab(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_EXPORT_DIR", str(tmp_path / "exports"))
    path = cb.download_first(scripted("redecode"))
    assert Path(path).name == "scripted-redecode-trace.json"
    replayed = cb.replay(path, None, None)
    assert replayed["trace"].events[-1].text == "one two three four five" and "Replaying" in replayed["status"]
    with pytest.raises(gr.Error, match="it is a streaming speech run"):
        diffusion_callbacks.replay(path, None, None)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "decoding-lab-trace", "version": 1, "events": [{"kind": "token"}]}))
    with pytest.raises(gr.Error, match="Cannot replay other.json"):
        cb.replay(str(other), None, None)


def mic_feed(monkeypatch, policy2="none") -> cb.LiveFeed:
    monkeypatch.setattr(cb, "load_whisper", lambda **_: Scripted(SCRIPT))
    return cb.LiveFeed(cb.validate("local-agreement", policy2, FIELDS), "one two three four five")


def test_a_recording_streams_through_the_run_machinery_and_ends_when_the_recording_stops(monkeypatch):
    live = mic_feed(monkeypatch, "redecode")
    for _ in range(8):  # 4 s of 48 kHz stereo int16 in half-second pieces, as the browser sends them
        live.feed(48000, np.zeros((24000, 2), np.int16))
    live.close()
    updates = list(cb.mic_run(live))
    assert live.done.is_set() and updates[0]["live"] is live
    assert [e.kind for e in live.traces[0].events][-1] == "speech_finish"
    assert live.traces[0].events[-1].text == "one two three four five"  # both columns heard the same pieces
    assert live.traces[1].events[-1].text == "one two three four five"
    assert updates[-1]["status"].startswith("**Finished**") and "received" in updates[-2]["status"]
    assert cb.stop_run(live)["status"] == "Nothing is running."  # Stop after it ended changes nothing


def test_stop_ends_a_recording_run_while_it_waits_for_audio(monkeypatch):
    live = mic_feed(monkeypatch)
    live.feed(16000, np.zeros(16000, np.float32))  # one chunk, then the speaker pauses
    updates = cb.mic_run(live)
    try:
        while not live.traces[0].events or live.traces[0].events[-1].kind != "speech_chunk":
            next(updates)
    finally:  # also when this test fails: a run left waiting for audio would hold the model slot for every later test
        updates.close()  # what Stop does to the running event (`model_event` closes it): the worker stops waiting
    assert live.done.is_set()
    assert live.traces[0].events[-1].kind == "speech_finish" and live.traces[0].events[-1].stop_reason == "cancelled"
    shown = cb.stop_run(live, wait_s=5)
    assert shown["status"].startswith("**Stopped**") and live.closed
    live.feed(16000, np.zeros(16000, np.float32))  # the browser still recording: ignored
    assert live.received_s == 1.0


def test_stop_before_a_run_started_says_so():
    run = cb.Run(1)
    run.done.set()
    assert "before the run started" in cb.stop_run(run)["status"]
    assert cb.stop_run(None)["status"] == "Nothing is running."
    assert "has not ended" in cb.stop_run(cb.Run(1), wait_s=0.01)["status"]


def test_stop_before_a_recordings_run_started_means_it_never_starts(monkeypatch):
    live = mic_feed(monkeypatch)
    assert "before the run started" in cb.stop_run(live, wait_s=5)["status"]
    assert list(cb.mic_run(live)) == [] and live.closed  # the queued run, if it still comes, does nothing


def test_stop_during_the_model_load_still_ends_each_run_as_stopped(monkeypatch):
    loading = threading.Event()

    def slow_load(**_):
        loading.set()
        time.sleep(0.5)  # Whisper loading, while Stop lands
        return Scripted(SCRIPT)

    monkeypatch.setattr(cb, "load_whisper", slow_load)
    updates = cb.generate_run(cb.SOURCES[0], cb.OPENING_PRESET, None, "", False, "local-agreement", "redecode",
                              **FIELDS)
    try:
        run = next(updates)["live"]
        while not loading.is_set():
            next(updates)
    finally:  # also when this test fails (a live run would hold the model slot for every later test)
        updates.close()  # what Stop does to the running event
    assert run.done.is_set()
    for trace in run.traces:  # each column: its start and a cancelled finish, no chunk (no model call was made)
        assert [e.kind for e in trace.events] == ["speech_start", "speech_finish"]
        assert trace.events[-1].stop_reason == "cancelled"
    assert cb.stop_run(run)["status"].startswith("**Stopped**")
