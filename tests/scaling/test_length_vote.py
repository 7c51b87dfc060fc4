"""Think Deep, Think Fast's length signal in majority voting (`majority-vote` with `shortest`)."""

import pytest

from decoding import run_to_trace
from decoding.scaling import math_tasks
from decoding.scaling.methods import shortest_share


def test_the_length_vote_keeps_the_shortest_complete_answers():
    lengths = [30, 12, 50, 12, 40]
    assert shortest_share(lengths, [0, 1, 2, 3], 0.5) == {1, 3}
    assert shortest_share(lengths, [0, 1, 2, 3], 0.3) == {1, 3}  # ceil(4 x 0.3) = 2
    assert shortest_share(lengths, [0, 2], 0.1) == {0}  # at least one votes
    assert shortest_share(lengths, [], 0.5) == set(range(5))  # none complete: everyone
    assert shortest_share(lengths, [0, 1, 2], 1.0) == set(range(5))


@pytest.mark.slow  # the real model tiny-math, 8 samples
def test_only_the_shortest_answers_vote():
    problem = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"][2]
    params = {"n": 8, "temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}
    run = dict(max_new_tokens=160, chat=False, seed=1)
    every = run_to_trace("tiny-math", math_tasks.prompt(problem.question), strategy="majority-vote", params=params, **run)
    short = run_to_trace("tiny-math", math_tasks.prompt(problem.question), strategy="majority-vote",
                         params={**params, "shortest": 0.25}, **run)
    a, b = every.finish.extra["particles"], short.finish.extra["particles"]
    assert [p["text"] for p in a] == [p["text"] for p in b]  # the same samples
    ended = [p for p in b if p["ended"]]
    voters = sorted(ended, key=lambda p: (p["num_tokens"], p["id"]))[:2]
    assert sum(short.finish.extra["votes"].values()) == 2
    assert set(short.finish.extra["votes"]) <= {p["answer"] for p in voters}
    assert "shortest 2 complete answers" in short.finish.extra["rule"]
