"""Faults (issue 12): every bad input gets a message naming the problem, through every entry point, and a
replayed trace is bounded in size and consistent.

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
import re
from dataclasses import dataclass

import pytest

import gradio as gr

import decoding.__main__ as cli
from decoding.events import Trace
from decoding.params import Params, param, specs
from decoding.registry import STRATEGIES
from decoding.run import MAX_NEW_TOKENS_CAP, run_to_trace
from decoding import trace_checks
from conftest import tab_replayers
from ui import playground_callbacks, scaling_callbacks, speculative_callbacks
from ui.api import api_generate
from ui.launch import launch_kwargs
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
    assert NON_FINITE in tab_error(speculative_tab, drafter="early-exit", temperature=1e-320, **{"early-exit.exit_layer": 1})
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
    expected = "`model.draft_model` 'tiny-random-diffusion' is a masked diffusion model; the draft model must be a causal"
    params = {"drafter": "model", "draft_model": TINY_DIFFUSION}  # the plain name: the chosen drafter's
    assert expected in api_error(strategy="speculative", params=json.dumps(params))
    assert expected in tab_error(speculative_tab, drafter="model", **{"model.draft_model": TINY_DIFFUSION})
    code, err = run_cli(capsys, "--strategy", "speculative", "--set", "drafter=model",
                        "--set", f"draft_model={TINY_DIFFUSION}")
    assert code == 2 and expected in err


def test_a_diffusion_draft_model_found_only_when_loaded_is_refused():
    """A hub id is checked when it loads (its kind is known only then): the drafter factory checks it too."""
    from decoding.lm import LM
    from decoding.models import load_model
    from decoding.speculative.strategy import DRAFTERS, SpeculativeParams

    params = SpeculativeParams(drafter="model", own={"draft_model": "some-org/some-model"})
    object.__setattr__(params.own, "draft_model", TINY_DIFFUSION)  # as if that hub id were a diffusion model
    with pytest.raises(ValueError, match="is a masked diffusion model; the draft model must be a causal"):
        DRAFTERS.get("model")(LM(load_model(TINY, progress=None)), params)


def test_a_diffusion_model_as_judge_is_refused():
    params = {"n": 2, "max_step_tokens": 2, "reward": "lm-judge", "judge_model": TINY_DIFFUSION}
    assert "the judge must be a causal" in api_error(strategy="best-of-n", prompt="1+1=", params=json.dumps(params))


@pytest.mark.slow  # the real models tiny-ar, tiny-diffusion
def test_the_real_diffusion_model_as_draft_model_is_refused():
    """tiny-ar and tiny-diffusion share a tokenizer: before the check this was an AttributeError mid-run."""
    params = {"drafter": "model", "draft_model": "tiny-diffusion"}
    assert "`model.draft_model` 'tiny-diffusion' is a masked diffusion model" in api_error(
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
    with pytest.raises(gr.Error, match=expected.replace("3 exceed", "3 and 10 draft positions exceed")):
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


@pytest.mark.slow  # the real model tiny-ar
def test_a_long_prompt_on_tiny_ar_is_refused(capsys):
    """The issue's case: 20,000 characters on tiny-ar (256 positions) were accepted and produced garbage."""
    prompt = "word " * 4000
    message = api_error(model="tiny-ar", prompt=prompt)
    assert "plus `max_new_tokens` 3 exceed tiny-ar's context of 256 positions; shorten the prompt" in message
    assert "tiny-ar's context of 256 positions" in tab_error(playground, model="tiny-ar", prompt=prompt)
    code, err = cli.main(["run", "--model", "tiny-ar", "--quiet", "--prompt", prompt]), capsys.readouterr().err
    assert code == 2 and "exceed tiny-ar's context of 256 positions" in err


@pytest.mark.slow  # the real model tiny-ar
def test_too_many_new_tokens_for_tiny_ar_say_how_many_fit():
    message = api_error(model="tiny-ar", prompt="Once", max_new_tokens=300)
    assert "plus `max_new_tokens` 300 exceed tiny-ar's context of 256 positions; ask for at most" in message
    trace = run_to_trace("tiny-ar", "Once", strategy="greedy", max_new_tokens=8, chat=False)
    assert len(trace.finish.token_ids) <= 8


# ---------------------------------------------------------------- replays: nesting, NaN, broken links


@pytest.fixture(scope="module")
def traces() -> dict[str, dict]:
    scaling = {"n": 2, "max_step_tokens": 2, "reward": "arith-step"}
    runs = {
        "sample": run_to_trace(TINY, "Hi", strategy="sample", params={"top_k": 5}, max_new_tokens=3, chat=False),
        "beam": run_to_trace(TINY, "Hi", strategy="beam", params={"num_beams": 2}, max_new_tokens=3, chat=False),
        "speculative": run_to_trace(TINY, "Hi", strategy="speculative",
                                    params={"drafter": "early-exit", "exit_layer": 1, "tree": "static",
                                            "draft_length": 2, "temperature": 1.0}, max_new_tokens=3, chat=False),
        "particle-filter": run_to_trace(TINY, "1+1=", strategy="particle-filter", params=scaling,
                                        max_new_tokens=4, chat=False),
        "diffusion": run_to_trace(TINY_DIFFUSION, "Hi", strategy="diffusion", params={"steps": 2},
                                  max_new_tokens=4, chat=False),
    }
    return {name: json.loads(trace.to_json()) for name, trace in runs.items()}


REPLAYS = {"sample": "playground", "beam": "playground", "speculative": "speculative",
           "particle-filter": "scaling", "diffusion": "diffusion"}


@pytest.fixture
def replay(tmp_path):
    """replay(tab, data) -> the message of the gr.Error the tab's Replay raised (fails if none)."""
    calls = tab_replayers()

    def run(tab: str, data) -> str:
        path = tmp_path / "shared.json"
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
        with pytest.raises(gr.Error) as err:
            calls[tab](str(path))
        return err.value.message

    return run


def event_of(data: dict, kind: str, index: int = 0) -> tuple[int, dict]:
    found = [(i, e) for i, e in enumerate(data["events"]) if e["kind"] == kind]
    return found[index]


def changed(data: dict, kind: str, change, index: int = 0) -> dict:
    out = json.loads(json.dumps(data))
    change(event_of(out, kind, index)[1])
    return out


@pytest.mark.parametrize("tab", ["playground", "speculative", "scaling", "diffusion", "longctx"])
def test_a_deeply_nested_replay_gets_a_message(replay, tab):
    text = '{"format": "decoding-lab-trace", "version": 1, "events": ' + DEEP + "}"
    assert "nested too deeply" in replay(tab, text)


def test_nan_in_a_diffusion_replay_is_named(traces, replay):
    for field in ("confidence", "masked_confidence"):
        data = changed(traces["diffusion"], "diffusion_step", lambda e, field=field: e[field].__setitem__(0, math.nan))
        text = json.dumps(data)  # writes NaN, which Python's JSON reader accepts
        assert f"`{field}[0]` must be a finite number" in replay("diffusion", text)


BROKEN_LINKS = [  # (source run, event kind, change, what the message says)
    ("sample", "token", lambda e: e.update(top_ids=[]),
     r"`top_tokens` must be a list as long as `top_ids` \(0 items\), got 10 items"),
    ("sample", "token", lambda e: e.update(top_kept=e["top_kept"] * 3), "`top_kept` must be a list as long as"),
    ("sample", "token", lambda e: e["top_probs"].pop(), "`top_probs` must be a list as long as `top_ids`"),
    ("beam", "beams", lambda e: e["beams"][0].update(parent=7), r"`beams\[0\].parent` must be an index of the previous"),
    ("beam", "beams", lambda e: e["beams"][0].update(logprob=1e300),
     r"`beams\[0\].logprob` must be a finite number &lt;= 0"),  # the toast escapes <
    ("speculative", "spec_round", lambda e: e["nodes"][1].update(id=0), r"`nodes\[1\].id` must be 1"),
    ("speculative", "spec_round", lambda e: e["nodes"][0].update(parent=0), r"`nodes\[0\].parent` must be -1"),
    ("speculative", "spec_round", lambda e: e["nodes"][0].update(depth=2**62), r"`nodes\[0\].depth` must be 1"),
    ("speculative", "spec_round", lambda e: e.update(accepted_path=[99]), r"`accepted_path\[0\]` must be a node id"),
    ("speculative", "spec_round", lambda e: e["dists"][0].update(parent=99), r"`dists\[0\].parent` must be"),
    ("particle-filter", "particles", lambda e: e.update(ancestors=[0, 5]), r"`ancestors\[1\]` must be a slot in \[0, 1\]"),
    ("particle-filter", "particles", lambda e: e.update(weights_after=[1.0]), "`weights_after` must be a list as long"),
    ("particle-filter", "particles", lambda e: e["particles"][1].update(id=9), r"`particles\[1\].id` must be a slot"),
    ("diffusion", "diffusion_step", lambda e: e.update(unmasked=[99], unmasked_tokens=[5], confidence=[0.5]),
     r"`unmasked\[0\]` must be a canvas position in \[0, 3\]"),
    ("diffusion", "diffusion_step", lambda e: e["canvas_text"].pop(), "`canvas_text` must be a list as long as `canvas`"),
]


@pytest.mark.parametrize("source, kind, change, message", BROKEN_LINKS,
                         ids=[f"{r}-{m[:30]}" for r, _, _, m in BROKEN_LINKS])
def test_a_replay_with_broken_indices_is_refused_with_the_field(traces, replay, source, kind, change, message):
    data = changed(traces[source], kind, change)
    text = replay(REPLAYS[source], data)
    assert "Cannot replay shared.json: malformed trace: event" in text
    assert re.search(message, text), text


def test_a_particle_parent_past_the_previous_step_is_refused(traces):
    data = changed(traces["particle-filter"], "particles", lambda e: e["particles"][0].update(parent=5), index=1)
    with pytest.raises(ValueError, match=r"`particles\[0\].parent` must be -1 \(the prompt\) or a slot"):
        Trace.from_dict(data)


def test_a_canvas_that_changes_length_is_refused(traces):
    def longer(e):
        e["canvas"].append(-1), e["canvas_text"].append(""), e["masked_confidence"].append(None)

    with pytest.raises(ValueError, match=r"`canvas` must be as long as the previous step's \(4 positions\)"):
        Trace.from_dict(changed(traces["diffusion"], "diffusion_step", longer, index=1))


def test_real_traces_of_every_shape_pass_the_links():
    """What the strategies write loads back: every drafter and tree, every scaling method, diffusion samplers."""
    runs = [("speculative", {"drafter": d, "tree": t, "early-exit.exit_layer": 1, "draft_length": 3, "temperature": temp})
            for d in ("early-exit", "prompt-lookup", "token-recycling") for t in ("chain", "static", "dynamic")
            for temp in (0.0, 1.0)]
    runs += [(m, {"n": 3, "max_step_tokens": 2, "reward": "arith-step"})
             for m in ("best-of-n", "majority-vote", "first-finish", "reward-beam", "particle-filter")]
    runs += [("beam", {"num_beams": 3}), ("contrastive", {}), ("mirostat", {})]
    for strategy, params in runs:
        if strategy == "reward-beam":
            params = params | {"beam_width": 1}
        trace = run_to_trace(TINY, "1+1=1+1=", strategy=strategy, params=params, max_new_tokens=5, chat=False)
        assert Trace.from_json(trace.to_json()).to_dict() == trace.to_dict(), (strategy, params)
    for params in ({"steps": 4, "block_length": 2}, {"threshold": 0.5}, {"sampler": "localleap", "threshold": 0.5}):
        trace = run_to_trace(TINY_DIFFUSION, "Hi", strategy="diffusion", params=params, max_new_tokens=4, chat=False)
        assert Trace.from_json(trace.to_json()).to_dict() == trace.to_dict(), params


# ---------------------------------------------------------------- bounded uploads


def test_the_upload_limit_has_a_default_and_an_override(monkeypatch):
    monkeypatch.delenv("DECODING_LAB_MAX_UPLOAD_MB", raising=False)
    assert launch_kwargs()["max_file_size"] == 5 * 2**20 == trace_checks.upload_bytes()
    monkeypatch.setenv("DECODING_LAB_MAX_UPLOAD_MB", "12")
    assert launch_kwargs()["max_file_size"] == 12 * 2**20
    monkeypatch.setenv("DECODING_LAB_MAX_UPLOAD_MB", "lots")
    with pytest.raises(ValueError, match="DECODING_LAB_MAX_UPLOAD_MB must be an integer, got 'lots'"):
        trace_checks.upload_bytes()


@pytest.mark.slow  # the HTTP server
def test_the_app_server_refuses_an_upload_over_the_limit(app_url):
    """Over real HTTP: Gradio's upload route refuses the file before any callback sees it."""
    import requests

    def upload(size: int):
        return requests.post(app_url + "gradio_api/upload", timeout=60,
                             files={"files": ("trace.json", b" " * size, "application/json")})

    assert upload(2**20).status_code == 200
    refused = upload(6 * 2**20)
    assert refused.status_code == 413 and f"{5 * 2**20} bytes" in refused.text


def test_a_file_over_the_upload_limit_is_refused_unread(traces, replay, tmp_path, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_MAX_UPLOAD_MB", "1")
    data = json.loads(json.dumps(traces["sample"]))
    data["events"][0]["prompt"] = "x" * (3 * 2**20 // 2)  # 1.5 MB of valid JSON
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    expected = "the file is 1.6 MB, more than the limit of 1 MB (set by DECODING_LAB_MAX_UPLOAD_MB)"
    with pytest.raises(ValueError, match=re.escape(expected)):
        Trace.load(path)
    assert expected in replay("playground", data)
    monkeypatch.setenv("DECODING_LAB_MAX_UPLOAD_MB", "2")
    assert Trace.load(path).start.prompt == data["events"][0]["prompt"]


def test_the_issues_large_canvas_is_refused_by_default(traces, replay):
    """The issue's trace had a 10,000-position canvas (108 s and 2 GB to replay)."""
    def huge(e):
        e.update(canvas=[-1] * 10_000, canvas_text=[""] * 10_000, masked_confidence=[0.5] * 10_000)

    data = changed(traces["diffusion"], "diffusion_step", huge)
    expected = ("`canvas` has 10000 positions, more than the limit of 2048 positions "
                "(set by DECODING_LAB_MAX_TRACE_CANVAS)")
    assert expected in replay("diffusion", data)


def test_every_bound_is_refused_with_its_limit_and_variable(traces, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_MAX_TRACE_EVENTS", "4")
    with pytest.raises(ValueError, match=r"the trace has 5 events, more than the limit of 4 events "
                                         r"\(set by DECODING_LAB_MAX_TRACE_EVENTS\)"):
        Trace.from_dict(traces["sample"])  # start, 3 tokens, finish
    monkeypatch.delenv("DECODING_LAB_MAX_TRACE_EVENTS")
    monkeypatch.setenv("DECODING_LAB_MAX_TRACE_PARTICLES", "1")
    with pytest.raises(ValueError, match=r"`particles` has 2 particles, more than the limit of 1 particles"):
        Trace.from_dict(traces["particle-filter"])
    monkeypatch.setenv("DECODING_LAB_MAX_TRACE_CANVAS", "3")
    with pytest.raises(ValueError, match=r"`canvas` has 4 positions, more than the limit of 3"):
        Trace.from_dict(traces["diffusion"])
    monkeypatch.setenv("DECODING_LAB_MAX_TRACE_TOKENS", "9")  # a token step records 10 alternatives
    with pytest.raises(ValueError, match=r"event 1 \('token'\): `top_ids` must be a list of at most 9 items, "
                                         r"got 10 items"):
        Trace.from_dict(traces["sample"])


def test_token_lists_and_json_extras_are_bounded_by_default(traces):
    data = json.loads(json.dumps(traces["sample"]))
    data["events"][0]["prompt_ids"] = [1] * 70_000
    with pytest.raises(ValueError, match=r"`prompt_ids` must be a list of at most 65536 items, got 70000 items"):
        Trace.from_dict(data)
    data = changed(traces["sample"], "finish", lambda e: e["extra"].update(junk=[0] * 70_000))
    with pytest.raises(ValueError, match=r"`extra.junk` must be a list of at most 65536 items"):
        Trace.from_dict(data)


def test_the_bounds_fit_any_run_the_app_can_make():
    from decoding.scaling.params import ScalingParams

    assert trace_checks.MAX_NEW_TOKENS == MAX_NEW_TOKENS_CAP
    assert trace_checks.CANVAS.default >= MAX_NEW_TOKENS_CAP
    assert trace_checks.EVENTS.default >= 2 * MAX_NEW_TOKENS_CAP + 2  # speculative: a round and a token per token
    assert trace_checks.PARTICLES.default >= next(s.high for s in specs(ScalingParams) if s.name == "n")


def test_the_readme_documents_every_bound():
    from doc_pages import section

    hosting = section("Hosting on Hugging Face Spaces")  # the README's summary and docs/hosting.md
    for bound in trace_checks.BOUNDS:
        assert f"`{bound.env}`" in hosting, bound.env

