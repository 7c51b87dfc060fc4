"""The Gradio app: callbacks as plain functions (tiny random model), then the real app over HTTP
with gradio_client (streaming API, bad input, Stop). The server starts once per session (the
`app_url` and `client` fixtures in tests/conftest.py) and is shared with the other HTTP and browser tests.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import re
import time

import pytest

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr

from conftest import api_run
from decoding.__main__ import summary
from decoding.events import Trace, TokenStep
from decoding.lm import LM
from decoding.run import MAX_NEW_TOKENS_CAP, run_to_trace
from decoding.registry import STRATEGIES, param_specs
from ui import playground_callbacks as cb
from ui.widgets import model_choices
from ui.wiring import bind, named_inputs
from ui.worker import Redraw
from ui.exports import download
from ui.playground_views import collect_params, new_selection, param_widgets, playground_strategies

TINY = "tiny-random"
METHODS = ("momentum", "adadec", "superposed", "exact-extract", "lud", "hamburger", "ftp")  # a picture of their own
CLI_KEYS = {"model", "strategy", "params", "prompt", "text", "token_ids", "stats"}
STATS_KEYS = {"num_tokens", "tokens_per_s", "forward_passes", "mean_entropy", "time_to_first_token_s", "stop_reason"}


def defaults() -> dict:
    """Every parameter widget's default, by widget key (what the Playground's Generate passes)."""
    return {w.key: w.default for w in param_widgets()}


def values_with(strategy: str, **params) -> dict:
    return {w.key: params.get(w.name, w.default) if w.strategy == strategy else w.default for w in param_widgets()}


def run_ui(strategy="sample", prompt="Hello", max_new_tokens=24, values=None, model=TINY, selection=None, chat=False):
    selection = new_selection() if selection is None else selection
    updates = list(cb.generate_run(model, strategy, prompt, max_new_tokens, 0, chat, "auto", "prob", selection,
                                   **(values or defaults())))
    return updates, updates[-1]["trace"] if "trace" in updates[-1] else updates[0]["trace"], selection


# Callbacks as plain functions ------------------------------------------------------------------
@pytest.mark.slow  # the real models gemma3-270m, smollm2-135m
def test_model_menu_hides_test_models_unless_asked(monkeypatch):
    monkeypatch.delenv("DECODING_LAB_SHOW_TEST_MODELS", raising=False)
    assert model_choices()[0] == "smollm2-135m" and "gemma3-270m" in model_choices()
    assert TINY not in model_choices()
    monkeypatch.setenv("DECODING_LAB_SHOW_TEST_MODELS", "1")
    assert TINY in model_choices()


@pytest.mark.parametrize("strategy", playground_strategies())
def test_each_strategy_shows_only_its_parameters(strategy):
    assert {w.name for w in param_widgets(strategy)} == {p["name"] for p in param_specs(strategy)}
    shown = cb.strategy_changed(strategy)
    assert shown[f"group:{strategy}"]["visible"] is True
    assert all(shown[f"group:{s}"]["visible"] is False for s in playground_strategies() if s != strategy)
    assert shown["beams"]["visible"] is (strategy == "beam")
    assert shown["method"]["visible"] is (strategy in METHODS)  # their own picture
    models = STRATEGIES[strategy].models
    assert ("model" in shown) is bool(models) and (not models or shown["model"]["value"] == models[0])
    for w in param_widgets(strategy):  # slider defaults inside their ends
        if w.low is not None:
            assert w.low <= w.default <= w.high, w


def test_generate_streams_and_exports_on_demand():
    updates, trace, _ = run_ui(max_new_tokens=24, values=values_with("sample", top_p=0.9))
    final = updates[-1]
    assert len(updates) >= 2 and trace.finish is not None and trace.start.params["top_p"] == 0.9
    assert final["text"].count('class="tok') == 24 and "Finished" in final["status"]
    assert not {"dl_json", "dl_csv", "dl_html"} & final.keys()  # a run writes no file; the export buttons do
    assert Trace.load(download(final["trace"])).to_dict() == trace.to_dict()
    assert open(download(trace, "tokens")).read().count("\n") == 25  # header + one row per token
    assert "<html" in open(download(trace, "entropy")).read()[:500].lower()


def test_a_beam_run_says_what_its_counts_count():
    """The live line counts beam steps, "Finished" the best hypothesis's tokens, which may be fewer (it can end
    sooner): the two numbers are named, not "24 tokens so far" then "Finished: 15 tokens"."""
    updates, trace, _ = run_ui("beam", max_new_tokens=12, values=values_with("beam", num_beams=2))
    live = [u["status"] for u in updates[:-1] if "so far" in u.get("status", "")]
    assert live and all("beam steps so far" in line for line in live)
    steps = len(trace.of_kind("beams"))
    assert f"the search ran {steps} beam steps" in updates[-1]["status"]


def test_redraws_are_throttled_by_wall_clock(monkeypatch):
    start = time.perf_counter()
    updates, trace, _ = run_ui(max_new_tokens=100)
    elapsed = time.perf_counter() - start
    assert len(trace.of_kind("token")) == 100
    charts = [u for u in updates if "entropy" in u]  # the full redraws; the token chips go out as they come
    assert len(charts) <= 2 + elapsed * 8 + 1  # first + at most ~8 redraws/s + final
    chips = [u for u in updates if "text" in u and "entropy" not in u]
    assert chips and all(u.keys() <= {"text", "branch_box", "status"} for u in chips)
    clock = [100.0]  # a clock the test moves: the spacing rule is checked exactly, whatever the machine's load
    monkeypatch.setattr("ui.worker.time.perf_counter", lambda: clock[0])

    def draw(seconds):
        with throttle.timed():
            clock[0] += seconds

    throttle = Redraw(per_s=8, budget=0.25, max_interval_s=0.5)
    assert throttle.due()
    draw(0.05)  # a 50 ms drawing: the next one waits 4 x 50 ms, not 1/8 s
    clock[0] += 0.19
    assert not throttle.due()
    clock[0] += 0.02
    assert throttle.due()
    draw(0.3)  # very slow drawings are spaced out, but at most `max_interval_s`
    clock[0] += 0.49
    assert not throttle.due()
    clock[0] += 0.02
    assert throttle.due()


@pytest.mark.parametrize("strategy", playground_strategies())
def test_every_strategy_renders_in_the_playground(strategy):
    prompt = "Context: A cat sat. Question: Who sat? Answer:" if strategy == "exact-extract" else "Hello"
    models = STRATEGIES[strategy].models  # LUD, HAMburger, FTP: the model trained for them (shipped, tiny)
    updates, trace, selection = run_ui(strategy=strategy, prompt=prompt, max_new_tokens=5, model=models[0] if models else TINY)
    final = updates[-1]
    assert trace.finish is not None and trace.start.strategy == strategy
    assert final["beams"]["visible"] is (strategy == "beam")
    assert final["method"]["visible"] is (strategy in METHODS)  # their own picture
    assert final["distribution"]["visible"] is (strategy != "beam")  # beam search has no per-step distribution
    assert final["entropy"]["value"].data and final["stats"].count('class="dl-stat"') == 6
    if strategy == "beam":  # no per-token steps: nothing to select or branch from
        with pytest.warns(UserWarning, match="no per-token steps"):
            assert cb.select_step("main", 0, trace, None, selection, "prob") == {}
    else:
        assert cb.select_step("main", 0, trace, None, selection, "entropy")["branch_button"]["interactive"]


def test_a_model_that_cannot_load_is_a_clear_error(monkeypatch):
    from decoding.models import ModelLoadError

    def too_big(name, **kwargs):
        raise ModelLoadError(f"{name} has 70.00B parameters: ~300.0 GiB in float32 does not fit in the 20.0 GiB free")

    monkeypatch.setattr("ui.worker.load_model", too_big)
    with pytest.raises(gr.Error, match="does not fit"):
        run_ui(model="meta-llama/Llama-3.1-70B")


def test_select_a_token_then_branch_from_an_alternative():
    _, trace, selection = run_ui(strategy="greedy", max_new_tokens=12)
    original = trace.to_dict()
    picked = cb.select_step("main", 4, trace, None, selection, "prob")
    assert selection == {"run": "main", "step": 4} and picked["step"] == 4
    assert 'class="tok sel" data-step="4"' in picked["text"]
    alternative = picked["alternatives"]["value"]
    step4 = next(e for e in trace.events if isinstance(e, TokenStep) and e.step == 4)
    assert alternative in step4.top_ids and alternative != step4.token_id
    updates = list(cb.branch_run(alternative, trace, None, selection, "prob"))
    branch = updates[-1]["branch"]["trace"]
    assert branch.start.prefix_ids == trace.finish.token_ids[:4] + [alternative]
    assert [e.step for e in branch.of_kind("token")][0] == 5
    assert len(branch.finish.token_ids) == len(trace.finish.token_ids)  # same total length budget
    assert "Branched at **step 4**" in updates[-1]["branch_summary"] and "dl-forced" in updates[-1]["branch_text"]
    assert trace.to_dict() == original  # the original run is untouched and still shown
    assert updates[-1]["text"].count('class="tok') == 12


def test_branch_without_a_selected_token_says_what_to_do():
    _, trace, selection = run_ui(strategy="greedy", max_new_tokens=4)
    with pytest.raises(gr.Error, match="select a token first"):
        next(cb.branch_run(None, trace, None, selection, "prob"))
    with pytest.warns(UserWarning, match="Step 99 is not in this run"):
        assert cb.select_step("main", 99, trace, None, selection, "prob") == {}  # changes nothing
    assert selection["step"] is None


@pytest.mark.parametrize("prompt, max_new_tokens, values, model, message", [
    ("", 8, None, TINY, "`prompt` is empty"),
    ("hi", MAX_NEW_TOKENS_CAP + 1, None, TINY, "`max_new_tokens` must be an integer"),
    ("hi", 8, values_with("sample", top_p=1.5), TINY, "`top_p` must be in"),
    ("hi", 8, None, "no-such-model", "unknown model 'no-such-model'"),
])
def test_bad_input_raises_a_clear_gr_error(prompt, max_new_tokens, values, model, message):
    selection = {"run": "main", "step": 3}
    with pytest.raises(gr.Error, match=message):
        next(cb.generate_run(model, "sample", prompt, max_new_tokens, 0, False, "auto", "prob", selection,
                             **(values or defaults())))
    assert selection == {"run": "main", "step": 3}  # nothing changed


def test_replay_restores_views_and_settings(tmp_path):
    updates, trace, _ = run_ui(strategy="mirostat", max_new_tokens=10, values=values_with("mirostat", tau=4.0))
    out = cb.replay(download(trace), None, None, new_selection(), "entropy")
    assert out["trace"].to_dict() == trace.to_dict()
    assert out["strategy"] == "mirostat" and out["param:mirostat.tau"] == 4.0 and out["prompt"] == "Hello"
    assert out["text"].count('class="tok') == 10 and "Replaying" in out["status"]


@pytest.mark.parametrize("content, message", [
    ("not json at all", "invalid JSON"),
    ('{"format": "something-else"}', "not a Decoding Lab trace"),
    ('{"format": "decoding-lab-trace", "version": 1, "events": [{"kind": "token"}]}', "malformed"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8"),
])
def test_malformed_trace_upload_is_refused_and_changes_nothing(tmp_path, content, message):
    path = tmp_path / "upload.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    _, trace, selection = run_ui(strategy="greedy", max_new_tokens=3)
    selection["step"] = 1
    with pytest.raises(gr.Error, match=message):
        cb.replay(str(path), trace, None, selection, "prob")
    assert selection == {"run": "main", "step": 1} and trace.finish is not None


def test_closing_the_run_stops_the_worker(monkeypatch):
    """What Stop does: Gradio closes the callback's generator; the worker thread must stop decoding."""
    calls = count_forward_passes(monkeypatch)
    run = cb.generate_run(TINY, "greedy", "Hello", MAX_NEW_TOKENS_CAP, 0, False, "auto", "prob", new_selection(),
                          **defaults())
    assert_closing_stops_compute(run, calls, limit=MAX_NEW_TOKENS_CAP / 4)


def assert_closing_stops_compute(run, calls: dict, limit: float):
    """Close a callback's generator after 5 tokens (what Stop does); model calls must stop at once.
    Returns the run's trace."""
    trace = next(run)["trace"]
    while len(trace.of_kind("token")) < 5:
        next(run)
    run.close()
    time.sleep(0.3)
    settled = calls["n"]
    time.sleep(0.5)
    assert calls["n"] == settled < limit
    assert trace.finish is not None and trace.finish.stop_reason == "cancelled"  # the run's own last event
    return trace
    after = cb.stop_run(trace, None, new_selection(), "prob")
    assert "**Stopped** the run after" in after["status"] and "Stop" in after["stats"]
    assert Trace.load(download(trace)).finish.stop_reason == "cancelled"


@pytest.mark.slow  # SmolLM2; the real model smollm2-135m
def test_the_real_model_through_the_callback(smol_lm):
    updates, trace, _ = run_ui(model="smollm2-135m", strategy="greedy", prompt="What is 2+2?", max_new_tokens=8,
                             chat=True)
    assert trace.start.model == "smollm2-135m" and trace.finish.text.strip()
    assert "smollm2-135m" in updates[-1]["stats"] and "tokens / s" in updates[-1]["stats"]


def count_forward_passes(monkeypatch) -> dict:
    calls = {"n": 0}
    forward = LM.forward

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(LM, "forward", counted)
    return calls


# Parameter values travel by name ---------------------------------------------------------------
def test_bind_calls_by_name_and_stop_still_closes_the_generator():
    seen, closed = [], []

    def run(model, prompt, playback=None, **fields):
        seen.append((model, prompt, playback, fields))
        try:
            yield {"status": "one"}
            yield {"status": "two"}
        finally:
            closed.append(True)

    status, model, prompt, alpha, beta = gr.Markdown(), gr.Textbox(), gr.Textbox(), gr.Number(), gr.Number()
    wrapped = bind(run, {"status": status}, {"beta": beta, "model": model, "alpha": alpha, "prompt": prompt})
    assert inspect.isgeneratorfunction(wrapped) and str(inspect.signature(wrapped)) == "(*values)"
    updates = wrapped(2, "m", 1, "p")  # Gradio passes the values in the dict's order
    assert next(updates) == {status: "one"} and seen == [("m", "p", None, {"beta": 2, "alpha": 1})]
    updates.close()  # what Gradio does on Stop
    assert closed == [True]
    with pytest.raises(TypeError, match="cannot wire .*run to the inputs model, alpha: .*'prompt'"):
        bind(run, {"status": status}, {"model": model, "alpha": alpha})

    def show(model):
        return {"status": model}

    assert bind(show, {"status": status}, {"model": model})("m") == {status: "m"}
    with pytest.raises(TypeError, match="cannot wire .*show to the inputs model, prompt: .*'prompt'"):
        bind(show, {"status": status}, {"model": model, "prompt": prompt})
    with pytest.raises(TypeError, match="alpha are given twice"):
        named_inputs({"model": model, "alpha": alpha}, {"alpha": beta})


def test_bind_gives_the_event_data_to_the_parameter_annotated_for_it():
    from gradio.helpers import special_args

    seen = []

    def clicked(trace, color_by, evt: gr.SelectData) -> dict:
        seen.append((trace, color_by, evt.index))
        return {"status": "ok"}

    status, trace, color_by = gr.Markdown(), gr.State(), gr.Radio(["a", "b"])
    wrapped = bind(clicked, {"status": status}, {"color_by": color_by, "trace": trace})
    assert str(inspect.signature(wrapped)) == "(evt: gradio.events.SelectData, /, *values)"
    data = gr.SelectData(None, {"index": 3, "value": "x"})
    inputs, *_ = special_args(wrapped, ["b", "T"], event_data=data)  # what Gradio does before calling it
    assert wrapped(*inputs) == {status: "ok"} and seen == [("T", "b", 3)]


def test_playground_parameters_travel_by_widget_key():
    values = values_with("sample", top_p=0.9)
    params = collect_params("sample", dict(reversed(values.items())))  # the order does not matter
    assert params["top_p"] == 0.9 and set(params) == {p["name"] for p in param_specs("sample")}
    own = {k: v for k, v in values.items() if k.startswith("param:sample.")}
    assert collect_params("sample", own) == params  # other strategies' widgets are not needed
    missing = {k: v for k, v in values.items() if k != "param:sample.top_p"}
    with pytest.raises(ValueError, match=re.escape("no value for sample's parameter `top_p` ('param:sample.top_p')")):
        collect_params("sample", missing)
    with pytest.raises(ValueError, match=re.escape("unknown parameter widget 'param:sample.top_q'")):
        collect_params("sample", values | {"param:sample.top_q": 0.5})
    with pytest.raises(gr.Error, match="no value for sample's parameter `top_p`"):
        next(cb.generate_run(TINY, "sample", "hi", 4, 0, False, "auto", "prob", new_selection(), **missing))


@pytest.mark.parametrize("tab", ["playground", "speculative", "scaling", "diffusion"])
def test_each_tabs_generate_gets_every_value_by_name(tab):
    """What Gradio does on Generate, without a model: the widgets' values in the wired order reach
    `generate_run` by name and pass `collect_params`; the empty prompt is then the only complaint."""
    module = importlib.import_module(f"ui.{tab}")
    with gr.Blocks() as blocks:
        c = getattr(module, f"build_{tab}")()
    (run,) = [f for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "generate_run"]
    values = ["" if component is c["prompt"] else component.value for component in run.inputs]
    assert inspect.isasyncgenfunction(run.fn)  # `model_event`: Stop reaches it at once (tests/test_stop.py)
    with pytest.raises(gr.Error, match="`prompt` is empty"):
        asyncio.run(first_update(run.fn(*values)))


async def first_update(updates):
    return await anext(updates)


# The real app over HTTP ------------------------------------------------------------------------
@pytest.mark.slow  # the HTTP server
def test_api_streams_events_then_the_cli_summary(client):
    outputs, result = api_run(client, TINY, "sample", "Hello", 16, 3, json.dumps({"top_k": 20}), False)
    kinds = [o.get("kind") for o in outputs[:-1]]
    assert kinds[0] == "start" and kinds[-1] == "finish" and kinds.count("token") == 16
    assert set(result) == CLI_KEYS and STATS_KEYS <= set(result["stats"])
    expected = summary(run_to_trace(TINY, "Hello", strategy="sample", params={"top_k": 20}, max_new_tokens=16,
                                    seed=3, chat=False))
    assert result["token_ids"] == expected["token_ids"] and result["text"] == expected["text"]
    assert result["params"] == expected["params"] and result["stats"]["num_tokens"] == 16
    assert result["stats"]["forward_passes"] == expected["stats"]["forward_passes"]


@pytest.mark.slow  # the HTTP server
@pytest.mark.parametrize("args, message", [
    ((TINY, "greedy", "", 8, 0, "{}"), "`prompt` is empty"),
    ((TINY, "greedy", "hi", MAX_NEW_TOKENS_CAP + 1, 0, "{}"), "`max_new_tokens` must be an integer"),
    ((TINY, "sample", "hi", 8, 0, '{"top_p": 1.5}'), "`top_p` must be in"),
    ((TINY, "sample", "hi", 8, 0, '{"top_p": '), "`params` must be a JSON object"),
    (("no-such-model", "greedy", "hi", 8, 0, "{}"), "unknown model 'no-such-model'"),
    ((TINY, "no-such-strategy", "hi", 8, 0, "{}"), "unknown strategy 'no-such-strategy'"),
])
def test_api_bad_input_is_a_clear_error_and_the_app_keeps_serving(client, args, message):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=message):
        client.predict(*args, api_name="/generate")
    assert client.predict(TINY, "greedy", "hi", 3, api_name="/generate")["stats"]["num_tokens"] == 3


@pytest.mark.slow  # the HTTP server
def test_malformed_trace_upload_over_http_names_the_problem(client, tmp_path):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": "world"}')
    with pytest.raises(AppError, match="Cannot replay notes.json: not a Decoding Lab trace"):
        client.predict(handle_file(str(bad)), "prob", api_name="/replay")
    assert client.predict(TINY, "greedy", "hi", 2, api_name="/generate")["stats"]["num_tokens"] == 2


@pytest.mark.slow  # the HTTP server
def test_cancel_stops_compute_on_the_server(client, monkeypatch):
    calls = count_forward_passes(monkeypatch)  # the server runs in this process
    job = client.submit(TINY, "greedy", "Hello", MAX_NEW_TOKENS_CAP, 0, "{}", False, api_name="/generate")
    deadline = time.time() + 60
    while len(job.outputs()) < 6 and time.time() < deadline:
        time.sleep(0.02)
    job.cancel()  # (always True with a queue: what is checked is that the calls stop, below)
    time.sleep(1.0)
    settled = calls["n"]
    time.sleep(1.0)
    assert calls["n"] == settled, "the model kept running after the job was cancelled"
    assert 6 <= settled < MAX_NEW_TOKENS_CAP / 2
    assert client.predict(TINY, "greedy", "hi", 2, api_name="/generate")["stats"]["num_tokens"] == 2


@pytest.mark.slow  # the HTTP server
def test_api_compare_streams_every_run_then_runs_and_table(client):
    settings = [{"strategy": "greedy"}, {"strategy": "sample", "params": {"top_k": 20}},
                {"strategy": "beam", "params": {"num_beams": 2}}]
    job = client.submit(TINY, "Hello", json.dumps(settings), 8, 3, False, api_name="/compare")
    result = job.result(timeout=300)
    outputs = job.outputs()[:-1]
    assert {o["run"] for o in outputs} == {0, 1, 2}
    assert [o["kind"] for o in outputs[:3]] == ["start"] * 3  # the runs take turns from the first event
    assert sum(o["kind"] == "score" for o in outputs) == 3
    assert [r["strategy"] for r in result["runs"]] == ["greedy", "sample", "beam"]
    assert [row["strategy"] for row in result["table"]] == ["greedy", "sample (top_k=20)", "beam (num_beams=2)"]
    alone = summary(run_to_trace(TINY, "Hello", strategy="sample", params={"top_k": 20}, max_new_tokens=8, seed=3,
                                 chat=False))
    assert result["runs"][1]["token_ids"] == alone["token_ids"]  # the same run as alone, from the same seed
    assert all(row["logprob"] is not None and row["tokens"] >= 1 for row in result["table"])


@pytest.mark.slow  # the HTTP server
@pytest.mark.parametrize("settings, message", [
    ('[{"strategy": "greedy"}]', "compare needs 2 to 4 settings, got 1"),
    ('[{"strategy": "greedy"}, {"strategy": "sample", "params": {"top_p": 1.5}}]', "setting 2 \\(sample\\)"),
    ("[", "`settings` must be a JSON list"),
])
def test_api_compare_bad_settings_are_a_clear_error(client, settings, message):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=message):
        client.predict(TINY, "Hello", settings, 8, 0, False, api_name="/compare")


def test_compare_with_a_model_that_cannot_load_says_why(monkeypatch):
    from ui import compare_callbacks as ccb

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = {f"strategy_{k}": s for k, s in enumerate(["greedy", "sample", "(off)", "(off)"])} | \
        {f"params_{k}": "{}" for k in range(4)}
    run = ccb.compare_run("nobody-here/no-such-model-xyz", "Hello", 4, 0, False, "auto", "prob", ccb.new_comparison(),
                          **rows)
    with pytest.raises(gr.Error, match="no-such-model-xyz"):
        list(run)
    rows["strategy_1"] = "(off)"
    with pytest.raises(gr.Error, match="Compare needs 2 to 4 runs switched on; 1 is"):
        list(ccb.compare_run(TINY, "Hello", 4, 0, False, "auto", "prob", ccb.new_comparison(), **rows))
