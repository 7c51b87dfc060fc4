"""One position's verification rules as exact couplings (decoding/speculative/coupling.py).

Every rule's joint has the output law p and the draft law its drafting implies (q; q^k for SpecTr's
i.i.d. drafts; sequential draws without replacement for RSD), the maximal coupling accepts
sum min(p, q), SpecTr's k drafts accept at least that, the greedy minimum-entropy coupling is
at most as uncertain as the maximal one on these examples (and within its proven one bit of it
everywhere), and the exact joints agree with what `verify_tree` samples.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from decoding.speculative.coupling import (Coupling, acceptance_by_k, couplings, entropy_bits, maximal_coupling,
                                           mec_coupling, rsd_coupling, spectr_coupling)
from decoding.speculative.drafters import gumbel_top_k, iid_draws
from decoding.speculative.verify import (ROOT, DraftTree, _tries, spectr_beta, spectr_residual, spectr_rho,
                                         verify_tree)

P = torch.tensor([0.35, 0.25, 0.2, 0.1, 0.06, 0.04], dtype=torch.float64)  # as in test_speculative.py
Q = torch.tensor([0.05, 0.1, 0.15, 0.3, 0.25, 0.15], dtype=torch.float64)
P_GAP = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)  # a token the target never says,
Q_GAP = torch.tensor([0.0, 0.2, 0.3, 0.5], dtype=torch.float64)  # and one the drafter never drafts
PAIRS = [(P, Q), (P_GAP, Q_GAP), (Q, P)]


def random_pairs(count: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(count):
        vocab = int(torch.randint(2, 7, (1,), generator=gen))
        scale = 4 * float(torch.rand(1, generator=gen))
        p = torch.softmax(scale * torch.randn(vocab, generator=gen, dtype=torch.float64), 0)
        q = torch.softmax(scale * torch.randn(vocab, generator=gen, dtype=torch.float64), 0)
        yield p, q


# ---------------------------------------------------------------- the draft laws, computed independently
def iid_law(q: torch.Tensor, k: int) -> dict[tuple, float]:
    return {t: math.prod(q[x].item() for x in t) for t in itertools.product(range(q.numel()), repeat=k)}


def without_replacement_law(q: torch.Tensor, k: int) -> dict[tuple, float]:
    """P(x_1..x_k) = prod q(x_i) / (1 - q(x_1) - ... - q(x_(i-1))), over tuples of distinct drafted tokens."""
    k = min(k, int((q > 0).sum()))
    law = {}
    for t in itertools.permutations([x for x in range(q.numel()) if q[x] > 0], k):
        used, prob = 0.0, 1.0
        for x in t:
            prob *= q[x].item() / (1 - used)
            used += q[x].item()
        law[t] = prob
    return law


def law_of(c: Coupling) -> dict[tuple, float]:
    rows = c.joint.sum(1)
    return {tuple(t): rows[n].item() for n, t in enumerate(c.drafts.tolist()) if rows[n] > 0}


def assert_same_law(got: dict, expected: dict):
    expected = {t: v for t, v in expected.items() if v > 0}
    assert set(got) == set(expected)
    for t in expected:
        assert got[t] == pytest.approx(expected[t], abs=1e-12), t


# ---------------------------------------------------------------- marginals
@pytest.mark.parametrize("p, q", PAIRS, ids=["poor-drafter", "gaps", "swapped"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_rule_outputs_p_and_keeps_its_draft_law(p, q, k):
    for c in couplings(p, q, k):
        assert torch.allclose(c.output, p, atol=1e-12), (c.rule, c.output, p)
        assert (c.joint >= 0).all() and c.joint.sum().item() == pytest.approx(1, abs=1e-12)
        if c.rule in ("maximal", "mec"):
            assert_same_law(law_of(c), {(x,): q[x].item() for x in range(q.numel())})
        elif c.rule == "spectr":
            assert c.k == k
            assert_same_law(law_of(c), iid_law(q, k))
        else:
            assert_same_law(law_of(c), without_replacement_law(q, k))


@pytest.mark.parametrize("p, q", PAIRS, ids=["poor-drafter", "gaps", "swapped"])
def test_the_maximal_coupling_accepts_sum_min_p_q(p, q):
    c = maximal_coupling(p, q)
    assert c.acceptance == pytest.approx(torch.minimum(p, q).sum().item(), abs=1e-12)
    assert torch.allclose(torch.diag(c.joint), torch.minimum(p, q), atol=1e-15)  # all the overlap on the diagonal
    for one in (rsd_coupling(p, q, 1), spectr_coupling(p, q, 1)):  # one draft: both rules are speculative sampling
        assert torch.allclose(one.matched, c.joint, atol=1e-12)  # rsd leaves out the rows q never drafts
    assert spectr_coupling(p, q, 1).rho == 1.0


def test_the_matched_view_keeps_the_acceptance_on_its_diagonal():
    for k in (1, 2, 3):
        for c in couplings(P, Q, k):
            m = c.matched
            assert torch.trace(m).item() == pytest.approx(c.acceptance, abs=1e-12)
            assert torch.allclose(m.sum(0), P, atol=1e-12) and (m >= -1e-15).all()
            if c.k == 1:
                assert torch.allclose(m, c.joint, atol=1e-15)


def test_acceptance_grows_with_more_drafts():
    by_k = acceptance_by_k(P, Q)
    single = torch.minimum(P, Q).sum().item()
    for rule in ("rsd", "spectr"):
        assert by_k[rule][0] == pytest.approx(single, abs=1e-12)
        assert all(a <= b + 1e-12 for a, b in zip(by_k[rule], by_k[rule][1:])), by_k
    assert by_k["spectr"][1:] == pytest.approx([0.64, 0.714, 0.7739], abs=1e-3)  # rho* 1.6, 2.09, 2.49


# ---------------------------------------------------------------- SpecTr
@pytest.mark.parametrize("k", [2, 3, 4])
def test_spectr_accepts_at_least_as_often_as_one_draft(k):
    for p, q in list(random_pairs(200)) + PAIRS:
        single = torch.minimum(p, q).sum().item()
        c = spectr_coupling(p, q, k)
        assert c.acceptance >= single - 1e-12, (p, q)
        # K-SEQ alone accepts 1 - (1 - beta)^k = rho* beta(rho*) = sum min(p, rho* q) >= sum min(p, q)
        assert 1 - (1 - spectr_beta(p, q, c.rho)) ** k == pytest.approx(torch.minimum(p, c.rho * q).sum().item(), abs=1e-9)


def reference_rho(p, q, k) -> float:
    """The slow reference: bisection on [1, k] evaluating beta(rho) over the whole vocabulary each time."""
    def feasible(rho):
        return _tries(spectr_beta(p, q, rho), k) <= rho

    if feasible(1.0):
        return 1.0
    low, high = 1.0, float(k)
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (low, mid) if feasible(mid) else (mid, high)
    return high


def test_rho_star_equals_the_slow_bisection_and_makes_the_residual_lossless():
    for i, (p, q) in enumerate(random_pairs(400, seed=1)):
        if i % 3 == 0:
            q[0] = 0.0  # a token the drafter never drafts
            q = q / q.sum()
        k = 1 + i % 5
        rho = spectr_rho(p, q, k)
        assert 1 <= rho <= k and rho == pytest.approx(reference_rho(p, q, k), abs=1e-9)
        beta = spectr_beta(p, q, rho)
        residual = spectr_residual(p, q, k, rho)
        assert (residual >= 0).all() and residual.sum().item() == pytest.approx(1, abs=1e-12)
        # P(output = x) = P(x comes out of the k tries) + P(all rejected) p_res(x) = p(x)
        output = torch.minimum(q, p / rho) * _tries(beta, k) + (1 - beta) ** k * residual
        assert torch.allclose(output, p, atol=1e-12)


@pytest.mark.parametrize("k", [0, 1.5, True])
def test_bad_k_is_refused(k):
    with pytest.raises(ValueError, match="`k` must be an integer >= 1"):
        spectr_coupling(P, Q, k)


def test_bad_distributions_are_refused():
    with pytest.raises(ValueError, match="`p` must be a 1-D probability vector"):
        maximal_coupling(torch.tensor([0.5, 0.6]), torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="the same vocabulary"):
        maximal_coupling(torch.tensor([0.5, 0.5]), torch.tensor([0.2, 0.3, 0.5]))
    with pytest.raises(ValueError, match="too many to enumerate"):
        spectr_coupling(torch.full((40,), 1 / 40), torch.full((40,), 1 / 40), 4)


# ---------------------------------------------------------------- minimum-entropy coupling
@pytest.mark.parametrize("p, q", PAIRS + [(torch.tensor([0.6, 0.3, 0.1]), torch.tensor([0.1, 0.3, 0.6]))],
                         ids=["poor-drafter", "gaps", "swapped", "reversed"])
def test_mec_is_less_uncertain_than_the_maximal_coupling(p, q):
    mec, maximal = mec_coupling(p, q), maximal_coupling(p, q)
    assert mec.entropy_bits <= maximal.entropy_bits
    assert int((mec.joint > 0).sum()) <= 2 * p.numel() - 1  # the greedy fills at most 2V - 1 cells


def test_mec_is_within_one_bit_of_the_lower_bound_everywhere():
    """Any coupling has H >= max(H(p), H(q)); the greedy is within one bit of the optimum (Kocaoglu et al.
    2017; Cicalese et al. 2019), so of the maximal coupling too. It is not always below the maximal
    coupling: when p is close to q the maximal coupling is nearly the identity (near the minimum) and
    the greedy can pair the wrong near-equal tokens (the last example)."""
    for p, q in random_pairs(300, seed=2):
        mec, maximal = mec_coupling(p, q), maximal_coupling(p, q)
        assert max(entropy_bits(p), entropy_bits(q)) - 1e-9 <= mec.entropy_bits <= maximal.entropy_bits + 1
    p, q = torch.tensor([0.36, 0.35, 0.29]), torch.tensor([0.33, 0.35, 0.32])
    assert mec_coupling(p, q).entropy_bits > maximal_coupling(p, q).entropy_bits


# ---------------------------------------------------------------- the exact joints are what verify_tree does
@pytest.mark.parametrize("rule, draw, exact", [("rsd", gumbel_top_k, rsd_coupling), ("spectr", iid_draws, spectr_coupling)])
def test_verify_tree_hits_a_draft_as_often_as_the_coupling_says(rule, draw, exact):
    """The coupling's acceptance, P(output in drafts), is what the strategy's verification does."""
    k, trials = 3, 4000
    gen = torch.Generator().manual_seed(5)
    hits = 0
    for _ in range(trials):
        tree = DraftTree(rule=rule)
        tree.sibling_q[ROOT] = Q
        drafts = draw(Q.log(), k, gen)
        for x in drafts:
            tree.add(ROOT, x, Q[x].item())
        verdict = verify_tree(tree, torch.stack([P] * (1 + len(tree))), gen, greedy=False)
        first = tree.tokens[verdict.accepted[0]] if verdict.accepted else verdict.extra_token
        hits += first in drafts
    acceptance = exact(P, Q, k).acceptance
    sigma = math.sqrt(acceptance * (1 - acceptance) / trials)
    assert abs(hits / trials - acceptance) < 4 * sigma, (hits / trials, acceptance)
