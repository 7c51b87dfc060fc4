"""The `/transcribe` API endpoint over real HTTP (gradio_client against the app server): an espeak-ng clip sent
with `handle_file` streams every event of a streaming run and ends with the finish, as
`python -m decoding transcribe --json` prints; bad input is refused with a sentence naming the problem, and the
app keeps serving."""

from __future__ import annotations

import json

import pytest

from decoding.speech.audio import speak
from decoding.speech.metrics import normalise, wer

pytestmark = pytest.mark.slow  # the HTTP server, Whisper base on the CPU

SAID = "Turn left at the old church."


def test_transcribe_streams_the_events_then_the_finish(client):
    from gradio_client import handle_file

    clip = speak(SAID)
    job = client.submit(handle_file(str(clip.path)), "redecode", 1.0, json.dumps({"max_new_tokens": 32}), SAID,
                        api_name="/transcribe")
    result = job.result(timeout=300)
    outputs = job.outputs()
    kinds = [o["kind"] for o in outputs]
    assert kinds[0] == "speech_start" and kinds[-1] == "speech_finish"
    assert kinds.count("speech_chunk") == outputs[0]["num_chunks"] >= 2  # one event per chunk, as they ran
    assert outputs[0]["policy"] == "redecode" and outputs[0]["params"]["max_new_tokens"] == 32
    assert result == outputs[-1] and result["stop_reason"] == "end"
    assert wer(SAID, result["text"]) <= 0.2, result["text"]  # redecode's last chunk is offline decoding
    assert [w["word"] for w in result["committed"]] == normalise(result["text"])  # words as WER compares them
    assert result["stats"]["wer"] == pytest.approx(wer(SAID, result["text"]))
    assert all(w["latency_s"] is None for w in result["committed"])  # an uploaded file has no word times


@pytest.mark.parametrize("audio, args, message", [
    ("junk", ("redecode", 1.0, "{}"), "`audio` junk.wav cannot be read"),
    ("/etc/passwd", ("redecode", 1.0, "{}"), "the server reads no other path, got '/etc/passwd'"),
    ("clip", ("no-such-policy", 1.0, "{}"), "no-such-policy"),
    ("clip", ("redecode", 5.0, "{}"), "`chunk_s` must be in"),
    ("clip", ("redecode", 1.0, '{"top_k": '), "`params` must be a JSON object"),
    ("clip", ("redecode", 1.0, '{"policy": "careless"}'), "`params` must not hold `policy`"),
])
def test_bad_input_is_named_and_the_app_keeps_serving(client, tmp_path, audio, args, message):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    clip = speak(SAID)
    if audio == "junk":
        (tmp_path / "junk.wav").write_bytes(b"not audio at all")
        audio = handle_file(str(tmp_path / "junk.wav"))
    elif audio == "clip":
        audio = handle_file(str(clip.path))
    with pytest.raises(AppError, match=message):
        client.predict(audio, *args, api_name="/transcribe")
    assert client.predict(TINY_ARGS[0], *TINY_ARGS[1:], api_name="/generate")["stats"]["num_tokens"] == 2


TINY_ARGS = ("tiny-random", "greedy", "hi", 2)
