"""The speculative loop's cache contract (`decoding.speculative.base.Feedback`), for every registered drafter.

After a round the target's cache keeps every accepted position, so it holds the context but its last token, and the
next verification feeds that one token: a drafter that reads the target's state (EAGLE's features, LongSpec's keys)
finds it ready. With an oracle draft (the drafter proposes as ever; what it proposes becomes the target's own greedy
continuation) every round is accepted whole, and the next round drafts again: no empty rounds, one target pass per
draft_length + 1 tokens. Before issue 45 the loop cropped the accepted tokens and fed them again, and LongSpec, which
needs the cache to hold all but the last token, drafted every other round: (4, 4), (0, 0), (4, 4), ...
"""

from __future__ import annotations

import math

import pytest

from decoding import run_to_trace
from decoding.speculative import strategy
from decoding.run import as_lm
from drafter_settings import TARGET_PROMPTS, Oracle, arrange, drafter_names, drafter_setting, target_name

PROMPT = "The cat sat on the mat. The dog sat on the log. The cat sat"
TOKENS, DEPTH = 24, 4
ORACLE_OWN = {  # a drafter whose own estimates decide not to draft (not the cache): its fixed setting
    "early-exit": {"exit_layer": 2},  # DEL declines where no exit layer pays (tiny-random's random layers)
}


@pytest.mark.parametrize("name", drafter_names())
def test_after_a_fully_accepted_round_the_next_round_drafts(monkeypatch, tmp_path, name):
    lm = as_lm(target_name(name))
    arrange(name, lm, tmp_path, monkeypatch)
    prompt_text = TARGET_PROMPTS.get(lm.name, PROMPT)
    plain = run_to_trace(lm, prompt_text, max_new_tokens=TOKENS, chat=False)
    text, prompt = plain.finish.token_ids, plain.start.prompt_ids
    make = strategy.make_drafter
    monkeypatch.setattr(strategy, "make_drafter", lambda lm, params: Oracle(make(lm, params), prompt, text))
    params = drafter_setting(name) | ORACLE_OWN.get(name, {}) | {"draft_length": DEPTH, "confidence": 0.0}
    trace = run_to_trace(lm, prompt_text, strategy="speculative", params=params, max_new_tokens=TOKENS, chat=False)
    assert trace.finish.token_ids == text
    rounds = trace.of_kind("spec_round")
    shape = [(len(r.nodes), len(r.accepted_path)) for r in rounds]
    whole = [i for i, r in enumerate(rounds[:-1]) if r.nodes and len(r.accepted_path) == len(r.nodes)]
    assert whole, f"{name}: no round was accepted whole: {shape}"
    empty = [i + 1 for i in whole if not rounds[i + 1].nodes]
    assert not empty, f"{name}: rounds {empty} drafted nothing after a fully accepted round: {shape}"
    if all(r.nodes for r in rounds[1:]):  # every round drafts (the first may have nothing to go on: a lookup)
        assert len(rounds) <= math.ceil(TOKENS / (DEPTH + 1)) + 1, shape  # DEPTH + 1 tokens a target pass
