"""Particle filtering math: weights, ESS, resampling (statistical, fixed seeds), entropy, lineage."""

import math

import pytest
import torch

from decoding.scaling.particles import (
    Lineage,
    entropic_exponent,
    entropic_weights,
    ess,
    multinomial_resample,
    resample,
    systematic_resample,
    weight_entropy,
    weights_from_rewards,
)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- weights


def test_weights_normalised_and_ordered_like_rewards():
    rewards = [0.2, 0.9, 0.5, 0.7]
    w = weights_from_rewards(rewards, temperature=1.0)
    assert w.sum().item() == pytest.approx(1.0)
    assert torch.argsort(w).tolist() == torch.argsort(torch.tensor(rewards)).tolist()


def test_weights_match_formula_and_temperature_sharpens():
    r = torch.tensor([0.25, 0.75])
    w = weights_from_rewards(r, temperature=0.5)
    logit = torch.log(r / (1 - r)) / 0.5
    assert torch.allclose(w, torch.softmax(logit.double(), 0))
    assert w[1] > weights_from_rewards(r, temperature=2.0)[1]


def test_rewards_at_one_are_finite_and_input_untouched():
    r = torch.tensor([1.0, 0.5])
    w = weights_from_rewards(r)
    assert torch.isfinite(w).all() and w[0] > w[1]
    assert r.tolist() == [1.0, 0.5]


def test_hard_zero_gets_weight_exactly_zero():
    w = weights_from_rewards([0.0, 0.3, 0.8, 0.0])
    assert w[0].item() == 0.0 and w[3].item() == 0.0
    assert w.sum().item() == pytest.approx(1.0)


def test_all_zero_rewards_give_uniform():
    assert weights_from_rewards([0.0, 0.0, 0.0]).tolist() == pytest.approx([1 / 3] * 3)


def test_constant_reward_gives_uniform_weights():
    """With a constant reward, PF reduces to independent sampling: every particle equally likely."""
    w = weights_from_rewards([0.6] * 5, temperature=0.3)
    assert w.tolist() == pytest.approx([0.2] * 5)
    assert ess(w) == pytest.approx(5.0)


@pytest.mark.parametrize("temperature", [0, -1.0, float("inf")])
def test_temperature_validated(temperature):
    with pytest.raises(ValueError, match="`temperature` must be"):
        weights_from_rewards([0.5, 0.5], temperature)


def test_rewards_out_of_range_rejected():
    with pytest.raises(ValueError, match=r"`rewards` must be in \[0, 1\]"):
        weights_from_rewards([0.5, 1.5])
    with pytest.raises(ValueError, match="non-empty"):
        weights_from_rewards([])


# --------------------------------------------------------------------------- ESS


def test_ess_uniform_one_hot_and_hand_case():
    assert ess([0.25] * 4) == pytest.approx(4.0)
    assert ess([0, 0, 1, 0]) == pytest.approx(1.0)
    # unnormalised (1, 1, 2) -> (0.25, 0.25, 0.5): 1 / (1/16 + 1/16 + 1/4) = 8/3
    assert ess([1, 1, 2]) == pytest.approx(8 / 3)


def test_ess_validation():
    with pytest.raises(ValueError, match="non-negative"):
        ess([0.5, -0.1])
    with pytest.raises(ValueError, match="all be zero"):
        ess([0.0, 0.0])


# --------------------------------------------------------------------------- resampling

WEIGHTS = [0.1, 0.2, 0.3, 0.4]


@pytest.mark.parametrize("draw", [multinomial_resample, systematic_resample])
def test_resampling_unbiased(draw):
    n = 20_000
    counts = torch.bincount(torch.tensor(draw(WEIGHTS, n, gen(1))), minlength=4).double()
    assert (counts / n).tolist() == pytest.approx(WEIGHTS, abs=0.015)


@pytest.mark.parametrize("draw", [multinomial_resample, systematic_resample])
def test_resampling_unbiased_over_many_small_draws(draw):
    """Average counts over 4000 rounds of N=4 draws match N * w."""
    g = gen(2)
    total = torch.zeros(4, dtype=torch.float64)
    rounds = 4000
    for _ in range(rounds):
        total += torch.bincount(torch.tensor(draw(WEIGHTS, 4, g)), minlength=4)
    assert (total / rounds).tolist() == pytest.approx([4 * w for w in WEIGHTS], abs=0.05)


def test_systematic_has_lower_count_variance_than_multinomial():
    g_m, g_s = gen(3), gen(3)
    counts_m, counts_s = [], []
    for _ in range(2000):
        counts_m.append(torch.bincount(torch.tensor(multinomial_resample(WEIGHTS, 4, g_m)), minlength=4))
        counts_s.append(torch.bincount(torch.tensor(systematic_resample(WEIGHTS, 4, g_s)), minlength=4))
    var_m = torch.stack(counts_m).double().var(dim=0)
    var_s = torch.stack(counts_s).double().var(dim=0)
    assert (var_s < var_m).all()
    # systematic copies particle i floor(N w_i) or ceil(N w_i) times
    for c in counts_s:
        assert all(math.floor(4 * w) <= k <= math.ceil(4 * w) for k, w in zip(c.tolist(), WEIGHTS))


def test_systematic_sorted_and_never_picks_zero_weight():
    g = gen(4)
    for _ in range(500):
        a = systematic_resample([0.0, 0.5, 0.0, 0.5, 0.0], 5, g)
        assert a == sorted(a)
        assert set(a) <= {1, 3}


def test_multinomial_never_picks_zero_weight():
    assert set(multinomial_resample([0.0, 1.0, 0.0], 1000, gen(5))) == {1}


@pytest.mark.parametrize("method", ["multinomial", "systematic"])
def test_same_seed_same_ancestors(method):
    assert resample(WEIGHTS, 8, gen(7), method)[0] == resample(WEIGHTS, 8, gen(7), method)[0]


def test_ess_triggered_resampling():
    ancestors, did = resample([0.25, 0.25, 0.25, 0.25], 4, gen(), ess_threshold=0.5)
    assert (ancestors, did) == ([0, 1, 2, 3], False)
    ancestors, did = resample([0.97, 0.01, 0.01, 0.01], 4, gen(), ess_threshold=0.5)
    assert did and len(ancestors) == 4
    _, did = resample([0.25] * 4, 4, gen())  # no threshold: always resample
    assert did


def test_resample_validation():
    with pytest.raises(ValueError, match="`method` must be one of multinomial, systematic"):
        resample(WEIGHTS, 4, gen(), method="stratified")
    with pytest.raises(ValueError, match=r"`ess_threshold` must be None or in \(0, 1\], got 1.5"):
        resample(WEIGHTS, 4, gen(), ess_threshold=1.5)
    with pytest.raises(ValueError, match="`n` must be an integer >= 1"):
        multinomial_resample(WEIGHTS, 0, gen())
    with pytest.raises(ValueError, match="needs `n` equal"):
        resample(WEIGHTS, 3, gen(), ess_threshold=0.5)


# --------------------------------------------------------------------------- entropic weights


@pytest.mark.parametrize("fraction", [0.4, 0.6, 0.9])
def test_entropic_weights_reach_requested_entropy(fraction):
    w = torch.tensor([0.9, 0.05, 0.03, 0.02])
    assert weight_entropy(w) < fraction * math.log(4)
    flat = entropic_weights(w, fraction)
    assert weight_entropy(flat) == pytest.approx(fraction * math.log(4), abs=1e-6)
    assert torch.argsort(flat).tolist() == torch.argsort(w).tolist()  # order kept
    assert 0 < entropic_exponent(w, fraction) < 1


def test_entropic_weights_leave_flat_weights_unchanged():
    w = torch.tensor([0.3, 0.25, 0.25, 0.2])
    out = entropic_weights(w, 0.5)
    assert torch.allclose(out, w.double())
    assert entropic_exponent(w, 0.5) == 1.0


def test_entropic_weights_keep_hard_zeros():
    out = entropic_weights([0.0, 0.99, 0.01, 0.0], 0.9)  # unreachable on 2 of 4: uniform over support
    assert out.tolist() == pytest.approx([0.0, 0.5, 0.5, 0.0])


def test_entropic_validation():
    with pytest.raises(ValueError, match=r"`min_entropy_fraction` must be in \[0, 1\], got -0.1"):
        entropic_weights([0.5, 0.5], -0.1)


# --------------------------------------------------------------------------- lineage


def test_lineage_consistent_with_resampling():
    n, g = 5, gen(11)
    lineage = Lineage(n)
    labels = [[f"p{i}"] for i in range(n)]  # each particle's history of labels, step 0 first
    for step in range(1, 5):
        w = weights_from_rewards(torch.rand(n, generator=g))
        ancestors, _ = resample(w, n, g, method="systematic")
        lineage.record(ancestors)
        labels = [labels[a] + [f"s{step}p{i}"] for i, a in enumerate(ancestors)]
    for i, path in enumerate(lineage.paths()):
        assert len(path) == 5 and path[-1] == i
        assert [int(label.split("p")[-1]) for label in labels[i]] == path
        for t in range(4):  # particle path[t+1] at step t+1 descends from a_t[path[t+1]] = path[t]
            assert lineage.ancestors[t][path[t + 1]] == path[t]


def test_lineage_alive_at():
    lineage = Lineage(3)
    lineage.record([0, 0, 2])  # step 1: particle 1 dies
    lineage.record([1, 1, 1])  # step 2: everyone descends from particle 1 of step 1 -> 0 of step 0
    assert lineage.paths() == [[0, 1, 0], [0, 1, 1], [0, 1, 2]]
    assert lineage.alive_at(0) == [0]
    assert lineage.alive_at(1) == [1]
    assert lineage.alive_at(2) == [0, 1, 2]


def test_lineage_identity_keeps_everyone_alive_and_validates():
    lineage = Lineage(3)
    lineage.record([0, 1, 2])
    assert lineage.alive_at(0) == [0, 1, 2]
    with pytest.raises(ValueError, match="must have 3 entries"):
        lineage.record([0, 1])
    with pytest.raises(ValueError, match=r"must be in \[0, 2\]"):
        lineage.record([0, 1, 3])
    with pytest.raises(ValueError, match="`step` must be an integer in"):
        lineage.alive_at(5)


def test_lookahead_weights_modulate_by_the_successor():
    from decoding.scaling.particles import lookahead_weights

    now, ahead = [0.8, 0.8, 0.5], [0.2, 0.9, 0.5]
    assert torch.allclose(lookahead_weights(now, ahead, 0.0), weights_from_rewards(now))
    w = lookahead_weights(now, ahead, 1.0)
    assert w[1] > w[0]  # same reward now; the one whose next step checks out gains
    logit = lambda r: math.log(r / (1 - r))
    expected = torch.softmax(torch.tensor([logit(a) + logit(b) for a, b in zip(now, ahead)], dtype=torch.float64), 0)
    assert torch.allclose(w, expected)
    assert lookahead_weights([0.8, 0.6], [0.0, 0.5], 1.0)[0] == 0  # a violation in the look-ahead kills
    with pytest.raises(ValueError, match="strength"):
        lookahead_weights(now, ahead, -1.0)


# --------------------------------------------------------------------------- ePF's Entropic Annealing


def test_annealing_temperature_is_its_hubs_ess_rule_on_a_hand_computed_case():
    from decoding.scaling.particles import annealing_temperature

    w = [0.7, 0.1, 0.1, 0.1]  # ESS = 1 / 0.52, ESS / N = 0.4808 < 0.5
    # t = 1 of T_max = 8: tau = (1 - 1/8) * N / ESS = 0.875 * 4 * 0.52 = 1.82
    assert annealing_temperature(w, 1, 8, "ess") == pytest.approx(1.82)
    # entropy: H = -(0.7 ln 0.7 + 0.3 ln 0.1) / ln 4 = 0.67839; tau = 1 / (H + (1 - H) / 8) = 1.39161
    assert annealing_temperature(w, 1, 8, "entropy") == pytest.approx(1.39161, abs=1e-5)
    assert annealing_temperature(w, 3, 8, "ess") == pytest.approx(0.625 * 2.08)  # progress lowers tau
    assert annealing_temperature(w, 4, 8, "ess") == 1.0  # t / T_max = 0.5: the early phase is over
    assert annealing_temperature([0.4, 0.2, 0.2, 0.2], 1, 8, "ess") == 1.0  # ESS / N = 0.89: diverse enough
    assert annealing_temperature([0.97, 0.01, 0.01, 0.01], 3, 4, "ess") == 1.0  # p = 0.75 >= 0.5
    assert annealing_temperature([1.0], 1, 8) == 1.0  # one particle: nothing to anneal
    # the floor: ESS / N = 0.4808 but (1 - p) small: max(1, 0.5 * 2.08) = 1.04; with p = 0.49 it is 1.0608
    assert annealing_temperature(w, 49, 100, "ess") == pytest.approx(0.51 * 2.08)


def test_annealed_weights_are_softmax_of_log_weights_over_tau_and_keep_hard_zeros():
    from decoding.scaling.particles import annealed_weights

    w = torch.tensor([0.7, 0.1, 0.1, 0.1], dtype=torch.float64)
    assert torch.allclose(annealed_weights(w, 1.82), torch.softmax(torch.log(w) / 1.82, 0))
    assert torch.allclose(annealed_weights(w, 1.0), w)
    out = annealed_weights([0.0, 0.9, 0.1], 3.0)
    assert out[0] == 0 and out[1] > out[2] and out[1] < 0.9


def test_annealing_validation_names_the_field():
    from decoding.scaling.particles import annealed_weights, annealing_temperature

    with pytest.raises(ValueError, match="`method` must be one of ess, entropy, got 'none'"):
        annealing_temperature([0.5, 0.5], 1, 8, "none")
    with pytest.raises(ValueError, match="`step` must be an integer >= 1, got 0"):
        annealing_temperature([0.5, 0.5], 0, 8)
    with pytest.raises(ValueError, match="`max_steps` must be an integer >= 1"):
        annealing_temperature([0.5, 0.5], 1, 0)
    with pytest.raises(ValueError, match="`temperature` must be a finite number > 0"):
        annealed_weights([0.5, 0.5], 0.0)


def test_the_projects_own_variants_say_so_where_a_user_reads_them():
    from decoding.params import specs
    from decoding.scaling.params import ParticleFilterParams

    helps = {s.name: s.help for s in specs(ParticleFilterParams)}
    assert "own" in helps["entropic"] and "own" in helps["lookahead"] and "its_hub" in helps["annealing"]
