"""Tiny random models built in-process (no file, no download): the fast models of the unit tests.

`tiny-random`, `tiny-random-draft` and `tiny-random-diffusion` in the model registry are built
here from their `tiny_config`; tests also call the builders directly. A byte-level tokenizer
(one id per byte plus <pad>, <s>, </s>) is built in memory.
"""

from __future__ import annotations

import torch

from decoding.loaded_model import TINY_DIFFUSION_MODEL, TINY_MODEL, LoadedModel

def build_tiny_model(
    *, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, seed=0, device=torch.device("cpu"), dtype=torch.float32,
) -> LoadedModel:
    """A random Llama over a byte-level tokenizer, built in-process (no file, no download)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
        # max_position_embeddings: room for the longest run (2048 new tokens) and a long prompt
        num_key_value_heads=num_key_value_heads, max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)  # weights depend only on `seed`
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
    return LoadedModel(TINY_MODEL, model, tokenizer, device, dtype, "tiny")  # renamed by load_model


def build_tiny_diffusion_model(
    *, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, seed=0,
    initializer_range=0.5, device=torch.device("cpu"), dtype=torch.float32,
) -> LoadedModel:
    """A random bidirectional masked LM (ModernBERT, full attention) over the byte tokenizer plus
    a <mask> token, built in-process: the diffusion lab's fast test model. The wide initialisation
    (`initializer_range`) makes its predictions peaked and position-dependent, as a trained
    model's are (at 0.02 every position predicts the same token with probability ~1/V)."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    tokenizer = byte_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    config = ModernBertConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
        max_position_embeddings=1024, global_attn_every_n_layers=1, local_attention=1024,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        cls_token_id=tokenizer.bos_token_id, sep_token_id=tokenizer.eos_token_id,
        attention_dropout=0.0, mlp_dropout=0.0, embedding_dropout=0.0, initializer_range=initializer_range,
    )
    config.mask_token_id = tokenizer.mask_token_id  # ModernBertConfig has no such field
    torch.manual_seed(seed)
    model = ModernBertForMaskedLM(config).to(device=device, dtype=dtype)
    return LoadedModel(TINY_DIFFUSION_MODEL, model, tokenizer, device, dtype, "tiny", meta={"kind": "diffusion"})


def byte_tokenizer():
    """A byte-level BPE-free tokenizer: one id per byte plus <pad>, <s>, </s>; built in memory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tokenizers.pre_tokenizers import ByteLevel

    specials = ["<pad>", "<s>", "</s>"]
    vocab = {char: _byte_of_char(char) for char in ByteLevel.alphabet()}  # 256 byte symbols
    vocab |= {special: 256 + i for i, special in enumerate(specials)}
    byte_map = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([byte_map, pre_tokenizers.Split("", "isolated")])
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = None
    return fast


def _byte_of_char(c: str) -> int:
    """Inverse of GPT-2's bytes_to_unicode for one character."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    code = ord(c)
    if code in printable:
        return code
    extra = [b for b in range(256) if b not in printable]
    return extra[code - 256]
