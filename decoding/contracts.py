"""The contracts every method is written against: run context, outcome, strategy.

A strategy is a generator function  fn(ctx: RunContext, params, outcome: Outcome) -> events.
It reads the model, prompt, limits, randomness and stop check from `ctx`, fills `outcome` with
the generated ids and the stop reason, and yields an event after every model call.

Stop: a strategy asks `ctx.should_stop()` before EVERY model call (drafts, verifications,
particle steps, reward and judge calls included), so a cancelled run ends within one model
call. Where the call sits deep inside a step (a particle batch), the helper raises `Cancelled`
and the strategy, or `decoding.run.generate`, ends the run there with stop reason "cancelled".

The core never imports a family: a family's own plug-in contracts live in the family (the
speculative drafter's base and feedback record: `decoding.speculative.base`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import torch

if TYPE_CHECKING:  # imported for annotations only
    from decoding.events import Event


class Cancelled(Exception):
    """The run's stop flag was found set before a model call inside a step; the step is dropped."""


def never() -> bool:
    """The stop check of a run nobody can cancel."""
    return False


@dataclass(frozen=True)
class StepProgress:
    """A look inside a step under way: what each particle has sampled so far. Shown live by the UI, never
    recorded (the step's ParticleStep follows and replaces it), so traces and statistics are unchanged."""

    step: int  # the index the step's ParticleStep will have
    texts: list[str]  # per slot: its text before this step
    new_texts: list[str]  # per slot: what this step has added so far ("" for a waiting slot)
    tokens_spent: int  # sampled over all slots so far


def ignore(progress: StepProgress) -> None:
    """The progress callback of a run nobody watches."""


@dataclass
class RunContext:
    """What every strategy gets: the model, the prompt, limits, randomness and a stop check."""

    lm: object  # decoding.lm.LM, or decoding.diffusion.lm.DiffusionLM for the diffusion family
    prompt_ids: list[int]  # what the model is fed first (prompt, plus a branch's prefix)
    max_new_tokens: int
    generator: torch.Generator
    should_stop: Callable[[], bool]  # True once the user pressed Stop: ask before every model call
    started: float  # perf_counter() at the start of the run
    step_offset: int = 0  # index of the first generated step (a branch continues numbering)
    prompt: str = ""  # what the user typed (rewards and judges read the question from it)
    paused_s: float = 0.0  # time spent in `wait` (a paced run), left out of `elapsed`
    progress: Callable[[StepProgress], None] = ignore  # told about a long step's tokens as they are sampled

    def elapsed(self) -> float:
        """Seconds of computing since the run started: a paced run's waiting is not counted, so speed
        statistics stay those of the algorithm."""
        return time.perf_counter() - self.started - self.paused_s

    def wait(self, seconds: float) -> None:
        """Wait up to `seconds` between two steps (a paced run), returning early once Stop is pressed."""
        start = time.perf_counter()
        while (left := seconds - (time.perf_counter() - start)) > 0 and not self.should_stop():
            time.sleep(min(left, 0.02))
        self.paused_s += time.perf_counter() - start


class Outcome:
    """Filled by a strategy as it runs: the generated ids and why it stopped."""

    def __init__(self):
        self.token_ids: list[int] = []
        self.stop_reason = "max_new_tokens"
        self.extra: dict = {}

    def add(self, ctx: RunContext, token_id: int) -> bool:
        """Record a token; True when the run must end here (stop token or cancelled)."""
        self.token_ids.append(token_id)
        if token_id in ctx.lm.stop_ids:
            self.stop_reason = "eos"
            return True
        return self.cancelled(ctx)

    def cancelled(self, ctx: RunContext) -> bool:
        """True, with stop reason "cancelled", when the run's stop flag is set (ask before a model call)."""
        if ctx.should_stop():
            self.stop_reason = "cancelled"
            return True
        return False


class Strategy(Protocol):
    """The signature every registered strategy has."""

    def __call__(self, ctx: RunContext, params, outcome: Outcome) -> Iterator[Event]: ...
