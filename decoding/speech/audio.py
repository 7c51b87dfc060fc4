"""Speech made on the machine: espeak-ng speaks a sentence, and says when it spoke each word.

Streaming latency is measured against the audio timeline, so every clip needs the time of its words.
espeak-ng knows them exactly: its library reports a WORD event (character position, length, and the
millisecond of the audio where the word starts) while it synthesises. `speak` calls libespeak-ng through
ctypes in synchronous mode (`espeak.py`: the audio and the events come back through one callback), so one
synthesis gives the samples and the word starts together; timing words by synthesising growing prefixes would not
work, since a sentence's last word is spoken longer and lower than the same word mid-sentence. A word ends
where its sound does: the last 10 ms frame above a silence threshold before the next word starts (so the
pause between words is not counted as speech). sox resamples espeak-ng's 22,050 Hz to Whisper's 16 kHz.

Clips are cached by their settings in a temporary folder (`speech_dir`): `<key>.wav` and `<key>.json` (the
text, the words with start and end seconds, the settings). Synthesis is deterministic: the same settings
give the same samples.

Glossary
    word   {"word", "start", "end"}: seconds from the start of the clip; `word` as written in the text.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from decoding.errors import MissingDependency
from decoding.speech import espeak
from decoding.speech.whisper import SAMPLE_RATE

# What the speech lab needs from the system (a Hugging Face Space installs packages.txt with apt), and what the page
# says without it.
SYSTEM_PACKAGES = {
    "sox": "sox is missing on this machine: every clip (a preset, an upload, the microphone) is converted to 16 kHz "
           "by it. Install it: `apt-get install sox` (a Hugging Face Space installs it from packages.txt).",
    "espeak-ng": "espeak-ng is missing on this machine: the preset sentences are spoken by it (uploads and the "
                 "microphone work without it). Install it: `apt-get install espeak-ng` (a Hugging Face Space installs "
                 "it from packages.txt).",
}


def missing_programs() -> list[str]:
    """SYSTEM_PACKAGES' message for each one this machine lacks (sox on the PATH, espeak-ng's shared library)."""
    import ctypes.util

    missing = [] if shutil.which("sox") else [SYSTEM_PACKAGES["sox"]]
    return missing + ([] if ctypes.util.find_library("espeak-ng") else [SYSTEM_PACKAGES["espeak-ng"]])


SILENCE = 0.02  # a 10 ms frame whose RMS is below this fraction of the clip's loudest frame is silence
MAX_TEXT_CHARS = 2_000


@dataclass(frozen=True)
class Clip:
    """A 16 kHz mono clip and when each of its words was spoken."""

    audio: np.ndarray  # float32 samples in [-1, 1]
    words: list[dict]  # [{"word", "start", "end"}], seconds
    text: str
    path: Path | None = None  # the cached WAV, when there is one

    @property
    def duration(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def synthesise(text: str, *, voice: str = "en", rate: int = 150, pitch: int = 50) -> tuple[np.ndarray, int, list]:
    """espeak-ng's own samples (int16), their sample rate and the words it spoke: [(word as written, start ms)].
    A fresh child process per sentence (`decoding/speech/espeak.py` says why)."""
    settings = json.dumps({"text": text, "voice": voice, "rate": rate, "pitch": pitch})
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "samples.raw"
        result = subprocess.run([sys.executable, espeak.__file__, settings, str(raw)], capture_output=True, text=True)
        if result.returncode != 0:
            message = (result.stderr or "").strip().splitlines()[-1:] or ["espeak-ng failed"]
            if "`voice`" in message[0]:
                raise ValueError(message[0])
            raise MissingDependency(SYSTEM_PACKAGES["espeak-ng"]) if "is missing" in message[0] else RuntimeError(message[0])
        out = json.loads(result.stdout)
        samples = np.frombuffer(raw.read_bytes(), dtype="<i2").copy()
    return samples, out["sample_rate"], [(word, ms) for word, ms in out["words"]]


def word_ends(samples: np.ndarray, sample_rate: int, starts_s: list[float]) -> list[float]:
    """Each word's end: the end of its last 10 ms frame above the silence threshold before the next word starts."""
    frame = sample_rate // 100
    frames = len(samples) // frame
    rms = np.sqrt((samples[:frames * frame].astype(np.float64).reshape(frames, frame) ** 2).mean(axis=1))
    loud = rms > SILENCE * max(rms.max(initial=0.0), 1e-9)
    at = lambda seconds: int(seconds * sample_rate) // frame  # the frame holding this moment
    ends = []
    for i, start in enumerate(starts_s):
        first, last = at(start), at(starts_s[i + 1]) if i + 1 < len(starts_s) else frames
        voiced = np.nonzero(loud[first:last])[0]
        ends.append(round((first + voiced[-1] + 1) * frame / sample_rate, 3) if len(voiced) else start)
    return ends


def _resample(samples: np.ndarray, rate: int, folder: Path) -> np.ndarray:
    """16 kHz float32 samples, resampled by sox."""
    if shutil.which("sox") is None:
        raise MissingDependency(SYSTEM_PACKAGES["sox"])
    source, target = folder / "espeak.wav", folder / "16k.wav"
    write_wav(source, samples, rate)
    subprocess.run(["sox", str(source), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(target)], check=True,
                   capture_output=True)
    return read_wav(target)


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    if samples.dtype != np.int16:
        samples = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.astype("<i2").tobytes())


def read_wav(path) -> np.ndarray:
    """Float32 samples of a 16 kHz mono 16-bit WAV (ValueError saying what it is otherwise: sox converts)."""
    with wave.open(str(path), "rb") as f:
        if f.getnchannels() != 1 or f.getsampwidth() != 2 or f.getframerate() != SAMPLE_RATE:
            raise ValueError(f"`audio` must be a 16 kHz mono 16-bit WAV, got {f.getframerate()} Hz, "
                             f"{f.getnchannels()} channel(s), {8 * f.getsampwidth()}-bit; convert it with "
                             f"`sox IN.wav -r 16000 -c 1 -b 16 OUT.wav`")
        raw = f.readframes(f.getnframes())
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


DECODE_S = 60  # the most seconds sox may take to decode a file (it is killed then: a file that decodes slowly)


def read_audio(path, *, max_s: float | None = None, limit_env: str = "") -> np.ndarray:
    """Any audio file sox reads (WAV of any rate, width and channels, FLAC, OGG; MP3 where sox reads it) as 16 kHz
    mono float32 samples: what the speech tab, `/transcribe` and `python -m decoding transcribe --audio` read.
    ValueError naming the file and what is allowed for one it cannot read or one over `max_s` seconds.

    The length is counted on the decoded samples, never read from a header (a FLAC may leave its total sample count
    blank, and `sox --i -D` then says 0): sox writes raw 16 kHz samples to a pipe, and reading stops one sample past
    `max_s`, so a file claiming any length costs at most that much decoding, memory and time, and nothing is
    written to disk. Messages name the file, never the folder it sits in (a server's upload folder)."""
    name = Path(path).name
    most = None if max_s is None else int(max_s * SAMPLE_RATE) * 2  # bytes of 16-bit samples in the longest clip
    with tempfile.TemporaryFile() as errors:
        try:
            sox = subprocess.Popen(["sox", "-V1", str(path), "-t", "raw", "-e", "signed-integer", "-b", "16", "-L",
                                    "-r", str(SAMPLE_RATE), "-c", "1", "-"], stdout=subprocess.PIPE, stderr=errors,
                                   stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise MissingDependency(SYSTEM_PACKAGES["sox"]) from None
        watchdog = threading.Timer(DECODE_S, sox.kill)  # a file that decodes slowly is stopped
        watchdog.start()
        try:
            raw = sox.stdout.read() if most is None else sox.stdout.read(most + 2)  # one sample past says: longer
            over = most is not None and len(raw) > most
            if over:
                sox.kill()
            sox.stdout.close()
            code = sox.wait()
        finally:
            watchdog.cancel()
        errors.seek(0)
        why = errors.read(4000).decode("utf-8", "replace").replace(str(path), name)
    if over:
        set_by = f" (set by {limit_env})" if limit_env else ""
        raise ValueError(f"`audio` {name} lasts more than {max_s:g} seconds, the limit for a clip{set_by}: "
                         f"cut it to at most {max_s:g} s")
    if code != 0:
        if code < 0:
            raise ValueError(f"`audio` {name} took more than {DECODE_S} s to decode; give a shorter or simpler file")
        reason = (why.strip().splitlines() or ["unknown format"])[-1]
        reason = reason.removeprefix("sox FAIL formats: ").removeprefix("sox FAIL sox: ")
        raise ValueError(f"`audio` {name} cannot be read ({reason}); give a WAV, FLAC or OGG file (MP3 needs sox's "
                         f"MP3 support: apt-get install libsox-fmt-mp3)")
    audio = np.frombuffer(raw[:len(raw) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0
    if not len(audio):
        raise ValueError(f"`audio` {name} holds no samples")
    return audio


def speech_dir() -> Path:
    return Path(os.environ.get("DECODING_LAB_SPEECH_DIR", Path(tempfile.gettempdir()) / "decoding-lab-speech"))


def speak(text: str, *, voice: str = "en", rate: int = 150, pitch: int = 50) -> Clip:
    """The clip of `text` spoken by espeak-ng at 16 kHz, with its word times; cached by its settings."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"`text` must be 1..{MAX_TEXT_CHARS} characters of text, got {text!r:.80}")
    if not 80 <= rate <= 450:
        raise ValueError(f"`rate` must be in [80, 450] words a minute, got {rate}")
    settings = {"text": text, "voice": voice, "rate": rate, "pitch": pitch, "sample_rate": SAMPLE_RATE}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    folder = speech_dir()
    wav_path, meta_path = folder / f"{key}.wav", folder / f"{key}.json"
    if wav_path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        return Clip(read_wav(wav_path), meta["words"], text, wav_path)
    samples, espeak_rate, spoken = synthesise(text, voice=voice, rate=rate, pitch=pitch)
    starts = [ms / 1000 for _, ms in spoken]
    ends = word_ends(samples, espeak_rate, starts)
    words = [{"word": w, "start": round(s, 3), "end": round(e, 3)} for (w, _), s, e in zip(spoken, starts, ends)]
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        audio = _resample(samples, espeak_rate, Path(tmp))
        write_wav(Path(tmp) / "clip.wav", audio, SAMPLE_RATE)
        (Path(tmp) / "clip.json").write_text(json.dumps(settings | {"words": words}), encoding="utf-8")
        os.replace(Path(tmp) / "clip.json", meta_path)  # the WAV last: a clip is found only when whole
        os.replace(Path(tmp) / "clip.wav", wav_path)
    return Clip(read_wav(wav_path), words, text, wav_path)


def word_times(wav_path) -> list[dict] | None:
    """The words of a WAV `speak` wrote (its `.json` beside it), or None for any other file."""
    meta = Path(wav_path).with_suffix(".json")
    if not meta.exists():
        return None
    data = json.loads(meta.read_text(encoding="utf-8"))
    return data.get("words") if isinstance(data, dict) else None
