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

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import param
from decoding.registry import get_strategy, register_strategy
from decoding.scaling.archon_space import ARCHON_FILE, REWARD_CHOICES, SHIPPED, architecture_for, describe
from decoding.scaling.params import ScalingParams


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.scaling.archon",
                                     description="Archon's architecture search (ITAS) on tiny-math, and its results")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("search", help="search the space under a token budget; write the found architecture and log")
    s.add_argument("--model", default="tiny-math")
    s.add_argument("--budget", type=float, default=600, help="mean tokens generated per problem, at most")
    s.add_argument("--tasks", type=int, default=30, help="validation problems each candidate is scored on")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--init", type=int, default=6, help="random candidates before the surrogate proposes")
    s.add_argument("--iters", type=int, default=24, help="candidates the surrogate proposes")
    s.add_argument("--finalists", type=int, default=3, help="best candidates re-scored on --final-tasks problems")
    s.add_argument("--final-tasks", type=int, default=100, help="validation problems of the final ranking")
    s.add_argument("--test-tasks", type=int, default=100, help="held-out test problems of the report")
    s.add_argument("--rewards", default=",".join(REWARD_CHOICES), help="the rewards of the space, comma-separated")
    s.add_argument("--max-new-tokens", type=int, default=None, help="per solution (tiny-math's evaluation: 160)")
    s.add_argument("--out", type=Path, help=f"write the result here (e.g. assets/tiny-math/{ARCHON_FILE})")
    show = sub.add_parser("show", help="print an architecture: the found one beside a model, or a shipped one")
    show.add_argument("--config", default="found", help=f"found or one of: {', '.join(SHIPPED) or '(none)'}")
    show.add_argument("--model", default="tiny-math")
    args = parser.parse_args(argv)
    from decoding.lm import LM
    from decoding.models import load_model
    from decoding.scaling.archon_search import search
    from decoding.scaling.math_eval import MAX_NEW_TOKENS

    torch.set_num_threads(1)
    if args.command == "show":
        arch = architecture_for(args.config, LM(load_model(args.model, progress=None)) if args.config == "found" else None)
        print(json.dumps(arch, indent=1))
        print(describe(arch))
        return 0
    rewards = tuple(r.strip() for r in args.rewards.split(",") if r.strip())
    unknown = [r for r in rewards if r not in REWARD_CHOICES]
    if unknown or not rewards:
        parser.error(f"--rewards must name some of {', '.join(REWARD_CHOICES)}, got {args.rewards!r}")
    lm = LM(load_model(args.model, progress=None))
    log = lambda message: print(message, file=sys.stderr, flush=True)
    result = {"model": args.model, "command": "python -m decoding.scaling.archon " + " ".join(argv or sys.argv[1:])}
    result |= search(lm, budget=args.budget, tasks=args.tasks, seed=args.seed, init=args.init, iters=args.iters,
                     final_tasks=args.final_tasks, count=args.finalists, test_tasks=args.test_tasks, rewards=rewards,
                     max_new_tokens=args.max_new_tokens or MAX_NEW_TOKENS, log=log)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
        log(f"wrote {args.out}")
    else:
        print(text)
    return 0 if result["architecture"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
