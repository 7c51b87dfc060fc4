"""MEC-B (decoding/speculative/mecb.py) against brute force on small alphabets.

The joint has exactly the marginals p_X and p_Y and the code respects its rate bound; the greedy EBIM encoder
(the paper's Algorithm 1) is within h(p_2) of the best deterministic encoder found by enumerating every
partition of X (what the paper's Theorem 2 implies); the greedy decoder's entropy is at least the minimum over
every vertex of the transportation polytope (where a concave entropy takes its minimum) and within one bit of
it; and the whole MEC-B never beats, and mostly equals, the brute-force optimum over deterministic encoders
and every decoder.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from decoding.speculative.coupling import entropy_bits, greedy_coupling, mec_coupling
from decoding.speculative.mecb import (binary_entropy_bits, ebim_encoder, ebim_groups, mecb, mutual_information_bits,
                                       rate_sweep, uniform_groups)


def random_law(n: int, gen: torch.Generator, scale: float = 3.0) -> torch.Tensor:
    return torch.softmax(scale * torch.rand(n, generator=gen, dtype=torch.float64), 0)


def cases(count: int, seed: int, sizes_x=(2, 5), sizes_y=(2, 4)):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(count):
        n = int(torch.randint(*sizes_x, (1,), generator=gen))
        m = int(torch.randint(*sizes_y, (1,), generator=gen))
        yield random_law(n, gen), random_law(m, gen)


RATES = (0.0, 0.3, 0.7, 1.0, 1.4, 2.0, 3.0)


# ---------------------------------------------------------------- slow references
def set_partitions(items: list[int]):
    """Every partition of `items` (Bell(5) = 52 for five symbols): every deterministic encoder."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
        yield [[first]] + part


def code_law(p_x: torch.Tensor, groups) -> torch.Tensor:
    return torch.tensor([p_x[g].sum().item() for g in groups], dtype=torch.float64)


def best_deterministic(p_x: torch.Tensor, rate: float) -> float:
    """max H(g(X)) over every function g with H(g(X)) <= rate: the best I(X;T) of a deterministic encoder."""
    return max(h for part in set_partitions(list(range(p_x.numel())))
               if (h := entropy_bits(code_law(p_x, part))) <= rate + 1e-12)


def vertex_couplings(a: torch.Tensor, b: torch.Tensor):
    """Every vertex of the couplings of a and b: a spanning tree of cells whose unique solution is >= 0."""
    n, m = a.numel(), b.numel()
    constraints = torch.zeros(n + m, n * m, dtype=torch.float64)  # rows then columns sums
    for cell in range(n * m):
        constraints[cell // m, cell], constraints[n + cell % m, cell] = 1.0, 1.0
    target = torch.cat([a, b])
    for support in itertools.combinations(range(n * m), n + m - 1):
        sub = constraints[:, list(support)]
        if torch.linalg.matrix_rank(sub) < n + m - 1:
            continue  # the cells hold a cycle
        values = torch.linalg.lstsq(sub, target[:, None]).solution[:, 0]
        if (values < -1e-12).any() or (sub @ values - target).abs().max() > 1e-9:
            continue
        joint = torch.zeros(n * m, dtype=torch.float64)
        joint[list(support)] = values.clamp(min=0)
        yield joint.view(n, m)


def min_coupling_entropy(a: torch.Tensor, b: torch.Tensor) -> float:
    return min(entropy_bits(j) for j in vertex_couplings(a, b))


def brute_force_mecb(p_x: torch.Tensor, p_y: torch.Tensor, rate: float) -> float:
    """max I(X;Y) over every deterministic encoder with H(T) <= rate and every decoder: I(X;Y) = I(T;Y) then,
    and the best decoder is a minimum-entropy coupling of p_T and p_Y."""
    best = -1.0
    for part in set_partitions(list(range(p_x.numel()))):
        p_t = code_law(p_x, part)
        if entropy_bits(p_t) <= rate + 1e-12:
            best = max(best, entropy_bits(p_t) + entropy_bits(p_y) - min_coupling_entropy(p_t, p_y))
    return best


# ---------------------------------------------------------------- marginals and the rate bound
@pytest.mark.parametrize("method", ["greedy", "uniform"])
def test_the_joint_has_exactly_both_marginals_and_the_code_keeps_its_rate(method):
    for p_x, p_y in cases(30, seed=0, sizes_x=(2, 9), sizes_y=(2, 9)):
        for rate in RATES:
            c = mecb(p_x, p_y, rate, method)
            assert torch.allclose(c.joint.sum(1), p_x, atol=1e-12) and torch.allclose(c.joint.sum(0), p_y, atol=1e-12)
            assert torch.allclose(c.encoder.sum(1), p_x, atol=1e-12)
            assert torch.allclose(c.decoder.sum(0), p_y, atol=1e-12)
            assert torch.allclose(c.decoder.sum(1), c.encoder.sum(0), atol=1e-12)
            assert (c.joint >= 0).all() and c.code_entropy <= rate + 1e-9
            assert (c.encoder > 0).sum(1).le(1).all()  # deterministic: one code word per symbol
            assert c.info_xt == pytest.approx(c.code_entropy, abs=1e-9)  # I(X;T) = H(T) for a function of X
            assert c.info_xy == pytest.approx(c.info_ty, abs=1e-9)  # all that reaches Y goes through T
            assert c.info_xy <= min(rate, entropy_bits(p_y)) + 1e-9
            assert c.joint_entropy == pytest.approx(entropy_bits(p_x) + entropy_bits(p_y) - c.info_xy, abs=1e-9)


def test_without_a_bottleneck_it_is_the_greedy_minimum_entropy_coupling():
    p = torch.tensor([0.35, 0.25, 0.2, 0.1, 0.06, 0.04], dtype=torch.float64)
    q = torch.tensor([0.05, 0.1, 0.15, 0.3, 0.25, 0.15], dtype=torch.float64)
    c = mecb(q, p, rate=entropy_bits(q) + 1e-9)
    assert torch.allclose(c.joint, mec_coupling(p, q).joint, atol=1e-12)
    assert c.encoder.shape == (6, 6) and c.acceptance == pytest.approx(mec_coupling(p, q).acceptance)
    zero = mecb(q, p, rate=0.0)  # nothing gets through: the draft and the output are independent
    assert torch.allclose(zero.joint, torch.outer(q, p), atol=1e-12) and zero.info_xy == pytest.approx(0, abs=1e-12)


def test_a_hand_case_uniform_four_at_one_bit():
    """X uniform on 4 symbols, R = 1 bit. Algorithm 1: T = X has 2 bits; merging the two smallest gives 1.5 > 1,
    so the two largest merge ({0, 1}: 1.5 bits); then merging the two smallest ({2, 3}) gives 1 bit: it fits."""
    p_x = torch.full((4,), 0.25, dtype=torch.float64)
    assert ebim_groups(p_x, 1.0) == [[0, 1], [2, 3]]
    assert uniform_groups(p_x, 1.0) == [[0, 1], [2, 3]]  # floor(2^1) = 2 runs of 2
    assert uniform_groups(p_x, 2.0) == [[0], [1], [2], [3]] and ebim_groups(p_x, 2.0) == [[0], [1], [2], [3]]


# ---------------------------------------------------------------- against brute force
def test_the_encoder_is_within_h_p2_of_the_best_deterministic_encoder():
    """The paper's Theorem 2 bounds Algorithm 1's gap to the EBIM optimum by h(p_2); the best deterministic
    encoder is at most that optimum, so enumerating every partition must find no more than h(p_2) above it."""
    exact = 0
    for p_x, _ in cases(60, seed=1, sizes_x=(2, 6)):
        p2 = sorted(p_x.tolist())[-2]
        for rate in RATES:
            enc = ebim_encoder(p_x, rate)
            got, best = mutual_information_bits(enc), best_deterministic(p_x, rate)
            assert entropy_bits(enc.sum(0)) <= rate + 1e-12
            assert got <= best + 1e-9 and best - got <= binary_entropy_bits(p2) + 1e-9, (p_x, rate, got, best)
            exact += abs(best - got) < 1e-9
    assert exact >= 0.5 * 60 * len(RATES)  # and mostly it is the best one


def test_the_greedy_decoder_is_within_one_bit_of_the_minimum_entropy_coupling():
    """Brute force over every vertex (3x3 and 4x3); the greedy coupling's entropy is never below the minimum and
    within one bit of it (0.53 bits is proven for this greedy; Compton et al. 2023)."""
    gaps = []
    for a, b in cases(12, seed=2, sizes_x=(3, 5), sizes_y=(3, 4)):
        low = min_coupling_entropy(a, b)
        got = entropy_bits(greedy_coupling(a, b))
        assert low - 1e-9 <= got <= low + 1.0
        gaps.append(got - low)
    assert sum(g < 1e-9 for g in gaps) >= len(gaps) // 2 and max(gaps) < math.log2(math.e) / math.e


def test_mecb_never_beats_the_brute_force_optimum_and_mostly_reaches_it():
    """Over every deterministic encoder within the rate and every decoder (X up to 4 symbols, Y up to 3)."""
    gaps = []
    for p_x, p_y in cases(10, seed=3, sizes_x=(2, 5), sizes_y=(2, 4)):
        for rate in (0.0, 0.5, 1.0, 1.5, 2.5):
            c, best = mecb(p_x, p_y, rate), brute_force_mecb(p_x, p_y, rate)
            assert c.info_xy <= best + 1e-9
            assert c.joint_entropy >= entropy_bits(p_x) + entropy_bits(p_y) - best - 1e-9  # the minimum H(X,Y)
            gaps.append(best - c.info_xy)
    assert sum(g < 1e-9 for g in gaps) >= 0.75 * len(gaps)
    assert max(gaps) < 0.5  # no theorem bounds the two greedy steps together; on these cases it stays small


def test_the_rate_sweep_is_a_staircase_that_rises_to_the_unbottlenecked_coupling():
    p_x = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)  # the paper's Figure 2 example
    p_y = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    sweep = rate_sweep(p_x, p_y)
    assert len(sweep) == 33 and sweep[0].code_entropy == pytest.approx(0, abs=1e-12)
    assert all(s.code_entropy <= s.rate + 1e-9 for s in sweep)
    assert all(b.code_entropy >= a.code_entropy - 1e-9 for a, b in zip(sweep, sweep[1:]))  # more rate, never less
    assert sweep[-1].info_xt == pytest.approx(entropy_bits(p_x))
    assert sweep[-1].joint_entropy == pytest.approx(entropy_bits(greedy_coupling(p_x, p_y)))  # ties may swap cells


@pytest.mark.parametrize("bad, match", [(-0.5, r"`rate` must be a number of bits >= 0"),
                                        (float("nan"), "`rate`"), (True, "`rate`")])
def test_bad_rates_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        mecb([0.5, 0.5], [0.5, 0.5], bad)


def test_bad_laws_and_methods_are_refused():
    with pytest.raises(ValueError, match="`p_x` must be a 1-D probability vector"):
        mecb([0.5, 0.6], [0.5, 0.5], 1.0)
    with pytest.raises(ValueError, match="`method` must be one of"):
        mecb([0.5, 0.5], [0.5, 0.5], 1.0, "huffman")
