"""visualizers/judge.py: accuracy against k per temperature (model lines, measured markers) and k*(T)."""

from __future__ import annotations

from visualizers.judge import MAX_CURVES, accuracy_figure, tiny_math_figure


def test_stars_mark_the_best_k_and_a_flat_curve_has_none():
    ks = [1, 2, 3, 4]
    fig = accuracy_figure(ks, {"0": [0.5, 0.7, 0.6, 0.55], "inf": [0.5] * 4}, {"0": [0.5, 0.72, 0.61, 0.5]})
    stars = [d for d in fig.data if d.marker is not None and d.marker.symbol == "star" and d.mode == "markers"]
    assert [(list(d.x), list(d.y)) for d in stars] == [([2], [0.7])]  # T = inf: a uniform pick, no k*
    k_star = {d.name: list(d.y) for d in fig.data if d.name in ("k* (model)", "k* (measured)")}
    assert k_star == {"k* (model)": [2], "k* (measured)": [2]}


def test_the_benchmarks_k_star_wins_over_rounded_ties_and_extra_curves_are_said():
    ks = [1, 2, 3]
    fig = accuracy_figure(ks, {"0": [0.5, 0.6, 0.6]}, k_stars={"0": {"predicted": [3, False]}})
    assert [list(d.y) for d in fig.data if d.name == "k* (model)"] == [[3]]
    many = {f"{t}": [0.5, 0.6, 0.7] for t in range(MAX_CURVES + 2)}
    assert "2 more temperatures not drawn" in accuracy_figure(ks, many).layout.title.text
    assert "no tiny-math result" in tiny_math_figure(None).layout.title.text
