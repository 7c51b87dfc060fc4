"""Streaming policies on a scripted recogniser (fast, exact) and on the real Whisper base (slow).

The scripted recogniser writes, for the audio heard so far, the hypothesis a test chose (its words forced
after a given prefix, as Whisper's decoder is), so the commit rules, the retraction count and the latencies
are checked against hand-computed answers."""

from __future__ import annotations

import time

import numpy as np
import pytest

from decoding.params import flat
from decoding.speech.policies import POLICIES, chunk_ends, common_prefix, stream_params, transcribe
from decoding.contracts import never
from decoding.speech.whisper import SAMPLE_RATE, Decoded, Stopped, TokenChoice

WORDS = [{"word": w, "start": s, "end": e} for w, s, e in
         [("one", 0.0, 0.4), ("two", 0.5, 0.9), ("three", 1.0, 1.6), ("four", 2.2, 2.8), ("five", 3.1, 3.6)]]


class Scripted:
    """A stand-in for `Whisper`: hypothesis k (by seconds heard) is `script[k]`, continued after a forced prefix."""

    name = "scripted"

    def __init__(self, script: dict[float, str], delay_s: float = 0.0):
        self.script, self.delay_s, self.vocab = script, delay_s, {}

    def token(self, word: str) -> TokenChoice:
        token_id = self.vocab.setdefault(word, len(self.vocab))
        return TokenChoice(token_id, word, 0.9, 0.1, [token_id], [word], [0.9])

    def encode(self, audio: np.ndarray, *, should_stop=never, **_) -> float:
        if should_stop():
            raise Stopped("encoder")
        time.sleep(self.delay_s)  # a slow machine: latencies must not change
        return len(audio) / SAMPLE_RATE

    def decode(self, heard_s: float, prefix_ids=(), *, max_new_tokens=128, top_k=5, should_stop=never) -> Decoded:
        words = [self.token(" " + w) for w in self.script[min(s for s in self.script if s >= heard_s - 1e-9)].split()]
        assert common_prefix(words, list(prefix_ids)) == len(prefix_ids), "the scripts extend what was committed"
        rest = words[len(prefix_ids):]
        for _ in range(len(rest) + 1):  # one decoder pass per token and the end token, each asking first
            if should_stop():
                raise Stopped("decoder")
        return Decoded(rest, True, len(rest) + 1)

    def text(self, ids) -> str:
        names = {i: w for w, i in self.vocab.items()}
        return "".join(names[i] for i in ids)


SCRIPT = {1.0: "one", 2.0: "one two free", 3.0: "one two three for", 4.0: "one two three four five"}


def run(policy: str, script=SCRIPT, delay_s=0.0, **params):
    audio = np.zeros(int(4.0 * SAMPLE_RATE), np.float32)
    return list(transcribe(Scripted(script, delay_s), audio, params={"policy": policy, "chunk_s": 1.0, **params},
                           words=WORDS, reference="one two three four five"))


def test_redecode_shows_every_hypothesis_and_counts_what_it_withdraws():
    events = run("redecode")
    start, chunks, finish = events[0], events[1:-1], events[-1]
    assert start.num_chunks == 4 and [c.audio_end_s for c in chunks] == [1.0, 2.0, 3.0, 4.0]
    assert [c.committed_text for c in chunks] == [" one", " one two free", " one two three for",
                                                  " one two three four five"]
    assert [[r["text"] for r in c.retracted] for c in chunks] == [[], [], [" free"], [" for"]]
    assert finish.stats["retracted_tokens"] == 2 and finish.stats["retraction_events"] == 2
    assert finish.stats["retractions_per_minute"] == 30.0 and finish.stats["wer"] == 0.0
    # one at 1 s, two at 2 s, three at 3 s, four and five at 4 s, against the ends of the words
    assert [(w["word"], w["latency_s"]) for w in finish.committed] == [
        ("one", 0.6), ("two", 1.1), ("three", 1.4), ("four", 1.2), ("five", 0.4)]


def test_local_agreement_commits_what_two_hypotheses_share_and_never_retracts():
    events = run("local-agreement")
    chunks, finish = events[1:-1], events[-1]
    assert [c.committed_text for c in chunks] == ["", " one", " one two", " one two three four five"]
    assert all(not c.retracted for c in chunks) and finish.stats["retracted_tokens"] == 0
    for before, after in zip(chunks, chunks[1:]):
        assert after.committed_ids[:len(before.committed_ids)] == before.committed_ids
    assert chunks[1].extra == {"unconfirmed": [t["id"] for t in chunks[1].hypothesis[1:]]}  # "two free" wait
    assert [(w["word"], w["committed_at_s"]) for w in finish.committed] == [
        ("one", 2.0), ("two", 3.0), ("three", 4.0), ("four", 4.0), ("five", 4.0)]


def test_three_votes_commit_later_than_two():
    two = run("local-agreement")[-1].committed
    three = run("local-agreement", **{"local-agreement.agree": 3})[-1].committed
    assert [w["committed_at_s"] for w in three] == [3.0, 4.0, 4.0, 4.0, 4.0]
    assert all(a["committed_at_s"] >= b["committed_at_s"] for a, b in zip(three, two))


def test_latencies_come_from_the_audio_timeline_not_the_wall_clock():
    fast, slow = run("redecode")[-1], run("redecode", delay_s=0.05)[-1]
    assert fast.committed == slow.committed and slow.stats["mean_latency_s"] == fast.stats["mean_latency_s"]


def test_without_reference_times_latencies_are_unknown():
    audio = np.zeros(SAMPLE_RATE, np.float32)
    finish = list(transcribe(Scripted({1.0: "one"}), audio, params={"policy": "redecode"}))[-1]
    assert finish.committed == [{"word": "one", "committed_at_s": 1.0, "spoken_end_s": None, "latency_s": None,
                                 "matches": None}]
    assert finish.stats["wer"] is None and finish.stats["mean_latency_s"] is None


def test_stop_ends_the_run_before_the_next_chunk():
    audio = np.zeros(4 * SAMPLE_RATE, np.float32)
    stop, events = [False], []
    for event in transcribe(Scripted(SCRIPT), audio, params={"policy": "redecode"}, should_stop=lambda: stop[0]):
        events.append(event)
        stop[0] = sum(e.kind == "speech_chunk" for e in events) == 2  # Stop pressed while chunk 2 is shown
    assert [e.kind for e in events] == ["speech_start", "speech_chunk", "speech_chunk", "speech_finish"]
    assert events[-1].stop_reason == "cancelled" and events[-1].stats["audio_s"] == 2.0


@pytest.mark.parametrize("policy", ["redecode", "local-agreement"])
def test_stop_lands_between_the_model_calls_inside_a_chunk(policy):
    """Stop asked during chunk 2's decoding: no further pass is made, the half-decoded chunk is dropped."""
    audio = np.zeros(4 * SAMPLE_RATE, np.float32)
    asked = []

    def should_stop() -> bool:  # chunk 1: before it, the encoder, 2 decoder passes; chunk 2: before it, the encoder
        asked.append(True)
        return len(asked) >= 7  # ... then its first decoder pass is refused
    events = list(transcribe(Scripted(SCRIPT), audio, params={"policy": policy}, should_stop=should_stop))
    assert [e.kind for e in events] == ["speech_start", "speech_chunk", "speech_finish"]
    assert len(asked) == 7  # nothing was asked (so no model call was made) after the refusal
    assert events[-1].stop_reason == "cancelled" and events[-1].stats["audio_s"] == 1.0


def without_the_careless_lora(monkeypatch, tmp_path):
    """As in a checkout where CarelessWhisper's LoRA has not been trained (no assets/whisper-careless-lora)."""
    from decoding.speech import policies

    monkeypatch.setattr(policies, "CARELESS_LORA", tmp_path / "no-lora")
    monkeypatch.setitem(POLICIES.entry("careless").capabilities, "unavailable", policies._careless_unavailable())


def test_parameters_and_inputs_are_checked_with_a_sentence(monkeypatch, tmp_path):
    without_the_careless_lora(monkeypatch, tmp_path)
    assert set(POLICIES.names()) == {"redecode", "local-agreement", "careless"}
    assert flat(stream_params({"policy": "local-agreement"}))["local-agreement.agree"] == 2
    with pytest.raises(ValueError, match="`chunk_s` must be in"):
        stream_params({"chunk_s": "3"})
    with pytest.raises(ValueError, match=r"`local-agreement.agree` must be an integer in \[2, 4\]"):
        stream_params({"local-agreement.agree": 1})
    with pytest.raises(ValueError, match="has not trained yet"):
        stream_params({"policy": "careless"})  # said before any model loads
    with pytest.raises(ValueError, match="has not trained yet"):
        list(transcribe(Scripted(SCRIPT), np.zeros(SAMPLE_RATE, np.float32), params={"policy": "careless"}))
    with pytest.raises(ValueError, match="more than none"):  # over 30 s streams through a buffer (test_trim.py)
        list(transcribe(Scripted(SCRIPT), np.zeros(0, np.float32)))
    assert chunk_ends(int(2.5 * SAMPLE_RATE), 1.0) == [SAMPLE_RATE, 2 * SAMPLE_RATE, int(2.5 * SAMPLE_RATE)]


@pytest.fixture(scope="module")
def whisper_base():
    from decoding.speech.whisper import load_whisper

    return load_whisper()


@pytest.mark.slow  # Whisper base over three chunks per policy (~4 s each) and once offline
def test_on_real_speech_redecode_ends_as_offline_decoding_and_local_agreement_never_retracts(whisper_base):
    from decoding.speech.audio import speak

    sentence = "She sells fresh bread at the market every morning."
    clip = speak(sentence)
    offline = whisper_base.decode(whisper_base.encode(clip.audio))
    redecode = list(transcribe(whisper_base, clip.audio, params={"policy": "redecode"}, words=clip.words,
                               reference=sentence))
    assert redecode[-2].final and [t["id"] for t in redecode[-2].hypothesis] == [t.token_id for t in offline.tokens]
    assert redecode[-2].hypothesis[0] == offline.tokens[0].to_dict()  # the same distributions, recorded per token
    agreement = list(transcribe(whisper_base, clip.audio, params={"policy": "local-agreement"}, words=clip.words,
                                reference=sentence))
    chunks = agreement[1:-1]
    assert all(not c.retracted for c in chunks) and agreement[-1].stats["retracted_tokens"] == 0
    for before, after in zip(chunks, chunks[1:]):
        assert after.committed_ids[:len(before.committed_ids)] == before.committed_ids
    assert agreement[-1].stats["wer"] == redecode[-1].stats["wer"] == 0.0
    for word in agreement[-1].committed:  # committed once a chunk has been heard, after (or as) the word ended
        assert word["committed_at_s"] in {round(c.audio_end_s, 3) for c in chunks} and word["latency_s"] > -0.5


def test_a_policy_slower_than_real_time_falls_behind_live_audio_and_says_by_how_much():
    """Each chunk's CPU time queues behind the earlier ones on the audio clock: a policy that needs 1.5 s for every
    1 s chunk is 0.5 s further behind after each one; a fast one keeps up."""
    from decoding.speech.latency import behind

    free_at, lags = 0.0, []
    for k in range(1, 5):
        free_at = behind(free_at, float(k), 1.5)
        lags.append(round(free_at - k, 3))
    assert lags == [1.5, 2.0, 2.5, 3.0]
    free_at = 0.0
    for k in range(1, 5):
        free_at = behind(free_at, float(k), 0.3)
    assert round(free_at - 4, 3) == 0.3  # finishes each chunk 0.3 s after it arrived: never queues


class Busy(Scripted):
    """A recogniser that computes 0.6 CPU s for every encoder pass (CPU time, not sleep: it is what is counted)."""

    def encode(self, audio, **kwargs):
        started = time.process_time()
        while time.process_time() - started < 0.6:
            pass
        return super().encode(audio, **kwargs)


def test_the_run_records_how_far_behind_live_audio_it_is():
    events = list(transcribe(Busy(SCRIPT), np.zeros(3 * SAMPLE_RATE // 2, np.float32),
                             params={"policy": "redecode", "chunk_s": 0.5}))
    chunks, finish = events[1:-1], events[-1]
    lags = [c.behind_s for c in chunks]
    assert len(lags) == 3 and lags == sorted(lags) and lags[-1] >= 0.3  # 0.1 s more behind with every 0.5 s chunk
    assert finish.stats["behind_s"] == round(lags[-1], 3) and finish.stats["max_behind_s"] == round(max(lags), 3)
