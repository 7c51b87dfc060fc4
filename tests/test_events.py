import json

import pytest

from decoding.events import RunFinished, RunStarted, TokenStep, Trace, stats


def make_trace() -> Trace:
    trace = Trace()
    trace.append(RunStarted(model="m", strategy="sample", params={"top_p": 0.9}, prompt="hi", prompt_text="hi",
                            prompt_ids=[1, 2], chat=False, seed=0, max_new_tokens=2, device="cpu", dtype="float32",
                            vocab_size=10))
    for step, (tok, ent, elapsed) in enumerate([(5, 1.0, 0.5), (7, 3.0, 1.0)]):
        trace.append(TokenStep(step=step, token_id=tok, token_text=f"t{tok}", prob=0.5, sampling_prob=0.6, rank=1,
                               entropy=ent, entropy_truncated=ent / 2, kept_size=3, top_ids=[tok, 1],
                               top_tokens=[f"t{tok}", "a"], top_probs=[0.5, 0.2], top_kept=[True, False],
                               elapsed_s=elapsed, forward_passes=1))
    trace.append(RunFinished(text="t5t7", token_ids=[5, 7], stop_reason="max_new_tokens", elapsed_s=2.0))
    return trace


def test_trace_round_trips_through_json(tmp_path):
    trace = make_trace()
    path = tmp_path / "t.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded.events == trace.events
    assert loaded.to_json() == trace.to_json()


def test_stats_are_computed_from_events():
    s = stats(make_trace())
    assert s["num_tokens"] == 2
    assert s["tokens_per_s"] == pytest.approx(1.0)
    assert s["time_to_first_token_s"] == pytest.approx(0.5)
    assert s["forward_passes"] == 2
    assert s["mean_entropy"] == pytest.approx(2.0)
    assert s["stop_reason"] == "max_new_tokens"


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "invalid JSON"),
        ('{"format": "other"}', "not a Decoding Lab trace"),
        ('{"format": "decoding-lab-trace", "version": 99, "events": []}', "unsupported trace version"),
        ('{"format": "decoding-lab-trace", "version": 1, "events": []}', "non-empty list"),
        ('{"format": "decoding-lab-trace", "version": 1, "events": [{"kind": "boom"}]}', "unknown event kind 'boom'"),
        ('{"format": "decoding-lab-trace", "version": 1, "events": [{"kind": "finish", "text": "x"}]}', "missing"),
        ('[1, 2, 3]', "not a Decoding Lab trace"),
    ],
)
def test_malformed_traces_are_rejected_with_a_clear_message(text, message):
    with pytest.raises(ValueError, match=message):
        Trace.from_json(text)


def test_trace_must_start_with_a_start_event():
    data = json.loads(make_trace().to_json())
    data["events"] = data["events"][1:]
    with pytest.raises(ValueError, match="first event must be a 'start'"):
        Trace.from_dict(data)


def test_non_utf8_file_is_rejected(tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="not UTF-8"):
        Trace.load(path)
