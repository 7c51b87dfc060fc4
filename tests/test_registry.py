"""Adding a method is one registration: it then shows in `list`, the CLI, the API and its tab.

Each test registers a throw-away method of one family from this module alone (a token strategy,
a scaling method, a drafter, a diffusion sampler) and looks for it everywhere a user would; a
registration that misses a piece fails at once with a sentence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from decoding.__main__ import main as cli
from decoding.params import Params, param
from decoding.registry import STRATEGIES, register_strategy, unregister_strategy
from decoding.autoregressive import token_event, token_loop  # noqa: F401
from decoding.diffusion.samplers import SAMPLERS, select_top_k
from decoding.scaling.methods import ScalingParams, best_of_n
from decoding.speculative.strategy import DRAFTERS


@dataclass(frozen=True)
class EchoParams(Params):
    beta: float = param(0.5, low=0.0, high=1.0, help="How much of the top token's logit to keep (test only).")


def echo(ctx, params: EchoParams, outcome):
    """Greedy on logits scaled by beta: a real (tiny) strategy through the shared token loop."""

    def choose(logits, ids):
        scaled = logits * params.beta
        token = int(scaled.argmax())
        return token, scaled, {"beta": params.beta}

    yield from token_loop(ctx, outcome, choose)


@pytest.fixture
def echo_registered():
    register_strategy("echo-test", params=EchoParams, help="greedy on scaled logits (a test registration)")(echo)
    yield "echo-test"
    unregister_strategy("echo-test")


def test_a_token_strategy_shows_in_list_cli_api_and_the_playground(echo_registered, capsys, tiny_lm):
    assert cli(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["strategies"]["echo-test"]
    assert listed["params"][0]["name"] == "beta" and listed["params"][0]["range"] == "[0, 1]"
    assert cli(["run", "--model", "tiny-random", "--strategy", "echo-test", "--set", "beta=0.25",
                "--prompt", "hello", "--max-new-tokens", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["strategy"] == "echo-test" and out["params"] == {"beta": 0.25} and len(out["token_ids"]) == 3
    assert cli(["run", "--model", "tiny-random", "--strategy", "echo-test", "--set", "beta=2",
                "--prompt", "hello"]) == 2
    assert "`beta` must be in [0, 1], got 2.0" in capsys.readouterr().err

    from ui.api import api_generate

    events = list(api_generate("tiny-random", "echo-test", "hello", 2, 0, '{"beta": 0.5}', False))
    assert [e.get("kind") for e in events[:-1]] == ["start", "token", "token", "finish"]
    assert events[-1]["params"] == {"beta": 0.5}

    from ui.playground_views import param_widgets, playground_strategies

    assert "echo-test" in playground_strategies()
    (widget,) = param_widgets("echo-test")
    assert (widget.name, widget.kind, widget.low, widget.high) == ("beta", "float", 0.0, 1.0)


def test_a_scaling_method_is_a_strategy_of_the_scaling_family():
    @dataclass(frozen=True)
    class TinyParams(ScalingParams):
        keep: int = param(1, low=1, high=8, help="How many answers to keep (test only).")

    register_strategy("keep-test", params=TinyParams, family="scaling", uses_seed=True,
                      help="best-of-N under another name (a test registration)")(best_of_n)
    try:
        from decoding.registry import param_specs, strategies_of

        assert "keep-test" in strategies_of("scaling")
        names = [p["name"] for p in param_specs("keep-test")]
        assert names[0] == "n" and names[-1] == "keep"  # the shared parameters' help comes with the base class
        tab = build_scaling_tab()  # the tab as a new app process builds it, with this registration in place
        method = tab["method"]
        assert ("keep-test", "keep-test") in method.choices and "keep-test: best-of-N under another name" in method.info
        keep = tab["sc:keep"]  # a widget generated from the parameter's spec
        assert (type(keep).__name__, keep.minimum, keep.maximum, keep.value) == ("Slider", 1, 8, 1)
        assert keep.elem_id == "sc-keep" and keep.info == "How many answers to keep (test only)."
        from ui import scaling_callbacks as cb

        assert cb.collect_params("keep-test", {f: tab[f"sc:{f}"].value for f in cb.FIELDS})["keep"] == 1
    finally:
        unregister_strategy("keep-test")
        build_scaling_tab()  # and back to the shipped methods


def build_scaling_tab() -> dict:
    """Re-import the Scaling tab's modules (they read the registry when imported) and build the tab."""
    import importlib

    import gradio as gr

    from ui import scaling, scaling_callbacks, scaling_views

    for module in (scaling_views, scaling_callbacks, scaling):
        importlib.reload(module)
    with gr.Blocks():
        return scaling.build_scaling()


def test_a_drafter_registers_and_is_offered_by_the_speculative_tab(tiny_lm):
    from decoding import run_to_trace
    from decoding.contracts import Drafter
    from decoding.speculative.drafters import Draft
    from decoding.speculative.verify import DraftTree

    class RepeatLast(Drafter):
        name = "repeat-last"

        def propose(self, context, plan, temperature, generator):
            tree = DraftTree()
            parent = -1
            for _ in range(plan.depth):
                parent = tree.add(parent, context[-1])
            return Draft(tree)

    DRAFTERS.register("repeat-last", help="repeat the last token (a test registration)")(lambda lm, params: RepeatLast())
    try:
        from ui.speculative import drafter_order

        assert "repeat-last" in drafter_order()
        trace = run_to_trace(tiny_lm, "aaaa", strategy="speculative", params={"drafter": "repeat-last"},
                             max_new_tokens=8, chat=False)
        greedy = run_to_trace(tiny_lm, "aaaa", strategy="greedy", max_new_tokens=8, chat=False)
        assert trace.finish.token_ids == greedy.finish.token_ids  # lossless whatever the drafter
        assert {r.drafter for r in trace.of_kind("spec_round")} == {"repeat-last"}
    finally:
        DRAFTERS.unregister("repeat-last")


def test_a_diffusion_sampler_registers_and_is_offered_by_the_diffusion_tab():
    from decoding import run_to_trace
    from decoding.run import as_lm

    @SAMPLERS.register("leftmost", help="commit the leftmost masked position each step (a test registration)")
    def leftmost(scores, candidates, params, scheduled):
        position = torch.arange(len(scores), dtype=torch.float64)
        return select_top_k(-position, candidates, 1), {"scheduled": 1}

    try:
        from ui.diffusion_views import CHOICES

        assert "leftmost" in CHOICES["sampler"]()
        trace = run_to_trace(as_lm("tiny-random-diffusion"), "abc", strategy="diffusion",
                             params={"sampler": "leftmost"}, max_new_tokens=6, chat=False)
        assert [step.unmasked for step in trace.of_kind("diffusion_step")] == [[i] for i in range(6)]
    finally:
        SAMPLERS.unregister("leftmost")


@pytest.mark.parametrize("field_decl, message", [
    ("x: float = param(0.5, low=0, high=1, help='')", "has no help"),
    ("x: float = param(0.5, help='A knob.')", "has no range"),
    ("x: float = 0.5", "has no parameter spec"),
    ("x: tuple = param((), help='A tuple.', note='x')", "parameters are int, float, bool or str"),
])
def test_a_registration_missing_a_piece_fails_at_once_with_a_sentence(field_decl, message):
    namespace = {"param": param, "Params": Params, "dataclass": dataclass}
    exec(f"@dataclass(frozen=True)\nclass Broken(Params):\n    {field_decl}\n", namespace)
    with pytest.raises(TypeError, match=f"strategy 'broken-test'.*Broken.x .*{message}"):
        register_strategy("broken-test", params=namespace["Broken"], help="a broken registration")(echo)
    assert "broken-test" not in STRATEGIES


def test_a_registration_without_help_or_with_a_taken_name_fails():
    with pytest.raises(TypeError, match="give help="):
        register_strategy("nohelp-test", params=EchoParams, help=" ")(echo)
    with pytest.raises(TypeError, match="'greedy'.*already registered"):
        register_strategy("greedy", params=EchoParams, help="again")(echo)
    with pytest.raises(TypeError, match="family must be one of"):
        register_strategy("family-test", params=EchoParams, help="x", family="audio")(echo)
