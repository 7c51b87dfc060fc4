"""Every registered drafter on the tiny test models, read from the registry (`DRAFTERS`): the tables of the
lossless, Stop and cache-contract tests are built here, so a newly registered drafter is covered without an edit.

A drafter runs with its defaults, `tiny-random-draft` as its draft model where it loads one; the few whose defaults
cannot run on tiny-random say what they need below (S2D's exits, DEER's target, a random head for EAGLE and
LongSpec, which draft from a head trained for SmolLM2). A new drafter whose defaults cannot run on tiny-random fails
these tests with its own error: that is the place to add its entry.
"""

from __future__ import annotations

import torch

from decoding.speculative.base import Drafter
from decoding.speculative.drafters import Draft
from decoding.speculative.strategy import DRAFTERS
from decoding.speculative.verify import ROOT, DraftTree

TINY_DRAFT = "tiny-random-draft"
OWN = {  # what a drafter needs besides its draft model to run on tiny-random
    "s2d": {"exits": "1,2", "threshold": 0.05},  # tiny-random-draft has 2 layers (the default tiny-ar-s2d: tiny-ar's)
}
TARGETS = {  # a drafter that cannot draft for tiny-random runs on a shipped tiny target (loads in a tenth of a second)
    "diffusion": "tiny-ar",  # DEER's pair: tiny-diffusion drafts for tiny-ar (no diffusion model has tiny-random's vocab)
}

VERSE = "And it came to pass, when the king"  # tiny-ar's kind of text: it ends at once on others
TARGET_PROMPTS = {"tiny-ar": VERSE}  # a prompt a target runs on for a while, where a test's own would end it early


def target_name(name: str) -> str:
    """The model drafter `name`'s tests verify with."""
    return TARGETS.get(name, "tiny-random")


def drafter_names() -> list[str]:
    """The shipped drafters (a plug-in a test registers for a while is not one)."""
    return [name for name in DRAFTERS.names() if DRAFTERS.get(name).__module__.startswith("decoding.")]


def drafter_setting(name: str) -> dict:
    """The speculative strategy's params that run drafter `name` on tiny-random."""
    params = {"drafter": name}
    if DRAFTERS.capability(name, "loads_draft_model"):
        params["draft_model"] = TINY_DRAFT
    return params | OWN.get(name, {})


def random_head(module, lm, seed: int = 0, **config):
    """A random draft head for `lm` of EAGLE's or LongSpec's kind (`module`'s head class and config), drafting over
    the whole vocabulary, its weights big enough that its drafts differ from token to token."""
    head_cls, config_cls = (module.EagleHead, module.HeadConfig) if hasattr(module, "EagleHead") else \
        (module.LongSpecHead, module.LongSpecConfig)
    torch.manual_seed(seed)
    head = head_cls(config_cls.like(lm.config, lm.vocab_size, lm.name, **config))
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.3)
    return head.eval()


def arrange(name: str, lm, folder, monkeypatch) -> None:
    """What drafter `name` needs on `lm` beyond its params: a random head saved in `folder` where it drafts from a
    trained one (EAGLE, LongSpec: their `HEADS` name a head per target)."""
    from decoding.longctx import longspec
    from decoding.speculative import eagle

    modules = {"eagle": (eagle, {}), "longspec": (longspec, {"window": 8, "sinks": 2})}
    if name in modules:
        module, config = modules[name]
        module.save_head(random_head(module, lm, **config), folder)
        monkeypatch.setitem(module.HEADS, lm.name, folder)


class Oracle(Drafter):
    """A drafter wrapped so that its drafts are the target's own greedy continuation `text` of `prompt`: it proposes
    as ever (its own state, its reading of the target's cache), and whenever it drafts anything, the draft becomes a
    chain of the next `plan.depth` tokens of `text`, which greedy verification accepts whole. Its feedback goes to
    the wrapped drafter unchanged."""

    def __init__(self, inner: Drafter, prompt: list[int], text: list[int]):
        self.inner, self.prompt, self.text, self.name = inner, list(prompt), list(text), inner.name

    @property
    def needs_hidden_states(self) -> bool:
        return self.inner.needs_hidden_states

    @property
    def prefill_rows(self) -> int:
        return self.inner.prefill_rows

    def bytes_per_position(self) -> int:
        return self.inner.bytes_per_position()

    def propose(self, context, plan, temperature, generator) -> Draft:
        own = self.inner.propose(context, plan, temperature, generator)
        tree, parent = DraftTree(), ROOT
        if len(own.tree):
            assert context[:len(self.prompt)] == self.prompt
            for token in self.text[len(context) - len(self.prompt):][:plan.depth]:
                parent = tree.add(parent, token)
        return Draft(tree, forward_passes=own.forward_passes, seconds=own.seconds)

    def observe(self, feedback) -> None:
        self.inner.observe(feedback)
