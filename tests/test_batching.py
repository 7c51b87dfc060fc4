"""Visitors' runs share the model's steps (issue 44, decoding/batching.py): runs of several strategies in one batch,
rows joining and leaving mid-run, each get exactly their lone run's tokens (and its probabilities, entropies and
alternatives within float rounding: each row's attention runs over its own cache); Stop withdraws one row and touches no
other; the batch is one holder of the compute slots and drains for a run that waits for one."""

from __future__ import annotations

import threading
import time

import pytest

from decoding.batching import ServerLog, StepBatcher, activity
from decoding.events import Trace
from decoding.models import load_model
from decoding.run import generate, run_to_trace
from ui.worker import ComputeSlots

PROMPTS = ["a", "hello there", "The quick brown fox jumps over", "2 + 2 =", "Stop means stop", "xyz xyz xyz xyz",
           "And it came to pass"]
RUNS = [  # (strategy, params, max_new_tokens, seed): different lengths, so rows leave at different steps
    ("greedy", {}, 14, 0),
    ("sample", {"top_p": 0.9}, 20, 1),
    ("sample", {"min_p": 0.1, "temperature": 0.8}, 9, 2),
    ("mirostat", {}, 16, 3),
    ("momentum", {}, 6, 0),
    ("adadec", {"threshold": 0.5, "lookahead": 2}, 11, 0),  # pauses: k-row lookahead calls go solo, in turn
    ("superposed", {}, 12, 0),  # its steps feed one embedding: batched as embeddings
]


def lone(loaded, i: int) -> Trace:
    strategy, params, n, seed = RUNS[i]
    return run_to_trace(loaded, PROMPTS[i], strategy=strategy, params=params, max_new_tokens=n, seed=seed, chat=False)


def batched_run(batcher, i: int, out: dict, should_stop=lambda: False, after=None, started=None) -> None:
    if after is not None:
        after.wait(30)
    strategy, params, n, seed = RUNS[i]
    with batcher.join(should_stop) as lm:
        out[i] = trace = Trace()
        for event in generate(lm, PROMPTS[i], strategy=strategy, params=params, max_new_tokens=n, seed=seed,
                              chat=False, should_stop=should_stop):
            trace.append(event)
            if started is not None and len(trace.of_kind("token")) == 3:
                started.set()


def assert_same(alone: Trace, batched: Trace, what) -> None:
    assert batched.finish.token_ids == alone.finish.token_ids, what
    assert batched.finish.forward_passes == alone.finish.forward_passes, what
    for a, b in zip(alone.of_kind("token"), batched.of_kind("token"), strict=True):
        assert (a.token_id, a.top_ids, a.kept_size, a.rank) == (b.token_id, b.top_ids, b.kept_size, b.rank), what
        # attention row by row over each row's own cache: the lone call's numbers (to the bit on SmolLM2; a float32
        # matrix product of several rows may round the last bit otherwise, as on tiny-random)
        assert b.prob == pytest.approx(a.prob, abs=1e-6) and b.entropy == pytest.approx(a.entropy, rel=1e-5), what
        assert b.top_probs == pytest.approx(a.top_probs, abs=1e-6), what
        assert b.sampling_prob == pytest.approx(a.sampling_prob, abs=1e-6), what


@pytest.mark.parametrize("model", ["tiny-random",
                                   pytest.param("tiny-ar", marks=pytest.mark.slow),  # a trained model: peaked steps
                                   pytest.param("smollm2-135m", marks=pytest.mark.slow)])  # the Space's model
def test_rows_joining_and_leaving_mid_run_get_their_lone_runs(model):
    loaded = load_model(model)
    alone = [lone(loaded, i) for i in range(len(RUNS))]
    log = ServerLog()
    batcher = StepBatcher(loaded, gather_s=1.0, log=log)  # a pass waits (up to 1 s) for every member to ask
    out: dict[int, Trace] = {}
    started = threading.Event()  # the first runs have made 3 tokens: the late ones join then
    early = [threading.Thread(target=batched_run, args=(batcher, i, out), kwargs={"started": started if i == 1 else None})
             for i in range(4)]
    late = [threading.Thread(target=batched_run, args=(batcher, i, out), kwargs={"after": started})
            for i in range(4, len(RUNS))]
    for thread in early + late:
        thread.start()
    for thread in early + late:
        thread.join(120)
    for i in range(len(RUNS)):
        assert_same(alone[i], out[i], (model, RUNS[i]))
    steps = [p for p in log.passes if not p.solo]
    assert max(len(p.runs) for p in steps) >= 3, "no step was shared"
    first = set(steps[0].runs)
    assert any(set(p.runs) - first and set(p.runs) & first for p in steps), "no row joined a running batch"
    assert len(steps[-1].runs) < max(len(p.runs) for p in steps), "the rows that ended did not leave"
    assert not batcher.members  # every run left
    deadline = time.monotonic() + 10
    while batcher.thread is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert batcher.thread is None  # and the pass thread ended (within a tick)


def test_stop_withdraws_one_row_and_touches_no_other():
    loaded = load_model("tiny-random")
    alone = [lone(loaded, i) for i in range(3)]
    batcher = StepBatcher(loaded, gather_s=1.0, log=ServerLog())
    out: dict[int, Trace] = {}
    stop = threading.Event()
    threads = [threading.Thread(target=batched_run, args=(batcher, 0, out), kwargs={"started": stop}),
               threading.Thread(target=batched_run, args=(batcher, 1, out), kwargs={"should_stop": stop.is_set}),
               threading.Thread(target=batched_run, args=(batcher, 2, out))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    stopped = out[1].finish
    assert stopped.stop_reason == "cancelled"
    assert stopped.token_ids == alone[1].finish.token_ids[:len(stopped.token_ids)] and len(stopped.token_ids) < 20
    assert_same(alone[0], out[0], "greedy beside a stopped row")
    assert_same(alone[2], out[2], "min-p beside a stopped row")


def test_the_batch_is_one_slot_holder_and_drains_for_a_run_waiting_for_a_slot():
    loaded = load_model("tiny-random")
    slots = ComputeSlots(1)
    batcher = StepBatcher(loaded, slots=slots, log=ServerLog())
    order: list[str] = []
    with batcher.join() as first:
        assert first is not None and slots.busy == 1  # the batch took the only slot

        def slot_run():  # speculative, say: waits for the slot, computes, gives it back
            assert slots.acquire(lambda: False, lambda ahead: order.append(f"slot run waits, {ahead} ahead"))
            order.append("slot run computes")
            time.sleep(0.1)
            slots.release()

        def joiner():
            with batcher.join(waiting=lambda ahead: order.append("joiner waits")) as lm:
                order.append("joiner admitted" if lm is not None else "joiner stopped")

        waiter = threading.Thread(target=slot_run)
        waiter.start()
        while not slots.waiting_count():
            time.sleep(0.01)
        late = threading.Thread(target=joiner)
        late.start()
        time.sleep(0.3)
        assert "joiner admitted" not in order  # the batch admits no one while a run waits for a slot
    waiter.join(10)
    late.join(10)
    assert order == ["slot run waits, 1 ahead", "joiner waits", "slot run computes", "joiner admitted"]
    assert slots.busy == 0 and not batcher.holding


def test_activity_reports_the_recent_passes_and_members():
    loaded = load_model("tiny-random")
    log = ServerLog()
    batcher = StepBatcher(loaded, log=log)
    out: dict[int, Trace] = {}
    batched_run(batcher, 0, out)
    snapshot = activity(60.0, log=log)
    assert [m.joined for m in snapshot.members] == [True, False]
    assert sum(not p.solo for p in snapshot.passes) == RUNS[0][2] - 1  # a step per token after the prefill's
    assert activity(60.0, log=log, now=time.monotonic() + 120).passes == []  # out of the window
