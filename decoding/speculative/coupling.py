"""Verification rules as couplings: the exact joint law of (drafts, output) at ONE position (pure functions).

A lossless verification rule is a coupling: the drafts follow the draft law, the output follows the
target's p, and the rule decides how the two are tied. Its acceptance is P(output is one of the drafts).
Computed exactly (by enumerating every draft tuple) for a small vocabulary:

    maximal_coupling   Leviathan et al. 2023 / Chen et al. 2023, speculative sampling with one draft:
                       the maximal coupling of q and p, acceptance sum min(p, q), the most any rule
                       with one draft can reach.
    rsd_coupling       SpecInfer (Miao et al. 2024) with k siblings drawn without replacement (Sequoia,
                       Chen et al. 2024), i.e. Recursive Speculative Decoding (Jeon et al. 2024): rule
                       "rsd" of `decoding.speculative.verify`, step for step.
    spectr_coupling    SpecTr (Sun et al. 2023), k drafts i.i.d. from q and the k-sequential selection
                       (K-SEQ): rule "spectr", with the same rho* and residual.
    mec_coupling       a minimum-entropy coupling of q and p: the greedy algorithm of Kocaoglu et al.
                       2017, "Entropic Causal Inference" (analysed by Cicalese et al. 2019, within one bit
                       of the minimum). Lossless too (draw x from q, then the output from the joint's row
                       x), but it makes the output as predictable from the draft as possible, not as
                       often equal to it: a contrast, not a rule the strategy runs. It is MEC-B without a
                       bottleneck (`decoding.speculative.mecb`, Ebrahimi, Chen and Khisti 2024).

Glossary
    V             the (small) vocabulary; p, q are (V,) distributions (target, draft) over it.
    k             drafts per position; the rows of `joint` are the draft tuples, in `drafts` order.
    draft law     q for one draft; q^k (i.i.d., spectr); sequential draws without replacement (rsd:
                  P(x_1..x_k) = prod q(x_i) / (1 - q(x_1) - ... - q(x_(i-1)))).
    acceptance    P(output in drafts): the chance the target keeps a drafted token.
    matched       a (V, V) picture of the joint: P(D = x, output = y) with D the draft equal to the
                  output when there is one, else the first draft. Its diagonal sums to the
                  acceptance, its columns to p; with one draft it is the joint itself.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from decoding.speculative.verify import residual_distribution, spectr_residual, spectr_rho

MAX_ENUMERATED = 200_000  # draft tuples times V: the largest joint computed exactly
RULE_NAMES = {"maximal": "speculative sampling (maximal coupling)", "rsd": "RSD / SpecInfer (without replacement)",
              "spectr": "SpecTr (K-SEQ, i.i.d.)", "mec": "minimum-entropy coupling (greedy)"}


@dataclass(frozen=True)
class Coupling:
    rule: str  # "maximal", "rsd", "spectr" or "mec" (RULE_NAMES)
    k: int  # drafts (rsd: fewer when q has fewer tokens than k)
    drafts: torch.Tensor  # (N, k) the draft tuples, one per row of `joint`
    draft_law: torch.Tensor  # (N,) probability of each draft tuple
    joint: torch.Tensor  # (N, V) P(drafts = row, output = column)
    rho: float | None = None  # SpecTr's rho*

    @property
    def output(self) -> torch.Tensor:
        """(V,) the output's law: p for every lossless rule."""
        return self.joint.sum(0)

    @property
    def hits(self) -> torch.Tensor:
        """(N, V) True where the output token is one of the row's drafts."""
        return torch.zeros(self.joint.shape, dtype=torch.bool).scatter_(1, self.drafts, True)

    @property
    def acceptance(self) -> float:
        """P(output is one of the drafts)."""
        return self.joint[self.hits].sum().item()

    @property
    def matched(self) -> torch.Tensor:
        """(V, V) P(D = x, output = y), D the draft equal to the output if any, else the first draft."""
        hits = self.hits
        out = torch.diag((self.joint * hits).sum(0))  # the output hit a draft: D is that draft
        return out.index_add_(0, self.drafts[:, 0], self.joint * ~hits)  # no hit: D is the first draft

    @property
    def entropy_bits(self) -> float:
        """H(drafts, output) in bits."""
        return entropy_bits(self.joint)


def entropy_bits(probs: torch.Tensor) -> float:
    m = probs[probs > 0].double()
    return -(m * m.log2()).sum().item()


def _check(p: torch.Tensor, q: torch.Tensor, k: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    p, q = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(q, dtype=torch.float64)
    for name, d in (("p", p), ("q", q)):
        if d.dim() != 1 or d.numel() < 1 or (d < 0).any() or abs(d.sum().item() - 1) > 1e-6:
            raise ValueError(f"`{name}` must be a 1-D probability vector summing to 1, got {d.tolist()!r}")
    if p.shape != q.shape:
        raise ValueError(f"`p` and `q` must cover the same vocabulary, got {p.numel()} and {q.numel()} entries")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be an integer >= 1, got {k!r}")
    if p.numel() ** k * p.numel() > MAX_ENUMERATED:
        raise ValueError(f"V^k * V = {p.numel() ** k * p.numel()} is too many to enumerate (at most "
                         f"{MAX_ENUMERATED}); use fewer tokens or a smaller `k`")
    return p / p.sum(), q / q.sum()


def _singles(vocab: int) -> torch.Tensor:
    return torch.arange(vocab)[:, None]  # (V, 1): one draft per row


def maximal_coupling(p, q) -> Coupling:
    """Speculative sampling: accept x ~ q with probability min(1, p(x)/q(x)), else sample norm(max(0, p - q))."""
    p, q = _check(p, q)
    overlap = torch.minimum(p, q)  # (V,)
    joint = torch.diag(overlap) + torch.outer(q - overlap, residual_distribution(p, q))  # (V, V)
    return Coupling("maximal", 1, _singles(p.numel()), q, joint)


def spectr_coupling(p, q, k: int) -> Coupling:
    """SpecTr's K-SEQ over k i.i.d. drafts, exactly as `verify` runs it: every tuple of V^k."""
    p, q = _check(p, q, k)
    vocab = p.numel()
    rho = spectr_rho(p, q, k)
    accept = torch.where(q > 0, (p / (rho * q)).clamp(max=1), torch.zeros_like(p))  # (V,)
    residual = spectr_residual(p, q, k, rho)
    tuples = torch.tensor(list(itertools.product(range(vocab), repeat=k)), dtype=torch.long)  # (N, k), N = V^k
    law = q[tuples].prod(-1)  # (N,)
    a = accept[tuples]  # (N, k)
    reach = torch.cumprod(torch.cat([torch.ones(len(tuples), 1, dtype=torch.float64), 1 - a], -1), -1)  # (N, k + 1)
    joint = torch.zeros(len(tuples), vocab, dtype=torch.float64)  # (N, V)
    joint.scatter_add_(1, tuples, law[:, None] * reach[:, :k] * a)  # accepted at try i
    joint += (law * reach[:, k])[:, None] * residual  # all k rejected
    return Coupling("spectr", k, tuples, law, joint, rho)


def rsd_coupling(p, q, k: int) -> Coupling:
    """Recursive rejection over k drafts drawn without replacement, exactly as `verify` runs it (rule rsd)."""
    p, q = _check(p, q, k)
    vocab = p.numel()
    k = min(k, int((q > 0).sum()))  # Gumbel-top-k draws no more tokens than q has
    drafts, laws, rows = [], [], []

    def walk(prefix: tuple, law: float, reach: float, p_now: torch.Tensor, q_now: torch.Tensor, out: torch.Tensor):
        if len(prefix) == k:
            drafts.append(prefix), laws.append(law), rows.append(out + reach * p_now)
            return
        p_next = residual_distribution(p_now, q_now)  # after a rejection here, whichever token it was
        for x in range(vocab):
            qx = q_now[x].item()
            if qx <= 0:
                continue
            a = min(1.0, p_now[x].item() / qx)
            q_next = q_now.clone()
            q_next[x] = 0.0
            q_next = q_next / q_next.sum() if q_next.sum() > 0 else q_next
            hit = out.clone()
            hit[x] += reach * a
            walk(prefix + (x,), law * qx, reach * (1 - a), p_next, q_next, hit)

    walk((), 1.0, 1.0, p, q, torch.zeros(vocab, dtype=torch.float64))
    law = torch.tensor(laws, dtype=torch.float64)  # (N,)
    return Coupling("rsd", k, torch.tensor(drafts, dtype=torch.long), law, law[:, None] * torch.stack(rows))


def greedy_coupling(a, b) -> torch.Tensor:
    """(len(a), len(b)) the greedy minimum-entropy coupling of two distributions (Kocaoglu et al. 2017): repeatedly
    pair the largest remaining mass of `a` with the largest remaining mass of `b` and move their minimum into
    the joint; at most len(a) + len(b) - 1 cells. Rows sum to a, columns to b (the marginals are exact)."""
    rest_a = torch.as_tensor(a, dtype=torch.float64).tolist()  # plain floats: fast on a few tokens
    rest_b = torch.as_tensor(b, dtype=torch.float64).tolist()
    joint = [[0.0] * len(rest_b) for _ in rest_a]  # (len(a), len(b))
    for _ in range(len(rest_a) + len(rest_b)):
        x = max(range(len(rest_a)), key=rest_a.__getitem__)
        y = max(range(len(rest_b)), key=rest_b.__getitem__)
        mass = min(rest_a[x], rest_b[y])
        if mass <= 1e-15:
            break
        joint[x][y] += mass
        rest_a[x] -= mass
        rest_b[y] -= mass
    return torch.tensor(joint, dtype=torch.float64)


def mec_coupling(p, q) -> Coupling:
    """Greedy minimum-entropy coupling (Kocaoglu et al. 2017) of the draft q and the target p: `greedy_coupling`.
    It is also MEC-B (`decoding.speculative.mecb`) with a rate bound R >= H(q): no bottleneck."""
    p, q = _check(p, q)
    return Coupling("mec", 1, _singles(p.numel()), q, greedy_coupling(q, p))


def couplings(p, q, k: int) -> list[Coupling]:
    """The four rules at one position: the two one-draft couplings and the two k-draft rules."""
    return [maximal_coupling(p, q), rsd_coupling(p, q, k), spectr_coupling(p, q, k), mec_coupling(p, q)]


def acceptance_by_k(p, q, ks=(1, 2, 3, 4)) -> dict[str, list[float]]:
    """Acceptance of the multi-draft rules for each k in `ks` ({"rsd": [...], "spectr": [...]})."""
    return {"rsd": [rsd_coupling(p, q, k).acceptance for k in ks],
            "spectr": [spectr_coupling(p, q, k).acceptance for k in ks]}
