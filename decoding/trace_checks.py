"""What a loaded trace must satisfy beyond its field types: bounds on its size, links between fields.

The schema (`decoding/schema.py`) checks every field's type and range. A shared trace can still be
too big to replay (a 10,000-position canvas over 1,000 steps took 108 s and 2 GB to draw) or
inconsistent: alternatives without their probabilities, a draft node that is its own ancestor, an
ancestor index past the particles. The views would meet those as IndexError, RecursionError or
MemoryError. `Trace.load` / `Trace.from_dict` refuse both here, with a message naming the event,
the field and the limit.

Glossary
    bound   how much a trace may hold, with its default and the environment variable that changes
            it (an operator hosting the app can raise or lower each one).
    link    a rule between fields: lists that must have the same length, indices that must point
            inside a list, a tree whose parents come before their children.
"""

from __future__ import annotations

from dataclasses import dataclass

from decoding.env import env_int
from decoding.extra_checks import SearchTree, check_extra
from decoding.schema import SchemaError


@dataclass(frozen=True)
class Bound:
    env: str  # the environment variable that sets it
    default: int  # sized so that any trace the app itself writes fits
    unit: str  # what is counted, for messages

    def value(self) -> int:
        return env_int(self.env, self.default)

    def refuse(self, subject: str, got, limit: int) -> ValueError:
        """e.g. "`canvas` has 10000 positions, more than the limit of 2048 positions (set by ...)"."""
        return ValueError(f"{subject} {got} {self.unit}, more than the limit of {limit} {self.unit} "
                          f"(set by {self.env})")


MAX_NEW_TOKENS = 2048  # = decoding.run.MAX_NEW_TOKENS_CAP, the longest run (tests/test_faults.py checks it)
UPLOAD_MB = Bound("DECODING_LAB_MAX_UPLOAD_MB", 5, "MB")  # an uploaded trace file (the app's upload limit too)
EVENTS = Bound("DECODING_LAB_MAX_TRACE_EVENTS", 10_000, "events")  # a speculative run: <= 2 events per token
CANVAS = Bound("DECODING_LAB_MAX_TRACE_CANVAS", MAX_NEW_TOKENS, "positions")  # a diffusion step's canvas
PARTICLES = Bound("DECODING_LAB_MAX_TRACE_PARTICLES", 256, "particles")  # a scaling step (n <= 64)
TOKENS = Bound("DECODING_LAB_MAX_TRACE_TOKENS", 65_536, "items")  # any list: prompt ids, tokens, alternatives
BOUNDS = (UPLOAD_MB, EVENTS, CANVAS, PARTICLES, TOKENS)


def upload_bytes() -> int:
    """The most bytes an uploaded trace may have (DECODING_LAB_MAX_UPLOAD_MB, in MiB)."""
    return UPLOAD_MB.value() * 1024 * 1024


class TraceChecker:
    """The bounds read once per trace, and the links checked event by event (each against the previous
    event of its kind: beam parents, particle parents, the canvas length; A*'s search tree across all
    its steps), then the `extra` keys the views read (`decoding/extra_checks.py`)."""

    def __init__(self):
        self.max_events, self.max_canvas = EVENTS.value(), CANVAS.value()
        self.max_particles, self.max_items = PARTICLES.value(), TOKENS.value()
        self.previous: dict[str, object] = {}  # kind -> the last event of that kind
        self.search = SearchTree()  # A*'s nodes so far (its steps' `extra`)

    def check_count(self, num_events: int) -> None:
        if num_events > self.max_events:
            raise EVENTS.refuse("the trace has", num_events, self.max_events)

    def check(self, event) -> None:
        """SchemaError naming the field for a broken link or an exceeded bound."""
        rule = _RULES.get(event.kind)
        if rule is not None:
            rule(self, event, self.previous.get(event.kind))
        check_extra(event, self.max_items)
        if event.kind == "particles":
            self.search.add(event)
        self.previous[event.kind] = event


def _same_length(fields: dict, *names: str, prefix: str = "") -> None:
    """The lists `fields[name]` that are there have the same length as the first."""
    first = fields.get(names[0])
    for name in names[1:]:
        other = fields.get(name)
        if first is not None and other is not None and len(other) != len(first):
            raise SchemaError(f"{prefix}{name}", None, f"a list as long as `{prefix}{names[0]}` ({len(first)} items)",
                              got=f"{len(other)} items")


def _index(path: str, value: int, low: int, high: int, what: str) -> None:
    """value in [low, high) or SchemaError."""
    if not low <= value < high:
        raise SchemaError(path, value, f"{what} in [{low}, {high - 1}]" if high > low else f"{what} (there is none)")


def _token(c: TraceChecker, e, previous) -> None:
    _same_length(vars(e), "top_ids", "top_tokens", "top_probs", "top_kept")


def _beams(c: TraceChecker, e, previous) -> None:
    live = max(1, len(previous.beams)) if previous is not None else 1  # the first step extends the prompt
    for i, beam in enumerate(e.beams):
        _index(f"beams[{i}].parent", beam["parent"], 0, live, "an index of the previous step's beams")


def _spec_round(c: TraceChecker, e, previous) -> None:
    depths = []
    for i, node in enumerate(e.nodes):
        if node["id"] != i:
            raise SchemaError(f"nodes[{i}].id", node["id"], f"{i} (nodes are listed by id)")
        _index(f"nodes[{i}].parent", node["parent"], -1, i, "-1 (the context) or an earlier node's id")
        depth = 1 if node["parent"] < 0 else depths[node["parent"]] + 1
        if node["depth"] != depth:
            raise SchemaError(f"nodes[{i}].depth", node["depth"], f"{depth} (its parent's depth + 1)")
        depths.append(depth)
    for j, node_id in enumerate(e.accepted_path):
        _index(f"accepted_path[{j}]", node_id, 0, len(e.nodes), "a node id")
        parent = e.accepted_path[j - 1] if j else -1
        if e.nodes[node_id]["parent"] != parent:
            raise SchemaError(f"accepted_path[{j}]", node_id, f"a child of {'the context' if j == 0 else f'node {parent}'}"
                              " (the accepted path runs from the context down one branch)")
    for j, dist in enumerate(e.dists):
        _index(f"dists[{j}].parent", dist["parent"], -1, len(e.nodes), "-1 (the context) or a node id")
        _same_length(dist, "p_top_ids", "p_top_probs", "p_top_tokens", prefix=f"dists[{j}].")
        _same_length(dist, "q_top_ids", "q_top_probs", "q_top_tokens", prefix=f"dists[{j}].")


def _particles(c: TraceChecker, e, previous) -> None:
    n = len(e.particles)
    if n > c.max_particles:
        raise PARTICLES.refuse("`particles` has", n, c.max_particles)
    before = len(previous.particles) if previous is not None else 0
    seen = set()
    for i, p in enumerate(e.particles):
        _index(f"particles[{i}].id", p["id"], 0, n, "a slot")
        if p["id"] in seen:
            raise SchemaError(f"particles[{i}].id", p["id"], "a slot no other particle of the step has")
        seen.add(p["id"])
        _index(f"particles[{i}].parent", p["parent"], -1, before, "-1 (the prompt) or a slot of the previous step")
    _same_length(vars(e), "ancestors", "weights_after")
    for j, a in enumerate(e.ancestors):
        _index(f"ancestors[{j}]", a, 0, n, "a slot")


def _diffusion(c: TraceChecker, e, previous) -> None:
    length = len(e.canvas)
    if length > c.max_canvas:
        raise CANVAS.refuse("`canvas` has", length, c.max_canvas)
    if previous is not None and length != len(previous.canvas):
        raise SchemaError("canvas", None, f"as long as the previous step's ({len(previous.canvas)} positions)",
                          got=f"{length} positions")
    _index("block", e.block, 0, max(1, length), "a block index (a block holds at least one canvas position)")
    _same_length(vars(e), "canvas", "canvas_text", "masked_confidence")
    _same_length(vars(e), "unmasked", "unmasked_tokens", "confidence")
    for j, position in enumerate(e.unmasked):
        _index(f"unmasked[{j}]", position, 0, length, "a canvas position")


_RULES = {"token": _token, "beams": _beams, "spec_round": _spec_round, "particles": _particles,
          "diffusion_step": _diffusion}  # event kind -> its links and bounds


def add_rule(kind: str, rule) -> None:
    """A family's own link rule for its event kind (`decoding.events.register_events`)."""
    if kind in _RULES and _RULES[kind] is not rule:
        raise ValueError(f"the trace check of event kind {kind!r} is taken")
    _RULES[kind] = rule
