"""The training objectives of LUD, HAMburger and FTP (decoding.training.faster) on a tiny random Llama:
their layouts and targets are what the papers describe, every objective trains (finite loss, gradients
reach what it trains and nothing else), and a run checkpoints and resumes."""

import random
from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from decoding.token.ftp_router import RouterConfig, TokenRouter, gate_hooks
from decoding.token.hamburger_model import HamburgerConfig, Smasher
from decoding.training.faster import (FasterConfig, FtpObjective, HamburgerObjective, LudObjective, lud_layout, random_slots,
                                      slot_batch, unit_targets)


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


CFG = FasterConfig(batch_size=2, seq_len=16, span=3, anchors=4, group=3, unit_alpha=0.0)


def test_lud_layout_masks_see_their_prefix_and_their_own_earlier_masks():
    mask, positions = lud_layout(6, [1, 3], 2)  # 6 real tokens, masks after positions 1 and 3
    assert positions.tolist() == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5]
    assert mask[:6, :6].equal(torch.ones(6, 6, dtype=torch.bool).tril())
    assert not mask[:6, 6:].any()  # real tokens never see a mask
    assert mask[6].tolist() == [1, 1, 0, 0, 0, 0, 1, 0, 0, 0]  # anchor 1, mask 1
    assert mask[7].tolist() == [1, 1, 0, 0, 0, 0, 1, 1, 0, 0]
    assert mask[9].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 1, 1]  # anchor 3, mask 2: not the other anchor's masks


def test_unit_targets_follow_the_unit_then_the_end_label():
    ids = torch.tensor([10, 11, 12, 13, 14, 15, 16])
    confident = torch.tensor([False, False, False, True, True, False, True])
    # anchor 1: token 2 comes from the real position; masks predict 3, 4 (confident), then the end label
    assert unit_targets(ids, confident, [1], 4, end_id=99).tolist() == [13, 14, 99, -100]
    # anchor 2: token 3 from the real position, mask 1 -> token 4 (confident), mask 2 -> token 5 is not: end
    assert unit_targets(ids, confident, [2], 3, end_id=99).tolist() == [14, 99, -100]
    # anchor 3: token 5 after the real position's token 4 is not confident: the unit ends at once
    assert unit_targets(ids, confident, [3], 2, end_id=99).tolist() == [99, -100]
    assert unit_targets(ids, confident, [5], 2, end_id=99).tolist() == [-100, -100]  # past the window


def test_smasher_of_one_token_is_its_embedding_and_slots_cover_the_text():
    config = HamburgerConfig(hidden_size=8, group=3)
    smasher = Smasher(config)
    torch.nn.init.normal_(smasher.mix)
    embeds = torch.randn(2, 3, 8)
    out = smasher(embeds, torch.tensor([1, 3]))
    assert torch.equal(out[0], embeds[0, 0])  # one token: exactly its embedding
    expected = embeds[1, 2] + embeds[1, 1] @ smasher.mix[0] + embeds[1, 0] @ smasher.mix[1]
    assert torch.allclose(out[1], expected, atol=1e-5)
    rng = random.Random(0)
    for _ in range(20):
        sizes = random_slots(17, 3, rng)
        assert sum(sizes) == 17 and all(1 <= s <= 3 for s in sizes)
    ids = torch.arange(7)[None]
    tokens, size_t, last, valid = slot_batch(ids, [[2, 1, 3, 1]], 3)
    assert tokens[0].tolist() == [[0, 1, 0], [2, 0, 0], [3, 4, 5], [6, 0, 0]]
    assert last[0].tolist() == [1, 2, 5, 6] and valid.all()


def test_router_at_threshold_zero_is_the_model_itself():
    model = tiny_llama()
    router = TokenRouter(RouterConfig(3, 32))
    torch.nn.init.normal_(router.weight)
    ids = torch.randint(0, 64, (2, 10))
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        hooks = gate_hooks(model, router, 0.0)
        routed = model(input_ids=ids).logits
        for hook in hooks:
            hook.remove()
        record = []
        hooks = gate_hooks(model, router, 1.0, record)  # every block skipped
        skipped = model(input_ids=ids).logits
        for hook in hooks:
            hook.remove()
    assert torch.equal(plain, routed)
    assert all(not ran.any() for _, ran, _ in record)
    embeddings = model.get_input_embeddings()(ids)
    assert torch.allclose(skipped, model.lm_head(model.model.norm(embeddings)), atol=1e-5)


@pytest.mark.parametrize("method", ["ftp", "lud", "hamburger"])
def test_each_objective_trains_what_it_should(method):
    model = tiny_llama()
    if method == "ftp":
        objective = FtpObjective(model, replace(CFG, density=0.5))
    elif method == "lud":
        objective = LudObjective(model, CFG, mask_id=1)
    else:
        objective = HamburgerObjective(model, CFG)
    ids = torch.randint(2, 64, (2, 16))
    loss, parts = objective.loss(ids)
    assert torch.isfinite(loss) and parts
    loss.backward()
    trained = {id(p) for p in objective.trainable()}
    assert all(p.grad is not None for p in objective.trainable() if p.requires_grad)
    frozen = [p for p in objective.parameters() if id(p) not in trained]
    assert all(p.grad is None for p in frozen)  # the reference copies (and FTP's model) stay as they are
    if method == "ftp":
        assert all(p.grad is None for p in model.parameters())


def test_a_run_checkpoints_and_resumes(tmp_path):
    from decoding.training.faster import train

    class Tok:  # what export needs of a tokenizer
        def save_pretrained(self, out):
            (out / "tokenizer.json").write_text("{}")

    stream = torch.randint(2, 64, (400,))
    val = [(torch.randint(2, 64, (2, 16)), None)]
    cfg = replace(CFG, max_steps=2, eval_minutes=1e9, lr=1e-2)
    first = train(FtpObjective(tiny_llama(), cfg), Tok(), stream, val, cfg, tmp_path, log=lambda line: None)
    assert first["steps"] == 2 and (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "model.safetensors").is_file()
    more = replace(cfg, max_steps=3)
    again = train(FtpObjective(tiny_llama(), more), Tok(), stream, val, more, tmp_path, resume=True, log=lambda line: None)
    assert again["steps"] == 3
