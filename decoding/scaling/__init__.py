"""Inference-time scaling: N particles decoded as one batch, scored step by step, resampled.

    methods.py         the scaling strategies (best-of-N, majority vote, reward beam, particle filter,
                       First Finish) and their shared parameters
    particles.py       weights, ESS, resampling, lineage (pure functions)
    particle_batch.py  N particles as rows of one batched KV cache
    rewards.py         programmatic rewards: step checkers, constraints, final answers, LM judge
    prm.py             hub process reward models
    tasks.py           the shipped arithmetic task set
"""
