"""A paced run (`generate(min_step_s=...)`): the strategy itself waits between steps (nothing is replayed),
the waiting is left out of the statistics, and Stop ends a wait at once."""

import threading
import time

import pytest

from decoding.events import TokenStep
from decoding.run import generate


def test_each_step_lasts_at_least_the_pace_and_elapsed_leaves_the_waits_out(tiny_lm):
    arrivals, started = [], time.perf_counter()
    events = []
    for event in generate(tiny_lm, "hello", strategy="greedy", max_new_tokens=6, chat=False, min_step_s=0.1):
        arrivals.append(time.perf_counter())
        events.append(event)
    wall = time.perf_counter() - started
    steps = [t for t, e in zip(arrivals, events) if isinstance(e, TokenStep)]
    # Each step waits until 0.1 s after the previous one began; this loop sees the events a little later or
    # earlier than they were made (a loaded machine), so the gaps are checked with room, their sum tightly.
    assert len(steps) == 6 and min(b - a for a, b in zip(steps, steps[1:])) >= 0.07
    assert steps[-1] - steps[0] >= 0.48
    assert events[-1].elapsed_s < wall - 0.4  # five waits of ~0.1 s are not computing time


def test_stop_ends_a_wait_within_a_step(tiny_lm):
    stop = threading.Event()
    passes = []
    started = time.perf_counter()
    for event in generate(tiny_lm, "hello", strategy="greedy", max_new_tokens=50, chat=False, min_step_s=5.0,
                          should_stop=stop.is_set):
        if isinstance(event, TokenStep):
            passes.append(tiny_lm.forward_passes)
            threading.Timer(0.2, stop.set).start()  # Stop pressed while the run waits for its next step
    assert event.stop_reason == "cancelled" and len(passes) == 1
    assert tiny_lm.forward_passes == passes[0]  # no model call after Stop
    assert time.perf_counter() - started < 3.0  # not the 5 s wait


@pytest.mark.parametrize("bad", [-0.1, 11.0, "fast", True])
def test_the_pace_is_checked(tiny_lm, bad):
    with pytest.raises(ValueError, match="`min_step_s` must be a number of seconds in \\[0, 10"):
        next(generate(tiny_lm, "hello", min_step_s=bad))
