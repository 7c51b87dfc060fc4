"""Speculative sampling follows the target's distribution exactly, for every drafter x tree shape.

Two levels, both on Markov targets whose exact two-token distribution is known:
- the tree-growing and verification decisions (`grow_tree`, `verify_tree`) driven by hand-made
  logit matrices, many thousands of runs: sized to catch a total-variation error of 0.025;
- the whole engine (`run_to_trace`) on toy Markov models built as real Llama models
  (`tests/markov.py`), for every drafter and tree shape: the path a user's run takes.
A value-based dynamic selection (the rule before issue 11, kept here as `value_based_grow_tree`)
fails the same tests, so they can fail. Both levels also run SpecTr's rule (siblings drawn i.i.d.,
k-sequential selection), and a wrong SpecTr residual fails the engine's test.
"""

from __future__ import annotations

import heapq
import math

import pytest
import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.speculative import drafters as model_drafters
from decoding.speculative import verify
from decoding.speculative.drafters import Draft, DraftTree, TreePlan, grow_tree, gumbel_top_k
from decoding.speculative.verify import ROOT, verify_tree
from markov import markov_llama, register, word_tokenizer
from test_speculative import chi2_pvalue

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- statistics
def total_variation(counts: list[int], probs: list[float]) -> float:
    n = sum(counts)
    return 0.5 * sum(abs(c / n - p) for c, p in zip(counts, probs))


def detectable_tv(probs: list[float], n: int, noncentrality: float = 35.0) -> float:
    """The smallest total variation a chi-square test over `probs` with n draws detects
    (noncentrality `noncentrality`: power > 0.9 at p = 0.001 for up to 15 degrees of freedom)
    when the error is spread in the least detectable way, proportionally to p:
    sum (d^2 / p) >= (2 TV)^2, so TV >= sqrt(noncentrality / n) / 2."""
    return math.sqrt(noncentrality / n) / 2


# ---------------------------------------------------------------- hand-made Markov chains
V = 3  # tokens 0..2; the context ends in token 0
GEN = torch.Generator().manual_seed(1)
P_LOGITS = torch.tensor([[1.2, 0.3, -0.8], [-0.5, 1.0, 0.4], [0.2, -1.0, 1.3]])  # target, row = last token
Q_LOGITS = torch.tensor([[3.0, 0.0, -1.0], [0.5, -2.0, 2.5], [2.0, 1.5, -3.0]])  # a confident, different drafter
TEMPERATURE = 1.0
TRIALS = 14_000  # detectable_tv(..., 14_000) = 0.025


def exact_two_tokens(p_logits: torch.Tensor, temperature: float, first_context: int = 0) -> list[float]:
    p = torch.softmax(p_logits.double() / temperature, -1)
    v = p.shape[0]
    return [(p[first_context, a] * p[a, b]).item() for a in range(v) for b in range(v)]


def two_tokens(grow, plan: TreePlan, gen: torch.Generator) -> tuple[int, int]:
    """The speculative loop on the Markov chains until two tokens are out (rounds as the engine runs them)."""
    out, last = [], 0
    while len(out) < 2:
        def expand(tree, frontier, last=last):  # the drafter's logits after each frontier node
            return Q_LOGITS[[last if node == ROOT else tree.tokens[node] for node in frontier]]

        tree = grow(expand, plan, TEMPERATURE, gen).tree
        probs = torch.softmax(P_LOGITS[[last] + tree.tokens].double() / TEMPERATURE, -1)  # (1 + n, V)
        verdict = verify_tree(tree, probs, gen, greedy=False)
        out += [tree.tokens[i] for i in verdict.accepted] + [verdict.extra_token]
        last = out[-1]
    return out[0], out[1]


def value_based_grow_tree(expand, plan, temperature, generator) -> Draft:
    """The rule before issue 11: draw `width` children per parent, then keep the `width` best
    drawn children of the level by their own cumulative draft log-prob. Not lossless."""
    draft, frontier, scores = Draft(DraftTree()), [ROOT], {ROOT: 0.0}
    tree = draft.tree
    for _ in range(plan.depth):
        logqs = torch.log_softmax(expand(tree, frontier) / temperature, -1)
        groups = []
        for logq, parent in zip(logqs, frontier):
            draft.q_dists[parent] = logq.exp()
            groups.append([(scores[parent] + logq[t].item(), parent, t, logq[t].exp().item())
                           for t in gumbel_top_k(logq, plan.width, generator)])
        heap = [(-g[0][0], i, 0) for i, g in enumerate(groups)]
        heapq.heapify(heap)
        frontier = []
        while heap and len(frontier) < plan.width:
            _, i, j = heapq.heappop(heap)
            score, parent, token, q = groups[i][j]
            node = tree.add(parent, token, q)
            tree.sibling_q[parent] = draft.q_dists[parent]
            scores[node] = score
            frontier.append(node)
            if j + 1 < len(groups[i]):
                heapq.heappush(heap, (-groups[i][j + 1][0], i, j + 1))
    return draft


def counts_of(grow, plan, trials=TRIALS, seed=0) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    counts = [0] * (V * V)
    for _ in range(trials):
        a, b = two_tokens(grow, plan, gen)
        counts[a * V + b] += 1
    return counts


def test_the_sample_size_detects_a_total_variation_of_0_025():
    assert detectable_tv(exact_two_tokens(P_LOGITS, TEMPERATURE), TRIALS) <= 0.025


@pytest.mark.parametrize("plan", [TreePlan("chain", 3, 1, 8), TreePlan("static", 2, 2, 8),
                                  TreePlan("dynamic", 3, 2, 8), TreePlan("dynamic", 4, 3, 12),
                                  TreePlan("chain", 3, 1, 8, confidence=0.5),  # the length depends on the draws
                                  TreePlan("static", 2, 3, 12, rule="spectr"), TreePlan("dynamic", 3, 3, 9, rule="spectr")],
                         ids=lambda p: f"{p.shape}-d{p.depth}-w{p.width}-c{p.confidence}-{p.rule}")
def test_tree_decisions_follow_the_target_exactly(plan):
    counts = counts_of(grow_tree, plan)
    expected = exact_two_tokens(P_LOGITS, TEMPERATURE)
    assert chi2_pvalue(counts, expected) > 1e-3, (counts, total_variation(counts, expected))


def test_the_value_based_dynamic_selection_fails_the_same_test():
    counts = counts_of(value_based_grow_tree, TreePlan("dynamic", 3, 2, 8))
    expected = exact_two_tokens(P_LOGITS, TEMPERATURE)
    assert chi2_pvalue(counts, expected) < 1e-6, (counts, total_variation(counts, expected))


def test_greedy_dynamic_trees_are_eagle2s_best_first_trees():
    """At temperature 0 the slot rule picks exactly the best children by cumulative log q."""
    plan = TreePlan("dynamic", 3, 2, 8)

    def expand(tree, frontier):
        return Q_LOGITS[[0 if node == ROOT else tree.tokens[node] for node in frontier]]

    ours = grow_tree(expand, plan, 0.0, GEN).tree
    logq = torch.log_softmax(Q_LOGITS, -1)
    scores = {}
    for node, (parent, token) in enumerate(zip(ours.parents, ours.tokens)):
        scores[node] = ((scores[parent] if parent != ROOT else 0.0)
                        + logq[0 if parent == ROOT else ours.tokens[parent], token].item())
    # every level holds the `width` best (parent, child) pairs of that level
    level_of = ours.depths()
    for level in (2, 3):
        parents = [n for n in range(len(ours)) if level_of[n] == level - 1]
        pairs = sorted(((scores[p] + logq[ours.tokens[p], t].item(), p, t) for p in parents for t in range(V)), reverse=True)
        kept = sorted((scores[n], ours.parents[n], ours.tokens[n]) for n in range(len(ours)) if level_of[n] == level)
        best = sorted(pairs[:plan.width])
        assert [(p, t) for _, p, t in best] == [(p, t) for _, p, t in kept]
        assert [s for s, _, _ in best] == pytest.approx([s for s, _, _ in kept])


# ---------------------------------------------------------------- the whole engine on Markov Llamas
WORDS = ["a", "b", "c"]  # + <pad>, <s>, </s>: a 6-token vocabulary (below the 10 alternatives recorded)
PROMPT = "b a"  # ends in "a", word 0 of the hand-made chains above
ENGINE_TRIALS = 1000


def vocab_matrix(word_logits: torch.Tensor) -> torch.Tensor:
    """(W, W) logits over the words -> (V, V) over the whole vocabulary; specials never produced."""
    vocab = len(WORDS) + 3
    logits = torch.full((vocab, vocab), -1e4)
    logits[:, 3:] = word_logits[0]  # after a special token: as after word 0
    logits[3:, 3:] = word_logits
    return logits


@pytest.fixture(scope="module")
def markov_sorted():
    """A nested draft model for S2D: its first layer predicts Q, both layers P (the target's own law)."""
    target = markov_llama(vocab_matrix(P_LOGITS), word_tokenizer(WORDS), exit_logits=vocab_matrix(Q_LOGITS),
                          name="markov-sorted")
    return target


@pytest.fixture(scope="module")
def markov_pair():
    """A target predicting P, whose first layer predicts Q (early exit), and a draft model predicting Q."""
    tokenizer = word_tokenizer(WORDS)
    target = markov_llama(vocab_matrix(P_LOGITS), tokenizer, exit_logits=vocab_matrix(Q_LOGITS), name="markov-target")
    drafter = markov_llama(vocab_matrix(Q_LOGITS), tokenizer, name="markov-draft")
    return LM(target), drafter


def engine_counts(lm, params, trials=ENGINE_TRIALS) -> tuple[list[int], list[float]]:
    words = list(range(3, 3 + len(WORDS)))
    counts = {(a, b): 0 for a in words for b in words}
    for seed in range(trials):
        trace = run_to_trace(lm, PROMPT, strategy="speculative", chat=False, max_new_tokens=2, seed=seed,
                             params=params | {"temperature": TEMPERATURE})
        counts[tuple(trace.finish.token_ids[:2])] += 1
    ids = trace.start.prompt_ids
    with torch.inference_mode():  # the target's own distribution, from the model itself
        p_first = torch.softmax(lm.model(torch.tensor([ids])).logits[0, -1].double() / TEMPERATURE, -1)
        p_next = {a: torch.softmax(lm.model(torch.tensor([ids + [a]])).logits[0, -1].double() / TEMPERATURE, -1)
                  for a in words}
    expected = [(p_first[a] * p_next[a][b]).item() for a, b in counts]
    return list(counts.values()), expected


DRAFTER_PARAMS = [
    {"drafter": "model", "draft_model": "markov-draft"},
    {"drafter": "early-exit", "exit_layer": 1},
    {"drafter": "prompt-lookup", "ngram": 1},
    {"drafter": "token-recycling"},
    {"drafter": "rasd", "draft_model": "markov-draft", "ngram": 1},
    {"drafter": "rapid", "draft_model": "markov-draft"},  # RAPID's drafter (its own cache) for the target
]


@pytest.mark.parametrize("tree", ["chain", "static", "dynamic"])
@pytest.mark.parametrize("drafter", DRAFTER_PARAMS, ids=lambda d: d["drafter"])
def test_every_drafter_and_tree_follows_the_target(markov_pair, monkeypatch, drafter, tree):
    lm, draft = markov_pair
    register(monkeypatch, draft)
    counts, expected = engine_counts(lm, drafter | {"tree": tree, "draft_length": 3, "width": 2, "node_budget": 8})
    assert chi2_pvalue(counts, expected) > 1e-3, (counts, total_variation(counts, expected))


@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_s2d_follows_the_target_whichever_sub_model_drafts(markov_pair, markov_sorted, monkeypatch, tree):
    """S2D's cascade (layer 1 drafts where it is confident, else both layers): the sub-model chosen per
    position depends on the draft logits only, so the output is still the target's law."""
    lm, _ = markov_pair
    register(monkeypatch, markov_sorted)
    params = {"drafter": "s2d", "draft_model": "markov-sorted", "exits": "1,2", "threshold": 0.8}  # after "c" it climbs
    counts, expected = engine_counts(lm, params | {"tree": tree, "draft_length": 3, "width": 2, "node_budget": 8})
    assert chi2_pvalue(counts, expected) > 1e-3, (counts, total_variation(counts, expected))


def test_the_engine_test_catches_the_value_based_dynamic_tree(markov_pair, monkeypatch):
    lm, draft = markov_pair
    register(monkeypatch, draft)
    monkeypatch.setattr(model_drafters, "grow_tree", value_based_grow_tree)
    counts, expected = engine_counts(lm, {"drafter": "model", "draft_model": "markov-draft", "tree": "dynamic",
                                          "draft_length": 3, "width": 2, "node_budget": 8}, trials=2500)
    assert chi2_pvalue(counts, expected) < 1e-3, (counts, total_variation(counts, expected))


@pytest.mark.parametrize("tree", ["static", "dynamic"])
@pytest.mark.parametrize("drafter", DRAFTER_PARAMS[:2], ids=lambda d: d["drafter"])
def test_the_spectr_rule_follows_the_target(markov_pair, monkeypatch, drafter, tree):
    lm, draft = markov_pair
    register(monkeypatch, draft)
    counts, expected = engine_counts(lm, drafter | {"tree": tree, "draft_length": 3, "width": 3, "node_budget": 9,
                                                    "rule": "spectr"})
    assert chi2_pvalue(counts, expected) > 1e-3, (counts, total_variation(counts, expected))


def test_the_engine_test_catches_a_wrong_spectr_residual(markov_pair, monkeypatch):
    """After K-SEQ rejects every draft, sampling p itself instead of SpecTr's residual over-weights what
    the drafts already covered: the same test fails."""
    lm, draft = markov_pair
    register(monkeypatch, draft)
    monkeypatch.setattr(verify, "spectr_residual", lambda p, q, k, rho: p.clone())
    counts, expected = engine_counts(lm, {"drafter": "model", "draft_model": "markov-draft", "tree": "static",
                                          "draft_length": 2, "width": 3, "node_budget": 12, "rule": "spectr"})
    assert chi2_pvalue(counts, expected) < 1e-3, (counts, total_variation(counts, expected))


@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_longspec_follows_the_target(markov_pair, monkeypatch, tmp_path, tree):
    """LongSpec's draft (a random one: its window, sinks and cross-attention on the target's cache) is verified
    like every drafter: the output follows the target's law."""
    from decoding.longctx import longspec

    lm, _ = markov_pair
    torch.manual_seed(0)
    head = longspec.LongSpecHead(longspec.LongSpecConfig.like(lm.config, lm.vocab_size, lm.name, window=1, sinks=1))
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.5)
    longspec.save_head(head, tmp_path)
    monkeypatch.setitem(longspec.HEADS, lm.name, tmp_path)
    counts, expected = engine_counts(lm, {"drafter": "longspec", "tree": tree, "draft_length": 3, "width": 2,
                                          "node_budget": 8})
    assert chi2_pvalue(counts, expected) > 1e-3, (counts, total_variation(counts, expected))
