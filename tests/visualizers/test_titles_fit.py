"""Chart titles fit a half-page chart (issue 18): plotly never wraps a title, it cuts it at the figure's
edge, so long titles come as short lines."""

from __future__ import annotations

import html
import re

from decoding.events import RunStarted, TokenStep, Trace
from visualizers import distribution_figure
from visualizers._common import title_block

WIDTH = 64  # characters a title line may have on a chart half the page wide


def lines(title: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", line)) for line in title.split("<br>")]


def test_title_block_wraps_long_lines_and_keeps_the_small_line():
    title, top = title_block(["word " * 30], width=40, small="kept 3 of 49152 tokens")
    assert all(len(line) <= 40 for line in lines(title["text"]))
    assert title["text"].endswith("<span style='font-size:12px'>kept 3 of 49152 tokens</span>")
    assert top > title_block(["short"])[1]  # more lines, more room above the plot
    assert lines(title_block(["&lt;" * 50], width=10)[0]["text"]) == ["<" * 50]  # an entity is never cut


def test_the_distribution_title_fits_with_a_long_token_and_a_big_vocabulary():
    text = "supercalifragilistic-expialidocious"
    start = RunStarted(model="m", strategy="sample", params={}, prompt="Hi", prompt_text="Hi", prompt_ids=[1],
                       chat=False, seed=0, max_new_tokens=400, device="cpu", dtype="float32", vocab_size=262144)
    step = TokenStep(step=399, token_id=7, token_text=text, prob=0.123456, sampling_prob=0.2, rank=12, entropy=3.0,
                     entropy_truncated=1.0, kept_size=123456, top_ids=[7, 8], top_tokens=[text, "b"],
                     top_probs=[0.123456, 0.1], top_kept=[True, True], elapsed_s=1.0)
    fig = distribution_figure(Trace([start, step]))
    shown = lines(fig.layout.title.text)
    assert shown[-1] == "kept 123456 of 262144 tokens" and "step 399: chose" in shown[0]
    assert all(len(line) <= WIDTH for line in shown), shown
