"""Archon: run an inference-time architecture found by a search under a compute budget (strategy `archon`).

Saad-Falcon et al. 2024, "Archon: An Architecture Search Framework for Inference-Time Techniques"
(arXiv 2409.15254) builds an LLM system as layers of inference-time techniques (generate N samples,
rank, fuse, critique, verify, ...) and treats the choice of layers and their settings as
hyperparameters: its Inference-Time Architecture Search (ITAS) tries configurations on a sample of
the benchmark, within a budget of inference calls, with Bayesian optimisation. Here the techniques
are the Scaling lab's own strategies (`decoding.scaling.archon_space`: the space as data), the budget
is the tokens generated per problem, measured from the runs, and the search is
`decoding.scaling.archon_search`; this module is the strategy and the command.

Strategy `archon` runs a found architecture: `config=found` reads `archon.json` beside the model
(what the search wrote with `--out`); any other `config` names one of the architectures shipped in
`archon_space.SHIPPED`. The architecture sets the composed strategy and all its parameters. `archon`
streams the composed strategy's own events, each with the architecture in `extra["archon"]` (config,
key, strategy, params, layers), so a run of `archon` is, event for event, the composed strategy's run
from the same seed (tested).

Glossary
    architecture  {"key", "strategy", "params", "layers"}: a candidate of the space, as archon.json stores it
    layer         one stage of it as the paper draws it: generate, then rank / vote / search / ..., then refine
    budget        mean tokens generated per problem (every model's: a drafter's count too)

Commands:

    python -m decoding.scaling.archon search --budget 600 --tasks 30 --seed 0 --out assets/tiny-math/archon.json
    python -m decoding.scaling.archon show [--config found|NAME] [--model tiny-math]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import param
from decoding.registry import get_strategy, register_strategy
from decoding.scaling.archon_space import SHIPPED, architecture_for
from decoding.scaling.params import ScalingParams

if __name__ == "__main__":  # python -m decoding.scaling.archon: the command (imported, the module registers `archon`)
    from decoding.scaling.archon_search import main

    raise SystemExit(main())


def _configs() -> tuple[str, ...]:
    return ("found",) + tuple(SHIPPED)


@dataclass(frozen=True)
class ArchonParams(ScalingParams):
    config: str = param("found", choices=_configs,
                        help="The architecture: found = archon.json beside the model (the last search's), or a "
                             "shipped one. It sets the method and all of its parameters (n, reward, temperature, "
                             "top_p, ...): the shared fields here are not used, except `reference`.")


@register_strategy("archon", params=ArchonParams, family="scaling", uses_seed=True, models=("tiny-math",),
                   help="Archon: run an architecture of the lab's techniques found by a search under a token budget "
                        "(python -m decoding.scaling.archon search)", papers=(bib.SAAD_FALCON_2024,))
def archon(ctx: RunContext, params: ArchonParams, outcome: Outcome) -> Iterator[Event]:
    from decoding.run import make_params

    arch = architecture_for(params.config, ctx.lm)
    info = get_strategy(arch["strategy"])
    values = dict(arch["params"]) | ({"reference": params.reference} if params.reference.strip() else {})
    composed = make_params(arch["strategy"], values)
    shown = {"config": params.config, "key": arch.get("key", ""), "strategy": arch["strategy"],
             "params": arch["params"], "layers": arch.get("layers", [])}
    for event in info.fn(ctx, composed, outcome):  # the composed strategy's own events, as they come
        extra = getattr(event, "extra", None)
        yield dataclasses.replace(event, extra={**extra, "archon": shown}) if isinstance(extra, dict) else event
    outcome.extra = {**outcome.extra, "archon": shown}
