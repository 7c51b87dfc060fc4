"""Building models rather than running them; nothing here is imported by the runtime at start-up.

    train.py   trains the shipped offline models (tiny-diffusion, tiny-ar, tiny-ar-draft, tiny-math):
               corpus, tokenizer, train, sample.  python -m decoding.training.train --help
    tiny.py    tiny random models built in-process (no file, no download): the unit tests' fast
               models, and what the registry's test models (tiny-random, ...) load from
"""
