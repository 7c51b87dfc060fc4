"""A plug-in is one file that owns its knobs (ARCHITECTURE.md, "Adding a method", step for step).

The test writes a package of its own in a temporary folder, one file per family: a token strategy, a
scaling method, a drafter, a diffusion sampler and a reward, each with a knob of its own. Named in
`DECODING_LAB_PLUGINS`, the package is imported with the shipped methods, and each plug-in is found in
`python -m decoding list`, runs with `run --set` (its knob reaches it: it records the value it got), is
served by the running app's `/generate` over HTTP, and gets its own widget in its tab. The drafter and the
sampler both declare `depth`, with other defaults and ranges; the scaling method declares `beam_width`,
as reward-beam does, with another default: each tab shows each its own, and reward-beam's is untouched.
No shipped file is edited (`git status` is the same before and after).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # writes a package, runs the CLI, rebuilds every tab (and starts python app.py)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "toylab"

FILES = {
    "__init__.py": '"""Toy plug-ins of every family (tests/test_plugins.py)."""\n',
    "toy_token.py": '''
        from dataclasses import dataclass

        from decoding.params import Params, param
        from decoding.registry import register_strategy
        from decoding.token.autoregressive import token_loop


        @dataclass(frozen=True)
        class ToyTokenParams(Params):
            rank: int = param(2, low=1, high=8, help="Which token by probability: 1 = greedy (toy).")


        @register_strategy("toy-token", params=ToyTokenParams, help="the rank-th most probable token (a toy plug-in)")
        def toy_token(ctx, params, outcome):
            def choose(logits, ids):
                return int(logits.topk(params.rank).indices[-1]), logits, {"rank": params.rank}

            yield from token_loop(ctx, outcome, choose)
    ''',
    "toy_scaling.py": '''
        from dataclasses import dataclass

        from decoding.params import param
        from decoding.registry import register_strategy
        from decoding.scaling.methods import best_of_n
        from decoding.scaling.params import BestOfNParams


        @dataclass(frozen=True)
        class ToyScalingParams(BestOfNParams):
            beam_width: int = param(3, low=1, high=12, help="A toy's own beam width (reward-beam's is another).")


        @register_strategy("toy-scaling", params=ToyScalingParams, family="scaling", uses_seed=True,
                           help="best-of-N that records its own beam width (a toy plug-in)")
        def toy_scaling(ctx, params, outcome):
            yield from best_of_n(ctx, params, outcome)
            outcome.extra["toy_beam_width"] = params.beam_width
    ''',
    "toy_drafter.py": '''
        from dataclasses import dataclass

        from decoding.params import Params, param
        from decoding.speculative.base import Drafter
        from decoding.speculative.drafters import Draft
        from decoding.speculative.strategy import DRAFTERS
        from decoding.speculative.verify import DraftTree


        @dataclass(frozen=True)
        class RepeatParams(Params):
            depth: int = param(2, low=1, high=8, help="How many times the toy drafter repeats the last token.")


        class RepeatLast(Drafter):
            name = "toy-drafter"

            def __init__(self, depth):
                self.depth = depth

            def propose(self, context, plan, temperature, generator):
                tree, parent = DraftTree(), -1
                for _ in range(min(self.depth, plan.depth)):
                    parent = tree.add(parent, context[-1])
                return Draft(tree, info={"depth": self.depth})


        @DRAFTERS.register("toy-drafter", help="repeats the last token (a toy plug-in)", params=RepeatParams,
                           default_draft_length=2)
        def _toy_drafter(lm, params):
            return RepeatLast(params.own.depth)
    ''',
    "toy_sampler.py": '''
        from dataclasses import dataclass

        import torch

        from decoding.diffusion.samplers import SAMPLERS, select_top_k
        from decoding.params import Params, param


        @dataclass(frozen=True)
        class LeftmostParams(Params):
            depth: int = param(5, low=0, high=16, help="A toy sampler's own depth (the toy drafter's is another).")


        @SAMPLERS.register("toy-sampler", help="the leftmost masked position each step (a toy plug-in)",
                           params=LeftmostParams)
        def leftmost(scores, candidates, params, scheduled):
            position = torch.arange(len(scores), dtype=torch.float64)
            return select_top_k(-position, candidates, 1), {"depth": params.own.depth}
    ''',
    "toy_reward.py": '''
        from dataclasses import dataclass

        from decoding.params import Params, param
        from decoding.scaling.rewards import RewardResult
        from decoding.scaling.scoring import REWARDS


        @dataclass(frozen=True)
        class BonusParams(Params):
            bonus: float = param(0.25, low=0.0, high=1.0, help="The constant reward every step gets (toy).")


        class Bonus:
            name = "toy-reward"

            def __init__(self, bonus):
                self.bonus = bonus

            def score(self, question, steps, final):
                return RewardResult(self.bonus, False, f"bonus {self.bonus}")


        @REWARDS.register("toy-reward", help="a constant reward of its own (a toy plug-in)", params=BonusParams, rule=True)
        def _toy_reward(params, policy=None):
            return Bonus(params.own.bonus), []
    ''',
}
NAMES = {"strategy": ("toy-token", "toy-scaling"), "drafter": "toy-drafter", "sampler": "toy-sampler",
         "reward": "toy-reward"}


def write_package(folder: Path) -> Path:
    package = folder / PACKAGE
    package.mkdir()
    for name, text in FILES.items():
        (package / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return folder


def plugin_env(folder: Path) -> dict:
    return os.environ | {"DECODING_LAB_PLUGINS": PACKAGE,
                         "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")])}


def git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout


@pytest.fixture
def toylab(tmp_path, monkeypatch):
    """The toy package imported into this process as `DECODING_LAB_PLUGINS` makes `import decoding` do; every
    registration is taken back afterwards and the tabs are rebuilt without them."""
    from decoding import load_plugins
    from decoding.diffusion.samplers import SAMPLERS
    from decoding.registry import unregister_strategy
    from decoding.scaling.scoring import REWARDS
    from decoding.speculative.strategy import DRAFTERS

    folder = write_package(tmp_path)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("DECODING_LAB_PLUGINS", PACKAGE)
    before = git_status()
    load_plugins()
    yield folder
    for name in NAMES["strategy"]:
        unregister_strategy(name)
    DRAFTERS.unregister(NAMES["drafter"])
    SAMPLERS.unregister(NAMES["sampler"])
    REWARDS.unregister(NAMES["reward"])
    for module in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
        del sys.modules[module]
    from test_registry import rebuild_tab

    for tab in ("speculative", "diffusion", "scaling"):
        rebuild_tab(tab)
    assert git_status() == before, "a plug-in needed an edit to a shipped file"


def test_each_plugin_is_listed_runs_with_its_knob_and_gets_its_own_widget(toylab, capsys):
    from decoding.__main__ import main as cli

    assert cli(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["strategies"]
    rows = {name: {p["name"]: p for p in listed[name]["params"]} for name in ("toy-token", "toy-scaling", "speculative",
                                                                            "diffusion", "reward-beam")}
    assert rows["toy-token"]["rank"]["range"] == "[1, 8]"
    assert (rows["toy-scaling"]["beam_width"]["default"], rows["reward-beam"]["beam_width"]["default"]) == (3, 2)
    assert rows["speculative"]["toy-drafter.depth"]["range"] == "[1, 8]"
    assert (rows["diffusion"]["toy-sampler.depth"]["default"], rows["diffusion"]["toy-sampler.depth"]["range"]) == (5, "[0, 16]")
    assert rows["toy-scaling"]["toy-reward.bonus"]["default"] == 0.25

    def run(*args) -> dict:
        assert cli(["run", "--prompt", "abc", "--max-new-tokens", "4", "--json", *args]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    out = run("--model", "tiny-random", "--strategy", "toy-token", "--set", "rank=3")
    assert out["params"] == {"rank": 3}
    out = run("--model", "tiny-random", "--strategy", "speculative", "--set", "drafter=toy-drafter",
              "--set", "toy-drafter.depth=1")
    assert out["params"]["toy-drafter.depth"] == 1 and out["params"]["draft_length"] == 2  # its declared default
    out = run("--model", "tiny-random-diffusion", "--strategy", "diffusion", "--set", "sampler=toy-sampler",
              "--set", "toy-sampler.depth=9")
    assert out["params"]["toy-sampler.depth"] == 9
    out = run("--model", "tiny-random", "--strategy", "toy-scaling", "--set", "reward=toy-reward",
              "--set", "toy-reward.bonus=0.5", "--set", "beam_width=7", "--set", "n=2")
    assert out["params"]["beam_width"] == 7 and out["params"]["toy-reward.bonus"] == 0.5

    from decoding.run import run_to_trace

    trace = run_to_trace("tiny-random", "abc", strategy="speculative", params={"drafter": "toy-drafter",
                         "toy-drafter.depth": 1}, max_new_tokens=4, chat=False)
    assert {r.extra["depth"] for r in trace.of_kind("spec_round")} == {1}  # the knob reached the drafter
    trace = run_to_trace("tiny-random-diffusion", "abc", strategy="diffusion", params={"sampler": "toy-sampler",
                         "toy-sampler.depth": 9}, max_new_tokens=4, chat=False)
    assert {s.extra["depth"] for s in trace.of_kind("diffusion_step")} == {9}
    trace = run_to_trace("tiny-random", "abc", strategy="toy-scaling", params={"reward": "toy-reward", "n": 2,
                         "toy-reward.bonus": 0.5, "beam_width": 7}, max_new_tokens=4, chat=False)
    assert trace.finish.extra["toy_beam_width"] == 7
    rewards = {(p["reward"], p["detail"]) for s in trace.of_kind("particles") for p in s.particles}
    assert rewards == {(0.5, "bonus 0.5")}  # the reward's own knob reached it

    from test_registry import rebuild_tab

    spec, _ = rebuild_tab("speculative")
    assert ("toy-drafter", "toy-drafter") in spec["spec:drafter"].choices
    widget = spec["spec:toy-drafter.depth"]
    assert (type(widget).__name__, widget.minimum, widget.maximum, widget.value) == ("Slider", 1, 8, 2)
    assert widget.info == "How many times the toy drafter repeats the last token."
    diffusion, _ = rebuild_tab("diffusion")
    widget = diffusion["df:toy-sampler.depth"]  # the same field name, its own default and range
    assert (type(widget).__name__, widget.minimum, widget.maximum, widget.value) == ("Slider", 0, 16, 5)
    scaling, run_inputs = rebuild_tab("scaling")
    assert ("toy-scaling", "toy-scaling") in scaling["method"].choices
    toy, beam = scaling["sc:toy-scaling.beam_width"], scaling["sc:reward-beam.beam_width"]
    assert (toy.value, toy.maximum, beam.value, beam.maximum) == (3, 12, 2, 16)  # reward-beam's untouched
    assert scaling["sc:toy-reward.bonus"].value == 0.25 and scaling["sc:toy-reward.bonus"] in run_inputs
    from ui.playground_views import param_widgets

    (rank,) = param_widgets("toy-token")
    assert (rank.name, rank.low, rank.high) == ("rank", 1, 8)



def test_the_plugin_package_is_found_by_a_fresh_process_and_served_over_http(tmp_path):
    from conftest import api_run, app_process
    from gradio_client import Client

    folder = write_package(tmp_path)
    env = plugin_env(folder)
    before = git_status()
    listed = subprocess.run([sys.executable, "-m", "decoding", "list", "--json"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    strategies = json.loads(listed.stdout)["strategies"]
    assert {"toy-token", "toy-scaling"} <= set(strategies)
    assert "toy-drafter" in strategies["speculative"]["params"][0]["choices"]
    with app_process(tmp_path, DECODING_LAB_PLUGINS=PACKAGE, PYTHONPATH=env["PYTHONPATH"]) as server:
        client = Client(server["url"], verbose=False)
        outputs, result = api_run(client, "tiny-random", "speculative", "abc", 4, 0,
                                  json.dumps({"drafter": "toy-drafter", "toy-drafter.depth": 1}), False)
        assert outputs[0]["kind"] == "start" and outputs[0]["params"]["toy-drafter.depth"] == 1
        assert {e["extra"]["depth"] for e in outputs if e.get("kind") == "spec_round"} == {1}
        outputs, result = api_run(client, "tiny-random", "toy-token", "abc", 3, 0, json.dumps({"rank": 2}), False)
        assert result["params"] == {"rank": 2} and [e["extra"] for e in outputs if e.get("kind") == "token"] == [
            {"rank": 2}] * 3
    assert git_status() == before
