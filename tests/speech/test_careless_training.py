"""The CarelessWhisper trainer's pieces on a tiny random Whisper: the streaming targets (the tokens of the words
ended by a prefix's end, then the end token), the word alignment, and a loss whose gradient reaches only LoRA."""

from __future__ import annotations

import random

import numpy as np
import torch

from decoding.speech import lora
from decoding.speech.causal import CausalEncoder
from decoding.training import careless
from tests.speech.test_careless import noise, tiny_whisper

WORDS = [{"word": "w1", "start": 0.0, "end": 0.4}, {"word": "w2", "start": 0.5, "end": 0.9},
         {"word": "w3", "start": 1.2, "end": 1.5}]


def test_prefix_labels_count_only_words_already_spoken_then_the_end_token():
    ids, ends = [7, 8, 9], [0.4, 0.9, 1.5]
    labels = careless.prefix_labels(2, ids, ends, heard_s=1.0, eot=40)
    assert labels.tolist() == [-100, 7, 8, 40, -100]  # prompt, w1, w2, then stop; w3 not heard yet: ignored
    assert careless.prefix_labels(2, ids, ends, heard_s=0.1, eot=40).tolist() == [-100, 40, -100, -100, -100]
    assert careless.prefix_labels(2, ids, ends, heard_s=9.0, eot=40).tolist() == [-100, 7, 8, 9, 40]


def test_token_ends_spread_a_word_over_its_tokens_and_words_align_by_count():
    asr = tiny_whisper()
    ids, ends = careless.token_ends(asr, WORDS)
    assert ids == [1, 2, 3] and ends == [0.4, 0.9, 1.5]
    spoken = [{"word": w, "start": i / 2, "end": i / 2 + 0.4} for i, w in enumerate(["And", "the", "Lord"])]
    assert careless.aligned_words("And the LORD,", spoken)[2] == {"word": "LORD,", "start": 1.0, "end": 1.4}
    assert careless.aligned_words("And the Lord's own", spoken) is None


def test_the_streaming_loss_trains_only_the_lora_matrices():
    asr = tiny_whisper()
    lora.add_lora(asr.model, rank=2)
    encoder = CausalEncoder(asr.model, asr.features.mel_filters)
    clip = {"words": WORDS}
    loss = careless.clip_loss(asr, asr.model, encoder, clip, noise(1.8), random.Random(0), prefixes=2)
    loss.backward()
    grads = {n: p.grad for n, p in asr.model.named_parameters() if p.grad is not None}
    assert np.isfinite(float(loss.detach())) and grads and all("lora_" in n for n in grads)
    assert any(float(g.abs().max()) > 0 for n, g in grads.items() if n.endswith("lora_B"))
    assert not any(p.requires_grad for n, p in asr.model.named_parameters() if "lora_" not in n)
    assert torch.is_grad_enabled()
