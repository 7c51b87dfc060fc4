"""A thin stateful wrapper over a causal LM: the one narrow interface strategies call.

Glossary
    cache        the model's KV cache (`transformers.DynamicCache`), one row per sequence.
    crop         drop cached positions past a length (rejected speculative tokens).
    reorder      select / repeat cache rows by index (beams, particles after resampling).
    early exit   logits from an intermediate layer: final norm + LM head on its hidden state.

Every call to `forward` is one model call and increments `forward_passes`; strategies read the
counter to put the number on their events.

A long prompt is prefilled in chunks of PREFILL_CHUNK tokens where the thread has a stop check (`PREFILL_STOP`: the
app's worker sets its run's), asked before each chunk: Stop (or the app's time limit) then lands within a chunk of an
8K prefill, not after it (`Cancelled`, which `generate` turns into a cancelled run). It is still one model call.
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass
from typing import Callable

import torch
from transformers import DynamicCache

from decoding.contracts import Cancelled
from decoding.models import LoadedModel

PREFILL_CHUNK = 1024  # tokens of a long prompt fed at once where a stop check is set
PREFILL_STOP: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar("decoding_lab_prefill_stop",
                                                                                          default=None)


@dataclass
class Output:
    logits: torch.Tensor  # (B, T, V) float32
    cache: DynamicCache
    hidden: torch.Tensor | None = None  # (B, T, D) last layer (normed) when asked for
    hidden_states: tuple | None = None  # all layers when asked for (embeddings first)


class LM:
    """Model + tokenizer with cache helpers. Holds no per-run state but a call counter."""

    def __init__(self, loaded: LoadedModel):
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.device = _input_device(loaded)
        self.forward_passes = 0
        self.config = self.model.config
        self.num_layers = self.config.num_hidden_layers
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]

    @property
    def name(self) -> str:
        return self.loaded.name

    @property
    def max_length(self) -> int | None:
        """The most positions the model attends over (prompt + generated), if its config says."""
        value = getattr(self.config, "max_position_embeddings", None)
        return value if isinstance(value, int) and value > 0 else None

    def check_fits(self, num_prompt: int, max_new_tokens: int, lookahead: int = 0) -> None:
        """ValueError with the numbers unless `num_prompt` tokens, `max_new_tokens` generated ones and
        `lookahead` positions a round may look past them (speculative drafts) fit `max_length`."""
        limit = self.max_length
        if limit is None or num_prompt + max_new_tokens + lookahead <= limit:
            return
        room = limit - num_prompt - lookahead
        extra = f" and {lookahead} draft positions" if lookahead else ""
        advice = (f"ask for at most {room} new tokens or shorten the prompt" if room >= 1 else
                  f"shorten the prompt to under {limit - lookahead} tokens")
        raise ValueError(f"the prompt's {num_prompt} tokens plus `max_new_tokens` {max_new_tokens}{extra} exceed "
                         f"{self.name}'s context of {limit} positions; {advice}")

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor | None,  # (B, T) new tokens only (None with inputs_embeds)
        cache: DynamicCache | None = None,
        *,
        inputs_embeds: torch.Tensor | None = None,  # (B, T, D) instead of ids (superposed decoding's mixed input)
        attention_mask: torch.Tensor | None = None,  # (B, past + T) or a 4D custom mask
        position_ids: torch.Tensor | None = None,  # (B, T)
        output_hidden_states: bool = False,
        last_only: bool = False,  # only the last position's logits (saves a (T, V) matmul on prefill)
        logits_to_keep: int = 0,  # only the last N positions' logits (0 = all; overrides last_only)
    ) -> Output:
        if cache is None:
            cache = DynamicCache(config=self.config)
        stop = PREFILL_STOP.get()
        if (stop is not None and input_ids is not None and input_ids.shape[1] > PREFILL_CHUNK and inputs_embeds is None
                and attention_mask is None and position_ids is None and not output_hidden_states):
            return self._chunked(input_ids, cache, stop, logits_to_keep or (1 if last_only else 0))
        out = self.model(
            input_ids=None if input_ids is None else input_ids.to(self.device),
            inputs_embeds=inputs_embeds,
            past_key_values=cache,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            output_hidden_states=output_hidden_states,
            logits_to_keep=logits_to_keep or (1 if last_only else 0),
        )
        self.forward_passes += 1
        hidden_states = out.hidden_states if output_hidden_states else None
        return Output(
            logits=out.logits.float(),
            cache=out.past_key_values,
            hidden=hidden_states[-1] if hidden_states else None,
            hidden_states=hidden_states,
        )

    def _chunked(self, input_ids: torch.Tensor, cache: DynamicCache, stop: Callable[[], bool], keep: int) -> Output:
        """`forward` over a long plain input, PREFILL_CHUNK tokens at a time, asking `stop` before each (`Cancelled`
        when it says so): the same cache and the same last `keep` positions' logits (all with 0), one model call."""
        length = input_ids.shape[1]
        first_kept = length - (keep or length)  # positions before this one need no logits
        logits = []
        for start in range(0, length, PREFILL_CHUNK):
            if stop():
                raise Cancelled("stopped during the prefill")
            end = min(start + PREFILL_CHUNK, length)
            wanted = end - max(start, first_kept)  # this chunk's positions whose logits are returned
            out = self.model(input_ids=input_ids[:, start:end].to(self.device), past_key_values=cache, use_cache=True,
                             logits_to_keep=max(wanted, 1))
            cache = out.past_key_values
            if wanted > 0:
                logits.append(out.logits[:, -wanted:].float())
        self.forward_passes += 1
        return Output(logits=torch.cat(logits, dim=1), cache=cache)

    def forward_tree(self, pending_ids: list[int], parents: list[int], tokens: list[int], cache: DynamicCache,
                     output_hidden_states: bool = False, cached_nodes: int = 0,
                     logits_from_root: bool = False) -> Output:
        """Verify (or extend) a token tree in ONE call: tree attention mask, depth-based positions.

        `pending_ids` (P tokens) are context tokens not yet in `cache`, causal among themselves.
        Tree node i (token `tokens[i]`, parent `parents[i]`, -1 = after the last context token)
        sees the cached context, every pending token, its ancestors and itself, at position
        (last context position) + depth(i). The first `cached_nodes` nodes are already the last
        entries of `cache` (an earlier call fed them; then P must be 0) and are not fed again.
        Logits rows: P - 1 predicts the root's children (when P > 0), then one row per fed node;
        `logits_from_root` computes only those (P > 0): row 0 is the root's, so a long `pending_ids` (a
        prompt verified with the first draft) costs no (P, V) matmul.
        """
        keep = len(tokens) - cached_nodes + 1 if logits_from_root and pending_ids else 0
        if cached_nodes and pending_ids:
            raise ValueError("pending tokens must come before cached tree nodes")
        if all(p == i - 1 for i, p in enumerate(parents)):  # a chain: the mask is causal, positions follow on
            ids = torch.tensor([list(pending_ids) + list(tokens[cached_nodes:])], device=self.device)
            return self.forward(ids, cache, output_hidden_states=output_hidden_states,  # the plain causal path
                                logits_to_keep=keep)
        past, num_pending = cache.get_seq_length(), len(pending_ids)
        context = past - cached_nodes  # context tokens in the cache
        new = range(cached_nodes, len(tokens))
        depth = tree_depths(parents)
        root_position = context + num_pending - 1
        positions = [context + i for i in range(num_pending)] + [root_position + depth[i] for i in new]
        q_len = num_pending + len(new)
        mask = torch.zeros(q_len, past + q_len, dtype=torch.bool)  # (Q, KV) True = may attend
        mask[:, :context] = True
        mask[:num_pending, past:past + num_pending] = torch.ones(num_pending, num_pending, dtype=torch.bool).tril()
        mask[num_pending:, past:past + num_pending] = True
        for row, i in enumerate(new, start=num_pending):
            j = i
            while j >= 0:  # self and ancestors, wherever they sit
                mask[row, context + j if j < cached_nodes else past + num_pending + j - cached_nodes] = True
                j = parents[j]
        ids = torch.tensor([list(pending_ids) + [tokens[i] for i in new]], device=self.device)  # (1, Q)
        return self.forward(ids, cache, attention_mask=mask[None, None].to(self.device),
                            position_ids=torch.tensor([positions], device=self.device),
                            output_hidden_states=output_hidden_states, logits_to_keep=keep)

    def prefill(self, prompt_ids: list[int] | torch.Tensor, rows: int = 1, **kwargs) -> Output:
        """Run the prompt once; `rows` > 1 repeats its cache for batched rows (beams, particles)."""
        ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=self.device).view(1, -1)  # (1, T)
        out = self.forward(ids, last_only=not kwargs.get("output_hidden_states"), **kwargs)
        if rows > 1:
            out.cache = repeat_cache(out.cache, rows)
            out.logits = out.logits.expand(rows, -1, -1).contiguous()
        return out

    @property
    def final_norm(self) -> torch.nn.Module:
        base = getattr(self.model, "model", None)
        norm = getattr(base, "norm", None) or getattr(base, "final_layernorm", None)
        if norm is None:
            raise NotImplementedError(f"{type(self.model).__name__}: final norm not found for early exit")
        return norm

    # Text helpers -------------------------------------------------------------------------
    def token_text(self, token_id: int) -> str:
        """One token's own text; memoised per tokenizer (every event names a dozen tokens: on a tiny model
        the decoding of their texts was 5% of a speculative run)."""
        texts = self.tokenizer.__dict__.get("_decoding_lab_texts")
        if texts is None:  # kept on the tokenizer itself: it lives and dies with it
            texts = self.tokenizer.__dict__["_decoding_lab_texts"] = {}
        text = texts.get(token_id)
        if text is None:
            text = texts[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False,
                                                           clean_up_tokenization_spaces=False)
        return text

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    @functools.cached_property
    def stop_ids(self) -> frozenset[int]:
        """Token ids that end a run: the model's and the tokenizer's end-of-sequence ids, and
        any a loader recorded (`meta["stop_ids"]`, e.g. dLLM's end-of-answer markers)."""
        ids = set(self.loaded.meta.get("stop_ids", ()))
        for source in (getattr(self.model, "generation_config", None), self.tokenizer):
            eos = getattr(source, "eos_token_id", None)
            if isinstance(eos, int):
                ids.add(eos)
            elif eos:
                ids.update(int(i) for i in eos)
        return frozenset(ids)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_prompt(self, prompt: str, chat: bool = True) -> tuple[list[int], str, bool]:
        """(ids, the text the model sees, whether the chat template was applied)."""
        if chat and self.has_chat_template:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True,
                **self.loaded.meta.get("chat_kwargs", {}))
            ids = self.tokenizer(text, add_special_tokens=False).input_ids
            return list(ids), text, True
        ids = self.tokenizer(prompt).input_ids  # the tokenizer adds BOS where the model expects it
        return list(ids), prompt, False


WRAPPERS: dict[str, type] = {"causal": LM}  # model kind (`decoding.models.model_kind`) -> the wrapper strategies
#                  call (`decoding.run.as_lm`); a family registers its own kind's: decoding.diffusion.lm adds "diffusion"


def tree_depths(parents: list[int]) -> list[int]:
    """Depth of each tree node (1 for the root's children) from its parent (-1 = the root);
    a parent always comes before its children."""
    depth: list[int] = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    return depth


# Cache helpers (pure functions of a cache) ---------------------------------------------------


def crop_cache(cache: DynamicCache, length: int) -> DynamicCache:
    """Keep the first `length` positions (in place, returned for chaining)."""
    if not 0 <= length <= cache.get_seq_length():
        raise ValueError(f"`length` must be in [0, {cache.get_seq_length()}], got {length}")
    cache.crop(length - cache.get_seq_length())  # transformers 5 takes minus the tokens to remove
    return cache


def reorder_cache(cache: DynamicCache, row_ids: torch.Tensor) -> DynamicCache:
    """Rows selected (and repeated) by `row_ids` (N,), e.g. beam parents or particle ancestors.

    In place, returned for chaining.
    """
    cache.reorder_cache(row_ids.long())
    return cache


def repeat_cache(cache: DynamicCache, rows: int) -> DynamicCache:
    """A batch of `rows` identical rows from a one-row cache."""
    return reorder_cache(cache, torch.zeros(rows, dtype=torch.long))


def _input_device(loaded: LoadedModel) -> torch.device:
    """Where inputs go: the embedding's device (differs from `loaded.device` under device_map)."""
    try:
        return loaded.model.get_input_embeddings().weight.device
    except AttributeError:
        return loaded.device
