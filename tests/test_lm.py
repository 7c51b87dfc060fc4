"""The engine's cache helpers and early-exit logits against fresh full forwards."""

import pytest
import torch

from decoding.lm import crop_cache, reorder_cache

IDS = [10, 20, 30, 40, 50, 60]


def full_logits(lm, ids):
    with torch.inference_mode():
        return lm.model(torch.tensor([ids])).logits[0].float()  # (T, V)


def test_cached_forward_equals_full_forward(tiny_lm):
    out = tiny_lm.prefill(IDS[:4])
    out = tiny_lm.forward(torch.tensor([IDS[4:]]), out.cache)
    assert torch.allclose(out.logits[0], full_logits(tiny_lm, IDS)[4:], atol=1e-5)


def test_crop_then_continue_equals_fresh(tiny_lm):
    out = tiny_lm.prefill(IDS[:4])
    tiny_lm.forward(torch.tensor([[7, 8, 9]]), out.cache)  # rejected speculative tokens
    crop_cache(out.cache, 4)
    assert out.cache.get_seq_length() == 4
    out = tiny_lm.forward(torch.tensor([IDS[4:]]), out.cache)
    assert torch.allclose(out.logits[0], full_logits(tiny_lm, IDS)[4:], atol=1e-5)
    with pytest.raises(ValueError, match="`length` must be in"):
        crop_cache(out.cache, 100)


def test_reorder_selects_rows(tiny_lm):
    a, b = [1, 2, 3], [4, 5, 6]
    out = tiny_lm.forward(torch.tensor([a, b]))  # two rows
    cache = reorder_cache(out.cache, torch.tensor([1, 1, 0]))
    nxt = tiny_lm.forward(torch.tensor([[7], [7], [7]]), cache)
    assert torch.allclose(nxt.logits[0, -1], full_logits(tiny_lm, b + [7])[-1], atol=1e-5)
    assert torch.allclose(nxt.logits[1, -1], nxt.logits[0, -1], atol=1e-6)
    assert torch.allclose(nxt.logits[2, -1], full_logits(tiny_lm, a + [7])[-1], atol=1e-5)


def test_prefill_rows_repeat_the_prompt(tiny_lm):
    out = tiny_lm.prefill(IDS, rows=3)
    assert out.logits.shape[0] == 3 and out.cache.layers[0].keys.shape[0] == 3
    assert torch.equal(out.logits[0], out.logits[2])


def exit_logits(lm, hidden_states, layer: int):
    """Early-exit logits: the final norm and LM head on layer `layer`'s output (the last is normed already)."""
    h = hidden_states[layer]
    return lm.model.lm_head(h if layer == lm.num_layers else lm.final_norm(h)).float()


def test_last_layer_exit_equals_model_logits(tiny_lm):
    out = tiny_lm.forward(torch.tensor([IDS]), output_hidden_states=True)
    assert torch.allclose(exit_logits(tiny_lm, out.hidden_states, tiny_lm.num_layers), out.logits, atol=1e-5)


def test_final_norm_is_the_models_own(tiny_lm):
    out = tiny_lm.forward(torch.tensor([IDS]), output_hidden_states=True)
    h = out.hidden_states[2]
    assert torch.allclose(tiny_lm.final_norm(h), tiny_lm.model.model.norm(h))
    assert not torch.allclose(exit_logits(tiny_lm, out.hidden_states, 2), tiny_lm.model.lm_head(h).float(), atol=1e-3)


@pytest.mark.slow  # SmolLM2
def test_real_model_early_exit_agrees_more_near_the_top(smol_lm):
    """Early exit on SmolLM2 (not trained for it): late layers agree with the final argmax more."""
    ids, _, _ = smol_lm.encode_prompt("Write a short poem about the sea.")
    out = smol_lm.forward(torch.tensor([ids]), output_hidden_states=True)
    final = out.logits[0].argmax(-1)
    agree = {layer: (exit_logits(smol_lm, out.hidden_states, layer)[0].argmax(-1) == final).float().mean().item()
             for layer in (10, 28, smol_lm.num_layers)}
    assert agree[smol_lm.num_layers] == 1.0
    assert agree[28] > agree[10]
