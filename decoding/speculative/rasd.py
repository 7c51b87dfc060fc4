"""RASD: one draft tree per round from a draft model AND retrieval (prompt lookup), fused and pruned.

Paper followed: Quan et al. 2025, "RASD: Retrieval-Augmented Speculative Decoding": a model drafter
is weak where the text copies from the context and retrieval is useless where it does not; RASD
builds both trees each round, prunes the retrieved candidates by the draft model's own belief at
the root (a candidate whose first token the draft model ranks below its top `width * 2` is dropped),
and fuses what is left into the model's tree by longest prefix matching: a retrieved sequence
follows the tree's nodes while its tokens agree and grows a new branch where they part. The
target then verifies the fused tree in one pass, as for any drafter.

Staying lossless when sampling (temperature > 0): a node's sampled children must be draws from the
drafter's q (without replacement, RSD) and nothing else, or the multi-draft check would be biased.
So at temperature > 0 a retrieved sequence joins only where it adds no sibling to sampled children:
it must run down the model tree to a LEAF and then continues below it as a chain of point-mass
drafts (as prompt lookup's own drafts are). At temperature 0 any fusion is exact (greedy
verification accepts a child only if it is the target's argmax), so retrieved branches may also
part from the model tree at inner nodes.

Each round's record (`SpecRound.extra["sources"]`, one per node) says where every draft token came
from: "model", "retrieval" or "both" (a model node a retrieved sequence ran through); the tree view
labels accepted tokens by source on hover.
"""

from __future__ import annotations

import time

import torch

from decoding.speculative.base import Drafter
from decoding.speculative.drafters import Draft, ModelDrafter, TreePlan
from decoding.speculative.retrieval import PromptLookupDrafter
from decoding.speculative.verify import ROOT

PRUNE_FACTOR = 2  # a retrieved sequence survives if its first token is in the draft model's top width * this


class RASDDrafter(Drafter):
    """A model drafter's tree with prompt-lookup sequences fused in (see the module docstring)."""

    def __init__(self, model: ModelDrafter, lookup: PromptLookupDrafter, retrieved: int = 2):
        self.model, self.lookup, self.retrieved = model, lookup, retrieved
        self.name = f"rasd:{model.lm.name}"

    def bytes_per_position(self) -> int:
        return self.model.bytes_per_position()

    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
        t0 = time.perf_counter()
        draft = self.model.propose(context, plan, temperature, generator)
        tree = draft.tree
        sources = ["model"] * len(tree)
        sequences = self.lookup.continuations(context, plan.depth, self.retrieved)
        q_root = draft.q_dists.get(ROOT)
        if q_root is not None:  # pruning by the draft model's belief at the root
            top = set(q_root.topk(min(len(q_root), max(1, plan.width) * PRUNE_FACTOR)).indices.tolist())
            sequences = [seq for seq in sequences if seq[0] in top]
        kids = {ROOT: []}
        for node, parent in enumerate(tree.parents):
            kids.setdefault(parent, []).append(node)
            kids.setdefault(node, [])
        for seq in sequences:
            node, i = ROOT, 0
            while i < len(seq):  # follow the tree while the tokens agree
                nxt = next((c for c in kids[node] if tree.tokens[c] == seq[i]), None)
                if nxt is None:
                    break
                node, i = nxt, i + 1
                if sources[node] == "model":
                    sources[node] = "both"
            if i == len(seq) or (temperature > 0 and kids[node]):
                continue  # nothing new, or (sampling) it would add a sibling to sampled children
            for token in seq[i:]:
                if len(tree) >= plan.budget:
                    break
                new = tree.add(node, token, 1.0)  # a point-mass draft
                kids[node].append(new)
                kids[new] = []
                sources.append("retrieval")
                node = new
        draft.info |= {"sources": sources, "retrieved": len(sequences)}
        draft.seconds = time.perf_counter() - t0
        return draft

    def observe(self, feedback) -> None:
        self.model.observe(feedback)


__all__ = ["PRUNE_FACTOR", "RASDDrafter"]
