"""Wording the tabs show (issue 18): sentences that read right, and help text that survives Markdown."""

from __future__ import annotations

import re

from decoding.events import Trace
from decoding.registry import STRATEGIES, param_specs
from decoding.run import run_to_trace
from ui import diffusion_callbacks as cb


def test_slow_motion_says_whether_the_model_is_still_running(monkeypatch):
    monkeypatch.setattr(cb, "_pause", lambda seconds: None)
    done = run_to_trace("tiny-random-diffusion", "Hello", strategy="diffusion", max_new_tokens=4, chat=False)
    running = Trace([e for e in done.events if e.kind != "finish"])
    statuses = [frame["status"] for trace in (running, done) for frame in cb._slow_motion(trace, -1, 1, 10.0)]
    assert statuses[0] == "Slow motion: step 1 of the 4 computed so far (the model is still running)."
    assert statuses[-1] == "Slow motion: step 2 of the 4 computed so far (the model has finished)."


def test_parameter_help_has_no_markdown_emphasis_marks():
    """Gradio renders a widget's info as Markdown: `**` there is read as bold (or shown escaped, `\\*\\*`)."""
    for name in STRATEGIES:
        for spec in param_specs(name):
            assert not re.search(r"\*\*|(?<![\w`])_\w+_(?![\w`])", spec["help"]), (name, spec["name"], spec["help"])


def test_statistics_in_words_get_the_wrapping_style():
    from ui.common import stat_cards_html

    html = stat_cards_html([("tokens", 12), ("stopped by", "end token"), ("tokens / s", "7.1")], "run")
    assert '<div class="v">12</div>' in html and '<div class="v">7.1</div>' in html
    assert '<div class="v w">end token</div>' in html  # smaller and wrapping: an ellipsis cut it to "end tok…"
