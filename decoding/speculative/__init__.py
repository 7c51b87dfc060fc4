"""Speculative decoding: a drafter proposes a token tree, the target verifies it in one pass.

    strategy.py   the `speculative` strategy (rounds: draft, verify, commit) and the drafter registry
    base.py       the drafter contract: the `Drafter` base (propose, observe) and its `Feedback` record
    drafters.py   drafters that run a model: a draft model, early exit (LayerSkip, DEL); tree growing
    retrieval.py  drafters that run no model: prompt lookup, Token Recycling
    verify.py     lossless verification of a draft tree (pure functions)
"""
