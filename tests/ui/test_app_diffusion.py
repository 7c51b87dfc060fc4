"""The Diffusion tab: callbacks as plain functions on the real embedded tiny-diffusion (a short canvas,
then the autoregressive tiny-ar for comparison), the step slider, control visibility, presets, replay,
bad input, Stop; then one diffusion run over real HTTP through the `/generate` API.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

import gradio as gr

from decoding.diffusion.lm import DiffusionLM
from decoding.diffusion.parallel_tasks import TASKS, check, make_splits
from decoding.events import Trace, stats
from decoding.models import load_model
from decoding.run import run_to_trace
from conftest import api_run
from ui import diffusion_callbacks as cb
from ui.exports import download
from ui import diffusion_tasks as tasks
from ui.diffusion_views import DEFAULT_PLAYBACK, DEFAULT_PROMPT, DEFAULT_SETTINGS, FIELDS, views
from visualizers._common import esc

MODEL = "tiny-diffusion"
LENGTH = 24


def values(**changes) -> dict:
    """Every sampler field by name (what the tab's Generate passes): the defaults with `changes`."""
    settings = DEFAULT_SETTINGS | changes
    return {name: settings[name] for name in FIELDS}


def run_ui(prompt=DEFAULT_PROMPT, length=LENGTH, compare="none", model=MODEL, seed=0, **params) -> list[dict]:
    return list(cb.generate_run(model, prompt, length, seed, compare, **values(**params)))


def merged(updates: list[dict]) -> dict:
    final = {}
    for update in updates:
        final |= update
    return final


def masked_cells(canvas: str) -> int:
    return canvas.count('class="cell masked')


@pytest.fixture(scope="module")
def run() -> tuple[list[dict], Trace, Trace]:
    """24 positions in 8 steps (3 tokens per step), then tiny-ar greedy on the same prompt and length."""
    updates = run_ui(steps=8.0, compare="tiny-ar, greedy")
    final = merged(updates)
    return updates, final["trace"], final["other"]


@pytest.mark.slow  # the module's real-model run
def test_generate_streams_steps_and_ends_unmasked(run):
    updates, trace, _ = run
    steps = trace.of_kind("diffusion_step")
    assert trace.start.strategy == "diffusion" and trace.start.params["steps"] == 8
    assert trace.start.chat is False and trace.start.prompt_text == DEFAULT_PROMPT  # tiny-diffusion has no template
    assert len(steps) == 8 and trace.finish.stop_reason in ("eos", "max_new_tokens")
    main = updates[: updates.index(next(u for u in updates if u.get("other"))) + 1]
    live = [u for u in main[1:-1] if "canvas" in u]  # while the main run streams (a fast run may show no step)
    assert len(main) >= 3 and live and all(u["step"]["interactive"] is False for u in live if "step" in u)  # waits
    s = stats(trace)
    assert s["nfe"] == s["diffusion_steps"] == 8 and s["tokens_per_step"] == 3.0
    assert s["nfe_per_token"] == pytest.approx(1 / 3, abs=1e-3)
    assert -1 not in steps[-1].canvas
    mask = load_model(MODEL).tokenizer.mask_token
    assert trace.finish.text.strip() and mask not in trace.finish.text
    final = merged(main)
    assert masked_cells(final["canvas"]) == 0 and "NFE 8" in final["canvas"]
    for card in ("answer tokens", "steps", "NFE (model calls)", "positions per step", "NFE per position", "elapsed (s)"):
        assert f'<div class="k">{card}</div>' in final["stats"]
    assert '<div class="v">3.00</div>' in final["stats"] and "fixed, 8 steps" in final["stats"]
    assert final["order"].data and final["confidence"].data and final["tokens"].data
    assert final["step"]["maximum"] == 7 and final["step"]["value"] == 7 and final["step"]["interactive"] is True
    assert "dl_json" not in final and Trace.load(download(final["trace"])).to_dict() == trace.to_dict()


@pytest.mark.slow  # the module's real-model run; the real model tiny-ar
def test_compare_with_the_autoregressive_model(run):
    updates, trace, other = run
    assert other.start.model == "tiny-ar" and other.start.strategy == "greedy" and other.finish is not None
    assert (other.start.prompt, other.start.seed, other.start.max_new_tokens) == \
        (trace.start.prompt, trace.start.seed, trace.start.max_new_tokens)
    last = updates[-1]
    assert "Compared (tiny-ar, greedy)" in last["status"]
    assert "dl-ar-vs-diffusion" in last["compare_html"] and "forward passes (NFE)" in last["compare_html"]
    assert "NFE (model calls)" in last["summary"]


def test_compare_samplers_draws_one_line_each():
    updates = run_ui(length=16, compare="fixed schedule, steps = length / 4")
    final = merged(updates)
    trace, other = final["trace"], final["other"]
    assert stats(trace)["nfe"] == 16 and stats(other)["nfe"] == 4 and other.start.params["steps"] == 4
    names = [t.name for t in final["compare_plot"].data]
    assert names == ["fixed, 16 steps", "fixed, 4 steps"] and 'class="df-same-canvas"' in final["compare_html"]
    assert "fixed, 4 steps): 16 tokens with 4 model calls" in final["status"]


@pytest.mark.slow  # the module's real-model run
def test_step_slider_shows_an_earlier_canvas(run):
    _, trace, other = run
    first = cb.choose_step(0.0, trace, other)
    assert first["step"]["value"] == 0 and "step 0 ·" in first["canvas"]
    assert masked_cells(first["canvas"]) == LENGTH - 3  # 3 of 24 unmasked after the first step
    middle = cb.choose_step(3, trace, other)
    assert masked_cells(middle["canvas"]) == LENGTH - 12 and "dl-ar-vs-diffusion" in middle["compare_html"]
    assert masked_cells(cb.choose_step(7, trace, other)["canvas"]) == 0
    assert cb.choose_step(1, None, None) == {}


LEAP = {"localleap.radius", "localleap.anchor_threshold", "localleap.decay"}


@pytest.mark.parametrize("sampler, cache, shown", [
    ("fixed", "none", set()),
    ("localleap", "none", LEAP),
    ("freedave", "none", {"freedave.draft_steps"}),
    ("learn2pd", "none", {"learn2pd.filter_threshold"}),
    ("fixed", "delayed", {"refresh_interval"}),
    ("fixed", "greedy", {"refresh_interval"}),
    ("fixed", "prefill", set()),
    ("localleap", "delayed", LEAP | {"refresh_interval"}),
    ("learn2pd", "greedy", {"learn2pd.filter_threshold", "refresh_interval"}),
])
def test_only_the_relevant_controls_are_shown(sampler, cache, shown):
    out = cb.shown_controls(sampler, cache)
    assert set(out) == {f"df:{k}" for k in LEAP | {"freedave.draft_steps", "learn2pd.filter_threshold",
                                                    "refresh_interval"}}
    assert {k.removeprefix("df:") for k, v in out.items() if v["visible"]} == shown


def test_a_sampler_sends_its_own_knobs_only_and_hidden_controls_keep_their_defaults():
    from ui.diffusion_views import collect_params

    params = collect_params(values(refresh_interval=2.0, steps=4.0, threshold=1, **{
        "localleap.radius": 9.0, "freedave.draft_steps": 8.0, "learn2pd.filter_threshold": 0.5}))
    assert not any("." in k for k in params)  # fixed declares no knob: no other sampler's is sent
    assert params["refresh_interval"] == 4 and params["steps"] == 4
    assert isinstance(params["steps"], int) and params["threshold"] == 1.0 and isinstance(params["threshold"], float)
    params = collect_params(values(sampler="localleap", threshold=0.5, cache="delayed", refresh_interval=2,
                                   **{"localleap.radius": 9.0}))
    assert params["localleap.radius"] == 9 and params["refresh_interval"] == 2
    assert {k for k in params if "." in k} == LEAP
    assert collect_params(values(sampler="freedave", **{"freedave.draft_steps": 8.0}))["freedave.draft_steps"] == 8
    assert collect_params(values(sampler="learn2pd", **{"learn2pd.filter_threshold": 0.5}))[
        "learn2pd.filter_threshold"] == 0.5
    assert collect_params(values(cache="greedy", refresh_interval=2.0))["refresh_interval"] == 2


def test_fields_travel_by_name():
    from ui.diffusion_views import collect_params

    fields = values(steps=4.0)
    assert collect_params(dict(reversed(fields.items()))) == collect_params(fields)  # the order does not matter
    with pytest.raises(ValueError, match="no value for the diffusion parameter `steps`"):
        collect_params({k: v for k, v in fields.items() if k != "steps"})
    with pytest.raises(ValueError, match="unknown diffusion parameter `stepz`; the known ones are steps, block_length, "):
        collect_params(fields | {"stepz": 4})
    with pytest.raises(gr.Error, match="unknown diffusion parameter `stepz`"):
        next(cb.generate_run(MODEL, DEFAULT_PROMPT, LENGTH, 0, "none", **fields, stepz=4))


def test_presets_set_every_control(tmp_path, monkeypatch):
    from decoding import presets

    for _, name in cb.preset_choices():  # the shipped diffusion presets run this strategy
        assert cb.preset_chosen(name)["df:sampler"] in ("fixed", "localleap", "freedave", "learn2pd")
    preset = ("title: Threshold decoding\nmodel: tiny-diffusion\nstrategy: diffusion\nlab: diffusion\n"
              "prompt: In the beginning\nmax_new_tokens: 400\nchat: false\n"
              "params: {threshold: 0.7, block_length: 8}\nnote: Count the model calls.\n")
    (tmp_path / "50-diffusion-test.yaml").write_text(preset)
    monkeypatch.setattr(presets, "PRESETS_DIR", tmp_path)
    assert cb.preset_choices() == [("Threshold decoding", "50-diffusion-test")]
    out = cb.preset_chosen("50-diffusion-test")
    assert out["df:threshold"] == 0.7 and out["df:block_length"] == 8 and out["prompt"] == "In the beginning"
    assert out["length"] == 256 and out["df:steps"] == DEFAULT_SETTINGS["steps"] and "Count the model" in out["note"]
    assert {f"df:{f}" for f in FIELDS} <= out.keys()
    assert cb.preset_chosen("no-such-preset") == {"note": ""}


@pytest.mark.slow  # the module's real-model run
def test_replay_restores_views_and_settings(run):
    updates, trace, _ = run
    out = cb.replay(download(trace), None, None)
    assert out["trace"].to_dict() == trace.to_dict() and out["other"] is None
    assert out["model"] == MODEL and out["prompt"] == DEFAULT_PROMPT and out["length"] == LENGTH
    assert out["df:steps"] == 8 and out["df:sampler"] == "fixed" and out["df:remasking"] == "low-confidence"
    assert "Replaying" in out["status"] and masked_cells(out["canvas"]) == 0 and out["order"].data


@pytest.mark.parametrize("content, message", [
    ("not json at all", "invalid JSON"),
    ('{"format": "decoding-lab-trace", "version": 1, "events": [{"kind": "diffusion_step"}]}', "malformed"),
    ("greedy", "'greedy' run without diffusion steps"),
    ("best-of-n", "'best-of-n' run without diffusion steps"),
])
def test_a_bad_or_non_diffusion_upload_is_refused(tmp_path, content, message):
    path = tmp_path / "upload.json"
    if content == "greedy":  # a Playground trace
        run_to_trace("tiny-random", "Hello", strategy="greedy", max_new_tokens=3, chat=False).save(path)
    elif content == "best-of-n":  # a Scaling trace
        params = {"n": 2, "max_step_tokens": 2, "reward": "none"}
        trace = run_to_trace("tiny-random", "1+1=", strategy="best-of-n", params=params, max_new_tokens=2, chat=False)
        trace.save(path)
    else:
        path.write_text(content)
    with pytest.raises(gr.Error, match=message):
        cb.replay(str(path), None, None)


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": "  "}, "`prompt` is empty"),
    ({"steps": 25}, r"`steps` must be in \[1, max_new_tokens=24\]"),
    ({"block_length": 5}, "`block_length` must divide max_new_tokens=24"),
    ({"threshold": 1.5}, r"`threshold` must be 0 \(off\) or in \(0, 1\]"),
    ({"threshold": 0.5, "remasking": "random"}, "`remasking` must be low-confidence or margin"),
    ({"sampler": "localleap", "threshold": 0.0}, r"`threshold` must be in \(0, anchor_threshold"),
    pytest.param({"model": "tiny-ar"}, "`model` 'tiny-ar' is a causal",
                 marks=pytest.mark.fast("refused by its registered kind; loads no model")),
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"length": 0}, "`max_new_tokens`"),
    ({"compare": "no-such-run"}, "`compare` must be one of"),
])
def test_bad_input_raises_a_clear_gr_error(kwargs, message):
    args = {k: kwargs.pop(k) for k in ("prompt", "length", "compare", "model") if k in kwargs}
    with pytest.raises(gr.Error, match=message):
        next(cb.generate_run(args.get("model", MODEL), args.get("prompt", DEFAULT_PROMPT), args.get("length", LENGTH),
                             0, args.get("compare", "none"), **values(**kwargs)))


def test_closing_the_run_stops_compute(monkeypatch):
    """What Stop does: Gradio closes the callback's generator; the worker thread must stop unmasking."""
    calls = {"n": 0}
    logits = DiffusionLM.logits

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        return logits(self, *args, **kwargs)

    monkeypatch.setattr(DiffusionLM, "logits", counted)
    run = cb.generate_run(MODEL, DEFAULT_PROMPT, 240, 0, "tiny-ar, greedy", **values())  # 240 steps
    trace = next(run)["trace"]
    update = {}
    while "steps so far" not in update.get("status", "") or "step" not in update:  # a full (not canvas-only) one
        update = next(run)
    assert 'class="cell' in update["canvas"] and update["step"]["interactive"] is False  # the live canvas
    assert masked_cells(update["canvas"]) > 0 and "NFE" in update["status"]
    run.close()
    deadline = time.monotonic() + 10
    while trace.finish is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    settled = calls["n"]
    time.sleep(0.5)
    assert calls["n"] == settled < 200 and trace.finish is not None and trace.finish.stop_reason == "cancelled"
    after = cb.stop_run(trace, None)
    assert "**Stopped** the run after" in after["status"] and masked_cells(after["canvas"]) > 0
    assert Trace.load(download(trace)).finish.stop_reason == "cancelled"
    assert cb.stop_run(None, None) == {"status": "Nothing is running."}


def test_views_before_any_run_and_the_tab_alone():
    out = views(None)
    assert "Statistics appear" in out["stats"] and "waiting" in out["canvas"] and out["summary"] == ""
    assert out["step"]["interactive"] is False
    from ui.diffusion import demo

    assert isinstance(demo(), gr.Blocks)


# Over real HTTP ----------------------------------------------------------------------------------
@pytest.mark.slow  # the HTTP server
def test_diffusion_over_the_generate_api(client):
    outputs, result = api_run(client, MODEL, "diffusion", DEFAULT_PROMPT, 16, 0, json.dumps({"steps": 4}), False)
    kinds = [o.get("kind") for o in outputs[:-1]]
    assert kinds[0] == "start" and kinds[-1] == "finish" and kinds.count("diffusion_step") == 4
    assert result["strategy"] == "diffusion" and result["params"]["steps"] == 4
    assert result["stats"]["nfe"] == 4 and result["stats"]["tokens_per_step"] == 4.0


@pytest.mark.slow  # the HTTP server; the real model tiny-parallel
def test_the_generate_api_applies_tiny_parallels_chat_template_like_the_tab(client):
    prompt = tasks.problem("copy", 4).prompt
    outputs, result = api_run(client, "tiny-parallel", "diffusion", prompt, 8, 0, json.dumps({"steps": 4}), True)
    assert outputs[0]["kind"] == "start" and outputs[0]["chat"] is True and outputs[0]["prompt_text"] == prompt + "\n"
    assert result["stats"]["nfe"] == 4


def test_the_pace_makes_the_sampler_wait_and_every_step_reaches_the_page():
    """At 8 steps/s the run itself takes >= 11/8 s for 12 steps (the sampler waits; nothing is replayed),
    every step's canvas goes out as it is computed, and the statistics leave the waiting out."""
    started = time.perf_counter()
    updates = list(cb.generate_run(MODEL, DEFAULT_PROMPT, 12, 0, "none", playback="8 steps/s", **values(steps=12)))
    wall = time.perf_counter() - started
    trace = updates[-1]["trace"]
    steps = trace.of_kind("diffusion_step")
    assert len(steps) == 12 and wall >= 11 / 8
    masked = [u["canvas"].count('class="cell masked') for u in updates if 'class="cell' in u.get("canvas", "")]
    assert len(set(masked)) >= 8 and masked[-1] == 0  # step by step: a frame may only merge into the next while
    assert masked == sorted(masked, reverse=True)  # the charts are redrawn (about once a second); in order
    assert trace.finish.elapsed_s < wall - 1.0  # the waiting is not counted as computing
    assert "Unmasking at 8 steps/s" in " ".join(str(u.get("status", "")) for u in updates)
    assert updates[-1]["status"].startswith("**Finished**")
    assert cb.playback_rate("full speed") == 0 and cb.playback_rate(None) == 0
    assert cb.playback_rate(DEFAULT_PLAYBACK) == 8  # the tab's default steps a run faster than the eye
    with pytest.raises(gr.Error, match="`playback` must be one of"):
        list(cb.generate_run(MODEL, DEFAULT_PROMPT, 12, 0, "none", playback="fast forward", **values()))


# tiny-parallel: the task picker, the chat template, the checker's verdict, the new samplers -------------
# The shipped checkpoint is replaced as training goes on and its answers may be poor: these tests assert the
# structure and that the checker judges what the model wrote, never that an answer is right.
TASK_MODEL = "tiny-parallel"
FREEDAVE = "FreeDave, 4 drafted steps per call (the canvas of steps = length)"


def test_the_task_menu_lists_free_prompt_then_every_task_with_its_help_and_kind():
    choices = tasks.task_choices()
    assert choices[0] == ("free prompt", tasks.FREE_PROMPT) and [v for _, v in choices[1:]] == list(TASKS)
    labels = {value: label for label, value in choices}
    assert labels["copy"] == "copy · repeat the list (determined: one right answer)"
    assert labels["shuffle"] == "shuffle · the same words in any other order (dependent: many right answers)"


def test_the_picker_draws_held_out_test_problems_deterministically():
    splits = make_splits()  # the training run's own split: the picker's problems are its test prompts
    train = {e.prompt for e in splits["train"]}
    reverse = list(dict.fromkeys(e.prompt for e in splits["test"] if e.task == "reverse"))
    assert [e.prompt for e in tasks.held_out()["reverse"]] == reverse and not train & set(reverse)
    out = cb.task_chosen("reverse", 3.0)
    assert out["prompt"] == reverse[2] and out["length"] == 32 and out["problem"]["value"] == 3
    assert out["problem"]["maximum"] == len(reverse) == tasks.num_problems("reverse")
    assert cb.task_chosen(tasks.FREE_PROMPT, 3) == {} and cb.task_chosen(None, 3) == {}
    following = cb.another_problem("reverse", 3)  # the next one, the same every time, wrapping after the last
    assert following["prompt"] == reverse[3] and following["problem"]["value"] == 4
    assert cb.another_problem("reverse", 3) == following and cb.another_problem(tasks.FREE_PROMPT, 3) == {}
    assert cb.another_problem("reverse", len(reverse))["prompt"] == reverse[0]
    assert cb.problem_chosen("reverse", 5.0) == {"prompt": reverse[4]}
    assert tasks.num_problems("distinct") == 6  # "list k different animals": six prompts, many right answers
    assert cb.task_chosen("distinct", 150)["problem"]["value"] == 6  # clamped to the task's problems
    with pytest.raises(ValueError, match="`task` must be one of copy, reverse"):
        tasks.problem("juggle", 1)


def test_the_picker_follows_the_model_and_the_prompt():
    assert cb.task_picker_shown(TASK_MODEL)["tasks"]["visible"] is True
    assert cb.task_picker_shown(MODEL)["tasks"]["visible"] is False
    picked = cb.model_picked(TASK_MODEL, DEFAULT_PROMPT)  # a KJV prompt: start with copy's first problem
    assert picked["task"] == "copy" and picked["prompt"] == tasks.problem("copy", 1).prompt and picked["length"] == 32
    assert cb.model_picked(TASK_MODEL, "sort: ox ant") == {} and cb.model_picked(MODEL, DEFAULT_PROMPT) == {}
    typed = cb.prompt_edited("pick 2: owl cat ram", tasks.FREE_PROMPT)  # typed by hand: the menu follows
    assert typed["task"] == "pick" and "value" not in typed["problem"]
    assert cb.prompt_edited(tasks.problem("sort", 7).prompt, "copy")["problem"]["value"] == 7
    assert cb.prompt_edited("And God said", "copy") == {"task": tasks.FREE_PROMPT}
    assert cb.prompt_edited("And God said", tasks.FREE_PROMPT) == {}


def test_the_reference_answer_is_the_generators_and_passes_the_checker():
    for name, rows in tasks.held_out().items():
        for example in rows[:40]:
            reference = tasks.reference_answer(name, example.prompt)
            if TASKS[name].determined:
                assert reference == example.reference and check(name, example.prompt, reference), example
            else:
                assert reference is None
    assert tasks.reference_answer("add", "add: 12 + x") is None and tasks.reference_answer("date", "date: soon") is None


@pytest.fixture(scope="module")
def parallel() -> tuple[list[dict], Trace, Trace]:
    """tiny-parallel on a held-out reverse problem, one token per step over 16 positions, then FreeDave."""
    prompt = tasks.problem("reverse", 2).prompt
    updates = run_ui(prompt=prompt, length=16, model=TASK_MODEL, compare=FREEDAVE)
    final = merged(updates)
    return updates, final["trace"], final["other"]


def test_a_model_with_a_chat_template_gets_it(parallel):
    """tiny-parallel's template adds the newline its prompts end with (tiny-diffusion has none: see the first test)."""
    _, trace, other = parallel
    assert trace.start.chat is True and trace.start.prompt_text == trace.start.prompt + "\n"
    assert other.start.chat is True and other.start.prompt_text == trace.start.prompt_text


def test_the_verdict_is_the_checker_on_what_the_model_wrote(parallel):
    updates, trace, other = parallel
    final = merged(updates)
    prompt, answer = trace.start.prompt, trace.finish.text
    right = check("reverse", prompt, answer)
    verdict = final["verdict"]
    assert verdict.count('class="dl-verdict"') == 2  # the run's and the compared run's
    assert f'data-task="reverse" data-correct="{str(right).lower()}"' in verdict
    assert "this run" in verdict and "compared: freedave" in verdict
    reference = tasks.reference_answer("reverse", prompt)
    assert f"the answer: <code>{reference}</code>" in verdict and ("✓ right" if right else "✗ wrong") in verdict
    assert (f"<code>{esc(answer.strip())}</code>" if answer.strip() else "nothing (end-of-text at once)") in verdict
    assert ("; reverse ✓ right" if right else "; reverse ✗ wrong") in final["status"]
    live = [u for u in updates if "verdict" in u and u.get("trace") is None and u["status"].startswith("Unmasking")]
    assert all(u["verdict"] == "" for u in live)  # no verdict before the answer is finished
    assert "chat template" in final["stats"]


def test_freedave_against_one_per_step_gives_the_same_canvas_in_fewer_or_as_many_calls(parallel):
    updates, trace, other = parallel
    final = merged(updates)
    assert other.start.params["sampler"] == "freedave" and other.start.params["freedave.draft_steps"] == 4
    assert other.of_kind("diffusion_step")[-1].canvas == trace.of_kind("diffusion_step")[-1].canvas
    assert 'data-differ="0"' in final["compare_html"] and "the same final canvas" in final["compare_html"]
    assert stats(other)["nfe"] <= stats(trace)["nfe"] == 16
    assert [t.name for t in final["compare_plot"].data] == ["fixed, 16 steps", "freedave, 16 steps, 4 drafted per call"]


def _with(trace: Trace, prompt: str, text: str) -> Trace:
    return Trace([replace(trace.start, prompt=prompt), replace(trace.finish, text=text)])


def test_verdicts_for_determined_dependent_and_free_prompts(parallel):
    from ui.diffusion_views import views as render

    _, trace, _ = parallel
    copy = "copy: ox bat newt rat eel"  # typed by hand (not a held-out problem): still judged
    assert tasks.verdict(_with(trace, copy, "ox bat newt rat eel"))["right"] is True
    wrong = tasks.verdict_html(_with(trace, copy, "ox bat bat rat eel"))
    assert 'data-correct="false"' in wrong and "the answer: <code>ox bat newt rat eel</code>" in wrong
    assert "repeated: bat ×2" in wrong
    shuffle = tasks.problem("shuffle", 4).prompt
    dependent = tasks.verdict_html(_with(trace, shuffle, "fox fox"))
    assert "dependent: many answers are right" in dependent and "the checker requires every word" in dependent
    assert "one right answer: <code>" in dependent and "the answer:" not in dependent
    assert 'data-correct="true"' in tasks.verdict_html(_with(trace, "pick 2: owl cat ram", "ram owl"))
    assert tasks.verdict_html(_with(trace, "And God said", "unto them")) == ""  # not a task: nothing
    assert tasks.verdict(Trace([trace.start])) is None  # not finished
    cancelled = Trace([trace.start, replace(trace.finish, stop_reason="cancelled")])
    assert tasks.verdict(cancelled) is None and render(cancelled)["verdict"] == ""
    assert "<script>" not in tasks.verdict_html(_with(trace, copy, "<script>x</script>"))  # escaped


def test_replay_and_presets_put_the_task_back_in_the_picker(parallel, tmp_path):
    _, trace, _ = parallel
    path = tmp_path / "parallel.json"
    trace.save(path)
    out = cb.replay(str(path), None, None)
    assert out["task"] == "reverse" and out["problem"]["value"] == 2 and out["model"] == TASK_MODEL
    assert 'data-task="reverse"' in out["verdict"] and "Replaying" in out["status"]
    shuffle = cb.preset_chosen("55-parallel-shuffle-breaks")
    assert shuffle["model"] == TASK_MODEL and shuffle["task"] == "shuffle" and shuffle["problem"]["value"] == 6
    assert shuffle["df:steps"] == 4 and shuffle["length"] == 32  # 8 tokens per step
    assert cb.preset_chosen("56-parallel-freedave")["df:sampler"] == "freedave"
    learn2pd = cb.preset_chosen("57-parallel-learn2pd")
    assert learn2pd["df:sampler"] == "learn2pd" and learn2pd["df:learn2pd.filter_threshold"] == 0.9
    assert cb.preset_chosen("54-parallel-threshold-copy")["task"] == "copy"
    assert cb.preset_chosen("53-diffusion-threshold")["task"] == tasks.FREE_PROMPT


def test_learn2pd_without_a_filter_says_how_to_train_one():
    with pytest.raises(gr.Error, match="needs a filter trained for 'tiny-random-diffusion'.*learn2pd train"):
        list(cb.generate_run("tiny-random-diffusion", "abc", 8, 0, "none", **values(sampler="learn2pd")))


@pytest.mark.slow  # the real model tiny-parallel
def test_the_benchmark_accordion_reads_the_file_or_says_how_to_make_it(tmp_path):
    text, figure = tasks.benchmark_views(tmp_path / "bench.json")
    assert figure is None and "python bench/bench_diffusion.py --model tiny-parallel --quick --json" in text
    row = {"accuracy": 0.5, "nfe": 32, "nfe_fraction": 1.0, "tokens_per_step": 1.0, "seconds": 0.1}
    bench = {"model": "tiny-parallel", "length": 32, "problems_per_task": 20, "tasks": {
        "copy": {"determined": True, "samplers": {"steps=length": row, "fixed 8/step": row | {"tokens_per_step": 8}}},
        "shuffle": {"determined": False, "samplers": {"steps=length": row}}}}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    text, figure = tasks.benchmark_views(tmp_path / "bench.json")
    assert [t.name for t in figure.data] == ["copy", "shuffle"] and "20 per task" in text and "dashed" in text
    (tmp_path / "bench.json").write_text('{"rows": []}')
    text, figure = tasks.benchmark_views(tmp_path / "bench.json")
    assert figure is None and "cannot be read" in text and "--quick --json" in text


@pytest.mark.slow
def test_the_threshold_preset_continues_a_verse_as_its_note_says():
    """The note's numbers for its prompt: 55 calls instead of 64, at most 2 tokens per step, the answer of
    one token per step (20 tokens, end-of-text included)."""
    preset = cb.preset_chosen("53-diffusion-threshold")
    fields = {f: preset[f"df:{f}"] for f in FIELDS}
    trace = merged(list(cb.generate_run(preset["model"], preset["prompt"], preset["length"], 0, "none", **fields)))["trace"]
    one_per_step = run_to_trace(preset["model"], preset["prompt"], strategy="diffusion", params={"steps": 64},
                                max_new_tokens=64, chat=False)
    steps = trace.of_kind("diffusion_step")
    assert stats(trace)["nfe"] == 55 and max(len(s.unmasked) for s in steps) == 2
    assert trace.finish.text.strip() and trace.finish.text == one_per_step.finish.text
    assert stats(trace)["num_tokens"] == 20 and trace.finish.stop_reason == "eos"
    assert "55 model" in preset["note"] and "up to 2 tokens" in preset["note"] and "(20 tokens" in preset["note"]


@pytest.mark.slow  # the real model tiny-parallel
def test_tiny_parallel_compares_with_its_causal_twin_and_both_get_a_verdict():
    compare = "tiny-parallel-ar, greedy (tiny-parallel's causal twin)"
    final = merged(run_ui(prompt="copy: owl cat dog", length=32, model="tiny-parallel", compare=compare,
                          threshold=0.9))
    trace, other = final["trace"], final["other"]
    assert other.start.model == "tiny-parallel-ar" and other.start.strategy == "greedy"
    assert other.start.prompt_text.endswith("\n")  # the twin gets the same one-line prompt template
    assert "-1" not in str(trace.finish.token_ids) and other.finish.token_ids
    assert final["verdict"].count("task <b>copy</b>") == 2  # the checker judges both answers
    assert "compared: " in final["verdict"] and "copy" in final["status"]
