"""Preset 24: a dynamic draft tree needs fewer target passes than a static one, with the same text."""

import pytest

from decoding import run_to_trace
from decoding.events import stats
from decoding.lm import LM
from decoding.models import load_model
from decoding.presets import find_preset


@pytest.mark.slow
def test_dynamic_tree_preset_note_holds():
    preset = find_preset("speculative", "24-speculative-dynamic-tree")
    lm = LM(load_model("tiny-ar", dtype="float32", progress=None))
    runs = {tree: run_to_trace(lm, preset.prompt, strategy="speculative", params=preset.params | {"tree": tree},
                               max_new_tokens=preset.max_new_tokens, chat=False) for tree in ("dynamic", "static")}
    passes = {tree: stats(t)["target_forward_passes"] for tree, t in runs.items()}
    assert passes == {"dynamic": 17, "static": 25}
    assert runs["dynamic"].finish.token_ids == runs["static"].finish.token_ids
