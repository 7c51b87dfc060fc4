"""Masked diffusion LMs: a canvas of masks unmasked over a few steps.

    samplers.py  the `diffusion` strategy, the sampler registry (fixed schedule / threshold, LocalLeap)
                 and the pure unmasking decisions
    lm.py        the diffusion LM wrapper: full and partial forwards, the delayed KV cache
    dllm.py      dLLM checkpoints (A2D Qwen3, ModernBERT chat) without the dllm package
"""
