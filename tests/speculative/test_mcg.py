"""The rate-limited Markov coding game (decoding/speculative/mcg.py): the same seed plays the same episode,
the actions keep exactly the policy's law (the coupling's columns), a message with its own code word is
decoded exactly once the policy is random enough, and a lower rate caps the accuracy at what the code words
can tell apart."""

from __future__ import annotations

import pytest
import torch

from decoding.speculative.coupling import greedy_coupling
from decoding.speculative.mcg import ACTIONS, Grid, evaluate, play, soft_policy, tradeoff

PRIOR = [1 / 16] * 16


def test_the_soft_policy_is_a_law_per_state_and_sharpens_as_it_cools():
    grid = Grid()
    for tau in (0.05, 0.3, 2.0):
        policy = soft_policy(grid, tau)
        assert len(policy) == 16 and all(len(row) == len(ACTIONS) for row in policy)
        assert all(abs(sum(row) - 1) < 1e-12 and min(row) >= 0 for row in policy)
    cold, hot = soft_policy(grid, 0.05)[0], soft_policy(grid, 2.0)[0]
    assert cold[1] == pytest.approx(0.5, abs=1e-6) and cold[3] == pytest.approx(0.5, abs=1e-6)  # down or right
    assert max(hot) - min(hot) < 0.05  # nearly uniform


def test_the_same_seed_plays_the_same_episode():
    first = play(5, PRIOR, 2.0, 0.3, torch.Generator().manual_seed(7))
    again = play(5, PRIOR, 2.0, 0.3, torch.Generator().manual_seed(7))
    assert first == again
    assert evaluate(PRIOR, 2.0, 0.3, episodes=16, seed=3) == evaluate(PRIOR, 2.0, 0.3, episodes=16, seed=3)


def test_every_action_keeps_the_policys_law_and_the_belief_is_the_posterior():
    """Replay an episode: at each step the coupling of belief and policy has the policy as its column sums (the
    action, seen from outside, follows the policy exactly), and the next belief is the coupling's column."""
    grid, tau = Grid(), 0.5
    policy = soft_policy(grid, tau)
    episode = play(9, PRIOR, 3.0, tau, torch.Generator().manual_seed(1))
    for state, action, belief, after in zip(episode.states, episode.actions, episode.beliefs, episode.beliefs[1:]):
        joint = greedy_coupling(belief, policy[state])
        assert torch.allclose(joint.sum(0), torch.tensor(policy[state], dtype=torch.float64), atol=1e-12)
        assert torch.allclose(joint.sum(1), torch.tensor(belief, dtype=torch.float64), atol=1e-12)
        posterior = joint[:, action] / joint[:, action].sum()
        assert torch.allclose(posterior, torch.tensor(after, dtype=torch.float64), atol=1e-12)
        assert joint[episode.code, action] > 0  # the agent only takes actions its code word allows
    assert episode.states[0] == 0 and len(episode.states) == len(episode.actions) + 1
    assert episode.ret == -len(episode.actions)
    beliefs = episode.message_beliefs(PRIOR)
    assert all(abs(sum(b) - 1) < 1e-9 for b in beliefs) and beliefs[0] == pytest.approx(PRIOR)


@pytest.mark.parametrize("tau", [0.6, 1.0])
def test_at_full_rate_every_message_is_decoded_exactly(tau):
    """R = 4 bits = H(M): every message has its own code word; a random enough policy sends it in full."""
    for message in range(16):
        episode = play(message, PRIOR, 4.0, tau, torch.Generator().manual_seed(message))
        assert len(episode.groups) == 16 and episode.decoded == message
        assert max(episode.beliefs[-1]) == pytest.approx(1.0)


def test_a_lower_rate_caps_the_accuracy_and_algorithm_1_beats_uniform_quantisation():
    """Messages that share a code word cannot be told apart: the receiver names one per code word, so only the
    K messages it names can be decoded right (accuracy <= K / 16 under the uniform prior)."""
    for rate in (1.0, 2.0):
        for method in ("greedy", "uniform"):
            named = set()
            for message in range(16):
                episode = play(message, PRIOR, rate, 1.0, torch.Generator().manual_seed(message), method=method)
                named.add(episode.decoded)
                assert episode.correct <= (message == min(episode.groups[episode.code]))  # ties: the first
            assert len(named) <= len(episode.groups) and len(episode.groups) <= 2 ** rate + (method == "greedy") * 16
            assert evaluate(PRIOR, rate, 1.0, episodes=16, method=method)["code_entropy"] <= rate + 1e-9
    curves = tradeoff(PRIOR, [2.0], [0.3, 1.0], episodes=48, seed=0, methods=("greedy", "uniform"))
    by = {(p["method"], p["temperature"]): p for p in curves}
    assert by["greedy", 1.0]["accuracy"] > by["uniform", 1.0]["accuracy"]
    assert by["greedy", 0.3]["mean_return"] > by["greedy", 1.0]["mean_return"]  # a cooler policy pays more


def test_bad_arguments_are_refused():
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"`message` must be an integer in \[0, 15\]"):
        play(16, PRIOR, 1.0, 0.3, gen)
    with pytest.raises(ValueError, match="`temperature` must be a number > 0"):
        play(0, PRIOR, 1.0, 0.0, gen)
    with pytest.raises(ValueError, match="`rate` must be a number of bits >= 0"):
        play(0, PRIOR, -1.0, 0.3, gen)
    with pytest.raises(ValueError, match=r"`size` must be an integer in \[2, 8\]"):
        Grid(size=1)
