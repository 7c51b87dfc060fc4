"""HAMburger's two small parts around a language model: the smasher and the micro-step decoder.

Follows "HAMburger: Accelerating LLM Inference via Token Smashing" (2025): the big model reads one
*slot* per forward, a slot being 1..G tokens smashed into one input embedding by a compositional
embedder (so the cache grows by one entry per slot, not per token); from the big model's output at
a slot a small micro-step decoder emits the next tokens one by one, the first through the big
model's own LM head, and stops when it is no longer confident. One big forward can so yield
several tokens.

Here, scaled to `tiny-ar`:
    smasher        slot (t_1..t_n) -> E[t_n] + sum_{d=1}^{n-1} A_d E[t_{n-d}] (A_d learned D x D,
                   starting at zero): a one-token slot is exactly the token's embedding, so with
                   slots of one token the model reads text as any language model does.
    micro decoder  u_1 = the model's normed output at the slot (its LM head gives token 1);
                   u_j = GRU(E[y_{j-1}], u_{j-1}), token j from LM head(norm(u_j)), j = 2..G.
    position       a slot sits at the position of its last token, so positions stay token positions.

Glossary
    slot        one input position of the big model: 1..G smashed tokens.
    micro-step  one GRU step of the micro decoder: one more token of the next slot, no big forward.

Trained by `python -m decoding.training.faster hamburger` (assets/tiny-ar-hamburger/README.md).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

PARTS_FILE = "hamburger.safetensors"


@dataclass(frozen=True)
class HamburgerConfig:
    hidden_size: int = 256
    group: int = 4  # G: most tokens per slot
    rms_eps: float = 1e-6


class Smasher(nn.Module):
    """Compositional embedder: a slot's tokens -> one input embedding."""

    def __init__(self, config: HamburgerConfig):
        super().__init__()
        self.mix = nn.Parameter(torch.zeros(config.group - 1, config.hidden_size, config.hidden_size))  # A_1..A_{G-1}

    def forward(self, embeds: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """`embeds` (..., G, D): a slot's token embeddings, left-aligned (positions >= size are ignored);
        `sizes` (...). Returns the slot embeddings (..., D)."""
        last = (sizes - 1).clamp(min=0)
        out = embeds.gather(-2, last[..., None, None].expand(*last.shape, 1, embeds.shape[-1]))[..., 0, :]
        for d in range(1, embeds.shape[-2]):
            index = sizes - 1 - d
            present = (index >= 0).to(embeds.dtype)[..., None]
            tok = embeds.gather(-2, index.clamp(min=0)[..., None, None].expand(*index.shape, 1, embeds.shape[-1]))
            out = out + present * (tok[..., 0, :] @ self.mix[d - 1].to(embeds.dtype))
        return out


class MicroDecoder(nn.Module):
    """GRU micro-steps from the big model's output: token j >= 2 of the next slot."""

    def __init__(self, config: HamburgerConfig):
        super().__init__()
        self.config = config
        self.cell = nn.GRUCell(config.hidden_size, config.hidden_size)
        self.norm = nn.Parameter(torch.ones(config.hidden_size))

    def step(self, prev_embed: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """One micro-step: (N, D) embedding of the previous token, (N, D) state -> next state (N, D)."""
        return self.cell(prev_embed.float(), state.float())

    def features(self, state: torch.Tensor) -> torch.Tensor:
        """What the LM head reads from a micro state. # (N, D)"""
        x = state.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config.rms_eps) * self.norm


class HamburgerParts(nn.Module):
    def __init__(self, config: HamburgerConfig):
        super().__init__()
        self.config = config
        self.smasher = Smasher(config)
        self.micro = MicroDecoder(config)


def save_parts(parts: HamburgerParts, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hamburger.json").write_text(json.dumps(asdict(parts.config), indent=2) + "\n")
    save_file({k: v.detach().half().contiguous() for k, v in parts.state_dict().items()}, str(folder / PARTS_FILE))


def load_parts(folder: Path) -> HamburgerParts:
    from safetensors.torch import load_file

    parts = HamburgerParts(HamburgerConfig(**json.loads((Path(folder) / "hamburger.json").read_text())))
    parts.load_state_dict({k: v.float() for k, v in load_file(str(Path(folder) / PARTS_FILE)).items()})
    return parts.eval()


def has_parts(folder: Path) -> bool:
    return (Path(folder) / PARTS_FILE).exists()
