"""A masked diffusion LM behind one narrow call: logits for every position of a canvas.

Model conventions differ; this wrapper hides them from the samplers:
    mask id   the tokenizer's `mask_token_id`, else the config's `mask_token_id`, else LLaDA's
              fixed id 126336 for `model_type` "llada" (LLaDA's tokenizer names no mask token),
              else the last vocabulary id for MDLM (its mask index is `vocab_size - 1`).
    shift     Dream (Ye et al. 2025) is adapted from an autoregressive model: its logits at
              position i - 1 predict token i. `needs_logit_shift(config)` is True only for Dream;
              LLaDA, MDLM and BERT-style masked LMs predict token i at position i.
    attention dLLM's AR-to-diffusion conversions load into a causal class (`decoding.diffusion.dllm`);
              their calls pass an all-visible 4-D mask so they attend both ways.

Delayed KV caching (dKV-Cache, Ma et al. 2025, "dKV-Cache: The Cache for Diffusion Language
Models"): bidirectional models have no KV cache API, so for models whose attention goes through
transformers' attention interface (`DKV_MODEL_TYPES`, e.g. ModernBERT) the wrapper registers an
attention function that, during a *partial* forward, runs only the active positions (the ones
fed as input ids) and lets them attend to the keys / values stored for the other positions at
the last forward. The model's own attention function does the arithmetic, so a full forward is
unchanged. What is cached: per layer, the rotated keys and values of every canvas and prompt
position, refreshed for a position whenever it is active and for all at a full forward.

Glossary
    canvas    prompt ids followed by the generated positions (mask id while masked).
    active    positions recomputed in a partial forward; the rest reuse cached keys / values.
    NFE       number of function evaluations: every model call, full or partial, counts one.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from decoding.diffusion.dllm import bidirectional_mask
from decoding.lm import WRAPPERS, LM
from decoding.models import LoadedModel, model_kind

LLADA_MASK_ID = 126336  # LLaDA's <|mdm_mask|> (hard-coded in its generate.py, absent from its config)
SHIFTED_MODEL_TYPES = frozenset({"dream"})  # logits at i - 1 predict token i
DKV_MODEL_TYPES = frozenset({"modernbert"})  # attention through transformers' interface, RoPE from position_ids
DKV_ATTENTION = "decoding_lab_dkv"  # name of the attention function registered for partial forwards


def needs_logit_shift(config) -> bool:
    """True for models whose logits at position i - 1 predict token i (Dream)."""
    model_type = str(getattr(config, "model_type", "")).lower()
    architectures = [str(a).lower() for a in getattr(config, "architectures", None) or []]
    return model_type in SHIFTED_MODEL_TYPES or any(a.startswith("dream") for a in architectures)


def shift_logits(logits: torch.Tensor) -> torch.Tensor:
    """Dream's convention to ours: row i of the result predicts token i. (B, T, V) -> (B, T, V).

    Row 0 has no predecessor and keeps its own logits (as Dream's generation code does)."""
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def find_mask_id(tokenizer, config) -> int:
    for source in (tokenizer, config):
        mask_id = getattr(source, "mask_token_id", None)
        if isinstance(mask_id, int) and mask_id >= 0:
            return mask_id
    model_type = str(getattr(config, "model_type", "")).lower()
    if model_type == "llada":
        return LLADA_MASK_ID
    if model_type == "mdlm":
        return int(config.vocab_size) - 1
    raise ValueError(f"cannot find the mask token of this {model_type or 'model'}: neither its tokenizer nor its "
                     "config has `mask_token_id`; it is not a masked diffusion LM")


@dataclass
class KVState:
    """Per-layer keys / values of the last forward over the whole sequence, plus its raw logits."""

    kv: dict = field(default_factory=dict)  # attention module -> (keys (B, H, T, D), values (B, H, T, D))
    raw_logits: torch.Tensor | None = None  # (T, V) rows of active positions fresh, the rest stale
    active: torch.Tensor | None = None  # (A,) positions fed in the current partial forward; None = full


_STATE: ContextVar[KVState | None] = ContextVar("decoding_lab_dkv_state", default=None)


def _dkv_attention(module, query, key, value, attention_mask, **kwargs):
    """Attention of the fed positions; in a partial forward over fed + cached keys / values."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    fallback = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(module.config._dkv_original, fallback)
    state = _STATE.get()
    if state is not None and state.active is None:  # full forward: remember every position
        state.kv[module] = (key, value)
    elif state is not None:  # partial forward: fresh K/V for the active rows, cached for the rest
        keys, values = (t.clone() for t in state.kv[module])
        keys[:, :, state.active], values[:, :, state.active] = key, value
        state.kv[module] = (keys, values)
        key, value, attention_mask = keys, values, None  # one unpadded sequence, no mask
    return attend(module, query, key, value, attention_mask, **kwargs)


class DiffusionLM:
    """A masked diffusion LM and its tokenizer. Holds no per-run state but a call counter."""

    kind = "diffusion"

    def __init__(self, loaded: LoadedModel):
        if model_kind(loaded) != "diffusion":
            raise ValueError(f"{loaded.name!r} is a causal (autoregressive) model; diffusion decoding needs a masked "
                             "diffusion LM such as tiny-diffusion, llada-8b-instruct or dream-7b-instruct")
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.config = self.model.config
        self.device = next(self.model.parameters()).device
        self.mask_id = find_mask_id(self.tokenizer, self.config)
        self.shift = needs_logit_shift(self.config)
        self.vocab_size = int(getattr(self.config, "vocab_size", 0) or len(self.tokenizer))
        self.max_length = getattr(self.config, "max_position_embeddings", None)  # longest canvas, if known
        self.forward_passes = 0

    name = LM.name
    token_text = LM.token_text
    decode = LM.decode
    stop_ids = LM.stop_ids
    has_chat_template = LM.has_chat_template
    encode_prompt = LM.encode_prompt

    @property
    def supports_kv_cache(self) -> bool:
        """Whether partial forwards with cached keys / values work for this model (see module doc)."""
        layer_types = getattr(self.config, "layer_types", None) or []
        return (str(getattr(self.config, "model_type", "")).lower() in DKV_MODEL_TYPES and not self.shift
                and all(t == "full_attention" for t in layer_types))

    @torch.inference_mode()
    def logits(self, ids: torch.Tensor, state: KVState | None = None) -> torch.Tensor:
        """Logits (T, V) float32 of a whole canvas `ids` (T,); row i predicts token i.

        With a `state`, the call also stores every layer's keys / values for `partial_logits`."""
        if state is not None:
            self._install_dkv()
        token = _STATE.set(state)
        try:
            raw = self._call(ids[None].to(self.device))[0].float()  # (T, V)
        finally:
            _STATE.reset(token)
        if state is not None:
            state.raw_logits = raw
        return shift_logits(raw[None])[0] if self.shift else raw

    @torch.inference_mode()
    def logits_batch(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) float32 of B whole canvases `ids` (B, T) in one model call (no cache)."""
        raw = self._call(ids.to(self.device)).float()  # (B, T, V)
        return shift_logits(raw) if self.shift else raw

    @torch.inference_mode()
    def partial_logits(self, ids: torch.Tensor, active: torch.Tensor, state: KVState) -> torch.Tensor:
        """Logits (T, V) from a forward over the `active` positions (A,) only; the other positions
        contribute their cached keys / values and their rows keep the last computed logits (stale:
        read only rows of active positions, and with a shift, rows whose predecessor was active)."""
        state.active = active.to(self.device)
        token = _STATE.set(state)
        try:
            raw = self._call(ids[active][None].to(self.device), position_ids=state.active[None])[0].float()  # (A, V)
        finally:
            _STATE.reset(token)
            state.active = None
        state.raw_logits = state.raw_logits.clone()
        state.raw_logits[active] = raw
        return shift_logits(state.raw_logits[None])[0] if self.shift else state.raw_logits

    def _call(self, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:
        if self._is_mdlm:
            kwargs = {"timesteps": torch.zeros(len(input_ids), device=self.device)}
        elif getattr(self.config, "a2d_model_type", None):  # a dLLM AR-to-diffusion conversion
            kwargs["attention_mask"] = bidirectional_mask(input_ids, self.model.dtype)
        out = self.model(input_ids=input_ids, **kwargs)
        self.forward_passes += 1
        return out.logits if hasattr(out, "logits") else out[0]  # (B, T, V)

    @property
    def _is_mdlm(self) -> bool:
        return str(getattr(self.config, "model_type", "")).lower() == "mdlm"  # its forward wants a noise level

    def require_kv_cache(self) -> None:
        """ValueError, naming `cache`, when this model cannot run partial forwards."""
        if not self.supports_kv_cache:
            raise ValueError(f"`cache`=delayed is not available for {self.name!r}: it needs a bidirectional model "
                             f"whose attention runs through transformers ({', '.join(sorted(DKV_MODEL_TYPES))}) "
                             "with full attention in every layer; use cache=none")

    def _install_dkv(self) -> None:
        """Route this model's attention through `_dkv_attention` (unchanged when no state is set)."""
        self.require_kv_cache()
        if self.config._attn_implementation == DKV_ATTENTION:
            return
        from transformers import AttentionInterface

        AttentionInterface.register(DKV_ATTENTION, _dkv_attention)
        self.config._dkv_original = self.config._attn_implementation
        self.model.set_attn_implementation(DKV_ATTENTION)


WRAPPERS["diffusion"] = DiffusionLM  # `decoding.run.as_lm` wraps a masked diffusion model in this
