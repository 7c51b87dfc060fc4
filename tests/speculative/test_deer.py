"""DEER (issue 15): tiny-diffusion drafts a block for tiny-ar in one pass; the output stays the target's."""

from __future__ import annotations

import pytest
import torch

from decoding import run_to_trace
from decoding.run import as_lm
from decoding.speculative.drafters import TreePlan, grow_tree
from decoding.speculative.verify import ROOT, verify_tree
from test_speculative import chi2_pvalue

PROMPTS = ["And it came to pass, when", "Blessed are they", "In the beginning"]


@pytest.mark.slow
@pytest.mark.parametrize("params", [
    {"drafter": "diffusion", "draft_length": 4},
    {"drafter": "diffusion", "draft_length": 8, "confidence": 0.4},
    {"drafter": "diffusion", "draft_length": 3, "tree": "static", "width": 2},
], ids=["block-4", "block-8-confidence", "static-tree"])
def test_greedy_deer_equals_the_targets_greedy_and_drafts_a_block_per_call(params):
    lm = as_lm("tiny-ar")
    for prompt in PROMPTS:
        plain = run_to_trace(lm, prompt, max_new_tokens=40, chat=False)
        spec = run_to_trace(lm, prompt, strategy="speculative", params=params, max_new_tokens=40, chat=False)
        assert spec.finish.token_ids == plain.finish.token_ids
        rounds = spec.of_kind("spec_round")
        assert all(r.draft_forward_passes == 1 and r.extra["diffusion_block"] == params["draft_length"] for r in rounds)
        assert rounds[0].drafter == "diffusion:tiny-diffusion"
    assert sum(len(r.accepted_path) for r in rounds) >= 1  # it does get tokens accepted


@pytest.mark.slow
def test_deer_sampling_follows_the_target_on_the_first_token():
    """Sampling at T = 1: the first token's law is the target's softmax (chi-square over 600 runs on the
    target's most likely tokens), while the diffusion drafter's own law is far from it."""
    lm = as_lm("tiny-ar")
    prompt = "And the LORD said"
    ids = lm.encode_prompt(prompt, chat=False)[0]
    p = torch.softmax(lm.forward(torch.tensor([ids])).logits[0, -1], -1)  # (V,)
    top = p.topk(6).indices.tolist()
    counts = [0] * (len(top) + 1)
    for seed in range(600):
        trace = run_to_trace(lm, prompt, strategy="speculative", max_new_tokens=1, seed=seed, chat=False,
                             params={"drafter": "diffusion", "draft_length": 3, "temperature": 1.0})
        first = trace.finish.token_ids[0]
        counts[top.index(first) if first in top else -1] += 1
    expected = [p[t].item() for t in top] + [1 - sum(p[t].item() for t in top)]
    assert chi2_pvalue(counts, expected) > 1e-3, (counts, expected)


def test_block_drafts_from_marginals_keep_sampling_exact():
    """The decision level: children at depth d drawn from q_d whatever their parent (a one-pass block), then
    verified against q_d; the first two tokens follow the target's law exactly (chi-square, 1,500 runs: resampling
    from p instead of the residual scores p = 6e-44 here)."""
    p_logits = torch.tensor([[1.2, 0.3, -0.8], [-0.5, 1.0, 0.4], [0.2, -1.0, 1.3]])  # target: row = last token
    block = torch.tensor([[2.5, 0.0, -1.0], [-1.0, 2.0, 0.5], [0.0, 0.0, 2.0]])  # q_d per depth, no parent
    gen = torch.Generator().manual_seed(0)
    counts = [0] * 9
    for _ in range(1_500):
        out, last = [], 0
        while len(out) < 2:
            def expand(tree, frontier):
                depth = 0 if frontier[0] == ROOT else tree.depths()[frontier[0]]
                return block[depth].expand(len(frontier), -1)

            tree = grow_tree(expand, TreePlan("chain", 3, 1, 8), 1.0, gen).tree
            probs = torch.softmax(p_logits[[last] + tree.tokens].double(), -1)
            verdict = verify_tree(tree, probs, gen, greedy=False)
            out += [tree.tokens[i] for i in verdict.accepted] + [verdict.extra_token]
            last = out[-1]
        counts[out[0] * 3 + out[1]] += 1
    p = torch.softmax(p_logits.double(), -1)
    expected = [(p[0, a] * p[a, b]).item() for a in range(3) for b in range(3)]
    assert chi2_pvalue(counts, expected) > 1e-3, counts


def test_a_diffusion_drafter_must_share_the_tokenizer_and_be_a_diffusion_model():
    with pytest.raises(ValueError, match="does not share the target's tokenizer"):
        run_to_trace("tiny-random", "Hello", strategy="speculative", max_new_tokens=4, chat=False,
                     params={"drafter": "diffusion", "draft_model": "tiny-random-diffusion"})
    with pytest.raises(ValueError, match="needs a masked diffusion model"):
        run_to_trace("tiny-random", "Hello", strategy="speculative", max_new_tokens=4, chat=False,
                     params={"drafter": "diffusion", "draft_model": "tiny-random-draft"})


@pytest.mark.slow
def test_the_deer_preset_note_holds():
    from decoding.events import stats
    from decoding.presets import find_preset

    preset = find_preset("speculative", "26-speculative-deer")
    lm = as_lm(preset.model)
    runs = {name: run_to_trace(lm, preset.prompt, strategy="speculative", params=params,
                               max_new_tokens=preset.max_new_tokens, chat=False)
            for name, params in (("deer", preset.params),
                                 ("model", {"drafter": "model", "draft_model": "tiny-ar-draft", "draft_length": 4,
                                            "confidence": 0.0}))}
    target = {k: stats(t)["target_forward_passes"] for k, t in runs.items()}
    draft = {k: sum(r.draft_forward_passes for r in t.of_kind("spec_round")) for k, t in runs.items()}
    assert (target, draft) == ({"deer": 24, "model": 25}, {"deer": 24, "model": 100})
    assert runs["deer"].finish.token_ids == runs["model"].finish.token_ids  # both: tiny-ar's greedy text
