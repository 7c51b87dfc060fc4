"""Minimum-entropy coupling with a bottleneck (MEC-B): a coupling of two laws through a code of bounded entropy
(pure functions). The Markov coding game that uses it lives in `decoding.speculative.mcg`.

Follows Ebrahimi, Chen and Khisti 2024, "Minimum Entropy Coupling with Bottleneck" (NeurIPS 2024; the entry
`EBRAHIMI_2024` of `decoding.bibliography`). X (law p_X) is encoded into a code T, T is decoded into Y (law
p_Y), and the code's entropy is bounded by a rate R. Their problem (MEC-B):

    maximise I(X;Y)  over the encoder p(t|x) and the decoder q(y|t)
    subject to X -> T -> Y (a Markov chain),  H(T) <= R,  P(X) = p_X,  P(Y) = p_Y.

With R >= H(X) the bottleneck is gone and it is the minimum-entropy coupling of p_X and p_Y (maximising
I(X;Y) = H(X) + H(Y) - H(X,Y) is minimising H(X,Y)). Since I(X;Y) = I(X;T) + I(T;Y) - I(T;X,Y) and
I(T;X,Y) <= H(T) <= R (their Lemma 1), the paper splits it into two problems solved one after the other:

    EBIM (the encoder)  maximise I(X;T) subject to H(T) <= R;
    MEC  (the decoder)  maximise I(T;Y) over the couplings of p_T and p_Y.

EBIM: I(X;T) <= H(T) <= R, with equality exactly when T is a function of X with H(g(X)) = R (their Theorem 1).
`ebim_encoder` is their greedy search over such functions (Algorithm 1): start from T = X; while H(T) > R,
first try merging the two smallest code words (returned if that fits the bound), else merge the two largest
and go on. Its I(X;T) is within h(p_2) of the EBIM optimum, h the binary entropy and p_2 the second largest
mass of p_X (their Theorem 2). Between two such functions the optimum is a stochastic encoder (their Theorem
3); that refinement is not done here, so the trade-off curve is the staircase of the deterministic encoders.
`uniform_quantizer` is the paper's baseline (its Algorithm 5): floor(2^R) runs of consecutive symbols.
The decoder is the greedy minimum-entropy coupling of Kocaoglu et al. 2017 (`coupling.greedy_coupling`).
With a deterministic encoder, I(X;Y) = I(T;Y): all that reaches Y goes through T.

In the coupling view X is the draft (law q) and Y the target's output (law p): the output is still exactly p
(lossless), and R caps how much the output may depend on the draft.

Glossary
    code T        the encoder's output; a deterministic encoder is a partition of X's symbols (a group each).
    rate R        the bound on H(T), in bits.
    encoder       p(x, t), (|X|, |T|): rows sum to p_X.  decoder  p(t, y), (|T|, |Y|): a coupling of p_T and p_Y.
    joint         p(x, y) = sum_t p(x, t) p(t, y) / p_T(t), (|X|, |Y|): rows sum to p_X, columns to p_Y.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from decoding.speculative.coupling import entropy_bits, greedy_coupling

ENCODERS = ("greedy", "uniform")  # the paper's Algorithm 1, and its uniform-quantisation baseline (Algorithm 5)


def mutual_information_bits(joint: torch.Tensor) -> float:
    """I(A;B) = H(A) + H(B) - H(A,B) in bits, from a joint law (rows: A, columns: B)."""
    return entropy_bits(joint.sum(1)) + entropy_bits(joint.sum(0)) - entropy_bits(joint)


def binary_entropy_bits(x: float) -> float:
    return 0.0 if x <= 0 or x >= 1 else -(x * math.log2(x) + (1 - x) * math.log2(1 - x))


def check_distribution(name: str, d) -> torch.Tensor:
    d = torch.as_tensor(d, dtype=torch.float64)
    if d.dim() != 1 or d.numel() < 1 or (d < 0).any() or abs(d.sum().item() - 1) > 1e-6:
        raise ValueError(f"`{name}` must be a 1-D probability vector summing to 1, got {d.tolist()!r}")
    return d / d.sum()


def check_rate(rate) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate >= 0 or math.isinf(rate):
        raise ValueError(f"`rate` must be a number of bits >= 0, got {rate!r}")
    return float(rate)


def groups_encoder(p_x: torch.Tensor, groups: list[list[int]]) -> torch.Tensor:
    """The deterministic encoder whose code word t is the group groups[t]: p(x, t) = p_X(x) if x is in it."""
    enc = torch.zeros(p_x.numel(), len(groups), dtype=torch.float64)  # (|X|, |T|)
    for t, members in enumerate(groups):
        enc[members, t] = p_x[members]
    return enc


def _merge_loss(a: float, b: float) -> float:
    """How much H(T) falls when two code words of mass a and b become one: (a + b) h(a / (a + b))."""
    return 0.0 if a <= 0 or b <= 0 else (a + b) * binary_entropy_bits(a / (a + b))


def ebim_groups(p_x, rate) -> list[list[int]]:
    """The groups of the deterministic EBIM encoder (the paper's Algorithm 1), largest mass first. Symbols of
    probability 0 join the first group (they never occur; the encoder is defined everywhere)."""
    p_x, rate = check_distribution("p_x", p_x), check_rate(rate)
    support = [x for x in range(p_x.numel()) if p_x[x] > 0]
    groups = [[x] for x in support]
    masses = [p_x[x].item() for x in support]
    h = entropy_bits(p_x)
    while h > rate + 1e-12 and len(groups) > 1:
        order = sorted(range(len(masses)), key=lambda i: masses[i])
        small, large = (order[0], order[1]), (order[-1], order[-2])
        if h - _merge_loss(*(masses[i] for i in small)) <= rate + 1e-12:
            pair = small  # the gentlest merge already fits the bound: take it and stop
        else:
            pair = large  # the steepest merge: the next mapping down the search
        h -= _merge_loss(*(masses[i] for i in pair))
        keep, drop = min(pair), max(pair)
        groups[keep] += groups.pop(drop)
        masses[keep] += masses.pop(drop)
    order = sorted(range(len(groups)), key=lambda i: (-masses[i], min(groups[i])))
    out = [sorted(groups[i]) for i in order]
    out[0] = sorted(out[0] + [x for x in range(p_x.numel()) if p_x[x] <= 0])
    return out


def uniform_groups(p_x, rate) -> list[list[int]]:
    """The paper's baseline (Algorithm 5): m = floor(2^R) code words, each a run of ceil(|X| / m) consecutive
    symbols, so H(T) <= log2(m) <= R whatever p_X is."""
    p_x, rate = check_distribution("p_x", p_x), check_rate(rate)
    size = math.ceil(p_x.numel() / min(p_x.numel(), math.floor(2 ** rate)))
    return [list(range(start, min(start + size, p_x.numel()))) for start in range(0, p_x.numel(), size)]


def encoder_groups(p_x, rate, method: str = "greedy") -> list[list[int]]:
    """The deterministic encoder's groups: "greedy" (Algorithm 1) or "uniform" (Algorithm 5)."""
    if method not in ENCODERS:
        raise ValueError(f"`method` must be one of {ENCODERS}, got {method!r}")
    return (ebim_groups if method == "greedy" else uniform_groups)(p_x, rate)


def ebim_encoder(p_x, rate, method: str = "greedy") -> torch.Tensor:
    """(|X|, |T|) the encoder's joint p(x, t): a function of x (Theorem 1's kind), H(T) <= rate."""
    p_x = check_distribution("p_x", p_x)
    enc = groups_encoder(p_x, encoder_groups(p_x, rate, method))
    return enc[:, enc.sum(0) > 0]


@dataclass(frozen=True)
class MecB:
    """One MEC-B coupling: the encoder, the decoder and the joint they make, at one rate bound."""
    rate: float  # the bound R on H(T), bits
    method: str  # the encoder: "greedy" (Algorithm 1) or "uniform" (Algorithm 5)
    encoder: torch.Tensor  # (|X|, |T|) p(x, t)
    decoder: torch.Tensor  # (|T|, |Y|) p(t, y), the greedy minimum-entropy coupling of p_T and p_Y
    joint: torch.Tensor  # (|X|, |Y|) p(x, y)

    @property
    def code_entropy(self) -> float:
        """H(T) in bits: the rate actually used (<= the bound)."""
        return entropy_bits(self.encoder.sum(0))

    @property
    def info_xt(self) -> float:
        """I(X;T): what the code keeps of X (= H(T) for a deterministic encoder)."""
        return mutual_information_bits(self.encoder)

    @property
    def info_ty(self) -> float:
        return mutual_information_bits(self.decoder)

    @property
    def info_xy(self) -> float:
        """I(X;Y): the objective."""
        return mutual_information_bits(self.joint)

    @property
    def joint_entropy(self) -> float:
        """H(X,Y) in bits: the coupling's entropy, H(X) + H(Y) - I(X;Y)."""
        return entropy_bits(self.joint)

    @property
    def acceptance(self) -> float | None:
        """P(X = Y) when X and Y share an alphabet (draft and output), else None."""
        rows, cols = self.joint.shape
        return self.joint.diagonal().sum().item() if rows == cols else None


def mecb(p_x, p_y, rate, method: str = "greedy") -> MecB:
    """MEC-B as the paper solves it: the EBIM encoder at `rate`, then the minimum-entropy decoder."""
    p_y = check_distribution("p_y", p_y)
    enc = ebim_encoder(p_x, rate, method)
    p_t = enc.sum(0)  # (|T|,)
    dec = greedy_coupling(p_t, p_y)  # (|T|, |Y|)
    joint = enc @ (dec / p_t[:, None])  # p(x, y) = sum_t p(x, t) p(y | t)
    return MecB(check_rate(rate), method, enc, dec, joint)


def rate_sweep(p_x, p_y, rates=None, method: str = "greedy") -> list[MecB]:
    """MEC-B at each rate (default: 33 rates from 0 to H(X) + 0.1 bits): the rate trade-off."""
    if rates is None:
        top = entropy_bits(check_distribution("p_x", p_x)) + 0.1
        rates = [top * i / 32 for i in range(33)]
    return [mecb(p_x, p_y, r, method) for r in rates]
