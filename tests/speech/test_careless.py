"""CarelessWhisper on a tiny random Whisper: the causal encoder's states never change when audio arrives, the
streaming pass (cached keys/values, only the new frames) equals the one masked pass, LoRA starts as the base model
and saves/restores exactly, and the careless policy never retracts a committed token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decoding.speech import causal, lora
from decoding.speech.policies import POLICIES, Careless, CarelessParams, StreamParams, chunk_ends
from decoding.speech.whisper import SAMPLE_RATE, Whisper, WhisperSource


def tiny_model(seed: int = 0):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(seed)
    config = WhisperConfig(vocab_size=48, num_mel_bins=80, encoder_layers=2, encoder_attention_heads=2,
                           decoder_layers=2, decoder_attention_heads=2, d_model=16, encoder_ffn_dim=32,
                           decoder_ffn_dim=24, max_source_positions=1500, max_target_positions=64,
                           decoder_start_token_id=41, pad_token_id=40, bos_token_id=40, eos_token_id=40)
    return WhisperForConditionalGeneration(config).eval()


def tiny_whisper(seed: int = 0) -> Whisper:
    """A random Whisper with a word-level tokenizer: w0..w39 then the special tokens Whisper's prompt needs."""
    from tokenizers import Tokenizer, models

    vocab = {f" w{i}": i for i in range(40)} | {"<|endoftext|>": 40, "<|startoftranscript|>": 41,
                                               "<|notimestamps|>": 42}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=" w0"))
    source = WhisperSource(name="tiny-random", description="", distributions=(), parts=(), files_in="", sha256="",
                           size_mb=0, licence="")
    return Whisper(source, tiny_model(seed), tokenizer, {"suppress_ids": [], "suppress_ids_begin": [40]})


@pytest.fixture(scope="module")
def asr():
    return tiny_whisper()


def noise(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(3 * t)) + 0.05 * rng.standard_normal(len(t))).astype(
        np.float32)


def test_one_block_is_whispers_own_encoder(asr):
    """With every frame in one block the masked layers are transformers' encoder (the mel's last frame is the
    zero padding Whisper's convolution adds at the end of its 3000 frames)."""
    mel = torch.randn(80, 3001, generator=torch.Generator().manual_seed(0))
    mel[:, 3000] = 0
    encoder = causal.CausalEncoder(asr.model, asr.features.mel_filters)
    ours = encoder.full(mel, torch.zeros(1500, dtype=torch.long))
    with torch.inference_mode():
        theirs = asr.model.model.encoder(mel[None, :, :3000]).last_hidden_state
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_earlier_chunks_do_not_change_when_audio_arrives(asr):
    encoder = causal.CausalEncoder(asr.model, asr.features.mel_filters)
    audio = noise(3.2)
    short, full = audio[:int(1.5 * SAMPLE_RATE)], audio
    with torch.inference_mode():
        before = encoder.encode(short, chunk_ends(len(short), 0.5))
        after = encoder.encode(full, chunk_ends(len(full), 0.5))
    assert before.shape[1] == 75 and after.shape[1] == 160
    assert torch.allclose(after[:, :75], before, atol=1e-6)
    # one block (Whisper's bidirectional attention): the same frames do change, so the check can fail
    with torch.inference_mode():
        open_before = encoder.encode(short, [len(short)])
        open_after = encoder.full(causal.causal_log_mel(full, [len(short), len(full)], encoder.mel_filters),
                                  torch.zeros(160, dtype=torch.long))
    assert (open_after[:, :75] - open_before).abs().max() > 1e-3


@pytest.mark.parametrize("chunk_s", [0.5, 0.75, 1.0])
def test_streaming_with_cached_keys_equals_the_masked_pass(asr, chunk_s):
    encoder = causal.CausalEncoder(asr.model, asr.features.mel_filters)
    audio = noise(3.1, seed=1)
    ends = chunk_ends(len(audio), chunk_s)
    stream = encoder.stream()
    new = []
    for end in ends:
        states = stream.extend(audio[:end])
        new.append(stream.new_frames)
    with torch.inference_mode():
        full = encoder.encode(audio, ends)
    assert states.shape == full.shape and torch.allclose(states, full, atol=1e-5)
    assert new == [causal.ready_frames(e) - causal.ready_frames(s) for s, e in zip([0] + ends, ends)]
    assert sum(new) == causal.ready_frames(len(audio))  # each frame encoded once: constant work per chunk
    assert len(stream.cache) == 2 and stream.cache[0][0].shape[2] == full.shape[1]


def test_the_mel_and_the_mask_are_causal(asr):
    audio = noise(2.0, seed=2)
    ends = chunk_ends(len(audio), 0.5)
    full = causal.causal_log_mel(audio, ends, asr.features.mel_filters)
    part = causal.causal_log_mel(audio[:ends[1]], ends[:2], asr.features.mel_filters)
    assert full.shape == (80, len(audio) // 160 + 1) and torch.equal(full[:, :part.shape[1]], part)
    ids = causal.block_ids(ends)
    assert ids.tolist() == [0] * 25 + [1] * 25 + [2] * 25 + [3] * 25
    mask = causal.block_mask(ids)
    assert mask[0, 24] and not mask[0, 25] and mask[30, 49] and mask[99, 0] and not mask[49, 50]
    encoder = asr.model.model.encoder
    whole = causal.conv_stem(encoder, full, 0, 100)
    assert torch.allclose(causal.conv_stem(encoder, full, 37, 61), whole[37:61], atol=1e-6)


def test_revise_keeps_tokens_until_one_falls_and_is_overtaken():
    old = [0.9, 0.8, 0.6, 0.5]
    assert causal.revise(old, [0.9, 0.9, 0.7, 0.6], [True] * 4, start=2) == 4  # rising: all stable
    assert causal.revise(old, [0.9, 0.8, 0.4, 0.3], [True, True, True, False], start=2) == 3  # fell, still top at 2
    assert causal.revise(old, [0.9, 0.8, 0.4, 0.6], [True, True, False, True], start=2) == 2  # fell and overtaken
    assert causal.revise(old, [0.1, 0.1, 0.7, 0.6], [False, False, True, True], start=2) == 4  # committed: unexamined


def test_lora_starts_as_the_base_trains_only_itself_and_restores(tmp_path):
    model = tiny_model()
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(3))
    ids = torch.tensor([[41, 42, 5, 7]])
    with torch.no_grad():
        want = model(input_features=features, decoder_input_ids=ids).logits
    wrapped = lora.add_lora(model, rank=4)
    assert len(wrapped) == 4 * (2 + 2 * 2)  # q, k, v, out of encoder self-attn and decoder self- and cross-attn
    with torch.no_grad():
        assert torch.equal(model(input_features=features, decoder_input_ids=ids).logits, want)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(lora.lora_state(model)) and all("lora_" in n for n in trainable)
    with torch.no_grad():
        for name, p in lora.lora_state(model).items():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1)
        adapted = model(input_features=features, decoder_input_ids=ids).logits
    assert (adapted - want).abs().max() > 1e-3
    lora.save_lora(model, tmp_path / "lora", {"steps": 1})
    assert (tmp_path / "lora" / lora.WEIGHTS).stat().st_size < 60_000
    fresh = tiny_model()
    lora.add_lora(fresh, rank=4)
    assert lora.load_lora(fresh, tmp_path / "lora")["steps"] == 1
    merged = lora.merged_copy(tiny_model(), tmp_path / "lora")
    with torch.no_grad():
        restored = fresh(input_features=features, decoder_input_ids=ids).logits
        merged_logits = merged(input_features=features, decoder_input_ids=ids).logits
    assert torch.allclose(restored, adapted, atol=1e-2)  # float16 storage
    assert torch.allclose(merged_logits, restored, atol=1e-4)
    other = tiny_model()
    lora.add_lora(other, rank=2)
    with pytest.raises(ValueError, match="does not fit"):
        lora.load_lora(other, tmp_path / "lora")


def test_the_careless_policy_never_retracts_and_commits_all_at_the_end(asr):
    params = StreamParams(policy="careless", chunk_s=0.5, max_new_tokens=6, own=CarelessParams(lookback=2))
    policy = Careless(asr, params, model=asr.model)
    audio = noise(3.0, seed=4)
    ends = chunk_ends(len(audio), 0.5)
    committed, kept_any = [], False
    for k, end in enumerate(ends):
        step = policy.step(audio[:end], final=k == len(ends) - 1)
        ids = [t.token_id for t in step.committed]
        assert ids[:len(committed)] == committed  # a committed token is never withdrawn
        assert [t.token_id for t in step.hypothesis[:len(ids)]] == ids
        if k < len(ends) - 1:
            assert len(step.hypothesis) - len(ids) <= 2 and step.extra["new_frames"] == 25
        kept_any |= step.extra["kept"] > 0
        committed = ids
    assert committed == [t.token_id for t in step.hypothesis]  # the last chunk commits the rest
    assert step.extra["new_frames"] == 25 + 25  # ... after hearing `flush_s` (0.5 s) of silence past the end
    assert kept_any and all(0 < t.prob <= 1 for t in step.hypothesis)


def test_careless_is_registered_with_its_knobs_and_says_when_it_cannot_run():
    entry = POLICIES.capability("careless", "unavailable")
    from decoding.speech.lora import WEIGHTS
    from decoding.speech.policies import CARELESS_LORA

    assert bool(entry) != (CARELESS_LORA / WEIGHTS).exists()
    if entry:
        assert "python -m decoding.training.careless" in entry
    with pytest.raises(ValueError, match=r"`careless.lookback` must be an integer in \[1, 4\]"):
        from decoding.speech.policies import stream_params

        stream_params({"careless.lookback": 9})


def test_revising_crops_the_decoder_cache_and_decodes_on_as_from_scratch(asr):
    from decoding.speech.whisper import TokenChoice

    encoder = causal.CausalEncoder(asr.model, asr.features.mel_filters)
    audio = noise(1.0, seed=5)
    states = encoder.stream().extend(audio)
    token = lambda i, p: TokenChoice(i, asr.token_text(i), p, 0.0, [i], [asr.token_text(i)], [p])
    old = [token(5, 0.0), token(7, 0.0), token(9, 2.0), token(11, 2.0)]  # the last two cannot have risen
    hypothesis, kept, passes = causal.careless_decode(asr, asr.model, states, old, 2, max_new_tokens=5, top_k=3)
    assert 2 <= kept < 4 and passes >= 1
    again, _, _ = causal.careless_decode(asr, asr.model, states, [token(t.token_id, 0.0) for t in old[:kept]], kept,
                                         max_new_tokens=5, top_k=3)
    assert [t.token_id for t in hypothesis] == [t.token_id for t in again]
    assert [t.token_id for t in hypothesis[:2]] == [5, 7]  # the committed ones stay whatever their probability
    assert all(abs(a.prob - b.prob) < 1e-5 for a, b in zip(hypothesis, again))


@pytest.mark.slow  # Whisper base: the causal encoder over a 3 s sentence, chunk by chunk and at once
def test_on_whisper_base_the_stream_equals_the_masked_pass_and_encodes_only_new_frames():
    from decoding.speech.audio import speak
    from decoding.speech.whisper import load_whisper

    base = load_whisper()
    clip = speak("She sells fresh bread at the market every morning.")
    encoder = causal.CausalEncoder(base.model, base.features.mel_filters)
    ends = chunk_ends(len(clip.audio), 1.0)
    stream = encoder.stream()
    for end in ends:
        states = stream.extend(clip.audio[:end])
        assert stream.new_frames <= 50
    with torch.inference_mode():
        full = encoder.encode(clip.audio, ends)
    assert states.shape == full.shape and (states - full).abs().max() < 1e-3
    params = StreamParams(policy="careless", chunk_s=1.0, max_new_tokens=24, own=CarelessParams(lora=False))
    policy = Careless(base, params, model=base.model)  # the untrained causal encoder: it may write nonsense
    committed = []
    for k, end in enumerate(ends):
        step = policy.step(clip.audio[:end], final=k == len(ends) - 1)
        ids = [t.token_id for t in step.committed]
        assert ids[:len(committed)] == committed
        committed = ids


@pytest.mark.slow  # Whisper base with the shipped LoRA merged, over a 3 s sentence
def test_the_shipped_lora_transcribes_an_espeak_sentence_while_it_arrives():
    from decoding.speech.audio import speak
    from decoding.speech.lora import WEIGHTS
    from decoding.speech.policies import CARELESS_LORA, transcribe
    from decoding.speech.whisper import load_whisper

    if not (CARELESS_LORA / WEIGHTS).exists():
        pytest.skip("no trained LoRA in this checkout")
    sentence = "Please open the window before the meeting starts."
    clip = speak(sentence)
    events = list(transcribe(load_whisper(), clip.audio, params={"policy": "careless"}, words=clip.words,
                             reference=sentence))
    finish, chunks = events[-1], events[1:-1]
    assert finish.stats["wer"] == 0.0 and finish.stats["retracted_tokens"] == 0
    assert chunks[0].committed_text.strip()  # words are committed before the sentence ends
    assert all(c.extra["new_frames"] <= 50 for c in chunks[:-1])  # only the new second is encoded
