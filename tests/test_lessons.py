"""Every lesson and preset shows its point at its own settings (issue 43).

Each test runs presets (and the tabs' opening lessons) exactly as shipped and asserts what their notes claim: the
right answer where the note gives one, the effect's number where it names one. Presets whose claims are checked in
their own family's tests are listed in `ELSEWHERE` with that file; `test_every_preset_is_checked_somewhere` keeps
the list whole, so a new preset must say where its note is checked. Tests are grouped by model, so each real model
loads once: the tiny models' runs take well under a second, SmolLM2's a few seconds; Gemma (about 10 s of decoding
after its load) and the 4K book (one RAPID run over 4,096 tokens) are the expensive ones.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from pathlib import Path

import pytest

from decoding.events import stats
from decoding.presets import document_prompt, load_presets
from decoding.run import run_to_trace

TESTS = Path(__file__).resolve().parent
# preset -> the test file that runs it and asserts its note's claims
ELSEWHERE = {
    "07-hyperfitted-model": "training/test_hyperfit.py",
    "08-momentum-breaks-greedy-loops": "token/test_token_methods.py",
    "09-adadec-pauses-when-unsure": "token/test_token_methods.py",
    "11-superposed-drafts-in-one-pass": "token/test_token_methods.py",
    "12-lud-lexical-units": "token/test_faster.py",
    "13-hamburger-smashed-slots": "token/test_faster.py",
    "14-ftp-token-routing": "token/test_faster.py",
    "22-speculative-token-recycling": "ui/test_app_speculative.py",
    "24-speculative-dynamic-tree": "speculative/test_preset_dynamic_tree.py",
    "26-speculative-deer": "speculative/test_deer.py",
    "27-speculative-trained-early-exit": "speculative/test_layerskip.py",
    "28-speculative-specmemo": "speculative/test_specmemo.py",
    **{name: "ui/test_app_scaling.py" for name in (
        "30-particle-filter-vs-best-of-n", "34-a-star-search", "36-review-refine-repeat", "37-reward-hacking",
        "38-first-finish", "39-reward-beam", "40-softmax-selection", "41-step-speculation", "43-adaptive-compute",
        "47-compute-optimal-per-prompt")},
    "42-archon-found-architecture": "scaling/test_archon.py",
    "48-arbitrage-router": "scaling/test_arbitrage.py",
    "49-spare-prm": "scaling/test_spare_prm.py",
    **{name: "ui/test_app_diffusion.py" for name in (
        "53-diffusion-threshold", "54-parallel-threshold-copy", "55-parallel-shuffle-breaks", "56-parallel-freedave",
        "57-parallel-learn2pd")},
    "58-diffusion-localleap": "diffusion/test_presets_localleap_dkv.py",
    "59-diffusion-dkv-cache": "diffusion/test_presets_localleap_dkv.py",
}
# preset -> why its note's run is not asserted here (it makes no claim about its own run, or the run is too long)
UNCHECKED = {
    "81-longctx-iterdrag": "its note quotes bench_needle's nine questions, not this run; it asks to watch the follow-up",
    "84-longctx-ttt-think-1k": "about 900 tokens of SmolLM2 (a minute on a CPU); the matched-FLOPs rule is tested in "
                               "tests/longctx",
}
CHECKED_HERE = {
    "01-greedy-loops-on-a-base-model", "02-top-p-at-high-temperature", "03-min-p-at-high-temperature",
    "04-top-h-bounded-entropy", "05-beam-search", "06-mirostat", "10-exact-extract",
    "20-speculative-early-exit-depth", "21-speculative-temperature", "23-speculative-trained-draft-model",
    "25-speculative-eagle-head", "31-forbidden-letter", "32-self-consistency", "33-entropic-particle-filter",
    "35-smollm2-checker-blind-spot", "50-diffusion-unmasking-order", "51-diffusion-parallel-steps",
    "52-diffusion-blocks", "80-longctx-rag-top4-2k-book", "82-longctx-rapid-4k-book", "83-longctx-ttt-train-1k",
}


def preset(name: str):
    return next(p for p in load_presets() if p.name == name)


def run(name: str, **overrides):
    """The preset's run as its tab (or `python -m decoding run --preset`) makes it; `overrides` as a user's edit."""
    p = preset(name)
    prompt = p.prompt
    if p.document is not None:
        from decoding.models import load_model

        prompt = document_prompt(p, load_model(p.model, progress=None).tokenizer)
    settings = dict(strategy=p.strategy, params=p.params, max_new_tokens=p.max_new_tokens, chat=p.chat, seed=p.seed)
    settings = {"model": p.model} | settings | overrides
    return run_to_trace(settings.pop("model"), prompt, **settings)


def loop_steps(trace) -> int:
    """Generated tokens that repeat an n-gram of 2 or more tokens already in prompt + text."""
    from decoding.token.momentum import loop_depth

    ids, count = list(trace.start.prompt_ids), 0
    for t in trace.finish.token_ids:
        count += loop_depth(ids, t, 5) >= 2
        ids.append(t)
    return count


def window_means(values: list[float], width: int = 20) -> list[float]:
    return [statistics.mean(values[i:i + width]) for i in range(0, len(values), width)]


def test_every_preset_is_checked_somewhere():
    """A preset's note is checked here, or in the named file (which runs it by name), or says why not."""
    names = {p.name for p in load_presets()}
    listed = CHECKED_HERE | set(ELSEWHERE) | set(UNCHECKED)
    assert names - listed == set(), f"say where these presets' notes are checked: {sorted(names - listed)}"
    assert listed - names == set(), f"no such presets: {sorted(listed - names)}"
    assert not CHECKED_HERE & (set(ELSEWHERE) | set(UNCHECKED)) and not set(ELSEWHERE) & set(UNCHECKED)
    for name, where in ELSEWHERE.items():
        assert name in (TESTS / where).read_text(encoding="utf-8"), f"{where} does not run {name}"


# Playground -------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # Gemma-3-270M: two runs of 80 tokens (its first load in a session takes about 90 s)
def test_gemma_greedy_loops_and_its_entropy_falls_within_80_tokens():
    greedy = run("01-greedy-loops-on-a-base-model")
    tokens = greedy.of_kind("token")
    assert len(tokens) == 80
    entropy, prob = window_means([e.entropy for e in tokens]), window_means([e.prob for e in tokens])
    # the note: 3.0, 1.4, 0.5, 0.4 nats per 20 tokens; chosen-token probability 0.36 to 0.94
    assert entropy[0] > 2.5 and entropy[-1] < 0.6 and all(a > b for a, b in zip(entropy, entropy[1:])), entropy
    assert prob[0] < 0.5 and prob[-1] > 0.9, prob
    assert greedy.finish.text.count("I love the water and the sand.") >= 5
    sampled = run("01-greedy-loops-on-a-base-model", strategy="sample", params={"min_p": 0.1})
    assert loop_steps(sampled) * 2 < loop_steps(greedy)  # "switch to sample with min_p 0.1 and the loop breaks"


@pytest.mark.slow  # SmolLM2: the Playground's opening run and five presets (about 15 s on two cores)
def test_the_playground_opening_and_its_smollm2_presets():
    from ui.playground import OPENING_NOTE
    from ui.playground_views import DEFAULT_STRATEGY, EXAMPLE_PROMPTS

    opening = run_to_trace("smollm2-135m", EXAMPLE_PROMPTS[0], strategy=DEFAULT_STRATEGY, max_new_tokens=64, seed=0)
    tokens = opening.of_kind("token")
    prob = {e.token_text: e.prob for e in tokens}
    assert prob["leigh"] >= 0.995 and prob[" directions"] >= 0.995 and "Rayleigh scattering" in opening.finish.text
    assert "a mixture of blue and red light" in opening.finish.text
    at = [e.token_text for e in tokens].index(" mixture")  # " a mixture of blue and red": -1, +2, +4
    chooses = [tokens[at + k].prob for k in (-1, 2, 4)]
    assert all(abs(p - q) < 0.03 for p, q in zip(chooses, (0.14, 0.27, 0.31))), chooses
    assert '"a" 0.14, "blue" 0.27, "red" 0.31' in OPENING_NOTE
    assert max(e.entropy for e in tokens) > 3 and min(e.entropy for e in tokens) < 0.05  # "near zero ... 2 to 3.5"

    top_p, min_p = run("02-top-p-at-high-temperature"), run("03-min-p-at-high-temperature")
    assert stats(top_p)["mean_kept_size"] > 1000 > 20 > stats(min_p)["mean_kept_size"]  # "thousands" vs "a handful"
    top_h = run("04-top-h-bounded-entropy").of_kind("token")
    assert statistics.mean(e.entropy_truncated for e in top_h) < statistics.mean(e.entropy for e in top_h)
    beams = run("05-beam-search").of_kind("beams")
    assert all(len(b.beams) == 4 for b in beams)
    dropped = [set(range(len(a.beams))) - {b["parent"] for b in z.beams} for a, z in zip(beams, beams[1:])]
    assert sum(map(len, dropped)) >= 4  # beams die out when their parent is not extended
    mirostat = run("06-mirostat").of_kind("token")
    surprise = statistics.mean(-math.log2(e.sampling_prob) for e in mirostat)
    assert abs(surprise - 3.0) < 1.0  # pushed towards tau = 3 bits
    assert max(e.kept_size for e in mirostat) > 10 * min(e.kept_size for e in mirostat)  # the kept set moves with mu
    assert run("10-exact-extract").finish.text == " into the Atlantic Ocean."


# Speculative ------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # tiny-ar with its draft model (under a second); SmolLM2 (three runs, two in float32)
def test_the_speculative_presets_acceptance_and_lossless_text():
    draft = run("23-speculative-trained-draft-model")
    s = stats(draft)
    assert 0.55 < s["acceptance_rate"] < 0.8 and s["target_forward_passes_per_token"] < 0.4  # 2 of 3; 1 per 3 tokens
    plain = run("23-speculative-trained-draft-model", strategy="greedy", params={})
    assert draft.finish.token_ids == plain.finish.token_ids  # exactly tiny-ar's greedy text

    assert stats(run("20-speculative-early-exit-depth"))["acceptance_rate"] < 0.3  # most draft nodes rejected
    hot, cold = (stats(run("21-speculative-temperature", params=preset("21-speculative-temperature").params
                           | {"temperature": t}))["acceptance_rate"] for t in (1.2, 0.0))
    assert hot < cold  # acceptance drops at high temperature
    from decoding.models import load_model

    exact = load_model("smollm2-135m", dtype="float32", progress=None)  # the note: exactly greedy's text in float32
    eagle = run("25-speculative-eagle-head", model=exact)
    assert stats(eagle)["acceptance_rate"] > 0.2 and stats(eagle)["target_forward_passes_per_token"] < 0.8
    assert eagle.finish.token_ids == run("25-speculative-eagle-head", model=exact, strategy="greedy",
                                         params={}).finish.token_ids


# Scaling ----------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # tiny-math's eight samples, then SmolLM2's three particle filters (about 40 s on two cores)
def test_the_scaling_presets_votes_constraints_and_collapse():
    vote = run("32-self-consistency")
    answers = Counter(p["answer"] for p in vote.finish.extra["particles"])
    assert vote.finish.extra["answer"] == "192" and answers["192"] == 3  # 3 of 8 right, and still the most common
    assert sorted(answers.values()) == [1, 1, 1, 1, 1, 3]  # the five wrong ones, each its own answer
    assert "3 of the 8 reach 192" in preset("32-self-consistency").note

    lipogram = run("31-forbidden-letter")
    assert all("e" not in p["text"].lower() for p in lipogram.finish.extra["particles"])  # the letter never written
    assert lipogram.finish.text.startswith("*Crabs, or **britannia** in Roman Latin, play a crucial part in Bora")

    greedy_weights = run("33-entropic-particle-filter")
    steps = greedy_weights.of_kind("particles")
    assert steps[0].ess < 1.5 and steps[0].resampled  # one early line takes all the weight
    assert len({p["text"] for p in greedy_weights.finish.extra["particles"]}) == 1  # every particle a copy of it
    flattened = run("33-entropic-particle-filter", params=preset("33-entropic-particle-filter").params
                    | {"entropic": 0.7}, max_new_tokens=40)  # its first step only: the same as the full run's
    assert len(set(flattened.of_kind("particles")[0].ancestors)) > 1  # several lines survive the first step

    blind = run("35-smollm2-checker-blind-spot")
    answers = Counter(p["answer"] for p in blind.finish.extra["particles"])
    assert blind.finish.extra["answer"] == "15" != "23" and answers["15"] == 7  # agreeing on a wrong answer


# Diffusion --------------------------------------------------------------------------------------------------------
def commit_steps(trace) -> dict[int, int]:
    return {pos: e.step for e in trace.of_kind("diffusion_step") for pos in e.unmasked}


@pytest.mark.slow  # tiny-diffusion, three runs of 48 positions (a few seconds)
def test_the_diffusion_presets_order_parallel_steps_and_blocks():
    order = commit_steps(run("50-diffusion-unmasking-order"))
    assert min(order, key=order.get) < 4  # it starts near the prompt...
    assert any(order[i] > order[j] for i in order for j in order if i < j)  # ...and does not go left to right

    parallel = run("51-diffusion-parallel-steps")
    assert stats(parallel)["nfe"] == 12 and stats(parallel)["tokens_per_step"] == 4.0
    assert "the the" in parallel.finish.text  # tokens committed together cannot agree: a clash

    blocks = commit_steps(run("52-diffusion-blocks"))
    by_block = [[blocks[p] for p in range(b * 8, b * 8 + 8)] for b in range(6)]
    assert all(max(a) < min(z) for a, z in zip(by_block, by_block[1:]))  # the staircase: block after block


# Long context -----------------------------------------------------------------------------------------------------
@pytest.mark.slow  # SmolLM2 on the 1K and 2K books: the tab's opening run, its question-1 miss, presets 80 and 83
def test_the_long_context_opening_and_its_1k_and_2k_presets():
    from decoding.longctx.document import build_document
    from decoding.models import load_model
    from ui.longctx import OPENING_NOTE

    tokenizer = load_model("smollm2-135m", progress=None).tokenizer
    book = build_document(tokenizer, 1024, 0)  # the tab's defaults: the 1K book, seed 0, question 0, rag
    first, second = book.questions[0], book.questions[1]
    opening = run_to_trace("smollm2-135m", book.prompt(first), strategy="rag", max_new_tokens=24, seed=0)
    extra = opening.finish.extra
    assert first.check(opening.finish.text) and first.answer == "9376" and "9376" in OPENING_NOTE
    assert (extra["effective_context_tokens"], extra["context_tokens"]) == (402, 849) and "402" in OPENING_NOTE
    assert extra["retrievals"][0]["chunks"][0] == 0  # the answer's chunk (depth 0.1 of 849 tokens) ranks first
    assert first.depth * extra["context_tokens"] < extra["chunks"][0][1]
    miss = run_to_trace("smollm2-135m", book.prompt(second), strategy="rag", max_new_tokens=24, seed=0)
    assert "7634" in miss.finish.text and not second.check(miss.finish.text) and "7634" in OPENING_NOTE

    drag = run("80-longctx-rag-top4-2k-book")
    book2 = build_document(tokenizer, 2048, 0)
    assert book2.questions[1].check(drag.finish.text)  # "DRAG answered this question right"
    ttt = run("83-longctx-ttt-train-1k")
    whole = run("83-longctx-ttt-train-1k", strategy="greedy", params={})
    assert ttt.finish.text == whole.finish.text and first.check(ttt.finish.text)  # "stays the whole context's"


@pytest.mark.slow  # SmolLM2 over the 4K book: RAPID's one run (the target prefills 4,096 tokens; 20-100 s)
def test_the_rapid_4k_preset_answers_right_as_the_whole_context_does():
    from decoding.longctx.document import build_document
    from decoding.models import load_model

    rapid = run("82-longctx-rapid-4k-book")
    book = build_document(load_model("smollm2-135m", progress=None).tokenizer, 4096, 0)
    question = book.questions[preset("82-longctx-rapid-4k-book").document["question"]]
    assert question.answer == "8961" and question.check(rapid.finish.text)
    assert rapid.finish.text.strip() == "The secret number of Tavor is 8961."  # the note quotes it
    assert stats(rapid)["acceptance_rate"] > 0.5
