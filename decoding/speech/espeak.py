"""libespeak-ng through ctypes: one sentence's samples and the audio time of each word it spoke.

espeak-ng's library reports a WORD event (character position, length, and the millisecond of the audio where
the word starts) while it synthesises; in synchronous mode the samples and the events come back through one
callback. The synthesiser keeps state from one sentence to the next (the same text comes out a few samples
longer or shorter the second time) and does not survive `espeak_Terminate` + `espeak_Initialize` in one
process, so `decoding.speech.audio` runs this file as a fresh child process per sentence: the same settings
then give the same samples. It imports nothing of the project (the child starts in a fraction of a second).

    python decoding/speech/espeak.py SETTINGS_JSON OUT.raw   ->  prints {"sample_rate", "words": [[word, ms]]}
"""

from __future__ import annotations

import ctypes
import json
import sys

LIBRARY = "libespeak-ng.so.1"
EVENT_LIST_TERMINATED, EVENT_WORD = 0, 1
AUDIO_OUTPUT_SYNCHRONOUS, POS_CHARACTER, CHARS_UTF8 = 2, 1, 1
RATE, PITCH = 1, 3  # espeak_PARAMETER


class Event(ctypes.Structure):  # espeak_EVENT in speak_lib.h
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", ctypes.c_char * 8)]


CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(Event))


def synthesise(text: str, voice: str, rate: int, pitch: int) -> tuple[bytes, int, list]:
    """(int16 little-endian samples, sample rate, [(word as written, start ms)]). Once per process."""
    try:
        lib = ctypes.CDLL(LIBRARY)
    except OSError as error:
        raise SystemExit(f"espeak-ng's library ({LIBRARY}) is missing ({error}); install Debian's espeak-ng") from None
    sample_rate = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, None, 0)
    if sample_rate <= 0:
        raise SystemExit("espeak-ng did not initialise (espeak_Initialize returned an error)")
    lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                 ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
    chunks, starts = [], []

    def on_audio(wav, num_samples, events):
        if num_samples > 0:
            chunks.append(ctypes.string_at(wav, num_samples * 2))
        i = 0
        while events[i].type != EVENT_LIST_TERMINATED:
            if events[i].type == EVENT_WORD:  # text_position counts characters from 1
                starts.append((events[i].text_position - 1, events[i].length, events[i].audio_position))
            i += 1
        return 0

    callback = CALLBACK(on_audio)  # kept referenced until synthesis ends
    lib.espeak_SetSynthCallback(callback)
    if lib.espeak_SetVoiceByName(voice.encode()) != 0:
        raise SystemExit(f"`voice` must be an espeak-ng voice (espeak-ng --voices=en lists them), got {voice!r}")
    lib.espeak_SetParameter(RATE, rate, 0)
    lib.espeak_SetParameter(PITCH, pitch, 0)
    encoded = text.encode("utf-8")
    lib.espeak_Synth(encoded, len(encoded) + 1, 0, POS_CHARACTER, 0, CHARS_UTF8, None, None)
    lib.espeak_Synchronize()
    words = [(text[pos:pos + length], ms) for pos, length, ms in starts]
    return b"".join(chunks), sample_rate, words


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    samples, rate, spoken = synthesise(settings["text"], settings["voice"], settings["rate"], settings["pitch"])
    with open(sys.argv[2], "wb") as out:
        out.write(samples)
    print(json.dumps({"sample_rate": rate, "words": spoken}))
