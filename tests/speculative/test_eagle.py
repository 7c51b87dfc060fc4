"""The EAGLE drafter: lossless on any head, its cached drafting equals a full recomputation, the shipped head."""

from __future__ import annotations

import json

import pytest
import torch

from decoding import run_to_trace
from decoding.speculative.base import Feedback
from decoding.events import stats
from decoding.speculative import eagle
from decoding.speculative.drafters import TreePlan
from decoding.speculative.eagle import EagleDrafter, EagleHead, HeadConfig, load_head, save_head

PROMPT = "Hello there, how are you today"


def random_head(lm, draft_vocab: int, seed: int = 0, fspad_channels: int = 0) -> EagleHead:
    """A random head for `lm` drafting over `draft_vocab` random token ids (FSPAD's sampled input with
    `fspad_channels` > 0)."""
    torch.manual_seed(seed)
    head = EagleHead(HeadConfig.like(lm.config, draft_vocab, lm.name, fspad_channels))
    with torch.no_grad():
        for p in head.parameters():  # big enough that its drafts differ from token to token
            p.normal_(0, 0.3)
    head.vocab_ids.copy_(torch.randperm(lm.vocab_size, generator=torch.Generator().manual_seed(seed))[:draft_vocab].sort().values)
    return head.eval()


@pytest.fixture(params=[0, 3], ids=["eagle", "fspad"])
def tiny_head(tiny_lm, tmp_path, monkeypatch, request):
    head = random_head(tiny_lm, 128, fspad_channels=request.param)
    save_head(head, tmp_path)
    monkeypatch.setitem(eagle.HEADS, tiny_lm.name, tmp_path)
    return head


@pytest.mark.parametrize("channels", [0, 3])
def test_a_saved_head_loads_back_the_same(tiny_lm, tmp_path, channels):
    head = random_head(tiny_lm, 40, fspad_channels=channels)
    save_head(head, tmp_path)
    back = load_head(tmp_path)
    assert back.config == head.config and back.vocab_ids.tolist() == head.vocab_ids.tolist()
    for (name, a), b in zip(head.state_dict().items(), back.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=2e-3 * a.float().abs().max().item()), name  # stored float16


@pytest.mark.parametrize("tree", ["chain", "static", "dynamic"])
def test_greedy_output_is_the_targets_greedy_output(tiny_lm, tiny_head, tree):
    plain = run_to_trace(tiny_lm, PROMPT, max_new_tokens=40)
    spec = run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=40,
                        params={"drafter": "eagle", "tree": tree, "draft_length": 4, "width": 3})
    assert spec.finish.token_ids == plain.finish.token_ids
    rounds = [e for e in spec.events if e.kind == "spec_round"]
    assert rounds and all(r.drafter == "eagle" for r in rounds) and sum(len(r.nodes) for r in rounds) > 0


def reference_logits(lm, head, rows: torch.Tensor, context: list[int], first_draft: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Slow reference: the target's features of the whole context, then causal head passes over every head
    position (no caches). Returns the (V,) draft logits after `context` and after `context + [first_draft]`
    (the second pass feeds the first pass's predicted feature at the newest position, as drafting does)."""
    with torch.inference_mode():
        feats = lm.model(torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states[-1][0]  # (N-1, D)
        embed = lm.model.get_input_embeddings()
        emb = embed(torch.tensor(context[1:]))  # (N-1, D): tokens 1..N-1
        out, _ = head(emb[None], feats[None], torch.arange(len(context) - 1))
        emb2 = torch.cat([emb, embed(torch.tensor([first_draft]))])
        out2, _ = head(emb2[None], torch.cat([feats, out[0, -1:]])[None], torch.arange(len(context)))
        assert torch.equal(rows.float(), lm.model.get_output_embeddings().weight[head.vocab_ids].to(rows.dtype).float())
        full = torch.full((2, lm.vocab_size), -torch.inf)  # the draft LM head in the drafter's dtype (bf16 on some CPUs)
        full[:, head.vocab_ids] = (torch.stack([out[0, -1], out2[0, -1]]).to(rows.dtype) @ rows.T).float()
    return full[0], full[1]


def test_cached_drafting_equals_a_full_recomputation(tiny_lm, tiny_head):
    """After several verified rounds (features from verification passes, the head cache grown and cropped),
    a draft's distributions at the root and at its first child are those from-scratch passes give."""
    drafts = []
    original = EagleDrafter.propose

    def spy(self, context, plan, temperature, generator):
        draft = original(self, context, plan, temperature, generator)
        drafts.append((list(context), draft, self))
        return draft

    mp = pytest.MonkeyPatch()
    mp.setattr(EagleDrafter, "propose", spy)
    try:
        run_to_trace(tiny_lm, PROMPT, strategy="speculative", max_new_tokens=30,
                     params={"drafter": "eagle", "tree": "dynamic", "draft_length": 3, "width": 2})
    finally:
        mp.undo()
    assert len(drafts) >= 3
    for context, draft, drafter in drafts[1:]:
        root, child = reference_logits(tiny_lm, drafter.head, drafter.lm_rows, context, draft.tree.tokens[0])
        # bfloat16 rows (CPUs with native bf16) round inputs that differ by float32 noise apart by up to ~1e-3
        atol = 2e-3 if drafter.lm_rows.dtype == torch.bfloat16 else 1e-4
        for q, ref in ((draft.q_dists[-1], root), (draft.q_dists[0], child)):
            ref = torch.softmax(ref, -1)
            assert torch.allclose(q, ref, atol=atol), (len(context), (q - ref).abs().max())


def test_a_draft_is_over_the_draft_vocabulary_only(tiny_lm, tiny_head):
    drafter = eagle.eagle_drafter(tiny_lm)
    ids = tiny_lm.tokenizer(PROMPT)["input_ids"]
    with torch.inference_mode():
        out = tiny_lm.model(torch.tensor([ids[:-1]]), output_hidden_states=True)
    drafter.observe(Feedback(row_tokens=ids[:-1], row_logits=out.logits[0], target_probs=out.logits[0].softmax(-1),
                             greedy=True, rows=list(range(len(ids) - 1)), committed=len(ids) - 1, fed=len(ids) - 1,
                             hidden_states=out.hidden_states))
    draft = drafter.propose(ids, TreePlan("static", 2, 3, 16), 0.0, torch.Generator())
    allowed = set(tiny_head.vocab_ids.tolist())
    assert len(draft.tree) == 3 + 9 and set(draft.tree.tokens) <= allowed
    assert all(float(q.sum()) == pytest.approx(1.0) and float(q[list(allowed)].sum()) == pytest.approx(1.0)
               for q in draft.q_dists.values())


def test_a_target_without_a_trained_head_is_refused_with_a_sentence(tiny_lm):
    with pytest.raises(ValueError, match="drafter=eagle needs a head trained on the target's features.*tiny-random"):
        run_to_trace(tiny_lm, PROMPT, strategy="speculative", params={"drafter": "eagle"}, max_new_tokens=4)


@pytest.mark.slow  # the real model smollm2-135m
def test_the_shipped_head_has_the_stated_shape():
    folder = eagle.HEADS["smollm2-135m"]
    config = json.loads((folder / "config.json").read_text())
    head = load_head(folder)
    assert config["hidden_size"] == 576 and config["target"] == "smollm2-135m"
    ids = head.vocab_ids.tolist()
    assert len(ids) == config["draft_vocab"] and ids == sorted(set(ids)) and 0 <= ids[0] and ids[-1] < 49152
    assert head.fc.weight.shape == (576, 2 * 576) and head.q_proj.weight.shape == (576, 576)
    assert head.k_proj.weight.shape == (192, 576) and head.down_proj.weight.shape == (576, 1536)
    assert 4e6 < sum(p.numel() for p in head.parameters()) < 5e6
    assert (folder / "README.md").is_file() and (folder / "train.log").is_file()


@pytest.mark.slow
def test_the_shipped_head_drafts_for_smollm2_and_its_output_is_the_targets(smol_lm):
    prompt = "Explain why the sky is blue."  # held out of the head's training prompts
    plain = run_to_trace(smol_lm, prompt, max_new_tokens=48)
    spec = run_to_trace(smol_lm, prompt, strategy="speculative", max_new_tokens=48,
                        params={"drafter": "eagle", "tree": "dynamic", "draft_length": 5, "width": 3})
    assert spec.finish.token_ids == plain.finish.token_ids
    s = stats(spec)
    # a trained head: far more than one token per target pass (a random head accepts almost nothing)
    assert s["target_forward_passes_per_token"] < 0.7, s


@pytest.mark.slow
@pytest.mark.parametrize("channels", [0, 3], ids=["eagle", "fspad"])
@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_sampled_output_follows_the_target_exactly(tmp_path, monkeypatch, tree, channels):
    """Chi-square on the first two sampled tokens of a Markov Llama (tests/markov.py) drafted by a random
    head over a reduced draft vocabulary that lacks one of the words: the output is the target's."""
    from test_speculative import chi2_pvalue
    from test_speculative_exact import P_LOGITS, engine_counts, total_variation, vocab_matrix
    from markov import markov_llama, word_tokenizer

    from decoding.lm import LM

    lm = LM(markov_llama(vocab_matrix(P_LOGITS), word_tokenizer(["a", "b", "c"]), name="markov-eagle"))
    head = random_head(lm, 3, fspad_channels=channels)
    head.vocab_ids.copy_(torch.tensor([2, 3, 5]))  # </s>, "a", "c": "b" is never drafted
    save_head(head, tmp_path)
    monkeypatch.setitem(eagle.HEADS, lm.name, tmp_path)
    counts, expected = engine_counts(lm, {"drafter": "eagle", "tree": tree, "draft_length": 3, "width": 2,
                                          "node_budget": 8})
    assert chi2_pvalue(counts, expected) > 1e-3, (counts, total_variation(counts, expected))


def test_fspad_samples_the_input_in_channels_times_width_and_aligns_part_of_the_feature(tiny_lm):
    """FSPAD's head reads a (C x D)-wide sampled input; its partial alignment puts no feature-loss gradient on
    the dimensions it leaves free (the token loss still reads them)."""
    from decoding.training.eagle import head_losses

    head = random_head(tiny_lm, 32, fspad_channels=3).train()
    d = head.config.hidden_size
    assert head.fc.weight.shape == (d, 3 * d) and head.sample.out_channels == 3
    gen = torch.Generator().manual_seed(0)
    b, t = 2, 5
    batch = {"emb": torch.randn(b, t, d, generator=gen), "feat_in": torch.randn(b, t, d, generator=gen),
             "feat_out": torch.randn(b, t, d, generator=gen), "next_ids": torch.full((b, t), -1),
             "mask": torch.ones(b, t, dtype=torch.bool), "vocab_ids": head.vocab_ids}
    rows = torch.randn(32, d, generator=gen)
    grads = {}
    for fraction in (1.0, 0.5):
        head.zero_grad()
        loss, stats = head_losses(head, batch, rows, unroll=1, cls_weight=0.0, pad_fraction=fraction)
        grads[fraction] = torch.autograd.grad(loss, head.down_proj.weight)[0]  # rows = output feature dimensions
    half = round(d * 0.5)
    assert grads[1.0][half:].abs().sum() > 0 and torch.all(grads[0.5][half:] == 0)
    assert grads[0.5][:half].abs().sum() > 0


def test_training_continues_an_exported_head_with_its_vocabulary_and_step_count(tiny_lm, tmp_path, monkeypatch):
    """`train --from-head FOLDER` starts from the exported head's weights, draft vocabulary and step count
    (a fresh optimizer), on the work folder's data; tiny-random stands in for the target."""
    from decoding.models import load_model
    from decoding.training import eagle as training

    monkeypatch.setattr(training, "load_target", lambda dtype="float32": load_model("tiny-random", progress=None))
    gen = torch.Generator().manual_seed(0)
    work, d = tmp_path / "work", tiny_lm.config.hidden_size
    work.mkdir()
    for index in range(2):  # shard 0: validation
        ids = [torch.randint(3, tiny_lm.vocab_size, (12,), generator=gen, dtype=torch.int32) for _ in range(4)]
        torch.save({"ids": ids, "feats": [torch.randn(11, d, generator=gen).half() for _ in ids],
                    "answer_start": [4] * 4, "prompts": ["p"] * 4}, work / f"shard-{index:04d}.pt")
    head = random_head(tiny_lm, 64)
    save_head(head, tmp_path / "head")
    (tmp_path / "head" / "training.json").write_text(json.dumps({"step": 40, "answer_tokens_seen": 1000}))
    training.main(["train", "--work", str(work), "--from-head", str(tmp_path / "head"), "--max-steps", "42",
                   "--batch", "2", "--minutes", "5"])
    state = torch.load(work / "ckpt.pt")
    assert state["step"] == 42 and torch.equal(state["vocab_ids"], head.vocab_ids)
    pairs = list(zip(state["head"].values(), head.state_dict().values()))
    assert any(not torch.equal(a, b) for a, b in pairs)  # two steps were taken...
    assert all(torch.allclose(a.float(), b.float(), atol=1e-3) for a, b in pairs)  # ...from the exported weights
    assert "step 40; resume=False" in (work / "train.log").read_text()
