"""The Long context tab in a real headless Chromium against the real app over HTTP: each method the tab lists runs on
the shipped book cut to 1K tokens (its needle at depth 0.5, 16 new tokens), and the answer, the checker's verdict and
every picture appear (ttt's training steps too); no figure label is cut; a preset sets the book it names; a screenshot
per method goes to a temporary folder, and the RAPID one is the README's (assets/screenshot-longctx.png with
DECODING_LAB_SCREENSHOTS=1)."""

from __future__ import annotations

import pytest

from conftest import screenshot_path
from test_browser import TIMEOUT_MS, check_labels_at_both_sizes, error_toasts, open_page, set_number
from ui.longctx_views import field_rows, method_label, methods

pytestmark = pytest.mark.slow  # Chromium driving the app server

SCREENSHOT = screenshot_path("screenshot-longctx.png")
WIDTH = 1400
PICTURES = ("lc-strip", "lc-memory", "lc-speed", "lc-compute")


def shot(method: str):
    return screenshot_path(f"longctx-{method.replace(':', '-')}.png")


def test_each_method_answers_with_a_verdict_and_its_pictures(app_url):
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size({"width": WIDTH, "height": 1000})
        page.get_by_role("tab", name="Long context").click()
        page.wait_for_selector("#lc-generate")
        page.locator("#lc-question input").click()
        page.get_by_role("option", name="needle at depth 0.5", exact=True).click()
        set_number(page, "lc-max-new-tokens", 16)
        done = " || true"  # the first run: nothing finished before it
        for method in methods():
            page.locator("#lc-method").get_by_text(method_label(method), exact=True).click()
            if f"{method}.steps" in field_rows():  # test-time training: 2 steps (not `locator.count()`: a hidden
                # knob is not in the page until the method's change event shows it)
                page.wait_for_selector(f"#lc-{method}-steps", state="visible")
                page.wait_for_function(f"() => document.querySelector('#lc-method-help').innerText.includes('{method}')")
                page.wait_for_timeout(500)  # the method's change event has answered: a value set now stays
                set_number(page, f"lc-{method}-steps", 2)
                page.wait_for_timeout(300)
            page.locator("#lc-generate").click()
            page.wait_for_function(f"() => !document.querySelector('#lc-status').innerText.includes('Finished'){done}")
            page.wait_for_function("() => document.querySelector('#lc-status').innerText.includes('Finished')")
            answer = page.locator("#lc-answer").inner_text()
            assert page.locator("#lc-answer .lc-answer-text").inner_text().strip() not in ("", "…"), answer
            assert ("✓ right" in answer or "✗ wrong" in answer) and "reference:" in answer, answer
            for picture in PICTURES:  # each picture drawn with data, not the placeholder before a run
                assert page.locator(f"#{picture} .js-plotly-plot").count() == 1, picture
                page.wait_for_selector(f"#{picture} .scatterlayer .trace, #{picture} .barlayer .trace", timeout=20_000)
            if method == "ttt":  # its training steps, drawn as they ran
                assert page.locator("#lc-training").is_visible()
                page.wait_for_selector("#lc-training .scatterlayer .trace", timeout=20_000)
                title = page.locator("#lc-training .gtitle").text_content() or ""
                assert "Training: 2 steps" in title and "tokens trained" in title, title
            strip = page.locator("#lc-strip .ytick text").all_text_contents()
            assert "facts & answer" in strip, strip
            if method in ("rag", "speculative:rapid"):  # the methods that retrieve (LongSpec reads it all)
                assert any(t in strip for t in ("question's retrieval", "drafter reads")), strip
            assert error_toasts(page) == []
            page.wait_for_timeout(600)  # let plotly finish its transition
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(shot(method)), full_page=True)
            if method == "speculative:rapid":  # the README's: the page down to the last picture
                box = page.locator("#lc-compute").bounding_box()
                height = min(int(box["y"] + box["height"]) + 10, page.evaluate("document.documentElement.scrollHeight"))
                page.screenshot(path=str(SCREENSHOT), full_page=True, clip={"x": 0, "y": 0, "width": WIDTH,
                                                                             "height": height})
            done = ""
        check_labels_at_both_sizes(page, "#dl-longctx")
        page.locator("#lc-preset input").click()  # a preset sets the book by size, seed and question
        page.get_by_role("option", name="RAG top-4 on a 2K book: read four chunks, not the book").click()
        # the tab's opening note names DRAG too, so wait for what the preset sets, not for that word
        page.wait_for_function("() => document.querySelector(\"#lc-source input[value='2048']\")?.checked")
        assert "DRAG" in page.locator("#lc-note").inner_text()
        assert page.locator("#lc-source input[value='2048']").is_checked()
        assert not page.locator("#lc-training").is_visible()
        assert error_toasts(page) == []
    assert SCREENSHOT.stat().st_size > 20_000
