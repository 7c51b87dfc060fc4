"""Faster decoding without a drafter: Lexical Unit Decoding, HAMburger and FTP (Playground).

Each runs on a model trained for it on this CPU from `tiny-ar` (`decoding.training.faster`) and is
greedy: every token it writes is the argmax of a distribution the model computed (never a token
the model did not produce). Each has an "off" setting that is plain greedy decoding of its model
(tested), so the picture shows what the speed-up changes.

Papers followed
    Sun et al. 2024, "Decoding at the Speed of Thought: Harnessing Parallel Decoding of Lexical
    Units for LLMs" (LUD): `span` mask tokens after the text; the last real position gives the next
    token, the masks the tokens after it; the contiguous run the model marks as one lexical unit is
    written in the same step (the mask past the unit predicts the end-of-unit label).
    Liu and Zhang 2025, "HAMburger: Accelerating LLM Inference via Token Smashing": one big forward
    per slot of 1..`group` smashed tokens; a micro-step decoder writes the next slot's tokens while it
    is confident (`decoding.token.hamburger_model`).
    Li et al. 2024, "FTP: A Fine-grained Token-wise Pruner for Large Language Models via Token
    Routing": a trained router skips, per token, the blocks it scores below `threshold`
    (`decoding.token.ftp_router`); the model itself is tiny-ar, unchanged.

Glossary
    unit      (LUD) the tokens one forward wrote: the next token plus the accepted mask predictions.
    slot      (HAMburger) one cache entry of the big model: the tokens smashed into it.
    block     (FTP) one decoder layer; a token that skips it leaves only its keys and values there.

Every token is one `TokenStep`; `forward_passes` is 1 on the first token a big forward produced
and 0 on the others, so the Playground's tokens-per-pass figure is what ran. `extra` carries each
method's picture data (read by visualizers.faster).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
import torch.nn.functional as F

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.lm import crop_cache
from decoding.params import Params, param
from decoding.registry import register_strategy
from decoding.token.autoregressive import point_mass, token_event

ASSETS = Path(__file__).resolve().parents[2] / "assets"
LUD_MODELS = {"tiny-ar-lud": ASSETS / "tiny-ar-lud"}  # model -> its folder (lud settings in config.json)
HAMBURGER_MODELS = {"tiny-ar-hamburger": ASSETS / "tiny-ar-hamburger"}  # model -> folder with hamburger.safetensors


def trained_figures(folder: Path) -> dict:
    """The held-out figures of a shipped model's training (its training.json `after`), or {}."""
    path = Path(folder) / "training.json"
    return json.loads(path.read_text()).get("after", {}) if path.is_file() else {}


def needs_model(method: str, lm, folders: dict) -> Path:
    """The shipped folder of the model `method` runs on, or ValueError naming the model to pick."""
    folder = folders.get(lm.name)
    if folder is None:
        raise ValueError(f"`{method}` runs on a model trained for it: pick {' or '.join(sorted(folders))} "
                         f"(the model is {lm.name!r})")
    return folder


def write_group(ctx: RunContext, outcome: Outcome, written: int, tokens: list[int], rows: list, extras: list[dict],
                figures: dict):
    """Yield one TokenStep per token one big forward produced (the first carries the forward, and the model
    card's figures); stops early where the run ends, and returns whether it did (`ended = yield from ...`)."""
    for i, (token, logits, extra) in enumerate(zip(tokens, rows, extras)):
        if i == 0 and figures:
            extra["trained"] = {k: figures.get(k) for k in ("val_loss", "val_loss_tiny_ar", "agree_tiny_ar")}
        yield token_event(ctx, ctx.step_offset + written + i, token, logits, point_mass(logits, token),
                          forward_passes=1 if i == 0 else 0, extra=extra)
        if outcome.add(ctx, token) or written + i + 1 >= ctx.max_new_tokens:
            return True
    return False


# ---------------------------------------------------------------- LUD


@dataclass(frozen=True)
class LudParams(Params):
    span: int = param(4, low=0, high=8, help="Mask tokens after the text: the most extra tokens one forward may write "
                                              "(0 = off: greedy). tiny-ar-lud was trained with 4.")
    threshold: float = param(0.0, low=0.0, high=1.0,
                             help="A mask's token is written only when its probability reaches this too "
                                  "(0 = trust the model's own end-of-unit label).")


@register_strategy("lud", params=LudParams, papers=(bib.SUN_2024_LUD,), models=tuple(LUD_MODELS),
                   help="Lexical Unit Decoding: masks after the text predict the rest of the unit; a confident unit "
                        "is written in one forward (model tiny-ar-lud)")
def lud(ctx: RunContext, params: LudParams, outcome: Outcome) -> Iterator[Event]:
    lm = ctx.lm
    folder = needs_model("lud", lm, LUD_MODELS)
    mask_id = int(getattr(lm.config, "lud", {}).get("mask_id", lm.tokenizer.convert_tokens_to_ids("<|mask|>")))
    figures = trained_figures(folder)
    pending = list(ctx.prompt_ids)  # tokens written but not yet in the cache
    cache, length, written, unit = None, 0, 0, 0  # length: positions in the cache
    while written < ctx.max_new_tokens:
        if outcome.cancelled(ctx):
            return
        room = params.span if lm.max_length is None else min(params.span, lm.max_length - length - len(pending))
        room = max(0, min(room, ctx.max_new_tokens - written - 1))
        ids = torch.tensor([pending + [mask_id] * room], device=lm.device)  # (1, P + room)
        out = lm.forward(ids, cache)  # causal: the masks see the text and the masks before them
        cache = crop_cache(out.cache, length + len(pending))  # the masks leave no entry
        length += len(pending)
        rows = out.logits[0, len(pending) - 1:]  # (1 + room, V): the next token, then one row per mask
        probs = F.softmax(rows, -1)
        chosen = [int(rows[0].argmax())]
        for j in range(1, room + 1):
            token = int(rows[j].argmax())
            if token == mask_id or probs[j, token].item() < params.threshold or chosen[-1] in lm.stop_ids:
                break
            chosen.append(token)
        extras = [{"unit": unit, "unit_size": len(chosen), "in_unit": i, "span": room,
                   "mask_prob": round(probs[i, token].item(), 4) if i else None} for i, token in enumerate(chosen)]
        if (yield from write_group(ctx, outcome, written, chosen, list(rows[: len(chosen)]), extras, figures)):
            return
        pending, unit, written = chosen, unit + 1, written + len(chosen)


# ---------------------------------------------------------------- HAMburger


@dataclass(frozen=True)
class HamburgerParams(Params):
    group: int = param(4, low=1, high=4, help="Most tokens per slot, i.e. per big forward (1 = off: greedy).")
    threshold: float = param(0.5, low=0.0, high=1.0,
                             help="The micro-step decoder writes another token of the slot while its probability "
                                  "reaches this.")


@register_strategy("hamburger", params=HamburgerParams, papers=(bib.LIU_ZHANG_2025,), models=tuple(HAMBURGER_MODELS),
                   help="HAMburger: a micro-step decoder writes several tokens per big forward; they are smashed into "
                        "one cache slot (model tiny-ar-hamburger)")
def hamburger(ctx: RunContext, params: HamburgerParams, outcome: Outcome) -> Iterator[Event]:
    from decoding.token.hamburger_model import load_parts

    lm = ctx.lm
    folder = needs_model("hamburger", lm, HAMBURGER_MODELS)
    parts = load_parts(folder)
    if params.group > parts.config.group:
        raise ValueError(f"`group` must be at most {parts.config.group} (what {lm.name} was trained for), "
                         f"got {params.group}")
    figures = trained_figures(folder)
    embed, head = lm.model.get_input_embeddings(), lm.model.get_output_embeddings()
    out = lm.prefill(ctx.prompt_ids, output_hidden_states=True)  # the prompt: one slot per token
    cache, position, slot, written = out.cache, len(ctx.prompt_ids) - 1, 0, 0
    hidden = out.hidden[0, -1]  # (D,) normed output at the last slot
    with torch.inference_mode():
        while True:
            logits = out.logits[0, -1].float()  # (V,)
            chosen, rows, micro_probs = [int(logits.argmax())], [logits], [None]
            state = hidden.float()[None]  # (1, D)
            limit = min(params.group, ctx.max_new_tokens - written)
            while len(chosen) < limit and chosen[-1] not in lm.stop_ids:
                state = parts.micro.step(embed(torch.tensor([chosen[-1]], device=lm.device)).float(), state)
                step_logits = head(parts.micro.features(state).to(head.weight.dtype))[0].float()  # (V,)
                token = int(step_logits.argmax())
                prob = F.softmax(step_logits, -1)[token].item()
                if prob < params.threshold:
                    break
                chosen.append(token)
                rows.append(step_logits)
                micro_probs.append(round(prob, 4))
            extras = [{"slot": slot, "slot_size": len(chosen), "in_slot": i, "micro_prob": micro_probs[i],
                       "group": params.group, "prompt_slots": len(ctx.prompt_ids)} for i in range(len(chosen))]
            if (yield from write_group(ctx, outcome, written, chosen, rows, extras, figures)):
                return
            written += len(chosen)
            if outcome.cancelled(ctx):
                return
            position += len(chosen)
            ids = torch.tensor([chosen], device=lm.device)  # (1, n)
            at = torch.tensor([[position]], device=lm.device)  # a slot sits at its last token's position
            if len(chosen) == 1:  # a one-token slot is the token itself: exactly the model's own step
                out = lm.forward(ids, cache, position_ids=at, output_hidden_states=True)
            else:
                smashed = parts.smasher(embed(ids).float(), torch.tensor([len(chosen)]))  # (1, D)
                out = lm.forward(None, cache, inputs_embeds=smashed[:, None].to(embed.weight.dtype), position_ids=at,
                                 output_hidden_states=True)
            cache, hidden, slot = out.cache, out.hidden[0, -1], slot + 1


# ---------------------------------------------------------------- FTP


@dataclass(frozen=True)
class FtpParams(Params):
    threshold: float = param(0.5, low=0.0, high=1.0,
                             help="A token runs a block when the router scores it at least this (0 = every block: "
                                  "tiny-ar itself). The router was trained at 0.5.")


@register_strategy("ftp", params=FtpParams, papers=(bib.LI_2024_FTP,), models=("tiny-ar",),
                   help="FTP: a trained router lets each token skip the decoder blocks it scores low (tiny-ar with its "
                        "router)")
def ftp(ctx: RunContext, params: FtpParams, outcome: Outcome) -> Iterator[Event]:
    from decoding.token.ftp_router import ROUTERS, load_router, routed

    lm = ctx.lm
    folder = needs_model("ftp", lm, ROUTERS)
    router = load_router(folder)
    figures = trained_figures(folder)
    blocks = lm.num_layers
    record: list = []
    with routed(lm.model, router, params.threshold, record):  # the prompt: routed too, in one call
        out = lm.prefill(ctx.prompt_ids)
    prompt_ran = sum(ran.sum().item() for _, ran, _ in record)
    for step in range(ctx.max_new_tokens):
        logits = out.logits[0, -1]  # (V,)
        token = int(logits.argmax())
        last = record[-blocks:]  # the call that computed these logits, one entry per block
        extra = {"blocks": [int(ran[0, -1]) for _, ran, _ in last], "scores": [round(s[0, -1].item(), 4) for _, _, s in last],
                 "threshold": params.threshold, "num_blocks": blocks}
        if step == 0:
            extra["prompt_density"] = round(prompt_ran / (blocks * len(ctx.prompt_ids)), 4)
            card = figures.get(f"{params.threshold:g}") or figures.get(str(float(params.threshold)))
            if card:  # the card measured this threshold: its held-out figures against tiny-ar (threshold 0)
                extra["trained"] = {k: card.get(k) for k in ("val_loss", "agree", "density")} | {
                    "val_loss_tiny_ar": (figures.get("0.0") or {}).get("val_loss")}
        yield token_event(ctx, ctx.step_offset + step, token, logits, point_mass(logits, token), 1, extra)
        if outcome.add(ctx, token) or step + 1 >= ctx.max_new_tokens or outcome.cancelled(ctx):
            return
        record.clear()
        with routed(lm.model, router, params.threshold, record):
            out = lm.forward(torch.tensor([[token]], device=lm.device), out.cache)
