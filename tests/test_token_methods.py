"""Momentum decoding and AdaDec: their defining properties on a tiny model and on hand-made token lists."""

import pytest

from decoding import run_to_trace
from decoding.adadec import NEVER
from decoding.momentum import NgramIndex, resistance

PROMPT = "Once upon a time there was a small town by the sea"


def tokens(trace) -> list[int]:
    return [e.token_id for e in trace.of_kind("token")]


def repeated_ngrams(ids: list[int], n: int = 4) -> int:
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) - len(set(grams))


def test_the_ngram_index_finds_the_longest_repeat():
    index = NgramIndex([1, 2, 3, 4, 1, 2], max_n=5)
    assert index.repeat_length(9) == 0  # never seen
    assert index.repeat_length(4) == 1  # seen, but "2 4" is new
    assert index.repeat_length(3) == 3  # "1 2 3" occurred
    index.add(3)
    assert index.repeat_length(4) == 4  # "1 2 3 4"
    assert [resistance(n) for n in range(7)] == [0.0, 1.0, 3.0, 4.0, 5.0, 6.0, 6.0]


def test_momentum_with_weight_zero_is_greedy(tiny_lm):
    greedy = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=30)
    momentum = run_to_trace(tiny_lm, PROMPT, strategy="momentum", params={"weight": 0.0}, max_new_tokens=30)
    assert tokens(momentum) == tokens(greedy)
    assert all(e.extra["greedy"] for e in momentum.of_kind("token"))


def test_momentum_resists_the_loops_greedy_falls_into(tiny_lm):
    greedy = tokens(run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=60))
    steps = run_to_trace(tiny_lm, PROMPT, strategy="momentum", params={"weight": 1.0}, max_new_tokens=60).of_kind("token")
    assert repeated_ngrams(greedy) > 0  # the random model loops under greedy
    assert repeated_ngrams([e.token_id for e in steps]) < repeated_ngrams(greedy)
    for e in steps:  # the chosen candidate has the best score: probability minus the resistance
        assert e.extra["scores"][e.extra["chosen"]] == max(e.extra["scores"])
        assert e.token_id == e.extra["candidates"][e.extra["chosen"]]


def test_adadec_that_never_pauses_is_greedy(tiny_lm):
    greedy = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=30)
    ada = run_to_trace(tiny_lm, PROMPT, strategy="adadec", params={"threshold": NEVER}, max_new_tokens=30)
    assert tokens(ada) == tokens(greedy) and not any(e.extra["paused"] for e in ada.of_kind("token"))


def test_adadec_pauses_rerank_by_lookahead_and_count_every_call(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="adadec",
                         params={"threshold": 0.0, "top_k": 3, "lookahead": 4}, max_new_tokens=12)
    steps = trace.of_kind("token")
    assert len(steps) == 12 and all(e.extra["paused"] for e in steps)
    assert sum(e.forward_passes for e in steps) == 1 + 12 * 4  # the prompt, then 4 lookahead calls per pause
    for e in steps:
        assert e.extra["scores"][e.extra["chosen"]] == max(e.extra["scores"])
        assert len(e.extra["lookahead_texts"]) == 3 and e.token_id == e.extra["candidates"][e.extra["chosen"]]
    # without the lookahead's weight the score is the candidate's own log-probability: greedy again
    plain = run_to_trace(tiny_lm, PROMPT, strategy="adadec",
                         params={"threshold": 0.0, "lookahead_weight": 0.0}, max_new_tokens=12)
    assert tokens(plain) == tokens(run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=12))


def test_adadec_continues_from_the_chosen_candidate_exactly(tiny_lm):
    """After a pause the cache holds the context and the chosen candidate only: the next distribution
    equals a fresh forward over the text so far."""
    import torch

    trace = run_to_trace(tiny_lm, PROMPT, strategy="adadec", params={"threshold": 0.0, "lookahead": 3},
                         max_new_tokens=6)
    ids = tiny_lm.encode_prompt(PROMPT)[0]
    for e in trace.of_kind("token"):
        fresh = tiny_lm.forward(torch.tensor([ids]), last_only=True).logits[0, -1]
        top = torch.softmax(fresh, -1).topk(3).indices.tolist()
        assert e.extra["candidates"] == top
        ids.append(e.token_id)


def test_one_superposed_draft_is_greedy(tiny_lm):
    greedy = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=20)
    one = run_to_trace(tiny_lm, PROMPT, strategy="superposed", params={"drafts": 1}, max_new_tokens=20)
    assert one.finish.token_ids == greedy.finish.token_ids


def test_superposed_drafts_cost_one_pass_per_step(tiny_lm):
    before = tiny_lm.forward_passes
    trace = run_to_trace(tiny_lm, PROMPT, strategy="superposed", params={"drafts": 3, "ngram_weight": 0.3},
                         max_new_tokens=16)
    steps = trace.of_kind("beams")
    assert tiny_lm.forward_passes - before == len(steps)  # the prompt once, then one pass per further step
    assert all(len(s.beams) == 3 for s in steps[1:])
    last = steps[-1].beams
    assert len({tuple(b["token_ids"]) for b in last}) == 3  # three different drafts
    assert last == sorted(last, key=lambda b: -b["score"])
    assert trace.finish.token_ids == max(last, key=lambda b: b["score"])["token_ids"] or trace.finish.extra["drafts"]


def test_prompt_ngrams_back_off_from_trigram_to_bigram():
    from decoding.superposed import PromptNgrams

    grams = PromptNgrams([1, 2, 3, 1, 2, 4, 2, 3])
    assert grams.prob([1, 2], 3) == 0.5 and grams.prob([1, 2], 4) == 0.5  # trigram (1, 2) -> 3 | 4
    assert grams.prob([9, 2], 3) == pytest.approx(2 / 3)  # no trigram (9, 2): bigram 2 -> 3, 4, 3
    assert grams.prob([7], 3) == 0.0


@pytest.mark.parametrize("strategy", ["momentum", "adadec", "superposed"])
def test_the_cli_runs_them_on_the_embedded_model(strategy):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "decoding", "run", "--strategy", strategy, "--max-new-tokens", "8",
                          "--prompt", "The best thing about the city is", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    result = json.loads(out.stdout)
    assert result["strategy"] == strategy and result["model"] == "smollm2-135m"
    assert result["stats"]["num_tokens"] == 8 and result["text"].startswith("The best thing about the city is")


QA = ("Context: The lighthouse on the northern cliff was built in 1871 by the harbour board. "
      "Question: When was the lighthouse built?")


def test_exact_extract_finds_the_span_with_the_highest_exact_probability(tiny_lm):
    """Brute force: every span's probability from a fresh forward over prompt + span + end; the
    table equals it and the chosen span is its argmax."""
    import torch

    from decoding.exact_extract import passage_of, span_table

    passage, _ = passage_of(QA)
    prompt_ids = tiny_lm.encode_prompt(QA)[0]
    passage_ids = tiny_lm.tokenizer(passage, add_special_tokens=False).input_ids[:20]
    end = min(tiny_lm.stop_ids)
    table, calls = span_table(tiny_lm, prompt_ids, passage_ids, 5, end)
    assert calls == 1 + 2  # the prompt, then 20 starts in batches of 16
    best, where = float("-inf"), None
    for i in range(len(passage_ids)):
        for j in range(min(5, len(passage_ids) - i)):
            ids = prompt_ids + passage_ids[i:i + j + 1] + [end]
            logprobs = torch.log_softmax(tiny_lm.forward(torch.tensor([ids])).logits[0].float(), -1)
            exact = sum(float(logprobs[k - 1, ids[k]]) for k in range(len(prompt_ids), len(ids)))
            assert table[i, j] == pytest.approx(exact, abs=1e-3)
            if exact > best:
                best, where = exact, (i, j)
    assert divmod(int(table.argmax()), 5) == where


def test_exact_extract_runs_and_asks_for_a_passage(tiny_lm):
    trace = run_to_trace(tiny_lm, QA, strategy="exact-extract", params={"max_span": 4}, max_new_tokens=8)
    extra = trace.finish.extra
    start, end = extra["span"]
    assert 1 <= end - start <= 4 and extra["top_spans"][0]["start"] == start
    assert max(v for row in extra["table"] for v in row if v is not None) == pytest.approx(extra["span_logprob"], abs=1e-3)
    assert [e.token_id for e in trace.of_kind("token")][:end - start] == \
        tiny_lm.tokenizer(QA.split("Context:")[1].split("Question:")[0].strip(), add_special_tokens=False).input_ids[start:end]
    with pytest.raises(ValueError, match="Context:"):
        run_to_trace(tiny_lm, "What is the capital of France?", strategy="exact-extract", max_new_tokens=4)


def test_superposed_drafts_show_in_the_playground_beam_view(tiny_lm):
    from ui.playground_views import is_beam_family, playground_strategies
    from visualizers import beams_figure

    assert "superposed" in playground_strategies() and is_beam_family("superposed") and not is_beam_family("adadec")
    trace = run_to_trace(tiny_lm, PROMPT, strategy="superposed", params={"drafts": 3}, max_new_tokens=6)
    live = next(t for t in beams_figure(trace).data if t.name == "live beam")
    assert len(live.x) == sum(len(s.beams) for s in trace.of_kind("beams"))
