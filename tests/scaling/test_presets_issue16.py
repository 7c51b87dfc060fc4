"""Presets 28 (First Finish), 29 (reward beam) and 29b (softmax selection): the answers their notes name."""

import pytest

from decoding import run_to_trace
from decoding.models import load_model
from decoding.lm import LM
from decoding.presets import load_presets


@pytest.mark.slow
def test_scaling_presets_end_on_the_answers_their_notes_name():
    lm = LM(load_model("tiny-math", dtype="float32", progress=None))
    presets = {p.name.split("-")[0]: p for p in load_presets()}
    answers = {}
    for key in ("28", "29", "29b"):
        p = presets[key]
        trace = run_to_trace(lm, p.prompt, strategy=p.strategy, params=p.params, max_new_tokens=p.max_new_tokens,
                             seed=p.seed, chat=p.chat)
        answers[key] = trace.finish.text.strip().splitlines()[-1]
    assert answers == {"28": "The answer is 219.", "29": "The answer is 220.", "29b": "The answer is 219."}
    assert "158 + 40 = 197" in run_to_trace(lm, presets["29b"].prompt, strategy="best-of-n", params=presets["29b"].params,
                                            max_new_tokens=160, seed=0, chat=presets["29b"].chat).finish.text
