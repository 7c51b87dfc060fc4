"""The Long context tab without a browser, on the tiny random model (a byte tokenizer: a 1K document is 864 characters):
its methods and knobs come from the registry (a strategy registered in the long-context family appears with its
own knobs), every method runs through the tab's Generate and draws its four pictures with the checker's verdict,
the marks put the planted facts where the document builder put them, a replayed trace shows the same, and what the
model cannot read whole is refused with a sentence. The CLI lists the long-context methods and the API runs RAPID on
a long prompt."""

from __future__ import annotations

import json
from dataclasses import dataclass

import gradio as gr
import pytest

from decoding.longctx.document import build_document
from decoding.params import Params, param
from decoding.registry import register_strategy, unregister_strategy
from ui import longctx_callbacks as cb
from ui.longctx import build_longctx
from ui.longctx_views import collect, field_rows, methods

MODEL = "tiny-random"
PICTURES = ("strip", "memory", "speed", "compute")


@pytest.fixture(scope="module")
def tok():
    from decoding.models import load_model

    return load_model(MODEL, progress=None).tokenizer


def knob_values() -> dict:
    return {name: row["default"] for name, (_, row) in field_rows().items()}


def run_tab(method: str, question: str = "1", max_new_tokens: int = 8, **changes) -> dict:
    """One Generate of the tab's callback on the shipped 1K book; the page's last state."""
    final: dict = {}
    for update in cb.generate_run(MODEL, "1024", 0, "", question, "", "", method, max_new_tokens, False,
                                  **knob_values() | changes):
        final |= update
    return final


def test_methods_and_their_knobs_come_from_the_registry():
    assert methods()[:2] == ["plain", "rag"] and "speculative:rapid" in methods()
    rows = field_rows()
    assert {"rag.mode", "rag.top_k", "rag.iterations", "speculative.tree", "speculative.rapid.top_k",
            "speculative.rapid.target"} <= set(rows)
    assert "speculative.drafter" not in rows and "speculative.eagle.head" not in rows  # only long-context drafters
    strategy, params = collect("speculative:rapid", {"speculative.rapid.top_k": 3.0, "speculative.tree": "chain"})
    assert strategy == "speculative" and params == {"drafter": "rapid", "rapid.top_k": 3, "tree": "chain"}
    assert collect("plain", knob_values()) == ("greedy", {})
    with pytest.raises(ValueError, match="`method` must be one of plain, rag"):
        collect("beam", {})


@dataclass(frozen=True)
class ReadTwiceParams(Params):
    passes: int = param(2, low=1, high=4, help="How often the context is read.")


def test_a_strategy_registered_in_the_long_context_family_appears_with_its_knobs():
    @register_strategy("read-twice-test", params=ReadTwiceParams, family="longctx", help="a test's method",
                       papers=None)
    def read_twice(ctx, params, outcome):  # never run
        yield from ()

    try:
        assert "read-twice-test" in methods()
        with gr.Blocks():
            c = build_longctx()
        widget = c["lc:read-twice-test.passes"]
        assert widget.value == 2 and widget.maximum == 4 and widget.visible is False
        assert cb.method_changed("read-twice-test")["lc:read-twice-test.passes"]["visible"] is True
        assert collect("read-twice-test", {"read-twice-test.passes": 3.0}) == ("read-twice-test", {"passes": 3})
    finally:
        unregister_strategy("read-twice-test")
    assert "read-twice-test" not in methods()


@pytest.mark.parametrize("size,seed", [(1024, 0), (2048, 1), (2048, 5)])
def test_the_question_and_its_reference_are_found_in_the_context_as_the_builder_made_them(tok, size, seed):
    doc = build_document(tok, size, seed)
    for q in doc.questions:
        asked = doc.prompt(q).rpartition("\n\n")[2]
        found = cb.recover_question(doc.text, asked)
        assert (found["kind"], found["answer"], found["evidence"]) == (q.kind, q.answer, q.evidence), q
    assert cb.recover_question(doc.text, "Who wrote this?") is None
    marks = cb.context_marks(tok, doc.text, None)
    assert [n["start"] for n in marks["needles"]] == [n.token_offset for n in doc.needles]
    assert marks["context_tokens"] == doc.num_tokens


@pytest.mark.parametrize("method", ["plain", "rag", "speculative:rapid"])
def test_each_method_answers_with_a_verdict_and_draws_every_picture(method, tmp_path):
    final = run_tab(method, **({"speculative.rapid.chunk_tokens": 64} if "rapid" in method else {}))
    trace, marks = final["trace"], final["marks"]
    assert trace.finish is not None and trace.start.strategy == {"plain": "greedy"}.get(method, method.split(":")[0])
    assert marks["question"]["kind"] == "needle" and marks["evidence"] is not None
    assert marks["kv_bytes_per_position"] > 0 and "Finished" in final["status"]
    assert ("✗ wrong" in final["answer"] or "✓ right" in final["answer"]) and "reference:" in final["answer"]
    for picture in PICTURES:
        assert len(final[picture].data) > 0, picture
    rows = [t.y[0] for t in final["strip"].data]
    assert "facts & answer" in rows
    if method == "rag":
        assert "question's retrieval" in rows
        assert "effective context" in final["compute"].layout.title.text
    if method.startswith("speculative"):
        assert "drafter reads" in rows and "target reads all" in rows
        assert {t.name for t in final["memory"].data} == {"target cache", "drafter's cache"}
        assert sorted(marks["ranked"]) == sorted(trace.of_kind("spec_round")[0].extra["retrieved"])
    path = tmp_path / "run.json"  # the export replays into the same pictures and verdict
    trace.save(path)
    shown = cb.replay(str(path), None, None)
    assert shown["marks"]["question"] == marks["question"] and shown["method"] == method and shown["source"] == "own"
    assert shown["answer"] == final["answer"]
    assert [t.y[0] for t in shown["strip"].data] == rows


def test_your_own_text_with_a_typed_question_and_expected_answer(tok):
    from decoding.models import load_model

    loaded = load_model(MODEL, progress=None)
    text = "The river was cold.\nThe key to the shed is under the blue stone.\nNobody came that day."
    prepared = cb.prepare(loaded, "own", 0, text, "own", "Where is the key to the shed?", "under the blue stone")
    assert prepared.prompt == text + "\n\nWhere is the key to the shed?"
    assert prepared.marks["question"]["answer"] == "under the blue stone" and prepared.marks["needles"] == []
    from ui.longctx_views import verdict

    assert verdict(prepared.marks, "It is under the blue stone.") is True
    assert verdict(prepared.marks, "Under the red stone.") is False
    with pytest.raises(ValueError, match="type a question about your text"):
        cb.prepare(loaded, "own", 0, text, "own", "", "")
    with pytest.raises(ValueError, match="your text is 40,001 characters; the most is 40,000"):
        cb.check_inputs(MODEL, "own", 0, "x" * 40_001)


def test_a_text_too_long_for_the_window_is_refused_for_methods_that_read_it_all():
    from decoding.models import load_model

    loaded = load_model(MODEL, progress=None)  # bytes: 4,096 positions
    prompt = "word " * 900 + "\n\nWhat is it?"
    with pytest.raises(ValueError, match="do not fit tiny-random's window of 4,096 positions.*choose rag"):
        cb.check_window(loaded, prompt, "greedy", 16, True)
    cb.check_window(loaded, prompt, "rag", 16, True)  # rag reads only what it retrieves
    with pytest.raises(gr.Error, match="do not fit"):
        for _ in cb.generate_run(MODEL, "own", 0, prompt.rpartition("\n\n")[0], "own", "What is it?", "", "plain", 16,
                                 True, **knob_values()):
            pass


def test_the_cli_lists_the_long_context_methods_and_the_api_runs_rapid_on_a_long_prompt(tok, capsys):
    from decoding.__main__ import main
    from ui.api import api_generate

    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "\n  rag " in listed and "\n  rapid " in listed
    doc = build_document(tok, 2048, 0)
    params = json.dumps({"drafter": "rapid", "rapid.chunk_tokens": 64, "rapid.top_k": 2})
    outputs = list(api_generate(MODEL, "speculative", doc.prompt(doc.questions[0]), 6, 0, params, False))
    assert outputs[0]["kind"] == "start" and len(outputs[0]["prompt_ids"]) > 1800
    rounds = [o for o in outputs if o.get("kind") == "spec_round"]
    assert rounds and len(rounds[0]["extra"]["retrieved"]) == 2 and outputs[-1]["strategy"] == "speculative"


def test_the_wired_generate_gets_every_value_by_name():
    """What Gradio does on Generate, without a model: the widgets' values in the wired order reach `generate_run` by
    name (every knob included); an unknown model is then the only complaint."""
    import asyncio
    import inspect

    with gr.Blocks() as blocks:
        c = build_longctx()
    (run,) = [f for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "generate_run"]
    values = ["no-such-model" if component is c["model"] else component.value for component in run.inputs]
    assert inspect.isasyncgenfunction(run.fn)  # `model_event`: Stop reaches the worker at once

    async def first(updates):
        return await anext(updates)

    with pytest.raises(gr.Error, match="unknown model 'no-such-model'"):
        asyncio.run(first(run.fn(*values)))


def test_the_document_line_previews_the_question_and_the_source_switch_shows_the_text_box():
    shown = cb.preview(MODEL, "1024", 0, "3", "", "", "")["document"]
    assert "**Question** (continue)" in shown and "Planted facts" in shown and "Reference:" in shown
    assert "Paste your text" in cb.preview(MODEL, "own", 0, "own", "", "", "")["document"]
    assert "⚠" in cb.preview(MODEL, "1024", -1, "0", "", "", "")["document"]  # a bad seed, said in the line
    own = cb.source_changed("own", "2")
    assert own["own_text"]["visible"] and own["question"]["value"] == "own" and own["own_question"]["visible"]
    book = cb.source_changed("2048", "2")
    assert not book["own_text"]["visible"] and book["question"]["value"] == "2" and not book["reference"]["visible"]


def test_a_replay_naming_a_model_outside_the_registry_loads_nothing(tmp_path, monkeypatch):
    final = run_tab("rag", max_new_tokens=2)
    data = json.loads(final["trace"].to_json())
    data["events"][0]["model"] = "openai:http://127.0.0.1:9/v1#m"
    path = tmp_path / "remote.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(cb, "load_model", lambda *a, **k: pytest.fail("a replay loaded a model"))
    shown = cb.replay(str(path), None, None)
    assert shown["marks"] is None and "Replaying" in shown["status"]
    assert len(shown["strip"].data) > 0  # the strip from the trace alone: rag's chunks, without the facts


def test_a_knob_whose_default_sits_below_the_sliders_first_step_gets_a_number_box():
    @dataclass(frozen=True)
    class LearnParams(Params):
        lr: float = param(0.001, low=0.0, high=1.0, low_inclusive=False, help="A learning rate.")

    @register_strategy("learn-test", params=LearnParams, family="longctx", help="a test's method", papers=None)
    def learn(ctx, params, outcome):  # never run
        yield from ()

    try:
        with gr.Blocks():
            c = build_longctx()
        assert isinstance(c["lc:learn-test.lr"], gr.Number) and c["lc:learn-test.lr"].value == 0.001
        assert isinstance(c["lc:rag.top_k"], gr.Slider)
    finally:
        unregister_strategy("learn-test")
