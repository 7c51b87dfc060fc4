"""S2D: nested sub-models of one sorted-fine-tuned model draft; the most confident small one speaks.

Paper followed: Kavehzadeh, Pourreza, Valipour, Zhu, Bai, Ghodsi, Chen, Rezagholizadeh 2024, "S2D: Sorted
Speculative Decoding For More Efficient Deployment of Nested Large Language Models" (arXiv 2407.01955).
- Sorted fine-tuning (SoFT): the draft model is trained so that each of its first-k-layer sub-models,
  read through the shared final norm and LM head, predicts the next token (one loss per sub-model,
  equally weighted). `assets/tiny-ar-s2d` is tiny-ar after 40 CPU minutes of it
  (`python -m decoding.training.layerskip --scale uniform --e-scale 1.0`, the model card says more).
- Confidence-based drafting: for each draft position the sub-models are tried from the smallest up;
  the first whose top probability reaches the threshold drafts that position, and when none does the
  largest drafts it. Easy tokens cost a shallow pass, hard ones climb.
- One draft model for several targets: the targets are NOT modified. Here `s2d.draft_model` (default
  tiny-ar-s2d) drafts for any target sharing its tokenizer: tiny-ar (unchanged, as in the paper), or
  tiny-ar-s2d itself (then the sub-models below its full depth draft: self-speculation).

Lossless as every drafter here: the sub-model chosen for a position depends only on the draft logits
there (never on the draw), and the verification uses the q of the sub-model that drafted.

Glossary
    sub-model   the draft model's first k layers with its final norm and LM head (`shallow_view`,
                sharing weights); k runs over `exits`.
    stage       one sub-model with its own KV cache (a `DraftFeed` per propose call); a stage skipped
                at a level feeds the nodes it missed the next time it is asked (its cache lags, its
                output is exact).
    confidence  a level's top draft probability (for a tree: the lowest over the frontier's nodes).
"""

from __future__ import annotations

import time

import torch

from decoding.lm import LM
from decoding.loaded_model import LoadedModel
from decoding.speculative.base import Drafter
from decoding.speculative.drafters import Draft, DraftFeed, ModelDrafter, TreePlan, grow_tree, shallow_view
from decoding.speculative.verify import DraftTree

DEFAULT_DRAFT_MODEL = "tiny-ar-s2d"


class S2DDrafter(Drafter):
    """Confidence-based drafting over the nested sub-models `exits` (ascending) of one model."""

    def __init__(self, draft: LM, exits: list[int], threshold: float, name: str):
        if not exits or exits != sorted(set(exits)) or exits[0] < 1 or exits[-1] > draft.num_layers:
            raise ValueError(f"`exits` must be ascending layer counts in [1, {draft.num_layers}], got {exits}")
        self.exits, self.threshold, self.name = exits, threshold, name
        loaded = draft.loaded
        self.stages = []
        for k in exits:
            model = loaded.model if k == draft.num_layers else shallow_view(loaded.model, k)
            view = LoadedModel(f"{loaded.name}@L{k}", model, loaded.tokenizer, loaded.device, loaded.dtype,
                               loaded.source)
            self.stages.append(ModelDrafter(LM(view), f"s2d@L{k}"))

    def bytes_per_position(self) -> int:
        return sum(stage.bytes_per_position() for stage in self.stages)  # each sub-model keeps its own cache

    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
        t0 = time.perf_counter()
        stages = [DraftFeed(d, context) for d in self.stages]
        chosen: list[int] = []  # the exit that drafted each level
        calls: list[int] = []  # sub-model calls per level (the cascade's climb)
        confidence: list[float] = []

        def expand(tree: DraftTree, frontier: list[int]) -> torch.Tensor:
            for i, stage in enumerate(stages):
                logits = stage.expand(tree, frontier)
                top = torch.softmax(logits.float(), -1).amax(-1).min().item()
                last = i == len(stages) - 1
                if top >= self.threshold or last or plan.should_stop():
                    chosen.append(self.exits[i])
                    calls.append(i + 1)
                    confidence.append(round(top, 4))
                    return logits
            raise AssertionError("unreachable: the last stage always answers")

        draft = grow_tree(expand, plan, temperature, generator)
        for stage in stages:
            stage.finish(context)
        draft.forward_passes = sum(calls)
        draft.seconds = time.perf_counter() - t0
        draft.info |= {"s2d_stages": self.exits, "s2d_exits": chosen, "s2d_calls": calls, "s2d_confidence": confidence}
        return draft
