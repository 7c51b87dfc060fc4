"""Momentum decoding, AdaDec and superposed decoding: their defining properties on real (tiny) models."""

import pytest
import torch

from decoding import run_to_trace
from decoding.token.adadec import MAX_THRESHOLD, rerank
from decoding.events import Trace
from decoding.token.momentum import MomentumParams, loop_depth, momentum_choice
from decoding.token.superposed import NGrams, superposed_step

PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def greedy_ids(tiny_lm):
    return run_to_trace(tiny_lm, PROMPT, strategy="greedy", max_new_tokens=16).finish.token_ids


@pytest.mark.parametrize("strategy, params", [("momentum", {"alpha": 0.0}), ("adadec", {"threshold": MAX_THRESHOLD}),
                                              ("superposed", {"num_drafts": 1})])
def test_the_neutral_setting_is_greedy(tiny_lm, greedy_ids, strategy, params):
    trace = run_to_trace(tiny_lm, PROMPT, strategy=strategy, params=params, max_new_tokens=16)
    assert trace.finish.token_ids == greedy_ids
    assert all(e.forward_passes == 1 for e in trace.of_kind("token"))  # no extra model call when neutral


def test_loop_depth_counts_the_longest_repeated_ngram():
    assert loop_depth([1, 2, 3, 1, 2], 3, 5) == 3  # "1 2 3" again
    assert loop_depth([1, 2, 3, 1, 2], 9, 5) == 0  # a new node
    assert loop_depth([1, 2, 3, 1, 2], 3, 2) == 2  # saturates at max_ngram
    assert loop_depth([5, 1], 1, 5) == 1


def test_momentum_penalises_closing_a_loop():
    probs = torch.tensor([0.5, 0.4, 0.1])  # token 0 would repeat "7 0", token 1 is new
    ids = [7, 0, 3, 7]
    greedy = momentum_choice(probs, ids, MomentumParams(alpha=0.0, top_k=3, max_ngram=4))
    assert greedy["candidates"][greedy["chosen"]] == 0
    pushed = momentum_choice(probs, ids, MomentumParams(alpha=0.3, top_k=3, max_ngram=4))
    assert pushed["depths"][pushed["candidates"].index(0)] == 2
    assert pushed["candidates"][pushed["chosen"]] == 1


@pytest.mark.slow  # the real model tiny-ar
def test_momentum_breaks_greedy_loops_on_tiny_ar():
    g = run_to_trace("tiny-ar", "the cat", strategy="greedy", max_new_tokens=40, chat=False)
    m = run_to_trace("tiny-ar", "the cat", strategy="momentum", params={"alpha": 0.5}, max_new_tokens=40, chat=False)
    deep = [e.extra["depth"] for e in m.of_kind("token")]
    assert m.finish.token_ids != g.finish.token_ids
    assert all(e.extra["candidates"][e.extra["chosen"]] == e.token_id for e in m.of_kind("token"))
    assert max(deep) <= 5


def test_adadec_rerank_is_the_mean_logprob():
    scores = rerank(torch.tensor([-0.1, -1.0]), torch.tensor([[-3.0, -3.0], [-0.1, -0.1]]))
    assert torch.allclose(scores, torch.tensor([-6.1 / 3, -1.2 / 3]))
    assert int(scores.argmax()) == 1  # the less probable candidate wins on its lookahead


def slow_adadec(lm, prompt_ids, threshold, k, lookahead, steps):
    """Reference without a cache: every score from a full forward of the whole sequence."""
    ids = list(prompt_ids)
    for _ in range(steps):
        logits = lm.forward(torch.tensor([ids])).logits[0, -1]
        logprobs = torch.log_softmax(logits, -1)
        if -(logprobs.exp() * logprobs).sum() > threshold:
            scores = []
            for lp, c in zip(*logprobs.topk(k)):
                seq, total = ids + [int(c)], [float(lp)]
                for _ in range(lookahead):
                    nxt = torch.log_softmax(lm.forward(torch.tensor([seq])).logits[0, -1], -1)
                    total.append(float(nxt.max()))
                    seq.append(int(nxt.argmax()))
                scores.append(sum(total) / len(total))
            ids.append(int(logprobs.topk(k).indices[int(torch.tensor(scores).argmax())]))
        else:
            ids.append(int(logits.argmax()))
    return ids[len(prompt_ids):]


def test_adadec_matches_a_slow_reference_and_counts_lookahead_calls(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="adadec", params={"threshold": 0.0, "top_k": 3, "lookahead": 2},
                         max_new_tokens=8)
    steps = trace.of_kind("token")
    assert trace.finish.token_ids == slow_adadec(tiny_lm, trace.start.prompt_ids, 0.0, 3, 2, 8)
    assert all(e.extra["paused"] for e in steps)
    # prefill + 2 lookahead calls, then 2 per pause (the first lookahead call fed the winner)
    assert [e.forward_passes for e in steps] == [3] + [2] * 7


def test_superposed_step_keeps_the_k_best_pairs_and_uses_ngrams():
    probs = torch.tensor([0.6, 0.3, 0.1])
    drafts = [[0, 1], [0, 2]]
    plain = superposed_step(torch.tensor([0.5, 0.5]), probs, drafts, NGrams([]), 0.0, 2)
    assert [(d, t) for d, t, _ in plain] == [(0, 0), (1, 0)]
    ngrams = NGrams([2, 1, 2, 1])  # after 2 comes 1
    mixed = superposed_step(torch.tensor([0.5, 0.5]), probs, drafts, ngrams, 0.9, 2)
    assert (1, 1) in [(d, t) for d, t, _ in mixed]


def test_superposed_uses_one_pass_per_step_for_k_drafts(tiny_lm):
    trace = run_to_trace(tiny_lm, PROMPT, strategy="superposed", params={"num_drafts": 3}, max_new_tokens=10)
    steps = trace.of_kind("token")
    assert [e.forward_passes for e in steps] == [1] * 10
    assert all(len(e.extra["drafts"]) == 3 for e in steps[1:])
    assert trace.finish.token_ids == steps[-1].extra["drafts"][0]["token_ids"]
    probs = [d["prob"] for d in steps[-1].extra["drafts"]]
    assert probs == sorted(probs, reverse=True)


@pytest.mark.parametrize("strategy", ["momentum", "adadec", "superposed"])
def test_traces_round_trip_through_json(tiny_lm, strategy):
    trace = run_to_trace(tiny_lm, PROMPT, strategy=strategy, params={"threshold": 0.0} if strategy == "adadec" else {},
                         max_new_tokens=6)
    back = Trace.from_json(trace.to_json())
    assert [e.to_dict() for e in back.events] == [e.to_dict() for e in trace.events]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["momentum"])  # adadec and superposed run on real models in the preset tests
def test_the_cli_runs_a_new_method_on_the_default_model(strategy, capsys):
    """The real embedded default model (SmolLM2-135M), through `python -m decoding run`."""
    import json

    from decoding.__main__ import main as cli

    code = cli(["run", "--strategy", strategy, "--prompt", "The best thing about", "--max-new-tokens", "6",
                "--set", "threshold=0" if strategy == "adadec" else "top_k=3" if strategy == "momentum" else "num_drafts=2",
                "--json", "--quiet"])
    assert code in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert len(out["token_ids"]) >= 1 and out["text"].strip()


def run_preset(name, **overrides):
    from decoding.presets import find_preset

    p = find_preset("playground", name)
    settings = dict(strategy=p.strategy, params=p.params, max_new_tokens=p.max_new_tokens, chat=p.chat, seed=p.seed)
    return run_to_trace(p.model, p.prompt, **(settings | overrides))


def loop_steps(trace):
    """Generated tokens that repeat an n-gram of 2 or more tokens already in prompt + text."""
    ids, count = list(trace.start.prompt_ids), 0
    for t in trace.finish.token_ids:
        count += loop_depth(ids, t, 5) >= 2
        ids.append(t)
    return count


@pytest.mark.slow
def test_the_momentum_preset_loops_far_less_than_greedy_on_the_base_model():
    """What the note says: greedy loops on this prompt, momentum takes far fewer loop steps."""
    momentum = run_preset("08-momentum-breaks-greedy-loops")
    greedy = run_preset("08-momentum-breaks-greedy-loops", strategy="greedy", params={})
    assert momentum.start.model == greedy.start.model == "gemma3-270m"
    assert loop_steps(greedy) >= 20  # measured: 33 of 80
    assert loop_steps(momentum) * 3 <= loop_steps(greedy)  # measured: 3


@pytest.mark.slow
def test_the_adadec_and_superposed_presets_show_pauses_and_one_pass_per_step():
    adadec = run_preset("09-adadec-pauses-when-unsure")
    steps = adadec.of_kind("token")
    pauses = [e for e in steps if e.extra["paused"]]
    assert pauses and len(pauses) < len(steps)  # it pauses only where unsure
    # lookahead 3: 2 extra calls per pause (its first call also feeds the winner), 3 at the last step (no next call)
    assert sum(e.forward_passes for e in steps) == len(steps) + 2 * len(pauses) + steps[-1].extra["paused"]
    superposed = run_preset("11-superposed-drafts-in-one-pass")
    steps = superposed.of_kind("token")
    assert sum(e.forward_passes for e in steps) == len(steps)
    drafts = [d["text"] for d in steps[-1].extra["drafts"]]
    assert len(drafts) == 3 and len(set(drafts)) == 3
