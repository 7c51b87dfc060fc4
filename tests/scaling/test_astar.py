"""A*-decoding (decoding.scaling.astar): the search loop on a hand-made tree, and the strategy on tiny-math."""

import json

import pytest

from decoding import run_to_trace
from decoding.events import Trace, stats
from decoding.run import generate
from decoding.scaling import astar
from decoding.scaling.math_tasks import SPLIT_SIZES, make_splits, prompt

# A hand-made tree: node -> [(child, edge cost)]; goals G1 (cost 1 + 1 + 1 = 3) and G2 (cost 1 + 5 = 6)
TREE = {"S": [("A", 1), ("B", 1)], "A": [("C", 1), ("D", 4)], "B": [("G2", 5)], "C": [("G1", 1)], "D": [("E", 1)],
        "E": [], "G1": [], "G2": []}
DEPTH = {"S": 0, "A": 1, "B": 1, "C": 2, "D": 2, "G2": 2, "E": 3, "G1": 3}
EXACT = {"S": 3, "A": 2, "B": 5, "C": 1, "D": 99, "E": 99, "G1": 0, "G2": 0}  # true remaining cost (99: no goal)


def run_search(heuristic, max_expansions=100):
    return astar.search("S", lambda n: TREE[n], heuristic, lambda n: n.startswith("G"), DEPTH.get, max_expansions)


def test_an_exact_heuristic_expands_only_the_optimal_path():
    goal, expanded = run_search(EXACT.get)
    assert goal == "G1" and expanded == ["S", "A", "C"]


def test_a_zero_heuristic_still_finds_the_cheapest_goal_but_expands_more():
    goal, expanded = run_search(lambda n: 0)
    assert goal == "G1" and set(expanded) > {"S", "A", "C"}


def test_the_budget_ends_the_search_without_a_goal():
    goal, expanded = run_search(EXACT.get, max_expansions=2)
    assert goal is None and expanded == ["S", "A"]


def test_ties_go_to_the_deeper_node_then_the_earlier_one():
    frontier = astar.OpenList()
    for node, f, depth in (("shallow", 0.1, 1), ("deep", 0.1, 3), ("deep-later", 0.1, 3), ("worse", 0.5, 9)):
        frontier.push(node, f, depth)
    assert [frontier.pop()[0] for _ in range(4)] == ["deep", "deep-later", "shallow", "worse"]


def test_priority_is_the_doubt_of_the_worst_checked_step():
    good, slip, neutral = 0.95, 0.05, 0.5
    assert astar.priority([good, good, good]) == pytest.approx(0.05)  # a deep chain of good steps costs no more
    assert astar.priority([good]) == pytest.approx(0.05)
    assert astar.priority([good, slip, good]) == pytest.approx(0.95)  # the slip is not forgotten
    assert astar.priority([good, good, neutral]) == pytest.approx(0.05)  # the answer line carries no information
    assert astar.priority([]) == astar.priority([neutral]) == pytest.approx(0.5)


def test_the_priority_is_labelled_as_the_projects_own_where_a_user_reads_it():
    from decoding.params import specs
    from decoding.registry import STRATEGIES

    assert "project's own" in STRATEGIES["a-star"].help and "f = g + h" not in STRATEGIES["a-star"].help
    assert "project's own" in {s.name: s.help for s in specs(astar.AStarParams)}["max_expansions"]


# ---------------------------------------------------------------- the strategy on tiny-math

@pytest.fixture(scope="module")
def problem():
    return make_splits(sizes={**SPLIT_SIZES, "train": 0, "val": 0, "test": 3})["test"][1]


@pytest.fixture(scope="module")
def trace(problem):
    return run_to_trace("tiny-math", prompt(problem.question), strategy="a-star",
                        params={"n": 3, "temperature": 1.0, "top_p": 1.0, "max_expansions": 12},
                        max_new_tokens=160, seed=0, chat=False)


def test_a_star_expands_one_node_per_event_and_stops_when_a_complete_solution_is_popped(trace):
    steps = trace.of_kind("particles")
    assert steps and all(len(s.particles) == 3 for s in steps)
    ids = [n["id"] for s in steps for n in s.extra["nodes"]]
    assert len(ids) == len(set(ids)) == 3 * len(steps)  # every candidate is a new node
    assert steps[0].extra["expanded"] == {"id": 0, "f": pytest.approx(0.5), "depth": 0}  # the prompt first
    for s in steps[1:]:  # each later expansion pops a node some earlier event generated
        assert s.extra["expanded"]["id"] in ids[:ids.index(s.extra["nodes"][0]["id"])]
    assert any(n["complete"] for s in steps for n in s.extra["nodes"])
    assert "popped" in trace.finish.extra["rule"]
    assert all(s.extra["expanded"]["f"] <= 0.5 for s in steps)  # never expanded past a slip while good nodes waited
    assert trace.finish.stop_reason == "eos" and trace.finish.text == trace.finish.extra["particles"][0]["text"]
    assert trace.finish.extra["chosen"] == 0 and "The answer is" in trace.finish.text


def test_a_star_reports_the_tokens_it_spent_over_all_expansions(trace):
    steps = trace.of_kind("particles")
    spent = [s.tokens_spent for s in steps]
    assert spent == sorted(spent) and stats(trace)["tokens_spent"] == spent[-1]
    assert Trace.from_json(trace.to_json()).to_dict() == json.loads(trace.to_json())  # a valid, replayable trace


@pytest.mark.slow  # the real model tiny-math
def test_a_star_stops_within_one_expansion(problem):
    stop, events = [], []
    for event in generate("tiny-math", prompt(problem.question), strategy="a-star",
                          params={"n": 2, "max_expansions": 50}, max_new_tokens=160, seed=0, chat=False,
                          should_stop=lambda: bool(stop)):
        events.append(event)
        if event.kind == "particles":
            stop.append(True)
    assert events[-1].stop_reason == "cancelled" and len([e for e in events if e.kind == "particles"]) == 1


@pytest.mark.slow  # the real model tiny-math
def test_max_expansions_is_checked():
    with pytest.raises(ValueError, match="max_expansions"):
        run_to_trace("tiny-math", "Leo has 3 apples.\n", strategy="a-star", params={"max_expansions": 0})


def test_the_search_tree_figure_draws_every_node_and_the_chosen_path(trace):
    from visualizers import search_tree_figure

    fig = search_tree_figure(trace.of_kind("particles"), trace.finish.extra)
    by_name = {t.name: t for t in fig.data}
    made = sum(len(s.extra["nodes"]) for s in trace.of_kind("particles")) + 1  # and the root
    assert sum(len(by_name[k].x) for k in ("expanded", "frontier", "complete")) == made
    assert len(by_name["expanded"].x) == len(trace.of_kind("particles"))
    path = [x for x in by_name["chosen path"].x if x is not None]
    assert max(path) == trace.finish.extra["particles"][0]["text"].count("\n") + 1  # down to the chosen solution
    assert len(search_tree_figure([]).data) == 0
