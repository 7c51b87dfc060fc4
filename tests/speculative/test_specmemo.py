"""SpecMemo's memory accounting and budget: the bytes each round records are the tensors' own sizes and
equal the footprint's formula; the node budget follows from the budget, every round stays within it,
the output is unchanged (greedy), and a budget below the lower bound is refused with the numbers."""

import pytest
import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.models import load_model
from decoding.speculative.memory import MB, Footprint, cache_bytes, kv_bytes_per_position
from decoding.params import from_values
from decoding.speculative.strategy import SpeculativeParams, make_drafter

PROMPT = "And the king said unto"
TOKENS = 24
FAST = "tiny-ar and tiny-ar-draft load in well under a second"
MODEL = {"drafter": "model", "model.draft_model": "tiny-ar-draft", "draft_length": 4}


@pytest.fixture(scope="module")
def lm():
    return LM(load_model("tiny-ar", dtype="float32", progress=None))


def footprint(lm, params: dict) -> Footprint:
    return Footprint.of(lm, make_drafter(lm, from_values(SpeculativeParams, params)))


def run(lm, params: dict, tokens: int = TOKENS):
    return run_to_trace(lm, PROMPT, strategy="speculative", params=params, max_new_tokens=tokens, chat=False)


@pytest.mark.fast(FAST)
def test_every_part_is_the_size_of_its_tensors_and_of_the_formula(lm):
    trace = run(lm, MODEL)
    fp = footprint(lm, MODEL)
    prompt = len(lm.tokenizer(PROMPT, add_special_tokens=False)["input_ids"])
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())  # tied weights once
    assert fp.target_weights == weights + sum(b.numel() * b.element_size() for b in lm.model.buffers())
    assert fp.kv_target == 2 * 5 * 4 * 64 * 4  # layers x kv heads x head dim x float32, keys and values
    draft = load_model("tiny-ar-draft", dtype="float32", progress=None).model
    rounds = trace.of_kind("spec_round")
    previous = None
    for r in rounds:
        parts, nodes = r.extra["memory"]["parts"], len(r.nodes)
        pending = 1 if previous is None else r.step - previous.step
        formula = fp.verify_parts(prompt + r.step - pending, pending, nodes, len(r.dists))
        for name, value in formula.items():
            assert parts[name] == value, name
        assert parts["draft weights"] == sum(p.numel() * p.element_size() for p in draft.parameters()) + \
            sum(b.numel() * b.element_size() for b in draft.buffers())
        assert 0 < parts["draft cache"] <= kv_bytes_per_position(draft.config, torch.float32) * (prompt + r.step + nodes)
        previous = r


@pytest.mark.fast(FAST)
def test_cache_bytes_reads_the_keys_and_values(lm):
    out = lm.prefill(lm.tokenizer(PROMPT, add_special_tokens=False)["input_ids"])
    tensors = [t for layer in out.cache.layers for t in (layer.keys, layer.values)]
    assert cache_bytes(out.cache) == sum(t.numel() * t.element_size() for t in tensors) > 0


@pytest.mark.fast(FAST)
def test_the_budget_sets_the_tree_and_every_round_fits_it(lm):
    plain = run(lm, MODEL)
    fp = footprint(lm, MODEL)
    prompt = len(lm.tokenizer(PROMPT, add_special_tokens=False)["input_ids"])
    floor = fp.fixed(prompt + TOKENS)
    nodes_seen = {}
    for nodes in (0, 1, 2, 4):
        budget = floor + nodes * fp.per_node
        trace = run(lm, MODEL | {"memory_budget_mb": budget / MB + 1e-9})
        assert trace.finish.token_ids == plain.finish.token_ids  # greedy: the budget never changes the text
        rounds = trace.of_kind("spec_round")
        assert {r.extra["memory"]["node_budget"] for r in rounds} == {nodes}
        assert all(len(r.nodes) <= nodes for r in rounds)
        assert all(sum(r.extra["memory"]["parts"].values()) <= budget for r in rounds)
        nodes_seen[nodes] = len(rounds)
    assert nodes_seen[0] == TOKENS  # no draft fits: one token per round
    assert nodes_seen[4] < nodes_seen[1] < nodes_seen[0]


@pytest.mark.fast(FAST)
def test_a_budget_below_the_lower_bound_is_refused_with_the_numbers(lm):
    fp = footprint(lm, MODEL)
    floor = fp.fixed(len(lm.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]) + TOKENS)
    with pytest.raises(ValueError, match=r"`memory_budget_mb` 1\.00 MB is below what decoding needs without any "
                                         r"draft: \d+\.\d\d MB \(weights"):
        run(lm, MODEL | {"memory_budget_mb": 1.0})
    assert floor > 19 * MB  # tiny-ar (16.5 MB) + tiny-ar-draft (3.3 MB) in float32


@pytest.mark.fast(FAST)
def test_the_specmemo_preset_note_holds(lm):
    """What preset 28 says: 3 draft nodes and 29 rounds at 20.9 MB, 11 and 19 at 21.5 MB, 30 and 17 without a
    budget (peak 22.0 MB), the lower bound 20.6 MB, 76 KB a node, tiny-ar's greedy text every time."""
    from decoding.presets import find_preset

    preset = find_preset("speculative", "28-speculative-specmemo")
    greedy = run_to_trace(lm, preset.prompt, strategy="greedy", max_new_tokens=preset.max_new_tokens, chat=False)
    fp = footprint(lm, preset.params)
    prompt = len(lm.tokenizer(preset.prompt, add_special_tokens=False)["input_ids"])
    assert round(fp.fixed(prompt + preset.max_new_tokens) / MB, 1) == 20.6 and round(fp.per_node / 1024) == 76
    for budget, nodes, rounds in ((20.9, 3, 29), (21.5, 11, 19), (0.0, 30, 17)):
        trace = run_to_trace(lm, preset.prompt, strategy="speculative", params=preset.params | {"memory_budget_mb": budget},
                             max_new_tokens=preset.max_new_tokens, chat=False)
        spec = trace.of_kind("spec_round")
        assert (spec[0].extra["memory"]["node_budget"], len(spec)) == (nodes, rounds)
        assert trace.finish.token_ids == greedy.finish.token_ids
    assert round(max(sum(r.extra["memory"]["parts"].values()) for r in spec) / MB, 1) == 22.0
