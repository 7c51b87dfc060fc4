"""The drafter contract of speculative decoding: a drafter proposes, then observes the target's pass.

A drafter subclasses `Drafter` (as transformers' `CandidateGenerator`): `propose` a draft tree
for a context, then `observe` the target's verification pass as a typed `Feedback` record. What a
drafter needs from that pass is declared as class attributes, not probed with getattr. Drafters
register in `decoding.speculative.strategy.DRAFTERS`.

Glossary
    draft     the proposed token tree (`decoding.speculative.drafters.Draft`) with its draft
              distributions q, grown to a `TreePlan`.
    feedback  what one target pass (a verification, or the prefill) shows the drafter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch

if TYPE_CHECKING:  # annotations only: drafters.py builds on this module
    from decoding.speculative.drafters import Draft, TreePlan


@dataclass(frozen=True)
class Feedback:
    """What the target's pass over some rows tells a drafter (a verification, or the prefill), and what the
    target's cache holds after it.

    rows index the pass's positions; row_tokens are the tokens fed at those positions and
    row_logits / target_probs the target's next-token logits / probabilities after them.

    The cache contract. After the pass the target's cache holds exactly the first `committed` positions of the
    context: every token the run has kept but the last one, which the next verification feeds (the round's bonus
    or corrected token; after the prefill, the prompt's last token). A verification feeds `fed` context tokens
    (pass rows 0..fed-1, at positions committed - len(accepted) - fed ...; one after the first round) and then the
    draft tree (pass rows fed + i for node i); the drafted nodes on the accepted path, `accepted` (in path order),
    stay in the cache as positions committed - len(accepted) .. committed - 1 (a tree's path gathered into place),
    so nothing accepted is fed again. A drafter that reads the target's state reads it from here (EAGLE's
    features of the committed positions, LongSpec's keys), never guesses it.
    """

    row_tokens: list[int]  # tokens whose next-token rows are given, in order
    row_logits: torch.Tensor  # (R, V) target logits after each of them
    target_probs: torch.Tensor  # (R', V) target probabilities (temperature applied) at the judged rows
    greedy: bool  # temperature 0 verification
    rows: list[int]  # positions of the judged rows in the pass (hidden_states index)
    committed: int  # positions the target's cache holds after the round: the context but its last token
    fed: int  # context tokens the pass fed before the tree (its rows 0..fed-1; the prefill: all its rows)
    accepted: tuple[int, ...] = ()  # drafted nodes on the accepted path, now cache positions committed - len .. - 1
    hidden_states: tuple | None = None  # all layers of the pass, when the drafter asked for them
    cache: object | None = None  # the target's cache after the round (`committed` positions; the rest of the tree
    # dropped): a drafter may read it (LongSpec's cross-attention on the last layer's keys) but must not keep it alive

    @property
    def start(self) -> int:
        """The context position of the pass's first row (what the cache held before the pass)."""
        return self.committed - len(self.accepted) - self.fed


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

    def target_probs(self, probs: torch.Tensor, draft: Draft) -> torch.Tensor:
        """What the round verifies against: (1 + n, V) rows as `probs`, the target's probabilities at the root and
        after each node. The default returns `probs` itself, which keeps every drafter lossless; a drafter's lossy
        option may return new rows (RAPID's retrieval-augmented target), and the run's tokens then follow those."""
        return probs

    def bytes_per_position(self) -> int:
        """The most bytes the drafter keeps per context position (a draft model's keys and values, EAGLE's
        features): what SpecMemo's budget reserves for it (`decoding.speculative.memory`). Default: none."""
        return 0
