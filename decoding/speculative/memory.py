"""SpecMemo: speculative decoding under a memory budget (bytes), every part of the footprint counted.

Follows Yildirim and Chen 2025, "SpecMemo: Speculative Decoding is in Your Pocket": model the memory
that speculation costs (weights, the caches, and what each draft token adds to a verification: its
cache entry, its logits row, its draft distribution), derive from a device's budget the largest
candidate tree that fits, and never allocate for more. Here the budget is a parameter of the
speculative strategy (`memory_budget_mb`, 0 = none); the node budget of every round follows from it,
and every round records the bytes each part actually held (measured from the tensors).

Parts (bytes)
    target weights   the target's parameters and buffers
    draft weights    tensors the drafter holds that are not the target's (a draft model, an EAGLE head;
                     0 for prompt lookup and early exit, which read the target's own)
    target cache     keys and values of every layer for every position in the verification pass:
                     2 x layers x kv heads x head dim x itemsize per position
    draft cache      the drafter's own caches (a draft model's keys and values, EAGLE's features)
    verify logits    the verification pass's float32 logits: one row of V for the root and one per node, and
                     for a drafter that reads the pass's rows (EAGLE, DEL, Token Recycling) one per pending token
                     (the prompt's last token, then the previous round's extra token: the accepted ones stay cached)
    verify probs     the float32 probabilities verification judges with: one row per node + the root
    draft q          the float32 draft distributions q, one row per parent the drafter proposed at

Planning: for a run of at most `max_context` positions, the bytes that do not depend on the tree
(weights, both caches at full length, the root's rows) are fixed; every node adds at most
`per_node` (its cache entries, a logits, a probs and a q row). The node budget is the largest n with
fixed + n x per_node <= budget; a budget below `fixed` (the lower bound) is refused with the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

FLOAT32 = 4
MB = 1 << 20


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def module_tensors(module: nn.Module) -> list[torch.Tensor]:
    """Parameters and buffers, each storage once (tied weights count once)."""
    seen, out = set(), []
    for t in [*module.parameters(), *module.buffers()]:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            out.append(t)
    return out


def kv_bytes_per_position(config, dtype: torch.dtype) -> int:
    """Keys and values of one position across every layer of a transformers decoder config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()


def cache_bytes(cache) -> int:
    """Bytes of the keys and values a transformers cache holds now."""
    if cache is None:
        return 0
    total = 0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def drafter_bytes(drafter, target: frozenset[int], weights: bool = True) -> dict[str, int]:
    """What the drafter holds beyond the target: {"draft weights": ..., "draft cache": ...}, measured.

    Walks the drafter's attributes (and the drafters, dicts and lists inside it): modules and tensors
    named in its `WEIGHT_TENSORS` are weights unless they share storage with the target; caches
    (transformers caches, other tensors) are the draft cache. `target`: the target's storages (data_ptr).
    `weights=False` skips modules (weights do not change during a run: measured once, at its start), which
    makes the per-round measurement cheap (walking a model's modules cost ~2 ms a round on tiny-ar)."""
    from transformers import PretrainedConfig, PreTrainedTokenizerBase
    from transformers.cache_utils import Cache

    seen_ptrs: set[int] = set()
    out = {"draft weights": 0, "draft cache": 0}
    weight_names = set(getattr(drafter, "WEIGHT_TENSORS", ()))

    def add(kind: str, tensors) -> None:
        for t in tensors:
            if t.data_ptr() in target or t.data_ptr() in seen_ptrs or t.numel() == 0:
                continue
            seen_ptrs.add(t.data_ptr())
            out[kind] += t.numel() * t.element_size()

    def walk(obj, depth: int, name: str = "", seen: set | None = None) -> None:
        seen = seen if seen is not None else set()
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        if obj is None or isinstance(obj, (str, int, float, bool, torch.device, torch.dtype, PretrainedConfig,
                                           PreTrainedTokenizerBase)):  # no tensors in there
            return
        if isinstance(obj, nn.Module):
            if weights:
                add("draft weights", module_tensors(obj))
        elif isinstance(obj, Cache):
            for layer in getattr(obj, "layers", []):
                add("draft cache", [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                                    if isinstance(t, torch.Tensor)])
        elif isinstance(obj, torch.Tensor):
            add("draft weights" if name in weight_names else "draft cache", [obj])
        elif isinstance(obj, (list, tuple)):
            if obj and isinstance(obj[0], (int, float, str)):  # token ids and the like
                return
            for item in obj:
                walk(item, depth + 1, name, seen)
        elif isinstance(obj, dict):
            for item in obj.values():
                walk(item, depth + 1, name, seen)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            for key, value in vars(obj).items():
                walk(value, depth + 1, key, seen)

    walk(drafter, 0)
    return out


@dataclass(frozen=True)
class Footprint:
    """The sizes that do not change during a run, and the formula for the rest."""

    target_weights: int
    draft_weights: int
    kv_target: int  # bytes per cached position of the target
    kv_draft: int  # bytes the drafter keeps per position (`Drafter.bytes_per_position`: a draft model's keys
    #                and values, EAGLE's features and head cache; 0 for prompt lookup)
    row: int  # one float32 row over the vocabulary
    target: frozenset[int] = field(default=frozenset(), repr=False, compare=False)  # the target's storages

    @classmethod
    def of(cls, lm, drafter) -> "Footprint":
        tensors = module_tensors(lm.model)
        target = frozenset(t.data_ptr() for t in tensors)
        return cls(tensor_bytes(tensors), drafter_bytes(drafter, target)["draft weights"],
                   kv_bytes_per_position(lm.config, lm.model.dtype), drafter.bytes_per_position(),
                   lm.vocab_size * FLOAT32, target)

    def verify_parts(self, past: int, pending: int, nodes: int, parents: int, from_root: bool = True) -> dict[str, int]:
        """The target-side bytes of one verification pass: the cache over past + pending + nodes positions,
        the logits of the root and nodes (`from_root`, a drafter that reads no rows) or of every fed row,
        the probs of the root and nodes, q of `parents`."""
        return {"target weights": self.target_weights, "target cache": self.kv_target * (past + pending + nodes),
                "verify logits": self.row * ((1 if from_root else pending) + nodes), "verify probs": self.row * (1 + nodes),
                "draft q": self.row * parents}

    def fixed(self, max_context: int, prefill_rows: int = 0) -> int:
        """Bytes a run of `max_context` positions needs whatever the tree: the lower bound of the budget
        (weights, both caches full, the root's logits and probs rows, and `prefill_rows` prompt rows of
        logits and probs for a drafter that reads the prompt's rows)."""
        return (self.target_weights + self.draft_weights + (self.kv_target + self.kv_draft) * max_context
                + 2 * (1 + prefill_rows) * self.row)

    @property
    def per_node(self) -> int:
        """The most one draft node adds: its cache entries (target + draft), its logits row, its probs row and a q
        row, and one row more: before issue 45 an accepted node was fed again as a pending token of the next round
        (a second logits row for a drafter that reads rows); it now stays in the target's cache, so the bound is one
        row loose, kept so that preset 28 and the measured budgets keep their numbers."""
        return self.kv_target + self.kv_draft + 4 * self.row

    def node_budget(self, budget: int, max_context: int, prefill_rows: int = 0) -> int:
        """The most draft nodes per round within `budget` bytes; ValueError below the lower bound."""
        floor = self.fixed(max_context, prefill_rows)
        if budget < floor:
            raise ValueError(
                f"`memory_budget_mb` {budget / MB:.2f} MB is below what decoding needs without any draft: "
                f"{floor / MB:.2f} MB (weights {(self.target_weights + self.draft_weights) / MB:.2f} MB, caches at "
                f"{max_context} positions {(self.kv_target + self.kv_draft) * max_context / MB:.2f} MB, the root's "
                f"logits {2 * self.row / MB:.2f} MB); raise the budget or shorten the prompt / max_new_tokens")
        return (budget - floor) // self.per_node


def measured_parts(footprint: Footprint, drafter, lm, cache, logits: torch.Tensor, probs: torch.Tensor,
                   q_dists: dict) -> dict[str, int]:
    """The bytes each part holds during a verification pass, read from the tensors themselves."""
    draft = drafter_bytes(drafter, footprint.target, weights=False)  # the weights were measured at the start
    return {"target weights": footprint.target_weights, "draft weights": footprint.draft_weights,
            "target cache": cache_bytes(cache), "draft cache": draft["draft cache"],
            "verify logits": tensor_bytes([logits]), "verify probs": tensor_bytes([probs]),
            "draft q": tensor_bytes(q_dists.values())}
