"""Tests for the speculative-decoding visualizers on hand-made traces (figure objects and HTML, no pixels,
no model). A trace is RunStarted, then per round one SpecRound and its TokenSteps, then RunFinished."""

import html
import re

import plotly.graph_objects as go
import pytest

from decoding.events import RunFinished, RunStarted, SpecRound, TokenStep, Trace, stats
from visualizers import (
    acceptance_figure,
    draft_tree_figure,
    overlap_figure,
    spec_tokens_html,
    speculative_summary_html,
)
from visualizers.speculative import COLORS, ROUND_COLORS, tree_layout

VOCAB = 100
IDS: dict[str, int] = {}


def tid(text):
    return IDS.setdefault(text, 10 + len(IDS))


def start():
    return RunStarted(model="hand-made", strategy="speculative", params={"draft_length": 3}, prompt="Hi",
                      prompt_text="Hi", prompt_ids=[1, 2], chat=False, seed=0, max_new_tokens=16, device="cpu",
                      dtype="float32", vocab_size=VOCAB)


def node(i, parent, depth, text, status, *, q=0.5, p=0.4, u=0.3, accept_prob=None):
    judged = status != "unvisited"
    return {"id": i, "parent": parent, "depth": depth, "token_id": tid(text), "token_text": text, "q": q,
            "logq_cum": -1.0 * depth, "p": p, "status": status, "u": u if judged else None,
            "accept_prob": (accept_prob if accept_prob is not None else min(1.0, p / q)) if judged else None}


def dist(parent, p_top, q_top, overlap, *, texts=True):
    """p_top / q_top: lists of (text, prob); the strategy also records the top tokens' texts."""
    out = {"parent": parent, "p_top_ids": [tid(t) for t, _ in p_top], "p_top_probs": [x for _, x in p_top],
           "q_top_ids": [tid(t) for t, _ in q_top], "q_top_probs": [x for _, x in q_top], "overlap": overlap}
    if texts:
        out |= {"p_top_tokens": [t for t, _ in p_top], "q_top_tokens": [t for t, _ in q_top]}
    return out


def spec_round(r, step, nodes, extra_text, extra_kind, *, dists=(), extra_p=0.6, drafter="early-exit@L2"):
    """A SpecRound whose accepted_path and token_ids follow from the nodes' statuses."""
    path = [n["id"] for n in nodes if n["status"] == "accepted"]
    assert all(nodes[b]["parent"] == a for a, b in zip([-1] + path, path)), "accepted nodes must form a path"
    return SpecRound(round=r, step=step, drafter=drafter, nodes=nodes, accepted_path=path,
                     extra_token_id=tid(extra_text), extra_token_text=extra_text, extra_kind=extra_kind,
                     extra_p=extra_p, token_ids=[nodes[i]["token_id"] for i in path] + [tid(extra_text)],
                     dists=list(dists), draft_forward_passes=len(nodes), target_forward_passes=1,
                     draft_time_s=0.01, verify_time_s=0.02, elapsed_s=0.03 * (r + 1), forward_passes=1)


def round_tokens(rnd, elapsed):
    """The TokenSteps a round produces: accepted draft tokens, then the target's own token."""
    out = []
    for k, i in enumerate(rnd.accepted_path):
        n = rnd.nodes[i]
        out.append(_tok(rnd.step + k, n["token_text"], n["p"], rnd.round, "draft", elapsed))
    out.append(_tok(rnd.step + len(rnd.accepted_path), rnd.extra_token_text, rnd.extra_p, rnd.round,
                    rnd.extra_kind, elapsed))
    return out


def _tok(step, text, prob, r, origin, elapsed):
    return TokenStep(step=step, token_id=tid(text), token_text=text, prob=prob, sampling_prob=prob, rank=1,
                     entropy=1.0, entropy_truncated=1.0, kept_size=VOCAB, top_ids=[tid(text)], top_tokens=[text],
                     top_probs=[prob], top_kept=[True], elapsed_s=elapsed, forward_passes=0,
                     extra={"round": r, "origin": origin})


def build_trace(rounds, finished=True):
    events = [start()]
    for rnd in rounds:
        events += [rnd, *round_tokens(rnd, rnd.elapsed_s)]
    if finished:
        ids = [e.token_id for e in events if isinstance(e, TokenStep)]
        text = "".join(e.token_text for e in events if isinstance(e, TokenStep))
        events.append(RunFinished(text=text, token_ids=ids, stop_reason="max_new_tokens", elapsed_s=0.1,
                                  forward_passes=1))
    return Trace(events)


def rounds_fixture():
    # round 0: a chain of 3; ' the', ' cat' accepted, ' sat' rejected -> residual ' is'
    r0 = spec_round(0, 0, [
        node(0, -1, 1, " the", "accepted", q=0.6, p=0.7),
        node(1, 0, 2, " cat", "accepted", q=0.5, p=0.45, u=0.2),
        node(2, 1, 3, " sat", "rejected", q=0.4, p=0.1, u=0.9),
    ], " is", "residual", dists=[
        dist(-1, [(" the", 0.7), (" a", 0.2), (" my", 0.05)], [(" the", 0.6), (" a", 0.3), (" one", 0.08)], 0.8312),
        dist(0, [(" cat", 0.45), (" dog", 0.4)], [(" cat", 0.5), (" dog", 0.3)], 0.75),
        dist(1, [(" is", 0.5), (" sat", 0.1)], [(" sat", 0.4), (" is", 0.2)], 0.31),
    ])
    # round 1: a tree; '<script>' rejected (its child unvisited), '\n' accepted -> 'A' accepted ('B' unvisited)
    # -> 'C' accepted at a leaf -> bonus 'D'
    r1 = spec_round(1, 3, [
        node(0, -1, 1, "<script>", "rejected", q=0.5, p=0.05, u=0.8),
        node(1, -1, 1, "\n", "accepted", q=0.3, p=0.6, u=0.1),
        node(2, 0, 2, "x", "unvisited", q=0.9),
        node(3, 1, 2, "A", "accepted", q=0.7, p=0.8),
        node(4, 1, 2, "B", "unvisited", q=0.2),
        node(5, 3, 3, "C", "accepted", q=0.9, p=0.95),
    ], "D", "bonus")
    # round 2: a chain of 2, the first rejected -> residual '<script>' (must come out escaped)
    r2 = spec_round(2, 7, [
        node(0, -1, 1, "F", "rejected", q=0.8, p=0.1, u=0.5),
        node(1, 0, 2, "G", "unvisited", q=0.6),
    ], "<script>", "residual")
    return [r0, r1, r2]


@pytest.fixture
def trace():
    return build_trace(rounds_fixture())


@pytest.fixture
def greedy_trace():
    """A deterministic drafter (prompt lookup: q = 1, no q lists) checked greedily: 'a' accepted, 'b' corrected."""
    r0 = spec_round(0, 0, [node(0, -1, 1, "a", "accepted", q=1.0, p=0.6, u=None, accept_prob=1.0),
                           node(1, 0, 2, "b", "rejected", q=1.0, p=0.2, u=None, accept_prob=0.0)],
                    "c", "correction", drafter="prompt-lookup",
                    dists=[dist(-1, [("a", 0.6), ("z", 0.3)], [], 0.6),
                           dist(0, [("c", 0.7), ("b", 0.2)], [], 0.2, texts=False)])
    return build_trace([r0])


def by_name(fig, name):
    return next(t for t in fig.data if t.name == name)


def segments(trace_obj):
    x, y = list(trace_obj.x), list(trace_obj.y)
    return {(x[i], y[i], x[i + 1], y[i + 1]) for i in range(0, len(x), 3)}


def node_positions(fig):
    """(x, y) -> (trace name, index) for every marker in the figure."""
    out = {}
    for t in fig.data:
        if t.mode and "markers" in t.mode:
            for i, xy in enumerate(zip(t.x, t.y)):
                assert xy not in out, f"two nodes at {xy}"
                out[xy] = (t.name, i)
    return out


# ---------------------------------------------------------------- draft tree


def test_draft_tree_colours_follow_statuses(trace):
    fig = draft_tree_figure(trace, round_index=1)
    r1 = trace.of_kind("spec_round")[1]
    for status in ("accepted", "rejected", "unvisited"):
        t = by_name(fig, status)
        assert t.marker.color == COLORS[status]
        want = [n for n in r1.nodes if n["status"] == status]
        assert len(t.x) == len(want)
        assert [c[6] for c in t.customdata] == [status] * len(want)
    assert by_name(fig, "rejected").opacity < 1 and by_name(fig, "unvisited").opacity < 1
    assert list(by_name(fig, "accepted").text) == ["'⏎'", "'A'", "'C'"]  # visible newline
    assert list(by_name(fig, "rejected").text) == ["'&lt;script&gt;'"]  # escaped for plotly
    sizes = dict(zip(by_name(fig, "accepted").text, by_name(fig, "accepted").marker.size))
    assert sizes["'C'"] > sizes["'⏎'"]  # marker size grows with q (0.9 vs 0.3)


def test_draft_tree_edges_connect_parent_to_child_and_layout_is_tidy(trace):
    fig = draft_tree_figure(trace, round_index=1)
    r1 = trace.of_kind("spec_round")[1]
    pos = tree_layout(r1.nodes, r1.accepted_path[-1])
    # leaves on consecutive slots in creation order: x, the bonus (under C), B; parents centred over children
    assert pos == {2: (2, 0), 0: (1, 0), "extra": (4, 1), 5: (3, 1), 3: (2, 1), 4: (2, 2), 1: (1, 1.5),
                   -1: (0, 0.75)}
    expected = {(*pos[n["parent"]], *pos[n["id"]]) for n in r1.nodes}
    drawn = segments(by_name(fig, "draft edge")) | segments(by_name(fig, "accepted path"))
    assert drawn == expected
    assert segments(by_name(fig, "accepted path")) == {(*pos[a], *pos[b]) for a, b in [(-1, 1), (1, 3), (3, 5)]}
    assert by_name(fig, "accepted path").line.width > by_name(fig, "draft edge").line.width
    assert segments(by_name(fig, "to bonus token")) == {(*pos[5], *pos["extra"])}
    positions = node_positions(fig)  # raises on two nodes at the same place
    assert len(positions) == len(r1.nodes) + 2  # + context + bonus


def test_draft_tree_extra_node_and_title(trace):
    fig = draft_tree_figure(trace)  # default: the latest round (2), nothing accepted -> residual at the root
    assert fig.layout.title.text == "round 2: accepted 0 of 2 drafted · +1 residual '&lt;script&gt;'"
    extra = by_name(fig, "target's own (residual)")
    assert extra.marker.symbol == "diamond" and extra.marker.color == COLORS["extra"]
    assert list(extra.text) == ["'&lt;script&gt;' (residual)"] and list(extra.x) == [1]
    ctx = by_name(fig, "context")
    assert (ctx.x[0], ctx.y[0]) == (0, tree_layout(trace.of_kind("spec_round")[2].nodes, -1)[-1][1])
    assert list(ctx.text) == ["'D'"]  # last token before round 2
    assert segments(by_name(fig, "to residual token")) == {(ctx.x[0], ctx.y[0], 1, extra.y[0])}
    fig0 = draft_tree_figure(trace, round_index=0)
    assert fig0.layout.title.text == "round 0: accepted 2 of 3 drafted · +1 residual ' is'"
    assert list(by_name(fig0, "context").text) == ["prompt"]
    # the residual is a sibling of the rejected ' sat' under ' cat'
    assert by_name(fig0, "target's own (residual)").x[0] == by_name(fig0, "rejected").x[0] == 3
    assert fig0.layout.xaxis.title.text == "draft depth (0 = context)"
    names = [t.name for t in fig0.data if t.showlegend is not False]
    assert {"accepted", "rejected", "unvisited", "target's own (residual)"} <= set(names)


def test_draft_tree_missing_round_and_bad_argument(trace):
    fig = draft_tree_figure(trace, round_index=7)
    assert len(fig.data) == 0 and "round 7 has not been played yet" in fig.layout.annotations[0].text
    with pytest.raises(ValueError, match="`round_index` must be None or an integer >= 0"):
        draft_tree_figure(trace, round_index=-1)


# ---------------------------------------------------------------- acceptance


def test_acceptance_bars_running_rate_histogram_and_depths(trace):
    rounds = trace.of_kind("spec_round")
    fig = acceptance_figure(trace)
    bars = by_name(fig, "accepted tokens")
    assert list(bars.x) == [0, 1, 2] and list(bars.y) == [2, 3, 0]
    rate = by_name(fig, "acceptance rate (running)")
    # judged: round 0: 3, round 1: 4 (<script>, \n, A, C), round 2: 1
    assert list(rate.y) == pytest.approx([2 / 3, 5 / 7, 5 / 8])
    assert rate.y[-1] == pytest.approx(stats(trace)["acceptance_rate"], abs=1e-3)
    hist = by_name(fig, "rounds")
    assert list(hist.x) == [0, 1, 2, 3] and list(hist.y) == [1, 0, 1, 1]
    per_depth = by_name(fig, "accepted / judged")
    expected = {}
    for d in (1, 2, 3):
        judged = [n for r in rounds for n in r.nodes if n["depth"] == d and n["status"] != "unvisited"]
        expected[d] = sum(n["status"] == "accepted" for n in judged) / len(judged)
    assert list(per_depth.x) == [1, 2, 3]
    assert list(per_depth.y) == pytest.approx([expected[1], expected[2], expected[3]])
    assert [tuple(c) for c in per_depth.customdata] == [(2, 4), (2, 2), (1, 2)]
    layout = fig.layout
    titles = [layout.xaxis.title.text, layout.yaxis.title.text, layout.yaxis2.title.text, layout.xaxis2.title.text,
              layout.yaxis3.title.text, layout.xaxis3.title.text, layout.yaxis4.title.text]
    assert all(titles), titles
    assert tuple(layout.yaxis2.range) == (0, 1.02) and rate.yaxis == "y2"
    assert layout.height == 360


# ---------------------------------------------------------------- overlap


def test_overlap_figure_reads_exact_overlap_and_marks_drafts(trace):
    fig = overlap_figure(trace, round_index=0, parent=-1)
    p, q, both = by_name(fig, "p (target)"), by_name(fig, "q (draft)"), by_name(fig, "min(p, q)")
    ticks = list(fig.layout.xaxis.ticktext)
    assert set(ticks) == {"' the'", "' a'", "' my'", "' one'"}
    pv = dict(zip(ticks, p.y))
    qv = dict(zip(ticks, q.y))
    assert pv["' the'"] == 0.7 and qv["' a'"] == 0.3 and pv["' one'"] is None and qv["' my'"] is None
    assert list(both.y) == [min(a, b) if a is not None and b is not None else None for a, b in zip(p.y, q.y)]
    assert "overlap Σ min(p, q) = 0.831" in fig.layout.title.text  # the event's exact value, not the top-k sum
    assert "' the' accepted" in fig.layout.title.text
    assert "▼ drafted ✓" in drafted_marks(fig).values()
    at_cat = overlap_figure(trace, round_index=0, parent=1)  # the residual ' is' was drawn here
    assert "' sat' rejected" in at_cat.layout.title.text
    assert any(a.text == "◆ residual" for a in at_cat.layout.annotations)
    assert "▼ drafted ✗" in drafted_marks(at_cat).values()


def drafted_marks(fig) -> dict:
    """x -> text of the drafted tokens' marks (one text trace, not one annotation each: issue 25)."""
    marks = next((t for t in fig.data if t.name == "drafted"), None)
    return dict(zip(marks.x, marks.text)) if marks is not None else {}


def test_overlap_figure_without_exact_value_says_top_k(trace):
    r0 = trace.of_kind("spec_round")[0]
    dists = [dict(d, overlap=None) for d in r0.dists]
    events = [e if e is not r0 else SpecRound(**{**r0.__dict__, "dists": dists}) for e in trace.events]
    fig = overlap_figure(Trace(events), round_index=0)
    top = sum(min(p, q) for p, q in [(0.7, 0.6), (0.2, 0.3)])
    assert f"≥ {top:.3f} (recorded top tokens only)" in fig.layout.title.text


def test_overlap_figure_deterministic_drafter(greedy_trace):
    fig = overlap_figure(greedy_trace)
    assert [t.name for t in fig.data if t.name != "drafted"] == ["p (target)"]
    assert "accepted iff it is the target's argmax" in fig.layout.title.text
    events = [e for e in greedy_trace.events]
    r = events[1]
    sampled_nodes = [dict(n, u=0.5) for n in r.nodes]
    events[1] = SpecRound(**{**r.__dict__, "nodes": sampled_nodes})
    sampled = overlap_figure(Trace(events))
    assert "accepted with probability p(x)<br>Σ p(drafted) = 0.600" in sampled.layout.title.text
    # position after 'a': the correction 'c' was drawn there; 'b' has its text from the nodes, 'c' from the round
    after_a = overlap_figure(greedy_trace, parent=0)
    assert list(after_a.layout.xaxis.ticktext) == ["'c'", "'b'"] and list(after_a.data[0].y) == [0.7, 0.2]
    mark = next(a for a in after_a.layout.annotations if a.text == "◆ correction")
    assert (mark.y, mark.yanchor) == (0.7, "bottom")  # on its bar: under the axis it covered a tick label
    assert drafted_marks(after_a) == {2: "▼ drafted ✗"}
    missing = overlap_figure(greedy_trace, parent=1)  # 'b' is a leaf: never expanded
    assert len(missing.data) == 0 and "recorded: -1, 0" in missing.layout.annotations[0].text
    with pytest.raises(ValueError, match="`parent` must be -1"):
        overlap_figure(greedy_trace, parent=-2)


# ---------------------------------------------------------------- text and summary


def test_spec_tokens_html_rounds_origins_and_escaping(trace):
    out = spec_tokens_html(trace)
    assert out.startswith('<div class="dl-spec-tokens">') and "<style>" in out
    assert re.findall(r'data-step="(\d+)"', out) == [str(i) for i in range(8)]
    assert re.findall(r'data-round="(\d+)"', out) == ["0", "0", "0", "1", "1", "1", "1", "2"]
    own = re.findall(r'class="tok own" data-step="(\d+)"', out)
    assert own == ["2", "6", "7"]  # ' is' (residual), 'D' (bonus), '<script>' (residual)
    backgrounds = re.findall(r'data-step="\d+" data-round="\d+" data-origin="[a-z]*" style="background:(#[0-9a-f]{6})"',
                             out)
    assert backgrounds[0] == backgrounds[2] == ROUND_COLORS[0] and backgrounds[3] == ROUND_COLORS[1]
    assert "<script>" not in out and '"&lt;script&gt;</span>' not in out and ">&lt;script&gt;</span>" in out
    assert html.escape("'<script>'", quote=True) in out  # the tooltip too
    assert "⏎</span><br>" in out
    assert "drafted &amp; accepted" in out and "bonus · residual · correction" in out
    tip = html.unescape(re.search(r'data-step="1"[^>]*title="([^"]*)"', out).group(1))
    assert "round 0" in tip and "p = 0.45 (target) · q = 0.5 (draft)" in tip
    tip = html.unescape(re.search(r'data-step="6"[^>]*title="([^"]*)"', out).group(1))
    assert "bonus: the target's own token" in tip and "p = 0.6" in tip


def test_speculative_summary_html(trace):
    s = stats(trace)
    out = speculative_summary_html(trace)
    assert "target forward passes per token" in out and str(s["target_forward_passes_per_token"]) in out
    assert "acceptance rate" in out and "0.625" in out and "mean accepted length" in out
    base = dict(s, tokens_per_s=s["tokens_per_s"] / 2)
    with_base = speculative_summary_html(trace, baseline=base)
    assert "speed-up" in with_base and "2.00×" in with_base
    with pytest.raises(ValueError, match="`baseline` must be None or a stats dict"):
        speculative_summary_html(trace, baseline=[1])


# ---------------------------------------------------------------- streaming, other strategies, replay


def test_prefixes_do_not_raise(trace):
    for n in range(len(trace.events) + 1):
        prefix = Trace(trace.events[:n])
        for fig in (draft_tree_figure(prefix), acceptance_figure(prefix), overlap_figure(prefix)):
            assert isinstance(fig, go.Figure)
            fig.to_dict()
        assert isinstance(spec_tokens_html(prefix), str) and isinstance(speculative_summary_html(prefix), str)
    only_start = Trace(trace.events[:1])
    for fig in (draft_tree_figure(only_start), acceptance_figure(only_start), overlap_figure(only_start)):
        assert len(fig.data) == 0 and "waiting for the first draft round" in fig.layout.annotations[0].text
    assert "waiting for tokens" in spec_tokens_html(only_start)
    first_round_only = Trace(trace.events[:2])  # SpecRound arrived, its tokens not yet
    assert draft_tree_figure(first_round_only).layout.title.text.startswith("round 0")


def test_non_speculative_trace_says_so():
    plain = Trace([start(), _tok(0, "a", 0.5, None, None, 0.01)])
    assert "run the speculative strategy" in draft_tree_figure(plain).layout.annotations[0].text
    assert "run the speculative strategy" in acceptance_figure(plain).layout.annotations[0].text
    assert 'data-step="0"' in spec_tokens_html(plain) and "run the speculative strategy" in spec_tokens_html(plain)


def test_saved_trace_renders_the_same(trace, greedy_trace):
    for t in (trace, greedy_trace):
        loaded = Trace.from_json(t.to_json())
        for fn in (draft_tree_figure, acceptance_figure, overlap_figure):
            assert fn(loaded).to_dict() == fn(t).to_dict()
        assert spec_tokens_html(loaded) == spec_tokens_html(t)
        assert speculative_summary_html(loaded) == speculative_summary_html(t)
    assert draft_tree_figure(trace) is not draft_tree_figure(trace)


def test_a_deer_round_draws_its_one_pass_block():
    from decoding import run_to_trace
    from visualizers.speculative import draft_tree_figure

    trace = run_to_trace("tiny-random", "Hello there", strategy="speculative", max_new_tokens=6, chat=False,
                         params={"drafter": "model", "draft_model": "tiny-random-draft"})
    fig = draft_tree_figure(trace, 0)
    assert not fig.layout.shapes  # a model drafter: no block
    import dataclasses

    r = trace.of_kind("spec_round")[0]
    deer = dataclasses.replace(r, extra={"diffusion_block": len(r.nodes)})
    trace.events[trace.events.index(r)] = deer
    fig = draft_tree_figure(trace, 0)
    assert len(fig.layout.shapes) == 1 and "drafted in one pass" in fig.layout.annotations[-1].text
