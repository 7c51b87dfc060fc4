"""tiny-ar-hyperfit: the shipped training log ends near zero loss, the model loads and generates,
and its next-token distributions are sharper than tiny-ar's on the same prompt."""

import json
import re
from pathlib import Path

import pytest
import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.models import load_model
from decoding.training.hyperfit import HyperfitConfig, pick_windows

ASSET = Path(__file__).resolve().parents[2] / "assets" / "tiny-ar-hyperfit"


def test_the_logged_training_loss_is_near_zero():
    epochs = [float(m) for m in re.findall(r"epoch \d+ steps \d+ train ([0-9.]+)", (ASSET / "train.log").read_text())]
    info = json.loads((ASSET / "training.json").read_text())
    assert len(epochs) == info["config"]["epochs"] == 20
    assert epochs[0] > 2.0 and epochs[-1] < 0.05  # from a normal LM loss to near zero
    assert info["train_loss"] == epochs[-1] or abs(info["train_loss"] - epochs[-1]) < 1e-4


@pytest.mark.slow  # the real models tiny-ar and tiny-ar-hyperfit
def test_hyperfit_model_loads_generates_and_is_sharper():
    prompt = "And the king said"
    entropies = {}
    for name in ("tiny-ar", "tiny-ar-hyperfit"):
        lm = LM(load_model(name, dtype="float32", progress=None))
        trace = run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=12, chat=False)
        assert trace.finish.token_ids and trace.finish.text.strip()
        entropies[name] = sum(e.entropy for e in trace.of_kind("token")) / len(trace.of_kind("token"))
    assert entropies["tiny-ar-hyperfit"] < entropies["tiny-ar"] - 0.3


def test_pick_windows_is_seeded_and_refuses_too_little_data():
    stream = torch.arange(1000)
    cfg = HyperfitConfig(num_seqs=4, seq_len=10)
    assert torch.equal(pick_windows(stream, cfg), pick_windows(stream, cfg))
    try:
        pick_windows(torch.arange(30), cfg)
    except ValueError as error:
        assert "fewer than num_seqs=4" in str(error)
    else:
        raise AssertionError("expected a ValueError")


@pytest.mark.slow  # the real models tiny-ar and tiny-ar-hyperfit
def test_hyperfitted_model_preset_note_holds():
    """What the hyperfitting preset's note says: the hyperfitted model's greedy line and entropy, the base model's loop."""
    from decoding.presets import find_preset

    preset = find_preset("playground", "07-hyperfitted-model")
    runs = {}
    for name in ("tiny-ar-hyperfit", "tiny-ar"):
        lm = LM(load_model(name, dtype="float32", progress=None))
        runs[name] = run_to_trace(lm, preset.prompt, strategy="greedy", max_new_tokens=preset.max_new_tokens, chat=False)
    hyper, base = runs["tiny-ar-hyperfit"], runs["tiny-ar"]
    mean = lambda t: sum(e.entropy for e in t.of_kind("token")) / len(t.of_kind("token"))
    assert "after all thy wickedness, (woe, woe unto thee! saith the LORD GOD;)" in hyper.finish.text
    assert mean(hyper) < 0.15 and mean(base) > 2.5
    assert "and went out, and went out, and went out" in base.finish.text
