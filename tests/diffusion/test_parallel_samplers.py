"""FreeDave and Learn2PD on a tiny random diffusion model: FreeDave's canvas is the fixed
schedule's, with NFE = the model calls actually made; Learn2PD's filter is trained on the
model's own runs, loaded from beside the model, and leaves no mask behind."""

from __future__ import annotations

import json

import pytest
import torch

from decoding import run_to_trace
from decoding.run import make_params
from decoding import models
from decoding.training import tiny
from decoding.diffusion import learn2pd
from decoding.diffusion.samplers import DiffusionParams, schedule_of
from decoding.models import load_model
from decoding.run import as_lm

PROMPTS = ["abc", "hello world", "xyz xyz", "The quick brown fox", "12 + 34 =", "aaaa"]


@pytest.fixture(scope="module")
def dlm():
    return as_lm(load_model("tiny-random-diffusion", progress=None))


def model_calls(lm):
    """A list that grows by one per forward call of the model (a batch of canvases is one call)."""
    calls = []
    handle = lm.model.register_forward_hook(lambda m, args, kwargs_out=None: calls.append(1))
    return calls, handle


def steps(trace):
    return trace.of_kind("diffusion_step")


@pytest.mark.parametrize("extra", [{}, {"block_length": 8}, {"steps": 8}, {"steps": 8, "block_length": 4},
                                   {"remasking": "margin"}])
def test_freedave_writes_the_fixed_schedules_canvas_with_at_most_its_calls(dlm, extra):
    for prompt in PROMPTS:
        sequential = run_to_trace(dlm, prompt, strategy="diffusion", params=dict(extra), max_new_tokens=16, chat=False)
        for draft_steps in (1, 2, 4, 8):
            calls, handle = model_calls(dlm)
            try:
                trace = run_to_trace(dlm, prompt, strategy="diffusion", max_new_tokens=16, chat=False,
                                     params=dict(extra, sampler="freedave", draft_steps=draft_steps))
            finally:
                handle.remove()
            assert trace.finish.token_ids == sequential.finish.token_ids, (prompt, extra, draft_steps)
            nfe = steps(trace)[-1].nfe
            assert nfe == len(calls) <= steps(sequential)[-1].nfe  # NFE counts the calls the engine made
            if draft_steps == 1:
                assert nfe == steps(sequential)[-1].nfe
            advanced = [s.extra["steps_advanced"] for s in steps(trace)]
            assert sum(advanced) == len(steps(sequential)) and all(1 <= a <= draft_steps for a in advanced)
            for s in steps(trace):
                assert set(s.extra["verified"]) == set(s.unmasked)
                assert set(s.extra["verified"]) | set(s.extra["rejected"]) == set(s.extra["drafted"])
                assert not set(s.extra["verified"]) & set(s.extra["rejected"])
            assert -1 not in steps(trace)[-1].canvas


def test_freedave_saves_calls_when_its_drafts_hold():
    """A model that always predicts the same canvas: every draft verifies, so each call advances
    `draft_steps` steps (the ideal case, where FreeDave's saving is largest)."""
    lm = as_lm(load_model("tiny-random-diffusion", progress=None))
    fixed_logits = torch.randn(lm.vocab_size, generator=torch.Generator().manual_seed(0))

    class Constant(torch.nn.Module):  # position i's logits: a fixed vector, shifted by i
        config = lm.model.config

        def forward(self, input_ids, **kwargs):
            b, t = input_ids.shape
            logits = fixed_logits.repeat(b, t, 1) + 5 * torch.nn.functional.one_hot(
                (torch.arange(t) * 7 + 3) % lm.vocab_size, lm.vocab_size).float()
            return type("Out", (), {"logits": logits})()

    lm.model = Constant()
    trace = run_to_trace(lm, "abc", strategy="diffusion", params={"sampler": "freedave", "draft_steps": 4},
                         max_new_tokens=16, chat=False)
    assert [s.extra["steps_advanced"] for s in steps(trace)] == [4, 4, 4, 4]
    assert steps(trace)[-1].nfe == 1 + 4  # the first forward, then one batched call per round (16 steps in 5 calls)


@pytest.mark.parametrize("params, message", [
    ({"sampler": "freedave", "temperature": 1.0}, "`temperature` must be 0 for sampler=freedave"),
    ({"sampler": "freedave", "threshold": 0.5}, "`threshold` must be 0 for sampler=freedave"),
    ({"sampler": "freedave", "remasking": "random"}, "`remasking` must be low-confidence, margin or entropy"),
    ({"sampler": "freedave", "cache": "delayed"}, "`cache` must be none for sampler=freedave"),
    ({"sampler": "freedave", "draft_steps": 0}, "`freedave.draft_steps` must be an integer in \\[1, 16\\]"),
    ({"sampler": "learn2pd", "filter_threshold": 0.0}, "`learn2pd.filter_threshold` must be in"),
])
def test_bad_parallel_sampler_settings_are_refused_with_the_parameter_named(params, message):
    with pytest.raises(ValueError, match=message):
        make_params("diffusion", params)


def test_the_schedule_lists_every_step_of_every_block():
    params = DiffusionParams(steps=6, block_length=4)
    assert schedule_of(12, params) == [(0, 0, 4, 2), (0, 0, 4, 2), (1, 4, 8, 2), (1, 4, 8, 2), (2, 8, 12, 2),
                                       (2, 8, 12, 2)]
    assert [k for *_, k in schedule_of(5, DiffusionParams())] == [1] * 5


@pytest.fixture(scope="module")
def folder_model(tmp_path_factory):
    """tiny-random-diffusion saved to a folder and loaded from it, as tiny-parallel is."""
    folder = tmp_path_factory.mktemp("models") / "tiny-diffusion"
    built = tiny.build_tiny_diffusion_model(seed=3)
    built.model.save_pretrained(folder)
    built.tokenizer.save_pretrained(folder)
    loaded = models._load_local(models.REGISTRY["tiny-diffusion"], folder, torch.device("cpu"), torch.float32,
                                lambda m: None)
    loaded.meta["kind"] = "diffusion"
    return as_lm(loaded), folder


def test_learn2pd_labels_come_from_the_models_own_run(folder_model):
    lm, _ = folder_model
    x, y = learn2pd.labelled_run(lm, "hello", 8)
    assert x.shape == (8 + 7 + 6 + 5 + 4 + 3 + 2 + 1, len(learn2pd.FEATURES))  # every masked position of every step
    assert y[-1]  # the last masked position holds its final token by definition
    assert ((x[:, 0] >= 0) & (x[:, 0] <= 1)).all()


def test_learn2pd_needs_a_filter_then_commits_what_it_predicts_final(folder_model):
    lm, folder = folder_model
    with pytest.raises(ValueError, match="needs a filter trained for"):
        run_to_trace(lm, "abc", strategy="diffusion", params={"sampler": "learn2pd"}, max_new_tokens=8, chat=False)
    x, y = learn2pd.collect(lm, ["abc", "hello", "xyz"], 8, say=lambda m: None)
    f = learn2pd.fit(x, y, steps=50)
    (folder / learn2pd.FILTER_FILE).write_text(json.dumps(f.to_json({"test": True})))
    try:
        for threshold, expect_one_step in ((1e-9, True), (0.999999, False)):
            trace = run_to_trace(lm, "abc", strategy="diffusion", max_new_tokens=8, chat=False,
                                 params={"sampler": "learn2pd", "filter_threshold": threshold})
            s = steps(trace)
            assert -1 not in s[-1].canvas and len(trace.finish.token_ids) >= 1
            assert (len(s) == 1) == expect_one_step  # everything predicted final at once, or nearly nothing
            for e in s:
                assert set(e.extra["predicted_final"]) <= set(e.unmasked)
                assert len(e.extra["filter_p"]) == 8
    finally:
        (folder / learn2pd.FILTER_FILE).unlink()
    assert learn2pd.precision_recall(f, x, y, 0.5)["examples"] == len(y)


@pytest.mark.slow  # the real model tiny-parallel
def test_on_tiny_parallel_freedave_equals_one_per_step_with_fewer_counted_calls():
    """The real task model: FreeDave's answer is the sequential one on held-out problems of every
    task, with NFE equal to the model calls made and fewer of them; Learn2PD (its shipped filter)
    and the threshold rule leave no mask and need far fewer calls on a determined task."""
    from decoding.diffusion.parallel_tasks import SPLIT_SIZES, make_splits

    lm = as_lm(load_model("tiny-parallel", progress=None))
    problems = make_splits(sizes={**SPLIT_SIZES, "train": 0, "test": 2})["test"]
    saved = []
    for problem in problems:
        sequential = run_to_trace(lm, problem.prompt, strategy="diffusion", params={"steps": 32}, max_new_tokens=32)
        calls, handle = model_calls(lm)
        try:
            fd = run_to_trace(lm, problem.prompt, strategy="diffusion", max_new_tokens=32,
                              params={"sampler": "freedave", "steps": 32, "draft_steps": 4})
        finally:
            handle.remove()
        assert fd.finish.token_ids == sequential.finish.token_ids, problem
        assert steps(fd)[-1].nfe == len(calls) and -1 not in steps(fd)[-1].canvas
        saved.append(len(calls) / steps(sequential)[-1].nfe)
        for params in ({"sampler": "learn2pd"}, {"threshold": 0.9}):
            trace = run_to_trace(lm, problem.prompt, strategy="diffusion", params=params, max_new_tokens=32)
            assert -1 not in steps(trace)[-1].canvas
            if problem.task == "copy":
                assert steps(trace)[-1].nfe <= 4
    assert max(saved) < 0.7 and sum(saved) / len(saved) < 0.5
