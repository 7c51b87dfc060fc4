"""The Scaling tab says when a typed prompt is outside the one question form tiny-math reads (issue 27)."""

import pytest

from ui import scaling_callbacks as cb
from ui.scaling_views import DEFAULT_PROMPT

pytestmark = pytest.mark.fast("names tiny-math and smollm2-135m; the note reads the prompt, loads no model")

OUTSIDE = "Mary Ann has 37 shells. She gets 45 more, gives away 18, then multiplies them by 3. How many shells now?"


def test_a_prompt_in_the_form_gets_no_note():
    assert cb.form_note("tiny-math", DEFAULT_PROMPT)["form_note"]["visible"] is False


def test_a_prompt_outside_the_form_says_why():
    note = cb.form_note("tiny-math", OUTSIDE)["form_note"]
    assert note["visible"] is True and "outside the form tiny-math reads" in note["value"]


def test_other_models_get_no_note():
    assert cb.form_note("smollm2-135m", OUTSIDE)["form_note"]["visible"] is False
