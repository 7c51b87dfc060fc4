"""Toy Markov models built as real Llama models: next-token logits equal a chosen matrix row.

A (V, V) matrix P gives the logits after each token: logits(. | context ending in x) = P[x].
The construction (hidden size 2V, one-hot states, attention writing nothing):
    embedding[x] = SCALE * e_x; the final RMSNorm (weight 1/sqrt(2V)) maps SCALE * e_i to e_i and
    the LM head (weight [Q^T | P^T], (V, 2V)) reads out column block i.
With `exit_logits` Q a second layer's MLP moves SCALE * e_x to SCALE * e_(V+x): the full model
predicts P[x] while its first layer alone (early exit) predicts Q[x], a target and a
self-speculative drafter that disagree by a chosen amount. Without it the model has one
layer and its embedding points at the P block directly.

Exact distributions for tests come from running these models (their softmax is the target), so
the tests check the engine against the model itself, not against a copy of the matrix.
"""

from __future__ import annotations

import math

import torch

from decoding.models import LoadedModel

SCALE = 100.0  # embedding norm: makes RMSNorm's epsilon negligible
GATE = 20.0  # silu(20) = 20 * sigmoid(20): the switch that routes one unit of the moving MLP
SPECIALS = ["<pad>", "<s>", "</s>"]


def word_tokenizer(words: list[str]):
    """A whitespace tokenizer over `words` plus <pad>, <s>, </s> (ids 0, 1, 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = None
    return fast


def markov_llama(p_logits: torch.Tensor, tokenizer, *, exit_logits: torch.Tensor | None = None,
                 name: str = "markov") -> LoadedModel:
    """A Llama whose next-token logits after token x are p_logits[x]; its first layer alone
    (early exit) gives exit_logits[x] when those are given."""
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = p_logits.shape[0]
    assert p_logits.shape == (vocab, vocab) and len(tokenizer) == vocab
    two_layers = exit_logits is not None
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=2 * vocab, intermediate_size=vocab, num_hidden_layers=2 if two_layers else 1,
        num_attention_heads=1, num_key_value_heads=1, head_dim=2, max_position_embeddings=256,  # attention writes nothing
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    model = LlamaForCausalLM(config)
    eye = torch.eye(vocab)
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        start = 0 if two_layers else vocab  # one layer: the embedding already points at the P block
        model.model.embed_tokens.weight[:, start:start + vocab].copy_(SCALE * eye)
        model.model.norm.weight.fill_(1 / math.sqrt(2 * vocab))
        model.lm_head.weight[:, vocab:].copy_(p_logits.T)
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1 / math.sqrt(2 * vocab))  # its MLP sees e_x
        if two_layers:
            model.lm_head.weight[:, :vocab].copy_(exit_logits.T)
            mlp = model.model.layers[1].mlp
            mlp.gate_proj.weight[:, :vocab].copy_(GATE * eye)  # unit x switches on for e_x only
            mlp.up_proj.weight[:, :vocab].copy_(eye)
            move = SCALE / (GATE * torch.sigmoid(torch.tensor(GATE)).item())  # unit x outputs silu(GATE)
            mlp.down_proj.weight[:vocab].copy_(-move * eye)  # SCALE * e_x  ->  SCALE * e_(V+x)
            mlp.down_proj.weight[vocab:].copy_(move * eye)
    model.eval().requires_grad_(False)
    return LoadedModel(name, model, tokenizer, torch.device("cpu"), torch.float32, "tiny")


def register(monkeypatch, loaded: LoadedModel) -> str:
    """Make `loaded` loadable by name (as a draft model) for one test; returns the name."""
    from decoding import models

    spec = models.ModelSpec(name=loaded.name, description="toy Markov model (tests)", suggested=False)
    monkeypatch.setitem(models.REGISTRY, loaded.name, spec)
    monkeypatch.setitem(models.CACHE._entries, (loaded.name, "cpu", "torch.float32", "none"), (loaded, 0))
    loaded.meta["kind"] = "causal"
    loaded.num_parameters = sum(p.numel() for p in loaded.model.parameters())
    return loaded.name
