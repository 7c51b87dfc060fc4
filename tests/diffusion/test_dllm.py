"""dLLM checkpoints (decoding.diffusion.dllm): A2D conversions load without the dllm package and attend both
ways; the BERT chat format; both run the diffusion strategy. Tiny random models saved in the hub
format stand in for the hub checkpoints (no internet here)."""

import json

import pytest
import torch

from decoding import models, run_to_trace
from decoding.training import tiny
from decoding.diffusion import dllm
from decoding.diffusion.lm import DiffusionLM


@pytest.fixture(scope="module")
def a2d_folder(tmp_path_factory):
    """A random Qwen3 saved the way dLLM saves an A2D conversion: config model_type "a2d-qwen3",
    no <|mask|> in the tokenizer yet, room in the embeddings for it (as in Qwen3's padded vocabulary)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    folder = tmp_path_factory.mktemp("a2d")
    tokenizer = tiny.byte_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tokenizer) + 8, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         initializer_range=0.5)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    raw = json.loads((folder / "config.json").read_text())
    raw.update(model_type="a2d-qwen3", architectures=["A2DQwen3LMHeadModel"])
    (folder / "config.json").write_text(json.dumps(raw))
    return folder


@pytest.fixture(scope="module")
def a2d(a2d_folder):
    loaded = models._load_from_hub(str(a2d_folder), torch.device("cpu"), torch.float32, "none", lambda _: None,
                                   auto_class="AutoModelForCausalLM", conventions="a2d")
    loaded.meta["kind"] = "diffusion"
    return loaded


def test_a2d_checkpoint_loads_into_the_base_class_with_dllm_conventions(a2d):
    assert type(a2d.model).__name__ == "Qwen3ForCausalLM"
    assert a2d.model.config.a2d_model_type == "a2d-qwen3"
    assert a2d.tokenizer.mask_token == "<|mask|>"
    assert a2d.tokenizer.mask_token_id < a2d.model.get_input_embeddings().num_embeddings
    im_end = a2d.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert a2d.meta["stop_ids"] == [im_end] and a2d.meta["chat_kwargs"] == {"enable_thinking": False}
    lm = DiffusionLM(a2d)
    assert lm.mask_id == a2d.tokenizer.mask_token_id and im_end in lm.stop_ids and not lm.shift


def test_a2d_model_attends_both_ways_only_through_the_wrapper(a2d):
    lm = DiffusionLM(a2d)
    ids = torch.randint(3, 200, (12,), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[9] = (changed[9] + 5) % 200 + 3
    assert (lm.logits(ids)[2] - lm.logits(changed)[2]).abs().max() > 1e-4  # a later token moves an earlier row
    with torch.no_grad():  # the bare causal class would not: the 4-D mask is what makes it bidirectional
        plain = a2d.model(input_ids=ids[None]).logits[0, 2] - a2d.model(input_ids=changed[None]).logits[0, 2]
    assert plain.abs().max() == 0


def test_a2d_runs_the_diffusion_strategy_to_a_full_canvas(a2d):
    trace = run_to_trace(DiffusionLM(a2d), "hello", strategy="diffusion", params={"steps": 4}, max_new_tokens=8,
                         chat=False)
    assert trace.finish.token_ids and a2d.tokenizer.mask_token_id not in trace.finish.token_ids
    assert [e.nfe for e in trace.events if e.kind == "diffusion_step"] == [1, 2, 3, 4]


def test_a2d_config_refuses_other_model_types(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="not a dLLM A2D checkpoint.*'llama'"):
        dllm.a2d_config(str(tmp_path))


def test_bert_chat_format_matches_dllm():
    loaded = tiny.build_tiny_diffusion_model()
    loaded.tokenizer.add_special_tokens({"additional_special_tokens": [dllm.BERT_END_OF_ANSWER]})
    meta = dllm.apply_conventions("bert", loaded.tokenizer, loaded.model)
    assert meta["stop_ids"] == [loaded.tokenizer.convert_tokens_to_ids(dllm.BERT_END_OF_ANSWER)]
    text = loaded.tokenizer.apply_chat_template(
        [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi?"},
         {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Name a colour."}],
        tokenize=False, add_generation_prompt=True)
    assert text == ("[SYS]\nBe brief.\n[/SYS]\n\n[Question]\nHi?\n[/Question]\n\n[Answer]\nHello.\n[/Answer]\n\n"
                    "[Question]\nName a colour.\n[/Question]\n\n[Answer]\n")
    loaded.meta.update(meta)
    lm = DiffusionLM(loaded)
    ids, shown, chat = lm.encode_prompt("Why?")
    assert chat and shown == "[Question]\nWhy?\n[/Question]\n\n[Answer]\n" and meta["stop_ids"][0] in lm.stop_ids
    with pytest.raises(ValueError, match="unknown dLLM conventions"):
        dllm.apply_conventions("gpt", loaded.tokenizer, loaded.model)


def test_registry_lists_the_dllm_checkpoints():
    specs = {s.hub_id: s for s in models.REGISTRY.values()}
    assert specs["dllm-hub/Qwen3-0.6B-diffusion-mdlm-v0.1"].conventions == "a2d"
    assert specs["dllm-hub/ModernBERT-large-chat-v0.1"].conventions == "bert"
    assert all(s.kind == "diffusion" for s in specs.values() if s.conventions)
    assert not any(s.hub_id in models.TRUST_REMOTE_CODE_ALLOWLIST for s in specs.values() if s.conventions)
