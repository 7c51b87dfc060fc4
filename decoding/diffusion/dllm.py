"""Conventions of the small diffusion LMs published by the dLLM project (github.com/ZHZisZZ/dllm).

dLLM publishes two kinds of small checkpoints, loaded here with plain transformers (no `dllm`
package, no remote code):

    bert   BERT-style masked LMs fine-tuned as chat models with the MDLM objective
           (`dllm-hub/ModernBERT-{base,large}-chat-v0.1`): a `ModernBertForMaskedLM` whose
           tokenizer already has a mask token; dLLM sets a [Question] / [Answer] chat format at
           run time, so the hub tokenizer lacks it and we set the same format here.
    a2d    "AR-to-diffusion" conversions (`dllm-hub/Qwen3-0.6B-diffusion-mdlm-v0.1`): a causal LM
           (Qwen3, Qwen2, Llama) whose attention was made bidirectional, fine-tuned with MDLM.
           The config says `model_type: "a2d-qwen3"`, a type only the `dllm` package registers;
           the weights are the base architecture's, so we load them into the base class and
           pass an all-visible 4-D attention mask (`bidirectional_mask`). The tokenizer gets
           the `<|mask|>` token dLLM adds, and `<|im_end|>` ends an answer. Logits at position i
           predict token i (no Dream-style shift; dLLM's `right_shift_logits=False`).

Glossary
    conventions  "bert" or "a2d": which of the two recipes a registry entry follows.
"""

from __future__ import annotations

import functools

import torch

from decoding import models

CONVENTIONS = ("bert", "a2d")
A2D_BASE_TYPES = {"a2d-qwen3": "qwen3", "a2d-qwen2": "qwen2", "a2d-llama": "llama"}  # dLLM type -> transformers type
A2D_MASK_TOKEN = "<|mask|>"
A2D_END_TOKENS = ("<|im_end|>", "<|eot_id|>")  # Qwen / Llama end of turn
BERT_END_OF_ANSWER = "[/Answer]"

# dLLM's BERT chat format: an optional [SYS] block, then [Question] ... [/Question] and
# [Answer] ... [/Answer] turns; a generation prompt opens an [Answer].
BERT_CHAT_TEMPLATE = (  # no whitespace control: every newline is written by an expression
    "{% set turns = messages %}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{{ '[SYS]\\n' + messages[0]['content'] | trim + '\\n[/SYS]\\n\\n' }}"
    "{% set turns = messages[1:] %}"
    "{% endif %}"
    "{% for m in turns %}"
    "{% if m['role'] == 'user' %}{{ '[Question]\\n' + m['content'] | trim + '\\n[/Question]\\n\\n' }}"
    "{% elif m['role'] == 'assistant' %}{{ '[Answer]\\n' + m['content'] | trim + '\\n[/Answer]\\n\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '[Answer]\\n' }}{% endif %}"
)


def a2d_config(source: str):
    """The base architecture's config for a dLLM A2D checkpoint (hub id or folder), marked with
    `a2d_model_type` so `DiffusionLM` knows to attend both ways."""
    import transformers

    raw, _ = transformers.PretrainedConfig.get_config_dict(source)
    base = A2D_BASE_TYPES.get(raw.get("model_type"))
    if base is None:
        raise ValueError(f"{source} is not a dLLM A2D checkpoint: its config's model_type is "
                         f"{raw.get('model_type')!r}, expected one of {', '.join(A2D_BASE_TYPES)}")
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "auto_map", "transformers_version")}
    config = transformers.AutoConfig.for_model(base, **fields)
    config.a2d_model_type = raw["model_type"]
    return config


def bidirectional_mask(input_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, T, T) additive attention mask of zeros: every position sees every position.
    transformers uses a 4-D mask as given, so a causal architecture attends both ways."""
    batch, length = input_ids.shape
    return torch.zeros(batch, 1, length, length, dtype=dtype, device=input_ids.device)


def apply_conventions(conventions: str, tokenizer, model) -> dict:
    """Adjust `tokenizer` in place to dLLM's run-time conventions; returns metadata for
    `LoadedModel.meta`: `stop_ids` (extra end-of-answer ids) and `chat_kwargs` (keyword
    arguments of the chat template)."""
    if conventions not in CONVENTIONS:
        raise ValueError(f"unknown dLLM conventions {conventions!r}; expected one of {CONVENTIONS}")
    if tokenizer.eos_token is None and tokenizer.pad_token is not None:
        tokenizer.eos_token = tokenizer.pad_token  # dLLM pads answers with this "eos" when fine-tuning
    if conventions == "bert":
        tokenizer.chat_template = BERT_CHAT_TEMPLATE
        return {"stop_ids": _single_token_ids(tokenizer, [BERT_END_OF_ANSWER])}
    if tokenizer.mask_token is None:
        tokenizer.add_special_tokens({"mask_token": A2D_MASK_TOKEN})
    embeddings = model.get_input_embeddings().num_embeddings
    if tokenizer.mask_token_id >= embeddings:
        raise ValueError(f"the mask token id {tokenizer.mask_token_id} is outside the model's {embeddings} embeddings")
    return {"stop_ids": _single_token_ids(tokenizer, A2D_END_TOKENS),
            "chat_kwargs": {"enable_thinking": False}}  # dLLM's default for Qwen3 chat templates


def _single_token_ids(tokenizer, texts) -> list[int]:
    """Ids of those `texts` the tokenizer has as one token."""
    vocab = tokenizer.get_vocab()
    return [vocab[t] for t in texts if t in vocab]


# the loader (decoding.models) applies these to a registry entry whose `conventions` names them
models.CONVENTIONS["bert"] = models.Conventions(apply=functools.partial(apply_conventions, "bert"))
models.CONVENTIONS["a2d"] = models.Conventions(apply=functools.partial(apply_conventions, "a2d"), config=a2d_config)
