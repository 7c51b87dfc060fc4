"""DEER: a masked diffusion LM drafts a whole block in ONE forward pass; the causal target verifies it.

Paper followed: Cheng et al. 2025, "DEER: Draft with Diffusion, Verify with Autoregressive Models"
(arXiv:2512.15176): a diffusion LM drafts a block in one denoising step, so its drafts do not
condition on their own earlier guesses and cost one call per block. Here the drafter is
`tiny-diffusion` for `tiny-ar` (the same tokenizer, trained on the same text): the context's last
tokens and `draft_length` mask tokens go in, and the logits at the masked positions are the block's
draft distributions. The paper also aligns its drafter to the target (continuation distillation,
then a loss weighted towards the first positions); tiny-diffusion has no such training.

Why it stays lossless: the block is drawn from per-position marginals q_d (one pass, every
draft position masked), so the token at depth d is drawn from q_d whatever was drawn before it;
verification judges it against exactly that q_d (`verify_tree` with q_dists[parent] = q_d), which
is speculative sampling's rule for a draft of that law. Greedy drafting takes argmax q_d and
greedy verification keeps the target's greedy text. Trees: every node at depth d - 1 gets its
children from q_d (siblings without replacement, as for any drafter), via `grow_tree`, so the
chain, static and dynamic shapes and the confidence cut-off all work; the block costs one call.

Glossary
    block     the `draft_length` masked positions after the context, filled in one diffusion pass.
    window    the diffusion model sees at most its `max_position_embeddings` positions: the
              context is cut to its last (window - block) tokens.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from decoding.speculative.base import Drafter
from decoding.diffusion.lm import DiffusionLM
from decoding.lm import LM
from decoding.speculative.drafters import Draft, DraftTree, TreePlan, grow_tree

DEFAULT_DRAFT_MODEL = "tiny-diffusion"


class DiffusionDrafter(Drafter):
    """Drafts `plan.depth` positions with one call of a masked diffusion LM (DEER)."""

    def __init__(self, dlm: DiffusionLM):
        self.dlm = dlm
        self.name = f"diffusion:{dlm.name}"
        self.window = dlm.max_length or 512

    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
        t0 = time.perf_counter()
        block = max(1, min(plan.depth, self.window - 1))
        if plan.should_stop():
            return Draft(DraftTree())
        kept = context[-(self.window - block):]
        canvas = torch.tensor(kept + [self.dlm.mask_id] * block)
        logits = self.dlm.logits(canvas)[len(kept):].clone()  # (block, V): row d drafts depth d + 1
        logits[:, self.dlm.mask_id] = float("-inf")  # the mask is no token to propose

        def expand(tree: DraftTree, frontier: list[int]) -> torch.Tensor:
            depth = 0 if frontier[0] < 0 else tree.depths()[frontier[0]]  # the frontier's depth (0 = root)
            return logits[depth].expand(len(frontier), -1)  # (F, V): every parent at that depth gets q_depth

        draft = grow_tree(expand, replace(plan, depth=block), temperature, generator)
        draft.forward_passes = 1  # the whole block came from the one call above
        draft.seconds = time.perf_counter() - t0
        draft.info |= {"diffusion_block": block, "context_used": len(kept)}
        return draft


def diffusion_drafter(target: LM, draft_model: str) -> DiffusionDrafter:
    """The DEER drafter for `target`: `draft_model` (default tiny-diffusion) must be a masked diffusion LM
    with the target's tokenizer (ValueError saying what differs)."""
    from decoding.models import load_model, model_kind

    name = draft_model.strip() or DEFAULT_DRAFT_MODEL
    loaded = load_model(name, device=str(target.loaded.device), dtype=str(target.loaded.dtype).removeprefix("torch."))
    if model_kind(loaded) != "diffusion":
        raise ValueError(f"drafter=diffusion needs a masked diffusion model as `draft_model` (e.g. tiny-diffusion "
                         f"for tiny-ar); {name!r} is causal: use drafter=model for it")
    dlm = DiffusionLM(loaded)
    if dlm.tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise ValueError(f"`draft_model` {name!r} does not share the target's tokenizer; DEER drafts token ids the "
                         f"target verifies, so both need one vocabulary (tiny-diffusion drafts for tiny-ar)")
    return DiffusionDrafter(dlm)


__all__ = ["DEFAULT_DRAFT_MODEL", "DiffusionDrafter", "diffusion_drafter"]
