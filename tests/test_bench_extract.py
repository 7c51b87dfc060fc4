"""The extractive QA bench (bench/bench_extract.py, issue 27): SQuAD's EM / F1, the shipped items, and the
--smoke --json command end to end on SmolLM2 (slow)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_extract as be  # noqa: E402
from decoding.token.extractive import whole_word_spans  # noqa: E402


def test_normalisation_is_squads():
    assert be.normalize_answer("The  Atlantic Ocean.") == "atlantic ocean"
    assert be.normalize_answer("an Apple, a pear") == "apple pear"
    assert be.normalize_answer("Theatre") == "theatre"  # an article inside a word stays


def test_exact_match_and_f1():
    assert be.exact_match("the engineer Marta Vell.", "engineer marta vell") == 1.0
    assert be.exact_match("Marta", "Marta Vell") == 0.0
    assert be.f1_score("Marta", "Marta Vell") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert be.f1_score("built by Marta Vell", "Marta Vell") == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert be.f1_score("1903", "1871") == 0.0
    assert be.f1_score("", "1871") == 0.0 and be.f1_score("the", "a") == 1.0  # both empty once normalised
    assert be.f1_score("red red", "red") == pytest.approx(2 * 0.5 * 1.0 / 1.5)  # a repeated token counts once
    assert be.best_over_golds(be.f1_score, "Marta Vell", ["the engineer Marta Vell", "Marta Vell"]) == 1.0


def test_shipped_items_are_squad_form_and_every_gold_is_a_whole_word_span():
    items = be.load_items()
    assert len(items) >= 60 and len({i["id"] for i in items}) == len(items)
    for item in items:
        context = item["context"]
        per_char = [(k, k + 1) for k in range(len(context))]  # one "token" per character
        keep = whole_word_spans(context, per_char, max(map(len, item["answers"]["text"])))
        for text, start in zip(item["answers"]["text"], item["answers"]["answer_start"]):
            assert context[start:start + len(text)] == text
            assert keep[start, len(text) - 1], (item["id"], text)  # a candidate exact-extract can choose


def test_an_answer_that_is_not_at_its_start_is_refused(tmp_path):
    bad = {"id": "x", "context": "Ada met Bob.", "question": "Who?", "answers": {"text": ["Bob"], "answer_start": [0]}}
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="items.jsonl line 1: answer 'Bob' is not at answer_start 0"):
        be.load_items(path)


@pytest.mark.slow
def test_smoke_json_has_both_methods_for_both_chat_settings():
    out = subprocess.run([sys.executable, "bench/bench_extract.py", "--smoke", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=True).stdout
    result = json.loads(out)  # ONE JSON object, nothing else on stdout
    assert (result["model"], result["items"], result["tokens"]) == ("smollm2-135m", 2, be.SMOKE_TOKENS)
    assert [run["chat"] for run in result["runs"]] == [True, False]
    for run in result["runs"]:
        methods = run["methods"]
        for method in be.METHODS:
            m = methods[method]
            assert 0 <= m["exact_match"] <= 100 and 0 <= m["f1"] <= 100 and m["forward_passes"] >= 1
        extract = methods["exact-extract"]
        assert extract["is_span"] == 1.0 and extract["logprob_items"] == 2 and extract["logprob"] < 0
        assert len(run["per_item"]) == 2
        for row in run["per_item"]:
            assert row["exact-extract"]["answer"] in be.load_items()[0]["context"]
            greedy = row["greedy"]
            assert (greedy["logprob"] is None) == (not greedy["is_span"])
            if greedy["is_span"]:  # exact search: no span beats the best one
                assert greedy["logprob"] <= row["exact-extract"]["logprob"] + 1e-3
