"""Speech made on the machine: espeak-ng's clips are deterministic, cached, 16 kHz, and know when each word was said."""

from __future__ import annotations

import numpy as np
import pytest

from decoding.speech import audio
from decoding.speech.audio import read_wav, speak, word_ends, word_times
from decoding.speech.whisper import SAMPLE_RATE

SENTENCE = "Please open the window before the meeting starts."


@pytest.fixture(autouse=True)
def speech_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_SPEECH_DIR", str(tmp_path))
    return tmp_path


def test_a_clip_has_its_words_in_order_inside_the_audio(speech_cache):
    clip = speak(SENTENCE)
    assert clip.path.parent == speech_cache and read_wav(clip.path).shape == clip.audio.shape
    assert [w["word"] for w in clip.words] == SENTENCE.rstrip(".").split()
    assert clip.words[0]["start"] == 0.0 and clip.words[-1]["end"] <= clip.duration + 0.01
    for word, following in zip(clip.words, clip.words[1:]):
        assert word["start"] < word["end"] <= following["start"] + 1e-6
    assert 2.0 < clip.duration < 5.0 and clip.audio.dtype == np.float32 and np.abs(clip.audio).max() > 0.1
    assert word_times(clip.path) == clip.words


def test_the_same_settings_give_the_same_samples_and_a_slower_rate_a_longer_clip(monkeypatch):
    first = audio.synthesise(SENTENCE)[0]
    audio.synthesise("Something else in between.")
    assert np.array_equal(first, audio.synthesise(SENTENCE)[0])  # a fresh synthesiser each time
    clip = speak(SENTENCE)
    slower = speak(SENTENCE, rate=110)
    assert slower.duration > clip.duration * 1.2
    monkeypatch.setattr(audio, "synthesise", lambda *a, **k: pytest.fail("a cached clip was synthesised again"))
    assert np.array_equal(speak(SENTENCE).audio, clip.audio) and speak(SENTENCE).words == clip.words


def test_a_word_ends_where_its_sound_does():
    rate = 1000  # 10 samples a frame
    sound = np.zeros(rate * 2, np.int16)
    sound[0:300] = 1000  # word 1: 0-0.3 s, then silence until word 2 at 1.0 s
    sound[1000:1500] = 1000
    assert word_ends(sound, rate, [0.0, 1.0]) == [0.3, 1.5]


def test_bad_requests_say_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match="`text` must be"):
        speak("  ")
    with pytest.raises(ValueError, match="`rate` must be in"):
        speak("hello", rate=10)
    with pytest.raises(ValueError, match="`voice` must be an espeak-ng voice"):
        speak("hello", voice="no-such-voice")
    path = tmp_path / "stereo.wav"
    import wave

    with wave.open(str(path), "wb") as f:
        f.setnchannels(2)
        f.setsampwidth(2)
        f.setframerate(SAMPLE_RATE)
        f.writeframes(b"\x00" * 400)
    with pytest.raises(ValueError, match="16 kHz mono 16-bit WAV.*sox"):
        read_wav(path)
