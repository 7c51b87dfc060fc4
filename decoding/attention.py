"""Attention for verification passes on a CPU: several query positions over a long cache, without copying it.

A speculative verification (or any pass of a few new positions over a cache: RAPID's and LongSpec's target pass,
EAGLE's, prompt lookup's) calls the model with q > 1 query positions and an explicit mask. For a model with grouped
query attention (SmolLM2: 9 query heads share 3 key/value heads; Gemma-3: 4 share 1), transformers' `sdpa`
implementation then repeats the cache's keys and values for every query head (`repeat_kv`) before calling
`scaled_dot_product_attention`: a copy of the whole cache, per layer, per pass, which on a CPU costs more than the
attention itself (SmolLM2 at 8K: a 2-position pass took 2.4x a 1-position one, most of it that copy and the masked
kernel over the repeated heads). It does so because on CUDA the fused kernels do not take `enable_gqa` with a mask
(`transformers.integrations.sdpa_attention.use_gqa_in_sdpa`); on a CPU torch's kernel does, and reads each
key/value head once for its whole group.

    install(model)   route a CPU model with grouped-query attention through `gqa_sdpa` (its masks stay sdpa's);
                     a no-op for any other model or device
    gqa_sdpa(...)    `sdpa_attention_forward` with `enable_gqa=True` where a mask is given; sdpa's own path
                     otherwise (one position, no mask, paged caches, position biases)

The outputs are sdpa's: the same kernel on the same numbers, equal to the last bit in the tests
(tests/test_attention.py); only the copy is gone. Measured by `bench/bench_long_context.py` (docs/longctx.md).
"""

from __future__ import annotations

import torch

GQA_SDPA = "sdpa_gqa_cpu"  # the attention implementation's name in transformers' registries


def gqa_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
             is_causal: bool | None = None, **kwargs):
    """Attention of `query` (B, H, q, D) over `key`/`value` (B, H_kv, n, D) under `attention_mask`; (B, q, H, D)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    plain = (attention_mask is None or groups <= 1 or query.shape[2] == 1 or query.device.type != "cpu"
             or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
             or kwargs.get("softcap") is not None or kwargs.get("output_attentions", False))
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GQA_SDPA, gqa_sdpa)
    AttentionMaskInterface.register(GQA_SDPA, sdpa_mask)  # without it transformers would build no mask at all


def install(model) -> bool:
    """Use `gqa_sdpa` for `model` if it runs on a CPU with sdpa attention and grouped-query heads; True if it does."""
    config = getattr(model, "config", None)
    text = getattr(config, "get_text_config", lambda: config)() if config is not None else None
    try:
        device = next(model.parameters()).device
    except (StopIteration, AttributeError):
        return False
    heads = getattr(text, "num_attention_heads", None)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    if (device.type != "cpu" or getattr(config, "_attn_implementation", None) != "sdpa" or not heads
            or kv_heads >= heads or not hasattr(model, "set_attn_implementation")):
        return False
    _register()
    model.set_attn_implementation(GQA_SDPA)
    return True
