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


def test_the_first_token_counts_from_the_click_with_the_wait_said_apart():
    """Gemma's lesson waited 80 s for its first load, then the card said 'first token 0.37 s'."""
    from ui.playground_views import first_token_card

    assert first_token_card({"time_to_first_token_s": 0.37, "waited_s": 0.0}) == ("first token (s)", "0.37")
    label, value = first_token_card({"time_to_first_token_s": 0.37, "waited_s": 80.0})
    assert value == "80.37" and "80.0 of it loading or waiting" in label
    assert first_token_card({"time_to_first_token_s": None, "waited_s": 3.0})[1] == fmt_none()


def fmt_none() -> str:
    from ui.widgets import fmt

    return fmt(None, 2)
