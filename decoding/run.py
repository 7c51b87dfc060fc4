"""Run a strategy on a prompt: validate inputs, yield start -> strategy events -> finish.

`generate` is the one entry point the UI, CLI, tests and benchmarks share, so every run is
validated and recorded the same way.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Callable, Iterator

import torch

from decoding.events import Event, RunFinished, RunStarted, Trace
from decoding.lm import WRAPPERS, LM
from decoding.errors import short_repr
from decoding.models import LoadedModel, check_kind, check_model_id, load_model, model_kind
from decoding.contracts import Cancelled, Outcome, RunContext, StepProgress, ignore, never
from decoding.params import flat, from_values
from decoding.registry import FAMILY_CHECKS, get_strategy
from decoding.remote.lm import RemoteLM
from decoding.remote.source import is_remote
from decoding.remote.strategies import remote_strategy

MAX_NEW_TOKENS_CAP = 2048  # upper bound a user may ask for
MAX_PROMPT_CHARS = 40_000  # an 8K-token book for SmolLM2 is about 32,000 characters (the Long context lab)
MAX_STEP_S = 10.0  # the slowest pace a run may be given (seconds per step)
# The longest a run may compute, in seconds, where `generate` is not told (None: no limit). The app sets it for the
# runs of its worker threads (DECODING_LAB_RUN_LIMIT_S, `ui.worker.run_limit_s`), so one visitor's run cannot hold
# the model for hours; a run that reaches it ends as Stop ends it, its RunFinished saying why.
RUN_TIME_LIMIT: contextvars.ContextVar[float | None] = contextvars.ContextVar("decoding_lab_run_time_limit",
                                                                             default=None)
# When the run began holding the model (`time.perf_counter()`), where the app's worker set it: the limit is then counted
# from there in wall time (loading, building a prompt, pacing: everything done while the model is held), not from the
# strategy's first step.
RUN_CLOCK: contextvars.ContextVar[float | None] = contextvars.ContextVar("decoding_lab_run_clock", default=None)


def make_params(strategy: str, params: dict | None, *, lenient: bool = False):
    """The strategy's parameter dataclass from a dict (`decoding.params.from_values`: strings from the CLI's
    `--set` are converted; a plug-in's own knobs come as "<plug-in>.<field>"). Unknown names and bad values
    raise ValueError naming the parameter."""
    info = get_strategy(strategy)
    return from_values(info.params_cls, params, where=f"strategy {short_repr(strategy, 80)}", lenient=lenient)


def as_lm(model: str | LoadedModel | object, **load_kwargs) -> object:
    """The model's wrapper, the one its kind registered in `decoding.lm.WRAPPERS`: `LM` for a causal model,
    `DiffusionLM` for a masked diffusion one (registered by the diffusion family); the `RemoteLM` itself for a
    model on a remote engine. A wrapper given is returned as it is."""
    if isinstance(model, (RemoteLM, *WRAPPERS.values())):
        return model
    loaded = model if isinstance(model, LoadedModel) else load_model(model, **load_kwargs)
    if isinstance(loaded, RemoteLM):
        return loaded
    kind = model_kind(loaded)
    if kind not in WRAPPERS:  # a kind whose family was not imported
        raise ValueError(f"no wrapper for {loaded.name!r}, a {kind} model; known kinds: {', '.join(WRAPPERS)}")
    return WRAPPERS[kind](loaded)


def check_prompt(prompt) -> None:
    """ValueError naming the problem unless `prompt` is non-empty text within MAX_PROMPT_CHARS that
    encodes as UTF-8 (a lone surrogate such as "\\ud800", which JSON can carry, cannot)."""
    if not isinstance(prompt, str):
        raise ValueError(f"`prompt` must be text, got {type(prompt).__name__} {short_repr(prompt, 80)}")
    if not prompt.strip():
        raise ValueError("`prompt` is empty; type something for the model to continue")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"`prompt` is {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"`prompt` is not valid Unicode text: character {err.start} is a lone surrogate "
                         f"(U+{ord(prompt[err.start]):04X}); remove it") from None


def validate_request(prompt, strategy, params, max_new_tokens, seed):
    """Check a run's inputs before any model work; returns (strategy info, params dataclass)."""
    check_prompt(prompt)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= MAX_NEW_TOKENS_CAP:
        raise ValueError(f"`max_new_tokens` must be an integer in [1, {MAX_NEW_TOKENS_CAP}], got {short_repr(max_new_tokens)}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise ValueError(f"`seed` must be an integer in [0, 2**63), got {short_repr(seed)}")
    config = make_params(strategy, params)
    for name, value in flat(config).items():  # draft_model, judge_model, prm_model (a plug-in's too): ids, never paths
        if name.endswith("_model") and not (isinstance(value, str) and not value.strip()):
            if is_remote(value):  # said first: no engine list makes a remote helper possible
                raise ValueError(f"`{name}` must be a local model or hub id: a draft model, judge or PRM reads the full "
                                 "distribution, which a remote engine does not send (it can be the run's own model)")
            check_model_id(value, name)
    if hasattr(config, "check_length"):  # checks that need the generation length (diffusion steps, blocks)
        config.check_length(max_new_tokens)
    return get_strategy(strategy), config


def generate(
    model: str | LoadedModel | LM,
    prompt: str,
    *,
    strategy: str = "greedy",
    params: dict | None = None,
    max_new_tokens: int = 64,
    seed: int | None = 0,
    chat: bool = True,
    should_stop: Callable[[], bool] | None = None,
    prefix_ids: list[int] | None = None,
    min_step_s: float = 0.0,
    progress: Callable[[StepProgress], None] | None = None,
    time_limit_s: float | None = None,
    waited_s: float = 0.0,
) -> Iterator[Event]:
    """Yield a RunStarted, the strategy's events as they happen, then a RunFinished.

    `should_stop` is asked before every model call; once it returns True the run ends within one
    model call with stop reason "cancelled" (and still yields its RunFinished).

    `prefix_ids` branches a run: generation continues after these already generated ids (for
    example an earlier run's first tokens plus a chosen alternative); steps are numbered after
    them and RunFinished.token_ids includes them.

    `min_step_s` paces a run that is faster than the eye (a classroom watching a diffusion canvas): after
    each event the run waits until the step has lasted this long before its next model call. Nothing
    is replayed, Stop ends the wait at once, and the waiting is left out of every `elapsed_s`.

    `time_limit_s` (default: `RUN_TIME_LIMIT`'s value, None: no limit) ends the run like `should_stop` once it has
    computed that long: stop reason "cancelled", and RunFinished.extra["time_limit_s"] says it was the limit.

    `waited_s` is what the caller waited before this call (loading the model, other runs ahead), kept in
    RunStarted so a view can show it beside the first token's time; it is not part of any elapsed_s.

    `progress` is told what a long step has sampled so far (`StepProgress`: the particles of a scaling
    step, as their tokens come) for a live view; it is no event and never enters the trace.
    """
    if isinstance(min_step_s, bool) or not isinstance(min_step_s, (int, float)) or not 0 <= min_step_s <= MAX_STEP_S:
        raise ValueError(f"`min_step_s` must be a number of seconds in [0, {MAX_STEP_S}], got {short_repr(min_step_s)}")
    limit = RUN_TIME_LIMIT.get() if time_limit_s is None else time_limit_s
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0):
        raise ValueError(f"`time_limit_s` must be a positive number of seconds, got {short_repr(limit)}")
    info, config = validate_request(prompt, strategy, params, max_new_tokens, seed)
    lm = as_lm(model)
    remote = isinstance(lm, RemoteLM)
    run_fn = remote_strategy(info) if remote else info.fn  # ValueError saying why, for what an engine cannot run
    if not remote:
        check_kind(lm.loaded, info.family, info.name)
    prompt_ids, prompt_text, chat_applied = lm.encode_prompt(prompt, chat=chat)
    prefix_ids = [int(t) for t in (prefix_ids or [])]
    family_check = FAMILY_CHECKS.get(info.family)
    if family_check is not None:  # what only one family needs (a diffusion canvas fits the model, ...)
        family_check(lm, config, prompt_ids, max_new_tokens, prefix_ids)
    if any(not 0 <= t < lm.vocab_size for t in prefix_ids):
        raise ValueError(f"`prefix_ids` must be token ids in [0, {lm.vocab_size}), got {prefix_ids}")
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed if seed is not None else torch.seed())
    limited = TimeLimit(should_stop or never, limit, RUN_CLOCK.get())
    ctx = RunContext(lm=lm, prompt_ids=prompt_ids + prefix_ids, max_new_tokens=max_new_tokens, generator=generator,
                     should_stop=limited, started=time.perf_counter(),
                     step_offset=len(prefix_ids), prompt=prompt, progress=progress or ignore)
    if RUN_CLOCK.get() is None:
        limited.clock = ctx.elapsed  # the run's own computing seconds (a paced run's waiting is not counted)
    yield RunStarted(
        model=lm.name, strategy=info.name, params=flat(config), prompt=prompt,
        prompt_text=prompt_text, prompt_ids=prompt_ids, chat=chat_applied, seed=seed,
        max_new_tokens=max_new_tokens, device=str(lm.device), dtype=str(lm.loaded.dtype).removeprefix("torch."),
        vocab_size=lm.vocab_size, prefix_ids=prefix_ids, source=lm.source() if remote else {},
        waited_s=float(waited_s),
    )
    outcome = Outcome()
    calls = 0  # every model call the run's events counted (a drafter's too), carried by RunFinished
    try:
        if not outcome.cancelled(ctx):  # Stop during loading: no model call at all
            with contextlib.closing(paced(run_fn(ctx, config, outcome), ctx, min_step_s)) as events:
                for event in events:  # closing this generator closes the strategy's at once, as `yield from` did
                    calls += getattr(event, "forward_passes", 0) + getattr(event, "draft_forward_passes", 0)
                    yield event
    except Cancelled:  # a helper (or a chunked prefill) found the flag set before a model call, inside a step
        outcome.stop_reason = "cancelled"
        limited()  # whether it was the limit
    if limited.reached and outcome.stop_reason == "cancelled":
        outcome.extra["time_limit_s"] = limit
    token_ids = prefix_ids + outcome.token_ids
    yield RunFinished(text=lm.decode(token_ids), token_ids=token_ids, stop_reason=outcome.stop_reason,
                      elapsed_s=ctx.elapsed(), forward_passes=calls, extra=outcome.extra)


class TimeLimit:
    """`should_stop` that also turns True (and `reached`) once `clock()` reaches `limit_s`: by default the wall seconds
    since `started` (now, or the moment given: when the run began holding the model); `generate` sets it to the run's
    computing seconds where no start is given (a paced run's waiting is not counted). The limit is asked first and the
    outer check always, so a run stopped by an outer limit of the same start still says it was the limit."""

    def __init__(self, should_stop: Callable[[], bool], limit_s: float | None, started: float | None = None):
        self.should_stop, self.limit_s = should_stop, limit_s
        self.started = time.perf_counter() if started is None else started
        self.clock: Callable[[], float] = lambda: time.perf_counter() - self.started
        self.reached = False

    def __call__(self) -> bool:
        if self.limit_s is not None and self.clock() >= self.limit_s:
            self.reached = True
        stop = self.should_stop()  # always asked: an outer limit of the same start (the app's worker) learns it too
        return self.reached or stop


def paced(events: Iterator[Event], ctx: RunContext, min_step_s: float) -> Iterator[Event]:
    """The strategy's events, each step lasting at least `min_step_s`: the strategy is a generator, so
    waiting before asking for the next event holds back its next model call."""
    if not min_step_s:
        yield from events
        return
    with contextlib.closing(events):
        last = time.perf_counter()
        for event in events:
            yield event
            ctx.wait(min_step_s - (time.perf_counter() - last))
            last = time.perf_counter()


def run_to_trace(*args, **kwargs) -> Trace:
    """Run to the end and return the whole trace (`generate`'s arguments)."""
    trace = Trace()
    for event in generate(*args, **kwargs):
        trace.append(event)
    return trace
