"""The Long context tab without a browser, on the tiny random model (a byte tokenizer: a 1K document is 864 characters):
its methods and knobs come from the registry (a strategy registered in the long-context family appears with its
own knobs), every method runs through the tab's Generate and draws its four pictures with the checker's verdict,
the marks put the planted facts where the document builder put them, a replayed trace shows the same, and what the
model cannot read whole is refused with a sentence. The CLI lists the long-context methods and the API runs RAPID on
a long prompt."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import gradio as gr
import pytest

from decoding.events import Trace
from decoding.longctx.document import build_document, count_tokens
from decoding.params import Params, param
from decoding.registry import register_strategy, unregister_strategy
from ui import longctx_callbacks as cb
from ui.longctx import build_longctx
from ui.longctx_views import collect, field_rows, methods
from visualizers.longctx import kv_memory_figure

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
        totals = sum(sum(bar.y) for bar in final["compute"].data)  # the stacked bars add up to what it processed
        assert totals == trace.finish.extra["tokens_processed"] and final["compute"].data[-1].x[-1] == "the rest"
        # while it runs, its cache is not the book's: the memory panel says it is measured at the end (it drew the
        # whole book's positions until then)
        live = kv_memory_figure(Trace(trace.events[:-1]), marks)
        assert "measured when the run ends" in live.layout.annotations[0].text and not live.data
        assert final["memory"].data[0].text[0] == f"{trace.finish.extra['tokens_processed']} positions"
    if method.startswith("speculative"):
        assert "drafter reads" in rows and "target reads all" in rows
        assert {t.name for t in final["memory"].data} == {"target cache", "drafter's cache"}
        first = trace.of_kind("spec_round")[0].extra  # the record's rank order: the strip needs no re-ranking
        assert sorted(first["ranked"]) == first["retrieved"] and "ranked" not in marks
        hover = [h for t in final["strip"].data if t.y[0] == "drafter reads" for h in (t.hovertext or ())]
        assert f"chunk {first['ranked'][0]}:" in next(h for h in hover if "rank 1," in h)
    path = tmp_path / "run.json"  # the export replays into the same pictures and verdict
    trace.save(path)
    shown = cb.replay(str(path), None, None)
    assert shown["marks"]["question"] == marks["question"] and shown["method"] == method and shown["source"] == "own"
    assert shown["answer"] == final["answer"]
    assert [t.y[0] for t in shown["strip"].data] == rows


def test_the_live_token_count_of_a_speculative_run_is_the_count_it_finishes_with():
    """RAPID's rounds yield their tokens as token events too: counting both said twice what the run made."""
    lines, final = [], {}
    for update in cb.generate_run(MODEL, "1024", 0, "", "1", "", "", "speculative:rapid", 16, False,
                                  **knob_values() | {"speculative.rapid.chunk_tokens": 64}):
        lines.append(update.get("status", ""))
        final |= update
    counts = [int(m.group(1)) for line in lines for m in [re.search(r"(\d+) tokens so far", line)] if m]
    made = len(final["trace"].finish.token_ids) - len(final["trace"].start.prefix_ids)
    assert counts and max(counts) <= made and f"{made} tokens in" in final["status"]


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


def test_a_knob_whose_default_sits_below_a_hundredth_of_its_range_gets_a_slider_that_reaches_it():
    """A learning rate of 0.001 on (0, 1]: the slider's step (a hundredth, 0.01) would start it above its default,
    which Gradio refuses; `spec_widget` makes the step fine enough for any tab. ttt's own lr declares its step."""
    @dataclass(frozen=True)
    class LearnParams(Params):
        lr: float = param(0.001, low=0.0, high=1.0, low_inclusive=False, help="A learning rate.")

    @register_strategy("learn-test", params=LearnParams, family="longctx", help="a test's method", papers=None)
    def learn(ctx, params, outcome):  # never run
        yield from ()

    try:
        with gr.Blocks():
            c = build_longctx()
        knob = c["lc:learn-test.lr"]
        assert isinstance(knob, gr.Slider) and knob.value == 0.001 and 0 < knob.minimum <= 0.001 <= knob.maximum
        assert knob.step == 0.001
        assert isinstance(c["lc:rag.top_k"], gr.Slider)
        lr = c["lc:ttt.lr"]
        assert isinstance(lr, gr.Slider) and (lr.minimum, lr.value, lr.step, lr.maximum) == (1e-4, 0.001, 1e-4, 0.02)
        assert knob.preprocess(0.001) == 0.001 and lr.preprocess(0.001) == 0.001  # the page's value is accepted
    finally:
        unregister_strategy("learn-test")


def test_a_rapid_trace_recorded_before_its_rank_order_replays_with_ranks_from_bm25(tmp_path):
    """Older traces kept the retrieved chunks in document order only: the tab ranks them again with BM25."""
    final = run_tab("speculative:rapid", **{"speculative.rapid.chunk_tokens": 64})
    data = json.loads(final["trace"].to_json())
    first = next(e for e in data["events"] if e["kind"] == "spec_round")
    ranked = first["extra"].pop("ranked")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    shown = cb.replay(str(path), None, None)
    assert shown["marks"]["ranked"] == ranked
    hover = [h for t in shown["strip"].data if t.y[0] == "drafter reads" for h in (t.hovertext or ())]
    assert f"chunk {ranked[0]}:" in next(h for h in hover if "rank 1," in h)


def test_ttt_shows_its_training_steps_as_they_run_and_its_flops(tmp_path):
    """train: one point per gradient step (drawn from the train_step events, so a prefix of the run draws the steps
    so far); the compute picture is the finish record's FLOPs; a replay draws the same."""
    from decoding.events import Trace
    from visualizers.longctx import ttt_figure

    final = run_tab("ttt", **{"ttt.steps": 3, "ttt.span_tokens": 16})
    trace = final["trace"]
    steps = trace.of_kind("train_step")
    assert len(steps) == 3
    loss = next(t for t in final["training"].data if t.name == "loss on the step's span")
    assert list(loss.y) == [s.loss for s in steps] and list(loss.x) == [1, 2, 3]
    assert "3 steps, 48 tokens trained" in final["training"].layout.title.text.replace("<br>", " ")
    flops = trace.finish.extra["flops"]
    title = final["compute"].layout.title.text.replace("<br>", " ")
    assert "GFLOPs" in title and "3 steps, 48 tokens trained" in title
    assert [round(v * 1e9) for v in final["compute"].data[0].y] == [flops["prefill"], flops["train"],
                                                                      flops["after_context"]]
    first = trace.events.index(steps[0])  # live: the run up to its first step, not finished
    live = ttt_figure(Trace(trace.events[:first + 1]))
    assert "1 of 3 steps" in live.layout.title.text.replace("<br>", " ") and len(live.data[1].y) == 1
    path = tmp_path / "ttt.json"
    trace.save(path)
    shown = cb.replay(str(path), None, None)
    assert shown["method"] == "ttt" and list(shown["training"].data[1].y) == list(loss.y)
    assert cb.method_changed("ttt")["training"]["visible"] is True
    assert cb.method_changed("rag")["training"]["visible"] is False


def test_ttt_think_shows_its_thinking_tokens_and_the_flops_they_spent():
    final = run_tab("ttt", max_new_tokens=12, **{"ttt.mode": "think", "ttt.think_tokens": 5})
    extra = final["trace"].finish.extra
    think = next(t for t in final["training"].data if t.name == "thinking tokens")
    assert len(think.y) == extra["think_tokens"] == 5
    assert "Thinking: 5 tokens of 5 planned" in final["training"].layout.title.text.replace("<br>", " ")
    assert "5 thinking tokens" in final["compute"].layout.title.text.replace("<br>", " ") and final["compute"].data[0].y[1] == 0


@pytest.mark.parametrize("name", ["80-longctx-rag-top4-2k-book", "81-longctx-iterdrag", "82-longctx-rapid-4k-book",
                                  "83-longctx-ttt-train-1k", "84-longctx-ttt-think-1k"])
def test_each_preset_sets_the_shipped_book_it_names_and_the_methods_knobs(name, tok):
    """A preset names the book by size, seed and question: the tab's controls get those, and the prompt the tab then
    builds is the one the CLI builds (`document_prompt`)."""
    from decoding.presets import document_prompt, find_preset
    from decoding.models import load_model

    preset = find_preset("longctx", name)
    shown = cb.preset_chosen(name)
    doc = preset.document
    assert (shown["source"], shown["doc_seed"], shown["question"]) == (str(doc["size"]), doc["seed"],
                                                                         str(doc["question"]))
    assert shown["method"] in methods() and preset.title in shown["note"]
    assert shown["max_new_tokens"] == preset.max_new_tokens and shown["model"] == preset.model
    strategy, params = collect(shown["method"], {k.removeprefix("lc:"): v for k, v in shown.items()
                                                 if k.startswith("lc:")})
    assert strategy == preset.strategy and params.items() >= {k: v for k, v in preset.params.items()
                                                              if k != "drafter"}.items()
    loaded = load_model(MODEL, progress=None)  # the same book under the tiny model's tokenizer
    prepared = cb.prepare(loaded, shown["source"], shown["doc_seed"], "", shown["question"], "", "")
    assert prepared.prompt == document_prompt(preset, tok)
    assert cb.preset_choices()[0] == ("RAG top-4 on a 2K book: read four chunks, not the book",
                                      "80-longctx-rag-top4-2k-book")


def test_the_preset_menu_and_its_lesson_are_in_the_tab():
    with gr.Blocks():
        c = build_longctx()
    assert c["preset"].visible and len(c["preset"].choices) == 5
    assert "lesson_next" in c and "doc_seed" in c


def test_the_status_says_how_much_the_model_reads_before_its_first_token(tok):
    from types import SimpleNamespace

    loaded = SimpleNamespace(name=MODEL, tokenizer=tok)
    doc = build_document(tok, 1024, 0)
    prompt = doc.prompt(doc.questions[0])
    line = cb.reading_line(loaded, prompt, "greedy", "plain")
    assert f"reading all {count_tokens(tok, prompt):,} tokens" in line and "(plain)" in line
    assert "retrieving chunks" in cb.reading_line(loaded, prompt, "rag", "rag")


def test_an_uploaded_text_file_is_read_or_refused_naming_the_problem(tmp_path):
    from decoding.run import MAX_PROMPT_CHARS

    good = tmp_path / "book.txt"
    good.write_text("In the beginning… ünïcödé", encoding="utf-8")
    assert cb.read_upload(str(good)) == {"own_text": "In the beginning… ünïcödé"}
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(gr.Error, match="latin1.txt is not UTF-8 text"):
        cb.read_upload(str(latin))
    for name, text in (("long.txt", "a" * (MAX_PROMPT_CHARS + 1)), ("huge.txt", "é" * (3 * MAX_PROMPT_CHARS))):
        big = tmp_path / name  # the second one cut mid-character would not decode: still "too long", not "not UTF-8"
        big.write_text(text, encoding="utf-8")
        with pytest.raises(gr.Error, match=f"{name} has more than {MAX_PROMPT_CHARS:,} characters"):
            cb.read_upload(str(big))
    assert cb.read_upload(None) == {}
