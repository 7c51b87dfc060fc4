"""A streaming speech run's trace saves to JSON and loads back (the speech event kinds registered with the core's
loader), with its statistics; a malformed one is refused with a message naming the event and the field."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decoding.events import Trace, stats
from decoding.speech.events import SpeechChunk, SpeechStarted
from decoding.speech.policies import transcribe
from decoding.speech.whisper import SAMPLE_RATE
from test_policies import SCRIPT, WORDS, Scripted


def speech_trace(policy: str = "redecode") -> Trace:
    audio = np.zeros(4 * SAMPLE_RATE, np.float32)
    events = transcribe(Scripted(SCRIPT), audio, params={"policy": policy}, words=WORDS,
                        reference="one two three four five", source="preset: test")
    return Trace(list(events))


def test_a_speech_trace_round_trips_through_json(tmp_path):
    trace = speech_trace()
    path = tmp_path / "speech.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert [e.to_dict() for e in loaded.events] == [e.to_dict() for e in trace.events]
    assert isinstance(loaded.events[0], SpeechStarted) and loaded.start is None and loaded.ended
    assert stats(loaded) == stats(trace) == trace.events[-1].stats | {"stop_reason": "end"}
    assert json.loads(path.read_text())["stats"]["retracted_tokens"] == 2


def test_a_running_speech_trace_has_statistics_of_its_chunks():
    trace = Trace(speech_trace().events[:3])
    assert not trace.ended and stats(trace) == {"chunks": 2, "audio_s": 2.0, "retracted_tokens": 0,
                                                "cpu_s": stats(trace)["cpu_s"], "stop_reason": "running"}


def _broken(edit) -> dict:
    data = speech_trace().to_dict()
    edit(data["events"])
    return data


@pytest.mark.parametrize("edit, message", [
    (lambda ev: ev[1].update(hypothesis=[dict(ev[1]["hypothesis"][0], prob=1.5)]),
     r"event 1 \('speech_chunk'\): `hypothesis\[0\]\.prob` must be a finite number in \[0, 1\]"),
    (lambda ev: ev[2]["hypothesis"][0].update(top_probs=[]),
     r"event 2 \('speech_chunk'\): `hypothesis\[0\]\.top_probs` must be as long as `top_ids`"),
    (lambda ev: ev[3].update(chunk=7), r"event 3 \('speech_chunk'\): `chunk` must be chunk 2"),
    (lambda ev: ev[1].pop("committed_text"), r"missing fields \['committed_text'\]"),
    (lambda ev: ev[-1].update(committed=[{"word": "one"}]), r"`committed\[0\]`"),
    (lambda ev: ev.pop(0), r"the first event must be a 'start' event or 'speech_start', got 'speech_chunk'"),
])
def test_a_malformed_speech_trace_is_refused_naming_the_event_and_the_field(edit, message):
    with pytest.raises(ValueError, match=message):
        Trace.from_dict(_broken(edit))


def test_an_older_speech_trace_without_the_buffer_fields_loads():
    data = speech_trace().to_dict()
    for event in data["events"]:
        for key in ("buffer_start_s", "trimmed", "source"):
            event.pop(key, None)
    loaded = Trace.from_dict(data)
    assert all(c.buffer_start_s == 0.0 and c.trimmed == "" for c in loaded.events if isinstance(c, SpeechChunk))
