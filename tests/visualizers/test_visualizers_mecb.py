"""The MEC-B view (visualizers/mecb.py): the encoder and the joint at the chosen rate with their numbers in
the titles, the rate trade-off for both encoders; and the Markov coding game's episode and trade-off."""

import pytest
import torch

from decoding.speculative.mcg import play, tradeoff
from decoding.speculative.mecb import mecb
from test_visualizers_speculative import build_trace, rounds_fixture
from visualizers.coupling import example_position
from visualizers.mecb import game_figure, mecb_figure


@pytest.mark.parametrize("rate", [0.0, 1.0, 3.0])
def test_the_example_shows_the_encoder_the_joint_and_the_trade_off(rate):
    fig = mecb_figure(rate=rate)
    position = example_position()
    c = mecb(position.q, position.p, rate)
    maps = [t for t in fig.data if t.type == "heatmap"]
    assert [m.name for m in maps] == ["encoder", "MEC-B"]
    assert torch.allclose(torch.tensor(maps[1].z, dtype=torch.float64), c.joint)
    assert torch.allclose(torch.tensor(maps[0].z, dtype=torch.float64), c.encoder)
    titles = [a.text for a in fig.layout.annotations]
    assert f"H(T) = {abs(c.code_entropy):.2f} ≤ R = {rate:.2f}" in titles[0] and f"I = {c.info_xy:.2f} bits" in titles[1]
    lines = {t.name for t in fig.data if t.type == "scatter"}
    assert {"I(draft; output), greedy EBIM (Algorithm 1)", "I(draft; output), uniform quantiser (Algorithm 5)",
            "R shown"} <= lines
    assert "Ebrahimi, Chen and Khisti 2024" in fig.layout.title.text and "built-in example" in fig.layout.title.text


def test_a_rounds_position_is_used_when_it_recorded_q():
    fig = mecb_figure(build_trace(rounds_fixture()), 0, -1, rate=0.5)
    assert "round 0" in fig.layout.title.text and fig.layout.yaxis.ticktext[0] == "' the'"


def test_the_game_figure_draws_the_path_the_beliefs_and_both_curves():
    prior = [1 / 16] * 16
    labels = [chr(65 + i) for i in range(16)]
    episode = play(3, prior, 4.0, 1.0, torch.Generator().manual_seed(0))
    curves = tradeoff(prior, [4.0], [0.3, 1.0], episodes=8, methods=("greedy", "uniform"))
    fig = game_figure(episode, prior, labels, curves, 1.0)
    beliefs = next(t for t in fig.data if t.type == "heatmap")
    assert len(beliefs.z) == len(episode.actions) + 1 and list(beliefs.x) == labels
    assert "message D" in fig.layout.title.text and "decoded D ✓" in fig.layout.title.text
    assert {t.name for t in fig.data if t.type == "scatter"} >= {"greedy EBIM (Algorithm 1)",
                                                                 "uniform quantiser (Algorithm 5)"}
