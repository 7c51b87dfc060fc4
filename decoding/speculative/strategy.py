"""Speculative decoding: a drafter proposes a token tree, the target verifies it in one call.

Papers followed: see `decoding.speculative.verify` (Leviathan et al. 2023, Chen et al. 2023, SpecInfer,
Sequoia, RSD, SpecTr: the verification `rule`), `decoding.speculative.drafters` (draft model, LayerSkip
early exit, DEL, EAGLE-2 / DySpec dynamic trees), `decoding.speculative.retrieval` (prompt lookup, Token
Recycling), `decoding.speculative.eagle` (EAGLE's feature-level head) and `decoding.speculative.deer`
(DEER: a diffusion model drafts a block in one pass).

Glossary
    round     draft a tree, verify it with ONE target forward pass (tree attention), keep the
              accepted path plus one token of the target's own.
    draft / accepted / bonus / residual / correction: see `decoding.speculative.verify`.
    pending   context tokens not yet in the target's cache, fed in front of the next round's tree: the
              prompt (or its last token) before the first round, then one token, the round's extra token.

The cache contract (`Feedback`): after a round the target's cache keeps every accepted position (a chain's
accepted prefix stays where it was; a tree's accepted path is gathered into place, `keep_path`), so it holds
the whole context but its last token, and the next verification feeds that one token before the tree. Each
`Feedback` says what the cache holds (`committed`, the `accepted` nodes), so a drafter that reads the target's
state (EAGLE's features, LongSpec's keys) never guesses it.

Stop is asked before every model call: the prefill, each draft level (`TreePlan.should_stop`)
and the verification; the round under way is dropped.

With temperature 0 (default) the output equals the target's greedy output exactly, whatever the
drafter; with temperature T > 0 the output is distributed as the target's softmax(logits / T). (A drafter's
lossy option may verify against other distributions, `Drafter.target_probs`: RAPID's `rapid.target=augmented`.)
Each round yields a SpecRound event, then one TokenStep per produced token (forward_passes 0:
the round's event carries the model calls).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from transformers import DynamicCache

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.speculative.base import Drafter, Feedback
from decoding.errors import short_repr
from decoding.events import Event, SpecRound
from decoding.lm import LM, crop_cache
from decoding.speculative.drafters import TOP_RECORDED, EarlyExitDrafter, ModelDrafter, TreePlan
from decoding.speculative.retrieval import PromptLookupDrafter, TokenRecyclingDrafter
from decoding.speculative.memory import MB, Footprint, measured_parts
from decoding.speculative.verify import ROOT, RULES, verify_tree
from decoding.params import Params, own_params, param
from decoding.registry import Registry, family_check, register_strategy
from decoding.sampling import tempered
from decoding.token.autoregressive import point_mass, token_event

MAX_DRAFT_LENGTH = 16  # the longest chain / deepest tree (adaptive chains grow up to it)
FUSED_TREE_PROMPT = 512  # a longer prompt is not verified under a tree's explicit mask (quadratic in its length)
DEFAULT_DRAFT_LENGTH = 4
# name -> factory(target, params) -> Drafter. Capabilities a drafter declares when it registers:
#   default_draft_length  the draft length when `draft_length` is 0 (a drafter whose drafts cost nothing
#                         to make drafts further: its misses cost only verification positions)
#   default_confidence    the chain's confidence cut-off when `confidence` is -1 (a separate draft model stops
#                         where it is unsure, as transformers' assisted generation does; the others never)
#   loads_draft_model     it loads a causal `draft_model` sharing the target's tokenizer (its own knob)
DRAFTERS: Registry[Callable[[LM, "SpeculativeParams"], Drafter]] = Registry(
    "drafter", capabilities={"default_draft_length": DEFAULT_DRAFT_LENGTH, "default_confidence": 0.0,
                             "loads_draft_model": False})
TREES = ("chain", "static", "dynamic")


@dataclass(frozen=True)
class SpeculativeParams(Params):
    drafter: str = param("prompt-lookup", plugins=DRAFTERS, help="Who proposes the draft tokens.")
    tree: str = param("chain", choices=TREES,
                      help="Shape of the draft: one chain, a full tree, or best-first by draft probability.")
    draft_length: int = param(0, low=0, high=MAX_DRAFT_LENGTH,
                              help="Draft tokens per chain / maximum tree depth; 0 = the drafter's own default "
                                   "(prompt-lookup 10, as transformers' prompt_lookup_num_tokens; rapid 10; model 8; "
                                   "the others 4).")
    width: int = param(2, low=1, high=8, help="Children per node (static) or nodes kept per level (dynamic).")
    node_budget: int = param(16, low=1, high=64, help="At most this many draft tokens per round.")
    adaptive: bool = param(False, help="Chains: lengthen after a fully accepted round, shorten otherwise.")
    confidence: float = param(-1.0, low=0.0, high=1.0, off=-1.0, off_means="the drafter's default",
                              help="Chains from a model: stop drafting after a token the drafter gives less than this "
                                   "probability (0 = never; -1 = the drafter's default: model and rapid 0.4, as "
                                   "transformers' assistant_confidence_threshold; the others never).")
    temperature: float = param(0.0, low=0.0, high=5.0,
                               help="0 verifies greedily; above 0 speculative sampling at this temperature.")
    rule: str = param("rsd", choices=RULES,
                      help="Sampled sibling drafts: rsd draws them without replacement and rejects recursively "
                           "(RSD/SpecInfer); spectr draws them i.i.d. and uses SpecTr's k-sequential selection. "
                           "Both are lossless; temperature 0 and deterministic drafters verify the same either way.")
    memory_budget_mb: float = param(0.0, low=0.0, high=math.inf, high_inclusive=False, note="MB; 0 = no budget",
                                    help="SpecMemo: the most memory the run may hold (weights, caches, the tree's rows); "
                                         "each round's tree is cut to fit. 0 = no budget.")
    own: Params | None = own_params()  # the chosen drafter's own knobs (`prompt-lookup.ngram`, ...)

    def __post_init__(self):
        super().__post_init__()
        if self.draft_length == 0:  # resolved once: RunStarted records the length the run uses
            object.__setattr__(self, "draft_length", DRAFTERS.capability(self.drafter, "default_draft_length"))
        if self.confidence == -1.0:  # and the cut-off it uses
            object.__setattr__(self, "confidence", DRAFTERS.capability(self.drafter, "default_confidence"))


def _not_causal(name: str) -> ValueError:
    return ValueError(f"`draft_model` {short_repr(name, 80)} is a masked diffusion model; the draft model must be a "
                      "causal (autoregressive) model sharing the target's tokenizer (e.g. tiny-ar-draft for tiny-ar)")


@dataclass(frozen=True)
class DraftModelParams(Params):
    draft_model: str = param("", note="name or hub id", help="A smaller causal model sharing the target's tokenizer "
                                                              "(e.g. tiny-ar-draft for tiny-ar).")

    def __post_init__(self):
        super().__post_init__()
        name = self.draft_model.strip()
        if not name:
            raise ValueError("`draft_model` is required: a smaller causal model sharing the target's tokenizer "
                             "(e.g. tiny-ar-draft for tiny-ar)")
        from decoding.models import REGISTRY

        spec = REGISTRY.get(name)
        if spec is not None and spec.kind != "causal":  # hub ids are checked when they load
            raise _not_causal(name)


@dataclass(frozen=True)
class NgramParams(Params):
    ngram: int = param(3, low=1, high=8, help="Longest n-gram of the context matched against earlier text.")


@dataclass(frozen=True)
class RASDParams(DraftModelParams, NgramParams):
    """RASD's knobs: the draft model and the n-gram its retrieved sequences are matched by."""


@dataclass(frozen=True)
class DiffusionDrafterParams(Params):
    draft_model: str = param("", note="diffusion model name or hub id",
                             help="A masked diffusion model sharing the target's tokenizer (empty = tiny-diffusion, "
                                  "which drafts for tiny-ar).")


@dataclass(frozen=True)
class EarlyExitParams(Params):
    exit_layer: int = param(0, low=0, high=256, note="[0, layers-1]",
                            help="Draft with the target's first L layers; 0 picks L (and the length) each round (DEL).")


@dataclass(frozen=True)
class S2DParams(Params):
    draft_model: str = param("tiny-ar-s2d", note="name or hub id",
                             help="A sorted-fine-tuned causal model sharing the target's tokenizer whose nested "
                                  "sub-models draft (tiny-ar-s2d; the target itself when it is that model).")
    threshold: float = param(0.3, low=0.0, high=1.0,
                             help="A sub-model drafts a position when its top probability reaches this; otherwise the "
                                  "next larger one is asked (the largest always answers).")
    exits: str = param("1,4", note="layer counts, ascending",
                       help="The sub-models tried, smallest first, as layer counts of the draft model (each one asked "
                            "costs its own pass: 1,4 climbs once; 1,2,3,4 can climb three times).")

    def __post_init__(self):
        super().__post_init__()
        if not self.draft_model.strip():
            raise ValueError("`draft_model` is required: a sorted-fine-tuned model such as tiny-ar-s2d")
        try:
            exits = self.exit_layers
        except ValueError:
            exits = []
        if not exits or exits != sorted(set(exits)) or exits[0] < 1:
            raise ValueError(f"`exits` must be ascending layer counts such as 1,2,3,4, got {short_repr(self.exits, 40)}")

    @property
    def exit_layers(self) -> list[int]:
        return [int(x) for x in self.exits.split(",") if x.strip()]


@DRAFTERS.register("model", help="a smaller model sharing the target's tokenizer (model.draft_model=NAME)",
                   params=DraftModelParams, loads_draft_model=True, default_draft_length=8, default_confidence=0.4,
                   papers=(bib.LEVIATHAN_2023, bib.CHEN_2023))
def _model_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    draft = _load_draft_model(lm, params.own.draft_model)
    return ModelDrafter(draft, f"model:{draft.name}")


_SAME_VOCAB: dict[tuple[int, int], tuple[bool, object, object]] = {}  # (id, id) -> (same?, the two tokenizers)


def _same_vocab(a, b) -> bool:
    """Whether two tokenizers share their vocabulary: checked once per pair of loaded tokenizers (building the
    vocabulary dicts costs ~3 ms a run). The entry holds both tokenizers, so neither id is reused meanwhile."""
    key = (id(a), id(b))
    if key not in _SAME_VOCAB:
        _SAME_VOCAB[key] = (a.get_vocab() == b.get_vocab(), a, b)
    return _SAME_VOCAB[key][0]


def _load_draft_model(lm: LM, name: str) -> LM:
    """A causal draft model sharing the target's tokenizer, on the target's device and dtype (the target itself
    when `name` is the target's)."""
    from decoding.models import load_model, model_kind

    if name == lm.loaded.name:
        return lm
    loaded = load_model(name, device=str(lm.loaded.device), dtype=str(lm.loaded.dtype).removeprefix("torch."))
    if model_kind(loaded) != "causal":
        raise _not_causal(name)
    draft = LM(loaded)
    if draft.vocab_size != lm.vocab_size or not _same_vocab(draft.tokenizer, lm.tokenizer):
        raise ValueError(f"`draft_model` {name!r} does not share the target's tokenizer "
                         f"({draft.vocab_size} vs {lm.vocab_size} vocabulary rows); pick a model of the same family")
    return draft


@DRAFTERS.register("s2d", help="S2D: the nested sub-models of a sorted-fine-tuned model draft, the smallest confident "
                               "one per position (s2d.draft_model, tiny-ar-s2d)",
                   params=S2DParams, loads_draft_model=True, papers=(bib.KAVEHZADEH_2024,))
def _s2d_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    from decoding.speculative.s2d import S2DDrafter

    own = params.own
    draft = _load_draft_model(lm, own.draft_model.strip())
    exits = own.exit_layers
    if draft is lm:  # self-speculation: the target's full depth verifies, so it never drafts
        exits = [k for k in exits if k < lm.num_layers]
    if not exits or exits[-1] > draft.num_layers:
        raise ValueError(f"`exits` {own.exits} must name layer counts in [1, {draft.num_layers - (draft is lm)}] of "
                         f"{draft.name} ({draft.num_layers} layers)")
    return S2DDrafter(draft, exits, own.threshold, f"s2d:{draft.name}")


@DRAFTERS.register("rasd", help="RASD: a draft model's tree with prompt-lookup sequences fused in, pruned by the "
                                "draft model (rasd.draft_model=NAME)", params=RASDParams, loads_draft_model=True,
                   papers=(bib.QUAN_2025,))
def _rasd_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    from decoding.speculative.rasd import RASDDrafter

    return RASDDrafter(_model_drafter(lm, params), PromptLookupDrafter(params.own.ngram), retrieved=max(2, params.width))


@DRAFTERS.register("diffusion", help="DEER: a masked diffusion model drafts the whole block in one pass "
                                     "(diffusion.draft_model; tiny-diffusion for tiny-ar, the default)",
                   params=DiffusionDrafterParams, papers=(bib.CHENG_2025,))
def _diffusion_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    from decoding.speculative.deer import diffusion_drafter

    return diffusion_drafter(lm, params.own.draft_model)


@DRAFTERS.register("early-exit", help="the target's own first layers draft (LayerSkip; exit_layer=0 picks per round, DEL)",
                   params=EarlyExitParams, papers=(bib.ELHOUSHI_2024, bib.ENTEZARI_ZARCH_2025))
def _early_exit_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    return EarlyExitDrafter(lm, params.own.exit_layer, max_depth=params.draft_length)


@DRAFTERS.register("prompt-lookup", help="continuations of earlier occurrences of the last n-gram",
                   params=NgramParams, default_draft_length=10, papers=(bib.SAXENA_2023,))
def _prompt_lookup_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    return PromptLookupDrafter(params.own.ngram)


@DRAFTERS.register("token-recycling", help="the target's own top candidates after each token, from earlier passes",
                   papers=(bib.LUO_2024,))
def _token_recycling_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    return TokenRecyclingDrafter(lm.vocab_size)


@DRAFTERS.register("eagle", help="EAGLE: a one-layer head trained on the target's own features drafts (smollm2-135m)",
                   papers=(bib.LI_2024_EAGLE, bib.LI_2024_EAGLE2, bib.ZHAO_2025, bib.LI_2025_EAGLE3, bib.GUI_2024))
def _eagle_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    from decoding.speculative.eagle import eagle_drafter

    return eagle_drafter(lm)


@family_check("speculative")
def check_run(lm: LM, params: SpeculativeParams, prompt_ids: list[int], max_new_tokens: int,
              prefix_ids: list[int]) -> None:
    """Before a run: the prompt, the new tokens and the deepest draft a round verifies fit the target's context."""
    lookahead = MAX_DRAFT_LENGTH if params.adaptive and params.tree == "chain" else params.draft_length
    lm.check_fits(len(prompt_ids) + len(prefix_ids), max_new_tokens, lookahead)


def make_drafter(lm: LM, params: SpeculativeParams) -> Drafter:
    return DRAFTERS.get(params.drafter)(lm, params)


@register_strategy("speculative", params=SpeculativeParams, family="speculative", uses_seed=True,
                   help="speculative decoding: a drafter proposes a token tree, the target verifies it in one pass",
                   papers=(bib.LEVIATHAN_2023, bib.CHEN_2023, bib.MIAO_2024, bib.CHEN_2024, bib.JEON_2024, bib.SUN_2023,
                           bib.LI_2024_EAGLE2, bib.XIONG_2024, bib.YILDIRIM_CHEN_2025, bib.EBRAHIMI_2024))
def speculative(ctx: RunContext, params: SpeculativeParams, outcome: Outcome) -> Iterator[Event]:
    lm, temperature = ctx.lm, params.temperature
    greedy = temperature == 0
    drafter = make_drafter(lm, params)  # may load a draft model
    context = list(ctx.prompt_ids)
    cache = DynamicCache(config=lm.config)
    prefill_passes = 0
    if outcome.cancelled(ctx):
        return
    # A drafter that reads nothing of the target's passes (prompt lookup, a draft model) drafts before the
    # prompt's pass: the prompt then goes through the target in the first verification call, as assisted
    # generation does (one call fewer a run: on short answers, a tenth of the target's work), and a
    # verification computes only the root's and the nodes' logits. Drafters that learn from the rows (EAGLE's
    # features, DEL's agreement, Token Recycling's table) get every row, the prompt's in its own pass.
    fused = drafter.prefill_rows == 0 and not drafter.needs_hidden_states
    if len(context) > 1 and not fused:
        out, prefill_passes = _prefill(lm, drafter, context[:-1], cache, greedy, temperature), 1
        cache = out.cache
    pending, length, step = (list(context) if fused else [context[-1]]), params.draft_length, ctx.step_offset
    footprint = Footprint.of(lm, drafter)
    budget = int(params.memory_budget_mb * MB) if params.memory_budget_mb > 0 else None
    allowed = params.node_budget if budget is None else min(params.node_budget, footprint.node_budget(
        budget, len(ctx.prompt_ids) + ctx.max_new_tokens, prefill_rows=len(context) if drafter.prefill_rows else 0))
    for round_index in range(ctx.max_new_tokens):
        plan = TreePlan(params.tree, min(length, allowed), params.width, allowed, params.confidence,
                        should_stop=ctx.should_stop, rule=params.rule)
        draft = drafter.propose(context, plan, temperature, ctx.generator)  # asks plan.should_stop before each call
        if outcome.cancelled(ctx):  # before the verification call; the draft is dropped
            return
        tree = draft.tree
        t0 = time.perf_counter()
        if len(pending) > FUSED_TREE_PROMPT and not tree.is_chain():  # a long prompt under a tree mask: its own pass
            out, prefill_passes = _prefill(lm, drafter, pending[:-1], cache, greedy, temperature), 1
            cache, pending = out.cache, pending[-1:]
        past, num_pending = cache.get_seq_length(), len(pending)
        hidden = drafter.needs_hidden_states
        out = lm.forward_tree(pending, tree.parents, tree.tokens, cache, output_hidden_states=hidden,
                              logits_from_root=fused)
        row_logits = out.logits[0] if fused else out.logits[0, num_pending - 1:]  # (1 + n, V): root, then the nodes
        target = torch.softmax(row_logits if greedy else tempered(row_logits, temperature), -1)  # (1 + n, V)
        probs = drafter.target_probs(target, draft)  # the target's own, unless a drafter's lossy option moves them
        verdict = verify_tree(tree, probs, ctx.generator, greedy)
        verify_s = time.perf_counter() - t0
        memory = {"budget": budget, "node_budget": allowed,
                  "parts": measured_parts(footprint, drafter, lm, cache, out.logits, probs, draft.q_dists)}
        produced = [tree.tokens[i] for i in verdict.accepted] + [verdict.extra_token]
        rows = [0] + [1 + i for i in verdict.accepted]  # the row each produced token was judged at
        origins = ["draft"] * len(verdict.accepted) + [verdict.extra_kind]
        keep = _keep_count(produced, lm.stop_ids, ctx.max_new_tokens - (step - ctx.step_offset))
        keep_path(cache, past + num_pending, verdict.accepted)  # the pending tokens and the accepted path stay
        first = num_pending - 1 if not fused else 0  # the root's row in out.logits
        drafter.observe(Feedback(row_tokens=pending[num_pending - 1 - first:] + tree.tokens, row_logits=out.logits[0],
                                 target_probs=probs[rows], greedy=greedy, rows=[first + r for r in rows],
                                 committed=cache.get_seq_length(), fed=num_pending, accepted=tuple(verdict.accepted),
                                 hidden_states=out.hidden_states, cache=cache))
        yield _round_event(ctx, lm, round_index, step, drafter, draft, verdict, probs, produced,
                           target_passes=1 + (prefill_passes if round_index == 0 else 0), verify_s=verify_s,
                           memory=memory)
        for j in range(keep):
            final = (point_mass(row_logits[rows[j]], produced[j]) if greedy else row_logits[rows[j]] / temperature
                     if probs is target else probs[rows[j]].log())  # what the token was drawn from
            yield token_event(ctx, step, produced[j], row_logits[rows[j]], final, forward_passes=0,
                              extra={"round": round_index, "origin": origins[j]})
            step += 1
        context += produced[:keep]
        pending = produced[-1:]  # the cache holds the rest (`keep_path`): the next pass feeds the extra token alone
        done = False
        for token in produced[:keep]:
            done = outcome.add(ctx, token) or done
        if done or step - ctx.step_offset >= ctx.max_new_tokens or keep < len(produced):
            return
        if params.adaptive and params.tree == "chain":
            grown = len(verdict.accepted) == len(tree) and len(tree)
            length = min(MAX_DRAFT_LENGTH, length + 2) if grown else max(1, length - 1)


def _prefill(lm: LM, drafter, ids: list[int], cache, greedy: bool, temperature: float):
    """Run the prompt through the target; drafters that learn (Token Recycling's table, DEL's
    per-layer agreement) read the prompt's own rows, which this pass computes anyway."""
    rows = drafter.prefill_rows  # how many trailing prompt rows the drafter wants (-1 = all)
    hidden = drafter.needs_hidden_states and rows != 0
    out = lm.forward(torch.tensor([ids], device=lm.device), cache, last_only=rows == 0,
                     logits_to_keep=0 if rows < 0 else min(rows, len(ids)), output_hidden_states=hidden)
    if rows:
        kept = out.logits.shape[1]
        probs = torch.softmax(out.logits[0] if greedy else tempered(out.logits[0], temperature), -1)
        drafter.observe(Feedback(row_tokens=ids[-kept:], row_logits=out.logits[0], target_probs=probs, greedy=greedy,
                                 rows=list(range(len(ids) - kept, len(ids))), committed=len(ids), fed=len(ids),
                                 hidden_states=out.hidden_states, cache=cache))
    return out


@torch.inference_mode()  # the cache's tensors are inference tensors (made by `LM.forward`)
def keep_path(cache, start: int, path: list[int]) -> None:
    """After a verification: keep the cache's first `start` positions (the context and the pending tokens) and the
    entries of the tree nodes on `path` (node i sat at position start + i), moved to start, start + 1, ... in path
    order; the rest of the tree is dropped. A chain's accepted prefix is already in place: a crop. A tree's path
    is gathered (every layer's keys and values): their keys were rotated at the node's depth, which is its final
    position, and they attended to exactly the context and their ancestors, so they are the entries a causal
    pass over the accepted tokens would have made."""
    if list(path) != list(range(len(path))):  # a tree's path: gather its entries into place
        index = torch.tensor([start + i for i in path])
        for layer in cache.layers:
            for name in ("keys", "values"):
                tensor = getattr(layer, name)
                tensor[:, :, start:start + len(path)] = tensor.index_select(2, index.to(tensor.device))
    crop_cache(cache, start + len(path))


def _keep_count(produced: list[int], stop_ids, budget: int) -> int:
    """How many produced tokens the run keeps: up to and including a stop token, within budget."""
    for i, token in enumerate(produced):
        if token in stop_ids:
            return min(i + 1, budget)
    return min(len(produced), budget)


def _round_event(ctx, lm, round_index, step, drafter, draft, verdict, probs, produced, target_passes, verify_s,
                 memory: dict):
    tree, depths = draft.tree, draft.tree.depths()
    visits = {v.node: v for v in verdict.visits}
    logq_cum = _cum_logq(tree)
    nodes = []
    for i, token in enumerate(tree.tokens):
        parent = tree.parents[i]
        visit = visits.get(i)
        status = "unvisited" if visit is None else ("accepted" if visit.accepted else "rejected")
        nodes.append({"id": i, "parent": parent, "depth": depths[i], "token_id": token,
                      "token_text": lm.token_text(token), "q": tree.q_token[i], "logq_cum": logq_cum[i],
                      "p": probs[parent + 1, token].item(), "status": status,
                      "u": visit.u if visit else None, "accept_prob": visit.accept_prob if visit else None})
    dists = []
    for parent in [ROOT] + sorted({p for p in tree.parents if p != ROOT}):
        p = probs[parent + 1]
        p_top = p.topk(min(TOP_RECORDED, p.shape[-1]))
        q = draft.q_dists.get(parent)
        children = [tree.tokens[i] for i in tree.children(parent)]
        overlap = torch.minimum(p, q).sum().item() if q is not None else sum(p[c].item() for c in children)
        q_top = q.topk(min(TOP_RECORDED, q.shape[-1])) if q is not None else None
        dists.append({"parent": parent, "p_top_ids": p_top.indices.tolist(), "p_top_probs": p_top.values.tolist(),
                      "q_top_ids": q_top.indices.tolist() if q_top is not None else [],
                      "q_top_probs": q_top.values.tolist() if q_top is not None else [],
                      "p_top_tokens": [lm.token_text(t) for t in p_top.indices.tolist()],
                      "q_top_tokens": [lm.token_text(t) for t in q_top.indices.tolist()] if q_top is not None else [],
                      "overlap": overlap} | ({"rho": verdict.rho[parent]} if parent in verdict.rho else {}))
    last = verdict.accepted[-1] if verdict.accepted else ROOT
    return SpecRound(
        round=round_index, step=step, drafter=drafter.name, nodes=nodes, accepted_path=list(verdict.accepted),
        extra_token_id=verdict.extra_token, extra_token_text=lm.token_text(verdict.extra_token),
        extra_kind=verdict.extra_kind, extra_p=probs[last + 1, verdict.extra_token].item(), token_ids=produced,
        dists=dists, draft_forward_passes=draft.forward_passes, target_forward_passes=target_passes,
        draft_time_s=draft.seconds, verify_time_s=verify_s, elapsed_s=ctx.elapsed(), extra=draft.info | {"memory": memory},
        forward_passes=target_passes,
    )


def _cum_logq(tree) -> list[float]:
    """Cumulative draft log-probability from the root to each node (0 for deterministic drafts)."""
    out: list[float] = []
    for i, parent in enumerate(tree.parents):
        out.append((out[parent] if parent != ROOT else 0.0) + math.log(max(tree.q_token[i], 1e-30)))
    return out
