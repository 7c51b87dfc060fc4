"""RASD (issue 15): a draft model's tree with prompt-lookup sequences fused in, pruned by the draft model."""

from __future__ import annotations

import pytest
import torch

from decoding import run_to_trace
from decoding.speculative.drafters import Draft, DraftTree, TreePlan
from decoding.speculative.rasd import RASDDrafter
from decoding.speculative.retrieval import PromptLookupDrafter
from decoding.speculative.verify import ROOT


class FixedModelDrafter:
    """A stand-in model drafter: a fixed tree ROOT -> 6 -> 7 (with `siblings`, 9 beside 6 at the root)."""

    def __init__(self, siblings: bool):
        self.siblings, self.lm = siblings, type("L", (), {"name": "fixed"})()

    def propose(self, context, plan, temperature, generator):
        tree = DraftTree()
        a = tree.add(ROOT, 6, 0.5)
        tree.add(a, 7, 0.4)
        if self.siblings:
            tree.add(ROOT, 9, 0.3)
        q = torch.zeros(12)
        q[6], q[9], q[2], q[3], q[1] = 0.5, 0.3, 0.1, 0.06, 0.04  # its top 4: 6, 9, 2, 3
        return Draft(tree, q_dists={ROOT: q})

    def observe(self, feedback):
        pass


def fused(context, temperature, siblings=True):
    drafter = RASDDrafter(FixedModelDrafter(siblings), PromptLookupDrafter(2), retrieved=3)
    draft = drafter.propose(context, TreePlan("static", 4, 2, 16), temperature, None)
    return draft.tree, draft.info["sources"]


def test_retrieval_runs_through_agreeing_nodes_and_grows_below_a_leaf():
    # context ... 3 5 6 7 8 ... 3 5: the last bigram "3 5" was followed by 6 7 8
    tree, sources = fused([1, 3, 5, 6, 7, 8, 2, 3, 5], temperature=1.0)
    assert sources[:3] == ["both", "both", "model"]  # 6 and 7 are model nodes the sequence ran through
    added = [(tree.parents[i], tree.tokens[i]) for i in range(3, len(tree))]
    assert added == [(1, 8), (3, 2)] and sources[3:] == ["retrieval", "retrieval"]  # up to depth 4


def test_when_sampling_a_retrieved_sequence_never_adds_a_sibling_to_sampled_children():
    # "3 5" was followed by 6 4 4: it parts from the model tree below node 6, whose child 7 was sampled
    context = [1, 3, 5, 6, 4, 4, 2, 3, 5]
    tree, sources = fused(context, temperature=1.0)
    assert len(tree) == 3 and "retrieval" not in sources
    tree, sources = fused(context, temperature=0.0)  # greedy verification: any fusion is exact
    assert [(tree.parents[i], tree.tokens[i]) for i in range(3, len(tree))] == [(0, 4), (3, 4), (4, 2)]


def test_pruning_drops_a_sequence_the_draft_model_does_not_believe():
    # "3" was followed by 11 (q = 0, outside the model's top 4 at the root): dropped
    tree, sources = fused([1, 3, 11, 7, 2, 3], temperature=0.0)
    assert 11 not in tree.tokens and "retrieval" not in sources


def test_greedy_rasd_equals_the_targets_greedy_text_and_records_sources(tiny_lm):
    plain = run_to_trace(tiny_lm, "the cat sat on the mat, the cat sat on the", max_new_tokens=30)
    spec = run_to_trace(tiny_lm, "the cat sat on the mat, the cat sat on the", strategy="speculative", max_new_tokens=30,
                        params={"drafter": "rasd", "draft_model": "tiny-random-draft", "ngram": 2})
    assert spec.finish.token_ids == plain.finish.token_ids
    for r in spec.of_kind("spec_round"):
        assert len(r.extra["sources"]) == len(r.nodes)
        assert set(r.extra["sources"]) <= {"model", "retrieval", "both"}


def test_rasd_needs_a_draft_model():
    with pytest.raises(ValueError, match="`rasd.draft_model` is required: a smaller causal model"):
        run_to_trace("tiny-random", "hi", strategy="speculative", max_new_tokens=3, params={"drafter": "rasd"})
