"""A*-decoding: best-first search over partial solutions, guided by the step reward.

Chatziveroglou 2025, "A*-Decoding: Token-Efficient Inference Scaling" (arXiv:2505.13672). Decoding
is a search in the space of partial solutions (step prefixes). The open list (frontier) holds
every solution, partial or complete, generated so far, ordered by a priority f; the search pops
the lowest f; a complete solution popped is the answer (the goal test is on popping, as in A*, so
a complete solution is accepted only when nothing on the frontier looks better); a partial one is
expanded by sampling `n` candidate next steps in one batch. After `max_expansions` expansions the
best complete solution seen wins, else the best partial one. Tokens go only below the most
promising prefix, where best-of-N spends them on N whole solutions.

The paper takes its heuristic from a process reward, h(s) = 1 - r(s) (r: the newest step's
reward). Its path cost g could not be read: the abstract and the reviews found with the search
tool (arXiv abstract and HTML page head, Moonlight and Emergent Mind summaries) stop before the
formula, and no reference code was found. So the priority here is the project's own variant,
stated plainly: a path costs the doubt of its worst step, g(s) = max(1 - r) over the earlier
steps, and f = max(g, h) (a bottleneck path cost: it never decreases along a path, which is what
A* needs), not the paper's additive f = g + h. A slip is never forgotten, even
when the steps after it are right (tiny-math continues consistently from a wrong value), while a
chain of good steps costs nothing more per step, so the search goes deep along it instead of
breadth-first. A step the reward calls neutral (no arithmetic to check, e.g. the answer line)
carries no information and is left out; a solution with no checked step has f = 1 - neutral.
Ties go to the deeper node, then to the earlier one. `search` is the textbook loop with additive
costs (tested on a hand-made tree, where an exact heuristic expands only the optimal path).

Each expansion is one ParticleStep: its particles are the `n` candidates (parent -1: they continue
the expanded node, named in `extra`); `extra` has "expanded" (node id, its f and depth), "nodes"
(the candidates' node ids, f and whether complete) and "frontier" (open-list size afterwards).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterable, Iterator, TypeVar

import torch

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import param
from decoding.registry import register_strategy
from decoding.scaling.params import ScalingParams
from decoding.scaling.run import Particle, ScalingRun
from decoding.scaling.scoring import NEUTRAL, aggregate

N = TypeVar("N")


@dataclass(order=True)
class _Entry(Generic[N]):
    f: float
    neg_depth: int
    order: int
    node: N = field(compare=False)


class OpenList(Generic[N]):
    """The frontier: pop the lowest f; ties go to the deeper node, then the earlier one."""

    def __init__(self):
        self._heap: list[_Entry] = []
        self._counter = itertools.count()

    def push(self, node: N, f: float, depth: int) -> None:
        heapq.heappush(self._heap, _Entry(f, -depth, next(self._counter), node))

    def pop(self) -> tuple[N, float]:
        entry = heapq.heappop(self._heap)
        return entry.node, entry.f

    def __len__(self) -> int:
        return len(self._heap)


def search(root: N, expand: Callable[[N], Iterable[tuple[N, float]]], heuristic: Callable[[N], float],
           is_goal: Callable[[N], bool], depth: Callable[[N], int], max_expansions: int) -> tuple[N | None, list[N]]:
    """Textbook A*: (the goal reached, the nodes expanded in order); expand(node) gives
    (child, edge cost) pairs. The goal test is on popping, so with an admissible heuristic the
    goal is a cheapest one; None when the budget ran out first."""
    frontier: OpenList = OpenList()
    cost = {id(root): 0.0}
    frontier.push(root, heuristic(root), depth(root))
    expanded = []
    while len(frontier) and len(expanded) < max_expansions:
        node, _ = frontier.pop()
        if is_goal(node):
            return node, expanded
        expanded.append(node)
        for child, edge in expand(node):
            cost[id(child)] = cost[id(node)] + edge
            frontier.push(child, cost[id(child)] + heuristic(child), depth(child))
    return None, expanded


@dataclass(frozen=True)
class AStarParams(ScalingParams):
    max_expansions: int = param(16, low=1, high=256,
                                help="a-star: nodes expanded at most; each expansion samples n candidate steps. The "
                                     "frontier is ordered by the project's own cost f = max(1 - r) over checked steps.")


def priority(rewards: list[float]) -> float:
    """f of a solution from its step rewards: the doubt (1 - r) of its worst checked step, i.e.
    max(g, h) with g the earlier steps' and h the newest step's. The project's own path cost, not
    the paper's (whose g could not be read; see the module docstring); h = 1 - r is the paper's."""
    doubts = [1.0 - r for r in rewards if r != NEUTRAL]
    return max(doubts) if doubts else 1.0 - NEUTRAL


@dataclass(eq=False)  # nodes compare by identity (`in` the complete list)
class _Node:
    id: int
    particle: Particle
    f: float

    @property
    def depth(self) -> int:
        return len(self.particle.steps)


@register_strategy("a-star", params=AStarParams, family="scaling", uses_seed=True,
                   help="A*-decoding: expand the most promising partial solution by n sampled steps; stop at the "
                        "first complete solution popped. Priority: the project's own path cost, f = the doubt "
                        "1 - r of the worst checked step (h = 1 - r is the paper's; its g was not read)",
                   papers=(bib.CHATZIVEROGLOU_2025,))
def a_star(ctx: RunContext, params: AStarParams, outcome: Outcome) -> Iterator[Event]:
    run = ScalingRun(ctx, params, "a-star", outcome)  # the reward, the prompt's batch, events and the final choice
    seed = int(torch.randint(0, 2**62, (1,), generator=ctx.generator))
    frontier: OpenList[_Node] = OpenList()
    ids = itertools.count(1)
    frontier.push(_Node(0, Particle(), priority([])), priority([]), 0)
    complete, dead_ends, expansions, goal = [], [], 0, None
    while len(frontier) and expansions < params.max_expansions:
        node, f = frontier.pop()
        if node in complete:  # the goal test, on popping
            goal = node
            break
        if expansions and not run.restart(node.particle, seed + expansions):  # the first uses the prompt's batch
            break
        run.particles = [node.particle.copy(parent=-1) for _ in range(params.n)]
        if not run.extend():  # Stop during the expansion
            break
        expansions += 1
        children = [_Node(next(ids), p, priority(p.rewards)) for p in run.particles]
        for child in children:
            if child.particle.token_ids and child.particle.token_ids[-1] in run.lm.stop_ids:
                complete.append(child)
            elif child.particle.finished:  # cut off at its token cap: a dead end, kept only to report
                dead_ends.append(child)
                continue
            frontier.push(child, child.f, child.depth)
        weights = torch.softmax(-torch.tensor([c.f for c in children], dtype=torch.float64), 0)
        extra = {"expanded": {"id": node.id, "f": f, "depth": node.depth},
                 "nodes": [{"id": c.id, "f": c.f, "complete": c in complete} for c in children],
                 "frontier": len(frontier)}
        yield run.event(weights, list(range(params.n)), False, weights.tolist(), set(range(params.n)), extra)
        if run.cancelled():
            break
    _finish(run, outcome, goal, complete, frontier, dead_ends, params.n)


def _finish(run: ScalingRun, outcome: Outcome, goal: _Node | None, complete: list[_Node], frontier: OpenList,
            dead_ends: list[_Node], n: int) -> None:
    """Slot 0: the goal popped, else the best complete solution seen (lowest f, then highest
    score), else the best partial one left on the frontier, else the best solution cut off at its
    token cap; the other slots show the runners-up, so the final table still has n rows."""
    ranked = sorted(complete, key=lambda c: (c is not goal, c.f, -aggregate(c.particle.rewards, run.params.aggregate),
                                             c.id))
    while len(ranked) < n and len(frontier):
        node = frontier.pop()[0]
        if node not in ranked:
            ranked.append(node)
    ranked += sorted(dead_ends, key=lambda c: (c.f, c.id))
    while len(ranked) < n:  # nothing left: repeat the last (only when Stop came before the first expansion)
        ranked.append(ranked[-1] if ranked else _Node(0, Particle(), 1.0))
    run.particles = [c.particle.copy(parent=-1) for c in ranked[:n]]
    weights = torch.softmax(-torch.tensor([c.f for c in ranked[:n]], dtype=torch.float64), 0)
    rule = ("the first complete solution popped from the frontier (nothing left looked better)" if goal else
            "budget spent: the best complete solution seen" if complete else
            "no complete solution within the budget: the best partial one")
    run.finish(outcome, 0, weights, rule=rule)
