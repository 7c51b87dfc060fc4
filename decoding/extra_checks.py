"""What the `extra` of a loaded event must hold where a view reads it: the types, and the trees inside.

An event's `extra` is the strategy's own record (a JSON object the schema only checks for JSON). The
views walk some of it: A*'s search tree (`ParticleStep.extra["expanded"]`, `["nodes"]`), momentum's
`alpha` and loop depth, AdaDec's pauses, superposed decoding's drafts, exact-extract's span record,
DEER's `diffusion_block`, RASD's `sources`, SpecMemo's `memory`, LUD's units, HAMburger's slots, FTP's
block decisions, a diffusion sampler's block length and positions, refine's feedback and rounds,
compute-optimal's allocation, the scaling
methods' final choice. A shared trace could make any of them the wrong type, an index outside its list,
or a tree whose parent links loop (a 2.7 KB A* trace whose node was its own parent grew the server to
3 GB: issue 25). Each key a view reads is declared here once, per event kind, with its annotation; a key
that is there must fit it (keys that are absent are fine: each strategy writes its own). The links the
types cannot say are checked after: indices inside their lists, the A* tree grown only from nodes made
before (so it is a tree by construction), a diffusion block inside the canvas.

Glossary
    key hint    the annotation of one `extra` key (decoding/schema.py's rules: TypedDicts, Range, ...).
    A* tree     node 0 is the prompt; each A* step expands one node made before (`expanded.id`) and makes
                its candidates (`nodes[i].id`, new ids): their parent is the expanded node.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from decoding.schema import Range, SchemaError, check

Count = Annotated[int, Range(0)]
Positive = Annotated[int, Range(1)]
Unit = Annotated[float, Range(0, 1, slack=1e-4)]
Weight = Annotated[float, Range(0)]


class _SearchNode(TypedDict):
    id: Count
    f: float
    complete: bool


class _Expanded(TypedDict):
    id: Count
    f: float
    depth: Count


class _Speculation(TypedDict, total=False):
    accepted: list[Count]
    rewritten: list[Count]
    drafts: dict
    draft_rewards: dict
    accepted_tokens: Count
    policy_tokens: Count
    policy_calls: Count
    draft_calls: Count
    gate: str  # threshold, router or oracle (Arbitrage's)
    router_p: dict
    policy_rewards: dict


class _Archon(TypedDict, total=False):  # strategy archon: the architecture it runs
    config: str
    key: str
    strategy: str
    params: dict
    layers: list[dict]


class _Feedback(TypedDict, total=False):  # refine: the review of the best solution so far, fed to the next round
    mode: str
    from_round: Count
    score: float
    kept_steps: Count
    bad_step: Count | None
    bad_text: str
    verdict: str
    correction: str | None
    correction_tokens: Count


class _Round(TypedDict, total=False):  # refine: one round's best so far and the feedback it was given
    round: Count
    best_score: float
    best_answer: str | None
    feedback: _Feedback


class _Probe(TypedDict, total=False):
    n: Count
    passed: Count
    agree: Count


class _Allocation(TypedDict, total=False):  # compute-optimal: the probe, the estimated difficulty, the choice
    phase: str
    level: Count
    probe: _Probe
    difficulty: Unit
    bin: str
    choice: str
    fitted: str


class _Trained(TypedDict, total=False):  # a model card's held-out figures (LUD, HAMburger, FTP)
    val_loss: float | None
    val_loss_tiny_ar: float | None
    agree_tiny_ar: float | None
    agree: float | None
    density: float | None


class _Memory(TypedDict):  # SpecMemo: bytes per part during the round's verification
    budget: Count | None
    node_budget: Count
    parts: dict


class _Draft(TypedDict):
    prob: Unit
    text: str


class _Span(TypedDict):
    start: Count
    end: Count
    text: str
    logprob: float


class _Greedy(TypedDict):
    text: str
    span: list[Count] | None
    logprob: float | None


class _Extract(TypedDict):
    passage_tokens: list[str]
    max_span_tokens: Count
    logprobs: list[list[float | None]]
    best: _Span
    greedy: _Greedy
    num_spans: Count


class _Chosen(TypedDict, total=False):
    id: Count
    text: str
    weight: float | None
    score: float | None
    answer: str | None
    ended: bool


# event kind -> the `extra` keys the views read, each with its annotation
KEYS: dict[str, dict] = {
    "token": {
        "depth": Count, "depths": list[Count], "alpha": float, "previous_id": Count | None,  # momentum
        "paused": bool, "threshold": float, "candidates": list[Count], "candidate_texts": list[str],  # AdaDec
        "lookahead_texts": list[str], "scores": list[float], "chosen": Count, "rows": Count,
        "drafts": list[_Draft],  # superposed decoding
        "extract": _Extract,  # exact-extract
        "round": Count, "origin": str,  # a speculative round's tokens
        "unit": Count, "unit_size": Positive, "in_unit": Count, "span": Count, "mask_prob": Unit | None,  # LUD
        "slot": Count, "slot_size": Positive, "in_slot": Count, "micro_prob": Unit | None, "prompt_slots": Count,
        "group": Positive,  # HAMburger
        "blocks": list[Annotated[int, Range(0, 1)]], "num_blocks": Positive, "prompt_density": Unit,  # FTP
        "trained": _Trained,
    },
    "spec_round": {"diffusion_block": Positive, "sources": list[str], "memory": _Memory},
    "particles": {
        "ess_threshold": Unit | None, "round": Count, "kept_steps": Count, "bad_step": Count | None,
        "expanded": _Expanded, "nodes": list[_SearchNode], "frontier": Count, "speculation": _Speculation,
        "archon": _Archon,
        "feedback": _Feedback, "allocation": _Allocation,
    },
    "diffusion_step": {
        "block_length": Positive, "threshold": float, "rejected": list[Count], "predicted_final": list[Count],
        "filter_p": list[Unit | None], "anchors": list[Count], "steps_advanced": Count, "draft_steps": Count,
    },
    "finish": {"method": str, "chosen": Count, "answer": str | None, "rule": str, "votes": dict,
               "particles": list[_Chosen], "canvas": list[Annotated[int, Range(-1)]], "rounds": list[_Round],
               "forced_tokens": Count, "allocation": _Allocation, "time_limit_s": Weight},
}


def check_extra(event, max_items: int | None = None) -> None:
    """SchemaError naming `extra.<key>...` when a key a view reads does not fit its hint or its links."""
    keys = KEYS.get(event.kind)
    extra = getattr(event, "extra", None)
    if not keys or not extra:
        return
    for key, hint in keys.items():
        if key in extra:
            check(extra[key], hint, f"extra.{key}", max_items=max_items)
    link = _LINKS.get(event.kind)
    if link is not None:
        link(event, extra)


def _inside(path: str, value: int, size: int, what: str) -> None:
    if not 0 <= value < size:
        raise SchemaError(path, value, f"{what} in [0, {size - 1}]" if size else f"{what} (there is none)")


def _token_links(e, extra: dict) -> None:
    for name in ("candidate_texts", "lookahead_texts", "scores", "depths"):
        if name in extra and "candidates" in extra and len(extra[name]) != len(extra["candidates"]):
            raise SchemaError(f"extra.{name}", None, f"a list as long as `extra.candidates` ({len(extra['candidates'])} items)",
                              got=f"{len(extra[name])} items")
    if "chosen" in extra and "candidates" in extra:
        _inside("extra.chosen", extra["chosen"], len(extra["candidates"]), "an index of `extra.candidates`")
    if extra.get("paused") is True:
        for name in ("candidate_texts", "lookahead_texts", "scores", "chosen"):
            if name not in extra:
                raise SchemaError(f"extra.{name}", None, "present on a pause (`extra.paused` is true)", got="nothing")
    for index, size in (("in_unit", "unit_size"), ("in_slot", "slot_size")):
        if index in extra and size in extra:
            _inside(f"extra.{index}", extra[index], extra[size], f"a position in its group (`extra.{size}`)")
    if "blocks" in extra:
        blocks = len(extra["blocks"])
        if extra.get("num_blocks") != blocks or len(extra.get("scores") or ()) != blocks:
            raise SchemaError("extra.blocks", None, "one decision and one score per block (`extra.num_blocks`)",
                              got=f"{blocks} decisions, {len(extra.get('scores') or ())} scores, "
                                  f"num_blocks {extra.get('num_blocks')}")
    record = extra.get("extract")
    if record is not None:
        n = len(record["passage_tokens"])
        if len(record["logprobs"]) > n:
            raise SchemaError("extra.extract.logprobs", None, f"at most one row per passage token ({n})",
                              got=f"{len(record['logprobs'])} rows")
        for side in ("start", "end"):
            _inside(f"extra.extract.best.{side}", record["best"][side], n, "a passage token index")
        span = record["greedy"]["span"]
        if span is not None:
            if len(span) != 2:
                raise SchemaError("extra.extract.greedy.span", span, "null or [start, end]")
            for j, v in enumerate(span):
                _inside(f"extra.extract.greedy.span[{j}]", v, n, "a passage token index")
            if record["greedy"]["logprob"] is None:
                raise SchemaError("extra.extract.greedy.logprob", None, "a number when `span` is set", got="null")


def _spec_links(e, extra: dict) -> None:
    memory = extra.get("memory")
    if memory is not None:
        for name, size in memory["parts"].items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise SchemaError(f"extra.memory.parts.{name}", size, "a whole number of bytes >= 0")
    if "sources" in extra and len(extra["sources"]) != len(e.nodes):
        raise SchemaError("extra.sources", None, f"one source per draft node ({len(e.nodes)})",
                          got=f"{len(extra['sources'])} items")


def _diffusion_links(e, extra: dict) -> None:
    length = len(e.canvas)
    if "block_length" in extra and extra["block_length"] > length:
        raise SchemaError("extra.block_length", extra["block_length"], f"an integer in [1, {length}] (the canvas)")
    if "block_length" in extra:
        blocks = max(1, -(-length // extra["block_length"]))
        _inside("block", e.block, blocks, f"a block index ({blocks} blocks of `extra.block_length` on the canvas)")
    for name in ("rejected", "predicted_final", "anchors"):
        for j, position in enumerate(extra.get(name) or ()):
            _inside(f"extra.{name}[{j}]", position, length, "a canvas position")
    if len(extra.get("filter_p") or ()) > length:
        raise SchemaError("extra.filter_p", None, f"at most one value per canvas position ({length})",
                          got=f"{len(extra['filter_p'])} items")


def _particle_links(e, extra: dict) -> None:
    sp = extra.get("speculation")
    if sp is not None:
        for slot, text in (sp.get("drafts") or {}).items():
            if not isinstance(text, str):
                raise SchemaError(f"extra.speculation.drafts.{slot}", text, "text (the refused draft)")
        for name, what in (("draft_rewards", "the draft's reward"), ("router_p", "the router's probability"),
                           ("policy_rewards", "the policy's step's reward")):
            for slot, value in (sp.get(name) or {}).items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise SchemaError(f"extra.speculation.{name}.{slot}", value, f"a number ({what})")
        for name in ("accepted", "rewritten"):
            for j, slot in enumerate(sp.get(name) or ()):
                _inside(f"extra.speculation.{name}[{j}]", slot, len(e.particles), "a slot")


def _finish_links(e, extra: dict) -> None:
    for answer, votes in (extra.get("votes") or {}).items():
        if isinstance(votes, bool) or not isinstance(votes, (int, float)) or votes < 0:
            raise SchemaError(f"extra.votes.{answer}", votes, "a number >= 0 (the answer's votes)")


_LINKS = {"token": _token_links, "finish": _finish_links, "spec_round": _spec_links, "diffusion_step": _diffusion_links,
          "particles": _particle_links}


class SearchTree:
    """A*'s tree across a trace's events: node id -> depth. Every expanded node must have been made
    before, every candidate must be new, so parents always come before their children and no parent
    chain can loop."""

    def __init__(self):
        self.depth: dict[int, int] = {0: 0}  # node 0: the prompt

    def add(self, e) -> None:
        extra = e.extra or {}
        if "expanded" not in extra and "nodes" not in extra:
            return
        for name in ("expanded", "nodes"):
            if name not in extra:
                other = "nodes" if name == "expanded" else "expanded"
                raise SchemaError(f"extra.{name}", None, f"present with `extra.{other}` (an A* step has both)",
                                  got="nothing")
        here = extra["expanded"]["id"]
        if here not in self.depth:
            raise SchemaError("extra.expanded.id", here, "0 (the prompt) or a node made by an earlier A* step "
                                                         f"({len(self.depth)} made so far)")
        nodes = extra["nodes"]
        if len(nodes) != len(e.particles):
            raise SchemaError("extra.nodes", None, f"one node per particle ({len(e.particles)})",
                              got=f"{len(nodes)} items")
        for i, node in enumerate(nodes):
            if node["id"] in self.depth:
                raise SchemaError(f"extra.nodes[{i}].id", node["id"],
                                  "a new node id (a node made before, or the expanded node itself, would make "
                                  "the search tree loop)")
            self.depth[node["id"]] = self.depth[here] + 1
