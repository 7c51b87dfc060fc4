"""Stop means stop, for every lab (issue 12).

Three levels, each with the property the issue asks for:

- the engine: every strategy asks the stop flag before each model call (drafts, verifications,
  particle batches, reward and judge calls), so Stop pressed during model call k means no call k + 1;
- the pump (`ui.worker.stream_in_thread`): closing a run waits for its worker, and a worker computes
  only while it holds one of the process's model slots;
- each lab (Playground, Speculative, Scaling with N = 64, Diffusion), through its tab's callback and over
  HTTP: cancel mid-run; the cancelled run's worker is gone within 1 s of the cancel's answer, and the
  request that follows at once never computes beside it (one decoding thread per slot).

The lab tests slow every model call down to CALL_S, as a real model's would be, so the cancel lands
inside a call and a worker that outlived it would overlap the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass

import pytest
import torch

import ui.worker
from decoding.diffusion.lm import DiffusionLM
from decoding.events import RunFinished
from decoding.lm import LM
from decoding.registry import STRATEGIES
from decoding.run import MAX_NEW_TOKENS_CAP, as_lm, run_to_trace
from decoding.scaling import scoring
from drafter_settings import TARGET_PROMPTS, VERSE, arrange, drafter_names, drafter_setting, target_name
from ui.worker import Status, WORKER_NAME, model_event, model_slot, stream_in_thread

TINY, TINY_DRAFT, TINY_DIFFUSION = "tiny-random", "tiny-random-draft", "tiny-random-diffusion"
PROMPT = "Stop means stop: 2 + 3 = 5\n4 + 4 ="
CALL_S = 0.2  # a slowed model call in the lab tests (a real model's is 0.05-1 s)
WAIT_S = 60.0  # generous limit for a run to start on a busy machine
IDLE_S = 1.0  # the figure: the cancelled worker is gone within this after the cancel answers


def wait_until(condition, timeout: float, poll: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


@dataclass
class Run:
    """One decoding run as a worker iterated it (`generate` in ui.worker)."""

    thread: threading.Thread
    started: float
    ended: float | None = None
    stop_reason: str | None = None


class Probe:
    """Watches model calls and decoding runs in this process (the test app server runs here too).

    Every model call (causal `LM.forward`, the diffusion model's one call site) is counted, slowed to
    `call_s` and can set the stop flag from inside call number `stop_at` (Stop pressed during it).
    Every run a worker iterates is recorded with its thread, and `max_active` is the most that ever
    iterated at once."""

    def __init__(self, monkeypatch, call_s: float = 0.0):
        self.call_s, self.stop_at = call_s, None
        self.sites: list | None = None  # a list: where each call came from is recorded (see `call_site`)
        self.calls, self.stop, self.began = 0, threading.Event(), threading.Event()
        self.lock = threading.Lock()
        self.runs: list[Run] = []
        self.active = self.max_active = 0
        for cls, name in ((LM, "forward"), (DiffusionLM, "_call")):
            monkeypatch.setattr(cls, name, self._counted(getattr(cls, name)))
        monkeypatch.setattr(ui.worker, "generate", self._tracked(ui.worker.generate))

    def reset(self, stop_at: int | None = None) -> None:
        self.calls, self.stop_at = 0, stop_at
        self.stop.clear()

    def _counted(self, call):
        def counted(lm, *args, **kwargs):
            with self.lock:
                self.calls += 1
                if self.calls == self.stop_at:
                    self.stop.set()
                if self.sites is not None:
                    self.sites.append(call_site())
            self.began.set()
            if self.call_s:
                time.sleep(self.call_s)
            return call(lm, *args, **kwargs)

        return counted

    def _tracked(self, generate):
        def tracked(*args, **kwargs):
            run = Run(threading.current_thread(), time.monotonic())
            with self.lock:
                self.runs.append(run)
                self.active += 1
                self.max_active = max(self.max_active, self.active)
            try:
                for event in generate(*args, **kwargs):
                    if isinstance(event, RunFinished):
                        run.stop_reason = event.stop_reason
                    yield event
            finally:
                with self.lock:
                    self.active -= 1
                    run.ended = time.monotonic()

        return tracked

    def mid_call(self, min_calls: int = 3) -> None:
        """Wait until the run has made `min_calls` model calls and the next one has just begun."""
        assert wait_until(lambda: self.calls >= min_calls, WAIT_S), f"only {self.calls} model calls in {WAIT_S} s"
        self.began.clear()
        assert self.began.wait(WAIT_S), "no model call began"

    def idle(self) -> bool:
        """No run iterating and no worker thread alive (ours or any other)."""
        workers = [t for t in threading.enumerate() if t.name == WORKER_NAME and t.is_alive()]
        return self.active == 0 and not workers


# The engine: Stop during model call k, and call k + 1 never starts ------------------------------------
DECODING = f"{os.sep}decoding{os.sep}"


def call_site() -> tuple:
    """Where a model call came from: the (file, line) of every frame in the `decoding` package on its stack
    (the strategy's loop, the helper it called, the run that drives it)."""
    frame, site = sys._getframe(2), []
    while frame is not None:
        if DECODING in frame.f_code.co_filename:
            site.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(site)


def stop_points(sites: list) -> list[int]:
    """The model calls to press Stop during. A missing stop check shows as a call k + 1 that runs after Stop
    was pressed during call k, and which code runs between the two depends on where each came from: so for
    every pair (site of call k, site of call k + 1) the first and the last k where it occurs (every k when the
    run makes at most 12 calls). Pressing Stop during every call instead costs calls**2 / 2 model calls."""
    if len(sites) <= 12:
        return list(range(1, len(sites)))
    first: dict = {}
    last: dict = {}
    for k in range(1, len(sites)):  # call k (1-based) is followed by call k + 1
        pair = (sites[k - 1], sites[k])
        first.setdefault(pair, k)
        last[pair] = k
    return sorted(set(first.values()) | set(last.values()))


def byte_judge(lm):
    """`lm_judge` for the byte-level tiny model (it has no single-token Yes): a model call per judgement."""
    def judge(prompt: str) -> float:
        ids, _, _ = lm.encode_prompt(prompt, chat=False)
        probs = torch.softmax(lm.forward(torch.tensor([ids[-64:]]), last_only=True).logits[0, -1], -1)  # (V,)
        return float(probs.max())

    return judge


MODEL_DRAFT = {"drafter": "model", "draft_model": TINY_DRAFT, "draft_length": 3}
SCALING = {"n": 4, "max_step_tokens": 3, "reward": "lm-judge", "temperature": 1.0}  # batch calls and judge calls
# Every registered strategy is covered with its defaults (a new method is covered without an edit here),
# on the tiny model of its family; a method whose defaults call the model too little to test Stop, or that
# needs a setting to run on the tiny models, has its settings here, and some get more cases (drafters, trees).
FAMILY_DEFAULTS = {"scaling": SCALING}  # batch calls and judge calls
SETTINGS = {
    "sample": [{"top_k": 20}], "contrastive": [{"top_k": 3}], "beam": [{"num_beams": 3}],
    # every registered drafter at its tiny setting (tests/drafter_settings.py; DEL's layer and length change every
    # round), and trees, sampling and a fixed exit layer
    "speculative": [drafter_setting(name) | {"draft_length": 3} for name in drafter_names()] + [
        MODEL_DRAFT | {"tree": "static"}, MODEL_DRAFT | {"tree": "dynamic", "temperature": 1.0},
        {"drafter": "early-exit", "exit_layer": 2, "draft_length": 3}],
    "reward-beam": [SCALING | {"beam_width": 2}],
    "first-finish": [{"n": 4, "chunk_tokens": 3, "reward": "lm-judge"}],
    "diffusion": [{}, {"block_length": 4, "remasking": "margin"}, {"sampler": "freedave", "draft_steps": 3}],
    "exact-extract": [{"max_span_tokens": 4, "batch_rows": 2}],
    "step-speculation": [{"n": 2, "max_step_tokens": 3, "draft_model": TINY_DRAFT},
                         {"n": 2, "max_step_tokens": 3, "draft_model": TINY_DRAFT, "gate": "oracle"}],
    # a Stop test costs calls**2 / 2: A* with its 16 expansions makes 101 calls (38 s) where 4 show every kind
    # (expansions, batch and judge calls; 27 calls), and refine's 2 rounds show a rewrite as its 3 do
    "a-star": [SCALING | {"max_expansions": 4}], "refine": [SCALING | {"rounds": 2}],
    "rag": [{}, {"mode": "iterdrag", "iterations": 2, "step_tokens": 4}],  # feeds between parts are model calls too
}
CASES = [(name, params) for name, info in STRATEGIES.items() if info.fn.__module__.startswith("decoding.")  # shipped
         for params in SETTINGS.get(name, [FAMILY_DEFAULTS.get(info.family, {})])]
# exact-extract reads a passage and a question; every other strategy continues PROMPT (or its own opening)
PROMPTS = {"exact-extract": "Context: Stop means stop. Question: What does stop mean? Answer:",
           # the models trained for LUD, HAMburger and FTP end a verse early on an unfamiliar prompt: a verse opening
           **dict.fromkeys(("lud", "hamburger", "ftp"), VERSE)}  # (and a drafter's tiny-ar target: TARGET_PROMPTS)


def test_the_settings_name_only_registered_strategies():
    assert set(SETTINGS) <= set(STRATEGIES), set(SETTINGS) - set(STRATEGIES)


@pytest.mark.parametrize("strategy, params", CASES, ids=[f"{s}-{json.dumps(p)}" for s, p in CASES])
def test_stop_during_any_model_call_ends_the_run_before_the_next(strategy, params, monkeypatch, tmp_path):
    monkeypatch.setattr(scoring, "lm_judge", byte_judge)
    models = STRATEGIES[strategy].models  # LUD, HAMburger, FTP: the (shipped, tiny) model trained for them
    lm = as_lm(TINY_DIFFUSION if strategy == "diffusion" else models[0] if models else
               target_name(params["drafter"]) if strategy == "speculative" else TINY)
    if strategy == "speculative":
        arrange(params["drafter"], lm, tmp_path, monkeypatch)  # EAGLE's and LongSpec's random heads
    probe = Probe(monkeypatch)
    kwargs = dict(strategy=strategy, params=params, max_new_tokens=8, seed=0,
                  chat=False)
    prompt = TARGET_PROMPTS.get(lm.name) if strategy == "speculative" else None
    prompt = prompt or PROMPTS.get(strategy, PROMPT)
    probe.sites = []
    full = run_to_trace(lm, prompt, **kwargs)
    sites, probe.sites = probe.sites, None
    assert len(sites) >= 4 and full.finish.stop_reason != "cancelled"
    for stop_at in stop_points(sites):  # Stop pressed during call k, for every kind of step from k to k + 1
        probe.reset(stop_at)
        trace = run_to_trace(lm, prompt, should_stop=probe.stop.is_set, **kwargs)
        assert probe.calls == stop_at, f"Stop came during model call {stop_at}; {probe.calls - stop_at} more ran"
        assert trace.finish.stop_reason == "cancelled" and trace.events[-1] is trace.finish


def test_a_step_cut_short_is_dropped_and_the_answer_comes_from_the_last_step_shown(monkeypatch):
    monkeypatch.setattr(scoring, "lm_judge", byte_judge)
    probe = Probe(monkeypatch)
    kwargs = dict(strategy="particle-filter", params=SCALING, max_new_tokens=12, seed=0, chat=False)
    probe.reset(stop_at=12)  # in the second step's judge calls (a step: 3 batch calls, 4 judge calls)
    trace = run_to_trace(TINY, PROMPT, should_stop=probe.stop.is_set, **kwargs)
    (step,) = trace.of_kind("particles")
    assert trace.finish.stop_reason == "cancelled" and probe.calls == 12
    texts = {p["text"] for p in step.particles}  # after the step, before resampling
    final = trace.finish.extra["particles"]
    assert trace.finish.text in texts and {p["text"] for p in final} <= texts  # no token of the dropped step
    assert [p["num_tokens"] for p in final] == [3] * 4


# The pump: closing waits for the worker; one worker per model slot ----------------------------------
def slow_work(log: list, call_s: float = 0.3, calls: int = 100):
    """A `work` that makes `calls` model calls of `call_s` each, asking the stop flag before each."""
    def work(emit, should_stop):
        log.append(("start", time.monotonic()))
        try:
            for i in range(calls):
                if should_stop():
                    return
                time.sleep(call_s)
                emit(i)
        finally:
            log.append(("end", time.monotonic()))

    return work


def test_closing_the_pump_returns_once_the_worker_has_stopped():
    log, late = [], []
    pump = stream_in_thread(slow_work(log), on_late=late.append)
    assert wait_until(lambda: next(pump) != [], WAIT_S, poll=0)
    pump.close()  # during a "model call"
    assert log[-1][0] == "end", "the worker was still computing when the close returned"
    assert not [t for t in threading.enumerate() if t.name == WORKER_NAME]


def test_a_worker_that_outlives_the_close_still_holds_its_slot():
    """If a model call is longer than the close waits, the next run waits for the slot instead of overlapping."""
    log_a, log_b = [], []
    first = stream_in_thread(slow_work(log_a, call_s=1.0), stop_wait_s=0.05)
    next(first)  # starts the worker
    assert wait_until(lambda: log_a, WAIT_S)
    first.close()  # returns while the worker is still in its 1 s call
    assert log_a[-1][0] == "start"
    second = stream_in_thread(slow_work(log_b, call_s=0.01, calls=3))
    items = [item for batch in second for item in batch]
    assert isinstance(items[0], Status) and "1 run ahead" in items[0].text and items[1:] == [0, 1, 2]
    ended_a = dict(log_a)["end"]
    assert dict(log_b)["start"] >= ended_a, "two workers computed at once"


def test_a_waiting_run_can_be_stopped_before_it_starts():
    with model_slot() as held:  # another run holds the only slot
        assert held
        log = []
        pump = stream_in_thread(slow_work(log))
        assert isinstance(next(b for b in pump if b)[0], Status)
        pump.close()
    assert log == [] and not [t for t in threading.enumerate() if t.name == WORKER_NAME]


def test_a_cancelled_event_ends_within_one_model_call_once_its_worker_stopped():
    """What Gradio does on Stop: cancel the event's task. The callback here yields only every 5 model calls
    (a particle step); the task must end within one call, and only after the worker has stopped."""
    log = []

    def callback():
        with contextlib.closing(stream_in_thread(slow_work(log, call_s=0.3))) as pump:
            for batch in pump:
                yield from (i for i in batch if i % 5 == 4)

    async def cancel_mid_step() -> float:
        updates = model_event(callback)()
        task = asyncio.create_task(anext(updates))
        while not log:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # inside the first "model call" of a 5-call step
        sent = time.monotonic()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return time.monotonic() - sent

    took = asyncio.run(cancel_mid_step())
    assert log[-1][0] == "end", "the task ended while its worker was still computing"
    assert took < 1.0, f"the cancel took {took:.2f} s (the step had 1.2 s left)"


# Each lab: through its tab callback and over HTTP ---------------------------------------------------
def _fields(views_module, **changes) -> dict:
    """A lab tab's parameter fields by name, as its Generate passes them: the defaults with `changes`."""
    settings = views_module.DEFAULT_SETTINGS | changes
    names = getattr(views_module, "SPEC_FIELDS", None) or views_module.FIELDS
    return {name: settings[name] for name in names}


def _lab_callback(lab: str):
    """A long run of the lab's Generate, as Gradio calls it (tiny random models, max_new_tokens near the cap)."""
    if lab == "playground":
        from ui import playground_callbacks as cb
        from ui.playground_views import new_selection, param_widgets

        widgets = {w.key: w.default for w in param_widgets()}
        return cb.generate_run(TINY, "sample", PROMPT, MAX_NEW_TOKENS_CAP, 0, False, "auto", "prob", new_selection(),
                               **widgets)
    if lab == "speculative":
        from ui import speculative_callbacks as cb
        from ui import speculative_views

        return cb.generate_run(TINY, PROMPT, MAX_NEW_TOKENS_CAP - 16, 0, False, False,
                               **_fields(speculative_views, drafter="model", tree="static",
                                          **{"model.draft_model": TINY_DRAFT}))
    if lab == "scaling":
        from ui import scaling_callbacks as cb
        from ui import scaling_views

        return cb.generate_run(TINY, PROMPT, "particle-filter", MAX_NEW_TOKENS_CAP, 0, False, "none",
                               **_fields(scaling_views, n=64, max_step_tokens=512))
    from ui import diffusion_callbacks as cb
    from ui import diffusion_views

    return cb.generate_run(TINY_DIFFUSION, PROMPT, 512, 0, "none", **_fields(diffusion_views))


LAB_API = {  # the same runs through the /generate endpoint: strategy, max_new_tokens, params
    "playground": ("sample", MAX_NEW_TOKENS_CAP, {}),
    "speculative": ("speculative", MAX_NEW_TOKENS_CAP - 16, {"drafter": "model", "draft_model": TINY_DRAFT,
                                                             "tree": "static"}),
    "scaling": ("particle-filter", MAX_NEW_TOKENS_CAP, {"n": 64, "max_step_tokens": 512}),
    "diffusion": ("diffusion", 512, {}),
}
LABS = list(LAB_API)


def _start(run, probe: Probe) -> None:
    """Iterate a callback's generator (as Gradio does) until its worker has begun a run; the worker then
    decodes on its own (the callback only draws)."""
    runs = len(probe.runs)
    deadline = time.monotonic() + WAIT_S
    while len(probe.runs) == runs:
        assert time.monotonic() < deadline, f"no run started in {WAIT_S} s"
        next(run)


@pytest.mark.parametrize("lab", LABS)
def test_stop_in_the_tab_ends_the_run_before_the_next_one_computes(lab, monkeypatch):
    probe = Probe(monkeypatch, call_s=CALL_S)
    first = _lab_callback(lab)
    _start(first, probe)
    probe.mid_call(3)  # Stop lands just after a model call began
    first.close()  # what Gradio does on Stop
    closed = time.monotonic()
    second = _lab_callback(lab)  # the next request, at once
    _start(second, probe)
    calls = probe.calls
    assert wait_until(lambda: probe.calls >= calls + 2, WAIT_S)
    cancelled = probe.runs[0]
    assert cancelled.ended is not None and cancelled.ended - closed <= IDLE_S and not cancelled.thread.is_alive()
    assert cancelled.stop_reason == "cancelled"
    assert len(probe.runs) == 2 and probe.max_active == 1, "a cancelled run computed beside the next one"
    second.close()
    assert wait_until(probe.idle, IDLE_S), "a decoding thread outlived Stop by more than 1 s"


@pytest.mark.slow  # the HTTP server
@pytest.mark.parametrize("lab", LABS)
def test_cancel_over_http_answers_once_the_run_stopped_and_the_next_request_runs_alone(lab, client, monkeypatch):
    probe = Probe(monkeypatch, call_s=CALL_S)
    strategy, max_new_tokens, params = LAB_API[lab]
    model = TINY_DIFFUSION if lab == "diffusion" else TINY
    job = client.submit(model, strategy, PROMPT, max_new_tokens, 0, json.dumps(params), False, api_name="/generate")
    probe.mid_call(3)
    sent = time.monotonic()
    job.cancel()  # POST /cancel; it answers once the worker has stopped
    answered = time.monotonic()
    short = {"n": 4, "max_step_tokens": 2} if lab == "scaling" else {}
    following = client.submit(model, strategy, PROMPT, 4, 0, json.dumps(params | short), False,
                              api_name="/generate")
    cancelled = probe.runs[0]
    assert wait_until(lambda: not cancelled.thread.is_alive(), IDLE_S), "the cancelled run kept computing"
    assert cancelled.stop_reason == "cancelled" and cancelled.ended - answered <= IDLE_S
    assert answered - sent < CALL_S + 5.0, f"cancel took {answered - sent:.1f} s to answer"
    assert following.result(timeout=WAIT_S * 2)["stats"]["stop_reason"] in ("eos", "max_new_tokens")
    assert len(probe.runs) == 2 and probe.max_active == 1, "two decoding threads ran at once"
    assert wait_until(probe.idle, IDLE_S)
