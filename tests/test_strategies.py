"""Token-level strategies: faithful to the model, reproducible, recorded from what ran."""

import dataclasses

import pytest
import torch

from decoding import generate, run_to_trace, sampling
from decoding.events import BeamStep, RunFinished, RunStarted, TokenStep, Trace, stats
from decoding.models import load_model
from decoding.run import as_lm
from decoding.registry import STRATEGIES, strategies_of

PROMPT = "The quick brown fox"
# The strategies that emit one TokenStep per generated token (from the registry; superposed decoding emits
# its drafts' tokens, so its steps are checked by its own tests)
NOT_ONE_STEP_PER_TOKEN = {"superposed"}
TOKEN_STRATEGIES = [name for name in strategies_of("token", "speculative") if name not in NOT_ONE_STEP_PER_TOKEN]
QA_PROMPT = "Context: The quick brown fox jumps over the lazy dog. Question: What jumps? Answer:"  # exact-extract's form


def prompt_for(strategy: str) -> str:
    return QA_PROMPT if strategy == "exact-extract" else PROMPT


def untimed(trace: Trace) -> list[dict]:
    """Events without wall-clock fields, for comparing two runs."""
    out = []
    for e in trace.events:
        d = {k: v for k, v in e.to_dict().items() if not k.endswith("_s")}  # wall-clock fields
        out.append(d)
    return out


def model_for(strategy, tiny_lm):
    """The diffusion strategy needs a masked diffusion model; a method trained into its model that model; every
    other strategy a causal one."""
    if STRATEGIES[strategy].family == "diffusion":
        return as_lm(load_model("tiny-random-diffusion", progress=None))
    if STRATEGIES[strategy].models:  # LUD, HAMburger, FTP run on the (shipped, tiny) model trained for them
        return as_lm(load_model(STRATEGIES[strategy].models[0], progress=None))
    return tiny_lm


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_yields_a_well_formed_trace(tiny_lm, strategy):
    tiny_lm = model_for(strategy, tiny_lm)
    calls_before = tiny_lm.forward_passes
    trace = run_to_trace(tiny_lm, prompt_for(strategy), strategy=strategy, max_new_tokens=12, seed=3)
    assert isinstance(trace.events[0], RunStarted) and isinstance(trace.events[-1], RunFinished)
    finish = trace.finish
    assert 1 <= len(finish.token_ids) <= 12
    assert all(0 <= t < tiny_lm.vocab_size for t in finish.token_ids)
    if strategy in TOKEN_STRATEGIES:
        tokens = trace.of_kind("token")
        assert [e.token_id for e in tokens] == finish.token_ids
        assert [e.step for e in tokens] == list(range(len(tokens)))
        for e in tokens:
            assert 1 <= e.kept_size <= tiny_lm.vocab_size
            assert 0 < e.prob <= 1 and 0 < e.sampling_prob <= 1 + 1e-6
            assert e.top_probs == sorted(e.top_probs, reverse=True)
    elif STRATEGIES[strategy].family == "scaling":
        steps = trace.of_kind("particles")
        chosen = finish.extra["particles"][finish.extra["chosen"]]
        assert steps and len(finish.token_ids) == chosen["num_tokens"]
        assert tiny_lm.decode(finish.token_ids) == chosen["text"] == finish.text
    elif STRATEGIES[strategy].family == "diffusion":
        assert trace.of_kind("diffusion_step") and finish.text == tiny_lm.decode(finish.token_ids)
    elif STRATEGIES[strategy].family == "longctx":  # what the model wrote, part by part (rag)
        assert [e.token_id for e in trace.of_kind("token")] == finish.token_ids
    elif strategy == "superposed":  # drafts are re-ranked each step: the text is the best draft at the end
        assert trace.of_kind("token")[-1].extra["drafts"][0]["token_ids"] == finish.token_ids
    else:
        assert trace.of_kind("beams")
    # Statistics count what ran: the events' forward passes are the model calls the LM made.
    assert stats(trace)["forward_passes"] == tiny_lm.forward_passes - calls_before
    assert Trace.from_json(trace.to_json()).events == trace.events


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_same_seed_gives_the_same_trace(tiny_lm, strategy):
    tiny_lm = model_for(strategy, tiny_lm)
    params = {"temperature": 1.5} if strategy == "sample" else {}
    a = run_to_trace(tiny_lm, prompt_for(strategy), strategy=strategy, params=params, max_new_tokens=10, seed=7)
    b = run_to_trace(tiny_lm, prompt_for(strategy), strategy=strategy, params=params, max_new_tokens=10, seed=7)
    assert untimed(a) == untimed(b)


@pytest.mark.parametrize("strategy", ["sample", "mirostat"])
def test_different_seeds_give_different_samples(tiny_lm, strategy):
    params = {"temperature": 2.0} if strategy == "sample" else {"tau": 6.0}
    texts = {tuple(run_to_trace(tiny_lm, PROMPT, strategy=strategy, params=params, max_new_tokens=10, seed=s).finish.token_ids)
             for s in range(4)}
    assert len(texts) > 1


def reference_logits(lm, ids: list[int]) -> torch.Tensor:
    """Next-token logits from a fresh full forward without any cache (V,)."""
    with torch.inference_mode():
        return lm.model(torch.tensor([ids])).logits[0, -1].float()


def test_recorded_probabilities_match_a_fresh_forward(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="sample", params={"top_k": 20, "temperature": 0.7},
                         max_new_tokens=8, seed=1)
    ids = list(trace.start.prompt_ids)
    for e in trace.of_kind("token"):
        logits = reference_logits(tiny_lm, ids)
        probs = torch.softmax(logits, -1)
        assert e.prob == pytest.approx(probs[e.token_id].item(), rel=1e-4)
        assert e.entropy == pytest.approx(sampling.entropy(logits).item(), rel=1e-4)
        assert e.top_ids[0] == int(probs.argmax())
        assert e.kept_size == 20
        final = torch.softmax(torch.topk(logits / 0.7, 20).values, -1)
        assert e.sampling_prob in [pytest.approx(p, rel=1e-4) for p in final.tolist()]
        ids.append(e.token_id)


def test_top_k_1_sampling_equals_greedy(tiny_lm):
    greedy = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=15)
    sampled = run_to_trace(tiny_lm, PROMPT, strategy="sample", params={"top_k": 1}, max_new_tokens=15, seed=5)
    assert sampled.finish.token_ids == greedy.finish.token_ids


def test_greedy_matches_generate_on_tiny_model(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=30)
    ids = trace.start.prompt_ids
    out = tiny_lm.model.generate(torch.tensor([ids]), max_new_tokens=30, do_sample=False)
    assert trace.finish.token_ids == out[0, len(ids):].tolist()


@pytest.mark.slow  # SmolLM2
def test_greedy_matches_generate_on_the_real_model(smol_lm):
    """The engine is faithful: token for token equal to transformers' generate (float32)."""
    prompt = "Explain in two sentences why the sky is blue."
    trace = run_to_trace(smol_lm, prompt, strategy="greedy", max_new_tokens=48)
    ids = trace.start.prompt_ids
    out = smol_lm.model.generate(torch.tensor([ids]), max_new_tokens=48, do_sample=False)
    expected = out[0, len(ids):].tolist()
    assert trace.finish.token_ids == expected[: len(trace.finish.token_ids)]
    assert len(trace.finish.token_ids) == len(expected)


@pytest.mark.slow  # SmolLM2
def test_real_model_answers_and_stops_at_eos(smol_lm):
    trace = run_to_trace(smol_lm, "What is the capital of France?", strategy="greedy", max_new_tokens=40)
    assert "Paris" in trace.finish.text
    assert trace.finish.stop_reason == "eos"
    assert trace.finish.token_ids[-1] in smol_lm.stop_ids


@pytest.mark.slow  # SmolLM2
def test_plain_text_prompt_skips_the_chat_template(smol_lm):
    chat = run_to_trace(smol_lm, "Hello", max_new_tokens=2)
    plain = run_to_trace(smol_lm, "Hello", max_new_tokens=2, chat=False)
    assert chat.start.chat and "<|im_start|>" in chat.start.prompt_text
    assert not plain.start.chat and plain.start.prompt_text == "Hello"


def reference_beam(lm, prompt_ids, num_beams, max_new_tokens, length_penalty=1.0):
    """Slow beam search: full recompute per beam, no cache; same rules as the engine."""
    stop = lm.stop_ids
    live, finished = [([], 0.0)], []
    norm = lambda s, n: s / (max(n, 1) ** length_penalty)
    for _ in range(max_new_tokens):
        cands = []
        for b, (seq, score) in enumerate(live):
            logprobs = torch.log_softmax(reference_logits(lm, prompt_ids + seq), -1)
            for t in range(logprobs.numel()):
                cands.append((score + logprobs[t].item(), b, t))
        cands.sort(key=lambda c: (-c[0], c[1] * 10**6 + c[2]))
        new_live = []
        for rank, (s, b, t) in enumerate(cands[: 2 * num_beams]):
            seq = live[b][0] + [t]
            if t in stop:
                if rank < num_beams:
                    finished.append((seq, norm(s, len(seq))))
            elif len(new_live) < num_beams:
                new_live.append((seq, s))
        finished = sorted(finished, key=lambda h: -h[1])[:num_beams]
        live = new_live
        best_possible = max(norm(s, len(q)) for q, s in live)
        if len(finished) >= num_beams and best_possible <= finished[-1][1]:
            break
    pool = finished + [(q, norm(s, len(q))) for q, s in live]
    return max(pool, key=lambda h: h[1])[0]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_beam_search_matches_a_slow_reference(tiny_lm, num_beams):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="beam", params={"num_beams": num_beams}, max_new_tokens=8)
    expected = reference_beam(tiny_lm, trace.start.prompt_ids, num_beams, 8)
    assert trace.finish.token_ids == expected
    steps = trace.of_kind("beams")
    assert all(len(s.beams) == num_beams for s in steps)
    for prev, cur in zip(steps, steps[1:]):  # lineage: each beam extends its parent by one token
        for beam in cur.beams:
            assert beam["token_ids"][:-1] == prev.beams[beam["parent"]]["token_ids"]


def test_one_beam_equals_greedy(tiny_lm):
    greedy = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=10)
    beam = run_to_trace(tiny_lm, PROMPT, strategy="beam", params={"num_beams": 1}, max_new_tokens=10)
    assert beam.finish.token_ids == greedy.finish.token_ids


def reference_contrastive(lm, prompt_ids, k, alpha, max_new_tokens):
    """Slow contrastive search: full recompute of every candidate, no cache."""
    ids = list(prompt_ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            out = lm.model(torch.tensor([ids]), output_hidden_states=True)
            context = out.hidden_states[-1][0]  # (T, D)
            top_probs, top_ids = torch.softmax(out.logits[0, -1].float(), -1).topk(k)
            scores = []
            for p, t in zip(top_probs.tolist(), top_ids.tolist()):
                h = lm.model(torch.tensor([ids + [t]]), output_hidden_states=True).hidden_states[-1][0, -1]
                sim = torch.nn.functional.cosine_similarity(context, h[None], dim=-1).max().item()
                scores.append((1 - alpha) * p - alpha * sim)
            ids.append(top_ids[max(range(k), key=lambda i: scores[i])].item())
            if ids[-1] in lm.stop_ids:
                break
    return ids[len(prompt_ids):]


def test_contrastive_search_matches_a_slow_reference(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="contrastive", params={"top_k": 4, "penalty_alpha": 0.6},
                         max_new_tokens=8)
    assert trace.finish.token_ids == reference_contrastive(tiny_lm, trace.start.prompt_ids, 4, 0.6, 8)


def test_contrastive_with_zero_penalty_is_greedy(tiny_lm):
    greedy = run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=10)
    cs = run_to_trace(tiny_lm, PROMPT, strategy="contrastive", params={"penalty_alpha": 0.0}, max_new_tokens=10)
    assert cs.finish.token_ids == greedy.finish.token_ids


def test_mirostat_updates_mu_from_the_observed_surprise(tiny_lm):
    params = {"tau": 4.0, "eta": 0.2}
    trace = run_to_trace(tiny_lm, PROMPT, strategy="mirostat", params=params, max_new_tokens=12, seed=2)
    tokens = trace.of_kind("token")
    assert tokens[0].extra["mu"] == pytest.approx(8.0)
    for e in tokens:
        surprise = -torch.log2(torch.tensor(e.sampling_prob)).item()
        assert e.extra["mu_next"] == pytest.approx(e.extra["mu"] - 0.2 * (surprise - 4.0), rel=1e-4, abs=1e-4)
    for a, b in zip(tokens, tokens[1:]):
        assert b.extra["mu"] == a.extra["mu_next"]


def test_should_stop_cancels_the_run(tiny_lm):
    seen = []  # `generate` asks once before the strategy starts, then greedy after each token
    events = list(generate(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=50,
                           should_stop=lambda: len(seen) >= 3 or seen.append(1)))
    finish = events[-1]
    assert finish.stop_reason == "cancelled"
    assert len(finish.token_ids) == 3


def test_closing_the_generator_stops_compute(tiny_lm):
    gen = generate(tiny_lm, PROMPT, strategy="sample", max_new_tokens=200, seed=0)
    for event in gen:
        if isinstance(event, TokenStep) and event.step == 2:
            break
    gen.close()
    calls = tiny_lm.forward_passes
    with pytest.raises(StopIteration):
        next(gen)
    assert tiny_lm.forward_passes == calls


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompt=""), "`prompt` is empty"),
        (dict(max_new_tokens=0), r"`max_new_tokens` must be an integer in \[1, 2048\], got 0"),
        (dict(max_new_tokens=10**6), "`max_new_tokens`"),
        (dict(strategy="nucleus"), "unknown strategy 'nucleus'"),
        (dict(strategy="sample", params={"top_p": 1.5}), r"`top_p` must be in \(0, 1\], got 1.5"),
        (dict(strategy="sample", params={"temperature": 0}), "`temperature`"),
        (dict(strategy="sample", params={"top_k": "many"}), "`top_k` must be an integer"),
        (dict(strategy="beam", params={"num_beams": 0}), "`num_beams`"),
        (dict(strategy="contrastive", params={"penalty_alpha": 2}), "`penalty_alpha`"),
        (dict(strategy="greedy", params={"top_p": 0.5}), "unknown parameter"),
        (dict(seed=-1), "`seed`"),
    ],
)
def test_bad_input_names_the_problem(tiny_lm, kwargs, message):
    args = dict(prompt=PROMPT) | kwargs
    prompt = args.pop("prompt")
    with pytest.raises(ValueError, match=message):
        list(generate(tiny_lm, prompt, **args))


def test_beam_steps_record_every_beam(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="beam", params={"num_beams": 4}, max_new_tokens=5)
    step = trace.of_kind("beams")[2]
    assert isinstance(step, BeamStep) and len(step.beams) == 4
    scores = [b["score"] for b in step.beams]
    assert scores == sorted(scores, reverse=True)
    assert all(len(b["token_ids"]) == 3 for b in step.beams)


def test_params_are_recorded_with_defaults(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="sample", params={"top_p": "0.8"}, max_new_tokens=2)
    assert trace.start.params == dataclasses.asdict(sampling.SamplingParams(top_p=0.8))


@pytest.mark.parametrize("strategy", ["greedy", "sample"])
def test_branch_continues_after_the_prefix(tiny_lm, strategy):
    """A branch from step 3 with the original token equals the original run's continuation (greedy),
    and numbering, text and statistics account for the prefix."""
    base = run_to_trace(tiny_lm, PROMPT, strategy=strategy, max_new_tokens=10, seed=4)
    prefix = base.finish.token_ids[:3]
    branch = run_to_trace(tiny_lm, PROMPT, strategy=strategy, max_new_tokens=7, seed=4, prefix_ids=prefix)
    tokens = branch.of_kind("token")
    assert tokens[0].step == 3 and branch.start.prefix_ids == prefix
    assert branch.finish.token_ids[:3] == prefix
    assert stats(branch)["num_tokens"] == len(branch.finish.token_ids) - 3
    if strategy == "greedy":
        assert branch.finish.token_ids == base.finish.token_ids
    alt = base.of_kind("token")[3].top_ids[1]  # the runner-up at step 3
    other = run_to_trace(tiny_lm, PROMPT, strategy=strategy, max_new_tokens=5, prefix_ids=prefix + [alt])
    assert other.finish.token_ids[:4] == prefix + [alt]
    with pytest.raises(ValueError, match="`prefix_ids`"):
        list(generate(tiny_lm, PROMPT, prefix_ids=[10**9]))


@pytest.mark.parametrize("strategy, params", [
    ("greedy", {}), ("sample", {"top_k": 20, "top_p": 0.9}), ("mirostat", {}), ("contrastive", {"top_k": 8}),
    ("beam", {"num_beams": 3}), ("speculative", {"drafter": "token-recycling", "tree": "static", "width": 8}),
])
def test_a_vocabulary_smaller_than_the_recorded_alternatives(strategy, params):
    """A 6-token model: every strategy records at most 6 alternatives instead of crashing."""
    from decoding.lm import LM
    from markov import markov_llama, word_tokenizer

    tokenizer = word_tokenizer(["a", "b", "c"])
    logits = torch.full((6, 6), -1e4)
    logits[:, 3:] = torch.tensor([1.0, 0.5, -0.5])
    lm = LM(markov_llama(logits, tokenizer, name="markov-6"))
    trace = run_to_trace(lm, "a b", strategy=strategy, params=params, max_new_tokens=4, seed=0, chat=False)
    assert 1 <= len(trace.finish.token_ids) <= 4 and set(trace.finish.token_ids) <= {2, 3, 4, 5}  # words or </s>
    for event in trace.of_kind("token"):
        assert len(event.top_ids) == 6 and sorted(event.top_ids) == list(range(6))
