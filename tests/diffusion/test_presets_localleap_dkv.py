"""Presets 58 (LocalLeap) and 59 (dKV-Cache): what their notes say, checked on tiny-diffusion."""

import pytest

from decoding import run_to_trace


@pytest.mark.slow
def test_localleap_and_dkv_cache_preset_notes_hold():
    """LocalLeap: 60 calls instead of 64, the fixed schedule's answer; dKV-Cache: 64 calls, an answer that ends sooner."""
    from decoding.presets import find_preset
    from decoding.models import load_model
    from decoding.run import as_lm

    lm = as_lm(load_model("tiny-diffusion", dtype="float32", progress=None))
    leap_preset = find_preset("diffusion", "58-diffusion-localleap")
    dkv_preset = find_preset("diffusion", "59-diffusion-dkv-cache")
    fixed = run_to_trace(lm, leap_preset.prompt, strategy="diffusion", params={"remasking": "low-confidence"},
                         max_new_tokens=64, chat=False)
    leap = run_to_trace(lm, leap_preset.prompt, strategy="diffusion", params=leap_preset.params, max_new_tokens=64, chat=False)
    dkv = run_to_trace(lm, dkv_preset.prompt, strategy="diffusion", params=dkv_preset.params, max_new_tokens=64, chat=False)
    steps = lambda t: len(t.of_kind("diffusion_step"))
    assert steps(fixed) == 64 and steps(leap) == 60 and leap.finish.text == fixed.finish.text
    assert fixed.finish.text.strip().endswith("came unto Moses, saying,")
    assert steps(dkv) == 64 and dkv.finish.text.strip().endswith("and the word of the LORD.")
