"""`python -m decoding transcribe`: one JSON object per event, the last with the transcript and each word's latency."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from decoding.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def test_careless_and_bad_settings_fail_before_any_model_loads(capsys, tmp_path, monkeypatch):
    from tests.speech.test_policies import without_the_careless_lora

    without_the_careless_lora(monkeypatch, tmp_path)
    assert main(["transcribe", "--audio", str(tmp_path / "none.wav"), "--policy", "careless"]) == 2
    assert "has not trained yet" in capsys.readouterr().err
    assert main(["transcribe", "--say", "hello", "--chunk-s", "5"]) == 2
    assert "`chunk_s` must be in [0.5, 2]" in capsys.readouterr().err
    assert main(["transcribe", "--audio", str(tmp_path / "none.wav")]) == 2  # OSError: no such file
    assert "none.wav" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["transcribe", "--audio", "x.wav", "--policy", "no-such-policy"])


@pytest.mark.slow  # Whisper base in a subprocess (~9 s to load) over a 3-second clip
def test_transcribe_prints_one_json_object_per_event(tmp_path, monkeypatch):
    from decoding.speech.audio import speak

    monkeypatch.setenv("DECODING_LAB_SPEECH_DIR", str(tmp_path))
    clip = speak("Please open the window before the meeting starts.")  # its word times lie beside it
    # the CLI reads what the tab reads: here 22,050 Hz stereo 24-bit, as espeak-ng or a recorder may write it
    odd = tmp_path / "odd.wav"
    subprocess.run(["sox", str(clip.path), "-r", "22050", "-c", "2", "-b", "24", str(odd)], check=True)
    odd.with_suffix(".json").write_text(clip.path.with_suffix(".json").read_text())  # the word times beside it
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "decoding", "transcribe", "--audio", str(odd), "--policy",
                             "local-agreement", "--chunk-s", "1.0", "--json"], capture_output=True, text=True,
                            cwd=ROOT, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["kind"] for e in events] == ["speech_start"] + ["speech_chunk"] * 3 + ["speech_finish"]
    last = events[-1]
    assert last["text"] == "Please open the window before the meeting starts."
    assert [w["word"] for w in last["committed"]] == ["please", "open", "the", "window", "before", "the", "meeting",
                                                      "starts"]
    assert all(isinstance(w["latency_s"], float) for w in last["committed"]) and last["stats"]["wer"] == 0.0
    assert events[0]["words"] == clip.words and events[1]["audio_end_s"] == 1.0
