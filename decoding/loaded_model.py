"""What a loaded model is: `LoadedModel`, a model and its tokenizer with where and how they were loaded.

Kept apart from `decoding.models` (the registry and the loaders) so that what builds a model, such as
`decoding.training.tiny`'s in-process test models, needs none of the loaders, and the loaders can call
it without an import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

TINY_MODEL = "tiny-random"  # the registry's in-process models (built by decoding.training.tiny)
TINY_DRAFT_MODEL = "tiny-random-draft"
TINY_DIFFUSION_MODEL = "tiny-random-diffusion"


@dataclass
class LoadedModel:
    """A model and its tokenizer, ready for `decoding.lm.LM`. Shared read-only."""

    name: str  # what the user asked for
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    source: str  # "hub", "gguf:<path>" or "tiny"
    quantization: str = "none"
    num_parameters: int = 0
    meta: dict = field(default_factory=dict)
