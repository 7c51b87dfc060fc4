"""EAGLE drafter: a one-layer head drafts at the feature level from the target's own hidden states.

Papers followed
    Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty": the
    head maps concat(embedding of token t+1, target feature at t) through a linear layer and one
    decoder layer to the feature at t+1; the target's frozen LM head turns a feature into draft
    logits. Drafting continues autoregressively on the head's own predicted features.
    Li et al. 2024, "EAGLE-2" (dynamic draft trees, here `grow_tree`'s best-first expansion).
    Zhao et al. 2025, "FR-Spec" / Li et al. 2025, "EAGLE-3": draft over a reduced vocabulary (the
    target's most frequent tokens) when the LM head dominates the draft cost; verification stays on
    the full vocabulary, so the output is unchanged (greedy) or distributed as the target's (sampling).
    Gui et al. 2024, "Boosting Lossless Speculative Decoding via Feature Sampling and Partial
    Alignment Distillation" (FSPAD, arXiv 2408.15562), optional (`HeadConfig.fspad_channels` > 0):
    the head's input is not the plain concatenation but a FEATURE SAMPLING of the target's feature
    by the token's embedding in a higher-dimensional space, here a 1-D convolution over the stacked
    (embedding, feature) pair into `fspad_channels` channels of width D, projected back to D. Its
    second part, partial alignment distillation, is a training loss (`decoding.training.eagle
    --fspad`). The paper's full text was not available to this project: both forms are this
    project's reading of its description, said as such in the model card.

Glossary
    feature      the target's last hidden state after its final norm, the LM head's input.
    head position i  the head's input there is (embedding of token i+1, feature at i); its output
                 predicts the feature at i+1, whose logits draft token i+2.
    committed    head positions built from true target features (the verified context); the head's
                 KV cache keeps only those between rounds; tree nodes are dropped after each draft.
    draft vocab  `HeadConfig.draft_vocab` token ids whose LM-head rows the head scores (others get q = 0).

The head is trained by `python -m decoding.training.eagle` (see assets/smollm2-eagle-head/README.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from decoding.speculative.base import Drafter, Feedback
from decoding.models import cpu_native_bf16
from decoding.speculative.drafters import Draft, TreePlan, grow_tree
from decoding.speculative.verify import ROOT, DraftTree

ASSETS = Path(__file__).resolve().parents[2] / "assets"
HEADS = {"smollm2-135m": ASSETS / "smollm2-eagle-head"}  # target name -> trained head folder


@dataclass(frozen=True)
class HeadConfig:
    hidden_size: int = 576  # D: the target's feature width
    num_heads: int = 9
    num_kv_heads: int = 3
    head_dim: int = 64
    intermediate_size: int = 1536
    rope_theta: float = 100000.0
    rms_eps: float = 1e-5
    draft_vocab: int = 8192  # K: token ids the head scores
    target: str = "smollm2-135m"  # the target whose features it was trained on
    fspad_channels: int = 0  # C > 0: FSPAD's feature sampling in C x D dimensions before fc (0: EAGLE's concat)

    @classmethod
    def like(cls, config, draft_vocab: int, target: str, fspad_channels: int = 0) -> "HeadConfig":
        """The shape of one of `config`'s (a transformers Llama-like config) decoder layers."""
        return cls(*layer_shape(config), draft_vocab, target, fspad_channels)


def layer_shape(config) -> tuple:
    """(hidden size, heads, key/value heads, head size, MLP size, rope theta, RMSNorm eps) of one decoder layer of
    `config` (a transformers Llama-like config): the first fields of a draft head's config (EAGLE's, LongSpec's)."""
    heads = config.num_attention_heads
    rope = getattr(config, "rope_parameters", None) or {}
    return (config.hidden_size, heads, getattr(config, "num_key_value_heads", heads),
            getattr(config, "head_dim", None) or config.hidden_size // heads, config.intermediate_size,
            float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))), float(config.rms_norm_eps))


def add_decoder_layer(head: nn.Module, config) -> None:
    """A Llama decoder layer's projections (q, k, v, o; the SwiGLU MLP's gate, up, down), the draft vocabulary's ids
    and the rotary frequencies as `head`'s attributes, under the names the saved heads use (EAGLE's, LongSpec's)."""
    d, h, kv, hd, m = (config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim,
                       config.intermediate_size)
    head.q_proj, head.k_proj = nn.Linear(d, h * hd, bias=False), nn.Linear(d, kv * hd, bias=False)
    head.v_proj, head.o_proj = nn.Linear(d, kv * hd, bias=False), nn.Linear(h * hd, d, bias=False)
    head.gate_proj, head.up_proj = nn.Linear(d, m, bias=False), nn.Linear(d, m, bias=False)
    head.down_proj = nn.Linear(m, d, bias=False)
    head.register_buffer("vocab_ids", torch.arange(config.draft_vocab))  # (K,) draft vocab, ascending
    inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    head.register_buffer("inv_freq", inv_freq, persistent=False)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Llama's: in float32, then back to x's dtype, times `weight`."""
    y = x.float()
    return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rotary(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x (B, H, T, hd) at `positions` (T,) or (B, T), as Llama's (rotate-half): the draft heads'
    (EAGLE's, LongSpec's) keys and queries rotate exactly as the target's."""
    freqs = positions.float()[..., None] * inv_freq  # (T, hd/2) or (B, T, hd/2)
    angles = torch.cat([freqs, freqs], -1)
    if angles.dim() == 3:
        angles = angles[:, None]  # (B, 1, T, hd)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class EagleHead(nn.Module):
    """fc(concat(embedding, feature)) -> one Llama decoder layer (no input norm, as EAGLE) -> feature.
    With `fspad_channels` = C: fc(flatten(silu(conv1d([embedding; feature])))), a (C x D)-wide input."""

    def __init__(self, config: HeadConfig):
        super().__init__()
        d = config.hidden_size
        self.config = config
        c = config.fspad_channels
        self.sample = nn.Conv1d(2, c, kernel_size=3, padding=1) if c else None  # FSPAD's feature sampling
        self.fc = nn.Linear((c or 2) * d, d, bias=True)
        self.norm = nn.Parameter(torch.ones(d))  # RMSNorm before the MLP
        add_decoder_layer(self, config)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return rotary(x, positions, self.inv_freq)

    def _inputs(self, emb: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        """(B, T, 2D) EAGLE's concatenation, or (B, T, C*D) FSPAD's sampled features."""
        if self.sample is None:
            return torch.cat([emb, feat], -1)
        b, t, d = emb.shape
        pair = torch.stack([emb, feat], -2).reshape(b * t, 2, d)  # two channels over the feature axis
        return F.silu(self.sample(pair)).reshape(b, t, -1)

    def forward(self, emb: torch.Tensor, feat: torch.Tensor, positions: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None, mask: torch.Tensor | None = None):
        """emb, feat (B, T, D) at head `positions` (T,); `past` (k, v) each (B, Hkv, P, hd); `mask` (T, P + T)
        True = may attend (None: causal). Returns the predicted features (B, T, D) and this call's (k, v)."""
        c = self.config
        b, t, _ = emb.shape
        x = self.fc(self._inputs(emb, feat))  # (B, T, D)
        q = self._rope(self.q_proj(x).view(b, t, c.num_heads, c.head_dim).transpose(1, 2), positions)
        k = self._rope(self.k_proj(x).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2), positions)
        v = self.v_proj(x).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, T, hd)
        keys, values = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        if mask is None and past is not None:
            raise ValueError("a mask is required with a past")
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=mask is None,
                                              enable_gqa=c.num_heads != c.num_kv_heads)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, t, -1))
        y = rms_norm(x, self.norm, c.rms_eps)
        x = x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))
        return x, (k, v)


def save_head(head: EagleHead, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(asdict(head.config), indent=2) + "\n")
    state = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))


def load_folder(folder: Path, make, dtype: torch.dtype, missing: str) -> nn.Module:
    """A module `save_head` wrote (any draft head with a dataclass `config`): `make(config dict)` builds it, its
    weights load into it; ValueError `missing` where the folder has no config.json."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(missing)
    module = make(json.loads((folder / "config.json").read_text()))
    module.load_state_dict(load_file(str(folder / "model.safetensors")))
    return module.to(dtype).eval()


def load_head(folder: Path, dtype: torch.dtype = torch.float32) -> EagleHead:
    return load_folder(folder, lambda config: EagleHead(HeadConfig(**config)), dtype,
                       f"no EAGLE head in {folder} (config.json missing); train one with "
                       "`python -m decoding.training.eagle`")


def eagle_drafter(lm) -> "EagleDrafter":
    """The shipped head for `lm` (registered as drafter `eagle` in decoding.speculative.strategy)."""
    folder = HEADS.get(lm.name)
    if folder is None:
        raise ValueError(f"drafter=eagle needs a head trained on the target's features; there is one for "
                         f"{', '.join(sorted(HEADS))}, not for {lm.name!r}")
    return EagleDrafter(lm, load_head(folder, lm.model.dtype))


class EagleDrafter(Drafter):
    """Drafts a chain or tree with the head, one head call per tree level (after the committed positions)."""

    needs_hidden_states = True  # every verification pass hands over the target's features
    prefill_rows = -1  # and the prefill's, for every prompt position

    def __init__(self, target, head: EagleHead):
        d = target.model.get_input_embeddings().weight.shape[1]
        if head.config.hidden_size != d:
            raise ValueError(f"the EAGLE head is {head.config.hidden_size} wide, the target's features {d}")
        self.target, self.head, self.name = target, head, "eagle"
        self.embed = target.model.get_input_embeddings()
        rows = target.model.get_output_embeddings().weight[head.vocab_ids].detach()  # (K, D)
        # the draft LM head is the draft's biggest matmul: bfloat16 halves it on CPUs with native bf16
        # (0.41 vs 1.13 ms a row for K = 8192 here); the draft's numerics only change q, never the output
        self.lm_rows = rows.bfloat16() if rows.device.type == "cpu" and cpu_native_bf16() else rows
        self.vocab = target.vocab_size
        self.feats = torch.zeros(0, d, dtype=head.fc.weight.dtype)  # (M, D) true features, positions 0..M-1
        self.past: tuple[torch.Tensor, torch.Tensor] | None = None  # head KV of committed positions

    WEIGHT_TENSORS = ("lm_rows",)  # its copy of the target's LM head rows (SpecMemo's accounting)

    def bytes_per_position(self) -> int:
        """The target's feature and the head's keys and values at every committed position."""
        c, itemsize = self.head.config, self.head.fc.weight.element_size()
        return (self.feats.shape[1] + 2 * c.num_kv_heads * c.head_dim) * itemsize

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """(F, D) predicted features -> (F, V) draft logits, -inf outside the draft vocab."""
        full = torch.full((out.shape[0], self.vocab), -torch.inf)
        full[:, self.head.vocab_ids] = F.linear(out.to(self.lm_rows.dtype), self.lm_rows).float()
        return full

    @torch.inference_mode()
    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
        t0 = time.perf_counter()
        m = self.feats.shape[0]
        if m == 0:  # no feature yet (a one-token prompt): no draft this round
            return Draft(DraftTree(), seconds=time.perf_counter() - t0)
        if m != len(context) - 1:  # the target's cache holds the context but its last token (`Feedback`)
            raise RuntimeError(f"EAGLE holds the target's features of {m} positions; the target's cache holds "
                               f"{len(context) - 1}")
        committed = 0 if self.past is None else self.past[0].shape[2]
        node_out: dict[int, torch.Tensor] = {}
        tree_kv: list[tuple[torch.Tensor, torch.Tensor]] = []

        def expand(tree: DraftTree, frontier: list[int]) -> torch.Tensor:
            nonlocal committed
            if frontier == [ROOT]:  # the committed positions not yet in the head cache, the root last
                ids = torch.tensor(context[committed + 1:m + 1])
                positions = torch.arange(committed, m)
                mask = torch.ones(m - committed, m, dtype=torch.bool).tril(committed)
                out, kv = self.head(self.embed(ids)[None], self.feats[None, committed:m], positions, self.past, mask)
                self.past = kv if self.past is None else (torch.cat([self.past[0], kv[0]], 2),
                                                          torch.cat([self.past[1], kv[1]], 2))
                committed = m
                node_out[ROOT] = out[0, -1]
                return self._logits(out[0, -1:])
            depths = tree.depths()
            fed = sum(kv[0].shape[2] for kv in tree_kv)  # tree nodes already fed, in node order: 0..fed-1
            assert frontier == list(range(fed, fed + len(frontier))), frontier
            ids = torch.tensor([tree.tokens[n] for n in frontier])
            feat = torch.stack([node_out[tree.parents[n]] for n in frontier])  # (F, D) the parents' predictions
            positions = torch.tensor([m - 1 + depths[n] for n in frontier])
            mask = torch.zeros(len(frontier), m + fed + len(frontier), dtype=torch.bool)
            mask[:, :m] = True
            for row, n in enumerate(frontier):
                j = n
                while j != ROOT:  # self and ancestors
                    mask[row, m + j] = True
                    j = tree.parents[j]
            keys = [self.past[0]] + [kv[0] for kv in tree_kv]
            values = [self.past[1]] + [kv[1] for kv in tree_kv]
            out, kv = self.head(self.embed(ids)[None], feat[None], positions,
                                (torch.cat(keys, 2), torch.cat(values, 2)), mask)
            tree_kv.append(kv)
            for row, n in enumerate(frontier):
                node_out[n] = out[0, row]
            return self._logits(out[0])

        draft = grow_tree(expand, plan, temperature, generator)
        draft.seconds = time.perf_counter() - t0
        return draft

    @torch.inference_mode()
    def observe(self, feedback: Feedback) -> None:
        """Keep the target's true features of the positions its cache now holds (`Feedback`): the prompt's
        (prefill), or the fed token's and the accepted path's (a verification: rows fed + node)."""
        if feedback.hidden_states is None:
            return
        h = feedback.hidden_states[-1][0].to(self.feats.dtype)  # (rows of the pass, D) last layer, normed
        start, fed = feedback.start, feedback.fed
        if start != self.feats.shape[0]:
            raise RuntimeError(f"the target's pass starts at position {start}; EAGLE holds features of "
                               f"{self.feats.shape[0]}")
        self.feats = torch.cat([self.feats, h[:fed], h[[fed + a for a in feedback.accepted]]])
