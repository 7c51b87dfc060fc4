"""Tests for decoding.sampling: every rule against its definition on hand-made distributions."""

import math
import random
import re
from dataclasses import fields

import pytest
import torch

from decoding.sampling import (
    NEG_INF,
    PARAMETERS,
    EpsilonCutoff,
    EtaCutoff,
    MinP,
    MirostatParams,
    ParamSpec,
    RepetitionPenalty,
    SamplingParams,
    Temperature,
    TopH,
    TopK,
    TopP,
    TypicalP,
    apply_transforms,
    beam_step,
    build_transforms,
    contrastive_scores,
    entropy,
    log_softmax,
    mirostat_v2_step,
    sample_from_logits,
)

P = [0.5, 0.2, 0.15, 0.1, 0.05]  # the running example; token i has probability P[i]
NO_IDS = torch.zeros(1, 0, dtype=torch.long)  # (B=1, T=0)


def logits_of(*rows):
    """(B, V) logits whose softmax is exactly the given probability rows."""
    return torch.tensor(rows, dtype=torch.float32).log()


def kept(out, row=0):
    """The set of token ids left finite in one row."""
    return set(torch.isfinite(out[row]).nonzero().flatten().tolist())


def plain_entropy(probs):
    return -sum(p * math.log(p) for p in probs if p > 0)


# ------------------------------------------------------------------------ plain-Python references


def ref_top_p(probs, top_p):
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    out, mass = set(), 0.0
    for i in order:
        if mass >= top_p:
            break
        out.add(i)
        mass += probs[i]
    return out


def ref_typical(probs, mass):
    h = plain_entropy(probs)
    order = sorted(range(len(probs)), key=lambda i: abs(-math.log(probs[i]) - h))
    out, total = set(), 0.0
    for i in order:
        out.add(i)
        total += probs[i]
        if total >= mass:
            break
    return out


def ref_top_h(probs, alpha, top_n):
    """Slow Top-H, written as the authors' greedy loop: renormalise the top_n, then add tokens
    one by one and stop before the accumulated entropy terms exceed alpha * H(top_n)."""
    order = sorted(range(len(probs)), key=lambda i: (-probs[i], i))[:top_n]
    z = sum(probs[i] for i in order)
    q = [probs[i] / z for i in order]
    tau = alpha * plain_entropy(q)
    out, accumulated = {order[0]}, -q[0] * math.log(q[0])
    for j in range(1, len(order)):
        accumulated += -q[j] * math.log(q[j]) if q[j] > 0 else 0.0
        if accumulated > tau:
            break
        out.add(order[j])
    return out


# ------------------------------------------------------------------------ log_softmax / entropy


def test_log_softmax_is_float32_and_keeps_minus_inf():
    logits = torch.tensor([[1.0, float("-inf"), 3.0]], dtype=torch.float64)
    out = log_softmax(logits)
    assert out.dtype == torch.float32
    assert out[0, 1] == float("-inf")
    assert torch.allclose(out[0, [0, 2]].exp().sum(), torch.tensor(1.0))


@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_entropy_of_uniform_is_log_n(n):
    assert entropy(torch.zeros(n)).item() == pytest.approx(math.log(n), abs=1e-5)


def test_entropy_of_one_hot_is_zero_and_never_nan():
    one_hot = torch.tensor([0.0, float("-inf"), float("-inf")])
    assert entropy(one_hot).item() == 0.0
    assert entropy(torch.tensor([0.0, -1e4])).item() == pytest.approx(0.0, abs=1e-6)
    with_inf = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf"), 0.0, 0.0]])
    h = entropy(with_inf)
    assert not torch.isnan(h).any()
    assert h[0].item() == pytest.approx(entropy(torch.tensor([1.0, 2.0])).item())
    assert h[1].item() == pytest.approx(math.log(2), abs=1e-6)


def test_entropy_matches_definition_and_keeps_leading_dims():
    assert entropy(logits_of(P)).item() == pytest.approx(plain_entropy(P), abs=1e-5)
    assert entropy(torch.randn(2, 3, 11)).shape == (2, 3)


# ------------------------------------------------------------------------ each rule by its definition


def test_temperature_divides_logits():
    logits = torch.tensor([[2.0, 1.0, -1.0]])
    assert torch.equal(Temperature(2.0)(logits, NO_IDS), logits / 2.0)
    sharp = Temperature(0.5)(logits, NO_IDS).softmax(-1)
    assert sharp[0, 0] > logits.softmax(-1)[0, 0]


@pytest.mark.parametrize("k, expected", [(1, {0}), (2, {0, 1}), (3, {0, 1, 2}), (5, set(range(5))), (50, set(range(5)))])
def test_top_k(k, expected):
    out = TopK(k)(logits_of(P), NO_IDS)
    assert kept(out) == expected
    assert torch.equal(out[0, list(expected)], logits_of(P)[0, list(expected)])  # survivors unchanged


def test_top_k_keeps_ties_with_the_kth_logit():
    assert kept(TopK(1)(torch.tensor([[1.0, 1.0, 0.0]]), NO_IDS)) == {0, 1}


@pytest.mark.parametrize(
    "top_p, expected",
    [(0.3, {0}), (0.6, {0, 1}), (0.75, {0, 1, 2}), (0.9, {0, 1, 2, 3}), (0.97, set(range(5))), (1.0, set(range(5)))],
)
def test_top_p(top_p, expected):
    assert ref_top_p(P, top_p) == expected  # the written-out set follows the definition
    assert kept(TopP(top_p)(logits_of(P), NO_IDS)) == expected


def test_top_p_matches_reference_on_shuffled_random_rows():
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        probs = torch.rand(12, generator=gen).softmax(-1) ** 2
        probs = (probs / probs.sum()).tolist()
        for top_p in (0.25, 0.5, 0.8, 0.95):
            assert kept(TopP(top_p)(logits_of(probs), NO_IDS)) == ref_top_p(probs, top_p)


@pytest.mark.parametrize(
    "min_p, expected",
    [(0.0, set(range(5))), (0.15, {0, 1, 2, 3}), (0.25, {0, 1, 2}), (0.5, {0}), (1.0, {0})],
)
def test_min_p(min_p, expected):
    assert {i for i, p in enumerate(P) if p >= min_p * max(P)} == expected
    assert kept(MinP(min_p)(logits_of(P), NO_IDS)) == expected


@pytest.mark.parametrize(
    "mass, expected",
    # typicality order for P is token 1, 2, 0, 3, 4 (cumulative mass .2, .35, .85, .95, 1)
    [(0.1, {1}), (0.3, {1, 2}), (0.5, {0, 1, 2}), (0.9, {0, 1, 2, 3}), (0.99, set(range(5)))],
)
def test_typical_p(mass, expected):
    assert ref_typical(P, mass) == expected
    assert kept(TypicalP(mass)(logits_of(P), NO_IDS)) == expected


def test_typical_p_can_drop_the_mode_but_keeps_the_most_typical_token():
    out = TypicalP(0.1)(logits_of(P), NO_IDS)
    assert not torch.isfinite(out[0, 0])  # the most probable token is not typical here
    assert kept(out) == {1}


@pytest.mark.parametrize("epsilon, expected", [(0.0, set(range(5))), (0.12, {0, 1, 2}), (0.3, {0}), (0.9, {0})])
def test_epsilon_cutoff(epsilon, expected):
    assert kept(EpsilonCutoff(epsilon)(logits_of(P), NO_IDS)) == expected


@pytest.mark.parametrize("eta, expected", [(0.01, set(range(5))), (0.1, {0, 1, 2, 3}), (0.5, {0, 1})])
def test_eta_cutoff(eta, expected):
    floor = min(eta, math.sqrt(eta) * math.exp(-plain_entropy(P)))
    assert {i for i, p in enumerate(P) if p >= floor} == expected
    assert kept(EtaCutoff(eta)(logits_of(P), NO_IDS)) == expected


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits_once():
    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0], [2.0, -1.0, 0.5, -3.0]])
    ids = torch.tensor([[0, 1, 1], [3, 3, 3]])  # repeats are penalised once
    out = RepetitionPenalty(2.0)(logits, ids)
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 0.5, -3.0], [2.0, -1.0, 0.5, -6.0]]))
    out = RepetitionPenalty(0.5)(logits[:1], ids[:1])
    assert torch.equal(out, torch.tensor([[4.0, -0.5, 0.5, -3.0]]))
    assert torch.equal(RepetitionPenalty(1.3)(logits, torch.zeros(2, 0, dtype=torch.long)), logits)


def test_repetition_penalty_rejects_mismatched_batch():
    with pytest.raises(ValueError, match="`input_ids` must have 2 rows"):
        RepetitionPenalty(1.2)(torch.zeros(2, 4), torch.zeros(3, 1, dtype=torch.long))


# ------------------------------------------------------------------------ Top-H


@pytest.mark.parametrize(
    "alpha, expected",
    # accumulated -p ln p for P: .347, .668, .953, 1.183, 1.333 (= H)
    [(0.2, {0}), (0.6, {0, 1}), (0.8, {0, 1, 2}), (0.9, {0, 1, 2, 3}), (1.0, set(range(5)))],
)
def test_top_h_hand_made(alpha, expected):
    assert ref_top_h(P, alpha, top_n=100) == expected
    assert kept(TopH(alpha)(logits_of(P), NO_IDS)) == expected


def test_top_h_renormalises_over_the_top_n():
    # top 3 of P renormalised: [.588, .235, .176]; accumulated terms .312, .653, .959 (= H)
    assert kept(TopH(0.7, top_n=3)(logits_of(P), NO_IDS)) == {0, 1}
    assert kept(TopH(1.0, top_n=3)(logits_of(P), NO_IDS)) == {0, 1, 2}
    assert kept(TopH(1.0, top_n=1)(logits_of(P), NO_IDS)) == {0}


def test_top_h_matches_slow_reference_on_random_rows():
    rng = random.Random(0)
    for _ in range(30):
        vocab = rng.randint(2, 60)
        raw = [rng.random() ** 3 + 1e-4 for _ in range(vocab)]
        probs = [r / sum(raw) for r in raw]
        for alpha in (0.2, 0.4, 0.7, 0.95):
            for top_n in (5, 20, 100):
                got = kept(TopH(alpha, top_n=top_n)(logits_of(probs), NO_IDS))
                assert got == ref_top_h(probs, alpha, top_n), (vocab, alpha, top_n)


def test_top_h_batched_matches_reference_per_row():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 30, generator=gen) * 2  # (B, V)
    out = TopH(0.5, top_n=10)(logits, NO_IDS.expand(4, 0))
    for b in range(4):
        assert kept(out, b) == ref_top_h(logits[b].softmax(-1).tolist(), 0.5, 10)


# ------------------------------------------------------------------------ shared properties

INF = float("-inf")
ALL_TRANSFORMS = [
    Temperature(0.7),
    TopK(3),
    TopP(0.8),
    MinP(0.1),
    TypicalP(0.6),
    EpsilonCutoff(0.05),
    EtaCutoff(0.2),
    RepetitionPenalty(1.5),
    TopH(0.5),
    TopH(0.5, top_n=4),
]
EXTREME_TRUNCATIONS = [TopK(1), TopP(1e-6), MinP(1.0), EpsilonCutoff(0.999), EtaCutoff(0.999), TopH(1e-6)]


def _batch():
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 20, generator=gen) * 3  # (B, V)
    logits[1, [2, 5, 11]] = INF  # rows may arrive partly truncated by an earlier transform
    input_ids = torch.tensor([[1, 4, 4], [0, 2, 19], [7, 7, 3]])  # (B, T)
    return logits, input_ids


@pytest.mark.parametrize("transform", ALL_TRANSFORMS, ids=lambda t: repr(t))
def test_transforms_never_modify_inputs_and_return_new_tensors(transform):
    logits, input_ids = _batch()
    logits_copy, ids_copy = logits.clone(), input_ids.clone()
    out = transform(logits, input_ids)
    assert torch.equal(logits, logits_copy) and torch.equal(input_ids, ids_copy)
    assert out.shape == logits.shape and out.data_ptr() != logits.data_ptr()
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("transform", ALL_TRANSFORMS, ids=lambda t: repr(t))
def test_batched_rows_are_handled_row_by_row(transform):
    logits, input_ids = _batch()
    out = transform(logits, input_ids)
    for b in range(logits.shape[0]):
        assert torch.equal(out[b : b + 1], transform(logits[b : b + 1], input_ids[b : b + 1]))


def test_two_different_rows_get_their_own_kept_sets():
    logits = logits_of(P, P[::-1])  # (2, 5)
    out = TopP(0.6)(logits, NO_IDS.expand(2, 0))
    assert kept(out, 0) == {0, 1} and kept(out, 1) == {3, 4}
    out = MinP(0.25)(logits, NO_IDS.expand(2, 0))
    assert kept(out, 0) == {0, 1, 2} and kept(out, 1) == {2, 3, 4}


@pytest.mark.parametrize("transform", EXTREME_TRUNCATIONS, ids=lambda t: repr(t))
def test_extreme_truncations_keep_exactly_the_top_1(transform):
    logits, input_ids = _batch()
    out = transform(logits, input_ids)
    for b in range(logits.shape[0]):
        assert kept(out, b) == {int(logits[b].argmax())}


def test_extreme_typical_p_keeps_the_most_typical_token():
    logits, input_ids = _batch()
    out = TypicalP(1e-6)(logits, input_ids)
    for b in range(logits.shape[0]):
        logprobs = log_softmax(logits[b])
        atypicality = (-logprobs - entropy(logits[b])).abs()
        assert kept(out, b) == {int(atypicality.argmin())}


HF_PAIRS = [  # (ours, name of the transformers class, its argument) for the same parameter value
    (lambda x: TopK(max(1, int(x * 40))), "TopKLogitsWarper", lambda x: max(1, int(x * 40))),
    (TopP, "TopPLogitsWarper", lambda x: x),
    (MinP, "MinPLogitsWarper", lambda x: x),
    (TypicalP, "TypicalLogitsWarper", lambda x: x),
    (lambda x: EpsilonCutoff(x / 10), "EpsilonLogitsWarper", lambda x: x / 10),
    (EtaCutoff, "EtaLogitsWarper", lambda x: x),
    (lambda x: RepetitionPenalty(1 + x), "RepetitionPenaltyLogitsProcessor", lambda x: 1 + x),
    (TopH, "TopHLogitsWarper", lambda x: x),
]


@pytest.mark.parametrize("ours, hf_name, hf_arg", HF_PAIRS, ids=[p[1] for p in HF_PAIRS])
def test_matches_transformers_on_random_rows(ours, hf_name, hf_arg):
    """Same kept sets and values as transformers' own warpers (V up to 300 exercises Top-H's top_n=100)."""
    logits_process = pytest.importorskip("transformers.generation.logits_process")
    gen = torch.Generator().manual_seed(11)
    for _ in range(15):
        vocab = int(torch.randint(2, 300, (1,), generator=gen))
        logits = torch.randn(3, vocab, generator=gen) * float(torch.rand(1, generator=gen) * 5 + 0.1)  # (B, V)
        input_ids = torch.randint(0, vocab, (3, 6), generator=gen)  # (B, T)
        x = float(torch.rand(1, generator=gen) * 0.98 + 0.01)
        expected = getattr(logits_process, hf_name)(hf_arg(x))(input_ids, logits.clone())
        assert torch.equal(ours(x)(logits, input_ids), expected), (vocab, x)


# ------------------------------------------------------------------------ validation

BAD_VALUES = [
    (lambda: Temperature(0.0), "temperature", "(0, inf)", "0.0"),
    (lambda: Temperature(float("nan")), "temperature", "(0, inf)", "nan"),
    (lambda: TopK(0), "top_k", "an integer in [1, 1048576]", "0"),
    (lambda: TopK(2.5), "top_k", "an integer in [1, 1048576]", "2.5"),
    (lambda: TopP(0.0), "top_p", "(0, 1]", "0.0"),
    (lambda: TopP(1.5), "top_p", "(0, 1]", "1.5"),
    (lambda: MinP(-0.1), "min_p", "[0, 1]", "-0.1"),
    (lambda: MinP(1.1), "min_p", "[0, 1]", "1.1"),
    (lambda: TypicalP(0.0), "typical_p", "(0, 1]", "0.0"),
    (lambda: EpsilonCutoff(1.0), "epsilon", "[0, 1)", "1.0"),
    (lambda: EtaCutoff(-0.5), "eta", "[0, 1)", "-0.5"),
    (lambda: RepetitionPenalty(0.0), "repetition_penalty", "(0, inf)", "0.0"),
    (lambda: TopH(0.0), "alpha", "(0, 1]", "0.0"),
    (lambda: TopH(1.2), "alpha", "(0, 1]", "1.2"),
    (lambda: TopH(0.5, top_n=0), "top_n", "an integer in [1, 1048576]", "0"),
    (lambda: SamplingParams(temperature=-1.0), "temperature", "(0, inf)", "-1.0"),
    (lambda: SamplingParams(top_k=-1), "top_k", "an integer in [0, 1048576]", "-1"),
    (lambda: SamplingParams(top_k=True), "top_k", "an integer in [0, 1048576]", "True"),
    (lambda: SamplingParams(top_p=1.5), "top_p", "(0, 1]", "1.5"),
    (lambda: SamplingParams(min_p=2.0), "min_p", "[0, 1]", "2.0"),
    (lambda: SamplingParams(typical_p=0.0), "typical_p", "(0, 1]", "0.0"),
    (lambda: SamplingParams(epsilon=1.0), "epsilon", "[0, 1)", "1.0"),
    (lambda: SamplingParams(eta=1.0), "eta", "[0, 1)", "1.0"),
    (lambda: SamplingParams(repetition_penalty=0.0), "repetition_penalty", "(0, inf)", "0.0"),
    (lambda: SamplingParams(top_h=-0.1), "top_h", "[0, 1]", "-0.1"),
    (lambda: SamplingParams(top_p="0.9"), "top_p", "(0, 1]", "'0.9'"),
    (lambda: MirostatParams(tau=0.0), "tau", "(0, inf)", "0.0"),
    (lambda: MirostatParams(eta=0.0), "eta", "(0, 1]", "0.0"),
    (lambda: MirostatParams(eta=1.5), "eta", "(0, 1]", "1.5"),
    (lambda: contrastive_scores(torch.ones(1), torch.ones(1, 2), torch.ones(1, 2), 1.5), "penalty_alpha", "[0, 1]", "1.5"),
    (lambda: beam_step(torch.zeros(2), torch.zeros(2, 3), 7), "num_beams", "an integer in [1, 6]", "7"),
    (lambda: beam_step(torch.zeros(2), torch.zeros(2, 3), 0), "num_beams", "an integer in [1, 6]", "0"),
]


@pytest.mark.parametrize("make, name, allowed, shown", BAD_VALUES, ids=[f"{b[1]}={b[3]}" for b in BAD_VALUES])
def test_out_of_range_values_raise_naming_parameter_value_and_range(make, name, allowed, shown):
    prefix = "" if allowed.startswith("an integer") else "in "
    message = f"`{name}` must be {prefix}{allowed}, got {shown}"
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_message_style_matches_house_example():
    with pytest.raises(ValueError) as err:
        TopP(1.5)
    assert str(err.value) == "`top_p` must be in (0, 1], got 1.5"


def test_boundary_values_are_accepted():
    SamplingParams(top_p=1.0, min_p=1.0, typical_p=1.0, epsilon=0.0, eta=0.0, top_h=1.0, top_k=0)
    TopH(1.0), MinP(0.0), EpsilonCutoff(0.0), EtaCutoff(0.0), MirostatParams(eta=1.0)


# ------------------------------------------------------------------------ params, specs, chains


def test_parameters_cover_every_sampling_field_and_mirostat():
    field_names = [f.name for f in fields(SamplingParams)]
    assert list(PARAMETERS) == field_names + ["mirostat_tau", "mirostat_eta"]
    defaults = SamplingParams()
    for name in field_names:
        assert PARAMETERS[name].default == getattr(defaults, name)
    assert PARAMETERS["mirostat_tau"].default == MirostatParams().tau
    assert PARAMETERS["mirostat_eta"].default == MirostatParams().eta
    for spec in PARAMETERS.values():
        assert isinstance(spec, ParamSpec) and spec.type in (int, float)
        spec.check(spec.default)  # every default is allowed
        assert spec.help.endswith(".") and len(spec.help) <= 100
    assert PARAMETERS["top_p"].range_text() == "(0, 1]"
    assert PARAMETERS["top_k"].range_text() == "[0, 1048576]"


def test_defaults_build_no_transforms_and_leave_logits_unchanged():
    assert build_transforms(SamplingParams()) == []
    logits = torch.randn(2, 9)
    out = apply_transforms([], logits, NO_IDS.expand(2, 0))
    assert torch.equal(out, logits) and out.data_ptr() != logits.data_ptr()


def test_build_transforms_uses_transformers_order():
    params = SamplingParams(
        temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, typical_p=0.95,
        epsilon=3e-4, eta=1e-3, repetition_penalty=1.2, top_h=0.4,
    )
    names = [t.name for t in build_transforms(params)]
    assert names == [
        "repetition_penalty", "temperature", "top_h", "top_k", "top_p", "min_p", "typical_p", "epsilon", "eta",
    ]
    assert [t.name for t in build_transforms(SamplingParams(top_p=0.9, temperature=0.5))] == ["temperature", "top_p"]


def test_apply_transforms_chains_left_to_right():
    logits, input_ids = _batch()
    chain = build_transforms(SamplingParams(temperature=0.5, top_k=5, top_p=0.9, repetition_penalty=1.3))
    expected = TopP(0.9)(TopK(5)(Temperature(0.5)(RepetitionPenalty(1.3)(logits, input_ids), input_ids), input_ids), input_ids)
    assert torch.equal(apply_transforms(chain, logits, input_ids), expected)


# ------------------------------------------------------------------------ sampling


def test_sampling_shape_and_reproducibility():
    logits = torch.randn(4, 50)
    draws = [sample_from_logits(logits, torch.Generator().manual_seed(s)) for s in (0, 0, 1)]
    assert draws[0].shape == (4,) and draws[0].dtype == torch.long
    assert torch.equal(draws[0], draws[1])
    many = [sample_from_logits(logits[:1].expand(200, 50), torch.Generator().manual_seed(s)) for s in (5, 6)]
    assert not torch.equal(many[0], many[1])


def test_sampling_follows_the_distribution():
    n = 20_000
    logits = logits_of(P).expand(n, 5)  # (n, V): one draw per row
    draws = sample_from_logits(logits, torch.Generator().manual_seed(123))
    freqs = torch.bincount(draws, minlength=5).float() / n
    for p, f in zip(P, freqs.tolist()):
        assert abs(f - p) < 4 * math.sqrt(p * (1 - p) / n)  # four standard errors


def test_sampling_never_draws_removed_tokens():
    logits = TopK(2)(logits_of(P), NO_IDS).expand(2000, 5)
    draws = sample_from_logits(logits, torch.Generator().manual_seed(0))
    assert set(draws.tolist()) == {0, 1}


def test_sample_from_logits_rejects_one_dim_input():
    with pytest.raises(ValueError, match="`logits` must have shape"):
        sample_from_logits(torch.zeros(5), torch.Generator())


# ------------------------------------------------------------------------ mirostat


@pytest.mark.parametrize("mu", [0.1, 1.5, 2.5, 3.0, 4.0, 10.0])
def test_mirostat_keeps_tokens_with_surprise_at_most_mu(mu):
    logits = logits_of(P)[0]  # (V,); surprises in bits: 1, 2.32, 2.74, 3.32, 4.32
    _, kept_logits, _ = mirostat_v2_step(logits, mu, MirostatParams(), torch.Generator().manual_seed(0))
    expected = {i for i, p in enumerate(P) if -math.log2(p) <= mu} or {0}
    assert kept(kept_logits[None]) == expected
    assert torch.equal(kept_logits[list(expected)], logits[list(expected)])


def test_mirostat_mu_update_uses_renormalised_surprise():
    params = MirostatParams(tau=2.0, eta=0.3)
    logits = logits_of(P)[0]
    for seed in range(10):
        mu = 3.0  # keeps tokens 0, 1, 2 (mass .85)
        token, _, mu_new = mirostat_v2_step(logits, mu, params, torch.Generator().manual_seed(seed))
        assert token in {0, 1, 2}
        observed = -math.log2(P[token] / 0.85)
        assert mu_new == pytest.approx(mu - params.eta * (observed - params.tau), abs=1e-5)


def test_mirostat_tiny_mu_is_greedy_and_raises_mu():
    params = MirostatParams(tau=3.0, eta=0.1)
    token, kept_logits, mu_new = mirostat_v2_step(logits_of(P)[0], 0.01, params, torch.Generator())
    assert token == 0 and kept(kept_logits[None]) == {0}
    assert mu_new == pytest.approx(0.01 + 0.1 * 3.0)  # observed surprise 0 bits


def test_mirostat_is_pure_and_reproducible():
    params = MirostatParams()
    assert params.initial_mu == 6.0
    logits = torch.randn(30, generator=torch.Generator().manual_seed(2))
    copy = logits.clone()
    a = mirostat_v2_step(logits, params.initial_mu, params, torch.Generator().manual_seed(9))
    b = mirostat_v2_step(logits, params.initial_mu, params, torch.Generator().manual_seed(9))
    assert torch.equal(logits, copy)
    assert a[0] == b[0] and torch.equal(a[1], b[1]) and a[2] == b[2]
    with pytest.raises(ValueError, match="`logits` must have shape"):
        mirostat_v2_step(logits[None], 6.0, params, torch.Generator())


# ------------------------------------------------------------------------ contrastive search and beams


def test_contrastive_scores_hand_made():
    top_probs = torch.tensor([0.5, 0.3, 0.2])  # (K,)
    candidates = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])  # (K, D)
    context = torch.tensor([[3.0, 0.0], [-1.0, 0.0]])  # (T, D)
    # max cosine to the context: 1, 0, 1/sqrt(2)
    scores = contrastive_scores(top_probs, candidates, context, penalty_alpha=0.6)
    expected = torch.tensor([0.4 * 0.5 - 0.6, 0.4 * 0.3, 0.4 * 0.2 - 0.6 / math.sqrt(2)])
    assert torch.allclose(scores, expected, atol=1e-6)
    assert torch.allclose(contrastive_scores(top_probs, candidates, context, 0.0), top_probs)
    assert torch.allclose(contrastive_scores(top_probs, candidates, context, 1.0), -torch.tensor([1.0, 0.0, 2**-0.5]))


def test_beam_step_hand_made():
    beam_scores = torch.tensor([0.0, -1.0])  # (B,)
    logprobs = torch.tensor([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]]).log()  # (B, V)
    parents, tokens, scores = beam_step(beam_scores, logprobs, num_beams=3)
    assert parents.tolist() == [0, 0, 1] and tokens.tolist() == [0, 1, 0]
    assert torch.allclose(scores, torch.tensor([math.log(0.6), math.log(0.3), math.log(0.5) - 1.0]))


def test_beam_step_breaks_ties_by_lower_flat_index():
    logprobs = torch.tensor([[-1.0, -1.0, -2.0], [-1.0, -1.0, -2.0]])
    parents, tokens, scores = beam_step(torch.zeros(2), logprobs, num_beams=5)
    assert parents.tolist() == [0, 0, 1, 1, 0] and tokens.tolist() == [0, 1, 0, 1, 2]
    assert scores.tolist() == [-1.0, -1.0, -1.0, -1.0, -2.0]


# ------------------------------------------------------------------------ against transformers' own chain

def hf_chain(params: SamplingParams, vocab: int):
    """The processors transformers' `generate` builds for the same settings, in its own order."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                         num_attention_heads=1, num_key_value_heads=1))
    config = GenerationConfig(
        do_sample=True, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
        min_p=params.min_p or None, typical_p=params.typical_p, epsilon_cutoff=params.epsilon,
        eta_cutoff=params.eta, repetition_penalty=params.repetition_penalty, top_h=params.top_h or None,
    )
    return model._get_logits_processor(generation_config=config, input_ids_seq_length=1, device="cpu")


CHAINS = [  # truncations combined, each with Top-H (whose place in the chain matters)
    dict(top_k=3, top_h=0.5),
    dict(top_p=0.8, top_h=0.6),
    dict(min_p=0.1, top_h=0.4),
    dict(temperature=1.4, top_k=20, top_p=0.9, top_h=0.7),
    dict(temperature=0.7, top_k=50, top_p=0.95, min_p=0.02, repetition_penalty=1.3),
    dict(temperature=1.2, typical_p=0.9, epsilon=0.01, eta=0.02),
]


@pytest.mark.parametrize("settings", CHAINS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_combined_chains_match_transformers_generate(settings):
    """The whole chain `sample` runs equals the processors `generate` builds, on random rows."""
    params = SamplingParams(**settings)
    gen = torch.Generator().manual_seed(5)
    for vocab in (7, 130, 4096):
        hf = hf_chain(params, vocab)
        logits = torch.randn(4, vocab, generator=gen) * 3  # (B, V)
        input_ids = torch.randint(0, vocab, (4, 5), generator=gen)  # (B, T)
        ours = apply_transforms(build_transforms(params), logits, input_ids)
        theirs = hf(input_ids, logits.clone())
        assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs)), (vocab, settings)


def test_top_h_runs_before_top_k_as_in_transformers():
    """The issue's example: top_k=3 then Top-H would keep {0}; Top-H first keeps {0, 1}."""
    logits = torch.tensor([[1.5, 1.0, 0.5, 0.0, -0.5, -1.0]])
    out = apply_transforms(build_transforms(SamplingParams(top_k=3, top_h=0.5)), logits, NO_IDS)
    assert kept(out) == {0, 1}
    assert kept(hf_chain(SamplingParams(top_k=3, top_h=0.5), 6)(NO_IDS, logits.clone())) == {0, 1}


@pytest.mark.parametrize("transform, hf_name, hf_arg", [
    (EpsilonCutoff(0.3), "EpsilonLogitsWarper", 0.3),
    (EtaCutoff(0.5), "EtaLogitsWarper", 0.5),
    (MinP(0.9), "MinPLogitsWarper", 0.9),
    (TopK(1), "TopKLogitsWarper", 1),
])
def test_tokens_tied_with_the_top_are_never_cut(transform, hf_name, hf_arg):
    """Uniform logits over 4 tokens: every rule keeps all four (as transformers does), so no token id is favoured."""
    logits_process = pytest.importorskip("transformers.generation.logits_process")
    logits = torch.zeros(1, 4)
    assert kept(transform(logits, NO_IDS)) == {0, 1, 2, 3}
    expected = getattr(logits_process, hf_name)(hf_arg)(NO_IDS, logits.clone())
    assert torch.equal(transform(logits, NO_IDS), expected)


@pytest.mark.parametrize("transform", [TopP(0.1), TopH(0.1)])
def test_order_dependent_rules_keep_ties_where_transformers_picks_by_sort_order(transform):
    """transformers' top-p / Top-H keep one of four tied tokens, whichever its sort puts first;
    here the tie is kept whole, so no token id is favoured."""
    assert kept(transform(torch.zeros(1, 4), NO_IDS)) == {0, 1, 2, 3}


def test_epsilon_with_ties_samples_every_tied_token():
    logits = apply_transforms([EpsilonCutoff(0.3)], torch.zeros(1, 4), NO_IDS)
    gen = torch.Generator().manual_seed(0)
    draws = [int(sample_from_logits(logits, gen)) for _ in range(400)]
    assert set(draws) == {0, 1, 2, 3} and min(draws.count(t) for t in range(4)) > 60


@pytest.mark.parametrize("ours, hf_name", [(TopP, "TopPLogitsWarper"), (MinP, "MinPLogitsWarper"),
                                           (lambda x: EpsilonCutoff(x / 1000), None),
                                           (TopH, "TopHLogitsWarper")])
def test_large_vocabularies_and_ties_match_transformers(ours, hf_name):
    """SmolLM2's 49,152 and tiny-ar's 4,096 rows, with many tied logits (rounded to 0.5)."""
    logits_process = pytest.importorskip("transformers.generation.logits_process")
    gen = torch.Generator().manual_seed(3)
    for vocab in (4096, 49152):
        for scale in (1.0, 4.0):
            logits = (torch.randn(2, vocab, generator=gen) * scale * 2).round() / 2  # (B, V) ties everywhere
            x = float(torch.rand(1, generator=gen) * 0.9 + 0.05)
            got = ours(x)(logits, NO_IDS.expand(2, 0))
            if hf_name is None:  # epsilon: transformers' rule written out (p < eps and below the top logit)
                probs = logits.softmax(-1)
                expected = logits.masked_fill((probs < x / 1000) & (logits < logits.amax(-1, keepdim=True)), NEG_INF)
            else:
                expected = getattr(logits_process, hf_name)(x)(NO_IDS.expand(2, 0), logits.clone())
            for b in range(2):
                ours_kept, theirs = kept(got, b), kept(expected, b)
                extra = ours_kept - theirs  # only tokens tied with one transformers keeps (its sort's choice)
                assert theirs <= ours_kept and set(logits[b, list(extra)].tolist()) <= set(logits[b, list(theirs)].tolist())
                if hf_name in ("MinPLogitsWarper",) or hf_name is None:
                    assert ours_kept == theirs


def test_top_p_boundary_is_exact_on_a_large_vocabulary():
    """top_p a hair (1e-9) above or below the exact mass of the top k tokens: the rule keeps
    k + 1 or k tokens. A float32 running sum over 4,096 or 49,152 probabilities is off by more
    than that and moves the boundary by a token."""
    gen = torch.Generator().manual_seed(8)
    for vocab in (4096, 49152):
        logits = torch.randn(1, vocab, generator=gen) * 2  # (1, V)
        probs = torch.softmax(logits.double(), -1)[0]
        order = probs.argsort(descending=True)
        cum = probs[order].cumsum(0)  # float64 reference
        for k in (200, 900, 2000, 3000):
            for nudge, expected in ((1e-9, k + 1), (-1e-9, k)):
                top_p = float(cum[k - 1]) + nudge
                assert kept(TopP(top_p)(logits, NO_IDS)) == set(order[:expected].tolist()), (vocab, k, nudge)
