"""What test-time training needs of a shared model without touching it: a per-run view whose chosen projections are
the run's own trainable copies (or LoRA deltas), a cache that hands every layer the frozen keys and values of one
prefill, and a FLOP count of what ran.

The loaded model is shared read-only by every request of the app (`decoding.model_cache`: one cached model, several
runs at once under DECODING_LAB_CONCURRENCY), so a run never writes into it. `adapted_view` copies only the
containers on the path from the root to each trained module (their `_modules` dicts) and puts the run's module in
the copy; every other parameter and buffer is the shared tensor itself, read, never written. Gradients are taken
with `torch.autograd.grad` with respect to the run's own parameters only, so no `.grad` lands on a shared tensor.

Glossary
    target     a module the run trains (`self_attn.q_proj` of a layer: the paper's query projection).
    view       the per-run model: shallow copies along the targets' paths, the run's modules at their leaves.
    frozen KV  the keys and values of the context from one prefill with the original model, reused by every step.
    FLOPs      multiply-adds counted twice (2 per weight per token, 4 per key per head dimension for attention).
"""

from __future__ import annotations

import copy
import math
import re

import torch
from transformers import DynamicCache

LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def target_names(model: torch.nn.Module, suffix: str, layers: str) -> list[str]:
    """Names of the Linear modules ending in `suffix` ("self_attn.q_proj") in the chosen `layers` ("all",
    "last-half", "first-half"); ValueError naming the model when it has none."""
    found = [(int(m.group(1)), name) for name, module in model.named_modules()
             if name.endswith(suffix) and isinstance(module, torch.nn.Linear) and (m := LAYER_INDEX.search(name))]
    if not found:
        raise ValueError(f"the model has no `{suffix}` projections in numbered layers; test-time training here "
                         "needs a Llama-style decoder (self_attn.q_proj, mlp.down_proj)")
    count = max(i for i, _ in found) + 1
    keep = {"all": range(count), "last-half": range(count // 2, count), "first-half": range(0, max(1, count // 2))}
    return [name for i, name in sorted(found) if i in keep[layers]]


class LoRALinear(torch.nn.Module):
    """base(x) + (x A^T) B^T * alpha / rank, with B = 0 at the start (the run starts from the model exactly)."""

    def __init__(self, base: torch.nn.Linear, rank: int, generator: torch.Generator):
        super().__init__()
        self.base, self.rank, self.scale = base, rank, 1.0  # alpha = rank (scale 1), as commonly set
        bound = 1 / math.sqrt(base.in_features)
        a = (torch.rand(rank, base.in_features, generator=generator) * 2 - 1) * bound  # (r, in)
        self.lora_a = torch.nn.Parameter(a.to(base.weight.device, base.weight.dtype))
        self.lora_b = torch.nn.Parameter(torch.zeros(base.out_features, rank, device=base.weight.device,
                                                     dtype=base.weight.dtype))  # (out, r)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.T) @ self.lora_b.T * self.scale


def own_copy(module: torch.nn.Linear) -> torch.nn.Linear:
    """The Linear with its own trainable copy of the weight (and bias); the original is not touched."""
    mine = copy.copy(module)
    mine._parameters = {k: None if v is None else torch.nn.Parameter(v.detach().clone())
                        for k, v in module._parameters.items()}
    return mine


def adapted_view(model: torch.nn.Module, replacements: dict[str, torch.nn.Module]) -> torch.nn.Module:
    """A model that runs `model` with the module at each name of `replacements` swapped for the given one. Only the
    containers on those paths are copied (shallowly); `model` itself is unchanged."""
    view = copy.copy(model)
    view._modules = dict(model._modules)
    children: dict[str, dict[str, torch.nn.Module]] = {}
    for name, module in replacements.items():
        head, _, rest = name.partition(".")
        if not rest:
            view._modules[head] = module
        else:
            children.setdefault(head, {})[rest] = module
    for head, inner in children.items():
        view._modules[head] = adapted_view(model._modules[head], inner)
    return view


class FrozenKV(DynamicCache):
    """A cache for one span [start, end) of a prefilled context: the model sees `start` cached positions, and every
    layer's attention gets the prefill's keys and values of positions [0, end) whatever the span's own projections
    computed (qTTT: the keys and values stay those of the single prefill; only the queries change)."""

    def __init__(self, keys_values: list[tuple[torch.Tensor, torch.Tensor]], start: int, end: int):
        super().__init__()
        self.keys_values, self.start, self.end = keys_values, start, end

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        keys, values = self.keys_values[layer_idx]
        return keys[:, :, :self.end], values[:, :, :self.end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.start

    def get_mask_sizes(self, query_length, layer_idx: int = 0) -> tuple[int, int]:
        length = query_length if isinstance(query_length, int) else int(query_length.shape[-1])
        return self.start + length, 0


def check_full_attention(config) -> None:
    """ValueError unless every layer attends over the whole context (a sliding window would need its own cache)."""
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds - {"full_attention"} or getattr(config, "use_sliding_window", False):
        raise ValueError("strategy ttt needs a model whose every layer attends over the whole context; this one has "
                         f"{', '.join(sorted(kinds))} layers")


class FlopCounter:
    """FLOPs of a Llama-style decoder: 2 per weight per token for the matrices (embedding lookups free, the LM head
    counted) and 4 * heads * head_dim per attended key per layer."""

    def __init__(self, model: torch.nn.Module):
        config = model.config
        self.layers = config.num_hidden_layers
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.attn_width = heads * head_dim
        embed = model.get_input_embeddings().weight
        matrices = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and p is not embed)
        head = model.get_output_embeddings().weight
        self.matrix_params = matrices + (head.numel() if head is embed else 0)  # a tied LM head still runs

    def forward(self, tokens: int, past: int) -> int:
        """`tokens` new positions after `past` cached ones (each attends to itself and everything before)."""
        keys = tokens * past + tokens * (tokens + 1) // 2
        return 2 * self.matrix_params * tokens + 4 * self.layers * self.attn_width * keys

    def per_token(self, position: int) -> int:
        """One decoded token at `position` (0-based): the unit the compute is also given in."""
        return self.forward(1, position)

    def train_step(self, span: int, end: int, trained_params: int, lowest_layer: int) -> int:
        """One step on a span of `span` tokens ending at `end`: the forward, the backward through activations from
        the top down to the lowest trained layer (about the forward's share of those layers and the LM head), and the
        weight gradients of the trained parameters (2 per parameter per token)."""
        forward = self.forward(span, end - span)
        share = (self.layers - lowest_layer) / self.layers
        return forward + int(forward * share) + 2 * trained_params * span
