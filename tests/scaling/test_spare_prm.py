"""SPARE's trained PRM (decoding.scaling.spare_prm, reward spare-prm): labels from the reference alignment,
fresh training problems, the fit and its file, the features it reads, and a reward that reads no reference."""

import pytest
import torch

from decoding import run_to_trace
from decoding.run import as_lm
from decoding.scaling import math_tasks
from decoding.scaling import rewards as rw
from decoding.scaling import spare_prm as sp
from decoding.scaling.probe import auc
from decoding.scaling.scoring import REWARDS

QUESTION = "Mia has 37 shells. She gets 45 more, gives away 18, then multiplies them by 3. How many shells now?"


@pytest.mark.parametrize("solution, labels", [
    ("37 + 45 = 82\n82 - 18 = 64\n64 * 3 = 192\nThe answer is 192.", [True, True, True, True]),
    # a slipped result: that line is wrong; the next ones continue from what was written, so they are right
    ("37 + 45 = 82\n82 - 18 = 74\n74 * 3 = 222\nThe answer is 222.", [True, False, True, True]),
    # a misread operand with right arithmetic (what arith-step cannot see)
    ("37 + 54 = 91\n91 - 18 = 73\n73 * 3 = 219\nThe answer is 219.", [False, True, True, True]),
    # an answer after too few steps, and one that does not repeat the last result
    ("37 + 45 = 82\nThe answer is 82.", [True, False]),
    ("37 + 45 = 82\n82 - 18 = 64\n64 * 3 = 192\nThe answer is 190.", [True, True, True, False]),
    # a line that is neither is not labelled, but it takes a place: the next step is compared with step 3's
    ("37 + 45 = 82\nso then\n82 - 18 = 64", [True, None, False]),
])
def test_labels_come_from_the_reference_alignment(solution, labels):
    got = sp.step_labels(QUESTION, solution)
    assert [label for _, label in got] == labels
    aligned = rw.ReferenceStepChecker().align(QUESTION, [line for line, _ in got])
    assert {i: ok for i, ok, _ in aligned} == {i: label for i, label in enumerate(labels) if label is not None}


def test_labels_need_a_question_in_tiny_maths_form():
    with pytest.raises(ValueError, match="not in tiny-math's form"):
        sp.step_labels("What is 3 + 4?", "3 + 4 = 7")


def test_the_training_problems_are_fresh_and_fixed_by_their_seed():
    drawn = sp.fresh_problems(300, seed=0)
    held = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})
    held_out = {p.question for split in math_tasks.HELD_OUT_SPLITS for p in held[split]}
    assert not {p.question for p in drawn} & held_out and len({p.question for p in drawn}) == 300
    assert [p.question for p in sp.fresh_problems(5, seed=0)] == [p.question for p in drawn[:5]]
    assert sp.fresh_problems(5, seed=1)[0].question != drawn[0].question


def test_the_fit_learns_a_nonlinear_rule_and_its_file_keeps_it(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(800, 6, generator=g, dtype=torch.float64)
    y = ((x[:, 0] * x[:, 1]) > 0).double()  # no linear rule separates it
    prm = sp.fit(x, y, steps=600)
    assert auc(prm(x), y) > 0.95
    prm.info = {"trained_on": "a test"}
    prm.save(tmp_path / sp.PRM_FILE)
    again = sp.PRM.load(tmp_path / sp.PRM_FILE)
    assert again.info == {"trained_on": "a test"}
    assert auc(again(x), y) > 0.95 and torch.allclose(again(x), prm(x), atol=2e-2)  # float16 weights


def test_spare_prm_is_a_reward_that_reads_no_reference():
    assert "spare-prm" in REWARDS.names() and not REWARDS.capability("spare-prm", "reads_reference")


@pytest.mark.slow  # the real model tiny-math
def test_step_features_are_one_row_per_line_and_causal():
    lm = as_lm("tiny-math")
    prompt = math_tasks.prompt(QUESTION)
    rows = sp.step_features(lm, prompt, ["37 + 45 = 82", "82 - 18 = 64"])
    assert rows.shape == (2, len(sp.STATS))
    wide = sp.step_features(lm, prompt, ["37 + 45 = 82", "82 - 18 = 64"], with_hidden=True)
    assert wide.shape == (2, lm.config.hidden_size + len(sp.STATS)) and torch.allclose(wide[:, -len(sp.STATS):], rows)
    alone = sp.step_features(lm, prompt, ["37 + 45 = 82"])
    assert torch.allclose(alone[0], rows[0], atol=1e-4)  # a step's features do not see the later line
    stats = dict(zip(sp.STATS, rows[0].tolist()))
    assert stats["min_logprob"] <= stats["mean_logprob"] <= 0 and stats["min_margin"] <= 0
    assert stats["tokens"] == len(lm.tokenizer(prompt + "37 + 45 = 82\n").input_ids) - len(lm.tokenizer(prompt).input_ids)
    slipped = dict(zip(sp.STATS, sp.step_features(lm, prompt, ["37 + 45 = 92"])[0].tolist()))
    assert slipped["min_logprob"] < stats["min_logprob"] and slipped["not_top"] >= 1  # the slipped digit is unlikely


@pytest.mark.slow  # the real model tiny-math and its shipped PRM
def test_the_shipped_prm_scores_without_the_reference(monkeypatch):
    prm = sp.prm_for(as_lm("tiny-math"))
    assert prm.info["held_out"]["auc"] > 0.8 and "fresh problems" in prm.info["trained_on"]

    def no_reference(*args, **kwargs):
        raise AssertionError("spare-prm read the reference")

    monkeypatch.setattr(math_tasks, "parse_question", no_reference)
    monkeypatch.setattr(rw.ReferenceStepChecker, "align", no_reference)
    reward = sp.SparePRMReward(as_lm("tiny-math"))
    right = reward.score(math_tasks.prompt(QUESTION), ["37 + 45 = 82\n", "82 - 18 = 64\n"], False).value
    slipped = reward.score(math_tasks.prompt(QUESTION), ["37 + 45 = 82\n", "82 - 18 = 74\n"], False).value
    assert 0 <= slipped < right <= 1
    assert 0 <= reward.score("What is 3 + 4?\n", ["3 + 4 = 7"], True).value <= 1  # any question: no reference needed
    task = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"][0]
    trace = run_to_trace("tiny-math", math_tasks.prompt(task.question), strategy="particle-filter",
                         params={"n": 2, "reward": "spare-prm", "temperature": 1.0}, max_new_tokens=160, seed=0,
                         chat=False)
    details = [p["detail"] for s in trace.of_kind("particles") for p in s.particles]
    assert details and all(d.startswith("SPARE-PRM: P(step right) =") for d in details)


@pytest.mark.slow  # the real model tiny-ar
def test_the_reward_needs_a_prm_trained_for_the_policy():
    with pytest.raises(ValueError, match="PRM trained on 'tiny-ar'.*decoding.scaling.spare_prm train"):
        run_to_trace("tiny-ar", "abc", strategy="particle-filter", params={"n": 2, "reward": "spare-prm"},
                     max_new_tokens=4)


@pytest.mark.slow  # the real model tiny-math and its shipped PRM
def test_the_spare_prm_preset_does_what_its_note_says():
    """49: the PRM resamples away a misread the arithmetic checker passes (410 against 488); on #m16 it follows
    the misread greedy tiny-math makes too (206, where arith-step and spare find 388)."""
    from decoding.presets import load_presets
    from decoding.scaling.tasks import menu_tasks

    lm = as_lm("tiny-math")
    preset = next(p for p in load_presets() if p.name == "49-spare-prm")
    go = lambda prompt, **change: run_to_trace(lm, prompt, strategy=preset.strategy, params=preset.params | change,
                                               max_new_tokens=preset.max_new_tokens, chat=preset.chat, seed=preset.seed)
    trace = go(preset.prompt)
    assert trace.finish.extra["answer"] == "410" and sum(s.resampled for s in trace.of_kind("particles")) == 4
    misread = [p for s in trace.of_kind("particles") for p in s.particles if p["step_text"].strip() == "231 + 141 = 372"]
    assert misread and all(round(p["reward"], 2) == 0.04 for p in misread)
    assert go(preset.prompt, reward="arith-step").finish.extra["answer"] == "488"
    m16 = next(t for t in menu_tasks() if t["id"] == "m16")["prompt"]
    assert [go(m16, reward=r).finish.extra["answer"] for r in ("spare-prm", "arith-step", "spare")] == ["206", "388", "388"]
    note = " ".join(preset.note.split())
    for claim in ("31,594", "0.04", "410", "488", "#m16", "0.21", "0.06", "206", "388"):
        assert claim in note
