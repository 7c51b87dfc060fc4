"""Tests for the inference-time scaling visualizers on hand-made ParticleStep sequences (figure objects
and HTML, no pixels, no model).

The fixture: N = 4 particles, 4 steps. After step 1 the particles are resampled with ancestors
[2, 2, 1, 1] (slots 0 and 3 die; new slots 0, 1 continue old 2, new 2, 3 continue old 1). Slot 2
finishes at step 2 with answer "42" and is chosen at the end. Slot 3's text contains "<script>".
"""

import re

import plotly.graph_objects as go
import pytest

from decoding.events import ParticleStep
from visualizers.particles import (
    COLORS,
    budget_figure,
    chosen_path,
    chosen_slot,
    choice_html,
    lineage_figure,
    particles_html,
    scaling_summary_html,
    slot_color,
    surviving,
    weights_figure,
)

N = 4
WEIGHTS = [[0.1, 0.4, 0.4, 0.1], [0.05, 0.45, 0.45, 0.05], [0.2, 0.3, 0.4, 0.1], [0.1, 0.2, 0.6, 0.1]]
PARENTS = [[-1] * N, [0, 1, 2, 3], [2, 2, 1, 1], [0, 1, 2, 3]]
ANCESTORS = [[0, 1, 2, 3], [2, 2, 1, 1], [0, 1, 2, 3], [0, 1, 2, 3]]
RESAMPLED = [False, True, False, False]


def make_steps(ancestors=ANCESTORS, resampled=RESAMPLED, extra=None):
    steps, texts, spent = [], [""] * N, 0
    for t in range(len(WEIGHTS)):
        particles, new_texts = [], []
        for i in range(N):
            parent = PARENTS[t][i]
            before = texts[i]  # new slot i's text: old slot ancestors[i]'s (the parent's)
            finished_before = t == 3 and i == 2
            step_text = "" if finished_before else ("<script>x</script>" if (t, i) == (1, 3) else f" s{t}.{i}")
            text = before + step_text
            finished = (t, i) in {(2, 2), (3, 2)}
            spent += len(step_text) // 2
            particles.append({"id": i, "parent": parent, "text": text, "step_text": step_text, "steps": t + 1,
                              "reward": round(0.5 + 0.1 * i, 2), "detail": f"rule<{i}>", "score": 0.1 * (t + i),
                              "weight": WEIGHTS[t][i], "finished": finished, "num_tokens": 2 * (t + 1),
                              "answer": "42" if finished else None})
            new_texts.append(text)
        w = WEIGHTS[t]
        steps.append(ParticleStep(step=t, method="particle-filter", particles=particles, ancestors=ancestors[t],
                                  resampled=resampled[t], weights_after=[1 / N] * N if resampled[t] else w,
                                  ess=1 / sum(x * x for x in w), tokens_spent=spent, elapsed_s=0.1 * (t + 1),
                                  forward_passes=2, extra=dict(extra or {})))
        # slot j after this step continues old slot ancestors[j]
        texts = [new_texts[a] for a in ancestors[t]]
    return steps


FINISH = {"method": "particle-filter", "chosen": 2, "answer": "42", "votes": {"41": 0.3, "42": 0.7},
          "particles": [{"id": 2, "text": "...", "weight": 0.6, "score": 0.5, "answer": "42", "finished": True,
                         "num_tokens": 8}]}


@pytest.fixture
def steps():
    return make_steps()


def by_name(fig, name):
    return next(t for t in fig.data if t.name == name)


def segments(t):
    x, y = list(t.x), list(t.y)
    return {(x[i], y[i], x[i + 1], y[i + 1]) for i in range(0, len(x), 3)}


# ---------------------------------------------------------------- fixture sanity


def test_fixture_parents_follow_ancestors(steps):
    for prev, nxt in zip(steps, steps[1:]):
        assert [p["parent"] for p in nxt.particles] == prev.ancestors
        for p in nxt.particles:  # the text grows from the parent's text
            assert p["text"].startswith(prev.particles[p["parent"]]["text"])


# ---------------------------------------------------------------- weights and ESS


def test_weights_one_bar_trace_per_slot_with_slot_colours(steps):
    fig = weights_figure(steps)
    bars = [t for t in fig.data if isinstance(t, go.Bar)]
    assert [t.name for t in bars] == [f"slot {i}" for i in range(N)]
    for i, t in enumerate(bars):
        assert t.marker.color == slot_color(i)
        assert list(t.x) == [0, 1, 2, 3]
        assert list(t.y) == pytest.approx([w[i] for w in WEIGHTS])
        assert [c[1] for c in t.customdata] == [format(0.5 + 0.1 * i, ".3g")] * 4  # reward in the hover
    assert "&lt;script&gt;" in by_name(fig, "slot 3").customdata[1][2]  # step text, escaped for plotly
    assert fig.layout.barmode == "stack"
    assert len({slot_color(i) for i in range(N)}) == N


def test_weights_resampling_marker_and_line_at_resampled_steps(steps):
    fig = weights_figure(steps)
    marker = by_name(fig, "resampled")
    assert list(marker.x) == [s.step for s in steps if s.resampled] == [1]
    assert list(marker.text) == ["resampled"]
    assert [tuple(c) for c in marker.customdata] == [(2, 4)]  # 2 distinct slots continue
    line = by_name(fig, "resampling")  # one trace for every line (issue 25), no layout shapes
    assert list(line.x) == [1.5, 1.5, None] and fig.layout.shapes == ()  # between step 1 and step 2
    assert line.line.dash == "dash"


def test_weights_ess_line_n_and_threshold(steps):
    fig = weights_figure(steps)
    ess = by_name(fig, "ESS")
    assert list(ess.y) == pytest.approx([s.ess for s in steps])
    assert ess.yaxis == "y2" and ess.xaxis == "x2"
    assert set(by_name(fig, f"N = {N}").y) == {N}
    assert not any("resample below" in (t.name or "") for t in fig.data)
    fig2 = weights_figure(make_steps(extra={"ess_threshold": 0.5}))
    assert set(by_name(fig2, "resample below 0.5·N").y) == {0.5 * N}
    assert fig2.layout.xaxis2.title.text == "step" and fig2.layout.yaxis2.title.text == "ESS"


def test_weights_empty_and_single_step(steps):
    empty = weights_figure([])
    assert len(empty.data) == 0 and "waiting" in empty.layout.annotations[0].text
    one = weights_figure(steps[:1])
    assert len([t for t in one.data if isinstance(t, go.Bar)]) == N
    assert list(by_name(one, "resampled").x) == [] and list(by_name(one, "ESS").x) == [0]


# ---------------------------------------------------------------- lineage


def test_surviving_hand_computed(steps):
    # last step keeps all; step 2's slots continue step 1's slots 2, 2, 1, 1; slots 0 and 3 of step 1 die,
    # and step 1 continued step 0 one-to-one.
    assert surviving(steps) == [{1, 2}, {1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3}]
    # a final resampling onto slot 0 only: step 2's slot 0 continued step 1's slot 2
    final = make_steps(ancestors=ANCESTORS[:3] + [[0, 0, 0, 0]], resampled=[False, True, False, True])
    assert surviving(final) == [{2}, {2}, {0}, {0}]
    assert surviving([]) == []
    assert surviving(steps[:1]) == [{0, 1, 2, 3}]


def test_lineage_dead_nodes_grey_and_edges_follow_parents(steps):
    fig = lineage_figure(steps, FINISH)
    dead = by_name(fig, "dead particle")
    assert dead.marker.color == COLORS["dead"]
    assert set(zip(dead.x, dead.y)) == {(0, 0), (0, 3), (1, 0), (1, 3)}
    live = by_name(fig, "particle")
    assert len(live.x) == 4 * N - 4
    assert list(live.marker.color) == [p["weight"] for s in steps for p in s.particles if (s.step, p["id"]) not in
                                       {(0, 0), (0, 3), (1, 0), (1, 3)}]
    assert segments(by_name(fig, "dead branch")) == {(-1, 1.5, 0, 0), (-1, 1.5, 0, 3), (0, 0, 1, 0), (0, 3, 1, 3)}
    assert by_name(fig, "dead branch").line.color == COLORS["dead"]
    assert by_name(fig, "dead branch").line.width < by_name(fig, "lineage").line.width
    assert (1, 2, 2, 0) in segments(by_name(fig, "lineage"))  # step 2 slot 0 continues step 1 slot 2
    # finished particles are squares
    symbols = dict(zip(zip(live.x, live.y), live.marker.symbol))
    assert {xy for xy, s in symbols.items() if s == "square"} == {(2, 2), (3, 2)}


def test_lineage_chosen_path_highlighted(steps):
    assert chosen_path(steps, 2) == [(0, 1), (1, 1), (2, 2), (3, 2)]
    fig = lineage_figure(steps, FINISH)
    chosen = by_name(fig, "chosen")
    assert list(zip(chosen.x, chosen.y)) == [(0, 1), (1, 1), (2, 2), (3, 2)]
    path = by_name(fig, "chosen path")
    assert segments(path) == {(-1, 1.5, 0, 1), (0, 1, 1, 1), (1, 1, 2, 2), (2, 2, 3, 2)}
    assert path.line.color == COLORS["chosen"] and path.line.width > by_name(fig, "lineage").line.width
    # after a final resampling, "chosen" indexes the new slots: new slot 0 continues last-step slot 2
    final = make_steps(ancestors=ANCESTORS[:3] + [[2, 2, 1, 2]], resampled=[False, True, False, True])
    assert chosen_slot(final, {"chosen": 0}) == 2 and chosen_slot(final, {"chosen": 2}) == 1
    assert chosen_slot(steps, FINISH) == 2 and chosen_slot(steps, None) is None
    moved = by_name(lineage_figure(final, {"chosen": 0}), "chosen")
    assert list(zip(moved.x, moved.y)) == [(0, 1), (1, 1), (2, 2), (3, 2)]
    plain = lineage_figure(steps)  # while streaming: no choice yet
    assert list(by_name(plain, "chosen").x) == [] and list(by_name(plain, "chosen path").x) == []


def test_lineage_empty_and_one_step(steps):
    assert len(lineage_figure([]).data) == 0
    fig = lineage_figure(steps[:1], {"chosen": 1})
    assert len(by_name(fig, "particle").x) == N and len(by_name(fig, "dead particle").x) == 0
    assert list(zip(by_name(fig, "chosen").x, by_name(fig, "chosen").y)) == [(0, 1)]


# ---------------------------------------------------------------- HTML


def cards(html_text):
    """(class, slot) of every particle card."""
    return [(cls, int(slot)) for cls, slot in re.findall(r'<div class="(card[^"]*)" data-slot="(\d+)"', html_text)]


def test_particles_html_bars_escape_highlight_and_dim(steps):
    out = particles_html(steps[1], chosen=2)
    widths = [float(w) for w in re.findall(r'class="fill" style="width:([\d.]+)%', out)]
    assert widths == pytest.approx([100 * w for w in WEIGHTS[1]])
    assert "<script>" not in out and "&lt;script&gt;x&lt;/script&gt;" in out
    assert "rule&lt;3&gt;" in out  # reward detail escaped
    assert "<mark> s1.1</mark>" in out  # this step's addition highlighted at the end
    classes = {slot: cls for cls, slot in cards(out)}
    assert classes == {0: "card dead", 1: "card", 2: "card chosen", 3: "card dead"}  # 0, 3 dropped
    assert "resampled: 2 of 4 slots continue" in out


def test_particles_html_finished_badge_and_zero_weight(steps):
    out = particles_html(steps[2])
    assert out.count('class="badge">finished') == 1 and "answer: 42" in out
    zero = ParticleStep(step=0, method="best-of-n", particles=[dict(steps[0].particles[0], weight=0.0),
                                                               dict(steps[0].particles[1], weight=1.0)],
                        ancestors=[0, 1], resampled=False, weights_after=[0.0, 1.0], ess=1.0, tokens_spent=4,
                        elapsed_s=0.1)
    classes = [cls for cls, _ in cards(particles_html(zero))]
    assert classes == ["card dead", "card"]
    assert "waiting" in particles_html(None)


def test_choice_html_tally_and_rule():
    out = choice_html(FINISH)
    assert "weighted majority" in out and '<span class="ans">42</span>' in out
    assert "rule: highest final weight" in choice_html(dict(FINISH, rule="highest final weight"))  # the run's own
    answers = re.findall(r'<div class="vote( win)?" data-answer="([^"]*)"', out)
    assert answers == [(" win", "42"), ("", "41")]  # sorted by weight, winner highlighted
    widths = [float(w) for w in re.findall(r'<span class="b"><span style="width:([\d.]+)%', out)]
    assert widths == pytest.approx([70.0, 30.0])
    bad = choice_html({"method": "majority-vote", "answer": "<b>", "votes": {"<b>": 3}, "chosen": 0})
    assert "<b>" not in bad
    assert "&lt;b&gt;" in bad and "majority: the answer given by the most particles" in bad
    best = choice_html({"method": "best-of-n", "answer": None, "votes": {}, "chosen": 1, "particles": []})
    assert 'class="votes"' not in best and "best score" in best and "the text of slot 1" in best  # a text task
    cut = choice_html({"method": "best-of-n", "answer": None, "chosen": 0,
                       "particles": [{"id": 0, "ended": False, "score": 0.5, "weight": 1.0}]})
    assert "cut off at the token cap before an answer" in cut


def test_a_particle_cut_off_at_its_cap_is_not_badged_finished():
    step = ParticleStep(step=0, method="best-of-n", particles=[
        {"id": 0, "parent": -1, "weight": 0.5, "finished": True, "cut_off": False, "answer": "7", "text": "x"},
        {"id": 1, "parent": -1, "weight": 0.5, "finished": True, "cut_off": True, "answer": None, "text": "y"}],
        ancestors=[0, 1], resampled=False, weights_after=[0.5, 0.5], ess=2.0, tokens_spent=2, elapsed_s=0.1,
        forward_passes=1)
    cards = particles_html(step).split('class="card')[1:]
    assert ">finished<" in cards[0] and "cut off at the token cap" in cards[1] and ">finished<" not in cards[1]
    assert "no final choice yet" in choice_html({})


def test_budget_figure_one_trace_per_method():
    rows = [{"method": m, "budget": b, "accuracy": a, "tokens": 100 * b}
            for m, accs in {"best-of-n": [0.2, 0.3, 0.4, 0.5], "particle-filter": [0.2, 0.35, 0.5, 0.6]}.items()
            for b, a in zip([8, 1, 4, 2], accs)]
    rows.append({"method": "majority-vote", "budget": 16, "accuracy": 0.7})
    fig = budget_figure(rows)
    assert [t.name for t in fig.data] == ["best-of-n", "particle-filter", "majority-vote"]
    bon = by_name(fig, "best-of-n")
    assert list(bon.x) == [1, 2, 4, 8] and list(bon.y) == [0.3, 0.5, 0.4, 0.2]  # sorted by budget
    assert "tokens" in bon.hovertemplate and "tokens" not in by_name(fig, "majority-vote").hovertemplate
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8, 16]
    assert tuple(fig.layout.yaxis.range) == (0, 1.02) and fig.layout.yaxis.tickformat == ".0%"
    assert len(budget_figure([]).data) == 0
    with pytest.raises(ValueError, match=r"`rows\[0\]` is missing \['accuracy'\]"):
        budget_figure([{"method": "best-of-n", "budget": 1}])
    with pytest.raises(ValueError, match="accuracy in \\[0, 1\\]"):
        budget_figure([{"method": "best-of-n", "budget": 1, "accuracy": 42}])


def test_scaling_summary_html_only_present_keys():
    out = scaling_summary_html({"num_particles": 4, "ess": 2.5, "answer": "<42>", "tokens_spent_per_s": None,
                                "unrelated": 1})
    rows = re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", out)
    assert rows == [("particles N", "4"), ("final ESS", "2.5"), ("tokens spent / s", "—"), ("answer", "&lt;42&gt;")]
    assert "no particle statistics yet" in scaling_summary_html({})
