"""The pictures of LUD, HAMburger, FTP and SpecMemo, from recorded runs of the models trained for them
(saved and loaded, as a replay would), and from traces made to their limits."""

import pytest

from decoding import run_to_trace
from decoding.events import Trace
from visualizers import method_figure
from visualizers.faster import ftp_figure, hamburger_figure, lud_figure
from visualizers.memory import MB, budget_point, memory_figure

PROMPT = "And it came to pass, when the king"
FAST = "the tiny-ar models load in well under a second"


def plain_title(fig) -> str:
    """The title's text without its line breaks (the small lines wrap)."""
    import re

    return re.sub(r"<br>(<span[^>]*>)?|</span>", " ", fig.layout.title.text).replace("  ", " ")


def recorded(model: str, strategy: str, params: dict, tmp_path, tokens: int = 32) -> Trace:
    path = tmp_path / f"{strategy}.json"
    run_to_trace(model, PROMPT, strategy=strategy, params=params, max_new_tokens=tokens, chat=False).save(path)
    return Trace.load(path)


@pytest.mark.fast(FAST)
def test_the_lud_picture_boxes_each_unit_and_counts_forwards(tmp_path):
    trace = recorded("tiny-ar-lud", "lud", {"span": 4}, tmp_path)
    steps = trace.of_kind("token")
    forwards = sum(e.forward_passes for e in steps)
    fig = lud_figure(trace)
    assert fig.layout.title.text.startswith(f"LUD: {len(steps)} tokens in {forwards} forwards")
    bars = fig.data[0]
    assert len(bars.x) == len(steps)  # one bar per token
    colors = {}
    for e, color in zip(steps, bars.marker.color):  # one colour per unit
        colors.setdefault(e.extra["unit"], set()).add(color)
    assert all(len(c) == 1 for c in colors.values())
    assert method_figure(trace).layout.title.text == fig.layout.title.text


@pytest.mark.fast(FAST)
def test_the_hamburger_picture_boxes_each_slot_and_counts_the_cache(tmp_path):
    trace = recorded("tiny-ar-hamburger", "hamburger", {"threshold": 0.3}, tmp_path)
    steps = trace.of_kind("token")
    slots = len({e.extra["slot"] for e in steps})
    fig = hamburger_figure(trace)
    assert fig.layout.title.text.startswith(f"HAMburger: {len(steps)} tokens in {slots} big forwards")
    prompt = steps[0].extra["prompt_slots"]
    assert f"cache: {prompt} + {slots} entries (a plain model: {prompt} + {len(steps)})" in plain_title(fig)
    assert any("micro-step" in h for h in fig.data[0].hovertext)


@pytest.mark.fast(FAST)
def test_the_ftp_layer_map_has_a_cell_per_token_and_block(tmp_path):
    trace = recorded("tiny-ar", "ftp", {"threshold": 0.5}, tmp_path)
    steps = trace.of_kind("token")
    fig = ftp_figure(trace)
    z = fig.data[0].z
    assert len(z) == 5 and all(len(row) == len(steps) for row in z)
    assert [[row[t] for row in z] for t in range(len(steps))] == [e.extra["blocks"] for e in steps]
    ran = sum(map(sum, (e.extra["blocks"] for e in steps))) / (5 * len(steps))
    assert fig.layout.title.text.startswith(f"FTP: {ran:.0%} of blocks ran for {len(steps)} tokens")
    assert "model card: held-out loss 3.706 vs tiny-ar 3.387" in plain_title(fig)


def test_the_pictures_wait_for_tokens_and_cap_long_runs():
    from decoding.events import TokenStep

    for draw in (lud_figure, hamburger_figure, ftp_figure):
        assert draw(Trace()).layout.annotations[0].text.startswith("waiting")

    def step(i: int, **extra) -> TokenStep:
        return TokenStep(step=i, token_id=5, token_text="ab", prob=0.5, sampling_prob=1.0, rank=1, entropy=1.0,
                         entropy_truncated=0.0, kept_size=1, top_ids=[5], top_tokens=["ab"], top_probs=[0.5],
                         top_kept=[True], elapsed_s=0.0, forward_passes=1, extra=extra)

    many = Trace([step(i, unit=i // 2, unit_size=2, in_unit=i % 2, span=4, mask_prob=None if i % 2 == 0 else 0.9)
                  for i in range(2000)])
    fig = lud_figure(many)
    assert len(fig.data[0].x) == 300 and "showing 300 of 2,000 tokens" in fig.layout.annotations[-1].text
    ragged = Trace([step(0, blocks=[1, 0], scores=[0.9, 0.1], num_blocks=2, threshold=0.5),
                    step(1, blocks=[1, 0, 1], scores=[0.9, 0.1, 0.8], num_blocks=3, threshold=0.5)])
    assert len(ftp_figure(ragged).data[0].z[0]) == 1  # a step with another block count is left out


@pytest.mark.fast(FAST)
def test_the_memory_plot_stacks_the_parts_under_the_budget_and_adds_a_point_per_run():
    params = {"drafter": "model", "model.draft_model": "tiny-ar-draft", "memory_budget_mb": 21.0}
    trace = run_to_trace("tiny-ar", PROMPT, strategy="speculative", params=params, max_new_tokens=16, chat=False)
    rounds = trace.of_kind("spec_round")
    point = budget_point(trace)
    assert point["budget_mb"] == 21.0 and point["node_budget"] == rounds[0].extra["memory"]["node_budget"]
    fig = memory_figure(trace, [point, point | {"budget_mb": None}])
    bars = [t for t in fig.data if t.type == "bar"]
    assert {b.name for b in bars} >= {"target cache", "draft cache", "verify logits", "verify probs", "draft q"}
    parts = rounds[0].extra["memory"]["parts"]
    weights = (parts["target weights"] + parts["draft weights"]) / MB
    assert f"weights {weights:.2f} MB" in plain_title(fig)  # held throughout: in the title, not a bar
    above = sum(b.y[0] for b in bars)
    assert above + weights == pytest.approx(sum(parts.values()) / MB) and above + weights <= 21.0
    budget = next(t for t in fig.data if t.name == "budget − weights")
    assert list(budget.y) == pytest.approx([21.0 - weights] * 2)
    assert fig.layout.title.text.startswith("SpecMemo: budget 21.00 MB, at most")
    runs = [t for t in fig.data if t.meta == "budget runs"]  # one setting: its budgeted run and its run without
    assert [(len(t.x), t.marker.symbol, list(t.text)) for t in runs] == [(1, "circle", ["run 1"]), (1, "star", ["run 2"])]
    assert len({t.name for t in runs}) == 1 and [t.showlegend for t in runs] == [True, False]
    # another setting (here the temperature) is a line of its own, named in the legend, not a point among the first's
    hot = point | {"setting": "another", "setting_label": point["setting_label"].replace("T 0", "T 0.7"),
                   "acceptance": 0.3}
    runs = [t for t in memory_figure(trace, [point, hot, point | {"budget_mb": 22.0}]).data if t.meta == "budget runs"]
    assert [(t.name, list(t.text)) for t in runs] == [(point["setting_label"], ["run 1", "run 3"]),
                                                      (hot["setting_label"], ["run 2"])]
    assert point["setting_label"] == "tiny-ar · model · chain · T 0"
    assert memory_figure(None).layout.annotations[0].text.startswith("Generate a speculative run")
    assert "drawn when it ends" in memory_figure(None, pending=True).layout.annotations[0].text  # Generate pressed
