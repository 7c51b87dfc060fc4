"""Faults (issue 12): every bad input gets a message naming the problem, through every entry point.

    entry points   the CLI in-process (`decoding.__main__.main`), the `/generate` API function
                   (`ui.api.api_generate`), the tabs' Generate and Replay callbacks, `Trace.load`.
    a message      a ValueError / gr.Error whose text names the parameter or field, never a crash
                   (RuntimeError, RecursionError, IndexError, ...) that Gradio shows as "has not enabled
                   verbose error reporting".

Fast tests use the tiny random models; the context-length and draft-model tests that need a real
model's numbers use tiny-ar (256 positions) and are slow.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

import gradio as gr

import decoding.__main__ as cli
from decoding.params import Params, param, specs
from decoding.registry import STRATEGIES
from decoding.run import MAX_NEW_TOKENS_CAP, run_to_trace
from ui import playground_callbacks, scaling_callbacks, speculative_callbacks
from ui.api import api_generate
from ui.playground_views import new_selection, param_widgets
from ui.scaling_views import DEFAULT_SETTINGS as SCALING_SETTINGS, FIELDS as SCALING_FIELDS
from ui.speculative_views import DEFAULT_SETTINGS as SPEC_SETTINGS, SPEC_FIELDS

TINY, TINY_DIFFUSION = "tiny-random", "tiny-random-diffusion"
DEEP = "[" * 100_000 + "]" * 100_000  # JSON nested 10^5 deep: json.loads raises RecursionError


# ---------------------------------------------------------------- the entry points


def run_cli(capsys, *args: str) -> tuple[int, str]:
    """`python -m decoding run` in-process on the tiny random model: (exit status, stderr)."""
    code = cli.main(["run", "--model", TINY, "--prompt", "Hi", "--no-chat", "--quiet", "--max-new-tokens", "3", *args])
    return code, capsys.readouterr().err


def run_api(**kwargs) -> list[dict]:
    """`/generate` called as Gradio calls it; a bad input must be a gr.Error (a message), nothing else."""
    return list(api_generate(**({"model": TINY, "prompt": "Hi", "max_new_tokens": 3, "chat": False} | kwargs)))


def api_error(**kwargs) -> str:
    with pytest.raises(gr.Error) as err:
        run_api(**kwargs)
    return err.value.message


def playground(strategy="sample", prompt="Hi", model=TINY, max_new_tokens=3, **params):
    values = {w.key: params.get(w.name, w.default) if w.strategy == strategy else w.default for w in param_widgets()}
    return list(playground_callbacks.generate_run(model, strategy, prompt, max_new_tokens, 0, False, "auto", "prob",
                                                  new_selection(), **values))


def speculative_tab(prompt="Hi", model=TINY, max_new_tokens=3, **params):
    fields = SPEC_SETTINGS | params
    return list(speculative_callbacks.generate_run(model, prompt, max_new_tokens, 0, False, False,
                                                   **{k: fields[k] for k in SPEC_FIELDS}))


def scaling_tab(method="particle-filter", prompt="1+1=", model=TINY, max_new_tokens=3, **params):
    fields = SCALING_SETTINGS | {"n": 2, "max_step_tokens": 2} | params
    return list(scaling_callbacks.generate_run(model, prompt, method, max_new_tokens, 0, False, "none",
                                               **{k: fields[k] for k in SCALING_FIELDS}))


def tab_error(call, *args, **kwargs) -> str:
    with pytest.raises(gr.Error) as err:
        call(*args, **kwargs)
    return err.value.message


# ---------------------------------------------------------------- integer parameters are bounded


def test_every_integer_parameter_has_a_finite_range():
    for name, info in STRATEGIES.items():
        for spec in specs(info.params_cls):
            if spec.type is int:
                assert math.isfinite(spec.low) and math.isfinite(spec.high), (name, spec.name)


def test_an_unbounded_integer_parameter_fails_at_declaration():
    @dataclass(frozen=True)
    class Unbounded(Params):
        k: int = param(1, low=1, help="How many.")

    with pytest.raises(TypeError, match=r"Unbounded\.k is an integer without a finite range.*\[1, inf\]"):
        specs(Unbounded)


HUGE_TOP_K = r"`top_k` must be an integer in \[0, 1048576\], got 1000000000000000019884624838656"


def test_a_huge_top_k_is_refused_everywhere(capsys):
    code, err = run_cli(capsys, "--strategy", "sample", "--set", f"top_k={10**30}")
    assert code == 2 and "`top_k` must be an integer in [0, 1048576], got 10000000000" in err
    assert "top_k" in api_error(strategy="sample", params='{"top_k": 1e30}')
    with pytest.raises(gr.Error, match=HUGE_TOP_K):
        run_api(strategy="sample", params='{"top_k": 1e30}')
    with pytest.raises(gr.Error, match=HUGE_TOP_K):
        playground(top_k=1e30)


def test_a_number_beyond_a_float_is_refused_with_its_name():
    assert "`temperature` must be a number" in api_error(strategy="sample", params='{"temperature": 1' + "0" * 400 + "}")


# ---------------------------------------------------------------- non-finite probabilities


NON_FINITE = "makes the probabilities non-finite"


@pytest.mark.parametrize("name, value", [("temperature", 1e-320), ("repetition_penalty", 1e-300)])
def test_sampling_knobs_that_overflow_the_logits_are_named(capsys, name, value):
    code, err = run_cli(capsys, "--strategy", "sample", "--set", f"{name}={value}")
    assert code == 2 and f"`{name}` = {value!r} {NON_FINITE}" in err
    assert f"`{name}` = {value!r} {NON_FINITE}" in api_error(strategy="sample", params=json.dumps({name: value}))
    assert f"`{name}`" in tab_error(playground, **{name: value}) and NON_FINITE in tab_error(playground, **{name: value})


def test_a_tiny_temperature_is_named_in_speculative_and_scaling(capsys):
    spec = {"drafter": "early-exit", "exit_layer": 1, "temperature": 1e-320}
    assert f"`temperature` = 1e-320 {NON_FINITE}" in api_error(strategy="speculative", params=json.dumps(spec))
    assert NON_FINITE in tab_error(speculative_tab, drafter="early-exit", exit_layer=1, temperature=1e-320)
    code, err = run_cli(capsys, "--strategy", "speculative", "--set", "drafter=prompt-lookup",
                        "--set", "temperature=1e-320")
    assert code == 2 and NON_FINITE in err
    scaling = {"n": 2, "max_step_tokens": 2, "reward": "arith-step", "temperature": 1e-320}
    assert f"`temperature` = 1e-320 {NON_FINITE}" in api_error(strategy="particle-filter", prompt="1+1=",
                                                                 params=json.dumps(scaling))
    assert NON_FINITE in tab_error(scaling_tab, temperature=1e-320)


def test_ordinary_extreme_values_still_run():
    for params in ({"temperature": 1e-3}, {"repetition_penalty": 1e3}, {"temperature": 1e3, "top_k": 2**20}):
        trace = run_to_trace(TINY, "Hi", strategy="sample", params=params, max_new_tokens=2, chat=False)
        assert len(trace.finish.token_ids) == 2


# ---------------------------------------------------------------- malformed requests


def test_params_nested_deeply_get_a_message():
    assert "`params` is nested too deeply" in api_error(strategy="sample", params='{"top_p": ' + DEEP + "}")
    assert "`params` is nested too deeply" in api_error(strategy="sample", params=DEEP)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    message = api_error(strategy="sample", params=deep)  # a client sending a JSON array, not text
    assert "`params` must be a JSON object" in message and len(message) < 300
    assert "`top_p` must be a number" in api_error(strategy="sample", params={"top_p": deep})


@pytest.mark.parametrize("prompt", [5, 2.5, ["a"], {"text": "hi"}, None])
def test_a_prompt_that_is_not_text_is_named(prompt):
    message = api_error(prompt=prompt)
    assert message.startswith("`prompt` must be text, got") and "empty" not in message
    assert tab_error(playground, prompt=prompt).startswith("`prompt` must be text")


def test_an_empty_prompt_is_still_called_empty():
    assert "`prompt` is empty" in api_error(prompt="   ")


def test_a_lone_surrogate_in_the_prompt_is_named(capsys):
    expected = "`prompt` is not valid Unicode text: character 2 is a lone surrogate (U+D800)"
    assert expected in api_error(prompt="Hi\ud800")
    assert expected in tab_error(playground, prompt="Hi\ud800")
    assert expected in tab_error(speculative_tab, prompt="Hi\ud800")
    code, err = run_cli(capsys, "--prompt", "Hi\ud800")
    assert code == 2 and expected in err


@pytest.mark.parametrize("model", [["tiny-random"], {"name": TINY}, 5])
def test_a_model_that_is_not_a_name_is_named(model):
    assert "`model` must be a model name (text)" in api_error(model=model)


def test_a_diffusion_model_as_draft_model_is_refused(capsys):
    expected = "`draft_model` 'tiny-random-diffusion' is a masked diffusion model; the draft model must be a causal"
    params = {"drafter": "model", "draft_model": TINY_DIFFUSION}
    assert expected in api_error(strategy="speculative", params=json.dumps(params))
    assert expected in tab_error(speculative_tab, **params)
    code, err = run_cli(capsys, "--strategy", "speculative", "--set", "drafter=model",
                        "--set", f"draft_model={TINY_DIFFUSION}")
    assert code == 2 and expected in err


def test_a_diffusion_draft_model_found_only_when_loaded_is_refused():
    """A hub id is checked when it loads (its kind is known only then): the drafter factory checks it too."""
    from decoding.lm import LM
    from decoding.models import load_model
    from decoding.speculative.strategy import DRAFTERS, SpeculativeParams

    params = SpeculativeParams(drafter="model", draft_model="some-org/some-model")
    object.__setattr__(params, "draft_model", TINY_DIFFUSION)  # as if that hub id were a diffusion model
    with pytest.raises(ValueError, match="is a masked diffusion model; the draft model must be a causal"):
        DRAFTERS.get("model")(LM(load_model(TINY, progress=None)), params)


def test_a_diffusion_model_as_judge_is_refused():
    params = {"n": 2, "max_step_tokens": 2, "reward": "lm-judge", "judge_model": TINY_DIFFUSION}
    assert "the judge must be a causal" in api_error(strategy="best-of-n", prompt="1+1=", params=json.dumps(params))


def test_the_real_diffusion_model_as_draft_model_is_refused():
    """tiny-ar and tiny-diffusion share a tokenizer: before the check this was an AttributeError mid-run."""
    params = {"drafter": "model", "draft_model": "tiny-diffusion"}
    assert "`draft_model` 'tiny-diffusion' is a masked diffusion model" in api_error(
        model="tiny-ar", strategy="speculative", params=json.dumps(params))


# ---------------------------------------------------------------- context length of causal models


def test_a_prompt_beyond_the_context_is_refused_with_the_numbers(capsys):
    """tiny-random has 4096 positions; its byte tokenizer makes one token per character (plus <s>)."""
    prompt = "a" * 5000
    expected = r"the prompt's 500\d tokens plus `max_new_tokens` 3 exceed tiny-random's context of 4096 positions"
    with pytest.raises(gr.Error, match=expected):
        run_api(prompt=prompt)
    with pytest.raises(gr.Error, match=expected):
        playground(prompt=prompt)
    with pytest.raises(gr.Error, match=expected.replace("3 exceed", "3 and 4 draft positions exceed")):
        speculative_tab(prompt=prompt)
    with pytest.raises(gr.Error, match=expected):
        scaling_tab(prompt=prompt)
    code, err = run_cli(capsys, "--prompt", prompt)
    assert code == 2 and "exceed tiny-random's context of 4096 positions" in err


def test_the_longest_run_fits_the_tiny_model():
    """The Stop tests start runs of MAX_NEW_TOKENS_CAP tokens on tiny-random."""
    from decoding.lm import LM
    from decoding.models import load_model

    LM(load_model(TINY, progress=None)).check_fits(100, MAX_NEW_TOKENS_CAP)


def test_a_long_prompt_on_tiny_ar_is_refused(capsys):
    """The issue's case: 20,000 characters on tiny-ar (256 positions) were accepted and produced garbage."""
    prompt = "word " * 4000
    message = api_error(model="tiny-ar", prompt=prompt)
    assert "plus `max_new_tokens` 3 exceed tiny-ar's context of 256 positions; shorten the prompt" in message
    assert "tiny-ar's context of 256 positions" in tab_error(playground, model="tiny-ar", prompt=prompt)
    code, err = cli.main(["run", "--model", "tiny-ar", "--quiet", "--prompt", prompt]), capsys.readouterr().err
    assert code == 2 and "exceed tiny-ar's context of 256 positions" in err


def test_too_many_new_tokens_for_tiny_ar_say_how_many_fit():
    message = api_error(model="tiny-ar", prompt="Once", max_new_tokens=300)
    assert "plus `max_new_tokens` 300 exceed tiny-ar's context of 256 positions; ask for at most" in message
    trace = run_to_trace("tiny-ar", "Once", strategy="greedy", max_new_tokens=8, chat=False)
    assert len(trace.finish.token_ids) <= 8
