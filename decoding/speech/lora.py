"""LoRA for Whisper's attention: low-rank updates trained while the pretrained weights stay frozen.

Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models" (arXiv 2106.09685): a frozen linear map W gets
a trainable update (alpha / r) B A with A (r, in) and B (out, r); B starts at zero, so training starts from the
pretrained model exactly. CarelessWhisper (Krichli, Raj and Keshet 2025, arXiv 2508.12301) puts LoRA on the
encoder's self-attention and on the decoder's self- and cross-attention (query, key, value and output projections,
as the authors' released code wraps them), which is what `add_lora` does on transformers' Whisper.

    add_lora(model, rank)       wrap the projections in place; only the LoRA matrices require grad
    lora_state(model)           {name: tensor} of the LoRA matrices (what is saved: a few MB in float16)
    load_lora(model, path)      the saved matrices into a wrapped model (ValueError if they do not fit)
    merged_copy(model, path)    a copy of the model with the saved update added into its weights (inference:
                                no wrappers, no extra cost per call; the original model is left as it was)
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import torch
from torch import nn

TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj")
WEIGHTS, CONFIG = "adapter.safetensors", "adapter_config.json"


class LoRALinear(nn.Module):
    """`base(x) + (alpha / r) x A^T B^T`, the base frozen."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        if rank < 1:
            raise ValueError(f"`rank` must be a positive integer, got {rank}")
        self.base, self.rank, self.scale = base, rank, alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # B = 0: the wrapped layer starts as the base
        for p in base.parameters():
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale

    def delta(self) -> torch.Tensor:
        """(out, in) the update this adapter adds to the base weight."""
        return (self.lora_B @ self.lora_A) * self.scale


def attention_modules(model) -> dict[str, nn.Module]:
    """The attention blocks LoRA adapts: encoder self-attention, decoder self- and cross-attention, by name."""
    out = {}
    for name, module in model.named_modules():
        if name.endswith((".self_attn", ".encoder_attn")) and (".encoder.layers." in name or ".decoder.layers." in name):
            out[name] = module
    return out


def add_lora(model, rank: int = 16, alpha: float | None = None) -> list[str]:
    """Wrap every targeted projection in `model` with LoRA (in place); freeze everything else. Returns the
    wrapped projections' names."""
    alpha = float(rank if alpha is None else alpha)
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = []
    for name, module in attention_modules(model).items():
        for target in TARGETS:
            base = getattr(module, target)
            if isinstance(base, LoRALinear):
                raise ValueError(f"{name}.{target} already has LoRA")
            setattr(module, target, LoRALinear(base, rank, alpha))
            wrapped.append(f"{name}.{target}")
    return wrapped


def lora_state(model) -> dict[str, torch.Tensor]:
    return {name: p for name, p in model.named_parameters() if name.endswith((".lora_A", ".lora_B"))}


def save_lora(model, folder: Path, info: dict) -> Path:
    """The LoRA matrices as float16 safetensors plus a config (rank, alpha, targets, and `info`)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {name: p.detach().to(torch.float16).contiguous() for name, p in lora_state(model).items()}
    save_file(state, str(folder / WEIGHTS))
    first = next(m for m in model.modules() if isinstance(m, LoRALinear))
    config = {"rank": first.rank, "alpha": first.scale * first.rank, "targets": list(TARGETS)} | info
    (folder / CONFIG).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return folder / WEIGHTS


def read_lora(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / WEIGHTS).exists():
        raise ValueError(f"`lora` must be a folder holding {WEIGHTS} and {CONFIG}, got {folder}")
    config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    return config, {k: v.float() for k, v in load_file(str(folder / WEIGHTS)).items()}


def load_lora(model, folder: Path) -> dict:
    """Load saved LoRA matrices into a model `add_lora` wrapped with the same rank; returns the config."""
    config, state = read_lora(folder)
    own = lora_state(model)
    if set(own) != set(state) or any(own[k].shape != state[k].shape for k in own):
        raise ValueError(f"the LoRA in {folder} does not fit this model (rank {config.get('rank')}, "
                         f"{len(state)} matrices; the model has {len(own)})")
    with torch.no_grad():
        for name, value in state.items():
            own[name].copy_(value)
    return config


def merged_copy(model, folder: Path):
    """A deep copy of `model` whose targeted weights include the saved LoRA update (W + alpha/r B A)."""
    config, state = read_lora(folder)
    rank, alpha = int(config["rank"]), float(config["alpha"])
    merged = copy.deepcopy(model)
    modules = dict(merged.named_modules())
    expected = {f"{name}.{t}.{m}" for name in attention_modules(merged) for t in TARGETS for m in ("lora_A", "lora_B")}
    if set(state) != expected:
        raise ValueError(f"the LoRA in {folder} does not fit this model ({len(state)} matrices, "
                         f"expected {len(expected)})")
    with torch.no_grad():
        for name in attention_modules(merged):
            for target in TARGETS:
                a, b = state[f"{name}.{target}.lora_A"], state[f"{name}.{target}.lora_B"]
                linear = modules[f"{name}.{target}"]
                linear.weight += (b @ a) * (alpha / rank)
    return merged.eval()
