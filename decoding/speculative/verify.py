"""Lossless verification of a draft tree against the target's distributions (pure functions).

Papers followed
    Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
    Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling" (accept x with
    probability min(1, p(x)/q(x)); on rejection sample norm(max(0, p - q)); a bonus token from p
    when every draft token was accepted);
    Miao et al. 2024, "SpecInfer" (multi-candidate verification of a token tree: on rejection of
    a child, update the residual and try its siblings);
    Chen et al. 2024, "Sequoia" (siblings drawn without replacement: after a rejection the draft
    distribution drops the rejected token and is renormalised).

Glossary
    node      one drafted token in the tree; its parent is another node or the root (-1), which
              stands for the last token already in the context.
    q         the draft distribution a node's token was drawn from (shared by its siblings, which
              were drawn without replacement); `None` means the drafter chose it deterministically
              (retrieval drafters, top-k trees): a point mass, q(x) = 1.
    p         the target's distribution at a node's parent position (temperature applied).
    residual  what the target samples from after rejections: norm(max(0, p - q)), updated per
              rejected sibling.
    bonus     the extra token sampled from p at an accepted leaf; correction / residual: the extra
              token after a rejection (greedy / sampling).

Greedy verification (temperature 0) accepts a child iff it is the target's argmax, so the
output equals the target's greedy output exactly. Sampling verification keeps the output
distribution equal to the target's, for any draft distributions (tested statistically).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from decoding.lm import tree_depths

ROOT = -1


@dataclass
class DraftTree:
    """Drafted tokens as a tree (nodes in creation order: a parent comes before its children)."""

    tokens: list[int] = field(default_factory=list)  # node -> token id
    parents: list[int] = field(default_factory=list)  # node -> parent node, ROOT for the context
    q_token: list[float] = field(default_factory=list)  # node -> draft probability of its token (1 if deterministic)
    sibling_q: dict[int, torch.Tensor] = field(default_factory=dict)  # parent -> (V,) q its children were drawn from (without replacement)

    def add(self, parent: int, token: int, q_token: float = 1.0) -> int:
        assert parent == ROOT or 0 <= parent < len(self.tokens), "a parent must exist before its children"
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        self.q_token.append(float(q_token))
        return len(self.tokens) - 1

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == node]

    def depths(self) -> list[int]:
        """1 for the root's children."""
        return tree_depths(self.parents)

    def path(self, node: int) -> list[int]:
        """Nodes from the root's child down to `node`."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


@dataclass
class Visit:
    node: int  # the child that was tried
    accept_prob: float  # min(1, p_res(x) / q_res(x)); 1/0 for greedy agreement/disagreement
    u: float | None  # the uniform draw (None for greedy)
    accepted: bool


@dataclass
class Verdict:
    accepted: list[int]  # accepted nodes, root to deepest
    extra_token: int  # bonus / residual / correction token from the target
    extra_kind: str  # "bonus" (all along the path accepted, leaf reached) or "residual" / "correction"
    visits: list[Visit]  # every child tried, in order


def verify_tree(tree: DraftTree, target_probs: torch.Tensor, generator: torch.Generator | None, greedy: bool) -> Verdict:
    """Walk the tree from the root, accepting at most one child per level.

    target_probs: (n + 1, V); row 0 is p at the root (the context), row i + 1 is p after node i.
    """
    assert target_probs.shape[0] == len(tree) + 1
    node, accepted, visits = ROOT, [], []
    while True:
        p = target_probs[node + 1].double()  # (V,)
        kids = tree.children(node)
        if greedy:
            choice = int(p.argmax())
            match = next((k for k in kids if tree.tokens[k] == choice), None)
            for k in kids:
                visits.append(Visit(k, float(k == match), None, k == match))
                if k == match:
                    break
            if match is None:
                return Verdict(accepted, choice, "correction" if kids else "bonus", visits)
            accepted.append(match)
            node = match
            continue
        match, residual = _try_children(tree, node, kids, p, generator, visits)
        if match is None:
            kind = "residual" if kids else "bonus"
            return Verdict(accepted, int(torch.multinomial(residual, 1, generator=generator)), kind, visits)
        accepted.append(match)
        node = match


def _try_children(tree, node, kids, p, generator, visits):
    """SpecInfer/Sequoia multi-candidate step; returns (accepted child or None, residual p)."""
    q = tree.sibling_q.get(node)
    q = q.double().clone() if q is not None else None
    for k in kids:
        x = tree.tokens[k]
        qx = q[x].item() if q is not None else 1.0  # deterministic child: a point mass
        accept_prob = min(1.0, p[x].item() / qx) if qx > 0 else 0.0
        u = torch.rand((), generator=generator, dtype=torch.float64).item()
        ok = u < accept_prob
        visits.append(Visit(k, accept_prob, u, ok))
        if ok:
            return k, p
        if q is not None:
            p = residual_distribution(p, q)
            q = q.clone()
            q[x] = 0.0  # siblings were drawn without replacement
            q = q / q.sum() if q.sum() > 0 else q
        else:
            p = residual_distribution(p, _point_mass(p, x))
    return None, p


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)); falls back to p when p <= q everywhere (then p == q and nothing is rejected)."""
    r = (p - q).clamp(min=0)
    total = r.sum()
    return r / total if total > 0 else p.clone()


def _point_mass(p: torch.Tensor, x: int) -> torch.Tensor:
    q = torch.zeros_like(p)
    q[x] = 1.0
    return q
