"""`decoding.attention`: a CPU pass of several positions over a cache reads grouped key/value heads without
repeating them, and gives exactly sdpa's outputs (one position, several, a tree mask, the prefill, gradients)."""

from __future__ import annotations

import copy

import pytest
import torch

from decoding import attention
from decoding.training.tiny import build_tiny_model


@pytest.fixture(scope="module")
def pair():
    """The same tiny grouped-query Llama twice: with transformers' sdpa and with `gqa_sdpa` installed."""
    torch.manual_seed(0)
    loaded = build_tiny_model(device=torch.device("cpu"), dtype=torch.float32, num_attention_heads=4,
                              num_key_value_heads=2)
    base = loaded.model.eval()
    ours = copy.deepcopy(base)
    assert attention.install(ours)
    return base, ours


def _cache_then(model, prefix, new, mask=None):
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        model(prefix, past_key_values=cache, use_cache=True)
        kw = {} if mask is None else {"attention_mask": mask}
        return model(new, past_key_values=cache, use_cache=True, **kw).logits


def test_install_only_takes_cpu_sdpa_models_with_grouped_heads(pair):
    base, ours = pair
    assert ours.config._attn_implementation == attention.GQA_SDPA
    assert base.config._attn_implementation == "sdpa"
    full = build_tiny_model(device=torch.device("cpu"), dtype=torch.float32, num_attention_heads=4,
                            num_key_value_heads=4).model
    assert not attention.install(full) and full.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("q", [1, 2, 5])
def test_several_positions_over_a_cache_give_sdpas_logits_exactly(pair, q):
    base, ours = pair
    prefix, new = torch.randint(0, 200, (1, 40)), torch.randint(0, 200, (1, q))
    assert torch.equal(_cache_then(base, prefix, new), _cache_then(ours, prefix, new))


def test_the_mask_is_applied(pair, monkeypatch):
    """A causal pass differs from the same pass with the mask dropped: the mask reaches the kernel."""
    base, ours = pair
    prefix, new = torch.randint(0, 200, (1, 40)), torch.randint(0, 200, (1, 4))
    masked = _cache_then(ours, prefix, new)
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, attn_mask=None, **kw: real(*a, attn_mask=None, **kw))
    assert not torch.allclose(masked, _cache_then(ours, prefix, new), atol=1e-4)


def test_a_tree_mask_gives_sdpas_logits(pair):
    """A 4-D boolean mask of a draft tree (two branches off the root) over the cache, as verification passes it."""
    base, ours = pair
    prefix, new = torch.randint(0, 200, (1, 30)), torch.randint(0, 200, (1, 3))
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    mask = torch.cat([torch.ones(3, 30, dtype=torch.bool), tree], dim=1)[None, None]
    assert torch.equal(_cache_then(base, prefix, new, mask), _cache_then(ours, prefix, new, mask))


def test_prefill_and_gradients_match(pair):
    """A padded batch (a mask, so the grouped kernel runs) gives sdpa's logits and query-projection gradients (test-time
    training backpropagates through it)."""
    base, ours = pair
    ids, pad = torch.randint(0, 200, (2, 24)), torch.ones(2, 24, dtype=torch.long)
    pad[0, :3] = 0
    with torch.no_grad():
        assert torch.equal(base(ids, attention_mask=pad).logits, ours(ids, attention_mask=pad).logits)
    grads = []
    for model in (base, ours):
        proj = model.model.layers[0].self_attn.q_proj.weight
        proj.requires_grad_(True)
        proj.grad = None
        model(ids, attention_mask=pad).logits[1].sum().backward()
        grads.append(proj.grad.clone())
        proj.requires_grad_(False)
        proj.grad = None
    assert grads[0].abs().sum() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6)
