"""Drafter rapid: its draft prompt is the template's head, the top-k chunks and the question (token for token); its
cache holds that short context only; verification stays lossless (greedy output = the target's greedy output); the
retrieval-augmented target (lossy) moves the target towards the drafter, and a sampled position follows it."""

from __future__ import annotations

import math

import pytest
import torch

from decoding import run_to_trace
from decoding.events import stats
from decoding.longctx import rapid as R
from decoding.longctx.document import build_document
from decoding.longctx.retriever import BM25, make_chunks

TEMPLATE = "SYSTEM\n{% for m in messages %}user: {{ m['content'] }}\n{% endfor %}assistant:"


@pytest.fixture(scope="module")
def doc(tiny_lm):
    return build_document(tiny_lm.tokenizer, 2048, seed=0)


def test_the_context_lies_between_the_template_head_and_the_last_blank_line(tiny_lm, doc, monkeypatch):
    ids = tiny_lm.encode_prompt(doc.prompt(doc.questions[0]), chat=False)[0]
    start, end = R.prompt_parts(tiny_lm, ids)
    assert start == 0 and tiny_lm.decode(ids[end:]) == doc.questions[0].question + " Answer in a few words."
    assert tiny_lm.decode(ids[:end]) == doc.text + "\n\n"
    assert R.prompt_parts(tiny_lm, tiny_lm.encode_prompt("no blank line", chat=False)[0]) == (0, 0)
    monkeypatch.setattr(tiny_lm.tokenizer, "chat_template", TEMPLATE)
    ids = tiny_lm.encode_prompt(doc.prompt(doc.questions[0]), chat=True)[0]
    start, end = R.prompt_parts(tiny_lm, ids)
    assert tiny_lm.decode(ids[:start]) == "SYSTEM\nuser: "
    assert tiny_lm.decode(ids[end:]).endswith("Answer in a few words.\nassistant:")


@pytest.mark.parametrize("tree", ["chain", "static", "dynamic"])
@pytest.mark.parametrize("draft_model", ["", "tiny-random-draft"])
def test_greedy_rapid_equals_the_targets_greedy_output(tiny_lm, doc, tree, draft_model):
    prompt = doc.prompt(doc.questions[1])
    plain = run_to_trace(tiny_lm, prompt, strategy="greedy", max_new_tokens=24, chat=False)
    params = {"drafter": "rapid", "tree": tree, "rapid.chunk_tokens": 64, "rapid.draft_model": draft_model}
    spec = run_to_trace(tiny_lm, prompt, strategy="speculative", params=params, max_new_tokens=24, chat=False)
    assert spec.finish.token_ids == plain.finish.token_ids
    assert stats(spec)["target_forward_passes"] < stats(plain)["forward_passes"] or draft_model


def test_the_drafter_reads_the_retrieved_chunks_and_the_question_with_a_short_cache(tiny_lm, doc, monkeypatch):
    prompt = doc.prompt(doc.questions[0])
    seen = []
    original = R.ModelDrafter.propose

    def spy(self, context, plan, temperature, generator):
        seen.append(list(context))
        return original(self, context, plan, temperature, generator)

    monkeypatch.setattr(R.ModelDrafter, "propose", spy)
    trace = run_to_trace(tiny_lm, prompt, strategy="speculative", max_new_tokens=16, chat=False,
                         params={"drafter": "rapid", "rapid.chunk_tokens": 64, "rapid.top_k": 3})
    ids = trace.start.prompt_ids
    start, end = R.prompt_parts(tiny_lm, ids)
    chunks = make_chunks(tiny_lm.tokenizer, ids[start:end], 64, offset=start)
    hits = BM25([c.text for c in chunks]).rank(tiny_lm.decode(ids[end:]), 3)
    best = sorted(h.index for h in hits)
    expected = ids[:start] + [t for i in best for t in ids[chunks[i].start:chunks[i].end]] + ids[end:]
    assert seen[0] == expected and len(expected) < len(ids) / 4
    rounds = trace.of_kind("spec_round")
    info = rounds[0].extra
    assert info["retrieved"] == best and info["draft_prompt_tokens"] == len(expected)
    assert info["ranked"] == [h.index for h in hits] and info["scores"] == [round(h.score, 4) for h in hits]
    assert info["context_tokens"] == end - start and info["chunks"] == [[c.start, c.end] for c in chunks]
    produced = []
    for r, context in zip(rounds, seen):  # each round: the short prompt, then the tokens produced so far
        assert context == expected + produced and r.extra["draft_context_tokens"] == len(context)
        produced += r.token_ids
    parts = rounds[-1].extra["memory"]["parts"]  # SpecMemo's measurement: the drafter's cache is the short one
    assert 0 < parts["draft cache"] < parts["target cache"] / 4


def test_the_augmented_target_moves_towards_the_drafter_on_its_likely_tokens():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.1, 0.7, 0.02, 0.18])
    assert torch.allclose(R.augmented_target(p, q, 0.0, 0.1), p)
    out = R.augmented_target(p, q, 2.0, 0.1)
    assert out.sum().item() == pytest.approx(1.0) and torch.all(out > 0)
    assert out[1] > p[1] and out[0] < p[0]  # mass moves to where the drafter is surer
    shifted = torch.log(p.double()) + torch.where(q >= 0.07, 2.0 * (q - p), 0.0).double()
    assert torch.allclose(out.double(), torch.softmax(shifted, -1), atol=1e-6)
    # tokens below alpha * max q (token 2 here) keep their ratio to each other's unmoved logits
    only = R.augmented_target(p, q, 2.0, 0.9)  # only token 1 moves
    assert out[2] != only[2] and (only[0] / only[2]).item() == pytest.approx((p[0] / p[2]).item())


def test_augmented_with_eta_0_is_the_exact_target(tiny_lm, doc):
    prompt = doc.prompt(doc.questions[0])
    base = {"drafter": "rapid", "rapid.chunk_tokens": 64, "temperature": 1.0}
    a = run_to_trace(tiny_lm, prompt, strategy="speculative", params=base, max_new_tokens=12, chat=False, seed=5)
    b = run_to_trace(tiny_lm, prompt, strategy="speculative", params=base | {"rapid.target": "augmented", "rapid.eta": 0},
                     max_new_tokens=12, chat=False, seed=5)
    assert a.finish.token_ids == b.finish.token_ids


def chi2_pvalue(counts: list[int], probs: list[float]) -> float:
    """Pearson chi-square p-value (Wilson-Hilferty approximation), as tests/speculative computes it."""
    n, k = sum(counts), len(probs) - 1
    stat = sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, probs))
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


@pytest.mark.slow
def test_a_sampled_first_token_follows_the_augmented_target_not_the_exact_one(monkeypatch):
    """On a Markov pair (target P, drafter Q, tests/markov.py): the first token (always a drafted position)
    follows p' = RAPID's augmented target, 3,000 runs, chi-square; the same counts fail against p."""
    from markov import markov_llama, register, word_tokenizer

    from decoding.lm import LM

    words = ["a", "b", "c"]
    p_logits = torch.tensor([[1.2, 0.3, -0.8], [-0.5, 1.0, 0.4], [0.2, -1.0, 1.3]])
    q_logits = torch.tensor([[-1.0, 2.5, 0.0], [0.5, -2.0, 2.5], [2.0, 1.5, -3.0]])  # disagrees after "a"

    def matrix(word_logits):  # (3, 3) over the words -> (6, 6) over the vocabulary; specials never produced
        out = torch.full((6, 6), -1e4)
        out[:, 3:] = word_logits[0]
        out[3:, 3:] = word_logits
        return out

    tokenizer = word_tokenizer(words)
    lm = LM(markov_llama(matrix(p_logits), tokenizer, name="markov-target-rapid"))
    draft = markov_llama(matrix(q_logits), tokenizer, name="markov-draft-rapid")
    register(monkeypatch, draft)
    params = {"drafter": "rapid", "rapid.draft_model": "markov-draft-rapid", "rapid.target": "augmented",
              "rapid.eta": 1.5, "rapid.alpha": 0.1, "temperature": 1.0, "draft_length": 2}
    counts = dict.fromkeys(range(3, 6), 0)
    for seed in range(3000):
        trace = run_to_trace(lm, "b a", strategy="speculative", params=params, max_new_tokens=1, chat=False, seed=seed)
        counts[trace.finish.token_ids[0]] += 1
    ids = torch.tensor([trace.start.prompt_ids])
    with torch.inference_mode():  # both distributions from the models themselves
        p = torch.softmax(lm.model(ids).logits[0, -1].double(), -1)
        q = torch.softmax(draft.model(ids).logits[0, -1].double(), -1)
    augmented = R.augmented_target(p, q, 1.5, 0.1).double()
    observed = list(counts.values())
    assert chi2_pvalue(observed, [augmented[w].item() for w in counts]) > 1e-3, (observed, augmented[3:])
    assert chi2_pvalue(observed, [p[w].item() for w in counts]) < 1e-6, (observed, p[3:])


@pytest.mark.slow
def test_rapid_on_smollm2_is_lossless_on_a_book(smol_lm):
    """A 2K book: RAPID (self-speculation, drafting from 4 chunks of 128 tokens) equals greedy decoding of the whole
    context, in fewer target passes than tokens."""
    doc = build_document(smol_lm.tokenizer, 2048, seed=0)
    prompt = doc.prompt(doc.questions[0])
    plain = run_to_trace(smol_lm, prompt, strategy="greedy", max_new_tokens=16)
    exact = run_to_trace(smol_lm, prompt, strategy="speculative", params={"drafter": "rapid"}, max_new_tokens=16)
    assert exact.finish.token_ids == plain.finish.token_ids
    assert stats(exact)["target_forward_passes"] < len(plain.finish.token_ids) / 2
    assert exact.of_kind("spec_round")[0].extra["draft_prompt_tokens"] < len(exact.start.prompt_ids) / 3
