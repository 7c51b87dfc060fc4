"""Present mode on a 1280x720 projector, in a real headless Chromium, every tab in one browser session: the
lesson line, the note and the prompt stay on the projected page while the controls hide; G presses the tab's
own Generate (Serving's, Long context's and the speech tab's Transcribe too); N / B walk the lesson; Left /
Right step through the run and the picture moves with them (the Playground's inspected step, the Speculative
round's draft tree, the Diffusion canvas), not only the number in the box. Runs are the shipped tiny models'
(tiny-ar, tiny-diffusion), a few tokens each."""

from __future__ import annotations

import re

import pytest

from conftest import screenshot_path
from decoding.presets import load_presets
from test_browser import TIMEOUT_MS, choose, error_toasts, open_page, set_number
from test_browser_diffusion import on_tiny_diffusion

pytestmark = pytest.mark.slow  # Chromium driving the app server

PROJECTOR = {"width": 1280, "height": 720}
PROMPT = "Once upon a time, in a small village by the sea,"
# tab name -> (its elem prefix, its lesson's lab or None, the ids Present mode keeps on the page)
TABS = {"Playground": ("dl", "playground", ("dl-lesson", "dl-prompt")),
        "Speculative": ("spec", "speculative", ("spec-lesson", "spec-note", "spec-prompt")),
        "Scaling": ("sc", "scaling", ("sc-lesson", "sc-note", "sc-prompt")),
        "Diffusion": ("df", "diffusion", ("df-lesson", "df-note", "df-prompt")),
        "Streaming speech": ("sp", None, ()),
        "Serving": ("sv", None, ()),
        "Long context": ("lc", "longctx", ("lc-lesson", "lc-question"))}
# Records which Generate a G press clicked, and keeps the click from Gradio (no run starts): a listener that
# catches it on its way down to the button (capture on window), before any of Gradio's handlers see it.
INTERCEPT_JS = """() => { window.dlPressed = []; window.addEventListener('click', (e) => {
  const button = e.target.closest && e.target.closest('.dl-generate');
  if (!button || !window.dlIntercept) return;
  window.dlPressed.push(button.id); e.stopPropagation(); e.preventDefault(); }, {capture: true}); }"""


def key(page, name: str) -> None:
    """Press a key on the page with no field focused (keys typed into a field are left alone)."""
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press(name)


def present(page, on: bool) -> None:
    if page.evaluate("() => document.body.classList.contains('dl-present')") != on:
        key(page, "p")
    page.wait_for_function("on => document.body.classList.contains('dl-present') === on", arg=on)


def wait_text(page, selector: str, text: str) -> None:
    page.wait_for_function("([s, t]) => (document.querySelector(s) || {}).innerText?.includes(t)", arg=[selector, text])


def on_screen(page, elem_id: str) -> bool:
    box = page.locator(f"#{elem_id}").bounding_box()
    return box is not None and box["height"] > 0 and box["y"] >= 0 and box["y"] + 20 <= PROJECTOR["height"]


def cut_slider_ends(page) -> list[str]:
    """The visible sliders' end labels (their min and max) that reach past their slider's box, where it cuts them
    (top_k's 1048576 showed as "104")."""
    return page.evaluate("""() => [...document.querySelectorAll('.min_value, .max_value')]
        .filter(e => e.offsetParent !== null && e.textContent.trim())
        .filter(e => { const b = e.getBoundingClientRect(), box = e.closest('.block').getBoundingClientRect();
                       return b.right > box.right + 0.5 || b.left < box.left - 0.5; })
        .map(e => (e.closest('[id]') || {}).id + ': ' + e.textContent)""")


def tree_title(page) -> str:
    return page.locator("#spec-tree-plot .gtitle").text_content()


def test_present_mode_keeps_the_lesson_and_its_keys_work_in_every_tab(app_url):
    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS) as page:
        page.set_viewport_size(PROJECTOR)
        page.evaluate(INTERCEPT_JS)

        # The Playground: Left / Right move the inspected step, and its alternatives chart with it
        page.get_by_role("tab", name="Playground").click()
        choose(page, "dl-model", "tiny-ar")
        choose(page, "dl-strategy", "greedy")
        page.locator("#dl-prompt textarea").fill(PROMPT)
        set_number(page, "dl-max-new-tokens", 6)
        present(page, True)
        key(page, "g")
        wait_text(page, "#dl-status", "Finished")
        last = page.locator("#dl-main-text .tok[data-step]").count() - 1
        assert last >= 3
        key(page, "ArrowLeft")  # from the latest step, one back
        wait_text(page, "#dl-distribution", f"Alternatives at step {last - 1}")
        page.wait_for_function("s => document.querySelector('#dl-main-text .tok.sel')?.dataset.step === String(s)",
                               arg=last - 1)
        key(page, "ArrowLeft")
        wait_text(page, "#dl-distribution", f"Alternatives at step {last - 2}")
        key(page, "ArrowRight")
        wait_text(page, "#dl-distribution", f"Alternatives at step {last - 1}")
        present(page, False)

        # Speculative: Left / Right move the round, and the draft tree shown is that round's
        page.get_by_role("tab", name="Speculative").click()
        choose(page, "spec-model", "tiny-ar")
        page.locator("#spec-drafter").get_by_text("prompt-lookup", exact=True).click()
        page.locator("#spec-prompt textarea").fill(PROMPT)
        set_number(page, "spec-max-new-tokens", 16)
        set_number(page, "spec-draft-length", 2)  # short drafts: several rounds in 16 tokens
        page.locator("#spec-compare input").uncheck()
        present(page, True)
        key(page, "g")
        wait_text(page, "#spec-status", "Finished")
        rounds = int(page.locator("#spec-round input[type=number]").get_attribute("max")) + 1
        assert rounds >= 3
        assert tree_title(page).startswith(f"round {rounds - 1}:")
        key(page, "ArrowLeft")
        page.wait_for_function("r => document.querySelector('#spec-tree-plot .gtitle')?.textContent.startsWith(`round ${r}:`)",
                               arg=rounds - 2)
        assert page.locator("#spec-round input[type=number]").input_value() == str(rounds - 2)
        key(page, "ArrowLeft")
        page.wait_for_function("r => document.querySelector('#spec-tree-plot .gtitle')?.textContent.startsWith(`round ${r}:`)",
                               arg=rounds - 3)
        key(page, "ArrowRight")
        page.wait_for_function("r => document.querySelector('#spec-tree-plot .gtitle')?.textContent.startsWith(`round ${r}:`)",
                               arg=rounds - 2)
        page.screenshot(path=str(screenshot_path("present-speculative.png")))
        present(page, False)

        # Diffusion (tiny-diffusion, one position a step): Left / Right move the canvas's step
        page.get_by_role("tab", name="Diffusion").click()
        on_tiny_diffusion(page, 12, 0.5)
        page.locator("#df-sampler input[value='fixed']").check()
        present(page, True)
        key(page, "g")
        wait_text(page, "#df-status", "Finished")
        last = int(page.locator("#df-step input[type=number]").input_value())
        assert last >= 2
        key(page, "ArrowLeft")
        page.wait_for_function("s => document.querySelector('#df-canvas .dl-head')?.innerText.startsWith(`step ${s} `)",
                               arg=last - 1)
        present(page, False)

        # Every tab: what the class reads stays on the page, G presses this tab's Generate, N / B walk its lesson
        page.get_by_role("tab", name="Playground").click()
        page.locator("#dl-compare").get_by_text("Compare strategies side by side").click()  # its sliders too
        page.wait_for_selector("#dl-compare-go")
        for tab, (prefix, lab, kept) in TABS.items():
            page.get_by_role("tab", name=tab).click()
            page.wait_for_selector(f"#{prefix}-generate")
            assert cut_slider_ends(page) == [], tab  # with the controls shown, on the projector
            present(page, True)
            page.evaluate("() => window.scrollTo(0, 0)")
            for elem_id in kept:
                assert on_screen(page, elem_id), (tab, elem_id)
            assert not page.locator(f"#{prefix}-generate").is_visible(), tab  # the controls are hidden
            note = page.locator(f"#{prefix}-note")
            if not kept and not (note.count() and note.inner_text().strip()):
                # nothing to read beside the pictures (Serving; the speech tab when nothing is missing): they get the page
                column = page.locator(f"#{prefix}-generate").locator("xpath=ancestor::*[contains(@class,'dl-controls')][1]")
                assert column.count() == 1 and not column.is_visible(), tab
            page.evaluate("() => { window.dlIntercept = true; window.dlPressed = []; }")
            key(page, "g")
            page.wait_for_function("() => window.dlPressed.length > 0")
            assert page.evaluate("window.dlPressed") == [f"{prefix}-generate"], tab
            page.evaluate("() => { window.dlIntercept = false; }")
            if lab:
                steps = load_presets(lab=lab)
                key(page, "n")  # the lesson's next step (the first, or the one after the tab's opening preset)
                line = f"#{prefix}-lesson"
                page.wait_for_function("s => /step \\d+ of/.test(document.querySelector(s).innerText)", arg=line)
                k = int(re.search(r"step (\d+) of", page.locator(line).inner_text()).group(1))
                other = k - 1 if k > 1 else k + 1  # then back one (B), or on one more (N) from the first
                key(page, "b" if k > 1 else "n")
                wait_text(page, line, f"step {other} of {len(steps)}: {steps[other - 1].title}")
                wait_text(page, f"#{prefix}-note", steps[other - 1].title)  # that step's note, on the page
                assert on_screen(page, f"{prefix}-note"), tab
            present(page, False)
        assert error_toasts(page) == []
