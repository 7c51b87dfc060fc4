"""Audio over Whisper's 30-second window: the buffer is trimmed where everything heard is committed, or flushed
when the window is full, and the text before the buffer goes to the decoder as context.

A fake recogniser reads the words off the samples themselves (word i is a stretch of the value i / 1000, silence
between words), so it knows only what is in the buffer it is given, as Whisper does: a word cut off at the end
of the buffer comes out as another token (its partial form), and the context it is given is checked against
what was committed before the buffer began. The real Whisper base on a clip of several espeak-ng sentences
(over 30 s) is the slow test at the end."""

from __future__ import annotations

import numpy as np
import pytest

from decoding.speech.policies import transcribe, transcribe_live
from decoding.speech.whisper import SAMPLE_RATE, WINDOW_S, Decoded, TokenChoice

PARTIAL = 1000  # a word cut off at the end of the buffer: its id + PARTIAL


def spoken(num_words: int, period_s: float = 1.0, word_s: float = 0.6) -> tuple[np.ndarray, list[dict]]:
    """Word i (1-based value i / 1000) from (i-1) * period_s for word_s seconds, silence between."""
    audio = np.zeros(int(num_words * period_s * SAMPLE_RATE), np.float32)
    words = []
    for i in range(1, num_words + 1):
        start = (i - 1) * period_s
        audio[int(start * SAMPLE_RATE):int((start + word_s) * SAMPLE_RATE)] = i / 1000
        words.append({"word": f"w{i}", "start": start, "end": start + word_s})
    return audio, words


class SampleReader:
    """A stand-in for `Whisper` that writes the words whose samples are in the buffer."""

    name = "sample-reader"

    def __init__(self):
        self.longest_s, self.contexts, self.committed_before = 0.0, [], []

    @staticmethod
    def token(token_id: int) -> TokenChoice:
        text = f" w{token_id}" if token_id < PARTIAL else f" w{token_id - PARTIAL}-"
        return TokenChoice(token_id, text, 0.9, 0.1, [token_id], [text], [0.9])

    def encode(self, audio: np.ndarray, **_) -> np.ndarray:
        self.longest_s = max(self.longest_s, len(audio) / SAMPLE_RATE)
        assert len(audio) <= WINDOW_S * SAMPLE_RATE, "the buffer never exceeds Whisper's window"
        return audio

    def decode(self, heard: np.ndarray, prefix_ids=(), *, max_new_tokens=128, top_k=5, context_ids=(), **_) -> Decoded:
        values = np.round(heard * 1000).astype(int)
        ids = [int(v) for i, v in enumerate(values) if v and (i == 0 or values[i - 1] != v)]
        if ids and values[-1]:  # the buffer ends inside a word: Whisper writes a guess of it
            ids[-1] += PARTIAL
        self.contexts.append(list(context_ids))
        assert ids[:len(prefix_ids)] == list(prefix_ids), "a forced prefix is what the buffer's audio says"
        rest = ids[len(prefix_ids):]
        return Decoded([self.token(i) for i in rest], True, len(rest) + 1)

    def text(self, ids) -> str:
        return "".join(self.token(i).text for i in ids)


def run(policy: str, chunk_s: float, num_words: int = 40, **params):
    audio, words = spoken(num_words)
    asr = SampleReader()
    events = list(transcribe(asr, audio, params={"policy": policy, "chunk_s": chunk_s, **params}, words=words,
                             reference=" ".join(w["word"] for w in words)))
    return asr, events


def test_local_agreement_trims_where_all_is_committed_and_transcribes_through():
    asr, events = run("local-agreement", 0.5)
    chunks, finish = events[1:-1], events[-1]
    assert events[0].audio_s == 40.0 and finish.stop_reason == "end"
    assert finish.text == " ".join(f"w{i}" for i in range(1, 41)) and finish.stats["wer"] == 0.0
    cuts = [c for c in chunks if c.trimmed]
    assert cuts and all(c.trimmed == "trim" for c in cuts)  # a settled moment comes every second: never a flush
    assert asr.longest_s <= 15.5  # trimmed once the buffer held trim_s = 15 s
    ends = {c.audio_end_s for c in chunks}
    for before, after in zip(chunks, chunks[1:]):
        assert after.committed_ids[:len(before.committed_ids)] == before.committed_ids  # never retracts
        if not before.trimmed:
            assert after.buffer_start_s == before.buffer_start_s
        else:  # cut at an earlier chunk's end, whose audio is exactly the committed text: in silence here
            assert before.buffer_start_s < after.buffer_start_s < before.audio_end_s and after.buffer_start_s in ends
            assert after.buffer_start_s % 1.0 == 0.0
            assert asr.contexts[after.chunk] == before.committed_ids  # the committed text, as context
    assert all(0 <= w["latency_s"] <= 1.5 for w in finish.committed)  # latencies stay on the audio timeline


def test_the_trim_length_is_the_policys_knob():
    short, _ = run("local-agreement", 0.5, **{"trim_s": 5.0})
    assert short.longest_s <= 5.5


def test_redecode_flushes_when_the_window_is_full():
    asr, events = run("redecode", 1.0)
    chunks, finish = events[1:-1], events[-1]
    flushes = [c for c in chunks if c.trimmed]
    assert [c.trimmed for c in flushes] == ["flush"] and flushes[0].audio_end_s == 30.0  # 30 s, then one more window
    assert asr.longest_s == 30.0 and asr.contexts[30] == flushes[0].committed_ids
    assert finish.text == " ".join(f"w{i}" for i in range(1, 41))


def test_a_policy_that_never_settles_flushes_mid_word_and_says_so():
    asr, events = run("redecode", 0.5)  # the cut at 30 s falls between words; at 0.5 s chunks they do not
    assert [c.audio_end_s for c in events[1:-1] if c.trimmed] == [30.0]
    assert asr.longest_s <= 30.0 and events[-1].stats["wer"] == 0.0


def test_a_live_source_in_pieces_of_any_length_streams_as_the_whole_clip_does():
    audio, words = spoken(12)
    audio = np.concatenate([audio, np.zeros(SAMPLE_RATE // 5, np.float32)])  # 12.2 s: the last chunk is shorter
    whole = list(transcribe(SampleReader(), audio, params={"policy": "local-agreement", "chunk_s": 0.5}, words=words))
    cuts = np.cumsum(np.random.default_rng(0).integers(100, 9000, size=200))
    pieces = [audio[a:b] for a, b in zip([0, *cuts], [*cuts, len(audio)]) if a < len(audio)]
    live = list(transcribe_live(SampleReader(), iter(pieces), params={"policy": "local-agreement", "chunk_s": 0.5},
                                words=words))
    assert live[0].audio_s == 0.0 and live[0].num_chunks == 0  # the length is not known at the start
    strip = lambda e: {k: v for k, v in e.to_dict().items() if k not in ("cpu_s", "behind_s", "stats")}  # timings
    assert [strip(e) for e in live[1:]] == [strip(e) for e in whole[1:]]
    exact = list(transcribe_live(SampleReader(), iter([audio[:12 * SAMPLE_RATE]]), params={"chunk_s": 0.5}))
    # a live source that ends exactly at a chunk's end: the end is known only after it, so one more final chunk
    assert [c.audio_end_s for c in exact[-3:-1]] == [12.0, 12.0] and exact[-2].final and not exact[-3].final


@pytest.mark.slow  # Whisper base over ~35 s of audio in 2-second chunks (a minute or two on one thread)
def test_whisper_transcribes_a_clip_over_30_seconds_through_the_trimmed_buffer():
    from decoding.speech.audio import speak
    from decoding.speech.metrics import wer
    from decoding.speech.whisper import load_whisper

    sentences = ["The train to the city leaves every morning at seven.", "Please bring your ticket and a warm coat.",
                 "The weather in the mountains changes quickly in the spring.",
                 "My brother works at the hospital near the river.",
                 "We will meet again next week to talk about the garden.",
                 "The children played in the park until the sun went down.",
                 "Our teacher reads a short story to the class every Friday.",
                 "The baker opens his shop before the first bus arrives.",
                 "Turn left at the church and walk past the old bridge.",
                 "She keeps her books on a shelf beside the window."]
    clips = [speak(s) for s in sentences]
    gap = np.zeros(int(0.6 * SAMPLE_RATE), np.float32)
    audio, words, offset = [], [], 0.0
    for clip in clips:
        audio += [clip.audio, gap]
        words += [{"word": w["word"], "start": w["start"] + offset, "end": w["end"] + offset} for w in clip.words]
        offset += clip.duration + len(gap) / SAMPLE_RATE
    audio = np.concatenate(audio)
    assert len(audio) / SAMPLE_RATE > WINDOW_S
    reference = " ".join(sentences)
    events = list(transcribe(load_whisper(), audio, params={"policy": "local-agreement", "chunk_s": 2.0},
                             words=words, reference=reference))
    finish = events[-1]
    assert finish.stop_reason == "end" and any(c.trimmed for c in events[1:-1])
    assert max(c.audio_end_s - c.buffer_start_s for c in events[1:-1]) <= WINDOW_S
    assert wer(reference, finish.text) < 0.2, finish.text
