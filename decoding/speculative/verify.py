"""Lossless verification of a draft tree against the target's distributions (pure functions).

Papers followed
    Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
    Chen et al. 2023, "Accelerating Large Language Model Decoding with
    Speculative Sampling" (accept x with
    probability min(1, p(x)/q(x)); on rejection sample norm(max(0, p - q)); a bonus token from p
    when every draft token was accepted);
    Miao et al. 2024, "SpecInfer" (multi-candidate verification of a token tree: on rejection of
    a child, update the residual and try its siblings);
    Chen et al. 2024, "Sequoia" (siblings drawn without replacement: after a rejection the draft
    distribution drops the rejected token and is renormalised);
    Jeon et al. 2024, "Recursive Speculative Decoding: Accelerating LLM Inference via Sampling
    Without Replacement" (RSD): that combination, sibling drafts sampled without replacement and
    verified by recursive rejection sampling, is what rule "rsd" (the default) implements;
    Sun et al. 2023, "SpecTr: Fast Speculative Decoding via Optimal Transport": rule "spectr", the
    k-sequential selection (K-SEQ) over k siblings drawn i.i.d. (with replacement) from q.

The two rules at a node with k sampled children x_1..x_k
    rsd     try x_i in turn, accepting it with probability min(1, p_i(x_i) / q_i(x_i)); after a
            rejection p_(i+1) = norm(max(0, p_i - q_i)) and q_(i+1) = q_i without x_i, renormalised;
            all rejected: sample p_(k+1).
    spectr  rho* in [1, k] solves 1 - (1 - beta(rho))^k = rho * beta(rho), beta(rho) = sum min(q, p / rho)
            (the probability that one draft is accepted); try x_i in turn, accepting it with
            probability min(1, p(x_i) / (rho* q(x_i))), p and q fixed; all rejected (probability
            (1 - beta)^k): sample the residual
                p_res = (p - min(q, p / rho) * (1 - (1 - beta)^k) / beta) / (1 - beta)^k,
            which is what makes the output exactly p (at rho*, norm(max(0, p - rho* q))). k = 1 gives
            rho* = 1: plain speculative sampling, like rsd.

Glossary
    node      one drafted token in the tree; its parent is another node or the root (-1), which
              stands for the last token already in the context.
    q         the draft distribution a node's token was drawn from (shared by its siblings, drawn
              without replacement under rule rsd, i.i.d. under rule spectr); `None` means the drafter
              chose it deterministically (retrieval drafters, top-k trees): a point mass, q(x) = 1.
              Deterministic children are verified as under rsd whatever the rule.
    p         the target's distribution at a node's parent position (temperature applied).
    residual  what the target samples from after rejections: norm(max(0, p - q)), updated per
              rejected sibling (rsd); p_res above (spectr).
    rho       SpecTr's acceptance scale: rho* >= 1 lowers each draft's acceptance so that k tries
              together stay lossless.
    bonus     the extra token sampled from p at an accepted leaf; correction / residual: the extra
              token after a rejection (greedy / sampling).

Greedy verification (temperature 0) accepts a child iff it is the target's argmax, so the
output equals the target's greedy output exactly, whatever the rule. Sampling verification keeps
the output distribution equal to the target's, for any draft distributions and either rule (tested
statistically); `decoding.speculative.coupling` computes both rules' joints exactly for one position.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field

import torch

from decoding.lm import tree_depths

ROOT = -1
RULES = ("rsd", "spectr")  # how sampled siblings are drawn and verified (see the module docstring)
RHO_STEPS = 60  # bisection steps for SpecTr's rho* within its segment (it shrinks by 2^-60)


@dataclass
class DraftTree:
    """Drafted tokens as a tree (nodes in creation order: a parent comes before its children)."""

    tokens: list[int] = field(default_factory=list)  # node -> token id
    parents: list[int] = field(default_factory=list)  # node -> parent node, ROOT for the context
    q_token: list[float] = field(default_factory=list)  # node -> draft probability of its token (1 if deterministic)
    sibling_q: dict[int, torch.Tensor] = field(default_factory=dict)  # parent -> (V,) q its children were drawn from
    rule: str = "rsd"  # "rsd": sampled siblings drawn without replacement; "spectr": drawn i.i.d. (see RULES)

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

    def is_chain(self) -> bool:
        """Each node the only child of the one before (verified through the plain causal path)."""
        return all(p == i - 1 for i, p in enumerate(self.parents))

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
    rho: dict[int, float] = field(default_factory=dict)  # parent -> SpecTr's rho* where its children were tried


def verify_tree(tree: DraftTree, target_probs: torch.Tensor, generator: torch.Generator | None, greedy: bool) -> Verdict:
    """Walk the tree from the root, accepting at most one child per level.

    target_probs: (n + 1, V); row 0 is p at the root (the context), row i + 1 is p after node i.
    """
    assert target_probs.shape[0] == len(tree) + 1
    assert tree.rule in RULES, tree.rule
    node, accepted, visits, rhos = ROOT, [], [], {}
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
                return Verdict(accepted, choice, "correction" if kids else "bonus", visits, rhos)
            accepted.append(match)
            node = match
            continue
        if tree.rule == "spectr" and kids and node in tree.sibling_q:
            match, residual, rhos[node] = _k_sequential(tree, node, kids, p, generator, visits)
        else:
            match, residual = _try_children(tree, node, kids, p, generator, visits)
        if match is None:
            kind = "residual" if kids else "bonus"
            if generator is not None:  # draw where the generator lives (a CPU one cannot draw for CUDA tensors)
                residual = residual.to(generator.device)
            token = int(torch.multinomial(residual, 1, generator=generator))
            return Verdict(accepted, token, kind, visits, rhos)
        accepted.append(match)
        node = match


def _try_children(tree, node, kids, p, generator, visits):
    """SpecInfer/Sequoia/RSD multi-candidate step; returns (accepted child or None, residual p)."""
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


def _k_sequential(tree, node, kids, p, generator, visits):
    """SpecTr's K-SEQ over k children drawn i.i.d. from q; returns (accepted child or None, p_res, rho*)."""
    q = tree.sibling_q[node].double()
    rho = spectr_rho(p, q, len(kids))
    for k in kids:
        x = tree.tokens[k]
        qx = q[x].item()
        accept_prob = min(1.0, p[x].item() / (rho * qx)) if qx > 0 else 0.0
        u = torch.rand((), generator=generator, dtype=torch.float64).item()
        ok = u < accept_prob
        visits.append(Visit(k, accept_prob, u, ok))
        if ok:
            return k, p, rho
    return None, spectr_residual(p, q, len(kids), rho), rho


def spectr_beta(p: torch.Tensor, q: torch.Tensor, rho: float) -> float:
    """beta(rho) = sum min(q, p / rho): the probability that one draft from q is accepted at scale rho."""
    return torch.minimum(q, p / rho).sum().item()


def _tries(beta: float, k: int) -> float:
    """(1 - (1 - beta)^k) / beta = sum_(j < k) (1 - beta)^j, also at beta = 0 (where it is k); in closed form
    (expm1/log1p keep it exact to rounding for a tiny beta), as the bisection calls it 60 times a node."""
    if beta <= 0.0:
        return float(k)
    if beta >= 1.0:
        return 1.0
    return -math.expm1(k * math.log1p(-beta)) / beta


def spectr_rho(p: torch.Tensor, q: torch.Tensor, k: int) -> float:
    """SpecTr's rho*: the smallest rho in [1, k] with 1 - (1 - beta(rho))^k <= rho * beta(rho).

    Below rho* the residual would need negative mass; above it acceptance only falls (beta decreases
    in rho), so rho* maximises the probability 1 - (1 - beta)^k that some draft is accepted.
    beta(rho) = Q + P / rho between consecutive ratios p(x)/q(x) (Q: q mass of the tokens whose ratio
    is at least rho, P: p mass of the others), so one sort finds the segment holding rho* and a scalar
    bisection finds rho* in it, returning the feasible end (the residual stays a distribution).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be an integer >= 1, got {k!r}")
    p, q = p.double(), q.double()
    keep = q > 0  # tokens q never drafts add nothing to beta
    ratios, order = (p[keep] / q[keep]).sort()  # (M,) where min(q, p / rho) switches from q to p / rho
    zero = torch.zeros(1, dtype=torch.float64, device=p.device)
    p_below = torch.cat([zero, p[keep][order].cumsum(0)])  # (M + 1,) p mass of the first j ratios
    q_from = q[keep][order].sum() - torch.cat([zero, q[keep][order].cumsum(0)])  # (M + 1,) q mass of the rest
    knots = torch.cat([zero + 1, ratios[(ratios > 1) & (ratios < k)], zero + k])  # ascending; rho = k is feasible
    j = torch.searchsorted(ratios, knots)  # tokens with ratio < knot
    beta = q_from[j] + p_below[j] / knots  # (knots,)
    tries = torch.stack([(1 - beta) ** e for e in range(k)]).sum(0)  # (knots,) as `_tries`
    first = int((tries <= knots).to(torch.uint8).argmax())  # the first feasible knot (feasibility is monotone)
    if first == 0:
        return 1.0
    low, high = knots[first - 1].item(), knots[first].item()
    inside = int(torch.searchsorted(ratios, knots[first - 1], right=True))  # ratios below every rho in (low, high)
    big_q, big_p = q_from[inside].item(), p_below[inside].item()
    for _ in range(RHO_STEPS):
        mid = (low + high) / 2
        low, high = (low, mid) if _tries(big_q + big_p / mid, k) <= mid else (mid, high)
    return high


def spectr_residual(p: torch.Tensor, q: torch.Tensor, k: int, rho: float) -> torch.Tensor:
    """SpecTr's residual after k rejected i.i.d. drafts: p_res = (p - min(q, p/rho) * T) / (1 - beta)^k with
    T = (1 - (1 - beta)^k) / beta, the chance that a token x comes out of the k tries being
    min(q(x), p(x)/rho) * T. Falls back to p when nothing is left (then every try is accepted)."""
    p, q = p.double(), q.double()
    beta = spectr_beta(p, q, rho)
    r = (p - torch.minimum(q, p / rho) * _tries(beta, k)).clamp(min=0)  # >= 0 up to rounding for rho >= rho*
    total = r.sum()
    return r / total if total > 0 else p.clone()


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)); falls back to p when p <= q everywhere (then p == q and nothing is rejected)."""
    r = (p - q).clamp(min=0)
    total = r.sum()
    return r / total if total > 0 else p.clone()


def _point_mass(p: torch.Tensor, x: int) -> torch.Tensor:
    q = torch.zeros_like(p)
    q[x] = 1.0
    return q
