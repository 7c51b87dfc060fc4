"""Compare (issue 16): settings side by side, interleaved, same seed; the statistics table."""

from __future__ import annotations

import math

import pytest

from decoding.compare import (COLUMNS, RunScore, compare_runs, distinct, parse_settings, repeated_ngrams,
                              sequence_logprob, table_csv, table_rows, validate_settings)
from decoding.events import Trace
from decoding.lm import LM
from decoding.run import as_lm, run_to_trace

TINY = "tiny-random"
PROMPT = "Compare: 2 + 3 = 5\n4 + 4 ="
SETTINGS = [{"strategy": "greedy"}, {"strategy": "sample", "params": {"top_p": 0.9}},
            {"strategy": "beam", "params": {"num_beams": 2}}]


def run_all(lm, settings, **kwargs):
    traces, scores, order = [Trace() for _ in settings], [None] * len(settings), []
    for i, item in compare_runs(lm, PROMPT, settings, chat=False, **kwargs):
        if isinstance(item, RunScore):
            scores[i] = item
        else:
            traces[i].append(item)
            order.append(i)
    return traces, scores, order


def test_runs_interleave_and_each_equals_the_same_run_made_alone():
    lm, settings = as_lm(TINY), parse_settings(SETTINGS)
    traces, scores, order = run_all(lm, settings, max_new_tokens=8, seed=3)
    assert order[:6] == [0, 1, 2, 0, 1, 2]  # one event of each run in turn
    for s, trace in zip(settings, traces):
        alone = run_to_trace(lm, PROMPT, strategy=s.strategy, params=s.params, max_new_tokens=8, seed=3, chat=False)
        assert trace.finish.token_ids == alone.finish.token_ids
        assert [e.to_dict() | {"elapsed_s": 0} for e in trace.of_kind("token")] == \
               [e.to_dict() | {"elapsed_s": 0} for e in alone.of_kind("token")]
    assert all(score is not None and score.compute_s > 0 for score in scores)


def test_logprob_is_the_text_scored_by_the_model_at_temperature_one():
    lm = as_lm(TINY)
    traces, scores, _ = run_all(lm, parse_settings(SETTINGS[:2]), max_new_tokens=8, seed=0)
    for trace, score in zip(traces, scores):  # greedy and sampling record every chosen token's raw prob
        assert score.logprob == pytest.approx(sum(math.log(e.prob) for e in trace.of_kind("token")), abs=1e-3)
    assert sequence_logprob(lm, [1, 2, 3], []) == 0.0


def test_stop_ends_every_run_and_none_is_scored(monkeypatch):
    lm, calls = as_lm(TINY), []
    stop_after = 5
    original = LM.forward

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(LM, "forward", counted)
    traces, scores, _ = run_all(lm, parse_settings(SETTINGS), max_new_tokens=30, seed=0,
                                should_stop=lambda: len(calls) >= stop_after)
    assert len(calls) == stop_after  # no model call after Stop, in any run
    assert all(t.finish.stop_reason == "cancelled" for t in traces)
    assert all(s.logprob is None for s in scores)


def test_table_has_every_column_and_its_csv_reads_back():
    lm = as_lm(TINY)
    settings = parse_settings(SETTINGS)
    traces, scores, _ = run_all(lm, settings, max_new_tokens=6, seed=0)
    rows = table_rows(settings, traces, scores)
    assert [list(r) for r in rows] == [list(COLUMNS)] * 3
    assert [r["strategy"] for r in rows] == ["greedy", "sample (top_p=0.9)", "beam (num_beams=2)"]
    assert rows[0]["tokens"] == len(traces[0].finish.token_ids)
    import csv
    import io

    back = list(csv.DictReader(io.StringIO(table_csv(rows))))
    assert [r["strategy"] for r in back] == [r["strategy"] for r in rows] and list(back[0]) == list(COLUMNS)


def test_ngram_statistics():
    assert distinct([1, 2, 1, 2, 1], 2) == 0.5  # (1,2) (2,1) (1,2) (2,1)
    assert distinct([1], 2) is None
    assert repeated_ngrams([1, 2, 3, 4, 1, 2, 3, 4, 1], 4) == 2  # (1,2,3,4) and (2,3,4,1) come back
    assert repeated_ngrams([1, 2, 3, 4, 5], 4) == 0


@pytest.mark.parametrize("settings, message", [
    ([{"strategy": "greedy"}], "2 to 4 settings, got 1"),
    ([{"strategy": "greedy"}] * 5, "2 to 4 settings, got 5"),
    ("not json", "JSON list"),
    ({"strategy": "greedy"}, "must be a list"),
    ([{"strategy": "greedy"}, {"params": {}}], "setting 2 must be an object with a \"strategy\""),
    ([{"strategy": "greedy"}, {"strategy": "sample", "params": [1]}], "setting 2's `params`"),
    ([{"strategy": "greedy"}, {"strategy": "sample", "colour": 1}], "unknown key"),
])
def test_bad_settings_say_what_is_wrong(settings, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_settings(settings)


def test_a_bad_setting_is_named_before_any_run():
    settings = parse_settings([{"strategy": "greedy"}, {"strategy": "sample", "params": {"top_p": 7}}])
    with pytest.raises(ValueError, match="setting 2 \\(sample\\).*top_p"):
        validate_settings(PROMPT, settings, 8, 0)
    with pytest.raises(ValueError, match="setting 1 \\(nope\\)"):
        validate_settings(PROMPT, parse_settings(["nope", "greedy"]), 8, 0)
