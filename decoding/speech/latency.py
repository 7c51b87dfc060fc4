"""When each committed word was committed, against when it was spoken; a run's statistics. Pure functions.

A committed token carries the audio time of the chunk that committed it (the audio timeline: what had been
heard, never the wall clock). Tokens group into words where a token starts with a space (Whisper's byte-pair
tokens carry the space before a word); a word is committed when its last token is. The committed words are
aligned to the reference words (`metrics.align`, the WER alignment) and each aligned word's latency is its
commit time minus the end of the reference word it stands for (a substitution counts: the word was heard,
written wrong); an inserted word takes the end of the reference word before it. Without reference times
(an arbitrary recording), latencies are None.
"""

from __future__ import annotations

import numpy as np

from decoding.speech.metrics import align, edits, normalise


def token_words(texts: list[str], times: list[float]) -> list[tuple[str, float]]:
    """(word as written, commit time) from committed tokens' texts and commit times."""
    words: list[list] = []
    for text, time in zip(texts, times):
        if not words or text.startswith(" "):
            words.append([text, time])
        else:
            words[-1][0] += text
            words[-1][1] = max(words[-1][1], time)
    return [(text.strip(), time) for text, time in words if text.strip()]


def committed_words(texts: list[str], times: list[float], reference: list[dict] | None) -> list[dict]:
    """Each committed word: {"word", "committed_at_s", "spoken_end_s", "latency_s", "matches"}."""
    written = [(norm, time) for text, time in token_words(texts, times) for norm in normalise(text)]
    if not reference:
        return [{"word": w, "committed_at_s": round(t, 3), "spoken_end_s": None, "latency_s": None, "matches": None}
                for w, t in written]
    ref_words = [(norm, w["end"]) for w in reference for norm in normalise(w["word"])]
    out, last_end = [], ref_words[0][1] if ref_words else 0.0
    for i, j in align([w for w, _ in ref_words], [w for w, _ in written]):
        if i is not None:
            last_end = ref_words[i][1]
        if j is None:
            continue
        word, time = written[j]
        out.append({"word": word, "committed_at_s": round(time, 3), "spoken_end_s": round(last_end, 3),
                    "latency_s": round(time - last_end, 3), "matches": i is not None and ref_words[i][0] == word})
    return out


def behind(free_at_s: float, arrived_s: float, spent_s: float) -> float:
    """When a policy that is busy until `free_at_s` (the audio clock) finishes a chunk that arrived at `arrived_s` and
    takes `spent_s` of compute: live audio queues behind a policy slower than real time."""
    return max(free_at_s, arrived_s) + spent_s


def summary(words: list[dict], *, reference: str, final_text: str, audio_s: float, retracted: int,
            retraction_events: int, cpu_s: float, encoder_passes: int, decoder_passes: int,
            behind_s: float = 0.0, max_behind_s: float = 0.0) -> dict:
    """A run's statistics (the CLI's finish event, the benchmark's rows)."""
    latencies = [w["latency_s"] for w in words if w["latency_s"] is not None]
    ref = normalise(reference)
    return {
        "wer": round(edits(ref, normalise(final_text)) / len(ref), 4) if ref else None,
        "mean_latency_s": round(float(np.mean(latencies)), 3) if latencies else None,
        "p95_latency_s": round(float(np.percentile(latencies, 95)), 3) if latencies else None,
        "committed_words": len(words),
        "retracted_tokens": retracted,
        "retraction_events": retraction_events,
        "retractions_per_minute": round(retracted / (audio_s / 60), 3) if audio_s > 0 else None,
        "audio_s": round(audio_s, 3),
        "cpu_s": round(cpu_s, 3),
        "cpu_s_per_audio_s": round(cpu_s / audio_s, 3) if audio_s > 0 else None,
        "behind_s": round(behind_s, 3),  # live audio: how far behind it the last chunk was finished (0: kept up)
        "max_behind_s": round(max_behind_s, 3),
        "encoder_passes": encoder_passes,
        "decoder_passes": decoder_passes,
    }
