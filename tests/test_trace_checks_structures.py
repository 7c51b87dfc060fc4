"""Every structure a trace carries is checked on load (issue 25): A*'s search tree in its steps' `extra`,
particle slots, the accepted path of a draft tree, diffusion blocks, and each `extra` key a view reads
(`decoding/extra_checks.py`). A refusal names the event (index and kind) and the field.

The traces are hand-made from the benchmark's worst-case builders (bench/bench_draw.py), then edited as
JSON the way a shared file could be.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from decoding.events import RunFinished, Trace
from decoding.extra_checks import KEYS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_draw as bd

LINK = "<a href='http://x'>Session expired</a>"
STYLE = "<span style='font-size:30px;color:red'>Session expired: click to sign in</span>"


def astar_dict(expansions: int = 3, n: int = 2) -> dict:
    steps, finish = bd.astar_steps(expansions, n)
    return Trace([bd.start("a-star"), *steps, RunFinished(text="", token_ids=[], stop_reason="eos", elapsed_s=1.0,
                                                          extra=finish)]).to_dict()


def load(data: dict) -> Trace:
    return Trace.from_json(json.dumps(data))


def refused(data: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load(data)


# ---------------------------------------------------------------- A*'s search tree


def test_a_valid_search_tree_loads():
    trace = load(astar_dict(4, 3))
    assert len(trace.of_kind("particles")) == 4


def test_a_node_that_is_its_own_parent_is_refused():
    """The issue's 2.7 KB trace: step 2 expands node 1 and makes node 1 again (its own parent)."""
    data = astar_dict()
    data["events"][2]["extra"]["nodes"][0]["id"] = data["events"][2]["extra"]["expanded"]["id"]
    refused(data, r"event 2 \('particles'\): `extra\.nodes\[0\]\.id` must be a new node id .* loop")


def test_a_node_made_twice_is_refused():
    data = astar_dict()
    data["events"][3]["extra"]["nodes"][1]["id"] = data["events"][1]["extra"]["nodes"][1]["id"]
    refused(data, r"event 3 \('particles'\): `extra\.nodes\[1\]\.id` must be a new node id")


def test_expanding_a_node_not_made_yet_is_refused():
    data = astar_dict()
    data["events"][2]["extra"]["expanded"]["id"] = 999
    refused(data, r"event 2 \('particles'\): `extra\.expanded\.id` must be 0 \(the prompt\) or a node made by an "
                  r"earlier A\* step .* got 999")


def test_a_cycle_through_two_steps_is_refused():
    """Step 1 expands node 2 before any step made it (2 -> 1 -> 0 would then loop back through 2)."""
    data = astar_dict()
    data["events"][1]["extra"]["expanded"]["id"] = 2
    refused(data, r"event 1 \('particles'\): `extra\.expanded\.id`")


@pytest.mark.parametrize("edit, match", [
    (lambda x: x.pop("nodes"), r"`extra\.nodes` must be present with `extra\.expanded`"),
    (lambda x: x["nodes"].pop(), r"`extra\.nodes` must be one node per particle \(2\), got 1 items"),
    (lambda x: x["nodes"][0].update(f=float("nan")), r"`extra\.nodes\[0\]\.f` must be a finite number"),
    (lambda x: x["nodes"][0].update(complete="yes"), r"`extra\.nodes\[0\]\.complete` must be true or false"),
    (lambda x: x["expanded"].update(id=-1), r"`extra\.expanded\.id` must be an integer >= 0"),
    (lambda x: x.update(frontier="<b>"), r"`extra\.frontier` must be an integer >= 0"),
])
def test_search_tree_fields_are_typed(edit, match):
    data = astar_dict()
    edit(data["events"][1]["extra"])
    refused(data, r"event 1 \('particles'\): " + match)


# ---------------------------------------------------------------- particles, draft trees, diffusion


def scaling_dict() -> dict:
    return Trace([bd.start("particle-filter"), *bd.scaling_steps(3, 4)]).to_dict()


def test_two_particles_in_one_slot_are_refused():
    data = scaling_dict()
    data["events"][2]["particles"][1]["id"] = 0
    refused(data, r"event 2 \('particles'\): `particles\[1\]\.id` must be a slot no other particle of the step has")


def spec_dict() -> dict:
    data = bd.spec_trace(3).to_dict()
    nodes = data["events"][1]["nodes"]
    nodes[1].update(parent=0, depth=2, status="accepted")  # a chain 0 -> 1, node 2 a sibling of 0
    data["events"][1]["accepted_path"] = [0, 1]
    return data


def test_the_accepted_path_must_run_down_one_branch():
    load(spec_dict())
    data = spec_dict()
    data["events"][1]["accepted_path"] = [0, 2]  # node 2 is a child of the context, not of node 0
    refused(data, r"event 1 \('spec_round'\): `accepted_path\[1\]` must be a child of node 0")
    data["events"][1]["accepted_path"] = [1]
    refused(data, r"`accepted_path\[0\]` must be a child of the context")


@pytest.mark.parametrize("value, match", [
    (0, r"`extra\.diffusion_block` must be an integer >= 1, got 0"),
    (LINK, r"`extra\.diffusion_block` must be an integer >= 1, got \"<a href="),
    (1e300, r"`extra\.diffusion_block` must be an integer >= 1"),
])
def test_deer_diffusion_block_is_a_positive_integer(value, match):
    data = spec_dict()
    data["events"][1]["extra"]["diffusion_block"] = value
    refused(data, r"event 1 \('spec_round'\): " + match)


def test_rasd_sources_are_one_per_node():
    data = spec_dict()
    data["events"][1]["extra"]["sources"] = ["model"]
    refused(data, r"`extra\.sources` must be one source per draft node \(3\), got 1 items")


@pytest.mark.parametrize("memory, match", [
    ({"budget": None, "node_budget": 4, "parts": {"target cache": -1}}, r"`extra\.memory\.parts\.target cache` must be a "
                                                                         r"whole number of bytes >= 0"),
    ({"budget": None, "node_budget": 4, "parts": {"draft q": LINK}}, r"`extra\.memory\.parts\.draft q` must be a whole"),
    ({"budget": -5, "node_budget": 4, "parts": {}}, r"`extra\.memory\.budget` must be"),
    ({"budget": None, "parts": {}}, r"`extra\.memory` must be an object with keys .*missing node_budget"),
])
def test_specmemo_memory_is_typed(memory, match):
    data = spec_dict()
    data["events"][1]["extra"]["memory"] = memory
    refused(data, match)


def diffusion_dict(length: int = 8) -> dict:
    return Trace([bd.start("diffusion"), *bd.diffusion_steps(length, 3)]).to_dict()


@pytest.mark.parametrize("edit, match", [
    (lambda e: e.update(block=8), r"`block` must be a block index .*in \[0, 7\], got 8"),
    (lambda e: e["extra"].update(block_length=4), r"`block` must be a block index \(2 blocks .*got 2"),
    (lambda e: e["extra"].update(block_length=9), r"`extra\.block_length` must be an integer in \[1, 8\]"),
    (lambda e: e["extra"].update(block_length=0), r"`extra\.block_length` must be an integer >= 1"),
    (lambda e: e["extra"].update(rejected=[3, 8]), r"`extra\.rejected\[1\]` must be a canvas position in \[0, 7\]"),
    (lambda e: e["extra"].update(predicted_final=[-1]), r"`extra\.predicted_final\[0\]` must be an integer >= 0"),
    (lambda e: e["extra"].update(filter_p=[2.0]), r"`extra\.filter_p\[0\]` must be a finite number in \[0, 1\]"),
    (lambda e: e["extra"].update(threshold=STYLE), r"`extra\.threshold` must be a finite number"),
])
def test_diffusion_blocks_and_positions_are_in_range(edit, match):
    data = diffusion_dict()
    edit(data["events"][3])  # step 2: block 2, position 2
    refused(data, r"event 3 \('diffusion_step'\): " + match)


# ---------------------------------------------------------------- the extras the views read


def token_dict(extra: dict, strategy: str = "momentum") -> dict:
    data = bd.momentum_trace(2).to_dict()
    data["events"][0]["strategy"] = strategy
    for e in data["events"][1:3]:
        e["extra"] = copy.deepcopy(extra)
    return data


EXTRACT = {"passage_tokens": ["a", "b", "c"], "max_span_tokens": 2, "logprobs": [[-1.0, None], [-2.0, -3.0]],
           "best": {"start": 0, "end": 1, "text": "ab", "logprob": -1.0},
           "greedy": {"text": "b", "span": [1, 1], "logprob": -2.0}, "num_spans": 3}


def test_real_shaped_extras_load():
    load(token_dict({"unit": 3, "unit_size": 2, "in_unit": 1, "span": 4, "mask_prob": 0.7,
                     "trained": {"val_loss": 3.4, "val_loss_tiny_ar": 3.39, "agree_tiny_ar": 0.8}}, "lud"))
    load(token_dict({"slot": 1, "slot_size": 3, "in_slot": 0, "micro_prob": None, "group": 4, "prompt_slots": 5}, "hamburger"))
    load(token_dict({"blocks": [1, 0, 1], "scores": [0.9, 0.2, 0.6], "threshold": 0.5, "num_blocks": 3,
                     "prompt_density": 0.8}, "ftp"))
    load(token_dict({"depth": 1, "alpha": 0.5, "candidates": [1, 2], "depths": [0, 1], "scores": [0.1, 0.2],
                     "chosen": 1, "previous_id": None}))
    load(token_dict({"extract": EXTRACT}, "exact-extract"))
    load(token_dict({"paused": True, "threshold": 1.5, "candidates": [4, 5], "candidate_texts": ["a", "b"],
                     "lookahead_texts": ["x", "y"], "scores": [0.1, 0.2], "chosen": 0, "rows": 2}, "adadec"))


@pytest.mark.parametrize("extra, match", [
    ({"alpha": LINK}, r"`extra\.alpha` must be a finite number, got \"<a href="),
    ({"depth": -1}, r"`extra\.depth` must be an integer >= 0"),
    ({"depth": "3"}, r"`extra\.depth` must be an integer >= 0"),
    ({"candidates": [1, 2], "chosen": 2}, r"`extra\.chosen` must be an index of `extra\.candidates` in \[0, 1\]"),
    ({"paused": True, "threshold": 1.0}, r"`extra\.candidate_texts` must be present on a pause"),
    ({"candidates": [1], "candidate_texts": ["a", "b"]}, r"`extra\.candidate_texts` must be a list as long as"),
    ({"drafts": [{"prob": 2.0, "text": "a"}]}, r"`extra\.drafts\[0\]\.prob` must be a finite number in \[0, 1\]"),
    ({"drafts": [{"prob": 0.5}]}, r"`extra\.drafts\[0\]` must be an object with keys prob, text \(missing text\)"),
    ({"extract": EXTRACT | {"num_spans": STYLE}}, r"`extra\.extract\.num_spans` must be an integer >= 0, got \"<span"),
    ({"extract": EXTRACT | {"best": EXTRACT["best"] | {"end": 3}}},
     r"`extra\.extract\.best\.end` must be a passage token index in \[0, 2\], got 3"),
    ({"extract": EXTRACT | {"greedy": {"text": "b", "span": [1, 5], "logprob": -1.0}}},
     r"`extra\.extract\.greedy\.span\[1\]` must be a passage token index"),
    ({"extract": EXTRACT | {"greedy": {"text": "b", "span": [1, 1], "logprob": None}}},
     r"`extra\.extract\.greedy\.logprob` must be a number when `span` is set"),
    ({"extract": EXTRACT | {"logprobs": [[0.0]] * 4}}, r"`extra\.extract\.logprobs` must be at most one row per"),
    ({"unit": 0, "unit_size": 2, "in_unit": 2}, r"`extra\.in_unit` must be a position in its group \(`extra\.unit_size`\)"),
    ({"slot": 0, "slot_size": 0, "in_slot": 0}, r"`extra\.slot_size` must be an integer >= 1"),
    ({"mask_prob": 1.5}, r"`extra\.mask_prob` must be"),
    ({"blocks": [1, 0, 2], "num_blocks": 3, "scores": [0.1, 0.2, 0.3]}, r"`extra\.blocks\[2\]` must be an integer in \[0, 1\]"),
    ({"blocks": [1, 0], "num_blocks": 3, "scores": [0.1, 0.2]}, r"`extra\.blocks` must be one decision and one score per "
                                                                 r"block"),
    ({"trained": {"val_loss": LINK}}, r"`extra\.trained\.val_loss` must be"),
])
def test_token_extras_are_typed_and_linked(extra, match):
    refused(token_dict(extra), r"event 1 \('token'\): " + match)


def finish_dict(extra: dict) -> dict:
    data = scaling_dict()
    data["events"].append(RunFinished(text="", token_ids=[], stop_reason="eos", elapsed_s=1.0, extra=extra).to_dict())
    return data


@pytest.mark.parametrize("extra, match", [
    ({"chosen": "0"}, r"`extra\.chosen` must be an integer >= 0"),
    ({"votes": {"42": LINK}}, r"`extra\.votes\.42` must be a number >= 0"),
    ({"votes": {"42": -1}}, r"`extra\.votes\.42` must be a number >= 0"),
    ({"particles": [{"id": 0, "text": 5}]}, r"`extra\.particles\[0\]\.text` must be text"),
    ({"canvas": [-2]}, r"`extra\.canvas\[0\]` must be an integer >= -1"),
])
def test_the_final_choice_is_typed(extra, match):
    refused(finish_dict(extra), r"event 4 \('finish'\): " + match)


def test_particle_extras_are_typed():
    data = scaling_dict()
    data["events"][2]["extra"]["speculation"] = {"accepted": [9], "drafts": {}}
    refused(data, r"event 2 \('particles'\): `extra\.speculation\.accepted\[0\]` must be a slot in \[0, 3\]")
    data["events"][2]["extra"]["speculation"] = {"accepted": [], "accepted_tokens": LINK}
    refused(data, r"`extra\.speculation\.accepted_tokens` must be an integer >= 0")
    data["events"][2]["extra"]["speculation"] = {"drafts": {"0": 5}}
    refused(data, r"`extra\.speculation\.drafts\.0` must be text")
    data["events"][2]["extra"]["speculation"] = {"router_p": {"0": "high"}}  # Arbitrage's router gate
    refused(data, r"`extra\.speculation\.router_p\.0` must be a number \(the router's probability\)")
    data["events"][2]["extra"] = {"ess_threshold": 2.0}
    refused(data, r"`extra\.ess_threshold` must be a finite number in \[0, 1\] or null")


def test_every_kind_with_declared_keys_is_an_event_kind():
    from decoding.events import EVENT_TYPES

    assert set(KEYS) <= set(EVENT_TYPES)
