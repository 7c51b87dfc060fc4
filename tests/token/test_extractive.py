"""exact-extract (Castel, Ram, Efrat and Levy, AKBC 2022, arXiv 2108.05857): the chosen span is the most
probable span by brute force, the prompt must carry a passage and a question, and a real run on smollm2-135m
answers from the passage."""

import math

import pytest
import torch

from decoding import run_to_trace
from decoding.token.extractive import end_token_ids, passage_of
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


def test_best_span_is_the_most_probable_span_by_brute_force(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="exact-extract", params={"max_span_tokens": 6, "batch_rows": 5},
                         max_new_tokens=8, chat=False)
    record = extract_record(trace)
    passage_ids = tiny_lm.tokenizer(" " + passage_of(PROMPT), add_special_tokens=False).input_ids
    end_ids = end_token_ids(tiny_lm)
    brute = {}
    for start in range(len(passage_ids)):
        for end in range(start, min(start + 6, len(passage_ids))):
            span = passage_ids[start:end + 1]
            if tiny_lm.decode(span).strip():
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
