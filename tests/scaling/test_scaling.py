"""Inference-time scaling: batched particles, the five methods, their events and statistics."""

import json
import re

import pytest
import torch

from decoding import run_to_trace
from decoding.run import generate
from decoding.events import ParticleStep, Trace, stats
from decoding.scaling.particle_batch import ParticleBatch, slot_generators
from decoding.scaling.prm import STEP_SEPARATOR, build_conversation, step_probabilities
from decoding.run import make_params
from decoding.scaling import methods as scaling
from decoding.scaling.tasks import load_tasks, make_tasks, task_prompt, TASKS_PATH

PROMPT = "Tom has 3 apples and buys 4 more. How many apples does he have?"
METHODS = ("best-of-n", "majority-vote", "reward-beam", "particle-filter", "first-finish")


def particle_steps(trace) -> list[ParticleStep]:
    return trace.of_kind("particles")


# ---------------------------------------------------------------- batched decoding

def alone(lm, prompt_ids, generator, max_tokens):
    """One particle decoded by itself: a batch of one row, no padding, no other rows."""
    batch = ParticleBatch(lm, prompt_ids, [generator], temperature=1.0)
    return batch.extend([0], lambda ids: False, [max_tokens])[0][0]


def test_batched_particles_get_the_tokens_they_get_alone(tiny_lm):
    """Rows of different lengths (waiting rows are padded), then a resampling reorder and a
    second step: every particle's tokens equal decoding it alone with the same generator."""
    prompt = tiny_lm.tokenizer(PROMPT).input_ids
    lengths = [3, 9, 6]
    batch = ParticleBatch(tiny_lm, prompt, slot_generators(5, 3), temperature=1.0)
    first = batch.extend([0, 1, 2], lambda ids: False, lengths)
    states = []
    for slot, length in enumerate(lengths):
        g = slot_generators(5, 3)[slot]
        assert alone(tiny_lm, prompt, g, length) == first[slot][0]
        states.append(g.get_state())
    ancestors = [2, 0, 2]
    batch.reorder(ancestors)
    second = batch.extend([0, 1, 2], lambda ids: False, [5, 7, 4])
    for slot, ancestor in enumerate(ancestors):
        g = torch.Generator()
        g.set_state(states[slot])  # the slot's own stream continues; only the text is copied
        expected = alone(tiny_lm, prompt + first[ancestor][0], g, [5, 7, 4][slot])
        assert second[slot][0] == expected
    assert second[0][0] != second[2][0]  # two copies of one particle continue differently


@pytest.mark.slow  # SmolLM2
def test_batched_particles_match_alone_on_the_real_model(smol_lm):
    prompt, _, _ = smol_lm.encode_prompt("Name three fruits.")
    batch = ParticleBatch(smol_lm, prompt, slot_generators(1, 3), temperature=1.0)
    got = batch.extend([0, 1, 2], lambda ids: False, [4, 8, 6])
    for slot, length in enumerate([4, 8, 6]):
        assert alone(smol_lm, prompt, slot_generators(1, 3)[slot], length) == got[slot][0]


def test_padding_is_hidden_from_the_waiting_rows(tiny_lm):
    """A row that waited while others decoded has the logits of a fresh single-row forward."""
    prompt = tiny_lm.tokenizer(PROMPT).input_ids
    batch = ParticleBatch(tiny_lm, prompt, slot_generators(0, 2), temperature=1.0)
    grown = batch.extend([0, 1], lambda ids: False, [2, 8])
    assert batch.feed()  # both rows' last tokens; row 0 has 6 hidden pads in its cache by now
    for row in (0, 1):
        ids = torch.tensor([prompt + grown[row][0]])
        reference = tiny_lm.forward(ids, last_only=True).logits[0, -1]
        torch.testing.assert_close(batch.logits[row], reference, atol=1e-4, rtol=1e-4)
    assert batch.mask[0].sum() == len(prompt) + 2 and batch.mask[1].sum() == len(prompt) + 8


def _steps_under(batch_extend, tiny_lm, prompt, n=4, budget=30, cap=6):
    """Every row's steps, called step by step until each row has used its budget or ended."""
    batch = ParticleBatch(tiny_lm, prompt, slot_generators(11, n), temperature=1.0)
    step_done = lambda ids: ids[-1] % 5 == 0  # a step ends at an arbitrary token class
    used, steps, live = [0] * n, [[] for _ in range(n)], list(range(n))
    while live:
        grown = batch_extend(batch, live, step_done, cap, {i: budget - used[i] for i in live})
        for i, (ids, end) in grown.items():
            steps[i].append((ids, end))
            used[i] += len(ids)
        live = [i for i in live if used[i] < budget and steps[i][-1][1] != "eos"]
    return steps, batch


def test_no_barrier_gives_the_same_steps_with_fewer_calls(tiny_lm):
    """`extend_free` returns exactly the steps the lockstep `extend` returns (each row draws from
    its own generator in the same order), but rows do not wait for the slowest: fewer calls."""
    prompt = tiny_lm.tokenizer(PROMPT).input_ids
    calls = {}

    def lockstep(batch, rows, done, cap, budgets):
        return batch.extend(rows, done, [min(cap, budgets.get(i, 0)) for i in range(batch.n)])

    def free(batch, rows, done, cap, budgets):
        return batch.extend_free(rows, done, cap, budgets)

    results = {}
    for name, fn in (("lockstep", lockstep), ("free", free)):
        before = tiny_lm.forward_passes
        results[name], _ = _steps_under(fn, tiny_lm, prompt)
        calls[name] = tiny_lm.forward_passes - before
    assert results["free"] == results["lockstep"]
    assert sum(len(s) for s in results["free"]) > 4 * 2  # several steps per row: there was a barrier to lose
    longest = max(sum(len(ids) for ids, _ in row) for row in results["free"])
    assert calls["free"] <= longest + 1 < calls["lockstep"]


def test_lockstep_extend_refuses_rows_that_decoded_ahead(tiny_lm):
    prompt = tiny_lm.tokenizer(PROMPT).input_ids
    batch = ParticleBatch(tiny_lm, prompt, slot_generators(2, 2), temperature=1.0)
    batch.extend_free([0, 1], lambda ids: ids[-1] % 3 == 0, 8, {0: 40, 1: 40})
    assert any(batch.ahead) or any(batch.partial)  # one row finished first and went on
    with pytest.raises(RuntimeError, match="decoded ahead"):
        batch.extend([0, 1], lambda ids: False, [2, 2])


# ---------------------------------------------------------------- methods on the real model

@pytest.fixture(scope="module")
def runs(smol_lm):
    """One short run of every method on a task (shared by the tests below)."""
    prompt = task_prompt(load_tasks()[0]["question"])
    return {m: run_to_trace(smol_lm, prompt, strategy=m, params={"n": 4, "max_step_tokens": 16},
                            max_new_tokens=40, seed=3) for m in METHODS}


@pytest.mark.slow  # SmolLM2
@pytest.mark.parametrize("method", METHODS)
def test_every_method_streams_particles_and_reports_its_budget(runs, method):
    trace = runs[method]
    steps = particle_steps(trace)
    assert steps and all(len(s.particles) == 4 for s in steps)
    st = stats(trace)
    for key in ("ess", "resampling_events", "tokens_spent", "forward_passes", "num_particles"):
        assert st[key] is not None, key
    assert st["tokens_spent"] == steps[-1].tokens_spent
    assert st["resampling_events"] == sum(s.resampled for s in steps)
    assert 1 - 1e-9 <= st["ess"] <= 4 + 1e-9
    extra = trace.finish.extra
    assert len(extra["particles"]) == 4 and all({"text", "weight"} <= p.keys() for p in extra["particles"])
    assert trace.finish.text == extra["particles"][extra["chosen"]]["text"]
    assert Trace.from_json(trace.to_json()).to_dict() == json.loads(trace.to_json())


@pytest.mark.slow  # SmolLM2
@pytest.mark.parametrize("method", METHODS)
def test_lineage_is_consistent_with_the_resampling_indices(runs, method):
    """Slot j at step s + 1 continues slot ancestors_s[j]: its parent says so and its text extends
    that particle's text."""
    steps = particle_steps(runs[method])
    assert all(p["parent"] == -1 for p in steps[0].particles)
    for before, after in zip(steps, steps[1:]):
        for j, particle in enumerate(after.particles):
            a = before.ancestors[j]
            assert particle["parent"] == a
            assert particle["text"].startswith(before.particles[a]["text"])
            if before.particles[a]["finished"]:
                assert particle["text"] == before.particles[a]["text"] and particle["step_text"] == ""


@pytest.mark.slow  # SmolLM2
def test_weights_are_normalised_and_ess_matches(runs):
    for method in METHODS:
        for step in particle_steps(runs[method]):
            weights = [p["weight"] for p in step.particles]
            assert sum(weights) == pytest.approx(1.0)
            assert step.ess == pytest.approx(1 / sum(w * w for w in weights))


@pytest.mark.slow  # SmolLM2
def test_best_of_n_spends_exactly_its_samples_tokens(runs):
    trace = runs["best-of-n"]
    extra = trace.finish.extra
    assert stats(trace)["tokens_spent"] == sum(p["num_tokens"] for p in extra["particles"])
    complete = [p for p in extra["particles"] if p["finished"] and p["num_tokens"] < 40] or extra["particles"]
    assert extra["particles"][extra["chosen"]]["score"] == max(p["score"] for p in complete)


@pytest.mark.slow  # SmolLM2
def test_particle_filter_with_a_constant_reward_is_independent_sampling(smol_lm):
    prompt = task_prompt(load_tasks()[1]["question"])
    common = {"n": 3, "reward": "none", "max_step_tokens": 12}
    pf = run_to_trace(smol_lm, prompt, strategy="particle-filter", params=common, max_new_tokens=24, seed=11)
    bon = run_to_trace(smol_lm, prompt, strategy="best-of-n", params=common, max_new_tokens=24, seed=11)
    assert stats(pf)["resampling_events"] == 0
    texts = lambda t: [p["text"] for p in t.finish.extra["particles"]]
    assert texts(pf) == texts(bon)
    assert len(set(texts(pf))) == 3


@pytest.mark.slow  # SmolLM2
def test_reward_beam_keeps_the_best_live_beams(runs):
    for step in particle_steps(runs["reward-beam"]):
        live = [p for p in step.particles if not p["finished"]]
        if not live:
            continue
        keep = max(1, len(live) // 2)
        kept = {step.ancestors[p["id"]] for p in live}
        best = sorted(live, key=lambda p: (-p["score"], p["id"]))[:keep]
        assert kept == {p["id"] for p in best}


@pytest.mark.slow  # SmolLM2
def test_first_finish_returns_the_shortest_finished_sample(runs):
    trace = runs["first-finish"]
    extra = trace.finish.extra
    ended = [p for p in extra["particles"] if p["finished"] and p["num_tokens"] < 40]
    if ended:
        assert extra["particles"][extra["chosen"]]["num_tokens"] == min(p["num_tokens"] for p in ended)


def test_majority_vote_picks_the_most_common_answer():
    assert scaling.vote(["3", "5", "3", None], [1, 1, 1, 1]) == {"3": 2.0, "5": 1.0}
    assert next(iter(scaling.vote(["3", "5", "3"], [0.1, 0.9, 0.1]))) == "5"  # weighted
    assert scaling.vote([None, None], [1, 1]) == {}


@pytest.mark.slow  # SmolLM2
def test_hard_zero_particles_are_never_resampled(smol_lm):
    """max-word-length as a hard constraint: a particle with a long word has weight 0, and no
    slot of the next step descends from it (unless every particle is at 0)."""
    trace = run_to_trace(smol_lm, "Describe a cat.", strategy="particle-filter",
                         params={"n": 4, "reward": "max-word-length", "max_word_length": 5, "max_step_tokens": 10},
                         max_new_tokens=30, seed=1)
    zero_seen = False
    for step in particle_steps(trace):
        weights = [p["weight"] for p in step.particles]
        dead = {i for i, w in enumerate(weights) if w == 0}
        zero_seen |= bool(dead) and len(dead) < len(weights)
        if step.resampled and len(dead) < len(weights):
            assert not dead & set(step.ancestors)
    assert zero_seen


@pytest.mark.slow  # SmolLM2
def test_forbidden_letter_is_never_written(smol_lm):
    trace = run_to_trace(smol_lm, "Write a sentence about the sea.", strategy="particle-filter",
                         params={"n": 3, "reward": "forbid-letter", "letter": "e", "max_step_tokens": 10},
                         max_new_tokens=24, seed=0)
    for p in trace.finish.extra["particles"]:
        assert "e" not in p["text"].lower() and p["text"].strip()
    rewards = [p["reward"] for s in particle_steps(trace) for p in s.particles if p["reward"] is not None]
    assert all(0 < r < 1 for r in rewards)  # the mass the model kept on allowed tokens


@pytest.mark.slow  # SmolLM2
def test_ess_threshold_resamples_only_below_it(smol_lm):
    prompt = task_prompt(load_tasks()[2]["question"])
    trace = run_to_trace(smol_lm, prompt, strategy="particle-filter",
                         params={"n": 4, "ess_threshold": 0.5, "max_step_tokens": 12}, max_new_tokens=36, seed=4)
    for step in particle_steps(trace):
        if step.resampled:
            assert step.ess < 0.5 * 4
        else:
            assert step.ancestors == [0, 1, 2, 3]


@pytest.mark.slow  # SmolLM2
def test_entropic_resampling_records_its_flattening(smol_lm):
    trace = run_to_trace(smol_lm, "Describe a cat.", strategy="particle-filter",
                         params={"n": 4, "reward": "max-word-length", "hard": False, "entropic": 0.9,
                                 "max_step_tokens": 10}, max_new_tokens=20, seed=1)
    betas = [s.extra["entropic_beta"] for s in particle_steps(trace)]
    assert betas and all(0 <= b <= 1 for b in betas)


def test_entropic_annealing_tempers_each_steps_weights_by_its_hub_rule(tiny_lm, monkeypatch):
    from decoding.scaling import particles as pf

    skewed = torch.tensor([0.7, 0.1, 0.1, 0.1], dtype=torch.float64)  # ESS / N = 0.4808: every step anneals early
    monkeypatch.setattr(scaling.pf, "weights_from_rewards", lambda rewards, temperature: skewed.clone())
    drawn = []
    real_resample = pf.resample
    monkeypatch.setattr(scaling.pf, "resample", lambda w, *a: drawn.append(w.clone()) or real_resample(w, *a))
    trace = run_to_trace(tiny_lm, "Describe a cat.", strategy="particle-filter",
                         params={"n": 4, "reward": "max-word-length", "annealing": "ess", "annealing_steps": 6,
                                 "max_step_tokens": 4}, max_new_tokens=16, seed=1)
    taus = [s.extra["annealing_temperature"] for s in particle_steps(trace)]
    # t = 1, 2 (t counts the steps taken): (1 - t/6) * 4 * 0.52; from t = 3 on, t / 6 >= 0.5: no annealing
    assert taus[:3] == pytest.approx([5 / 6 * 2.08, 4 / 6 * 2.08, 1.0])
    assert torch.allclose(drawn[0], torch.softmax(torch.log(skewed) / taus[0], 0))


@pytest.mark.slow  # SmolLM2
def test_cancelling_after_a_step_ends_the_run_before_the_next_model_call(smol_lm):
    stop, passes = [], smol_lm.forward_passes
    events = []
    for event in generate(smol_lm, PROMPT, strategy="particle-filter", params={"n": 2, "max_step_tokens": 8},
                          max_new_tokens=64, seed=0, should_stop=lambda: bool(stop)):
        events.append(event)
        if event.kind == "particles" and not stop:
            stop.append(smol_lm.forward_passes)  # Stop pressed as the first step is shown
    assert events[-1].stop_reason == "cancelled" and len([e for e in events if e.kind == "particles"]) == 1
    assert smol_lm.forward_passes == stop[0] > passes  # no model call after Stop


@pytest.mark.slow  # SmolLM2
def test_lm_judge_is_p_yes_over_yes_and_no(smol_lm):
    from decoding.scaling.scoring import lm_judge

    judge = lm_judge(smol_lm)
    prompt = "Question: What is 2 + 2?\nProposed step: 2 + 2 = 4\nIs this step correct? Answer Yes or No."
    value = judge(prompt)
    ids, _, _ = smol_lm.encode_prompt(prompt)
    probs = torch.softmax(smol_lm.forward(torch.tensor([ids]), last_only=True).logits[0, -1], -1)
    yes = [smol_lm.tokenizer(w, add_special_tokens=False).input_ids[0] for w in ("Yes", " Yes", "yes")]
    no = [smol_lm.tokenizer(w, add_special_tokens=False).input_ids[0] for w in ("No", " No", "no")]
    expected = probs[yes].sum() / (probs[yes].sum() + probs[no].sum())
    assert value == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.slow  # SmolLM2
def test_lm_judge_reward_runs_and_counts_its_calls(smol_lm):
    trace = run_to_trace(smol_lm, PROMPT, strategy="reward-beam",
                         params={"n": 2, "reward": "lm-judge", "max_step_tokens": 8}, max_new_tokens=16, seed=0)
    steps = particle_steps(trace)
    judged = sum(1 for s in steps for p in s.particles if p["step_text"])
    assert all(p["detail"].startswith("P(Yes)") for s in steps for p in s.particles if p["step_text"])
    decode_calls = stats(trace)["forward_passes"] - judged
    assert 1 <= decode_calls <= 17  # prefill + at most one call per token; the rest are the judge's


# ---------------------------------------------------------------- parameters and rewards

@pytest.mark.parametrize("strategy, params, message", [
    ("best-of-n", {"n": 0}, "`n` must be an integer in [1, 64]"),
    ("best-of-n", {"reward": "oracle"}, "`reward` must be one of arith-step"),
    ("reward-beam", {"n": 6, "beam_width": 4}, "must be a multiple of `beam_width`"),
    ("particle-filter", {"ess_threshold": 2}, "`ess_threshold` must be in [0, 1], got 2"),
    ("particle-filter", {"reward": "final-answer"}, "reward final-answer needs `reference`"),
    ("particle-filter", {"entropic": 0.7, "annealing": "ess"}, "`annealing` must be none when `entropic` > 0"),
    ("particle-filter", {"annealing": "linear"}, "`annealing` must be one of none, ess, entropy"),
    ("particle-filter", {"reward": "forbid-letter", "letter": "ee"}, "`forbid-letter.letter` must be a single letter"),
    ("majority-vote", {"step_delimiter": "comma"}, "`step_delimiter` must be one of newline, blank-line"),
])
def test_bad_parameters_are_named(strategy, params, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_params(strategy, params)


def test_cli_strings_convert():
    params = make_params("particle-filter", {"n": "8", "reward": "forbid-letter", "letter": "e", "hard": "true"})
    assert params.n == 8 and params.own.hard is True and params.own.letter == "e"


@pytest.mark.slow  # SmolLM2
def test_prm_reads_the_probability_at_each_step_separator(smol_lm):
    logits = torch.tensor([[0.0, 0.0], [0.0, 2.0], [5.0, 5.0], [1.0, -1.0]])  # (T, 2)
    ids = torch.tensor([1, 9, 2, 9])
    assert step_probabilities(logits, ids, 9) == pytest.approx([torch.sigmoid(torch.tensor(2.0)).item(),
                                                                 torch.sigmoid(torch.tensor(-2.0)).item()])
    text = build_conversation(smol_lm.tokenizer, "What is 1 + 1?", ["1 + 1 = 2", "The answer is 2."])
    assert text.count(STEP_SEPARATOR) == 2 and "What is 1 + 1?" in text
    assert text.index("1 + 1 = 2" + STEP_SEPARATOR) < text.index("The answer is 2." + STEP_SEPARATOR)


def test_prm_offline_says_what_to_do(monkeypatch):
    from decoding import models

    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    with pytest.raises(models.ModelLoadError, match="not reachable"):
        models.load_hub_auxiliary("Qwen/Qwen2.5-Math-PRM-7B")


# ---------------------------------------------------------------- the task set

def test_shipped_task_set_is_the_seeded_script_output():
    shipped = load_tasks(TASKS_PATH)
    assert shipped == make_tasks(len(shipped), seed=0)
    for task in shipped:
        numbers = [int(n) for n in re.findall(r"\d+", task["question"])]
        assert numbers and int(task["answer"]) >= 0


def test_malformed_task_file_is_named(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"question": "1 + 1?", "answer": "2"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        load_tasks(path)


@pytest.mark.slow  # SmolLM2
def test_tokens_per_particle_step_counts_each_extension(runs):
    trace = runs["best-of-n"]  # no copies: every particle's tokens were generated by itself
    steps = particle_steps(trace)
    counts = [[0] * 4] + [[p["num_tokens"] for p in s.particles] for s in steps]  # slot i stays slot i
    grown = sum(after[i] > before[i] for before, after in zip(counts, counts[1:]) for i in range(4))
    st = stats(trace)
    assert st["tokens_per_particle_step"] == pytest.approx(st["tokens_spent"] / grown, abs=0.01)


def test_progress_shows_each_steps_tokens_as_sampled_and_changes_nothing(tiny_lm, monkeypatch):
    """`generate(progress=...)` hears what a step has sampled before the step's event; the run (events,
    statistics) is the one it would be unwatched, and its trace passes the loader's checks."""
    from decoding.contracts import StepProgress
    from decoding.scaling import run as scaling_run

    monkeypatch.setattr(scaling_run, "PROGRESS_S", 0.0)  # every sampling round, so the test sees them all
    kwargs = dict(strategy="particle-filter", params={"n": 3, "max_step_tokens": 6, "reward": "max-word-length"},
                  max_new_tokens=18, seed=4, chat=False)
    seen: list = []
    watched = Trace()
    for event in generate(tiny_lm, PROMPT, progress=seen.append, **kwargs):
        seen.append(event)
        watched.append(event)
    alone = run_to_trace(tiny_lm, PROMPT, **kwargs)
    strip = lambda t: [{k: v for k, v in e.to_dict().items() if k != "elapsed_s"} for e in t.events]
    assert strip(watched) == strip(alone) and stats(watched)["tokens_spent"] == stats(alone)["tokens_spent"]
    Trace.from_dict(json.loads(watched.to_json()))  # valid (decoding/trace_checks.py)

    steps = [e for e in seen if isinstance(e, ParticleStep)]
    for step in steps:
        before = [p for p in seen[:seen.index(step)] if isinstance(p, StepProgress) and p.step == step.step]
        assert before, f"no progress before step {step.step}"
        last = before[-1]
        assert len(last.texts) == len(last.new_texts) == 3
        for slot, particle in enumerate(step.particles):
            assert particle["text"].startswith(last.texts[slot] + last.new_texts[slot])  # a prefix of what came
        spent = [p.tokens_spent for p in before]
        assert spent == sorted(spent) and spent[-1] <= step.tokens_spent


def test_a_look_ahead_is_undone(tiny_lm):
    """ePF's look-ahead samples one more step from other streams and then restores the batch: the
    run goes on exactly as without it (only the spent tokens show it happened)."""
    prompt = tiny_lm.tokenizer(PROMPT).input_ids
    batches = [ParticleBatch(tiny_lm, prompt, slot_generators(3, 3), temperature=1.0) for _ in range(2)]
    for b in batches:
        b.extend([0, 1, 2], lambda ids: False, [3, 5, 4])
    ahead = batches[0].look_ahead([0, 2], lambda ids: False, [4, 0, 6], slot_generators(99, 3))
    assert [len(ahead[0][0]), len(ahead[2][0])] == [4, 6] and 1 not in ahead
    after = [b.extend([0, 1, 2], lambda ids: False, [5, 5, 5]) for b in batches]
    assert after[0] == after[1]
    assert batches[0].tokens_spent == batches[1].tokens_spent + 10


def test_particle_filter_with_look_ahead_records_the_successors_rewards(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="particle-filter",
                         params={"n": 3, "max_step_tokens": 4, "lookahead": 1.0, "entropic": 0.5},
                         max_new_tokens=12, seed=1)
    steps = particle_steps(trace)
    looked = [s for s in steps if "lookahead_rewards" in s.extra]
    assert looked and all(len(s.extra["lookahead_rewards"]) == 3 for s in looked)
    plain = run_to_trace(tiny_lm, PROMPT, strategy="particle-filter", params={"n": 3, "max_step_tokens": 4,
                                                                             "entropic": 0.5},
                         max_new_tokens=12, seed=1)
    assert stats(trace)["tokens_spent"] > stats(plain)["tokens_spent"]  # the look-ahead's tokens are counted
