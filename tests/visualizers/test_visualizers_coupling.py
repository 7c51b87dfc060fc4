"""The coupling view (visualizers/coupling.py): one heat map per verification rule with its acceptance
in the title, and acceptance against k; from a round's recorded p and q or the built-in example."""

import pytest
import torch

from decoding.speculative.coupling import acceptance_by_k, couplings
from test_visualizers_speculative import build_trace, dist, node, rounds_fixture, spec_round
from visualizers.coupling import coupling_figure, example_position, round_position


def heatmaps(fig):
    return [t for t in fig.data if t.type == "heatmap"]


@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_example_figure_has_a_heat_map_per_rule_and_acceptance_by_k(k):
    fig = coupling_figure(k=k)
    position = example_position()
    rules = couplings(position.p, position.q, k)
    maps = heatmaps(fig)
    assert [m.name for m in maps] == ["speculative sampling", "RSD / SpecInfer", "SpecTr (K-SEQ)",
                                      "min-entropy coupling"]
    titles = [a.text for a in fig.layout.annotations]
    for title, c, m in zip(titles, rules, maps):
        assert f"accept {c.acceptance:.3f}" in title
        assert torch.allclose(torch.tensor(m.z, dtype=torch.float64), c.matched)
    assert f"k = {k}" in titles[1] and "ρ*" in titles[2] and "H(draft, output)" in titles[3]
    bars = {t.name: list(t.y) for t in fig.data if t.type == "bar"}
    by_k = acceptance_by_k(position.p, position.q)
    assert bars["RSD / SpecInfer"] == pytest.approx(by_k["rsd"]) and bars["SpecTr (K-SEQ)"] == pytest.approx(by_k["spectr"])
    assert "built-in example" in fig.layout.title.text
    assert fig.layout.xaxis5.title.text == "drafts k" and fig.layout.yaxis.title.text == "draft"
    assert f"{k} (shown)" in " ".join(fig.layout.xaxis5.ticktext)


def test_a_rounds_position_uses_its_recorded_top_tokens():
    trace = build_trace(rounds_fixture())
    position = round_position(trace, 0, -1)  # p: the .7, a .2, my .05; q: the .6, a .3, one .08
    assert position.labels == ["' the'", "' a'", "' one'", "' my'"] and "round 0" in position.source
    assert position.p.tolist() == pytest.approx([0.7 / 0.95, 0.2 / 0.95, 0.0, 0.05 / 0.95])
    assert position.q.tolist() == pytest.approx([0.6 / 0.98, 0.3 / 0.98, 0.08 / 0.98, 0.0])
    assert "95% of p, 98% of q" in position.note and "Σ min(p, q) = 0.831" in position.note
    assert len(round_position(trace, 0, -1, tokens=2).labels) == 2
    fig = coupling_figure(trace, 0, 0, k=3)  # after node 0 ' the'
    assert "round 0, after node 0" in fig.layout.title.text and len(heatmaps(fig)) == 4
    assert heatmaps(fig)[0].y is not None and fig.layout.yaxis.ticktext[0] == "' cat'"


def test_without_a_recorded_q_the_example_is_shown_with_a_note():
    r0 = spec_round(0, 0, [node(0, -1, 1, "a", "accepted", q=1.0, p=0.6, u=None, accept_prob=1.0)], "c",
                    "correction", drafter="prompt-lookup", dists=[dist(-1, [("a", 0.6), ("z", 0.3)], [], 0.6)])
    fig = coupling_figure(build_trace([r0]), 0, -1)
    assert "recorded no draft distribution" in fig.layout.title.text and "built-in example" in fig.layout.title.text
    assert round_position(build_trace([r0]), 0, -1) is None


@pytest.mark.parametrize("k", [0, 5, 2.5, True])
def test_bad_k_is_refused(k):
    with pytest.raises(ValueError, match=r"`k` must be an integer in \[1, 4\]"):
        coupling_figure(k=k)
