"""The CTranslate2 reader against CTranslate2's own converter: a tiny random Whisper written by ctranslate2 (float32,
float16, int8) reads back into the same transformers weights and the same logits."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from decoding.speech import ct2
from decoding.speech.whisper import build_model

ctranslate2 = pytest.importorskip("ctranslate2")  # requirements-dev.txt pins it: the reference writer


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory):
    """A tiny random WhisperForConditionalGeneration saved with a word-level tokenizer (no download)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, WhisperConfig, WhisperForConditionalGeneration

    folder = tmp_path_factory.mktemp("tiny-whisper")
    torch.manual_seed(0)
    config = WhisperConfig(vocab_size=64, num_mel_bins=80, encoder_layers=2, encoder_attention_heads=2, decoder_layers=2,
                           decoder_attention_heads=2, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=24,
                           max_source_positions=1500, max_target_positions=32, decoder_start_token_id=1,
                           pad_token_id=0, bos_token_id=0, eos_token_id=0)
    model = WhisperForConditionalGeneration(config).eval()
    model.save_pretrained(folder)
    vocab = {f"w{i}": i for i in range(40)}
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="w0")),
                            unk_token="w0").save_pretrained(folder)
    return model, folder


@pytest.mark.parametrize("quantization", ["float32", "float16", "int8"])
def test_the_reader_recovers_what_ctranslate2_wrote(tiny_whisper, tmp_path, quantization):
    model, folder = tiny_whisper
    ctranslate2.converters.TransformersConverter(str(folder)).convert(str(tmp_path / "ct2"), quantization=quantization)
    data = (tmp_path / "ct2" / "model.bin").read_bytes()
    spec, variables, _ = ct2.read_model(data)
    assert spec == "WhisperSpec"
    dims = ct2.whisper_dims(variables)
    assert (dims["d_model"], dims["encoder_layers"], dims["decoder_ffn_dim"], dims["encoder_attention_heads"]) == (
        16, 2, 24, 2)
    rebuilt = build_model(data)
    tolerance = {"float32": 0.0, "float16": 2e-3, "int8": 0.05}[quantization]
    expected = model.state_dict()
    for name, value in rebuilt.state_dict().items():
        assert value.dtype == torch.float32
        diff = float((value - expected[name]).abs().max())
        assert diff <= tolerance * max(1.0, float(expected[name].abs().max())), (name, diff)
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[1, 5, 7, 9]])
    with torch.inference_mode():
        want = model(input_features=features, decoder_input_ids=ids).logits
        got = rebuilt(input_features=features, decoder_input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5 if quantization == "float32" else 0.1)


def test_a_foreign_or_broken_file_is_refused_with_a_sentence():
    with pytest.raises(ct2.CT2FormatError, match="binary version 99"):
        ct2.read_model(struct.pack("<I", 99))
    with pytest.raises(ct2.CT2FormatError, match="inside a header"):
        ct2.read_model(struct.pack("<I", 6) + b"\x05")
    name = b"x\x00"
    broken = struct.pack("<I", 6) + struct.pack("<H", 5) + b"Spec\x00" + struct.pack("<II", 1, 1)
    broken += struct.pack("<H", len(name)) + name + struct.pack("<BIBI", 1, 4, 0, 16) + b"\x00" * 8
    with pytest.raises(ct2.CT2FormatError, match="runs past the end"):
        ct2.read_model(broken)


def test_dequantise_divides_by_the_row_scale():
    variables = {"l/weight": np.array([[127, -64], [10, 20]], dtype=np.int8),
                 "l/weight_scale": np.array([127.0, 10.0], dtype=np.float32)}
    assert np.allclose(ct2.dequantise(variables, "l/weight"), [[1.0, -64 / 127], [1.0, 2.0]])
    with pytest.raises(ct2.CT2FormatError, match="no m/weight_scale"):
        ct2.dequantise({"m/weight": np.zeros((1, 1), np.int8)}, "m/weight")
