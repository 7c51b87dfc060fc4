"""The LongSpec drafter: lossless on any draft, its cache stays a window plus sinks, its cached drafting equals a
from-scratch pass, and the training masks see what drafting sees."""

from __future__ import annotations

import pytest
import torch

from decoding import run_to_trace
from decoding.longctx import longspec
from decoding.longctx.longspec import LongSpecConfig, LongSpecDrafter, LongSpecHead, load_head, save_head, \
    training_masks

PROMPT = "Hello there, how are you today? Tell me a story about a cat who lives on a boat, please."


def random_head(lm, draft_vocab: int, seed: int = 0, **kw) -> LongSpecHead:
    torch.manual_seed(seed)
    head = LongSpecHead(LongSpecConfig.like(lm.config, draft_vocab, lm.name, **kw))
    with torch.no_grad():
        for p in head.parameters():  # big enough that its drafts differ from token to token
            p.normal_(0, 0.3)
    ids = torch.randperm(lm.vocab_size, generator=torch.Generator().manual_seed(seed))[:draft_vocab]
    head.vocab_ids.copy_(ids.sort().values)
    return head.eval()


@pytest.fixture
def tiny_head(tiny_lm, tmp_path, monkeypatch):
    head = random_head(tiny_lm, 128, window=8, sinks=2)
    save_head(head, tmp_path)
    monkeypatch.setitem(longspec.HEADS, tiny_lm.name, tmp_path)
    return head


def test_a_saved_head_loads_back_the_same(tiny_lm, tmp_path):
    head = random_head(tiny_lm, 40)
    save_head(head, tmp_path)
    back = load_head(tmp_path)
    assert back.config == head.config and back.vocab_ids.tolist() == head.vocab_ids.tolist()
    for (name, a), b in zip(head.state_dict().items(), back.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=2e-3 * a.float().abs().max().item()), name


@pytest.mark.parametrize("tree", ["chain", "static", "dynamic"])
def test_greedy_output_is_the_targets_greedy_output(tiny_lm, tiny_head, tree):
    plain = run_to_trace(tiny_lm, PROMPT, max_new_tokens=40)
    spec = run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=40,
                        params={"drafter": "longspec", "tree": tree, "draft_length": 4, "width": 3})
    assert spec.finish.token_ids == plain.finish.token_ids
    rounds = [e for e in spec.events if e.kind == "spec_round"]
    assert rounds and all(r.drafter == "longspec" for r in rounds) and sum(len(r.nodes) for r in rounds) > 0


def test_the_drafts_own_cache_is_the_sinks_and_the_window(tiny_lm, tiny_head):
    spec = run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=30,
                        params={"drafter": "longspec", "draft_length": 3})
    rounds = [e for e in spec.events if e.kind == "spec_round"]
    seen = [(r.extra["draft_cache_positions"], r.extra["target_cache_positions"]) for r in rounds
            if "draft_cache_positions" in r.extra]
    assert seen and all(own <= 2 + 8 for own, _ in seen)  # sinks 2 + window 8, never more
    assert max(t for _, t in seen) > 40  # while the target's cache holds the whole context


def test_the_window_param_overrides_the_trained_window(tiny_lm, tiny_head):
    spec = run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=12,
                        params={"drafter": "longspec", "draft_length": 3, "window": 3})
    rounds = [e for e in spec.events if e.kind == "spec_round" and "draft_cache_positions" in e.extra]
    assert rounds and max(r.extra["draft_cache_positions"] for r in rounds) == 2 + 3


def reference_root_logits(lm, head: LongSpecHead, drafter: LongSpecDrafter, context: list[int]) -> torch.Tensor:
    """From scratch: the target's last-layer keys of context[:-1], the draft over the whole context with the
    window-and-sinks mask, its last row through the draft LM head."""
    with torch.inference_mode():
        out = lm.model(torch.tensor([context[:-1]]), use_cache=True)
        layer = out.past_key_values.layers[-1]
        n, c = len(context), head.config
        own, _ = training_masks(n, drafter.window, c.sinks, c.lag_block)
        cross = torch.ones(n, n - 1, dtype=torch.bool)
        hidden, _ = head(drafter.embed(torch.tensor(context))[None], torch.arange(n), (layer.keys, layer.values),
                         self_mask=own, cross_mask=cross)
        return drafter._logits(hidden[0, -1:])[0]


def test_cached_drafting_equals_a_from_scratch_pass(tiny_lm, tiny_head, monkeypatch):
    """After several verified rounds (the draft's cache grown past its window and trimmed), the root's draft
    distribution is the one a from-scratch pass with the window mask gives (LM head in float32: bfloat16 would
    round float noise between the two passes' target keys into visible differences)."""
    monkeypatch.setattr(longspec, "cpu_native_bf16", lambda: False)
    seen = []
    original = LongSpecDrafter.propose

    def spy(self, context, plan, temperature, generator):
        draft = original(self, context, plan, temperature, generator)
        if len(draft.tree):
            seen.append((list(context), draft.q_dists[-1].clone(), self))
        return draft

    LongSpecDrafter.propose = spy
    try:
        run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=24, params={"drafter": "longspec",
                                                                                        "draft_length": 3})
    finally:
        LongSpecDrafter.propose = original
    assert len(seen) >= 3
    for context, q, drafter in seen[-2:]:
        expected = torch.softmax(reference_root_logits(tiny_lm, tiny_head, drafter, context), -1)
        assert torch.allclose(q, expected, atol=1e-5), (q - expected).abs().max()


def test_training_masks_see_what_drafting_sees():
    own, cross = training_masks(20, window=4, sinks=2, lag_block=3)
    assert own[10].nonzero().flatten().tolist() == [0, 1, 6, 7, 8, 9, 10]  # sinks, the window of 4 before, itself
    assert cross[10].nonzero().flatten().tolist() == list(range(9))  # the target's keys of blocks before 9..11
    assert cross[11].nonzero().flatten().tolist() == list(range(9))
    assert cross[1].nonzero().flatten().tolist() == [0]  # the first block: position 0's keys only
    for q in range(20):  # never a key of its own position or later (lag 1..lag_block)
        visible = cross[q].nonzero().flatten()
        assert q == 0 or (visible.max() < q and q - visible.max() <= 3)


def test_a_drafter_without_a_trained_head_says_so(tiny_lm, monkeypatch):
    monkeypatch.setattr(longspec, "HEADS", {})
    with pytest.raises(ValueError, match="drafter=longspec needs a draft trained"):
        run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=4, params={"drafter": "longspec"})


@pytest.mark.slow
def test_the_shipped_draft_is_lossless_on_a_book_and_drafts_from_the_targets_cache(smol_lm):
    from decoding.longctx.document import build_document

    doc = build_document(smol_lm.tokenizer, 1024, seed=0)
    prompt = doc.prompt(doc.questions[0])
    plain = run_to_trace(smol_lm, prompt, max_new_tokens=24)
    spec = run_to_trace(smol_lm, prompt, strategy="speculative", max_new_tokens=24, params={"drafter": "longspec"})
    assert spec.finish.token_ids == plain.finish.token_ids
    rounds = [e for e in spec.events if e.kind == "spec_round"]
    accepted = sum(len(r.accepted_path) for r in rounds)
    assert accepted >= 3  # a trained draft: some of its tokens are the target's (0.36 of them on this book)
    info = [r.extra for r in rounds if "draft_cache_positions" in r.extra]
    assert max(i["draft_cache_positions"] for i in info) == 4 + 256  # sinks + window, with ~900 context positions
    assert min(i["target_cache_positions"] for i in info) > 800
