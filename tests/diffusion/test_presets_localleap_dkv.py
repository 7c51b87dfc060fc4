"""Presets 38 (LocalLeap) and 39 (dKV-Cache): what their notes say, checked on tiny-diffusion."""

import pytest

from decoding import run_to_trace


@pytest.mark.slow
def test_diffusion_presets_38_and_39_notes_hold():
    """LocalLeap: 60 calls instead of 64, the fixed schedule's answer; dKV-Cache: 64 calls, an answer that ends sooner."""
    from decoding.presets import load_presets
    from decoding.models import load_model
    from decoding.run import as_lm

    lm = as_lm(load_model("tiny-diffusion", dtype="float32", progress=None))
    presets = {p.name[:2]: p for p in load_presets()}
    fixed = run_to_trace(lm, presets["38"].prompt, strategy="diffusion", params={"remasking": "low-confidence"},
                         max_new_tokens=64, chat=False)
    leap = run_to_trace(lm, presets["38"].prompt, strategy="diffusion", params=presets["38"].params, max_new_tokens=64, chat=False)
    dkv = run_to_trace(lm, presets["39"].prompt, strategy="diffusion", params=presets["39"].params, max_new_tokens=64, chat=False)
    steps = lambda t: len(t.of_kind("diffusion_step"))  # noqa: E731
    assert steps(fixed) == 64 and steps(leap) == 60 and leap.finish.text == fixed.finish.text
    assert fixed.finish.text.strip().endswith("came unto Moses, saying,")
    assert steps(dkv) == 64 and dkv.finish.text.strip().endswith("and the word of the LORD.")
