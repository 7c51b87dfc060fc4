"""Strategy rag: the model reads the retrieved chunks and the question (checked on its own input), DRAG's answer is
greedy decoding of that prompt, IterDRAG alternates follow-ups and intermediate answers with a retrieval each, and
the compute is recorded from what ran."""

from __future__ import annotations

import json

import pytest
import torch

from decoding import run_to_trace
from decoding.events import stats
from decoding.longctx import rag as R
from decoding.longctx.document import SEPARATOR, build_document
from decoding.longctx.retriever import BM25, make_chunks


@pytest.fixture(scope="module")
def doc(tiny_lm):
    return build_document(tiny_lm.tokenizer, 1024, seed=0)  # bytes: 864 characters of text, 3 facts


class Inputs:
    """Records the ids of every model call."""

    def __init__(self, lm):
        self.calls: list[list[int]] = []
        self.handle = lm.model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        self.calls.append(kwargs["input_ids"][0].tolist())

    def close(self):
        self.handle.remove()


def test_split_prompt_takes_the_last_paragraph_as_the_question():
    assert R.split_prompt("a\nb\n\nc\n\nWhat? Say.") == ("a\nb\n\nc", "What? Say.")
    assert R.split_prompt("no context here") == ("", "no context here")
    assert R.split_prompt("\n\nonly a question") == ("", "only a question")


def test_drag_feeds_the_top_k_chunks_and_the_question_and_answers_greedily(tiny_lm, doc):
    q = doc.questions[0]
    inputs = Inputs(tiny_lm)
    try:
        trace = run_to_trace(tiny_lm, doc.prompt(q), strategy="rag", params={"top_k": 2, "chunk_tokens": 64},
                             max_new_tokens=12, chat=False)
    finally:
        inputs.close()
    context, question = R.split_prompt(doc.prompt(q))
    ids = tiny_lm.tokenizer(context, add_special_tokens=False)["input_ids"]
    chunks = make_chunks(tiny_lm.tokenizer, ids, 64)
    best = [h.index for h in BM25([c.text for c in chunks]).rank(question, 2)]
    docs = "".join(chunks[i].text for i in sorted(best)).strip()
    expected = f"Documents:\n{docs}{SEPARATOR}{question}\nAnswer:"
    assert inputs.calls[0] == tiny_lm.encode_prompt(expected, chat=False)[0]  # what the model read first
    extra = trace.finish.extra
    assert extra["retrievals"] == [{"iteration": 0, "query": question, "chunks": best,
                                    "scores": extra["retrievals"][0]["scores"]}]
    assert extra["chunks"] == [[c.start, c.end] for c in chunks] and extra["context_tokens"] == len(ids)
    # the answer is greedy decoding of that prompt, up to the end of its first line
    plain = run_to_trace(tiny_lm, expected, strategy="greedy", max_new_tokens=12, chat=False)
    got = trace.finish.token_ids
    assert got == plain.finish.token_ids[:len(got)]
    assert [e.token_id for e in trace.of_kind("token")] == got
    assert all(e.extra == {"part": "answer", "iteration": 0} for e in trace.of_kind("token"))
    assert extra["answer"] == tiny_lm.decode(got).strip()
    assert extra["effective_context_tokens"] == extra["prompt_tokens"] == len(inputs.calls[0])
    assert extra["tokens_processed"] == sum(len(c) for c in inputs.calls)
    assert stats(trace)["forward_passes"] == len(inputs.calls)


def test_iterdrag_alternates_follow_ups_and_intermediate_answers_each_with_a_retrieval(tiny_lm, doc):
    q = doc.questions[1]
    params = {"mode": "iterdrag", "iterations": 2, "step_tokens": 5, "top_k": 1, "chunk_tokens": 64}
    inputs = Inputs(tiny_lm)
    try:
        trace = run_to_trace(tiny_lm, doc.prompt(q), strategy="rag", params=params, max_new_tokens=40,
                             chat=False, seed=1)
    finally:
        inputs.close()
    tokens = trace.of_kind("token")
    parts = [(e.extra["part"], e.extra["iteration"]) for e in tokens]
    order = list(dict.fromkeys(parts))
    assert order[:4] == [("query", 1), ("intermediate", 1), ("query", 2), ("intermediate", 2)]
    assert order[4:] in ([], [("answer", 0)])
    assert all(sum(1 for p in parts if p == key) <= 5 for key in order[:4])  # step_tokens
    stop_ids = tiny_lm.stop_ids
    assert not any(e.token_id in stop_ids for e in tokens if e.extra["part"] != "answer")
    retrievals = trace.finish.extra["retrievals"]
    assert [r["iteration"] for r in retrievals] == [0, 1, 2]
    follow_up = [e.token_id for e in tokens if e.extra["part"] == "query" and e.extra["iteration"] == 1]
    assert retrievals[1]["query"] == (tiny_lm.decode(follow_up).strip() or R.split_prompt(doc.prompt(q))[1])
    # the labels and the chunks retrieved for a follow-up are fed, never generated
    chunk_text = trace.finish.extra["retrievals"][1]["chunks"]
    assert len(chunk_text) == 1
    fed = [t for call in inputs.calls for t in call]
    label = tiny_lm.tokenizer(R.INTERMEDIATE, add_special_tokens=False)["input_ids"]
    assert any(fed[i:i + len(label)] == label for i in range(len(fed)))
    assert [e.token_id for e in tokens] == trace.finish.token_ids
    extra = trace.finish.extra
    assert extra["effective_context_tokens"] > extra["tokens_processed"] == sum(len(c) for c in inputs.calls)


def test_demonstrations_come_first_and_are_the_same_for_the_same_seed(tiny_lm, doc):
    q = doc.questions[0]
    runs = []
    for seed in (3, 3, 4):
        inputs = Inputs(tiny_lm)
        try:
            run_to_trace(tiny_lm, doc.prompt(q), strategy="rag", params={"demonstrations": 2, "chunk_tokens": 64},
                         max_new_tokens=2, chat=False, seed=seed)
        finally:
            inputs.close()
        runs.append(tiny_lm.decode(inputs.calls[0]))
    assert runs[0] == runs[1] != runs[2]
    blocks = runs[0].split("Documents:\n")
    assert len(blocks) == 4 and blocks[1].count("\nAnswer: ") == 1 and blocks[2].count("\nAnswer: ") == 1
    assert "Tavor" not in blocks[1] + blocks[2] and "secret number of" in blocks[1]  # demonstrations' own names


def test_a_prompt_without_a_context_is_all_question(tiny_lm):
    trace = run_to_trace(tiny_lm, "The quick brown fox", strategy="rag", max_new_tokens=4, chat=False)
    assert trace.finish.extra["chunks"] == [] and trace.finish.extra["retrievals"][0]["chunks"] == []


def test_a_window_too_small_for_iterdrag_is_refused_with_the_numbers(tiny_lm, doc):
    with pytest.raises(ValueError, match=r"exceed tiny-random's context of 4096 positions; lower `top_k`"):
        run_to_trace(tiny_lm, doc.prompt(doc.questions[0]), strategy="rag",
                     params={"mode": "iterdrag", "iterations": 8, "top_k": 8, "chunk_tokens": 128}, max_new_tokens=8)


@pytest.mark.slow
def test_drag_answers_the_planted_facts_on_smollm2(smol_lm):
    """SmolLM2-135M answers each needle of a 2K document from its top-4 chunks (all three, measured; the whole
    document read greedily answers two of them, docs/longctx.md)."""
    torch.manual_seed(0)
    doc = build_document(smol_lm.tokenizer, 2048, seed=0)
    for q in doc.questions[:3]:
        trace = run_to_trace(smol_lm, doc.prompt(q), strategy="rag", max_new_tokens=24)
        assert q.check(trace.finish.extra["answer"]), (q.question, trace.finish.extra["answer"])


def test_the_cli_reads_a_long_prompt_from_a_file_and_prints_the_answer(tiny_lm, doc, tmp_path, capsys):
    from decoding.__main__ import main

    path = tmp_path / "book.txt"
    path.write_text(doc.prompt(doc.questions[0]), encoding="utf-8")
    argv = ["run", "--model", "tiny-random", "--strategy", "rag", "--prompt-file", str(path), "--no-chat", "--quiet",
            "--set", "mode=iterdrag", "--set", "iterations=1", "--set", "top_k=2", "--set", "step_tokens=4",
            "--max-new-tokens", "20", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["strategy"] == "rag" and out["params"]["mode"] == "iterdrag" and out["prompt"] == path.read_text()
    assert [r["iteration"] for r in out["retrievals"]] == [0, 1] and len(out["retrievals"][0]["chunks"]) == 2
    assert out["effective_context_tokens"] > 0 and "answer" in out
    assert main(["run", "--prompt", "x", "--prompt-file", str(path)]) == 2
    assert "give --prompt or --prompt-file, not both" in capsys.readouterr().err


def test_the_api_runs_rag_and_returns_the_retrievals(doc):
    from ui.api import api_generate

    outputs = list(api_generate("tiny-random", "rag", doc.prompt(doc.questions[2]), 6, 0, '{"top_k": 3}', False))
    assert outputs[0]["kind"] == "start" and outputs[-2]["kind"] == "finish"
    summary = outputs[-1]
    assert summary["strategy"] == "rag" and len(summary["retrievals"][0]["chunks"]) == 3
    assert summary["text"] == outputs[-2]["text"]
