"""Tests for visualizers: figure objects and HTML built from hand-made traces (no pixels, no model),
plus one smoke test per strategy on a real trace from the tiny random model."""

import html
import re

import plotly.graph_objects as go
import pytest

from decoding.events import BeamStep, RunFinished, RunStarted, TokenStep, Trace
from visualizers import (
    beams_figure,
    distribution_figure,
    entropy_figure,
    figure_to_html,
    token_table,
    tokens_html,
)
from visualizers.tokens import TABLE_COLUMNS, special_label

VOCAB = 100


def start(strategy="sample", vocab_size=VOCAB, **params):
    return RunStarted(model="hand-made", strategy=strategy, params=params, prompt="Hi", prompt_text="Hi",
                      prompt_ids=[1, 2], chat=False, seed=0, max_new_tokens=8, device="cpu", dtype="float32",
                      vocab_size=vocab_size)


def tok(step, text, *, token_id=None, prob=0.5, rank=1, entropy=1.0, kept_size=2,
        top=(("a", 0.5, True), ("b", 0.3, True), ("c", 0.2, False))):
    token_id = 10 + step if token_id is None else token_id
    top_ids = [token_id if t == text else 50 + i for i, (t, _, _) in enumerate(top)]
    return TokenStep(step=step, token_id=token_id, token_text=text, prob=prob, sampling_prob=min(1.0, prob * 1.5),
                     rank=rank, entropy=entropy, entropy_truncated=entropy / 2, kept_size=kept_size, top_ids=top_ids,
                     top_tokens=[t for t, _, _ in top], top_probs=[p for _, p, _ in top],
                     top_kept=[k for _, _, k in top], elapsed_s=0.01 * (step + 1))


def finish(text, token_ids, stop_reason="max_new_tokens"):
    return RunFinished(text=text, token_ids=token_ids, stop_reason=stop_reason, elapsed_s=0.1)


@pytest.fixture
def sample_trace():
    steps = [
        tok(0, "a", prob=0.5, entropy=1.2),
        tok(1, "<script>", prob=0.1, rank=4, entropy=2.5, kept_size=3),
        tok(2, "\n", prob=0.9, entropy=0.3, top=(("\n", 0.9, True), (" x", 0.05, False))),
        tok(3, "b", prob=0.3, rank=2, entropy=1.0),
    ]
    return Trace([start(), *steps, finish("a<script>\nb", [10, 11, 12, 13])])


def beam(ids, score, parent, text=None):
    return {"token_ids": ids, "text": text or "".join(chr(96 + i) for i in ids), "score": score, "parent": parent,
            "token_id": ids[-1], "token_text": chr(96 + ids[-1]), "logprob": -0.5}


@pytest.fixture
def beam_trace():
    # step 0: beams [1] and [2] from the prompt; step 1: [2,3] (parent 1) ranks above [1,4] (parent 0),
    # and [1,9] finished; step 2: [1,4,5] (parent 1) and [2,3,6] (parent 0).
    steps = [
        BeamStep(step=0, beams=[beam([1], -0.5, 0), beam([2], -0.9, 0)], finished=[], entropy=1.5, elapsed_s=0.01),
        BeamStep(step=1, beams=[beam([2, 3], -1.0, 1), beam([1, 4], -1.2, 0)],
                 finished=[{"token_ids": [1, 9], "text": "a", "score": -0.6}], entropy=1.1, elapsed_s=0.02),
        BeamStep(step=2, beams=[beam([1, 4, 5], -1.4, 1), beam([2, 3, 6], -1.7, 0)], finished=[], entropy=0.7,
                 elapsed_s=0.03),
    ]
    return Trace([start("beam", num_beams=2), *steps, finish("ade", [1, 4, 5])])


def segments(trace_obj):
    """(x0, y0, x1, y1) tuples of a line trace whose segments are separated by None."""
    x, y = list(trace_obj.x), list(trace_obj.y)
    return {(x[i], y[i], x[i + 1], y[i + 1]) for i in range(0, len(x), 3)}


def by_name(fig, name):
    return next(t for t in fig.data if t.name == name)


# ---------------------------------------------------------------- tokens


def test_tokens_html_one_span_per_step_with_data_step(sample_trace):
    out = tokens_html(sample_trace)
    assert out.startswith('<div class="dl-tokens">') and "<style>" in out
    assert re.findall(r'data-step="(\d+)"', out) == ["0", "1", "2", "3"]
    assert out.count('class="tok') == 4


def test_tokens_html_escapes_and_renders_newlines(sample_trace):
    out = tokens_html(sample_trace)
    assert "<script>" not in out
    assert "&lt;script&gt;" in out
    assert "⏎</span><br>" in out  # newline token: visible symbol and a real line break
    assert html.escape("'<script>'", quote=True) in out  # tooltip of step 1 also escaped


def test_tokens_html_tooltip_lists_alternatives_with_kept_marks(sample_trace):
    out = tokens_html(sample_trace)
    span = re.search(r'<span class="tok" data-step="0"[^>]*title="([^"]*)"', out)
    tooltip = html.unescape(span.group(1))
    assert tooltip.startswith("step 0 · 'a' · p=0.5")
    assert "'a' 0.500 ✓ ◀ chosen" in tooltip
    assert "'c' 0.200 ✗ (cut)" in tooltip


def test_tokens_html_selected_step_and_colour_modes(sample_trace):
    out = tokens_html(sample_trace, selected_step=2)
    assert re.findall(r'class="tok[^"]*\bsel\b[^"]*" data-step="(\d+)"', out) == ["2"]
    by_prob = re.findall(r'background:(#[0-9a-f]{6})', tokens_html(sample_trace, color_by="prob"))
    by_entropy = re.findall(r'background:(#[0-9a-f]{6})', tokens_html(sample_trace, color_by="entropy"))
    assert by_prob != by_entropy
    assert "low probability" in tokens_html(sample_trace)
    assert "high entropy" in tokens_html(sample_trace, color_by="entropy")
    with pytest.raises(ValueError, match="`color_by` must be one of"):
        tokens_html(sample_trace, color_by="rank")


def test_tokens_html_beam_trace_shows_final_text(beam_trace):
    out = tokens_html(beam_trace)
    assert "ade" in out and "data-step" not in out and "Beam search" in out
    live = tokens_html(Trace(beam_trace.events[:3]))  # no finish yet: best live beam
    assert "ad" in live and "best live beam after step 1" in live


def test_tokens_html_special_stop_token():
    trace = Trace([start(), tok(0, "hi"), tok(1, "<|im_end|>", token_id=2), finish("hi", [10, 2], "eos")])
    out = tokens_html(trace)
    chip = out[out.index('class="tok special" data-step="1"'):]
    chip = chip[:chip.index("</span></span>")]
    # a marked "end of text", not the raw token; the raw token stays in the tooltip
    assert chip.endswith('<span class="dl-mark">end of text') and "&lt;|im_end|&gt;" in chip.split(">")[0]
    assert special_label("<|im_start|>") == "im_start" and special_label("</s>") == "end of text"
    assert special_label("<|endoftext|>") == "end of text" and special_label("") is None


def test_token_table(sample_trace):
    df = token_table(sample_trace)
    assert list(df.columns) == TABLE_COLUMNS
    assert len(df) == 4
    assert df["token"].tolist() == ["a", "<script>", "\n", "b"]
    assert df["prob"].tolist() == [0.5, 0.1, 0.9, 0.3]
    assert df.loc[0, "top_alternatives"] == "'a' 0.5000; 'b' 0.3000; 'c' 0.2000 (cut)"
    assert len(token_table(Trace([start()]))) == 0


# ---------------------------------------------------------------- entropy


def test_entropy_figure_values_and_axes(sample_trace):
    fig = entropy_figure(sample_trace)
    steps = sample_trace.of_kind("token")
    assert [t.name for t in fig.data] == ["entropy (raw)", "entropy (truncated)", "p(chosen)", "kept tokens"]
    raw, truncated, prob, kept = fig.data
    assert list(raw.x) == [0, 1, 2, 3] and list(raw.y) == [e.entropy for e in steps]
    assert list(truncated.y) == [e.entropy_truncated for e in steps]
    assert list(prob.y) == [e.prob for e in steps] and prob.yaxis == "y2"
    assert list(kept.y) == [e.kept_size for e in steps] and fig.layout.yaxis3.type == "log"
    assert fig.layout.xaxis.title.text == "step"
    assert fig.layout.yaxis.title.text == "entropy (nats)"
    assert fig.layout.yaxis2.title.text == "probability" and tuple(fig.layout.yaxis2.range) == (0, 1.02)
    assert "&lt;script&gt;" in raw.customdata[1]  # hover shows the (escaped) token
    assert fig.layout.template.layout.paper_bgcolor is not None and fig.layout.height == 300
    assert fig.layout.shapes == ()


def test_entropy_figure_selected_step_and_greedy_has_no_kept_bars(sample_trace):
    fig = entropy_figure(sample_trace, selected_step=2)
    assert [(s.type, s.x0, s.x1) for s in fig.layout.shapes] == [("line", 2, 2)]
    greedy = Trace([start("greedy"), tok(0, "a", kept_size=1), tok(1, "b", kept_size=1)])
    assert [t.name for t in entropy_figure(greedy).data] == ["entropy (raw)", "entropy (truncated)", "p(chosen)"]
    untruncated = Trace([start("sample"), tok(0, "a", kept_size=VOCAB)])
    assert "kept tokens" not in [t.name for t in entropy_figure(untruncated).data]


def test_entropy_figure_beam_trace(beam_trace):
    fig = entropy_figure(beam_trace, selected_step=1)
    assert list(fig.data[0].x) == [0, 1, 2] and list(fig.data[0].y) == [1.5, 1.1, 0.7]
    assert len(fig.layout.shapes) == 1


# ---------------------------------------------------------------- distribution


def test_distribution_figure_kept_cut_and_chosen(sample_trace):
    fig = distribution_figure(sample_trace, step=0)
    kept, cut = fig.data
    assert list(kept.x) == [1, 2] and list(kept.y) == [0.5, 0.3]
    assert list(cut.x) == [3] and list(cut.y) == [0.2]
    assert kept.marker.color != cut.marker.color
    assert list(kept.marker.line.width) == [3, 0] and list(cut.marker.line.width) == [0]  # chosen 'a' outlined
    assert list(fig.layout.xaxis.ticktext) == ["'a'", "'b'", "'c'"]
    assert fig.layout.title.text == (f"step 0: chose 'a' (p=0.5, rank 1)<br>"
                                     f"<span style='font-size:12px'>kept 2 of {VOCAB} tokens</span>")
    assert any(a.text == "▼ chosen" and a.x == 1 for a in fig.layout.annotations)


def test_distribution_figure_default_last_step_and_visible_newline(sample_trace):
    fig = distribution_figure(sample_trace)
    assert fig.layout.title.text.startswith("step 3: chose 'b'")
    newline = distribution_figure(sample_trace, step=2)
    assert list(newline.layout.xaxis.ticktext) == ["'⏎'", "' x'"]


def test_distribution_figure_chosen_outside_top_gets_extra_bar(sample_trace):
    fig = distribution_figure(sample_trace, step=1)  # '<script>' has rank 4, not among a/b/c
    kept, cut = fig.data
    assert list(kept.x) == [1, 2, 4] and list(kept.y) == [0.5, 0.3, 0.1]
    assert fig.layout.xaxis.ticktext[-1] == "… '&lt;script&gt;' (rank 4)"
    assert "&lt;script&gt;" in fig.layout.title.text and "<script>" not in fig.layout.title.text


def test_distribution_figure_missing_step_and_bad_step(sample_trace):
    fig = distribution_figure(sample_trace, step=99)
    assert len(fig.data) == 0 and "not been generated yet" in fig.layout.annotations[0].text
    with pytest.raises(ValueError, match="`step` must be None or an integer >= 0"):
        distribution_figure(sample_trace, step=-1)


# ---------------------------------------------------------------- beams


def test_beams_figure_nodes_and_lineage(beam_trace):
    fig = beams_figure(beam_trace)
    nodes = by_name(fig, "live beam")
    assert list(zip(nodes.x, nodes.y)) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert list(nodes.marker.color) == [-0.5, -0.9, -1.0, -1.2, -1.4, -1.7]
    assert list(nodes.text) == ["'a'", "", "", "'d'", "'e'", ""]  # labels on the best path only
    assert [c[3] for c in nodes.customdata] == ["'a'", "'b'", "'c'", "'d'", "'e'", "'f'"]  # every token on hover
    lines = segments(by_name(fig, "lineage")) | segments(by_name(fig, "best path"))
    expected = {(-1, 0, 0, 0), (-1, 0, 0, 1),  # prompt -> step 0
                (0, 1, 1, 0), (0, 0, 1, 1),  # step 1: [2,3] from beam 1, [1,4] from beam 0
                (1, 1, 2, 0), (1, 0, 2, 1)}  # step 2: [1,4,5] from beam 1, [2,3,6] from beam 0
    assert lines == expected
    # the final text [1, 4, 5] descends prompt -> (0,0) -> (1,1) -> (2,0)
    assert segments(by_name(fig, "best path")) == {(-1, 0, 0, 0), (0, 0, 1, 1), (1, 1, 2, 0)}
    stars = by_name(fig, "finished")
    assert list(zip(stars.x, stars.y)) == [(1, 2)]  # below the two live beams of step 1
    assert segments(by_name(fig, "to finished")) == {(0, 0, 1, 2)}  # [1, 9] extends beam 0 of step 0
    assert fig.layout.xaxis.title.text == "step" and fig.layout.yaxis.autorange == "reversed"


def test_beams_figure_non_beam_trace_is_empty(sample_trace):
    fig = beams_figure(sample_trace)
    assert len(fig.data) == 0 and "beam" in fig.layout.annotations[0].text


# ---------------------------------------------------------------- prefixes, empty traces, html


@pytest.mark.parametrize("which", ["sample_trace", "beam_trace"])
def test_prefixes_and_start_only_do_not_raise(which, request):
    trace = request.getfixturevalue(which)
    for n in range(0, len(trace.events) + 1):
        prefix = Trace(trace.events[:n])
        for fig in (entropy_figure(prefix, selected_step=1), distribution_figure(prefix), beams_figure(prefix)):
            assert isinstance(fig, go.Figure)
        assert isinstance(tokens_html(prefix, selected_step=1), str)
        assert len(token_table(prefix)) == len(prefix.of_kind("token"))
    only_start = Trace(trace.events[:1])
    assert "waiting for tokens" in tokens_html(only_start)
    for fig in (entropy_figure(only_start), distribution_figure(only_start)):
        assert len(fig.data) == 0 and "waiting for tokens" in fig.layout.annotations[0].text
    assert entropy_figure(only_start).layout.xaxis.title.text == "step"


def test_visualizers_return_new_figures(sample_trace):
    assert entropy_figure(sample_trace) is not entropy_figure(sample_trace)


def test_figure_to_html_is_standalone(sample_trace):
    page = figure_to_html(entropy_figure(sample_trace))
    assert "<html>" in page[:100] and "</html>" in page[-100:] and not re.search(r"<script[^>]*\bsrc=", page)
    assert len(page) > 1_000_000  # plotly.js inlined
    with pytest.raises(ValueError, match="`fig` must be a plotly"):
        figure_to_html("not a figure")


def test_figure_to_html_can_reference_plotly_from_its_cdn(sample_trace):
    """What the app's download uses: a few kB that load plotly.js when opened, not 4.8 MB inlined."""
    page = figure_to_html(entropy_figure(sample_trace), include_plotlyjs="cdn")
    assert len(page) < 50_000 and re.search(r'<script[^>]*src="https://cdn\.plot\.ly/plotly-[0-9.]+\.min\.js"', page)
    with pytest.raises(ValueError, match="`include_plotlyjs` must be True .* or 'cdn', got 'directory'"):
        figure_to_html(entropy_figure(sample_trace), include_plotlyjs="directory")


def test_saved_trace_renders_the_same(sample_trace):
    loaded = Trace.from_json(sample_trace.to_json())
    assert entropy_figure(loaded) == entropy_figure(sample_trace)
    assert tokens_html(loaded) == tokens_html(sample_trace)


# ---------------------------------------------------------------- real traces


@pytest.fixture(scope="module")
def tiny_model():
    from decoding.models import load_model

    return load_model("tiny-random", progress=None)


@pytest.mark.parametrize("strategy,params", [
    ("greedy", {}), ("sample", {"top_p": 0.9}), ("mirostat", {}), ("beam", {"num_beams": 3}), ("contrastive", {}),
])
def test_every_visualizer_on_real_tiny_trace(tiny_model, strategy, params):
    from decoding import run_to_trace

    trace = run_to_trace(tiny_model, "Hello", strategy=strategy, params=params, max_new_tokens=4, seed=0)
    num_steps = len(trace.of_kind("token"))
    html_out = tokens_html(trace, selected_step=1)
    assert len(re.findall(r'data-step="', html_out)) == num_steps
    assert len(token_table(trace)) == num_steps
    for fig in (entropy_figure(trace, selected_step=1), distribution_figure(trace), beams_figure(trace)):
        assert isinstance(fig, go.Figure)
        fig.to_dict()  # validates the whole figure
    if strategy == "beam":
        assert len(by_name(beams_figure(trace), "live beam").x) == sum(len(e.beams) for e in trace.of_kind("beams"))
    else:
        assert list(entropy_figure(trace).data[0].y) == [e.entropy for e in trace.of_kind("token")]


def test_a_long_beam_tree_labels_only_its_best_path(tiny_lm):
    """Issue 16: at 40 steps every node's label overlapped; now only the best path is labelled and
    every node still carries its text on hover."""
    from decoding import run_to_trace
    from visualizers import beams_figure

    trace = run_to_trace(tiny_lm, "Once upon a time", strategy="beam", params={"num_beams": 4}, max_new_tokens=40)
    fig = beams_figure(trace)
    live = next(t for t in fig.data if t.name == "live beam")
    labelled = [t for t in live.text if t]
    assert len(live.x) > 60 and 0 < len(labelled) <= 41
    assert all(row[0] for row in live.customdata)  # hover text for every node
