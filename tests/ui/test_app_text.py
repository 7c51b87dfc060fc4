"""Wording the tabs show (issue 18): sentences that read right, and help text that survives Markdown."""

from __future__ import annotations

import re

from decoding.registry import STRATEGIES, param_specs


def test_parameter_help_has_no_markdown_emphasis_marks():
    """Gradio renders a widget's info as Markdown: `**` there is read as bold (or shown escaped, `\\*\\*`)."""
    for name in STRATEGIES:
        for spec in param_specs(name):
            assert not re.search(r"\*\*|(?<![\w`])_\w+_(?![\w`])", spec["help"]), (name, spec["name"], spec["help"])


def test_statistics_in_words_get_the_wrapping_style():
    from ui.widgets import stat_cards_html

    html = stat_cards_html([("tokens", 12), ("stopped by", "end token"), ("tokens / s", "7.1")], "run")
    assert '<div class="v">12</div>' in html and '<div class="v">7.1</div>' in html
    assert '<div class="v w">end token</div>' in html  # smaller and wrapping: an ellipsis cut it to "end tok…"
