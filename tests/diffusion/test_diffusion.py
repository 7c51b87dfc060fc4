"""Masked diffusion decoding: pure decisions on hand-made tensors, then whole runs on tiny models."""

import json
import types

import pytest
import torch

from decoding import models
from decoding.training import tiny
from decoding.__main__ import main
from decoding.diffusion.lm import DiffusionLM, find_mask_id, needs_logit_shift
from decoding.events import Trace, stats
from decoding.models import LoadedModel, load_model
from decoding.run import as_lm, generate, make_params, run_to_trace
from decoding.diffusion import samplers as dd
from decoding.registry import param_specs

PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def dlm():
    return as_lm(load_model("tiny-random-diffusion", progress=None))


def untimed(trace):
    return [{k: v for k, v in e.to_dict().items() if not k.endswith("_s")} for e in trace.events]


# Pure decisions ---------------------------------------------------------------------------------
def test_schedule_matches_a_hand_computation():
    assert dd.num_transfer_tokens(10, 4) == [3, 3, 2, 2]
    assert dd.num_transfer_tokens(4, 4) == [1, 1, 1, 1]
    assert dd.num_transfer_tokens(16, 3) == [6, 5, 5]
    assert dd.steps_per_block(7, 2) == [4, 3]


def test_remasking_scores_equal_their_definitions():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.4, 0.35, 0.25]], dtype=torch.float64)
    logits = probs.log()
    drawn = torch.tensor([0, 1])
    g = torch.Generator().manual_seed(0)
    low = dd.remasking_scores(logits, drawn, "low-confidence", g)
    assert torch.allclose(low, torch.tensor([0.7, 0.35], dtype=torch.float64))  # probability of the drawn token
    assert torch.allclose(dd.remasking_scores(logits, drawn, "margin", g), torch.tensor([0.5, 0.05], dtype=torch.float64))
    entropy = -(probs * probs.log()).sum(-1)
    assert torch.allclose(dd.remasking_scores(logits, drawn, "entropy", g), -entropy)
    random = dd.remasking_scores(logits, drawn, "random", g)
    assert random.shape == (2,) and ((0 <= random) & (random < 1)).all()


def test_gumbel_argmax_at_temperature_zero_is_argmax_and_samples_softmax_above():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 7, generator=g)
    assert torch.equal(dd.gumbel_argmax(logits, 0.0, g), logits.argmax(-1))
    row = torch.tensor([1.0, 0.0, -1.0])
    draws = dd.gumbel_argmax(row.expand(4000, 3), 1.0, g)
    freq = torch.bincount(draws, minlength=3).double() / 4000
    assert torch.allclose(freq, torch.softmax(row.double(), -1), atol=0.03)


def test_threshold_commits_confident_tokens_and_at_least_one():
    scores = torch.tensor([0.95, 0.5, 0.91, 0.99, 0.3], dtype=torch.float64)
    candidates = torch.tensor([True, True, True, False, True])
    assert dd.select_threshold(scores, candidates, 0.9).tolist() == [True, False, True, False, False]
    assert dd.select_threshold(scores, candidates, 0.999).tolist() == [True, False, False, False, False]  # forced best


def test_localleap_commits_anchors_and_relaxed_neighbours_within_the_radius():
    scores = torch.tensor([0.8, 0.1, 0.8, 0.99, 0.8, 0.1, 0.1, 0.8, 0.1], dtype=torch.float64)
    candidates = torch.ones(9, dtype=torch.bool)
    chosen, anchors = dd.select_localleap(scores, candidates, anchor_threshold=0.95, threshold=0.7, radius=1)
    assert anchors.nonzero()[:, 0].tolist() == [3]
    assert chosen.nonzero()[:, 0].tolist() == [2, 3, 4]  # 0 and 7 are confident enough but too far
    chosen, _ = dd.select_localleap(scores, candidates, anchor_threshold=0.95, threshold=0.7, radius=4)
    assert chosen.nonzero()[:, 0].tolist() == [0, 2, 3, 4, 7]
    none, anchors = dd.select_localleap(scores * 0.5, candidates, anchor_threshold=0.95, threshold=0.3, radius=4)
    assert not anchors.any() and none.nonzero()[:, 0].tolist() == [3]  # only the forced best


def test_localleap_linear_decay_raises_the_relaxed_threshold_with_the_distance_from_the_anchor():
    anchors = torch.tensor([False, False, False, True, False, False, False, False, False])
    required = dd.localleap_required(anchors, anchor_threshold=0.9, threshold=0.5, radius=4, decay="linear")
    # distance 3 2 1 0 1 2 3 4 5: 0.5 next to the anchor, +0.1 per position, the anchor threshold beyond r=4
    assert required.tolist() == pytest.approx([0.7, 0.6, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.9])
    flat = dd.localleap_required(anchors, anchor_threshold=0.9, threshold=0.5, radius=4)
    assert flat.tolist() == pytest.approx([0.5] * 8 + [0.9])
    scores = torch.tensor([0.65, 0.1, 0.1, 0.99, 0.1, 0.1, 0.75, 0.75, 0.1], dtype=torch.float64)
    candidates = torch.ones(9, dtype=torch.bool)
    chosen, _ = dd.select_localleap(scores, candidates, 0.9, 0.5, 4, decay="linear")
    assert chosen.nonzero()[:, 0].tolist() == [3, 6]  # 0 needs 0.7 and 7 needs 0.8 at their distances
    chosen, _ = dd.select_localleap(scores, candidates, 0.9, 0.5, 4)
    assert chosen.nonzero()[:, 0].tolist() == [0, 3, 6, 7]


def test_localleap_decay_none_is_the_reference_codes_window_and_linear_is_labelled_our_own():
    # the reference rule (0.9 / 0.75 / radius 4): masked positions within 4 of an anchor, both sides, need 0.75;
    # the others 0.9; the most confident is always committed
    scores = torch.tensor([0.8, 0.1, 0.8, 0.1, 0.1, 0.1, 0.95, 0.1, 0.1, 0.1, 0.76, 0.8, 0.1], dtype=torch.float64)
    candidates = torch.ones(13, dtype=torch.bool)
    candidates[0] = False  # already committed: never chosen again
    chosen, anchors = dd.select_localleap(scores, candidates, 0.9, 0.75, 4)
    assert anchors.nonzero()[:, 0].tolist() == [6]
    assert chosen.nonzero()[:, 0].tolist() == [2, 6, 10]  # 2 and 10 at distance 4; 11 (distance 5) needs 0.9
    from decoding.params import specs
    helps = {s.name: s.help for s in specs(dd.LocalLeapParams)}
    assert "reference code" in helps["decay"] and "project's own variant" in helps["decay"]


def test_helpers_do_not_modify_their_inputs():
    scores, candidates = torch.rand(6, dtype=torch.float64), torch.ones(6, dtype=torch.bool)
    before = scores.clone(), candidates.clone()
    dd.select_localleap(scores, candidates, 0.5, 0.2, 1)
    dd.select_threshold(scores, candidates, 0.5)
    assert torch.equal(scores, before[0]) and torch.equal(candidates, before[1])


# Whole runs -------------------------------------------------------------------------------------
def check_history(trace, lm):
    """Each position goes from -1 to its final id exactly at the step listing it, never changes after."""
    steps = trace.of_kind("diffusion_step")
    length = len(steps[0].canvas)
    previous = [-1] * length
    for e in steps:
        assert len(set(e.unmasked)) == len(e.unmasked) >= 1
        for i in range(length):
            if i in e.unmasked:
                assert previous[i] == -1 and e.canvas[i] == e.unmasked_tokens[e.unmasked.index(i)] != -1
            else:
                assert e.canvas[i] == previous[i]
            assert (e.masked_confidence[i] is None) == (e.canvas[i] != -1)
        previous = e.canvas
    assert -1 not in previous and lm.mask_id not in previous
    return steps


CONFIGS = [
    dict(steps=6),
    dict(steps=4, block_length=4, remasking="random", temperature=1.0),
    dict(steps=8, block_length=8, remasking="margin"),
    dict(steps=3, remasking="entropy", temperature=0.5),
    dict(threshold=0.3, block_length=8),
    dict(sampler="localleap", threshold=0.25, anchor_threshold=0.5, radius=2),
]


@pytest.mark.parametrize("params", CONFIGS)
def test_runs_end_unmasked_within_their_schedule(dlm, params):
    before = dlm.forward_passes
    trace = run_to_trace(dlm, PROMPT, strategy="diffusion", params=params, max_new_tokens=16, seed=1)
    steps = check_history(trace, dlm)
    canvas = steps[-1].canvas
    finish = trace.finish
    stop = next((i for i, t in enumerate(canvas) if t in dlm.stop_ids), None)
    assert finish.token_ids == (canvas if stop is None else canvas[:stop + 1])
    assert finish.text == dlm.decode(finish.token_ids) and "<mask>" not in finish.text
    p = make_params("diffusion", params)
    block = p.block_length or 16
    for e in steps:  # semi-AR: never outside the current block
        assert all(e.block * block <= i < (e.block + 1) * block for i in e.unmasked)
    if p.threshold == 0:  # fixed schedule: exactly what LLaDA's schedule allows, step by step
        expected = [k for s in dd.steps_per_block(p.steps, 16 // block) for k in dd.num_transfer_tokens(block, s)]
        assert [len(e.unmasked) for e in steps] == expected
        assert all(len(e.unmasked) == e.extra["scheduled"] for e in steps)
    else:  # threshold: every committed token clears the bar except at most the forced most confident one
        for e in steps:
            below = [c for c in e.confidence if c < p.threshold]
            assert len(below) <= 1 and (not below or len(e.unmasked) == 1)
        assert max(len(e.unmasked) for e in steps) > 1  # the model is confident enough to leap here
        assert all(e.extra["threshold"] == p.threshold for e in steps)  # the confidence chart draws this line
    s = stats(trace)
    assert s["nfe"] == len(steps) == s["forward_passes"] == dlm.forward_passes - before
    assert s["tokens_per_step"] == round(16 / len(steps), 3)
    assert Trace.from_json(trace.to_json()).events == trace.events


def test_localleap_trace_commits_only_anchors_and_near_relaxed_positions(dlm):
    params = dict(sampler="localleap", threshold=0.2, anchor_threshold=0.45, radius=1)
    trace = run_to_trace(dlm, PROMPT, strategy="diffusion", params=params, max_new_tokens=16, seed=0)
    relaxed = 0
    for e in trace.of_kind("diffusion_step"):
        anchors = e.extra["anchors"]
        assert all(c >= 0.45 for i, c in zip(e.unmasked, e.confidence) if i in anchors)
        assert set(anchors) <= set(e.unmasked)
        for i, c in zip(e.unmasked, e.confidence):
            near = c >= 0.2 and any(abs(i - a) <= 1 for a in anchors)
            relaxed += near and i not in anchors
            assert i in anchors or near or (len(e.unmasked) == 1 and not anchors)  # or the forced one
    assert relaxed > 0  # some positions leapt on the relaxed threshold


def test_steps_equal_to_length_unmask_one_token_per_step(dlm):
    trace = run_to_trace(dlm, PROMPT, strategy="diffusion", params={"steps": 12}, max_new_tokens=12)
    assert [len(e.unmasked) for e in trace.of_kind("diffusion_step")] == [1] * 12


def test_same_seed_gives_the_same_trace_and_seeds_matter(dlm):
    params = {"steps": 4, "remasking": "random", "temperature": 2.0}
    a, b, c = (run_to_trace(dlm, PROMPT, strategy="diffusion", params=params, max_new_tokens=12, seed=s) for s in (5, 5, 6))
    assert untimed(a) == untimed(b)
    assert a.finish.token_ids != c.finish.token_ids


def test_cancel_stops_between_steps(dlm):
    calls = iter(range(100))  # `generate` asks once before the strategy, then the sampler before each model call
    trace = run_to_trace(dlm, PROMPT, strategy="diffusion", max_new_tokens=8, should_stop=lambda: next(calls) >= 4)
    assert len(trace.of_kind("diffusion_step")) == 3 and trace.finish.stop_reason == "cancelled"
    assert trace.finish.extra["canvas"] == trace.of_kind("diffusion_step")[-1].canvas


@pytest.mark.parametrize("params, length, message", [
    ({"steps": -1}, 8, "`steps` must be"), ({"steps": 9}, 8, r"`steps` must be in \[1, max_new_tokens=8\]"),
    ({"block_length": 3}, 8, "`block_length` must divide"),
    ({"steps": 1, "block_length": 4}, 8, "`steps` must be >= the number of blocks"),
    ({"remasking": "lowest"}, 8, "`remasking` must be one of"), ({"threshold": 1.5}, 8, "`threshold` must be"),
    ({"sampler": "leap"}, 8, "`sampler` must be one of"), ({"sampler": "localleap"}, 8, "`threshold` must be in"),
    ({"radius": -1}, 8, "`radius`"), ({"anchor_threshold": 0}, 8, "`anchor_threshold`"),
    ({"temperature": -1}, 8, "`temperature`"), ({"cache": "kv"}, 8, "`cache` must be one of"),
    ({"refresh_interval": 0}, 8, "`refresh_interval`"), ({"threshold": 0.5, "remasking": "entropy"}, 8, "`remasking`"),
])
def test_bad_params_name_the_parameter(dlm, params, length, message):
    with pytest.raises(ValueError, match=message):
        run_to_trace(dlm, PROMPT, strategy="diffusion", params=params, max_new_tokens=length)


@pytest.mark.slow  # the real model tiny-ar
def test_model_kinds_are_checked(dlm, tiny_lm):
    with pytest.raises(ValueError, match="masked diffusion model: it decodes with strategy 'diffusion' only, not 'greedy'"):
        run_to_trace(dlm, PROMPT, strategy="greedy", max_new_tokens=4)
    with pytest.raises(ValueError, match="strategy 'diffusion' needs a masked diffusion model.*causal"):
        run_to_trace(tiny_lm, PROMPT, strategy="diffusion", max_new_tokens=4)
    with pytest.raises(ValueError, match="is a causal"):
        DiffusionLM(tiny_lm.loaded)
    assert models.REGISTRY["llada-8b-instruct"].kind == "diffusion" and models.REGISTRY["tiny-ar"].kind == "causal"


def test_every_parameter_is_documented():
    rows = param_specs("diffusion")
    family = {r["name"] for r in rows if r["plugin"] is None}
    assert family == {f for f in dd.DiffusionParams.__dataclass_fields__} - {"own"}
    assert {r["name"] for r in rows if r["plugin"]} == {f"{n}.{f}" for n in dd.SAMPLERS.names()
                                                      for f in dd.SAMPLERS.params_of(n).__dataclass_fields__}
    assert all(r["range"] and r["help"] for r in rows)


# Model conventions ------------------------------------------------------------------------------
class PositionModel(torch.nn.Module):
    """Logits at position i favour token 65 + i % 20 ('A', 'B', ...): shows which row predicts what."""

    def __init__(self, model_type):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.config = types.SimpleNamespace(model_type=model_type, mask_token_id=None, vocab_size=260,
                                            architectures=None, max_position_embeddings=512)

    def forward(self, input_ids, **kwargs):
        T = input_ids.shape[1]
        logits = torch.zeros(1, T, 260)
        logits[0, torch.arange(T), 65 + torch.arange(T) % 20] = 5.0
        return types.SimpleNamespace(logits=logits)


@pytest.mark.parametrize("model_type, shifted", [("dream", True), ("llada", False)])
def test_dream_shift_is_applied_only_where_needed(model_type, shifted):
    tokenizer = tiny.byte_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    loaded = LoadedModel(model_type, PositionModel(model_type), tokenizer, torch.device("cpu"), torch.float32, "test",
                         meta={"kind": "diffusion"})
    lm = DiffusionLM(loaded)
    assert lm.shift == shifted == needs_logit_shift(loaded.model.config)
    prompt_len = len(lm.encode_prompt("xyz", chat=False)[0])
    trace = run_to_trace(lm, "xyz", strategy="diffusion", max_new_tokens=6, chat=False)
    first = prompt_len - 1 if shifted else prompt_len  # the row that predicts canvas position 0
    assert trace.finish.token_ids == [65 + (first + i) % 20 for i in range(6)]


def test_mask_id_comes_from_tokenizer_then_config_then_model_type():
    ns = types.SimpleNamespace
    assert find_mask_id(ns(mask_token_id=7), ns(mask_token_id=9)) == 7
    assert find_mask_id(ns(mask_token_id=None), ns(mask_token_id=9)) == 9
    assert find_mask_id(ns(), ns(model_type="llada")) == 126336
    with pytest.raises(ValueError, match="not a masked diffusion LM"):
        find_mask_id(ns(), ns(model_type="llama"))


@pytest.mark.slow  # the real models tiny-ar, tiny-diffusion
def test_a_saved_model_folder_loads_as_a_diffusion_model(tmp_path, monkeypatch):
    built = tiny.build_tiny_diffusion_model(seed=3)
    built.model.save_pretrained(tmp_path / "tiny-diffusion")
    built.tokenizer.save_pretrained(tmp_path / "tiny-diffusion")
    monkeypatch.setattr(models, "ASSETS_DIR", tmp_path)
    loaded = models._load_local(models.REGISTRY["tiny-diffusion"], tmp_path / "tiny-diffusion",
                                torch.device("cpu"), torch.float32, lambda m: None)
    loaded.meta["kind"] = "diffusion"
    lm = DiffusionLM(loaded)
    assert lm.mask_id == built.tokenizer.mask_token_id and not lm.shift
    ids = torch.tensor(lm.encode_prompt("hi", chat=False)[0] + [lm.mask_id] * 3)
    assert torch.allclose(lm.logits(ids), DiffusionLM(built).logits(ids), atol=1e-5)
    with pytest.raises(models.ModelLoadError, match="has no config.json"):
        models._load_local(models.REGISTRY["tiny-ar"], tmp_path / "missing", torch.device("cpu"), torch.float32, print)


# Delayed KV cache -------------------------------------------------------------------------------
def positions_fed(lm, **kwargs):
    """Run and count the positions the model embedded (its work is proportional to them)."""
    fed = []
    hook = lm.model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0].shape[1]))
    try:
        trace = run_to_trace(lm, PROMPT, strategy="diffusion", max_new_tokens=16, seed=2, **kwargs)
    finally:
        hook.remove()
    return trace, sum(fed)


def test_cache_with_refresh_every_step_equals_no_cache(dlm):
    params = {"steps": 8, "block_length": 8}
    plain, work_plain = positions_fed(dlm, params=params)
    cached, work_cached = positions_fed(dlm, params=params | {"cache": "delayed", "refresh_interval": 1})
    assert plain.finish.token_ids == cached.finish.token_ids and work_plain == work_cached
    for a, b in zip(plain.of_kind("diffusion_step"), cached.of_kind("diffusion_step")):
        assert a.confidence == b.confidence and a.masked_confidence == b.masked_confidence


def test_delayed_cache_feeds_fewer_positions_and_counts_them(dlm):
    params = {"steps": 8, "block_length": 8}
    plain, work_plain = positions_fed(dlm, params=params)
    cached, work_cached = positions_fed(dlm, params=params | {"cache": "delayed", "refresh_interval": 4})
    steps = cached.of_kind("diffusion_step")
    assert [e.extra["cache_refreshed"] for e in steps] == [True, False, False, False] * 2
    assert work_cached == work_plain - sum(e.extra["cached_positions"] for e in steps) < work_plain
    assert stats(cached)["nfe"] == stats(plain)["nfe"] == 8  # a partial forward still counts as one NFE
    check_history(cached, dlm)


def test_partial_forward_matches_a_full_forward_on_active_rows(dlm):
    """Right after a full forward nothing changed, so cached keys / values are exact."""
    from decoding.diffusion.lm import KVState

    ids = torch.tensor(dlm.encode_prompt(PROMPT, chat=False)[0] + [dlm.mask_id] * 6)
    state = KVState()
    full = dlm.logits(ids, state)
    active = torch.arange(len(ids) - 6, len(ids))
    partial = dlm.partial_logits(ids, active, state)
    assert torch.allclose(partial[active], full[active], atol=1e-5)


def test_cache_is_refused_for_models_without_the_attention_hook():
    tokenizer = tiny.byte_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    loaded = LoadedModel("dream", PositionModel("dream"), tokenizer, torch.device("cpu"), torch.float32, "test",
                         meta={"kind": "diffusion"})
    events = generate(DiffusionLM(loaded), "x", strategy="diffusion", params={"cache": "delayed"}, max_new_tokens=4)
    with pytest.raises(ValueError, match="`cache`=delayed is not available"):
        next(events)  # refused before the run starts


def test_cli_runs_a_diffusion_model(capsys):
    argv = ["run", "--model", "tiny-random-diffusion", "--strategy", "diffusion", "--prompt", "hi",
            "--set", "remasking=low-confidence", "--set", "steps=8", "--set", "block_length=8",
            "--set", "threshold=0.9", "--set", "sampler=localleap", "--max-new-tokens", "16", "--json", "--quiet"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stats"]["nfe"] >= 1 and out["stats"]["tokens_per_step"] > 0 and "<mask>" not in out["text"]


@pytest.mark.parametrize("cache", ["prefill", "greedy"])
def test_prefill_and_greedy_caches_feed_what_their_variant_recomputes(dlm, cache):
    params = {"steps": 8, "block_length": 8}
    plain, work_plain = positions_fed(dlm, params=params)
    cached, work_cached = positions_fed(dlm, params=params | {"cache": cache, "refresh_interval": 4})
    steps = cached.of_kind("diffusion_step")
    prompt_len = len(cached.start.prompt_ids)
    refreshed = [e.extra["cache_refreshed"] for e in steps]
    if cache == "prefill":  # one full forward, then every canvas position and never the prompt
        assert refreshed == [True] + [False] * 7
        assert work_cached == (prompt_len + 16) + 7 * 16
    else:  # greedy: masked positions only; a full forward every 4 steps
        assert refreshed == [True, False, False, False] * 2
        masked_before = [16 - 2 * i for i in range(8)]  # 2 tokens committed per step
        assert work_cached == sum(prompt_len + 16 if r else m for r, m in zip(refreshed, masked_before))
    assert work_cached < work_plain and stats(cached)["nfe"] == stats(plain)["nfe"] == 8
    check_history(cached, dlm)


def test_active_positions_of_each_cache_variant():
    from decoding.diffusion.samplers import active_positions

    masked = torch.tensor([False, False, True, False, True, True])  # 2 prompt positions, then the canvas
    just = torch.tensor([False, False, False, True, False, False])
    assert active_positions(masked, just, "delayed", 2).tolist() == [2, 3, 4, 5]
    assert active_positions(masked, just, "greedy", 2).tolist() == [2, 4, 5]
    assert active_positions(masked, just, "prefill", 2).tolist() == [2, 3, 4, 5]
