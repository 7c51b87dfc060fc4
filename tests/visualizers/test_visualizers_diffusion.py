"""Tests for the masked-diffusion visualizers on hand-made DiffusionStep sequences (figure objects and
HTML, no pixels, no model).

The fixture: a canvas of L = 8 positions, 4 steps, 2 blocks of 4. Block 0 commits position 1 first,
then 0, 2, 3 together (not left to right); block 1 commits 4, 6 then 5, 7. Position 2's token is
"<script>", position 3's a newline. Steps 0 and 2 cost 2 model calls (a block's first step refreshes
the cache), so NFE runs 2, 3, 5, 6.
"""

import math
import re

import plotly.graph_objects as go
import pytest

from decoding.events import DiffusionStep, RunFinished, Trace, stats
from visualizers.diffusion import (
    ar_vs_diffusion_html,
    block_boundaries,
    canvas_html,
    commits,
    compare_samplers_figure,
    confidence_figure,
    diffusion_summary_html,
    tokens_per_step_figure,
    unmask_order_figure,
)
from visualizers.tokens import chip_color

L = 8
TEXTS = ["The", " cat", "<script>", "\n", " sat", " on", " the", " mat"]
UNMASKED = [[1], [0, 2, 3], [4, 6], [5, 7]]
CONFIDENCE = [[0.9], [0.6, 0.7, 0.8], [0.95, 0.5], [0.4, 0.3]]
BLOCKS = [0, 0, 1, 1]
PASSES = [2, 1, 2, 1]
TOP1 = [0.11, 0.22, 0.33, 0.44, 0.55, 0.66, 0.77, 0.88]  # top-1 p of a masked position (same every step)


def make_steps(unmasked=UNMASKED, confidence=CONFIDENCE, blocks=BLOCKS, passes=PASSES, extra=None):
    steps, canvas, nfe = [], [-1] * L, 0
    for t, (pos, conf) in enumerate(zip(unmasked, confidence)):
        canvas = list(canvas)
        for p in pos:
            canvas[p] = 100 + p
        nfe += passes[t]
        steps.append(DiffusionStep(
            step=t, block=blocks[t], canvas=canvas,
            canvas_text=[TEXTS[i] if c != -1 else "" for i, c in enumerate(canvas)],
            unmasked=list(pos), unmasked_tokens=[100 + p for p in pos], confidence=list(conf),
            masked_confidence=[TOP1[i] if c == -1 else None for i, c in enumerate(canvas)],
            nfe=nfe, elapsed_s=0.1 * (t + 1), forward_passes=passes[t], extra=dict(extra or {})))
    return steps


@pytest.fixture
def steps():
    return make_steps()


def by_name(fig, name):
    return next(t for t in fig.data if t.name == name)


def cells(page):
    """(class, attributes, body) per canvas cell."""
    return re.findall(r'<span class="(cell [^"]*)" ([^>]*)>(.*?)</span>(?=<span class="cell|</div>)', page)


def cell_at(page, pos):
    return next(c for c in cells(page) if f'data-pos="{pos}"' in c[1])


# ---------------------------------------------------------------- fixture sanity


def test_fixture_is_consistent(steps):
    assert sum(len(u) for u in UNMASKED) == L and steps[-1].canvas.count(-1) == 0
    for prev, s in zip([None] + steps, steps):
        newly = {i for i, c in enumerate(s.canvas) if c != -1 and (prev is None or prev.canvas[i] == -1)}
        assert newly == set(s.unmasked)
    assert [s.nfe for s in steps] == [2, 3, 5, 6]
    st = stats(Trace(steps + [RunFinished(text="".join(TEXTS), token_ids=list(range(100, 108)), stop_reason="eos",
                                          elapsed_s=0.5, forward_passes=0)]))
    assert (st["nfe"], st["diffusion_steps"], st["tokens_per_step"], st["nfe_per_token"]) == (6, 4, 2.0, 0.75)


# ---------------------------------------------------------------- canvas


@pytest.mark.parametrize("upto", [0, 1, 2, 3])
def test_canvas_cells_masked_and_new(steps, upto):
    page = canvas_html(steps, upto=upto)
    found = cells(page)
    assert [int(re.search(r'data-pos="(\d+)"', a).group(1)) for _, a, _ in found] == list(range(L))
    masked = {i for i, (cls, _, _) in enumerate(found) if "masked" in cls.split()}
    assert masked == {i for i, c in enumerate(steps[upto].canvas) if c == -1}
    assert len(masked) == steps[upto].canvas.count(-1)
    assert {i for i, (cls, _, _) in enumerate(found) if "new" in cls.split()} == set(UNMASKED[upto])
    assert all(body == "▒" for i, (_, _, body) in enumerate(found) if i in masked)
    assert f"step {upto} · block {BLOCKS[upto]}" in page


def test_canvas_default_is_latest_and_unplayed_step_is_a_hint(steps):
    assert canvas_html(steps) == canvas_html(steps, upto=3)
    assert canvas_html(steps[:2]) == canvas_html(steps, upto=1)
    later = canvas_html(steps[:2], upto=5)
    assert "step 5 has not been played yet" in later and not cells(later)
    with pytest.raises(ValueError, match="`upto` must be None or a step number >= 0, got -1"):
        canvas_html(steps, upto=-1)


def test_canvas_committed_cells_coloured_by_commit_confidence_with_tooltips(steps):
    page = canvas_html(steps, upto=2)
    for t, (pos, conf) in enumerate(zip(UNMASKED[:3], CONFIDENCE[:3])):
        for p, c in zip(pos, conf):
            cls, attrs, _ = cell_at(page, p)
            assert f"background:{chip_color(c)}" in attrs  # the confidence at commit, not at a later step
            assert f'data-step="{t}"' in attrs and f'data-conf="{c:.4g}"' in attrs
            title = re.search(r'title="([^"]*)"', attrs).group(1)
            assert f"position {p}" in title and f"committed at step {t}" in title and f"confidence {c:.3g}" in title
    _, attrs, _ = cell_at(page, 5)  # still masked: its top-1 probability is in the tooltip
    assert "top-1 p = 0.66" in attrs and 'data-p="0.66"' in attrs


def test_canvas_escapes_model_text_and_shows_whitespace(steps):
    page = canvas_html(steps)
    assert "<script>" not in page and "&lt;script&gt;" in cell_at(page, 2)[2]
    assert "⏎" in cell_at(page, 3)[2]
    assert cell_at(page, 1)[2] == '<span class="sym">␣</span>cat'


def test_canvas_remasked_position_is_masked_again(steps):
    s = steps[2]
    canvas = list(s.canvas)
    canvas[0] = -1  # a remasking sampler sends position 0 back
    remask = DiffusionStep(step=3, block=1, canvas=canvas, canvas_text=[t if c != -1 else "" for t, c in
                                                                        zip(s.canvas_text, canvas)],
                           unmasked=[], unmasked_tokens=[], confidence=[],
                           masked_confidence=[0.5 if c == -1 else None for c in canvas], nfe=6, elapsed_s=0.4)
    page = canvas_html(steps[:3] + [remask])
    cls, _, body = cell_at(page, 0)
    assert cls.split() == ["cell", "masked", "remasked"] and body == "▒"
    assert 0 not in commits(steps[:3] + [remask]) and commits(steps[:3])[0] == (1, 0.6)


def test_canvas_empty_and_wrong_events():
    assert "waiting for the first denoising step" in canvas_html([]) and not cells(canvas_html([]))
    with pytest.raises(ValueError, match="`steps` must hold DiffusionStep events only, got a RunFinished"):
        canvas_html([RunFinished(text="", token_ids=[], stop_reason="eos", elapsed_s=0.0)])


# ---------------------------------------------------------------- unmasking order


def test_unmask_order_cells_are_commit_confidences(steps):
    fig = unmask_order_figure(steps)
    heat = by_name(fig, "committed")
    assert list(heat.x) == list(range(L)) and list(heat.y) == [0, 1, 2, 3]
    expected = {(t, p): c for t, (pos, conf) in enumerate(zip(UNMASKED, CONFIDENCE)) for p, c in zip(pos, conf)}
    for t in range(4):
        for p in range(L):
            z = heat.z[t][p]
            if (t, p) in expected:
                assert z == pytest.approx(expected[(t, p)])
            else:
                assert math.isnan(z)
    assert heat.customdata[1][2] == "'&lt;script&gt;'" and heat.text[1][2] == "&lt;scri"  # escaped after cutting
    assert heat.text[1][3] == "⏎" and heat.texttemplate == "%{text}"
    masked = by_name(fig, "masked")  # grey where a position is still masked after the step
    assert [[not math.isnan(v) for v in row] for row in masked.z] == [[c == -1 for c in s.canvas] for s in steps]
    assert fig.layout.yaxis.autorange == "reversed"
    assert (heat.zmin, heat.zmax) == (0.0, 1.0)


def test_unmask_order_block_boundaries(steps):
    fig = unmask_order_figure(steps)
    line = by_name(fig, "block boundary")  # one trace for every line (issue 25), no layout shapes
    assert list(line.x) == [3.5, 3.5, None] and fig.layout.shapes == ()
    assert line.line.dash == "dash"
    assert block_boundaries(steps, block_length=2) == [1.5, 3.5, 5.5]
    assert block_boundaries(make_steps(extra={"block_length": 4})[:1]) == [3.5]  # known before block 1 starts
    one_block = make_steps(blocks=[0, 0, 0, 0])
    assert not [t for t in unmask_order_figure(one_block).data if t.name == "block boundary"]
    assert block_boundaries(steps[:2]) == []  # only block 0 seen so far
    with pytest.raises(ValueError, match="`block_length` must be None or an integer >= 1, got 0"):
        unmask_order_figure(steps, block_length=0)


def test_unmask_order_non_probability_scores_use_their_range():
    fig = unmask_order_figure(make_steps(confidence=[[-0.1], [-2.0, -0.5, -0.3], [-0.2, -1.0], [-1.5, -1.2]]))
    heat = by_name(fig, "committed")
    assert (heat.zmin, heat.zmax) == (-2.0, -0.1)


def test_unmask_order_empty_and_one_step(steps):
    empty = unmask_order_figure([])
    assert len(empty.data) == 0 and "waiting" in empty.layout.annotations[0].text
    one = by_name(unmask_order_figure(steps[:1]), "committed")
    assert list(one.y) == [0] and one.z[0][1] == pytest.approx(0.9)


# ---------------------------------------------------------------- confidence over steps


def test_confidence_markers_mean_line_and_threshold(steps):
    fig = confidence_figure(steps)
    dots = by_name(fig, "committed tokens")
    assert list(dots.x) == [t for t, pos in enumerate(UNMASKED) for _ in pos]
    assert list(dots.y) == pytest.approx([c for conf in CONFIDENCE for c in conf])
    assert [row[0] for row in dots.customdata] == [p for pos in UNMASKED for p in pos]
    mean = by_name(fig, "mean top-1 p of masked positions")
    expected = [sum(TOP1[i] for i, c in enumerate(s.canvas) if c == -1) / s.canvas.count(-1) for s in steps[:3]]
    assert list(mean.y[:3]) == pytest.approx(expected) and mean.y[3] is None  # nothing left to unmask
    assert not any("threshold" in (t.name or "") for t in fig.data)
    with_threshold = confidence_figure(make_steps(extra={"threshold": 0.9}))
    assert set(by_name(with_threshold, "threshold 0.9").y) == {0.9}


def test_confidence_empty_and_one_step(steps):
    assert len(confidence_figure([]).data) == 0
    one = confidence_figure(steps[:1])
    assert list(by_name(one, "committed tokens").y) == [0.9]


# ---------------------------------------------------------------- tokens per step and NFE


def test_tokens_per_step_bars_and_nfe_line(steps):
    fig = tokens_per_step_figure(steps)
    bars = next(t for t in fig.data if isinstance(t, go.Bar))
    assert list(bars.x) == [0, 1, 2, 3] and list(bars.y) == [len(u) for u in UNMASKED] == [1, 3, 2, 2]
    nfe = by_name(fig, "NFE so far")
    assert list(nfe.y) == [s.nfe for s in steps] and nfe.yaxis == "y2"
    assert bars.marker.color[0] == bars.marker.color[1] != bars.marker.color[2]  # shade = block
    assert fig.layout.yaxis2.title.text == "NFE (model calls)"
    assert len(tokens_per_step_figure([]).data) == 0
    assert list(by_name(tokens_per_step_figure(steps[:1]), "NFE so far").y) == [2]


# ---------------------------------------------------------------- samplers compared


def test_compare_one_line_per_run_ending_at_its_nfe(steps):
    fast = make_steps(unmasked=[[0, 1, 2, 3], [4, 5, 6, 7]], confidence=[[0.9] * 4, [0.95] * 4], blocks=[0, 1],
                      passes=[1, 1])
    fig = compare_samplers_figure({"low-confidence": steps, "threshold <0.9>": fast})
    assert [t.name for t in fig.data] == ["low-confidence", "threshold &lt;0.9&gt;"]
    slow, quick = fig.data
    assert list(slow.x) == [0, 2, 3, 5, 6] and list(slow.y) == [0, 1, 4, 6, 8]
    assert (quick.x[-1], quick.y[-1]) == (fast[-1].nfe, L) == (2, 8)
    assert quick.text[-1] == "2 NFE"
    assert fig.layout.xaxis.range[1] >= 1.2 * slow.x[-1]  # the end labels ("5 NFE") fit right of the last point
    assert [s.y0 for s in fig.layout.shapes] == [L]


def test_compare_empty_inputs(steps):
    assert "no runs" in compare_samplers_figure({}).layout.annotations[0].text
    fig = compare_samplers_figure({"a": [], "b": steps[:1]})
    assert [list(t.x) for t in fig.data] == [[0], [0, 2]]
    with pytest.raises(ValueError, match="`runs` must be a dict"):
        compare_samplers_figure([steps])


# ---------------------------------------------------------------- tables


AR = {"num_tokens": 8, "forward_passes": 8, "elapsed_s": 0.8, "tokens_per_s": 10.0}
DIFF = {"num_tokens": 8, "nfe": 6, "forward_passes": 6, "elapsed_s": 0.5, "tokens_per_s": 16.0,
        "diffusion_steps": 4, "tokens_per_step": 2.0, "nfe_per_token": 0.75}


def rows(page):
    return {m[0]: m[1:] for m in
            (re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r) for r in re.findall(r"<tr>(.*?)</tr>", page)) if m}


def test_ar_vs_diffusion_table_and_texts():
    page = ar_vs_diffusion_html(AR, DIFF, "a <b>\nb", "x & y")
    table = rows(page)
    assert table["tokens"] == ["8", "8"]
    assert table["forward passes (NFE)"] == ["8", "6"]
    assert table["tokens per forward pass"] == ["1", "1.333"]
    assert table["elapsed (s)"] == ["0.8", "0.5"] and table["tokens/s"] == ["10", "16"]
    assert re.search(r"<td class=best>1\.333</td>", page) and re.search(r"<td class=best>0\.5</td>", page)
    assert "<b>\n" not in page and "a &lt;b&gt;" in page and "⏎" in page and "x &amp; y" in page
    empty = ar_vs_diffusion_html({}, {}, "", "")
    assert rows(empty)["tokens"] == ["—", "—"] and "no text yet" in empty
    with pytest.raises(ValueError, match="`ar_stats` must be a stats dict"):
        ar_vs_diffusion_html(None, DIFF, "", "")


def test_diffusion_summary_shows_keys_present(steps):
    table = rows(diffusion_summary_html(DIFF))
    assert table["NFE (model calls)"][0] == "6" and table["denoising steps"][0] == "4"
    assert table["tokens per step"][0] == "2" and table["NFE per token"][0] == "0.75"
    assert table["tokens"][0] == "8" and table["elapsed (s)"][0] == "0.5"
    partial = rows(diffusion_summary_html({"nfe": 3}))
    assert list(partial) == ["NFE (model calls)"]
    assert "no diffusion statistics yet" in diffusion_summary_html({})
    assert "no diffusion statistics yet" in diffusion_summary_html(None)
    assert "no diffusion statistics yet" in diffusion_summary_html({"num_tokens": 8, "forward_passes": 8})


# The per-task benchmark chart: a hand-written object of the shape `bench_diffusion.py --model tiny-parallel
# --json` prints (not model output)
def _row(accuracy, tokens_per_step, length=32):
    return {"accuracy": accuracy, "nfe": length / tokens_per_step, "nfe_fraction": 1 / tokens_per_step,
            "tokens_per_step": tokens_per_step, "seconds": 0.1}


BENCH = {
    "model": "tiny-parallel", "length": 32, "problems_per_task": 20,
    "tasks": {
        "copy": {"determined": True, "samplers": {
            "steps=length": _row(1.0, 1), "fixed 2/step": _row(1.0, 2), "fixed 4/step": _row(0.95, 4),
            "fixed 8/step": _row(0.9, 8), "threshold 0.9": _row(1.0, 5.3), "freedave d4": _row(1.0, 2.1),
            "causal twin greedy": _row(1.0, 1)}},
        "shuffle": {"determined": False, "samplers": {
            "steps=length": _row(0.8, 1), "fixed 2/step": _row(0.55, 2), "fixed 4/step": _row(0.3, 4),
            "fixed 8/step": _row(0.05, 8), "learn2pd 0.9": _row(0.6, 3.0)}},
        "add": {"determined": True, "samplers": {"steps=length": _row(0.5, 1), "fixed 8/step": _row(0.25, 8)}},
        "pick": {"determined": False, "samplers": {"threshold 0.9": _row(0.7, 4.0)}},  # no fixed schedule: no line
    },
}


def test_accuracy_vs_tokens_per_step_one_line_per_task_fixed_schedules_only():
    from visualizers.diffusion import accuracy_vs_tokens_per_step_figure

    fig = accuracy_vs_tokens_per_step_figure(BENCH)
    assert [t.name for t in fig.data] == ["copy", "shuffle", "add"]  # pick has no fixed-schedule result
    copy, shuffle, add = fig.data
    assert list(copy.x) == [1, 2, 4, 8] and list(copy.y) == [100.0, 100.0, 95.0, 90.0]  # threshold, FreeDave: left out
    assert list(shuffle.x) == [1, 2, 4, 8] and list(shuffle.y) == pytest.approx([80, 55, 30, 5])
    assert list(add.x) == [1, 8] and list(add.y) == [50.0, 25.0]
    assert copy.line.dash == "solid" and add.line.dash == "solid" and shuffle.line.dash == "dash"  # determined / dependent
    assert len({copy.line.color, shuffle.line.color, add.line.color}) == 3  # one colour per task
    assert copy.legendgroup == "determined" and shuffle.legendgroup == "dependent"
    assert "many right answers" in shuffle.legendgrouptitle.text
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8]
    assert fig.layout.xaxis.title.text == "tokens per step (fixed schedule)"
    assert fig.layout.yaxis.title.text == "accuracy (%)" and "canvas of 32 positions" in fig.layout.title.text
    assert "fixed 8/step" in [c[0] for c in shuffle.customdata]  # the hover names the sampler


def test_accuracy_vs_tokens_per_step_refuses_other_objects_and_draws_an_empty_hint():
    from visualizers.diffusion import accuracy_vs_tokens_per_step_figure

    for bad in (None, [], {"rows": []}, {"tasks": {"copy": {"determined": True}}}):
        with pytest.raises(ValueError, match="`bench`"):
            accuracy_vs_tokens_per_step_figure(bad)
    empty = accuracy_vs_tokens_per_step_figure({"tasks": {"pick": BENCH["tasks"]["pick"]}})
    assert not [t for t in empty.data if getattr(t, "x", None)] and "no fixed-schedule" in str(empty.layout.annotations)
    weird = {"tasks": {"<b>x</b>": {"determined": True, "samplers": {"steps=length": _row(1, 1)}}}}
    assert accuracy_vs_tokens_per_step_figure(weird).data[0].name == "&lt;b&gt;x&lt;/b&gt;"  # plotly-safe names
