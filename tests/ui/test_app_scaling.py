"""The Scaling tab: callbacks as plain functions on the real SmolLM2-135M (particle filter compared
with best-of-N on a shipped task), the step slider, control visibility, the task menu, presets,
replay, bad input, Stop; then one particle-filter run over real HTTP through the `/generate` API.
"""

from __future__ import annotations

import json
import time

import pytest

import gradio as gr

from decoding.events import Trace, stats
from decoding.presets import find_preset
from decoding.run import run_to_trace
from decoding.scaling.math_tasks import make_splits
from decoding.scaling.tasks import MATH_MENU, load_tasks, task_prompt
from conftest import api_run
from test_app import count_forward_passes
from ui import scaling_callbacks as cb
from ui.exports import download
from ui.scaling_views import (task_of_prompt, DEFAULT_PROMPT, DEFAULT_SETTINGS, FIELDS, METHOD_DEFAULTS, METHOD_FIELDS,
                              METHODS, REWARD_FIELDS, SPECIFIC, task_choices, verdict, views)

MODEL = "smollm2-135m"
SMALL = {"n": 3, "max_step_tokens": 8, "reward": "arith-step"}  # the declared reward (the tab opens on spare)
TASK = load_tasks()[0]
PROMPT = task_prompt(TASK["question"])


def values(**changes) -> dict:
    """Every field of the tab by name (what its Generate passes): small defaults with `changes`."""
    settings = DEFAULT_SETTINGS | SMALL | changes
    return {name: settings[name] for name in FIELDS}


def run_ui(method="particle-filter", prompt=PROMPT, max_new_tokens=16, compare="none", model=MODEL,
           **params) -> list[dict]:
    return list(cb.generate_run(model, prompt, method, max_new_tokens, 0, True, compare, **values(**params)))


def merged(updates: list[dict]) -> dict:
    final = {}
    for update in updates:
        final |= update
    return final


@pytest.fixture(scope="module")
def run() -> tuple[list[dict], Trace, Trace]:
    """Particle filter (N = 3, final-answer reward on task 0), then best-of-N at the same budget."""
    updates = run_ui(compare="best-of-n", reward="final-answer", reference=TASK["answer"])
    final = merged(updates)
    return updates, final["trace"], final["other"]


@pytest.mark.slow  # the module's real-model run
def test_generate_streams_particle_steps_then_chooses(run):
    updates, trace, _ = run
    steps = trace.of_kind("particles")
    assert trace.start.strategy == "particle-filter" and trace.start.params["n"] == 3
    assert trace.finish.stop_reason in ("eos", "max_new_tokens") and len(steps) >= 2
    live = [u for u in updates if "particle steps so far" in u.get("status", "") and "step" in u]  # the main run
    assert live and all(u["step"]["interactive"] is False for u in live)  # the slider waits for the end
    assert any("data-slot=" in u["particles"] for u in live)  # particle cards drawn while streaming
    final = merged(updates[: updates.index(next(u for u in updates if "other" in u and u["other"])) + 1])
    assert final["weights"].data and final["lineage"].data and "data-slot=" in final["particles"]
    assert final["choice"].startswith('<div class="dl-choice">') and "particle-filter" in final["choice"]
    s = final["stats"]
    for card in ("particles N", "steps", "resampling events", "ESS", "tokens spent", "forward passes",
                 "tokens spent / s"):
        assert f'<div class="k">{card}</div>' in s
    ok = verdict(trace)
    assert ok is not None and ("✓ right" if ok else "✗ wrong") in final["choice"] and "72" in final["choice"]
    assert final["step"]["maximum"] == max(1, len(steps) - 1) and final["step"]["value"] == len(steps) - 1
    assert "dl_json" not in final and Trace.load(download(final["trace"])).to_dict() == trace.to_dict()


@pytest.mark.slow  # the module's real-model run
def test_compare_runs_the_second_method_at_the_same_budget(run):
    updates, trace, other = run
    assert other.start.strategy == "best-of-n" and other.finish is not None
    for key in ("n", "reward", "reference", "max_step_tokens", "temperature"):
        assert other.start.params[key] == trace.start.params[key]
    assert (other.start.prompt, other.start.seed, other.start.max_new_tokens) == \
        (trace.start.prompt, trace.start.seed, trace.start.max_new_tokens)
    last = updates[-1]
    assert "Compared: best-of-n chose answer" in last["status"]
    assert "Main: particle-filter" in last["summary"] and "Compared: best-of-n" in last["summary"]
    assert last["summary"].count("tokens spent (all particles)") == 1 and last["summary"].count('<div class="dl-choice">') == 2
    begun = next(i for i, u in enumerate(updates) if "now **best-of-n**" in str(u.get("status", "")))
    during = updates[begun + 1:-1]
    assert any({"particles", "summary"} <= u.keys() for u in during)  # the comparison streams too


@pytest.mark.slow  # the module's real-model run
def test_step_slider_shows_an_earlier_step(run):
    _, trace, other = run
    steps = trace.of_kind("particles")
    first = cb.choose_step(0.0, trace, other)
    assert first["step"]["value"] == 0 and first["particles"].count("data-slot=") == 3
    assert "step 0 ·" in first["particles"] and f"step {steps[-1].step} ·" not in first["particles"]
    last = cb.choose_step(len(steps) - 1, trace, other)
    assert f"step {steps[-1].step} ·" in last["particles"] and "Compared" in last["summary"]
    assert 'class="card chosen"' in last["particles"] or 'class="card dead chosen"' in last["particles"]
    assert cb.choose_step(1, None, None) == {}


@pytest.mark.parametrize("method", METHODS)
def test_only_the_methods_controls_are_shown(method):
    out = cb.shown_controls(method, "arith-step")
    shown = {k.removeprefix("sc:") for k, v in out.items() if k.startswith("sc:") and v["visible"]}
    assert shown == set(METHOD_FIELDS[method])
    assert set(out) == {f"sc:{f}" for f in SPECIFIC} | {"reward_help", "method_help"} and "arith-step" in out["reward_help"]
    # the chosen method in one line under the menu (all of them, ~300 words, were its grey help before)
    assert out["method_help"].startswith(f"**{method}**:") and "\n" not in out["method_help"]
    assert len(out["method_help"].split()) < 60


@pytest.mark.parametrize("reward", ["final-answer", "forbid-letter", "max-word-length", "required-words", "none"])
def test_only_the_rewards_controls_are_shown(reward):
    out = cb.shown_controls("best-of-n", reward)
    shown = {k.removeprefix("sc:") for k, v in out.items() if k.startswith("sc:") and v["visible"]}
    assert shown == set(METHOD_FIELDS["best-of-n"]) | set(REWARD_FIELDS.get(reward, ()))
    assert f"**{reward}**" in out["reward_help"]


@pytest.mark.slow  # the real model smollm2-135m
def test_the_task_menu_fills_the_prompt_and_the_reference():
    choices = task_choices()
    assert choices[0] == ("(free prompt)", "") and len(choices) == MATH_MENU + len(load_tasks()) + 1
    task = load_tasks()[3]
    out = cb.task_chosen(str(task["id"]), "smollm2-135m")
    assert out == {"prompt": task_prompt(task["question"]), "sc:reference": task["answer"]}
    assert cb.task_chosen("") == {"sc:reference": ""}  # free prompt: keeps the prompt, forgets the answer
    assert cb.prompt_edited(out["prompt"] + "\nBe brief.", "3") == {}  # still the task's question
    assert cb.prompt_edited("What is 6 times 7?", "3") == {"task": "", "sc:reference": ""}
    assert cb.prompt_edited("What is 6 times 7?", "") == {}


@pytest.mark.slow  # the real models smollm2-135m, tiny-math
def test_a_tiny_math_problem_picks_tiny_math_and_a_word_problem_moves_off_it():
    problem = make_splits(sizes={"val": 3})["val"][2]  # the menu lists the validation problems
    out = cb.task_chosen("m2", "smollm2-135m")
    assert out == {"prompt": problem.question + "\n", "sc:reference": str(problem.answer), "model": "tiny-math"}
    assert cb.task_chosen("3", "tiny-math")["model"] == "smollm2-135m"  # tiny-math reads only its own problems
    assert "model" not in cb.task_chosen("3", "HuggingFaceTB/SmolLM2-360M-Instruct")  # a chosen hub model stays
    # the tab opens on the reward spare (tiny-math's questions only): a word problem moves it to the default
    assert cb.task_chosen("3", "tiny-math", "spare")["sc:reward"] == "arith-step"
    assert "sc:reward" not in cb.task_chosen("m3", "tiny-math", "spare")
    assert "sc:reward" not in cb.task_chosen("3", "tiny-math", "forbid-letter")  # the user's other choice stays
    assert task_of_prompt(out["prompt"])["answer"] == str(problem.answer)  # a replayed trace is graded


@pytest.mark.slow  # the module's real-model run
def test_a_trace_on_a_shipped_task_is_graded_without_a_reference_parameter(run):
    _, trace, _ = run
    data = trace.to_dict()
    data["events"][0]["params"]["reference"] = ""  # as `python -m decoding run` writes it with reward arith-step
    plain = Trace.from_dict(data)
    assert verdict(plain) == verdict(trace) is not None and "the task's answer is 72" in views(plain)["choice"]
    data["events"][0]["prompt"] = "What is 6 times 7?"
    assert verdict(Trace.from_dict(data)) is None and "dl-verdict" not in views(Trace.from_dict(data))["choice"]


def test_presets_set_every_control(tmp_path, monkeypatch):
    preset = ("title: PF beats best-of-N\nmodel: smollm2-135m\nstrategy: reward-beam\nlab: scaling\n"
              f"prompt: {json.dumps(task_prompt(TASK['question']))}\nmax_new_tokens: 300\n"
              "params: {n: 8, beam_width: 4, reward: arith-step}\nnote: Watch the beams.\n")
    (tmp_path / "30-scaling-test.yaml").write_text(preset)
    from decoding import presets

    for _, name in cb.preset_choices():  # the shipped scaling presets set a method of this tab
        assert cb.preset_chosen(name)["method"] in METHODS
    monkeypatch.setattr(presets, "PRESETS_DIR", tmp_path)
    assert cb.preset_choices() == [("PF beats best-of-N", "30-scaling-test")]
    out = cb.preset_chosen("30-scaling-test")
    assert out["method"] == "reward-beam" and out["sc:n"] == 8 and out["sc:reward-beam.beam_width"] == 4
    assert out["sc:reward"] == "arith-step" and out["sc:reference"] == TASK["answer"] and out["task"] == "0"
    assert out["max_new_tokens"] == 256 and out["sc:temperature"] == DEFAULT_SETTINGS["temperature"]
    assert "Watch the beams" in out["note"] and {f"sc:{f}" for f in FIELDS} <= out.keys()
    assert cb.preset_chosen("no-such-preset") == {"note": ""}


@pytest.mark.slow  # the module's real-model run
def test_replay_restores_views_and_settings(run):
    updates, trace, _ = run
    out = cb.replay(download(trace), None, None)
    assert out["trace"].to_dict() == trace.to_dict() and out["other"] is None
    assert out["method"] == "particle-filter" and out["sc:n"] == 3 and out["sc:max_step_tokens"] == 8
    assert out["sc:particle-filter.select"] == "best" and out["sc:reward"] == "final-answer"
    assert out["sc:best-of-n.select"] == METHOD_DEFAULTS["best-of-n"]["best-of-n.select"]  # its own default, not pf's
    assert out["task"] == str(TASK["id"]) and out["sc:reference"] == TASK["answer"] and out["model"] == MODEL
    assert "Replaying" in out["status"] and "data-slot=" in out["particles"] and out["lineage"].data


@pytest.mark.parametrize("content, message", [
    ("not json at all", "invalid JSON"),
    ('{"format": "decoding-lab-trace", "version": 1, "events": [{"kind": "particles"}]}', "malformed"),
    ("greedy", "'greedy' run without particle steps"),
])
def test_a_bad_or_non_scaling_upload_is_refused(tmp_path, content, message):
    path = tmp_path / "upload.json"
    if content == "greedy":
        run_to_trace("tiny-random", "Hello", strategy="greedy", max_new_tokens=3, chat=False).save(path)
    else:
        path.write_text(content)
    with pytest.raises(gr.Error, match=message):
        cb.replay(str(path), None, None)


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": "  "}, "`prompt` is empty"),
    ({"n": 0}, r"`n` must be an integer in \[1, 64\]"),
    ({"n": 65}, r"`n` must be an integer in \[1, 64\]"),
    ({"method": "reward-beam", "n": 3, "beam_width": 2}, r"`n` \(3\) must be a multiple of `beam_width` \(2\)"),
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"reward": "final-answer", "reference": ""}, "reward final-answer needs `reference`"),
    ({"reward": "forbid-letter", "forbid-letter.letter": "ab"}, "`forbid-letter.letter` must be a single letter, got 'ab'"),
    ({"max_new_tokens": 0}, "`max_new_tokens`"),
    ({"compare": "reward-beam", "n": 3, "beam_width": 2}, "Compare with reward-beam: `n` \\(3\\) must be a multiple"),
])
def test_bad_input_raises_a_clear_gr_error(kwargs, message):
    args = {k: kwargs.pop(k) for k in ("method", "prompt", "max_new_tokens", "compare", "model") if k in kwargs}
    with pytest.raises(gr.Error, match=message):
        next(cb.generate_run(args.get("model", MODEL), args.get("prompt", DEFAULT_PROMPT),
                             args.get("method", "particle-filter"), args.get("max_new_tokens", 16), 0, True,
                             args.get("compare", "none"), **values(**kwargs)))


def test_fields_travel_by_name():
    from ui.scaling_views import collect_params

    fields = values(n=4.0, **{"particle-filter.select": "vote", "best-of-n.select": "softmax"})
    params = collect_params("particle-filter", dict(reversed(fields.items())))  # the order does not matter
    assert params == collect_params("particle-filter", fields) and params["n"] == 4 and params["select"] == "vote"
    assert collect_params("best-of-n", fields)["select"] == "softmax"  # one name, two methods' fields
    with pytest.raises(ValueError, match="no value for the scaling parameter `reward`"):
        collect_params("best-of-n", {k: v for k, v in fields.items() if k != "reward"})
    with pytest.raises(ValueError, match="unknown scaling parameter `select`"):
        collect_params("best-of-n", fields | {"select": "max"})
    with pytest.raises(gr.Error, match="unknown scaling parameter `nn`"):
        next(cb.generate_run(MODEL, DEFAULT_PROMPT, "best-of-n", 16, 0, True, "none", **fields, nn=2))


def test_a_reward_sends_its_own_knobs_only():
    from ui.scaling_views import collect_params

    fields = values(reward="forbid-letter", **{"forbid-letter.letter": "a", "max-word-length.max_word_length": 3.0})
    params = collect_params("best-of-n", fields)
    assert params["forbid-letter.letter"] == "a" and params["forbid-letter.hard"] is True
    assert not any(k.startswith("max-word-length.") for k in params)  # another reward's knob is not sent


@pytest.mark.slow  # loads SmolLM2
def test_closing_the_run_stops_compute(monkeypatch):
    """What Stop does: Gradio closes the callback's generator; the worker thread must stop decoding."""
    calls = count_forward_passes(monkeypatch)
    run = cb.generate_run(MODEL, DEFAULT_PROMPT, "particle-filter", 256, 0, True, "best-of-n",
                          **values(n=2, max_step_tokens=4))
    trace = next(run)["trace"]
    while not trace.of_kind("particles"):
        next(run)
    run.close()
    deadline = time.monotonic() + 10  # the step under way ends (a busy CI core is slow), then the run stops
    while trace.finish is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    settled = calls["n"]
    time.sleep(0.5)
    assert calls["n"] == settled < 40 and trace.finish is not None and trace.finish.stop_reason == "cancelled"
    after = cb.stop_run(trace, None)
    assert "**Stopped** the run after" in after["status"] and "data-slot=" in after["particles"]
    assert Trace.load(download(trace)).finish.stop_reason == "cancelled"
    assert cb.stop_run(trace, None, wait_s=0)["status"].startswith("**Stopped**")
    assert cb.stop_run(None, None) == {"status": "Nothing is running."}


@pytest.mark.slow  # loads SmolLM2
def test_stop_during_the_comparison_stops_it_and_keeps_the_main_run(monkeypatch):
    calls = count_forward_passes(monkeypatch)
    run = cb.generate_run(MODEL, DEFAULT_PROMPT, "best-of-n", 16, 0, True, "particle-filter",
                          **values(n=2, max_step_tokens=4))
    trace, other = next(run)["trace"], None
    while other is None or not other.of_kind("particles"):
        other = next(run).get("other") or other
    run.close()
    deadline = time.monotonic() + 10
    while other.finish is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    settled = calls["n"]
    time.sleep(0.5)
    assert calls["n"] == settled and other.finish.stop_reason == "cancelled"
    assert other.start.strategy == "particle-filter" and other.start.params["n"] == 2
    assert trace.finish.stop_reason != "cancelled"  # the main run had finished
    after = cb.stop_run(trace, other)
    assert "**Stopped** the comparison run" in after["status"] and "Compared: particle-filter" in after["summary"]
    assert Trace.load(download(trace)).start.strategy == "best-of-n"
    assert Trace.load(download(other)).finish.stop_reason == "cancelled"


def test_views_before_any_run():
    out = views(None)
    assert "Statistics appear" in out["stats"] and "Generate" in out["choice"] and out["summary"] == ""
    assert out["step"]["interactive"] is False and "waiting" in out["particles"]


# Over real HTTP ----------------------------------------------------------------------------------
@pytest.mark.slow  # the HTTP server
def test_particle_filter_over_the_generate_api(client):
    params = {"n": 2, "max_step_tokens": 8, "reward": "final-answer", "reference": TASK["answer"]}
    outputs, result = api_run(client, MODEL, "particle-filter", DEFAULT_PROMPT, 16, 0, json.dumps(params), True)
    kinds = [o.get("kind") for o in outputs[:-1]]
    assert kinds[0] == "start" and kinds[-1] == "finish" and kinds.count("particles") >= 2
    s = result["stats"]
    assert s["num_particles"] == 2 and s["particle_steps"] == kinds.count("particles")
    assert s["tokens_spent"] >= 2 and 1.0 <= s["ess"] <= 2.0 and "resampling_events" in s
    assert result["params"]["reference"] == TASK["answer"] and result["strategy"] == "particle-filter"


@pytest.mark.slow  # the real model tiny-math
@pytest.mark.parametrize("name, answer, right, resamplings, compared, compared_right", [
    ("30-particle-filter-vs-best-of-n", "220", True, 3, "220", True),  # the note: three resamplings, both 220
    ("34-a-star-search", "307", False, 0, "439", True),  # the note: A*'s path misreads (307), best-of-N 439
])
def test_the_tiny_math_presets_do_what_their_notes_say(name, answer, right, resamplings, compared, compared_right):
    preset = cb.preset_chosen(name)
    assert preset["model"] == "tiny-math" and preset["task"].startswith("m") and answer in preset["note"]
    fields = {f: preset[f"sc:{f}"] for f in FIELDS}
    final = merged(list(cb.generate_run(preset["model"], preset["prompt"], preset["method"], preset["max_new_tokens"],
                                        preset["seed"], preset["chat"], "best-of-n", **fields)))
    trace, other = final["trace"], final["other"]
    assert trace.finish.extra["answer"] == answer and verdict(trace) is right
    assert sum(s.resampled for s in trace.of_kind("particles")) == resamplings
    assert other.start.strategy == "best-of-n" and other.finish.extra["answer"] == compared
    assert verdict(other) is compared_right
    if name == "34-a-star-search":  # every line of A*'s path is right arithmetic: the misread is invisible to it
        assert "390 + 43 = 433" in trace.finish.text and "433 + 43 = 476" in trace.finish.text


@pytest.mark.slow  # the real model tiny-math
@pytest.mark.parametrize("name, answer, compared", [
    ("36-review-refine-repeat", "801", "701"),  # the note: the corrected round reaches 801, one sample ends at 701
    ("47-compute-optimal-per-prompt", "111", "151"),  # the note: the hard prompt's refine reaches 111, best-of-2 151
    ("37-reward-hacking", "220", "220"),  # the note: a slipped particle keeps its weight (138); the choice is 220
    ("41-step-speculation", "125", "213"),  # the note: drafted and checked 125, tiny-math alone 213 (210 is right)
    ("38-first-finish", "608", "498"),  # the note: the first slot (a tie at 111 tokens) says 608, best-of-n 498
    ("39-reward-beam", "451", "451"),  # the note: the beam ends at 451
    ("40-softmax-selection", "451", "451"),  # the note: the draw at T = 1 lands on 451 (the comparison shares the fields)
    ("42-archon-found-architecture", "45", "162"),  # the note: A* with spare ends on 45; best-of-7 at the budget 162
    ("43-adaptive-compute", "11", "11"),  # the note: 3 samples, 1 pruned, 115 tokens; best-of-16 also 11, 780 tokens
])
def test_the_refine_and_reward_hacking_presets_do_what_their_notes_say(name, answer, compared):
    preset = cb.preset_chosen(name)
    fields = {f: preset[f"sc:{f}"] for f in FIELDS}
    final = merged(list(cb.generate_run(preset["model"], preset["prompt"], preset["method"], preset["max_new_tokens"],
                                        preset["seed"], preset["chat"], "best-of-n", **fields)))
    assert final["trace"].finish.extra["answer"] == answer and answer in preset["note"]
    assert final["other"].finish.extra["answer"] == compared
    trace = final["trace"]
    particles = trace.finish.extra["particles"]
    if name == "38-first-finish":  # all four finish at 111 tokens; the first slot's slipped line wins the tie
        assert [p["num_tokens"] for p in particles] == [111, 111, 111, 111] and "80 - 54 = 36" in trace.finish.text
        assert [p["answer"] for p in particles].count("498") == 3
    if name == "39-reward-beam":  # 2 of 4 slots continue after every line but the last: 5 selections
        steps = trace.of_kind("particles")
        assert sum(s.resampled for s in steps) == 5 and all(s.extra["kept"] == 2 for s in steps if s.resampled)
    if name == "40-softmax-selection":  # the right three get 82% at T = 1, nearly all at T = 0.1 (then 451)
        weights = {p["answer"]: 0.0 for p in particles}
        for p in particles:
            weights[p["answer"]] += p["weight"]
        assert round(weights["451"], 2) == 0.82 and "82%" in preset["note"]
        from decoding.lm import LM
        from decoding.models import load_model

        params = find_preset("scaling", name).params | {"select_temperature": 0.1}
        cool = run_to_trace(LM(load_model("tiny-math", progress=None)), preset["prompt"], strategy="best-of-n",
                            params=params, max_new_tokens=160, chat=False, seed=0)
        assert cool.finish.extra["answer"] == "451"
    if name == "41-step-speculation":  # the note: 6 drafted lines kept, 2 rewritten; 26 tiny-math calls
        spec = trace.finish.extra["speculation"]
        assert (spec["accepted_steps"], spec["rewritten_steps"], spec["policy_calls"]) == (6, 2, 26)
        assert "6 drafted lines are kept and 2 rewritten" in preset["note"] and "26 calls" in preset["note"]
    if name == "47-compute-optimal-per-prompt":  # the probe slipped: hard, refine N = 2; 324 tokens, best-of-2 204
        alloc = trace.finish.extra["allocation"]
        assert (alloc["bin"], alloc["choice"], alloc["probe"]["passed"]) == ("hard", "refine N=2 (rounds=3)", 0)
        assert stats(trace)["tokens_spent"] == 324 and stats(final["other"])["tokens_spent"] == 204
        assert "324 tokens" in preset["note"] and "204 tokens" in preset["note"]
    if name == "43-adaptive-compute":  # waves 1 and 2, one pruned after two lines, stopped at the first pass
        info = trace.finish.extra["adaptive"]
        assert (info["samples"], info["pruned"], info["waves"], info["stopped_early"]) == (3, 1, [1, 2], True)
        assert stats(trace)["tokens_spent"] == 115 and stats(final["other"])["tokens_spent"] == 780
        assert "18 * 5 = 80" in particles[0]["text"] and "115 tokens" in preset["note"] and "780" in preset["note"]
    if name == "37-reward-hacking":  # the slipped line the note quotes kept its weight to the end (138)
        slipped = next(p for p in particles if "99 + 158 = 157" in p["text"])
        assert slipped["answer"] == "138" and "138" in preset["note"]


@pytest.mark.slow  # the real model tiny-math
def test_a_remote_model_offers_only_the_methods_an_engine_can_run():
    out = cb.model_changed("openai:http://127.0.0.1:9/v1#m", "a-star")["method"]
    assert "a-star" not in out["choices"] and "particle-filter" in out["choices"] and out["value"] in out["choices"]
    assert "remote engine runs" in out["info"]
    local = cb.model_changed("tiny-math", "a-star")["method"]
    assert local["value"] == "a-star" and set(local["choices"]) == set(METHODS)


def test_the_particles_show_their_tokens_as_sampled_and_the_comparison_streams(monkeypatch):
    """Before a step's event the particles panel shows what each particle has sampled so far; the
    comparison run streams its own particles (the views do not freeze while it runs)."""
    from decoding.scaling import run as scaling_run

    monkeypatch.setenv("DECODING_LAB_SHOW_TEST_MODELS", "1")
    monkeypatch.setattr(scaling_run, "PROGRESS_S", 0.0)
    updates = run_ui(model="tiny-random", compare="best-of-n", reward="max-word-length", max_new_tokens=12)
    final = merged(updates)
    sampling = [u for u in updates if 'class="dl-particles dl-sampling"' in u.get("particles", "")]
    main = [u for u in sampling if "comparison" not in u["particles"]]
    compared = [u for u in sampling if "comparison: best-of-n" in u["particles"]]
    assert main and compared, [u.get("status") for u in updates]
    assert all('data-slot="2"' in u["particles"] and "Sampling step" in u["status"] for u in sampling)
    assert final["trace"].finish is not None and final["other"].finish is not None
    assert final["particles"].count('class="card') == 3 and "dl-sampling" not in final["particles"]  # the main run
