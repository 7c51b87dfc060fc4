"""FTP's token router: per token and per decoder block, whether the block runs.

Follows "A Fine-grained Token-wise Pruner for Large Language Models via Token
Routing" (FTP, 2024): a light router reads each token's hidden state in front of a block and decides
whether the token goes through the block or skips it (its hidden state passes unchanged); the
language model itself stays frozen, only the router is trained (to keep the pruned model's output
close to the full model's, under a sparsity target). Here the router is one linear score per block
on the token's RMS-normalised hidden state, sigmoid(w_l . h / rms(h) + b_l); a block runs when its
score reaches the threshold. Threshold 0 runs every block: the model itself, exactly.

A skipped token still leaves keys and values at the skipped block: they are projections of the
block's *input*, which is what later tokens attend to in a full forward too, so a skip costs the
two projections instead of attention and the MLP, and the cache stays aligned with the positions.

Glossary
    block    one decoder layer (attention + MLP) of the language model.
    score    the router's sigmoid output for (token, block), in (0, 1).
    density  the fraction of (token, block) pairs that ran.

The router is trained by `python -m decoding.training.faster ftp` (assets/tiny-ar-ftp-router/README.md).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

ASSETS = Path(__file__).resolve().parents[2] / "assets"
ROUTERS = {"tiny-ar": ASSETS / "tiny-ar-ftp-router"}  # model name -> trained router folder


@dataclass(frozen=True)
class RouterConfig:
    num_layers: int = 5  # blocks routed
    hidden_size: int = 256  # the model's hidden width
    target: str = "tiny-ar"  # the model it was trained on
    density: float = 0.75  # the training target: fraction of (token, block) pairs that run
    threshold: float = 0.5  # the operating point it was trained at


class TokenRouter(nn.Module):
    """score[t, l] = sigmoid(w_l . h_t / rms(h_t) + b_l) for the hidden state h_t in front of block l."""

    def __init__(self, config: RouterConfig):
        super().__init__()
        self.config = config
        self.weight = nn.Parameter(torch.zeros(config.num_layers, config.hidden_size))
        self.bias = nn.Parameter(torch.full((config.num_layers,), 3.0))  # start with every block on (0.95)

    def score(self, hidden: torch.Tensor, layer: int) -> torch.Tensor:
        """Scores of block `layer` for hidden states (..., D). # (...)"""
        x = hidden.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return torch.sigmoid(x @ self.weight[layer].float() + self.bias[layer].float())


def save_router(router: TokenRouter, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(asdict(router.config), indent=2) + "\n")
    save_file({k: v.detach().float().contiguous() for k, v in router.state_dict().items()},
              str(folder / "model.safetensors"))


def load_router(folder: Path) -> TokenRouter:
    from safetensors.torch import load_file

    config = RouterConfig(**json.loads((Path(folder) / "config.json").read_text()))
    router = TokenRouter(config)
    router.load_state_dict(load_file(str(Path(folder) / "model.safetensors")))
    return router.eval()


def gate_hooks(model, router: TokenRouter, threshold: float, record: list | None = None,
               straight_through: bool = False) -> list:
    """Forward hooks that route every decoder block of `model` (a transformers Llama): a token whose
    score is below `threshold` leaves the block with its input unchanged. With `straight_through`
    (training) the forward uses the hard decision and the gradient flows through the score.
    `record`, when given, receives each block's (B, T) decision (1 = ran). Returns the hooks."""
    hooks = []
    for index, layer in enumerate(model.model.layers[: model.config.num_hidden_layers]):

        def hook(module, args, output, index=index):
            h = args[0]
            score = router.score(h, index)  # (B, T)
            hard = (score >= threshold).to(score.dtype)
            if record is not None:
                record.append((index, hard.detach(), score))
            if not straight_through:  # exactly the block's output or exactly its input
                return torch.where(hard.bool().unsqueeze(-1), output, h)
            gate = hard + score - score.detach()
            return h + gate.unsqueeze(-1).to(h.dtype) * (output - h)

        hooks.append(layer.register_forward_hook(hook))
    return hooks


@contextmanager
def routed(model, router: TokenRouter, threshold: float, record: list | None = None):
    """Inside the block, every decoder block of `model` (a transformers Llama) is routed: tokens scored below
    `threshold` skip it. Where no token of the call runs the block (one-token decoding steps, mostly), the block
    only projects and caches the tokens' keys and values (attention and MLP are not computed); where some do,
    it runs and the skipping tokens keep their input. `record` receives (block, decisions (B, T), scores)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    layers = list(model.model.layers[: model.config.num_hidden_layers])

    def route(index: int, layer, original):
        def forward(hidden_states, *args, **kwargs):
            score = router.score(hidden_states, index)  # (B, T)
            ran = score >= threshold
            if record is not None:
                record.append((index, ran, score))
            if bool(ran.all()):
                return original(hidden_states, *args, **kwargs)
            if bool(ran.any()):
                return torch.where(ran.unsqueeze(-1), original(hidden_states, *args, **kwargs), hidden_states)
            cache = kwargs.get("past_key_values")
            if cache is not None:  # keys and values only: what later tokens attend to at this block
                attn = layer.self_attn
                x = layer.input_layernorm(hidden_states)
                shape = (*hidden_states.shape[:2], -1, attn.head_dim)
                k = attn.k_proj(x).view(shape).transpose(1, 2)  # (B, Hkv, T, hd)
                v = attn.v_proj(x).view(shape).transpose(1, 2)
                k, _ = apply_rotary_pos_emb(k, k, *kwargs["position_embeddings"])
                cache.update(k, v, attn.layer_idx)
            return hidden_states

        return forward

    for index, layer in enumerate(layers):
        layer.forward = route(index, layer, layer.forward)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # back to the class's forward
