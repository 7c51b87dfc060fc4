"""Speculative decoding: lossless verification, tree attention, drafters, statistics."""

import math

import pytest
import torch

from decoding import generate, run_to_trace
from decoding.events import SpecRound, TokenStep, stats
from decoding.lm import LM
from decoding.models import load_model
from decoding.run import as_lm
from decoding.speculative import verify
from decoding.speculative.drafters import TreePlan, gumbel_top_k, iid_draws, shallow_view
from decoding.speculative.retrieval import PromptLookupDrafter, build_trie
from decoding.speculative.verify import ROOT, DraftTree, verify_tree
from drafter_settings import TARGET_PROMPTS, arrange, drafter_names, drafter_setting, target_name

PROMPT = "Summarise: the cat sat on the mat. The cat sat on the mat and the dog sat on the mat."


# ---------------------------------------------------------------- statistics helpers
def chi2_pvalue(counts: list[int], probs: list[float]) -> float:
    """Pearson chi-square p-value (Wilson-Hilferty approximation of the chi2 tail)."""
    n = sum(counts)
    stat = sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, probs) if p > 0)
    k = sum(1 for p in probs if p > 0) - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


P = torch.tensor([0.35, 0.25, 0.2, 0.1, 0.06, 0.04], dtype=torch.float64)  # target at the root
Q = torch.tensor([0.05, 0.1, 0.15, 0.3, 0.25, 0.15], dtype=torch.float64)  # a poor drafter
CHILD_P = torch.tensor([0.1, 0.5, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64)  # target after any first token


def first_token_counts(make_tree, trials=5_000, seed=0):
    """Run verification many times on hand-made distributions; count the first output token. 5,000 runs: the
    wrong rules below score p < 1e-17 there (the tests ask < 1e-6), the right ones p > 0.5."""
    gen = torch.Generator().manual_seed(seed)
    counts = [0] * len(P)
    for _ in range(trials):
        tree = make_tree(gen)
        probs = torch.stack([P] + [CHILD_P] * len(tree))
        verdict = verify_tree(tree, probs, gen, greedy=False)
        first = tree.tokens[verdict.accepted[0]] if verdict.accepted else verdict.extra_token
        counts[first] += 1
    return counts


def chain_from_q(gen):
    tree = DraftTree()
    tree.sibling_q[ROOT] = Q
    x = int(torch.multinomial(Q, 1, generator=gen))
    tree.add(ROOT, x, Q[x].item())
    return tree


def siblings_without_replacement(gen):
    tree = DraftTree()
    tree.sibling_q[ROOT] = Q
    for x in gumbel_top_k(Q.log(), 3, gen):
        node = tree.add(ROOT, x, Q[x].item())
        tree.add(node, 1, 0.5)  # a deterministic grandchild
    return tree


def iid_siblings(gen):
    """SpecTr's drafts: three siblings drawn i.i.d. from Q (repeats allowed), verified by K-SEQ."""
    tree = DraftTree(rule="spectr")
    tree.sibling_q[ROOT] = Q
    for x in iid_draws(Q.log(), 3, gen):
        node = tree.add(ROOT, x, Q[x].item())
        tree.add(node, 1, 0.5)
    return tree


def deterministic_children(gen):
    tree = DraftTree()
    for x in (3, 4):  # fixed guesses, as retrieval drafters make
        tree.add(ROOT, x, 1.0)
    return tree


SLOW_TREE = pytest.mark.slow  # 5,000 rounds of many-sibling trees (2-3 s); chains and fixed guesses stay fast


@pytest.mark.parametrize("make_tree", [chain_from_q, pytest.param(siblings_without_replacement, marks=SLOW_TREE),
                                       pytest.param(iid_siblings, marks=SLOW_TREE), deterministic_children])
def test_speculative_sampling_output_follows_the_target(make_tree):
    counts = first_token_counts(make_tree)
    assert chi2_pvalue(counts, P.tolist()) > 0.001, counts


@pytest.mark.slow  # checks the check's power (the rule itself is checked in the fast loop above)
@pytest.mark.parametrize("make_tree", [chain_from_q, siblings_without_replacement, deterministic_children])
def test_the_statistical_test_catches_a_wrong_rule(make_tree, monkeypatch):
    """Resampling from p instead of the residual after a rejection is a classic bug: it must fail."""
    monkeypatch.setattr(verify, "residual_distribution", lambda p, q: p.clone())
    counts = first_token_counts(make_tree, seed=1)
    assert chi2_pvalue(counts, P.tolist()) < 1e-6, counts


@pytest.mark.slow  # checks the check's power
def test_the_statistical_test_catches_a_wrong_spectr_residual(monkeypatch):
    """SpecTr with speculative sampling's one-draft residual norm(max(0, p - q)) instead of its own: it must fail."""
    monkeypatch.setattr(verify, "spectr_residual", lambda p, q, k, rho: verify.residual_distribution(p, q))
    counts = first_token_counts(iid_siblings, seed=1)
    assert chi2_pvalue(counts, P.tolist()) < 1e-6, counts


def test_spectr_records_rho_and_its_acceptance_probabilities():
    gen = torch.Generator().manual_seed(2)
    tree = iid_siblings(gen)
    verdict = verify_tree(tree, torch.stack([P] + [CHILD_P] * len(tree)), gen, greedy=False)
    rho = verdict.rho[ROOT]
    assert 1 < rho <= 3 and rho == verify.spectr_rho(P, Q, 3)
    for visit in verdict.visits:
        if tree.parents[visit.node] == ROOT:
            x = tree.tokens[visit.node]
            assert visit.accept_prob == pytest.approx(min(1.0, P[x].item() / (rho * Q[x].item())))


def test_two_token_sequences_follow_the_target():
    """Accepted token then the bonus: the pair is distributed as p(x1) p(x2 | x1)."""
    gen = torch.Generator().manual_seed(3)
    counts: dict[tuple, int] = {}
    trials = 10_000
    for _ in range(trials):
        x = int(torch.multinomial(Q, 1, generator=gen))
        probs = torch.stack([P, CHILD_P])
        tree = DraftTree()
        tree.add(ROOT, x, Q[x].item())
        tree.sibling_q[ROOT] = Q
        verdict = verify_tree(tree, probs, gen, greedy=False)
        out = [x] * len(verdict.accepted) + [verdict.extra_token]
        if len(out) == 2:
            counts[tuple(out)] = counts.get(tuple(out), 0) + 1
    # P(accept x and then y) = min(p(x), q(x)) * CHILD_P(y)
    expected = {(x, y): min(P[x], Q[x]).item() * CHILD_P[y].item() for x in range(6) for y in range(6)}
    total = sum(expected.values())
    keys = sorted(expected)
    assert chi2_pvalue([counts.get(k, 0) for k in keys], [expected[k] / total for k in keys]) > 0.001
    assert sum(counts.values()) / trials == pytest.approx(total, abs=4 * math.sqrt(total * (1 - total) / trials))  # 4 sd


def test_greedy_verification_accepts_exactly_the_argmax_path():
    tree = DraftTree()
    a = tree.add(ROOT, 0, 0.9)
    tree.add(ROOT, 2, 0.1)
    tree.add(a, 3, 0.5)  # argmax after node a is 1, so this is rejected
    probs = torch.stack([P, CHILD_P, CHILD_P, CHILD_P])
    verdict = verify_tree(tree, probs, None, greedy=True)
    assert verdict.accepted == [a] and verdict.extra_token == 1 and verdict.extra_kind == "correction"


# ---------------------------------------------------------------- tree attention
def test_tree_verification_logits_equal_per_path_forwards(tiny_lm):
    context = [5, 6, 7, 8, 9]
    parents = [-1, -1, 0, 0, 1, 2, 5]
    tokens = [11, 12, 13, 14, 15, 16, 17]
    cache = tiny_lm.prefill(context[:3]).cache
    out = tiny_lm.forward_tree(context[3:], parents, tokens, cache)
    tree = DraftTree()
    for p, t in zip(parents, tokens):
        tree.add(p, t)
    with torch.inference_mode():
        for i in range(len(tokens)):
            path = context + [tokens[j] for j in tree.path(i)]
            ref = tiny_lm.model(torch.tensor([path])).logits[0, -1]
            assert torch.allclose(out.logits[0, 2 + i], ref, atol=1e-5)
        assert torch.allclose(out.logits[0, 1], tiny_lm.model(torch.tensor([context])).logits[0, -1], atol=1e-5)


def test_early_exit_view_shares_weights_and_equals_layer_logits(tiny_lm):
    view = shallow_view(tiny_lm.model, 2)
    ids = torch.tensor([[3, 4, 5, 6]])
    out = tiny_lm.forward(ids, output_hidden_states=True)
    with torch.inference_mode():
        expected = tiny_lm.model.lm_head(tiny_lm.final_norm(out.hidden_states[2])).float()
        assert torch.allclose(view(ids).logits.float(), expected, atol=1e-6)
    assert {p.data_ptr() for p in view.parameters()} <= {p.data_ptr() for p in tiny_lm.model.parameters()}
    assert tiny_lm.model.config.num_hidden_layers == 4  # the target is untouched


# ---------------------------------------------------------------- drafters
def test_prompt_lookup_finds_the_latest_longest_match():
    drafter = PromptLookupDrafter(ngram=2)
    context = [1, 2, 3, 4, 9, 1, 2, 3, 5, 7, 1, 2]
    assert drafter.continuations(context, 3, limit=2) == [[3, 5, 7], [3, 4, 9]]
    tree = drafter.propose(context, TreePlan("static", depth=3, width=2), 0.0, None).tree
    assert tree.tokens == [3, 5, 7, 4, 9] and tree.parents == [ROOT, 0, 1, 0, 3]



def test_prompt_lookup_copies_in_full_after_a_token_seen_once_and_not_after_a_frequent_one():
    drafter = PromptLookupDrafter(ngram=3)
    # 8 occurred once before: its continuation is copied in full
    assert drafter.continuations([8, 4, 5, 6, 7, 1, 8], 4, limit=1) == [[4, 5, 6, 7]]
    # 1 occurred three times, followed by 2 each time, then by different tokens: only the agreed 2
    assert drafter.continuations([1, 2, 3, 1, 2, 4, 1, 2, 5, 9, 1], 4, limit=1) == [[2]]
    # nothing agreed after a frequent token: the most recent one's next token alone
    assert drafter.continuations([1, 3, 1, 4, 6, 1], 4, limit=2) == [[4], [3]]

def test_trie_merges_prefixes_within_budget():
    tree = build_trie([[1, 2, 3], [1, 2, 4], [5]], budget=4)
    assert tree.tokens == [1, 2, 3, 4] and tree.parents == [ROOT, 0, 1, 1]


def test_gumbel_top_k_samples_without_replacement():
    gen = torch.Generator().manual_seed(0)
    logq = torch.log(torch.tensor([0.7, 0.2, 0.1, 0.0]))
    firsts = [gumbel_top_k(logq, 2, gen) for _ in range(4000)]
    assert all(len(set(f)) == 2 and 3 not in f for f in firsts)
    assert sum(f[0] == 0 for f in firsts) / 4000 == pytest.approx(0.7, abs=0.03)


# ---------------------------------------------------------------- the strategy
MODEL_DRAFTERS = [drafter_setting("model"),
                  {"drafter": "model", "draft_model": "tiny-random-draft", "confidence": 0.4, "adaptive": True}]
# every registered drafter at its tiny setting (tests/drafter_settings.py: a new drafter is covered without an edit
# here), and other settings of some
TINY_DRAFTERS = [drafter_setting(name) for name in drafter_names()] + MODEL_DRAFTERS[1:] + [
    {"drafter": "rasd", "draft_model": "tiny-random-draft", "ngram": 2},
    {"drafter": "early-exit", "exit_layer": 2},  # a fixed exit layer (the default is DEL's choice per round)
    {"drafter": "s2d", "draft_model": "tiny-random", "exits": "1,2", "threshold": 0.05},  # S2D, self
    {"drafter": "rapid", "draft_model": "tiny-random-draft", "top_k": 1},  # RAPID with another model
]


def test_the_lossless_table_covers_every_registered_drafter():
    assert {d["drafter"] for d in TINY_DRAFTERS} == set(drafter_names())


@pytest.mark.parametrize("tree", ["chain", "static", "dynamic"])
@pytest.mark.parametrize("drafter", TINY_DRAFTERS, ids=lambda d: "-".join(map(str, d.values())))
def test_greedy_speculative_equals_target_greedy_on_tiny_models(drafter, tree, monkeypatch, tmp_path):
    lm = as_lm(target_name(drafter["drafter"]))
    arrange(drafter["drafter"], lm, tmp_path, monkeypatch)
    prompt = TARGET_PROMPTS.get(lm.name, PROMPT)
    base = run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=30)
    spec = run_to_trace(lm, prompt, strategy="speculative", params=drafter | {"tree": tree}, max_new_tokens=30)
    assert spec.finish.token_ids == base.finish.token_ids
    n = len(base.finish.token_ids)  # 30 (tiny-random never ends; tiny-ar ends its verse)
    tokens = spec.of_kind("token")
    assert n >= 12 and [e.token_id for e in tokens] == spec.finish.token_ids and [e.step for e in tokens] == list(range(n))
    rounds = spec.of_kind("spec_round")
    assert sum(len(r.token_ids) for r in rounds) >= n
    for r in rounds:
        assert [n["status"] for n in r.nodes if n["id"] in r.accepted_path] == ["accepted"] * len(r.accepted_path)
        path_tokens = [r.nodes[i]["token_id"] for i in r.accepted_path]
        assert r.token_ids == path_tokens + [r.extra_token_id]


def test_the_confidence_cut_off_ends_a_chain_after_an_unsure_draft_token(tiny_lm):
    params = {"drafter": "model", "draft_model": "tiny-random-draft", "draft_length": 6, "confidence": 0.0}
    full = run_to_trace(tiny_lm, PROMPT, strategy="speculative", params=params, max_new_tokens=24)
    cut = run_to_trace(tiny_lm, PROMPT, strategy="speculative", params=params | {"confidence": 0.3}, max_new_tokens=24)
    assert cut.finish.token_ids == full.finish.token_ids  # greedy: the same text
    assert all(len(r.nodes) == 6 for r in full.of_kind("spec_round")[:-1])
    shorter = 0
    for r in cut.of_kind("spec_round"):
        qs = [n["q"] for n in r.nodes]
        assert all(q >= 0.3 for q in qs[:-1])  # only the last drafted token may be below the threshold
        shorter += len(qs) < 6 and qs[-1] < 0.3
    assert shorter >= 1


def test_a_draft_model_cuts_its_chain_at_0_4_by_default_and_other_drafters_never():
    """`confidence` -1 (the default) is the drafter's own: a draft model's 0.4 and 8 tokens (transformers'
    assisted generation stops at 0.4 too); 0 still means never; the run records the value it used."""
    from decoding.params import from_values
    from decoding.speculative.strategy import SpeculativeParams

    model = from_values(SpeculativeParams, {"drafter": "model", "draft_model": "tiny-random-draft"})
    assert (model.confidence, model.draft_length) == (0.4, 8)
    never = from_values(SpeculativeParams, {"drafter": "model", "draft_model": "tiny-random-draft", "confidence": 0})
    assert never.confidence == 0.0
    assert from_values(SpeculativeParams, {"drafter": "prompt-lookup"}).confidence == 0.0
    with pytest.raises(ValueError, match=r"`confidence` must be -1 \(the drafter's default\) or in \[0, 1\]"):
        from_values(SpeculativeParams, {"drafter": "model", "draft_model": "tiny-random-draft", "confidence": 1.5})


@pytest.mark.parametrize("tree", ["chain", "static", "dynamic"])
@pytest.mark.parametrize("drafter", MODEL_DRAFTERS, ids=lambda d: "-".join(map(str, d.values())))
def test_greedy_spectr_rule_equals_target_greedy_on_tiny_models(tiny_lm, drafter, tree):
    """At temperature 0 the rule changes nothing: greedy verification, top-k drafts."""
    base = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=30)
    spec = run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=30,
                        params=drafter | {"tree": tree, "rule": "spectr", "width": 3})
    assert spec.finish.token_ids == base.finish.token_ids


def test_spectr_rounds_draw_siblings_with_replacement_and_record_rho(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=12, seed=0,
                         params={"drafter": "model", "draft_model": "tiny-random-draft", "tree": "static", "width": 3,
                                 "draft_length": 2, "temperature": 1.0, "rule": "spectr"})
    rounds = trace.of_kind("spec_round")
    assert trace.start.params["rule"] == "spectr"
    for r in rounds:
        tried = {n["parent"] for n in r.nodes if n["status"] != "unvisited"}
        assert tried <= {d["parent"] for d in r.dists if "rho" in d}  # rho* wherever siblings were tried
        for n in r.nodes:
            d = next(d for d in r.dists if d["parent"] == n["parent"])
            if n["accept_prob"] is not None:  # min(1, p / (rho q))
                assert n["accept_prob"] == pytest.approx(min(1.0, n["p"] / (d["rho"] * n["q"])), rel=1e-4)


@pytest.mark.slow  # SmolLM2
@pytest.mark.parametrize("params", [
    {"drafter": "early-exit", "exit_layer": 24, "tree": "chain"},
    {"drafter": "early-exit", "tree": "dynamic"},
    {"drafter": "prompt-lookup", "tree": "static"},
    {"drafter": "token-recycling", "tree": "chain", "adaptive": True},
], ids=lambda p: "-".join(map(str, p.values())))
def test_greedy_speculative_equals_target_greedy_on_the_real_model(smol_lm, params):
    base = run_to_trace(smol_lm, PROMPT, strategy="greedy", max_new_tokens=24)
    spec = run_to_trace(smol_lm, PROMPT, strategy="speculative", params=params, max_new_tokens=24)
    assert spec.finish.token_ids == base.finish.token_ids
    s = stats(spec)
    assert s["target_forward_passes"] == sum(r.target_forward_passes for r in spec.of_kind("spec_round"))
    assert s["acceptance_rate"] is None or 0 <= s["acceptance_rate"] <= 1  # None: nothing was drafted
    assert s["mean_accepted_length"] >= 0


@pytest.mark.slow  # the real models tiny-ar, tiny-ar-draft
@pytest.mark.parametrize("tree", ["chain", "static"])
def test_tiny_ar_draft_drafts_for_tiny_ar_losslessly_and_is_often_accepted(tree):
    """The offline trained pair: a 0.85M drafter for the 4.3M tiny-ar, same tokenizer and data."""
    target = LM(load_model("tiny-ar", progress=None))
    prompt = "And it came to pass, when the king"
    base = run_to_trace(target, prompt, strategy="greedy", max_new_tokens=40, chat=False)
    spec = run_to_trace(target, prompt, strategy="speculative", max_new_tokens=40, chat=False,
                        params={"drafter": "model", "draft_model": "tiny-ar-draft", "tree": tree, "draft_length": 4})
    assert spec.finish.token_ids == base.finish.token_ids
    s = stats(spec)
    assert s["acceptance_rate"] > 0.3 and s["target_forward_passes_per_token"] < 0.8  # a real drafter, not noise


@pytest.mark.slow  # 800 runs
def test_speculative_sampling_first_token_matches_the_target_on_a_model(tiny_lm):
    """End to end: the first sampled token of a speculative run is distributed as softmax(logits / T) (the
    exact two-token tests on Markov models, tests/speculative/test_speculative_exact.py, have the power)."""
    temperature, trials = 0.6, 800
    ids, _, _ = tiny_lm.encode_prompt(PROMPT)
    with torch.inference_mode():
        p = torch.softmax(tiny_lm.model(torch.tensor([ids])).logits[0, -1].double() / temperature, -1)
    top = p.topk(8).indices.tolist()
    counts = [0] * 9
    for seed in range(trials):
        events = generate(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=1, seed=seed,
                          params={"drafter": "model", "draft_model": "tiny-random-draft", "tree": "static",
                                  "temperature": temperature})
        first = next(e for e in events if isinstance(e, TokenStep)).token_id
        counts[top.index(first) if first in top else 8] += 1
    expected = [p[t].item() for t in top] + [1 - p[top].sum().item()]
    assert chi2_pvalue(counts, expected) > 0.001, (counts, expected)


@pytest.mark.parametrize("tree", ["chain", "static"])
@pytest.mark.parametrize("words", [6, 300], ids=["short", "long"])
def test_the_prompt_goes_through_the_target_with_the_first_draft(tiny_lm, tree, words):
    """A drafter that reads nothing of the prompt's pass drafts before it: the prompt is verified with the first
    draft in one call (as assisted generation does), so a run costs one target call per round; a prompt longer
    than FUSED_TREE_PROMPT under a tree's mask gets its own pass first. Greedy text unchanged either way."""
    from decoding.speculative.strategy import FUSED_TREE_PROMPT

    prompt = "".join(f"b{i % 10}" for i in range(words)) + "b"  # "b" followed by a different digit each time
    params = {"drafter": "prompt-lookup", "prompt-lookup.ngram": 1, "tree": tree, "width": 2}
    trace = run_to_trace(tiny_lm, prompt, strategy="speculative", params=params, max_new_tokens=16)
    plain = run_to_trace(tiny_lm, prompt, max_new_tokens=16)
    assert trace.finish.token_ids == plain.finish.token_ids
    rounds = trace.of_kind("spec_round")
    assert (len(rounds[0].nodes) > 1) == (tree != "chain")  # two continuations: a tree, not a chain
    separate = tree != "chain" and len(trace.start.prompt_ids) > FUSED_TREE_PROMPT
    assert rounds[0].target_forward_passes == 1 + separate
    assert sum(r.target_forward_passes for r in rounds) == len(rounds) + separate


@pytest.mark.parametrize("tree", ["chain", "static"])
@pytest.mark.parametrize("reads_rows", [True, False], ids=["reads-rows", "reads-nothing"])
def test_a_drafter_is_told_exactly_the_rows_the_target_ran_and_what_its_cache_holds(tiny_lm, monkeypatch, reads_rows,
                                                                                      tree):
    """Feedback's tokens, logits and hidden states describe the same rows: the fed tokens and the tree for a drafter
    that reads rows (EAGLE's features need every fed token's), the root and the tree otherwise. An oracle drafts the
    target's own greedy text (behind a wrong sibling, as a tree's second branch), so every round accepts several
    tokens: they stay in the target's cache, which holds the context but its last token after every round
    (`committed`), and the next pass feeds that one token alone."""
    from decoding.speculative import strategy
    from decoding.speculative.base import Drafter
    from decoding.speculative.drafters import Draft
    from decoding.speculative.verify import DraftTree

    plain = run_to_trace(tiny_lm, PROMPT, max_new_tokens=20)
    text, prompt = plain.finish.token_ids, plain.start.prompt_ids
    seen = []

    class Oracle(Drafter):
        name = "oracle"
        needs_hidden_states = reads_rows
        prefill_rows = -1 if reads_rows else 0

        def propose(self, context, plan, temperature, generator):
            tree, parent = DraftTree(), ROOT
            right = text[len(context) - len(prompt):][:3]
            if tree_shape == "static" and right:
                tree.add(ROOT, (right[0] + 1) % tiny_lm.vocab_size)  # a wrong first branch: the path is gathered
            for token in right:
                parent = tree.add(parent, token)
            return Draft(tree)

        def observe(self, feedback):
            seen.append((feedback, feedback.cache.get_seq_length()))

    tree_shape = tree
    monkeypatch.setattr(strategy, "make_drafter", lambda lm, params: Oracle())
    trace = run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=20)
    assert trace.finish.token_ids == text
    if reads_rows:  # a drafter that reads rows first sees the prompt's pass
        (prefill, held), seen = seen[0], seen[1:]
        assert prefill.committed == held == len(prompt) - 1 and prefill.fed == len(prompt) - 1
    context = list(prompt)
    for (feedback, held), r in zip(seen, trace.of_kind("spec_round")):
        nodes = [n["token_id"] for n in r.nodes]
        assert feedback.row_tokens == context[-1:] + nodes
        assert feedback.fed == (len(prompt) if r.round == 0 and not reads_rows else 1)
        assert feedback.row_logits.shape[0] == len(feedback.row_tokens)
        if reads_rows:
            assert all(h.shape[1] == feedback.fed + len(nodes) for h in feedback.hidden_states)
        assert feedback.accepted == tuple(r.accepted_path)
        context += r.token_ids
        assert feedback.committed == held == len(context) - 1
        assert feedback.start == len(context) - 1 - len(r.accepted_path) - feedback.fed
    assert max(len(r.accepted_path) for r in trace.of_kind("spec_round")) >= 3  # several accepted a round
    if tree == "static":
        assert any(r.accepted_path and r.accepted_path[0] == 1 for r in trace.of_kind("spec_round"))  # gathered


def test_a_drafter_that_reads_the_prompts_pass_still_gets_it(tiny_lm):
    """Token Recycling seeds its table from the prompt's rows: the prompt keeps its own pass."""
    trace = run_to_trace(tiny_lm, PROMPT, strategy="speculative", params={"drafter": "token-recycling"},
                         max_new_tokens=8)
    assert trace.of_kind("spec_round")[0].target_forward_passes == 2


def test_rounds_record_the_tree_and_timing(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=12, seed=0,
                         params={"drafter": "model", "draft_model": "tiny-random-draft", "tree": "static", "temperature": 1.0})
    rounds = trace.of_kind("spec_round")
    assert rounds and all(isinstance(r, SpecRound) for r in rounds)
    r = rounds[0]
    assert r.draft_forward_passes >= 1 and r.target_forward_passes == 1  # the prompt goes through with the first draft
    assert {d["parent"] for d in r.dists} >= {ROOT}
    for n in r.nodes:
        assert n["status"] in {"accepted", "rejected", "unvisited"}
        assert (n["u"] is None) == (n["status"] == "unvisited")
    assert 0 <= r.dists[0]["overlap"] <= 1
    s = stats(trace)
    assert {"target_forward_passes", "mean_accepted_length", "acceptance_rate"} <= set(s)


@pytest.mark.parametrize("params, message", [
    ({"drafter": "oracle"}, "`drafter` must be one of"),
    ({"tree": "forest"}, "`tree` must be one of"),
    ({"rule": "specinfer"}, "`rule` must be one of"),
    ({"drafter": "model"}, "`model.draft_model` is required"),
    ({"draft_length": -1}, r"`draft_length` must be an integer in \[0, 16\]"),
    ({"draft_length": 17}, r"`draft_length` must be an integer in \[0, 16\]"),
    ({"temperature": -1}, "`temperature`"),
    ({"drafter": "early-exit", "exit_layer": 99}, "`exit_layer` must be in"),
])
def test_bad_speculative_parameters(tiny_lm, params, message):
    with pytest.raises(ValueError, match=message):
        list(generate(tiny_lm, PROMPT, strategy="speculative", params=params, max_new_tokens=4))


@pytest.mark.slow  # SmolLM2
def test_a_draft_model_with_another_tokenizer_is_refused(smol_lm):
    with pytest.raises(ValueError, match="does not share the target's tokenizer"):
        list(generate(smol_lm, PROMPT, strategy="speculative", max_new_tokens=4,
                      params={"drafter": "model", "draft_model": "tiny-random"}))


def test_tree_levels_fed_incrementally_equal_one_pass(tiny_lm):
    """Drafting feeds each level's new nodes only (earlier levels stay in the cache)."""
    context = [5, 6, 7, 8]
    parents = [-1, -1, 0, 0, 1, 2]
    tokens = [11, 12, 13, 14, 15, 16]
    whole = tiny_lm.forward_tree(context[2:], parents, tokens, tiny_lm.prefill(context[:2]).cache)
    cache = tiny_lm.prefill(context[:2]).cache
    first = tiny_lm.forward_tree(context[2:], parents[:2], tokens[:2], cache)
    second = tiny_lm.forward_tree([], parents[:4], tokens[:4], cache, cached_nodes=2)
    third = tiny_lm.forward_tree([], parents, tokens, cache, cached_nodes=4)
    assert torch.allclose(first.logits[0], whole.logits[0, :4], atol=1e-5)
    assert torch.allclose(second.logits[0], whole.logits[0, 4:6], atol=1e-5)
    assert torch.allclose(third.logits[0], whole.logits[0, 6:8], atol=1e-5)
    with pytest.raises(ValueError, match="pending tokens must come before"):
        tiny_lm.forward_tree([1], parents, tokens, cache, cached_nodes=2)


@pytest.mark.slow  # SmolLM2
def test_dynamic_exit_declines_to_draft_when_early_exit_cannot_pay(smol_lm):
    """On SmolLM2 (not trained for early exit, LM head as heavy as 8 layers) DEL's estimates,
    seeded from the prompt, say no exit layer pays for itself: it decodes plainly."""
    trace = run_to_trace(smol_lm, PROMPT, strategy="speculative", params={"drafter": "early-exit"}, max_new_tokens=8)
    rounds = trace.of_kind("spec_round")
    alpha = rounds[0].extra["alpha"]
    assert all(a is not None and 0 <= a <= 1 for a in alpha.values())  # estimated before the first round
    assert rounds[0].extra["draft_length"] == 0 and stats(trace)["draft_forward_passes"] == 0


def test_s2d_drafts_with_the_smallest_confident_sub_model(tiny_lm):
    """threshold 0: the smallest sub-model drafts every position; 1: every position climbs to the largest;
    in between each position stops at the first sub-model whose top probability reaches it. Greedy output
    is the target's whichever sub-model drafted."""
    base = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=16)
    seen = {}
    for threshold in (0.0, 0.03, 1.0):
        params = {"drafter": "s2d", "draft_model": "tiny-random-draft", "exits": "1,2", "threshold": threshold}
        trace = run_to_trace(tiny_lm, PROMPT, strategy="speculative", params=params, max_new_tokens=16)
        assert trace.finish.token_ids == base.finish.token_ids
        rounds = trace.of_kind("spec_round")
        for r in rounds:
            assert r.extra["s2d_stages"] == [1, 2] and len(r.extra["s2d_exits"]) == len(r.extra["s2d_calls"])
            for exit_, calls, top in zip(r.extra["s2d_exits"], r.extra["s2d_calls"], r.extra["s2d_confidence"]):
                assert exit_ == [1, 2][calls - 1]
                assert top >= threshold or exit_ == 2  # only the largest may answer below the threshold
            assert r.draft_forward_passes == sum(r.extra["s2d_calls"])
        seen[threshold] = [k for r in rounds for k in r.extra["s2d_exits"]]
    assert set(seen[0.0]) == {1} and set(seen[1.0]) == {2}
