"""Strategy `ttt`: test-time training on the prompt's context (qTTT), or the same compute spent thinking in context.

Paper: Bansal et al. 2025, "Let's (not) just put things in Context: Test-Time Training for Long-Context LLMs"
(arXiv 2512.13898). As the context grows, the attention a query gives the one key that matters is diluted by the many
that do not (score dilution), and generating more tokens with the same static attention cannot undo it. The paper's
query-only test-time training (qTTT) prefills the context once, keeps its keys and values, and takes a few gradient
steps of next-token loss on short spans of the context that update only the query projections W_Q; then it answers.
It compares against "thinking" tokens at matched FLOPs: T_think ~ 2 * N_TTT * k (steps times span length).

    train   prefill the context once with the model as loaded (keys and values frozen from here on); `steps` times,
            draw a span of `span_tokens` positions at random from the context and take one Adam step on its mean
            next-token loss, the span's queries attending to the frozen keys and values of everything up to its end
            (`adapt.FrozenKV`), gradients reaching only the `modules` of the chosen `layers` (`query`: W_Q, the
            paper's choice; `lora_rank` > 0: a LoRA on them instead); then feed the question with the trained weights
            on the same cache and answer (greedy, or at `temperature`).
    think   no training: the whole prompt, "Let me think step by step." fed as the start of the answer, up to
            `think_tokens` generated tokens, stop tokens kept out (0: as many as `train` with the same `steps` and
            `span_tokens` would spend in FLOPs), then "So the answer is:" fed and the answer. The paper's in-context
            baseline at equal compute.

The shared model is never written: the run trains its own copies of the chosen projections inside a per-run view of
the model (`adapt.adapted_view`), so another request running at the same time sees the loaded weights, and nothing
needs restoring when the run ends, is stopped or fails (its copies are dropped with it).

Each gradient step is a TrainStep event (its loss before the update, the span, tokens trained so far, the gradient
norm); each generated token is a TokenStep (`extra.part`: "think" or "answer"). The finish record's `extra` holds the
answer, the losses, and the compute in FLOPs (`adapt.FlopCounter`: prefill, training, thinking, answer) and in
decoded-token equivalents (`compute_tokens`: FLOPs over one decoded token's at the end of the context), with the
paper's rule 2 * steps * span beside it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event, TrainStep
from decoding.lm import LM
from decoding.longctx.adapt import (FlopCounter, FrozenKV, LoRALinear, adapted_view, check_full_attention, own_copy,
                                    target_names)
from decoding.longctx.document import SEPARATOR
from decoding.params import Params, param
from decoding.registry import register_strategy
from decoding.token.autoregressive import pick_token, token_event

MODES = ("train", "think")
MODULES = {"query": "self_attn.q_proj", "mlp-down": "mlp.down_proj"}
LAYERS = ("all", "last-half", "first-half")
THINK_CUE, ANSWER_CUE = "Let me think step by step.", "\nSo the answer is:"
MAX_GRAD_NORM = 1.0  # gradients are clipped to this norm before each step
MAX_THINK_TOKENS = 8192


@dataclass(frozen=True)
class TttParams(Params):
    mode: str = param("train", choices=MODES,
                      help="train: gradient steps on spans of the context, then answer (qTTT); think: no training, "
                           "thinking tokens in context before the answer, at the same compute.")
    steps: int = param(16, low=0, high=256, help="Gradient steps (N_TTT), one span each; 0 answers untrained.")
    span_tokens: int = param(128, low=4, high=2048,
                             help="Tokens per span (k): one span drawn at random from the context per step.")
    lr: float = param(1e-3, low=0.0, high=1.0, low_inclusive=False, step=1e-4, ui_high=0.02,
                      help="Adam's learning rate (the slider stops at 0.02; up to 1 from the CLI or API).")
    modules: str = param("query", choices=tuple(MODULES),
                         help="query: the attention query projections W_Q (the paper's qTTT); mlp-down: the MLP down "
                              "projections (not the paper's choice).")
    layers: str = param("all", choices=LAYERS, help="Which layers' projections train (the paper: all).")
    lora_rank: int = param(0, low=0, high=64, help="0 trains the full matrices; r > 0 a rank-r LoRA on them.")
    think_tokens: int = param(0, low=0, high=MAX_THINK_TOKENS, off_means="matched",
                              help="think: thinking tokens before the answer; 0 = the FLOPs that train would spend "
                                   "with the same steps and span.")
    temperature: float = param(0.0, low=0.0, high=5.0, help="0 answers greedily; above 0 samples at this temperature.")


def context_end(lm, ids: list[int]) -> int:
    """Where the context ends in the prompt's ids: after the last blank line (the question is the last paragraph),
    at most len(ids) - 1 so that something is fed after training; 0 without a blank line."""
    for i in range(len(ids) - 1, -1, -1):
        if SEPARATOR in lm.decode(ids[i:]):  # the blank line starts in token i
            end = i + 1
            while end < len(ids) - 1 and SEPARATOR not in lm.decode(ids[i:end]):  # it may end in a later token
                end += 1
            return min(end, len(ids) - 1)
    return 0


class Plan:
    """What a run trains and what that costs, resolved once."""

    def __init__(self, lm, params: TttParams, prompt_tokens: int, context: int):
        self.names = target_names(lm.model, MODULES[params.modules], params.layers)
        modules = dict(lm.model.named_modules())
        width = [(modules[n].in_features, modules[n].out_features) for n in self.names]
        r = params.lora_rank
        self.trained_parameters = sum(r * (i + o) if r else i * o + (o if modules[n].bias is not None else 0)
                                      for n, (i, o) in zip(self.names, width))
        self.lowest_layer = min(int(n.split("layers.")[1].split(".")[0]) for n in self.names)
        self.flops = FlopCounter(lm.model)
        self.span = max(0, min(params.span_tokens, context - 1))  # a span and the token after it lie in the context
        self.steps = params.steps if self.span else 0  # no context (no blank line): nothing to train on
        mean_end = (context - self.span - 1) / 2 + self.span  # spans start uniformly at random
        self.step_flops = self.flops.train_step(self.span, int(mean_end), self.trained_parameters,
                                                self.lowest_layer) if self.steps else 0
        self.unit = self.flops.per_token(context)  # one decoded token at the end of the context
        self.think_tokens = params.think_tokens or self.matched_think(prompt_tokens + 8)

    def matched_think(self, position: int) -> int:
        """Decoded tokens after `position` whose FLOPs reach the training's (`steps` spans)."""
        budget, spent, n = self.steps * self.step_flops, 0, 0
        while spent < budget and n < MAX_THINK_TOKENS:
            spent += self.flops.per_token(position + n)
            n += 1
        return n


class Answerer:
    """Decode tokens on a cache: feed, choose, record (each a TokenStep with its part)."""

    def __init__(self, ctx: RunContext, outcome: Outcome, lm, cache, temperature: float, calls: int):
        self.ctx, self.outcome, self.lm, self.cache, self.temperature = ctx, outcome, lm, cache, temperature
        self.calls, self.logits, self.step, self.done = calls, None, ctx.step_offset, False
        self.fed = 0  # tokens fed after the context (for the FLOP count)

    def feed(self, ids: list[int]) -> bool:
        if self.outcome.cancelled(self.ctx):
            self.done = True
            return False
        out = self.lm.forward(torch.tensor([ids], device=self.lm.device), self.cache, last_only=True)
        self.cache, self.logits = out.cache, out.logits[0, -1]  # (V,)
        self.calls += 1
        self.fed += len(ids)
        if self.lm is not self.ctx.lm:  # the run's trained view: its calls are the run's model calls too
            self.ctx.lm.forward_passes += 1
        return True

    def part(self, name: str, limit: int, fill: bool) -> Iterator[Event]:
        """Up to `limit` tokens. A stop token ends the run; with `fill` stop tokens are kept out, so the part spends
        its whole budget (as transformers' `min_new_tokens` keeps EOS out: thinking at matched compute)."""
        generated: list[int] = []
        while len(generated) < limit and not self.done:
            raw = self.logits
            token, final = pick_token(raw, self.temperature, self.ctx.generator, self.lm.stop_ids if fill else ())
            yield token_event(self.ctx, self.step, token, raw, final, forward_passes=self.calls, extra={"part": name})
            self.calls, self.step = 0, self.step + 1
            generated.append(token)
            if self.outcome.add(self.ctx, token) or self.step - self.ctx.step_offset >= self.ctx.max_new_tokens:
                self.done = True
            elif not self.feed([token]):
                break
        self.text = self.lm.decode(generated).strip()


@register_strategy("ttt", params=TttParams, family="longctx", uses_seed=True,
                   help="test-time training on the context: gradient steps on spans of it (the query projections, "
                        "qTTT), then the answer; or the same compute as thinking tokens in context",
                   papers=(bib.BANSAL_2025,))
def ttt(ctx: RunContext, params: TttParams, outcome: Outcome) -> Iterator[Event]:
    lm = ctx.lm
    check_full_attention(lm.config)
    ids = list(ctx.prompt_ids)
    context = context_end(lm, ids)
    plan = Plan(lm, params, len(ids), context)
    cue = lm.tokenizer(THINK_CUE, add_special_tokens=False)["input_ids"] if params.mode == "think" else []
    if params.mode == "think" and plan.think_tokens >= ctx.max_new_tokens:
        raise ValueError(f"`think_tokens` resolves to {plan.think_tokens} thinking tokens, which leaves no room for an "
                         f"answer within `max_new_tokens` {ctx.max_new_tokens}; raise `max_new_tokens` to at least "
                         f"{plan.think_tokens + 8}, or lower `steps`, `span_tokens` or `think_tokens`")
    lm.check_fits(len(ids) + len(cue), ctx.max_new_tokens, lookahead=len(cue) and 8)  # 8: the answer's cue
    outcome.extra.update(mode=params.mode, context_tokens=context, prompt_tokens=len(ids),
                         trained_modules=len(plan.names), trained_parameters=plan.trained_parameters,
                         span_tokens=plan.span, paper_think_tokens=2 * plan.steps * plan.span)
    if params.mode == "think":
        yield from _think(ctx, params, outcome, plan, ids, cue)
    else:
        yield from _train_then_answer(ctx, params, outcome, plan, ids, context)


def _prefill(lm, ids: list[int]) -> tuple[DynamicCache, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The context's cache from the model as loaded (one model call), and its keys and values per layer as ordinary
    tensors (the cache's are inference-mode tensors, which the training steps' backward pass cannot save)."""
    cache = lm.forward(torch.tensor([ids], device=lm.device), None, last_only=True).cache
    return cache, [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def _train_then_answer(ctx, params, outcome, plan: Plan, ids: list[int], context: int) -> Iterator[Event]:
    lm = ctx.lm
    modules = dict(lm.model.named_modules())
    own = {n: LoRALinear(modules[n], params.lora_rank, ctx.generator) if params.lora_rank else own_copy(modules[n])
           for n in plan.names}
    trained = [p for m in own.values() for n, p in m.named_parameters() if not n.startswith("base.")]
    view = adapted_view(lm.model, own)  # the run's model: the shared one with the run's own projections
    optimizer = torch.optim.Adam(trained, lr=params.lr)
    losses: list[float] = []
    tokens = 0
    try:
        if outcome.cancelled(ctx):
            return
        cache, keys_values = _prefill(lm, ids[:context]) if context else (DynamicCache(config=lm.config), [])
        calls = 1 if context else 0
        for step in range(plan.steps):
            if outcome.cancelled(ctx):
                return
            start = int(torch.randint(0, context - plan.span, (1,), generator=ctx.generator))
            end = start + plan.span
            with torch.enable_grad():
                out = view(input_ids=torch.tensor([ids[start:end]], device=lm.device),
                           past_key_values=FrozenKV(keys_values, start, end),
                           position_ids=torch.arange(start, end, device=lm.device)[None], use_cache=True)
                loss = F.cross_entropy(out.logits[0].float(), torch.tensor(ids[start + 1:end + 1], device=lm.device))
                grads = torch.autograd.grad(loss, trained)  # the run's parameters only: nothing lands on shared ones
            lm.forward_passes += 1  # a model call made outside `lm.forward` (which runs in inference mode)
            norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
            scale = min(1.0, MAX_GRAD_NORM / (norm + 1e-6))
            for p, g in zip(trained, grads):
                p.grad = g * scale
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            tokens += plan.span
            losses.append(float(loss.detach()))
            yield TrainStep(step=step, loss=max(0.0, losses[-1]), span_start=start, span_tokens=plan.span,
                            tokens_trained=tokens, grad_norm=norm, elapsed_s=ctx.elapsed(), forward_passes=calls + 1)
            calls = 0
        answer_lm = LM(dataclasses.replace(lm.loaded, model=view))  # answers with the trained projections
        answerer = Answerer(ctx, outcome, answer_lm, cache, params.temperature, calls)
        if answerer.feed(ids[context:]):
            yield from answerer.part("answer", ctx.max_new_tokens, fill=False)
        answer = getattr(answerer, "text", "")
        _finish(outcome, plan, context, tokens, losses, answer, answerer.fed, think=0)
    finally:  # the run's copies go with it; the shared model was never written
        optimizer.zero_grad(set_to_none=True)
        del view, own, trained


def _think(ctx, params, outcome, plan: Plan, ids: list[int], cue: list[int]) -> Iterator[Event]:
    lm = ctx.lm
    answerer = Answerer(ctx, outcome, lm, DynamicCache(config=lm.config), params.temperature, 0)
    if not answerer.feed(ids + cue):
        return
    yield from answerer.part("think", plan.think_tokens, fill=True)
    thought = len(outcome.token_ids)
    answer = ""
    if not answerer.done and answerer.feed(lm.tokenizer(ANSWER_CUE, add_special_tokens=False)["input_ids"]):
        yield from answerer.part("answer", ctx.max_new_tokens - thought, fill=False)
        answer = answerer.text
    _finish(outcome, plan, len(ids), 0, [], answer, answerer.fed - len(ids), think=thought)


def _finish(outcome: Outcome, plan: Plan, context: int, tokens: int, losses: list[float], answer: str, fed: int,
            think: int) -> None:
    """The answer and the compute of what ran (FLOPs and decoded-token equivalents)."""
    flops = plan.flops
    steps = len(losses)
    prefill = flops.forward(context, 0)
    train = steps * plan.step_flops
    after = flops.forward(fed, context)  # the question, the cues and every generated token, after the context
    total = prefill + train + after
    outcome.extra.update(
        answer=answer, steps_run=steps, tokens_trained=tokens, think_tokens=think, planned_think_tokens=plan.think_tokens,
        losses=[round(x, 4) for x in losses],
        flops={"prefill": prefill, "train": train, "after_context": after, "total": total},
        compute_tokens=math.ceil(total / plan.unit), train_compute_tokens=math.ceil(train / plan.unit))
