"""Drafter `longspec` of the speculative strategy: a one-layer draft whose own cache stays the same size however long
the context is, and which reads the long context through the target's own keys and values (LongSpec).

Paper: Yang, Du et al. 2025, "LongSpec: Long-Context Lossless Speculative Decoding with Efficient Drafting and
Verification" (arXiv 2502.17421), and the authors' training and inference code (read to learn the layer's shape,
the cross-attention's block mask and the anchor-offset indices; nothing copied). With a long context an ordinary
draft model is not cheap: its own cache grows with the context (memory), it was trained on short texts (its
position indices never went that far), and verifying a tree over a long cache is slow. LongSpec's answers:

    memory-efficient drafting  one decoder layer (on the target's token embeddings, scored by the target's LM
               head): SELF-attention over a sliding window of its own keys (here plus `sinks` attention-sink
               positions), so its cache is constant-size; then CROSS-attention whose keys and values are the
               target's LAST layer's, read from the target's cache (no copy: no memory of the draft's own grows
               with the context); then the MLP. (GliDe's cross-attention, Du et al. 2024, with a window.)
    anchor-offset indices      trained on short sequences, the draft sees the position indices of a long context
               anyway: the first 0-4 tokens keep their indices (the anchors, as attention sinks), every other
               token's index is shifted by a random offset up to the model's window (`decoding.training.longspec`).
    cheap tree verification    the authors split tree attention into the long prefix (a fast kernel without a
               mask) and the tree (a small masked part) and merge them by log-sum-exp. Verification here is the
               project's own (`LM.forward_tree`, one masked pass), whatever the drafter: the split is a GPU-kernel
               matter, not this drafter's, and is not built.

The draft's view at inference. After the target's pass over context[:-1] (a prefill of its own: `prefill_rows`),
the target's cache holds its last layer's keys for positions 0..n-2. The draft feeds the last token (position n-1,
the root) and then its drafted tokens: each attends to its window of the draft's own keys (and its ancestors in the
tree), and to ALL the target's keys 0..n-2. So a drafted token sees the target's keys up to 1-`lag_block` positions
back, never its own: training masks the cross-attention the same way (a position sees the target's keys of the
earlier blocks of `lag_block` positions, as the authors' training mask does with blocks of 4).

Lossless like every drafter: the target verifies the draft against its own distribution. The shipped draft for
SmolLM2-135M (assets/smollm2-longspec-head/README.md) is trained by `python -m decoding.training.longspec`.

    python -m decoding run --strategy speculative --set drafter=longspec --prompt-file /tmp/book.txt
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from decoding import bibliography as bib
from decoding.models import cpu_native_bf16
from decoding.params import Params, param
from decoding.speculative.base import Drafter, Feedback
from decoding.speculative.drafters import Draft, TreePlan, grow_tree
from decoding.speculative.eagle import add_decoder_layer, layer_shape, load_folder, rms_norm, rotary
from decoding.speculative.eagle import save_head  # noqa: F401  (the same format as EAGLE's)
from decoding.speculative.strategy import DRAFTERS, SpeculativeParams
from decoding.speculative.verify import ROOT, DraftTree

ASSETS = Path(__file__).resolve().parents[2] / "assets"
HEADS = {"smollm2-135m": ASSETS / "smollm2-longspec-head"}  # target name -> trained draft folder


@dataclass(frozen=True)
class LongSpecConfig:
    hidden_size: int = 576
    num_heads: int = 9
    num_kv_heads: int = 3
    head_dim: int = 64
    intermediate_size: int = 1536
    rope_theta: float = 100000.0
    rms_eps: float = 1e-5
    draft_vocab: int = 8192  # token ids whose LM-head rows the draft scores (verification: all of them)
    target: str = "smollm2-135m"
    window: int = 256  # the draft's own keys a position sees: the `window` positions before it (and itself)...
    sinks: int = 4  # ...and the first `sinks` (attention sinks)
    lag_block: int = 6  # training: a position sees the target's keys of the earlier blocks of this many positions

    @classmethod
    def like(cls, config, draft_vocab: int, target: str, **kw) -> "LongSpecConfig":
        """The shape of one of `config`'s (a transformers Llama-like config) decoder layers."""
        return cls(*layer_shape(config), draft_vocab, target, **kw)


class LongSpecHead(nn.Module):
    """norm -> windowed self-attention -> norm -> cross-attention on the target's last-layer keys and values ->
    norm -> SwiGLU MLP -> final norm: the hidden state the target's LM head scores."""

    def __init__(self, config: LongSpecConfig):
        super().__init__()
        d, h, hd = config.hidden_size, config.num_heads, config.head_dim
        self.config = config
        self.input_norm, self.cross_norm = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        self.mlp_norm, self.final_norm = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        add_decoder_layer(self, config)  # self-attention's q, k, v, o, the MLP, the vocabulary, rotary frequencies
        self.cq_proj, self.co_proj = nn.Linear(d, h * hd, bias=False), nn.Linear(h * hd, d, bias=False)

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotary embedding of x (B, H, T, hd) at `positions` (T,) or (B, T), as the target's."""
        return rotary(x, positions, self.inv_freq)

    def self_keys(self, emb: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The self-attention keys (rotated) and values of `emb` (B, T, D): all a committed position leaves in the
        draft's cache (they read the token's embedding only, never the cross-attention)."""
        c, (b, t, _) = self.config, emb.shape
        x = rms_norm(emb, self.input_norm, c.rms_eps)
        k = self.rope(self.k_proj(x).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2), positions)
        return k, self.v_proj(x).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)

    def forward(self, emb: torch.Tensor, positions: torch.Tensor, target_kv: tuple[torch.Tensor, torch.Tensor],
                past: tuple[torch.Tensor, torch.Tensor] | None = None, self_mask: torch.Tensor | None = None,
                cross_mask: torch.Tensor | None = None):
        """emb (B, T, D) at `positions`; `target_kv` the target's last-layer (keys rotated, values) each
        (B, Hkv, M, hd); `past` the draft's own (k, v) each (B, Hkv, P, hd); masks True = may attend: `self_mask`
        (T, P + T) or (B, 1, T, P + T) (None: causal, no past), `cross_mask` (T, M) or (B, 1, T, M) (None: all).
        Returns the normed hidden states (B, T, D) and this call's self (k, v)."""
        c, (b, t, _) = self.config, emb.shape
        gqa = c.num_heads != c.num_kv_heads
        x = rms_norm(emb, self.input_norm, c.rms_eps)
        q = self.rope(self.q_proj(x).view(b, t, c.num_heads, c.head_dim).transpose(1, 2), positions)
        k, v = self.self_keys(emb, positions)
        keys, values = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        if self_mask is None and past is not None:
            raise ValueError("a self-attention mask is required with a past")
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=self_mask, is_causal=self_mask is None,
                                              enable_gqa=gqa)
        h = emb + self.o_proj(attn.transpose(1, 2).reshape(b, t, -1))
        x = rms_norm(h, self.cross_norm, c.rms_eps)
        cq = self.rope(self.cq_proj(x).view(b, t, c.num_heads, c.head_dim).transpose(1, 2), positions)
        tk, tv = target_kv
        attn = F.scaled_dot_product_attention(cq, tk.to(cq.dtype), tv.to(cq.dtype), attn_mask=cross_mask,
                                              enable_gqa=gqa)
        h = h + self.co_proj(attn.transpose(1, 2).reshape(b, t, -1))
        x = rms_norm(h, self.mlp_norm, c.rms_eps)
        h = h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return rms_norm(h, self.final_norm, c.rms_eps), (k, v)


def training_masks(length: int, window: int, sinks: int, lag_block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(self, cross) boolean masks (L, L) for a training sequence, True = may attend. Self: causal, itself and the
    `window` positions before it, and the first `sinks`. Cross (the target's keys): those of the earlier blocks of
    `lag_block` positions (what drafting sees: the target's keys end 1 to lag_block positions back); the first
    block, which has none, sees position 0's (a function of token 0 alone: nothing from its future)."""
    q, k = torch.arange(length)[:, None], torch.arange(length)[None, :]
    own = (k <= q) & ((q - k <= window) | (k < sinks))
    cross = k < (q // lag_block) * lag_block
    cross[:lag_block, 0] = True
    return own, cross


def load_head(folder: Path, dtype: torch.dtype = torch.float32) -> LongSpecHead:
    return load_folder(folder, lambda config: LongSpecHead(LongSpecConfig(**config)), dtype,
                       f"no LongSpec draft in {folder} (config.json missing); train one with "
                       "`python -m decoding.training.longspec`")


@dataclass(frozen=True)
class LongSpecParams(Params):
    window: int = param(0, low=0, high=4096, note="0 = the trained window",
                        help="The draft's own keys kept besides the sinks: the last `window` positions (0: the "
                             "window it was trained with). Its cache never holds more, however long the context.")


class LongSpecDrafter(Drafter):
    """Drafts with the head: one head call per tree level, its own cache a window plus sinks, the long context read
    through the target's last-layer cache."""

    name = "longspec"
    prefill_rows = 1  # the prompt gets a pass of its own: the target's keys exist before the first draft

    def __init__(self, target, head: LongSpecHead, window: int = 0):
        d = target.model.get_input_embeddings().weight.shape[1]
        if head.config.hidden_size != d:
            raise ValueError(f"the LongSpec draft is {head.config.hidden_size} wide, the target's embeddings {d}")
        self.target, self.head = target, head
        self.window, self.sinks = window or head.config.window, head.config.sinks
        self.embed = target.model.get_input_embeddings()
        rows = target.model.get_output_embeddings().weight[head.vocab_ids].detach()  # (K, D)
        self.lm_rows = rows.bfloat16() if rows.device.type == "cpu" and cpu_native_bf16() else rows
        self.vocab = target.vocab_size
        c = head.config
        empty = torch.zeros(1, c.num_kv_heads, 0, c.head_dim, dtype=head.k_proj.weight.dtype)
        self.keys, self.values = empty, empty.clone()  # the draft's own cache: sinks + window, rotated keys
        self.positions = torch.zeros(0, dtype=torch.long)  # the position of each cached key
        self.fed = 0  # context positions 0..fed-1 have passed through the draft (their keys kept or dropped)
        self.target_cache = None  # a weak reference to the target's cache (read, never held: not the draft's memory)
        self.committed = 0  # positions the target's cache holds (the last `Feedback.committed`)

    WEIGHT_TENSORS = ("lm_rows",)

    def bytes_per_position(self) -> int:
        return 0  # the draft's cache is a window plus sinks: constant, whatever the context's length

    def cache_positions(self) -> int:
        return self.keys.shape[2]

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        full = torch.full((out.shape[0], self.vocab), -torch.inf)
        full[:, self.head.vocab_ids] = F.linear(out.to(self.lm_rows.dtype), self.lm_rows).float()
        return full

    def _keep(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append (k, v) of the next positions to the draft's cache; keep the sinks and the last `window`."""
        keys, values = torch.cat([self.keys, k], 2), torch.cat([self.values, v], 2)
        total = self.fed + k.shape[2]  # positions seen once these are in
        positions = torch.cat([self.positions, torch.arange(self.fed, total)])
        if keys.shape[2] > self.sinks + self.window:
            keep = torch.cat([torch.arange(self.sinks), torch.arange(keys.shape[2] - self.window, keys.shape[2])])
            keys, values, positions = keys[:, :, keep], values[:, :, keep], positions[keep]
        self.keys, self.values, self.positions, self.fed = keys, values, positions, total

    def _visible(self, position: int) -> torch.Tensor:
        """Which cached keys a query at `position` sees: the sinks and the `window` positions before it."""
        return (self.positions < self.sinks) | (self.positions >= position - self.window)

    def _target_kv(self, n: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The target's last-layer keys and values of context[:n - 1], which its cache holds after every pass
        (`Feedback`); None before the first (a one-token prompt has no prefill)."""
        cache = self.target_cache() if self.target_cache is not None else None
        if cache is None or self.committed == 0:
            return None
        if self.committed != n - 1:
            raise RuntimeError(f"the target's cache holds {self.committed} positions; a context of {n} needs {n - 1}")
        layer = cache.layers[-1]
        return layer.keys[:, :, :n - 1], layer.values[:, :, :n - 1]

    @torch.inference_mode()
    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
        t0 = time.perf_counter()
        n = len(context)
        target_kv = self._target_kv(n)
        if target_kv is None:  # no target keys yet (a one-token prompt): no draft this round
            return Draft(DraftTree(), seconds=time.perf_counter() - t0)
        if self.fed > n - 1:
            raise RuntimeError(f"the draft has fed {self.fed} positions, the context has {n}")
        if self.fed < n - 1:  # committed tokens not yet in the draft's cache: their keys only
            k, v = self.head.self_keys(self.embed(torch.tensor(context[self.fed:n - 1]))[None],
                                       torch.arange(self.fed, n - 1))
            self._keep(k, v)
        node_out: dict[int, torch.Tensor] = {}
        tree_kv: list[tuple[torch.Tensor, torch.Tensor]] = []

        def expand(tree: DraftTree, frontier: list[int]) -> torch.Tensor:
            if frontier == [ROOT]:  # the last context token, which the target has not read yet
                ids = torch.tensor(context[-1:])
                mask = torch.cat([self._visible(n - 1), torch.ones(1, dtype=torch.bool)])[None]
                out, kv = self.head(self.embed(ids)[None], torch.tensor([n - 1]), target_kv,
                                    (self.keys, self.values), mask)
                self._keep(*kv)
                node_out[ROOT] = out[0, -1]
                return self._logits(out[0, -1:])
            depths = tree.depths()
            fed = sum(kv[0].shape[2] for kv in tree_kv)
            assert frontier == list(range(fed, fed + len(frontier))), frontier
            ids = torch.tensor([tree.tokens[j] for j in frontier])
            positions = torch.tensor([n - 1 + depths[j] for j in frontier])
            cached = self.keys.shape[2]
            mask = torch.zeros(len(frontier), cached + fed + len(frontier), dtype=torch.bool)
            for row, j in enumerate(frontier):
                mask[row, :cached] = self._visible(int(positions[row]))
                while j != ROOT:  # self and ancestors
                    mask[row, cached + j] = True
                    j = tree.parents[j]
            past = (torch.cat([self.keys] + [kv[0] for kv in tree_kv], 2),
                    torch.cat([self.values] + [kv[1] for kv in tree_kv], 2))
            out, kv = self.head(self.embed(ids)[None], positions, target_kv, past, mask)
            tree_kv.append(kv)
            return self._logits(out[0])

        draft = grow_tree(expand, plan, temperature, generator)
        draft.info |= {"draft_cache_positions": self.keys.shape[2], "target_cache_positions": n - 1}
        draft.seconds = time.perf_counter() - t0
        return draft

    def observe(self, feedback: Feedback) -> None:
        """Note the target's cache and what it holds (`Feedback.committed`: after a prefill or a verification, the
        context but its last token); nothing else to learn: the draft's own keys depend on the tokens alone."""
        if feedback.cache is not None:
            self.target_cache = weakref.ref(feedback.cache)
            self.committed = feedback.committed


def longspec_drafter(lm, window: int = 0) -> LongSpecDrafter:
    folder = HEADS.get(lm.name)
    if folder is None:
        raise ValueError(f"drafter=longspec needs a draft trained for the target; there is one for "
                         f"{', '.join(sorted(HEADS))}, not for {lm.name!r}")
    return LongSpecDrafter(lm, load_head(folder, lm.model.dtype), window)


@DRAFTERS.register("longspec", help="LongSpec: a one-layer draft with a constant-size cache (sliding window + sinks) "
                                    "that reads the long context through the target's last-layer keys (smollm2-135m)",
                   params=LongSpecParams, default_draft_length=5,
                   papers=(bib.YANG_2025_LONGSPEC, bib.DU_2024_GLIDE, bib.XIAO_2024_SINKS))
def _longspec_drafter(lm, params: SpeculativeParams) -> Drafter:
    return longspec_drafter(lm, params.own.window)
