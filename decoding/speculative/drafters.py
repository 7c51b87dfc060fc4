"""Drafters that run a model: a separate draft model, or the target's first layers (early exit).

Papers followed
    Leviathan et al. 2023 / Chen et al. 2023 (a small draft model sharing the tokenizer);
    Elhoushi et al. 2024, "LayerSkip" (self-speculation: the first L layers of the target draft,
    their KV shared in spirit; here the exit model is a view on the same weights);
    Entezari Zarch et al. 2025, "DEL: Context-Aware Dynamic Exit Layer for Efficient Self-Speculative
    Decoding" (pick the exit layer and draft length per round from the acceptance each layer
    would have had on the tokens just verified);
    Li et al. 2024, "EAGLE-2" and Xiong et al. 2024, "DySpec" (dynamic trees grown by the
    cumulative draft probability under a node budget); Chen et al. 2024, "Sequoia" and Jeon et
    al. 2024, "Recursive Speculative Decoding: Accelerating LLM Inference via Sampling Without
    Replacement" (RSD: siblings sampled without replacement, Gumbel-top-k, then recursive
    rejection sampling: the default rule "rsd"); Sun et al. 2023, "SpecTr: Fast Speculative
    Decoding via Optimal Transport" (rule "spectr": siblings drawn i.i.d. from q, with
    replacement, for its k-sequential selection). Both are lossless; see
    `decoding.speculative.verify`. How the dynamic tree stays lossless when sampling: `allot_children`. The
    confidence cut-off of a chain (transformers' `assistant_confidence_threshold`): drafting stops after a token
    whose draft probability is below the threshold; the draft's length is then a stopping time of the draft itself,
    which keeps chain verification lossless (each position is still judged against q).

Glossary
    plan        the tree shape for this round: chain, static (full width-ary tree) or dynamic;
                it carries the run's stop check, asked before every draft forward pass.
    level       one draft forward pass: all frontier nodes are expanded at once (tree attention).
    exit layer  L in 1..num_layers-1: draft logits = LM head(final norm(hidden state of layer L)).
"""

from __future__ import annotations

import copy
import heapq
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from decoding.contracts import never
from decoding.speculative.base import Drafter, Feedback
from decoding.lm import LM, crop_cache
from decoding.models import LoadedModel
from decoding.sampling import tempered
from decoding.speculative.verify import ROOT, RULES, DraftTree

TOP_RECORDED = 8  # top tokens of p and q recorded per expanded position
OBSERVED_ROWS = 4  # verified positions DEL scores per round
PREFILL_ROWS = 16  # prompt positions DEL scores before the first round (its first estimate)
SCORED_TOKENS = 64  # DEL scores each candidate layer on the target's top tokens only (a cheap LM head)


@dataclass(frozen=True)
class TreePlan:
    shape: str = "chain"  # "chain", "static" or "dynamic"
    depth: int = 4  # draft length (chain) / maximum depth (trees)
    width: int = 2  # children per node (static) / frontier kept per level (dynamic)
    budget: int = 16  # maximum nodes in a tree
    confidence: float = 0.0  # chain: stop drafting after a token whose draft probability is below this
    should_stop: Callable[[], bool] = field(default=never, compare=False, repr=False)  # the run's Stop: a
    #                                  drafter asks before each model call and returns the draft it has
    rule: str = "rsd"  # how sampled siblings are drawn: "rsd" without replacement, "spectr" i.i.d. (RULES)

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"`rule` must be one of {', '.join(RULES)}, got {self.rule!r}")


@dataclass
class Draft:
    tree: DraftTree
    q_dists: dict[int, torch.Tensor] = field(default_factory=dict)  # parent -> (V,) draft distribution there
    forward_passes: int = 0
    seconds: float = 0.0
    info: dict = field(default_factory=dict)  # drafter state for the event (exit layer, ...)


def gumbel_top_k(logq: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """k distinct tokens sampled without replacement from softmax(logq), in draw order (Gumbel-top-k)."""
    u = torch.rand(logq.shape, generator=generator, dtype=torch.float64).clamp_(1e-12, 1 - 1e-12)
    logq = logq.to(u.device)  # where the generator lives (a CPU generator draws on the CPU)
    finite = torch.isfinite(logq)
    keys = (logq.double() - torch.log(-torch.log(u))).masked_fill_(~finite, -math.inf)
    return keys.topk(min(k, int(finite.sum()))).indices.tolist()


def iid_draws(logq: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """k tokens drawn i.i.d. from softmax(logq), with replacement (SpecTr's drafts; repeats allowed)."""
    probs = torch.softmax(logq.double(), -1)  # (V,)
    if generator is not None:  # draw where the generator lives (a CPU one cannot draw for CUDA tensors)
        probs = probs.to(generator.device)
    return torch.multinomial(probs, k, replacement=True, generator=generator).tolist()


def shallow_view(model: torch.nn.Module, num_layers: int) -> torch.nn.Module:
    """The same model cut after `num_layers` decoder layers, sharing every weight (no copy).

    transformers' decoders loop over `layers[:config.num_hidden_layers]`, so a config copy
    with fewer layers on shallow module copies is enough; the final norm and LM head run on the
    last kept layer, which is exactly the early-exit head.
    """
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:num_layers]
    base = copy.copy(model.model)
    base._modules = base._modules.copy()
    base.config = config
    top = copy.copy(model)
    top._modules = top._modules.copy()
    top._modules["model"] = base
    top.config = config
    return top


class ModelDrafter(Drafter):
    """Drafts with a causal LM over the target's vocabulary, one forward pass per tree level."""

    def __init__(self, lm: LM, name: str):
        self.lm, self.name = lm, name
        self.cache, self.cached_ids = None, []

    def bytes_per_position(self) -> int:
        from decoding.speculative.memory import kv_bytes_per_position

        return kv_bytes_per_position(self.lm.config, self.lm.model.dtype)  # its own cache, one entry per position

    def _sync(self, context: list[int]) -> list[int]:
        """Crop the draft cache to its common prefix with the context; return the ids to feed."""
        keep = 0
        for a, b in zip(self.cached_ids, context[:-1]):
            if a != b:
                break
            keep += 1
        if self.cache is None:
            from transformers import DynamicCache

            self.cache = DynamicCache(config=self.lm.config)
        elif keep < self.cache.get_seq_length():
            crop_cache(self.cache, keep)
        self.cached_ids = list(context[:-1])
        return list(context[keep:])

    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
        t0 = time.perf_counter()
        feed = DraftFeed(self, context)
        draft = grow_tree(feed.expand, plan, temperature, generator)
        feed.finish(context)
        draft.seconds = time.perf_counter() - t0
        return draft
    # observe: a draft model learns nothing between rounds (the base's no-op)


class DraftFeed:
    """One propose call's feeding of a `ModelDrafter`'s cache: its first call also feeds the context tokens the
    cache lacks, each later call only the tree nodes added since (a drafter asked at some levels only, as S2D's
    sub-models are, catches up on the nodes it missed); `finish` drops the tree again."""

    def __init__(self, drafter: ModelDrafter, context: list[int]):
        self.drafter, self.pending, self.fed = drafter, drafter._sync(context), 0

    def expand(self, tree: DraftTree, frontier: list[int]) -> torch.Tensor:
        d = self.drafter
        out = d.lm.forward_tree(self.pending, tree.parents, tree.tokens, d.cache, cached_nodes=self.fed)
        self.fed, self.pending = len(tree), []
        return out.logits[0, -len(frontier):]  # (F, V): one row per frontier node (the root first)

    def finish(self, context: list[int]) -> None:
        if self.pending:  # never called (Stop came first, or not asked): the cache holds only the common prefix
            self.drafter.cached_ids = list(context[:len(context) - len(self.pending)])
        else:
            crop_cache(self.drafter.cache, len(context) - 1)  # keep context[:-1]; drop the draft tree


Expand = Callable[[DraftTree, list[int]], torch.Tensor]  # (tree, frontier nodes) -> (F, V) draft logits


def grow_tree(expand: Expand, plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
    """Grow a draft tree level by level: one `expand` call (one draft forward pass) per level.

    The decision is kept apart from the model call so tests can drive it with hand-made logits.
    Each level first decides HOW MANY children every frontier node gets (`allot_children`),
    from what is known before any child is drawn, then draws them: greedily (top-k of q) at
    temperature 0, otherwise from q in draw order: without replacement (Gumbel-top-k) under
    rule rsd, i.i.d. with replacement under rule spectr (`plan.rule`, recorded on the tree).
    """
    greedy = temperature == 0
    draw = iid_draws if plan.rule == "spectr" else gumbel_top_k
    draft = Draft(DraftTree(rule=plan.rule))
    tree = draft.tree
    frontier = [ROOT]
    scores: dict[int, float] = {ROOT: 0.0}  # cumulative draft log-prob of each node's path
    for _ in range(plan.depth):
        if not frontier or len(tree) >= plan.budget or plan.should_stop():  # Stop: the draft so far
            break
        logits = expand(tree, frontier)  # (F, V)
        draft.forward_passes += 1
        logqs = torch.log_softmax(logits.float() if greedy else tempered(logits.float(), temperature), -1)  # (F, V)
        counts = allot_children(logqs, [scores[n] for n in frontier], plan, budget=plan.budget - len(tree))
        next_frontier = []
        for logq, parent, count in zip(logqs, frontier, counts):
            draft.q_dists[parent] = logq.exp()
            if count == 0:
                continue
            picks = logq.topk(count).indices.tolist() if greedy else draw(logq, count, generator)
            if not greedy:
                tree.sibling_q[parent] = draft.q_dists[parent]
            for token in picks:
                node = tree.add(parent, token, logq[token].exp().item())
                scores[node] = scores[parent] + logq[token].item()
                next_frontier.append(node)
        frontier = next_frontier
        if plan.shape == "chain" and frontier and tree.q_token[frontier[0]] < plan.confidence:
            break  # the drafter is unsure of its last token: later ones would rarely be accepted
    return draft


def allot_children(logqs: torch.Tensor, parent_scores: list[float], plan: TreePlan, budget: int) -> list[int]:
    """How many children each frontier node gets this level: decided before any child is drawn.

    chain: one child for the (single) frontier node; static: `width` children each; both within
    the node budget. dynamic (EAGLE-2's best-first expansion, Li et al. 2024; DySpec, Xiong et al.
    2024): `width` child slots for the whole level, given one at a time to the parent whose next
    slot scores best, a slot i of a parent scoring  parent's cumulative log q + log of its i-th
    largest q  (the i-th child's log q when drafting greedily, its best case when sampling).

    Why not score the drawn children themselves, as EAGLE-2 does greedily: with sampling, a
    child whose presence depends on its own drawn value is no longer a draw from q, and the
    multi-candidate verification (SpecInfer, Miao et al. 2024; Sequoia, Chen et al. 2024; RSD,
    Jeon et al. 2024; SpecTr's K-SEQ, Sun et al. 2023) is only lossless for children drawn from q
    (without replacement, or i.i.d. for SpecTr) in a number fixed in advance.
    Here the counts depend on the parents (already in the tree) and on q, never on the draws,
    so a sampled dynamic tree follows the target's distribution exactly; greedy trees are the
    same as EAGLE-2's.
    """
    num_parents, vocab = logqs.shape
    if plan.shape == "chain":
        return [min(1, budget)] + [0] * (num_parents - 1)
    per_parent = min(plan.width, vocab)
    if plan.shape == "static":
        counts = []
        for _ in range(num_parents):
            counts.append(min(per_parent, budget))
            budget -= counts[-1]
        return counts
    sorted_logq = logqs.topk(per_parent, dim=-1).values.tolist()  # (F, width) best first
    counts = [0] * num_parents
    heap = [(-(score + row[0]), g) for g, (score, row) in enumerate(zip(parent_scores, sorted_logq))]
    heapq.heapify(heap)
    for _ in range(min(plan.width, budget)):
        if not heap:
            break
        _, g = heapq.heappop(heap)
        counts[g] += 1
        if counts[g] < per_parent and math.isfinite(sorted_logq[g][counts[g]]):
            heapq.heappush(heap, (-(parent_scores[g] + sorted_logq[g][counts[g]]), g))
    return counts


class EarlyExitDrafter(ModelDrafter):
    """Self-speculation: the target's first `exit_layer` layers draft (LayerSkip-style).

    With `exit_layer=0` the layer and the draft length are chosen every round (DEL): after each
    verification the target's hidden states tell, for every candidate layer, how often its
    early-exit head agreed with the target at the positions just verified (scored on the
    target's top-64 tokens, so the check costs almost nothing); a running mean per layer,
    alpha_l, picks the layer l and length k maximising expected tokens per unit of compute,
    (1 - alpha^(k+1)) / (1 - alpha) / (1 + k * cost_l), where cost_l is the parameter share of a
    draft step (l layers plus the LM head) in a full step. k = 0 (no draft) wins when no layer
    pays for itself, and the estimates keep updating from the verified rows.
    """

    def __init__(self, target: LM, exit_layer: int = 0, candidate_layers: list[int] | None = None, max_depth: int = 4):
        num_layers = target.num_layers
        if exit_layer and not 1 <= exit_layer < num_layers:
            raise ValueError(f"`exit_layer` must be in [1, {num_layers - 1}] (or 0 = dynamic), got {exit_layer}")
        self.target = target
        self.dynamic = exit_layer == 0
        default = sorted({max(1, round(num_layers * f)) for f in (0.4, 0.55, 0.7, 0.8, 0.9)} - {num_layers})
        self.candidates = [exit_layer] if exit_layer else (candidate_layers or default)
        self.alpha = {layer: None for layer in self.candidates}  # running acceptance estimate per layer
        self.views = {}
        self.layer = self.candidates[-1] if self.dynamic else exit_layer
        self.length: int | None = None  # chosen draft length (dynamic only; 0 = no draft)
        self.max_depth = max_depth  # longest draft DEL may choose
        self.prefill_rows = PREFILL_ROWS if self.dynamic else 0  # seed alpha_l from the prompt's last rows
        model = target.model
        layer_params = sum(p.numel() for p in model.model.layers[0].parameters())
        head_params = model.get_output_embeddings().weight.numel()
        self.cost = {n: (n * layer_params + head_params) / (num_layers * layer_params + head_params)
                     for n in self.candidates}
        self._use(self.layer)

    def bytes_per_position(self) -> int:
        """Each candidate exit keeps its own cache of its first layers (DEL may use several)."""
        from decoding.speculative.memory import kv_bytes_per_position

        model = self.target.model
        per_layer = kv_bytes_per_position(self.target.config, model.dtype) // self.target.num_layers
        return per_layer * sum(self.candidates)

    def _use(self, layer: int) -> None:
        if layer not in self.views:
            loaded = self.target.loaded
            view = LoadedModel(f"{loaded.name}@L{layer}", shallow_view(loaded.model, layer), loaded.tokenizer,
                               loaded.device, loaded.dtype, loaded.source)
            self.views[layer] = ModelDrafter(LM(view), f"early-exit@L{layer}")
        self.layer = layer
        self.current = self.views[layer]

    @property
    def name(self) -> str:
        return self.current.name if self.length != 0 else "early-exit (no draft)"

    def propose(self, context, plan, temperature, generator) -> Draft:
        if self.dynamic and self.length is not None:
            plan = replace(plan, depth=self.length)
        if plan.depth == 0:
            draft = Draft(DraftTree())
        else:
            draft = self.current.propose(context, plan, temperature, generator)
        draft.info |= {"exit_layer": self.layer, "draft_length": plan.depth,
                       "alpha": {str(k): (round(v, 4) if v is not None else None) for k, v in self.alpha.items()}}
        return draft

    @property
    def needs_hidden_states(self) -> bool:
        return self.dynamic

    @torch.inference_mode()
    def observe(self, feedback: Feedback) -> None:
        """Update alpha_l from the verification pass, then choose next round's layer and length."""
        hidden_states, rows, target_probs, greedy = feedback.hidden_states, feedback.rows, feedback.target_probs, feedback.greedy
        if not self.dynamic or hidden_states is None or not rows:
            return
        limit = max(OBSERVED_ROWS, len(rows) if len(rows) == self.prefill_rows else 0)
        rows, p = rows[:limit], target_probs[:limit]  # (R, V) at the first verified rows
        top_p, top = p.topk(min(SCORED_TOKENS, p.shape[-1]), -1)  # (R, S) sorted: column 0 is the target's argmax
        head = self.target.model.get_output_embeddings()
        weights = head.weight[top]  # (R, S, D)
        for layer in self.candidates:
            h = self.target.final_norm(hidden_states[layer][0, rows])  # (R, D)
            logits = torch.einsum("rd,rsd->rs", h.to(weights.dtype), weights).float()  # (R, S)
            if getattr(head, "bias", None) is not None:
                logits = logits + head.bias[top].float()
            if greedy:
                agree = (logits.argmax(-1) == 0).double().mean().item()
            else:
                agree = torch.minimum(top_p.float(), torch.softmax(logits, -1)).sum(-1).mean().item()
            old = self.alpha[layer]
            self.alpha[layer] = agree if old is None else 0.7 * old + 0.3 * agree
        best = max((self._value(n, k), n, k) for n in self.candidates for k in range(0, self.max_depth + 1))
        self.length = best[2]
        if best[2]:
            self._use(best[1])

    def _value(self, layer: int, k: int) -> float:
        """Expected tokens per unit of compute for k draft tokens from `layer` (k = 0: plain decoding)."""
        a = min(self.alpha[layer] or 0.0, 0.999)
        expected = (1 - a ** (k + 1)) / (1 - a)
        return expected / (1 + k * self.cost[layer])
