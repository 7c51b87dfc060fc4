"""LongSpec's training recipe: the keys it trains on are the keys drafting reads, anchor-offset indices keep their
anchors, and a few steps on the target's own records lower the loss."""

from __future__ import annotations

import random

import torch

from decoding.longctx.longspec import LongSpecConfig, LongSpecHead
from decoding.training import longspec as recipe


def records(lm, ids: list[int]) -> dict:
    return {"ids": torch.tensor(ids, dtype=torch.int32), "start": len(ids) // 2} | recipe.target_records(
        lm.model, torch.tensor([ids]))


def test_stored_keys_rotated_at_their_positions_are_the_targets_cache(tiny_lm):
    """Training rotates the stored (unrotated) keys itself: at the true positions they must be exactly the keys
    the target's cache holds, which drafting reads."""
    ids = tiny_lm.tokenizer("In the beginning God created the heaven and the earth.")["input_ids"]
    rec = records(tiny_lm, ids)
    head = LongSpecHead(LongSpecConfig.like(tiny_lm.config, 16, tiny_lm.name))
    with torch.inference_mode():
        cache = tiny_lm.model(torch.tensor([ids]), use_cache=True).past_key_values.layers[-1]
    c = head.config
    k = rec["k"].float().view(len(ids), c.num_kv_heads, c.head_dim).transpose(0, 1)[None]
    assert torch.allclose(head.rope(k, torch.arange(len(ids))), cache.keys, atol=2e-3)  # stored float16
    assert torch.allclose(rec["v"].float().view(len(ids), c.num_kv_heads, c.head_dim).transpose(0, 1)[None],
                          cache.values, atol=2e-3)
    top = torch.softmax(tiny_lm.model(torch.tensor([ids])).logits[0], -1).max(-1).values
    assert torch.allclose(rec["top_p"][:, 0].float(), top, atol=1e-3)


def test_anchor_offset_keeps_the_anchors_and_shifts_the_rest():
    rng = random.Random(0)
    for _ in range(50):
        pos = recipe.anchor_offset(300, rng)
        anchors = int((pos == torch.arange(300)).sum()) if pos[-1] != 299 else 300
        assert pos[-1] < recipe.MAX_POSITION and (pos.diff() >= 1).all()
        assert anchors == 300 or anchors <= 4
    assert recipe.anchor_offset(10, rng, offset=100, anchors=2).tolist() == [0, 1] + list(range(102, 110))


def test_a_few_steps_bring_the_draft_closer_to_the_target(tiny_lm):
    torch.manual_seed(0)
    texts = ["The secret number of Tavor is 4821. And the king said unto her,",
             "Then said Esther, If it please the king, let it be written."]
    seqs = [records(tiny_lm, tiny_lm.tokenizer(t)["input_ids"]) for t in texts]
    vocab_ids = torch.arange(tiny_lm.vocab_size)
    head = LongSpecHead(LongSpecConfig.like(tiny_lm.config, len(vocab_ids), tiny_lm.name, window=8, sinks=2,
                                            lag_block=3))
    embed = tiny_lm.model.get_input_embeddings().weight.detach()
    lm_rows = tiny_lm.model.get_output_embeddings().weight.detach()
    vocab_pos = torch.arange(tiny_lm.vocab_size)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-2)
    fixed = recipe.make_batch(seqs, head, embed, vocab_pos, random.Random(0), offset=0)
    with torch.no_grad():
        first = recipe.losses(head, fixed, lm_rows)[1]["loss"]
    for step in range(100):
        loss, _ = recipe.losses(head, recipe.make_batch(seqs, head, embed, vocab_pos, random.Random(step)), lm_rows)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        last = recipe.losses(head, fixed, lm_rows)[1]["loss"]
    p = fixed["label_p"][fixed["valid"]]
    entropy = -(p * p.clamp(min=1e-12).log()).sum(-1).mean().item()  # the loss's floor: the target's own entropy
    assert last - entropy < 0.8 * (first - entropy), (first, last, entropy)  # the KL to the target shrinks
