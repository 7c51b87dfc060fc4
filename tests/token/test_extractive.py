"""exact-extract (Castel, Ram, Efrat and Levy, AKBC 2022, arXiv 2108.05857): the chosen span is the most
probable span by brute force, the prompt must carry a passage and a question, and a real run on smollm2-135m
answers from the passage."""

import math
import re

import pytest
import torch

from decoding import run_to_trace
from decoding.token.extractive import end_token_ids, passage_of, whole_word_spans
from visualizers.extract import extract_record, span_heatmap_figure
from visualizers.beams import beams_figure

PROMPT = "Context: Ada met Bob at the old mill by the river. Question: Where did Ada meet Bob? Answer:"


def brute_force_logprob(lm, prompt_ids, span_ids, end_ids) -> float:
    """log P(span then end) from one full forward of prompt + span, no cache, no batching."""
    ids = torch.tensor([prompt_ids + span_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(lm.model(input_ids=ids).logits[0].float(), -1)  # (T, V)
    p = len(prompt_ids)
    total = sum(logprobs[p - 1 + k, t].item() for k, t in enumerate(span_ids))
    return total + torch.logsumexp(logprobs[p - 1 + len(span_ids), end_ids], 0).item()


def cuts_a_word(text: str, at: int) -> bool:
    """The reference rule, written apart from the strategy's: position `at` falls between two word characters."""
    return re.fullmatch(r"[^\W_]{2}", text[max(at - 1, 0):at + 1]) is not None and 0 < at < len(text)


def is_whole_words(lm, passage_ids, start, end) -> bool:
    """Span [start, end] of the passage's tokens, judged on its characters in " " + passage."""
    full = lm.decode(passage_ids)
    s, e = len(lm.decode(passage_ids[:start])), len(lm.decode(passage_ids[:end + 1]))
    text = full[s:e]
    s, e = s + len(text) - len(text.lstrip()), e - (len(text) - len(text.rstrip()))
    return bool(re.search(r"[^\W_]", text)) and not cuts_a_word(full, s) and not cuts_a_word(full, e)


@pytest.mark.parametrize("whole_words", [True, False])
def test_best_span_is_the_most_probable_span_by_brute_force(tiny_lm, whole_words):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="exact-extract",
                         params={"max_span_tokens": 6, "batch_rows": 5, "whole_words": whole_words},
                         max_new_tokens=8, chat=False)
    record = extract_record(trace)
    passage_ids = tiny_lm.tokenizer(" " + passage_of(PROMPT), add_special_tokens=False).input_ids
    end_ids = end_token_ids(tiny_lm)
    brute = {}
    for start in range(len(passage_ids)):
        for end in range(start, min(start + 6, len(passage_ids))):
            span = passage_ids[start:end + 1]
            keep = is_whole_words(tiny_lm, passage_ids, start, end) if whole_words else tiny_lm.decode(span).strip()
            if keep:
                brute[(start, end)] = brute_force_logprob(tiny_lm, trace.start.prompt_ids, span, end_ids)
    assert record["num_spans"] == len(brute)
    for (start, end), value in brute.items():  # every recorded cell is the exact value
        assert record["logprobs"][start][end - start] == pytest.approx(value, abs=2e-3)
    best = (record["best"]["start"], record["best"]["end"])
    assert brute[best] >= max(brute.values()) - 1e-4  # the best by brute force (ties: equal letters of a random model)
    assert record["best"]["logprob"] == pytest.approx(max(brute.values()), abs=1e-4)
    assert trace.finish.token_ids == passage_ids[best[0]:best[1] + 1]
    # the picture reads the same record: the star sits on the best cell
    fig = span_heatmap_figure(trace)
    star = next(t for t in fig.data if t.name == "exact best span")
    assert (star.y[0], star.x[0]) == best and not math.isnan(fig.data[0].z[best[0]][best[1]])


def test_a_span_inside_a_word_is_never_a_candidate(tiny_lm):
    """A byte tokenizer makes every letter a token: with whole_words no recorded span cuts a word or is only
    punctuation (off, as the paper's code, such spans are scored: the check can fail)."""
    prompt = "Context: Gull Point light, built in 1871 by Marta Vell. Question: Who built it? Answer:"
    passage_ids = tiny_lm.tokenizer(" " + passage_of(prompt), add_special_tokens=False).input_ids

    def scored(whole_words):
        record = extract_record(run_to_trace(tiny_lm, prompt, strategy="exact-extract", chat=False, max_new_tokens=4,
                                             params={"max_span_tokens": 12, "whole_words": whole_words}))
        return {(i, i + k) for i, row in enumerate(record["logprobs"]) for k, v in enumerate(row) if v is not None}

    words, tokens = scored(True), scored(False)
    texts = {tiny_lm.decode(passage_ids[s:e + 1]) for s, e in words}
    assert all(is_whole_words(tiny_lm, passage_ids, s, e) for s, e in words)
    assert {" 1871", "1871", " Gull Point", "Vell.", " Marta Vell"} <= texts
    assert not {"1", " 1", "187", "Gul", "ull", ".", ",", " Mart"} & texts
    cut = {tiny_lm.decode(passage_ids[s:e + 1]) for s, e in tokens - words}
    assert {"1", " 1", "Gul", ".", ","} <= cut and words < tokens


def test_whole_word_spans_on_a_tokenizer_that_splits_digits():
    # SmolLM2's tokens of " built in 1871 by Marta Vell." with their character offsets
    text = " built in 1871 by Marta Vell."
    pieces = [" built", " in", " ", "1", "8", "7", "1", " by", " Mart", "a", " V", "ell", "."]
    offsets, at = [], 0
    for piece in pieces:
        offsets.append((at, at + len(piece)))
        at += len(piece)
    keep = whole_word_spans(text, offsets, 6)
    kept = {"".join(pieces[i:i + k + 1]) for i in range(len(pieces)) for k in range(6) if keep[i, k]}
    assert {" 1871", "1871", " Marta", " Marta Vell", " Marta Vell.", " by", "1871 by"} <= kept
    assert not {"1", " 1", "18", "871", " Mart", "a", " V", "ell", ".", " ", "a Vell"} & kept
    assert not keep[len(pieces) - 1:, :].any()  # "." alone is no answer; past the end nothing is


def test_the_papers_text_mark_also_marks_the_passage():
    assert passage_of("Text: Ada sat by the mill.\nQuestion: Who sat?\nAnswer:") == "Ada sat by the mill."
    assert passage_of("Context: The Text: of it.\nQuestion: What?\nAnswer:") == "The Text: of it."


def test_a_prompt_without_context_and_question_is_a_clear_error(tiny_lm):
    with pytest.raises(ValueError, match="Context:.*Question:.*no Context: and Question:"):
        run_to_trace(tiny_lm, "Where is Paris?", strategy="exact-extract", max_new_tokens=4)
    with pytest.raises(ValueError, match="no Question:"):
        run_to_trace(tiny_lm, "Context: Paris is in France.", strategy="exact-extract", max_new_tokens=4)


def test_beam_tree_at_40_steps_labels_only_the_best_path(tiny_lm):
    trace = run_to_trace(tiny_lm, "Once upon", strategy="beam", params={"num_beams": 4}, max_new_tokens=40)
    steps = trace.of_kind("beams")
    nodes = next(t for t in beams_figure(trace).data if t.name == "live beam")
    labelled = [t for t in nodes.text if t]
    assert len(steps) >= 30 and len(nodes.x) >= 4 * len(steps) - 8
    assert len(labelled) <= len(steps)  # one label per step at most (was one per node)
    hovers = [c[3] for c in nodes.customdata]
    tokens = [b["token_text"] for e in steps for b in e.beams]
    assert len(hovers) == len(tokens) and all(h for h in hovers)


@pytest.mark.slow
def test_smollm2_answer_is_a_span_with_its_exact_probability(smol_lm):
    prompt = ("Context: The Amazon River flows through Brazil, Peru and Colombia and empties into the Atlantic Ocean. "
              "Question: Into which ocean does the Amazon River empty? Answer:")
    trace = run_to_trace(smol_lm, prompt, strategy="exact-extract", max_new_tokens=16, chat=True)
    record = extract_record(trace)
    best = record["best"]
    # what preset 10 says: the best span is the Atlantic clause; greedy writes a sentence that is no span
    assert "into the Atlantic Ocean" in best["text"] and record["greedy"]["span"] is None
    assert best["text"] in prompt and trace.finish.text == best["text"]
    assert best["logprob"] == max(t["logprob"] for t in record["top"])
    assert record["num_spans"] > 100  # every span of the passage up to 12 tokens, not a sample
    # the recorded value is the exact one: one uncached forward of prompt + span + end
    passage_ids = smol_lm.tokenizer(" " + passage_of(prompt), add_special_tokens=False).input_ids
    span = passage_ids[best["start"]:best["end"] + 1]
    value = brute_force_logprob(smol_lm, trace.start.prompt_ids, span, end_token_ids(smol_lm))
    assert best["logprob"] == pytest.approx(value, abs=0.05)


def test_shipped_qa_items_answer_with_a_span_of_their_context():
    import json
    from pathlib import Path

    items = json.loads((Path(__file__).resolve().parents[2] / "presets" / "tasks" / "extractive-qa.json").read_text())["items"]
    assert len(items) >= 5
    for item in items:
        assert item["answer"] in item["context"]
        assert passage_of(f"Context: {item['context']} Question: {item['question']} Answer:") == item["context"]
