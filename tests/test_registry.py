"""Adding a method is one registration: it then shows in `list`, the CLI, the API and its tab.

Each test registers a throw-away method of one family from this module alone (a token strategy,
a scaling method, a drafter, a diffusion sampler) and looks for it everywhere a user would: the
CLI, the API (in-process and over HTTP from the running app), its tab's menu and the widgets
generated for its parameters; a registration that misses a piece fails at once with a sentence.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
import torch

from conftest import api_run
from decoding.__main__ import main as cli
from decoding.params import Params, param
from decoding.registry import STRATEGIES, register_strategy, unregister_strategy
from decoding.token.autoregressive import token_loop
from decoding.diffusion.samplers import SAMPLERS, select_top_k
from decoding.run import run_to_trace
from decoding.scaling.methods import ScalingParams, best_of_n
from decoding.speculative.strategy import DRAFTERS


@dataclass(frozen=True)
class LookbackParams(Params):
    lookback: int = param(2, low=1, high=8, help="How far back repeat-last looks (test only).")


@dataclass(frozen=True)
class SpanParams(Params):
    span: int = param(1, low=1, high=16, help="Positions leftmost commits per step (test only).")


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


@pytest.mark.slow  # the HTTP server
def test_a_token_strategy_runs_over_real_http(client, echo_registered):
    """The running app's `/generate` endpoint (gradio_client over HTTP; the server lives in this test
    process, started before the registration) serves the strategy registered here."""
    from gradio_client.exceptions import AppError

    outputs, result = api_run(client, "tiny-random", "echo-test", "hello", 3, 0, json.dumps({"beta": 0.25}), False)
    events = outputs[:-1]
    assert [e.get("kind") for e in events] == ["start", "token", "token", "token", "finish"]
    assert events[0]["strategy"] == "echo-test" and events[0]["params"] == {"beta": 0.25}
    assert [e["extra"] for e in events if e["kind"] == "token"] == [{"beta": 0.25}] * 3  # what `echo` recorded
    expected = run_to_trace("tiny-random", "hello", strategy="echo-test", params={"beta": 0.25}, max_new_tokens=3,
                            chat=False)
    assert result["strategy"] == "echo-test" and result["params"] == {"beta": 0.25}
    assert result["token_ids"] == expected.finish.token_ids == [e["token_id"] for e in events[1:-1]]
    with pytest.raises(AppError, match=re.escape("`beta` must be in [0, 1], got 2.0")):
        client.predict("tiny-random", "echo-test", "hello", 3, 0, '{"beta": 2}', False, api_name="/generate")


def test_a_scaling_method_is_a_strategy_of_the_scaling_family():
    @dataclass(frozen=True)
    class TinyParams(ScalingParams):
        keep: int = param(1, low=1, high=8, help="How many answers to keep (test only).")

    register_strategy("keep-test", params=TinyParams, family="scaling", uses_seed=True,
                      help="best-of-N under another name (a test registration)")(best_of_n)
    try:
        from decoding.registry import param_specs, strategies_of

        assert "keep-test" in strategies_of("scaling")
        names = [p["name"] for p in param_specs("keep-test") if p["plugin"] is None]
        assert names[0] == "n" and names[-1] == "keep"  # the shared parameters' help comes with the base class
        tab, _ = rebuild_tab("scaling")  # the tab as a new app process builds it, with this registration in place
        method = tab["method"]
        from ui import scaling_views

        assert ("keep-test", "keep-test") in method.choices  # its help: the "Every method" list under the menu
        assert "**keep-test**: best-of-N under another name" in scaling_views.method_list()
        keep = tab["sc:keep-test.keep"]  # a widget generated from the parameter's spec, keyed by its method
        assert (type(keep).__name__, keep.minimum, keep.maximum, keep.value) == ("Slider", 1, 8, 1)
        assert keep.elem_id == "sc-keep-test-keep" and keep.info == "How many answers to keep (test only)."
        from ui import scaling_callbacks as cb

        assert cb.collect_params("keep-test", {f: tab[f"sc:{f}"].value for f in cb.FIELDS})["keep"] == 1
    finally:
        unregister_strategy("keep-test")
        rebuild_tab("scaling")  # and back to the shipped methods


def rebuild_tab(tab: str) -> tuple[dict, list]:
    """Re-import a lab tab's modules (they read the registry when imported) and build the tab in a new
    Blocks: (its widgets by name, the components its Generate event passes to `generate_run`)."""
    import importlib

    import gradio as gr

    modules = [importlib.import_module(f"ui.{tab}{part}") for part in ("_views", "_callbacks", "")]
    for module in modules:
        importlib.reload(module)
    with gr.Blocks() as blocks:
        widgets = getattr(modules[-1], f"build_{tab}")()
    (run,) = [f for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "generate_run"]
    return widgets, list(run.inputs)


def test_a_drafter_registers_and_is_offered_by_the_speculative_tab(tiny_lm, monkeypatch):
    from decoding import run_to_trace
    from decoding.speculative.base import Drafter
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

        DRAFTERS.register("repeat-last", help="repeat the last token (a test registration)", params=LookbackParams,
                          replace=True)(lambda lm, params: RepeatLast())  # the drafter's own knob, declared with it
        tab, run_inputs = rebuild_tab("speculative")
        assert ("repeat-last", "repeat-last") in tab["spec:drafter"].choices
        widget = tab["spec:repeat-last.lookback"]  # generated from its spec, and passed to Generate by name
        assert (type(widget).__name__, widget.minimum, widget.maximum, widget.value) == ("Slider", 1, 8, 2)
        assert widget.elem_id == "spec-repeat-last-lookback" and widget.info == "How far back repeat-last looks (test only)."
        assert widget in run_inputs and not widget.visible  # shown when repeat-last is the chosen drafter
        from ui.speculative_views import DEFAULT_SETTINGS, SPEC_FIELDS, collect_spec_params

        fields = {name: DEFAULT_SETTINGS[name] for name in SPEC_FIELDS}
        assert collect_spec_params(fields | {"drafter": "repeat-last", "repeat-last.lookback": 5.0})[
            "repeat-last.lookback"] == 5
    finally:
        DRAFTERS.unregister("repeat-last")
        rebuild_tab("speculative")  # and back to the shipped drafters


def test_a_diffusion_sampler_registers_and_is_offered_by_the_diffusion_tab(monkeypatch):
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

        SAMPLERS.register("leftmost", help="commit the leftmost masked position each step (a test registration)",
                          params=SpanParams, replace=True)(leftmost)  # the sampler's own knob, declared with it
        tab, run_inputs = rebuild_tab("diffusion")
        assert ("leftmost", "leftmost") in tab["df:sampler"].choices
        widget = tab["df:leftmost.span"]  # generated from its spec, and passed to Generate by name
        assert (type(widget).__name__, widget.minimum, widget.maximum, widget.value) == ("Slider", 1, 16, 1)
        assert widget.elem_id == "df-leftmost-span" and widget.info == "Positions leftmost commits per step (test only)."
        assert widget in run_inputs
        from ui.diffusion_views import DEFAULT_SETTINGS, collect_params

        assert collect_params(DEFAULT_SETTINGS | {"sampler": "leftmost", "leftmost.span": 3.0})["leftmost.span"] == 3
    finally:
        SAMPLERS.unregister("leftmost")
        rebuild_tab("diffusion")  # and back to the shipped samplers


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
