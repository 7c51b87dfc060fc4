"""The contracts every method is written against: run context, outcome, strategy, drafter.

A strategy is a generator function  fn(ctx: RunContext, params, outcome: Outcome) -> events.
It reads the model, prompt, limits, randomness and stop check from `ctx`, fills `outcome` with
the generated ids and the stop reason, and yields an event after every model call.

Stop: a strategy asks `ctx.should_stop()` before EVERY model call (drafts, verifications,
particle steps, reward and judge calls included), so a cancelled run ends within one model
call. Where the call sits deep inside a step (a particle batch), the helper raises `Cancelled`
and the strategy, or `decoding.run.generate`, ends the run there with stop reason "cancelled".

A drafter (speculative decoding) subclasses `Drafter`: `propose` a draft tree for a context,
then `observe` the target's verification pass as a typed `Feedback` record. What a drafter
needs from that pass is declared as class attributes, not probed with getattr.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Protocol

import torch

if TYPE_CHECKING:  # imported for annotations only: the core must not import a family
    from decoding.events import Event
    from decoding.speculative.drafters import Draft, TreePlan


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


@dataclass(frozen=True)
class Feedback:
    """What the target's pass over some rows tells a drafter (a verification, or the prefill).

    rows index the pass's positions; row_tokens are the tokens fed at those positions and
    row_logits / target_probs the target's next-token logits / probabilities after them.
    """

    row_tokens: list[int]  # tokens whose next-token rows are given, in order
    row_logits: torch.Tensor  # (R, V) target logits after each of them
    target_probs: torch.Tensor  # (R', V) target probabilities (temperature applied) at the judged rows
    greedy: bool  # temperature 0 verification
    rows: list[int]  # positions of the judged rows in the pass (hidden_states index)
    hidden_states: tuple | None = None  # all layers of the pass, when the drafter asked for them


class Drafter:
    """Base of speculative drafters (as transformers' CandidateGenerator): propose, then observe.

    Subclasses set `name` and implement `propose`; `observe` is optional (a drafter that learns
    nothing between rounds keeps the default).
    """

    name: str = "drafter"
    needs_hidden_states: ClassVar[bool] = False  # the verification pass must return every layer
    prefill_rows: ClassVar[int] = 0  # trailing prompt rows to observe after the prefill (-1 = all)

    def propose(self, context: list[int], plan: TreePlan, temperature: float, generator: torch.Generator) -> Draft:
        """A draft tree for `context`. A drafter that calls a model asks `plan.should_stop()` before each
        call and, once it is True, returns the draft it has (the strategy then ends the run)."""
        raise NotImplementedError

    def observe(self, feedback: Feedback) -> None:
        """Learn from the target's pass (default: nothing)."""
