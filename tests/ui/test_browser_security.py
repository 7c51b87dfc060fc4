"""Hostile shared traces replayed in a real headless Chromium against the real app over HTTP (issue 12):
one page, every tab. In the Playground the original attack (a `step` that is a string opening an
<img onerror>) must be refused with a toast naming the field; in the Speculative, Scaling and
Diffusion tabs (and the Playground again) a trace whose every text is such a payload must show the
payload as text. No handler may run: the payload sets `window.__pwned` and the page title.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_browser import TIMEOUT_MS, open_page
from test_security import PAYLOAD, hostile_copy, traces  # noqa: F401  (traces: real traces of every lab)

pytestmark = pytest.mark.slow  # Chromium driving the app server

SHOWN = "<img"  # the payload as the page shows it: as text (the canvas shows its spaces as ␣)
PWNED = "() => [window.__pwned, document.title]"
TABS = {  # tab: (element id prefix, the accordion holding its upload, the view that shows texts, trace)
    "Playground": ("dl", "#dl-export", "#dl-main-text", "sample"),
    "Speculative": ("spec", "#spec-export", "#spec-text", "speculative"),
    "Scaling": ("sc", "#sc-export", "#sc-particles", "particle-filter"),
    "Diffusion": ("df", "#df-export", "#df-canvas", "diffusion"),
}


def upload(page, selector: str, path: Path, accordion: str) -> None:
    if not page.locator(selector).is_visible():  # the "Export & replay" accordion is closed
        page.locator(f"{accordion} .label-wrap").first.click()
        page.wait_for_selector(selector, state="visible")
    clear = page.locator(f"{selector} button[aria-label='Clear'], {selector} button[title='Clear']")
    if clear.count():  # a file from an earlier upload: remove it first (the button shows on hover)
        clear.first.dispatch_event("click")
    page.locator(f"{selector} input[type=file]").set_input_files(str(path))


def toast_texts(page) -> list[str]:
    return page.locator(".toast-body").all_inner_texts()


def test_hostile_traces_are_refused_or_shown_as_text_in_every_tab(app_url, traces, tmp_path):  # noqa: F811 (the fixture imported above)
    attack = json.loads(traces["sample"].to_json())
    attack["events"][1]["step"] = PAYLOAD  # issue 12: a string step reached data-step="..." unescaped
    files = {"attack": tmp_path / "attack.json"}
    files["attack"].write_text(json.dumps(attack), encoding="utf-8")
    for name, trace in traces.items():
        files[name] = tmp_path / f"hostile-{name}.json"
        hostile_copy(trace).save(files[name])

    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS // 3) as page:  # no model to load
        title = page.title()
        page.on("dialog", lambda dialog: dialog.dismiss())

        # Playground: the original attack is refused, and says why
        upload(page, "#dl-upload", files["attack"], "#dl-export")
        page.wait_for_function("() => [...document.querySelectorAll('.toast-body')]"
                               ".some(t => t.innerText.includes('Cannot replay'))")
        toast = next(t for t in toast_texts(page) if "Cannot replay" in t)
        assert "event 1 ('token'): `step` must be an integer >= 0" in toast, toast
        assert "<img src=x onerror=" in toast  # quoted as text, not built into an element
        page.wait_for_timeout(300)
        page.screenshot(path=str(tmp_path / "refused-trace.png"))  # to look at the toast when debugging
        assert page.evaluate(PWNED) == [None, title]
        for close in page.locator("[data-testid='toast-close']").all():
            close.click()

        for tab, (prefix, accordion, view, run) in TABS.items():
            page.get_by_role("tab", name=tab).click()
            status = f"#{prefix}-status"
            page.wait_for_selector(status)
            upload(page, f"#{prefix}-upload", files[run], accordion)
            page.wait_for_function("s => (document.querySelector(s) || {}).innerText?.includes('Replaying')", arg=status)
            page.wait_for_function("([v, t]) => (document.querySelector(v) || {}).innerText?.includes(t)",
                                   arg=[view, SHOWN])
            page.wait_for_timeout(300)  # plotly draws the figures after the HTML
            assert page.evaluate(PWNED) == [None, title], tab
            assert page.locator(f"{view} img, {view} script").count() == 0, tab
            assert page.locator("img[src='x'], img[onerror]").count() == 0, tab
            assert not [t for t in toast_texts(page) if "Cannot replay" in t], tab
            assert SHOWN in page.locator(f"#{prefix}-stats").inner_text(), tab  # the model name, as text


LINK = "Session expired: click to sign in"


def test_links_in_a_trace_are_never_links_on_the_page(app_url, traces, tmp_path):  # noqa: F811 (the fixture imported above)
    """Issue 25: plotly turns `<a href>` in a title or label into a real link, Markdown turns `[text](url)`
    into one; a replayed value is plain text in both (the status line, the charts)."""
    scaling = json.loads(traces["particle-filter"].to_json())
    scaling["events"][-1]["extra"]["answer"] = f"[{LINK}](http://evil.example/login)"
    sample = json.loads(traces["sample"].to_json())
    for event in sample["events"]:
        if event["kind"] == "token":
            event["token_text"] = f"<a href='http://evil.example/x' style='font-size:30px;color:red'>{LINK}</a>"
            event["top_tokens"] = [event["token_text"]] * len(event["top_tokens"])
    files = {"Scaling": tmp_path / "answer-link.json", "Playground": tmp_path / "token-link.json"}
    files["Scaling"].write_text(json.dumps(scaling), encoding="utf-8")
    files["Playground"].write_text(json.dumps(sample), encoding="utf-8")

    with open_page(app_url, "#dl-generate", timeout_ms=TIMEOUT_MS // 3) as page:
        for tab in ("Playground", "Scaling"):
            prefix, accordion, _, _ = TABS[tab]
            page.get_by_role("tab", name=tab).click()
            status = f"#{prefix}-status"
            page.wait_for_selector(status)
            upload(page, f"#{prefix}-upload", files[tab], accordion)
            page.wait_for_function("s => (document.querySelector(s) || {}).innerText?.includes('Replaying')", arg=status)
            page.wait_for_timeout(800)  # plotly draws the figures after the HTML
            assert page.locator("a[href*='evil.example']").count() == 0, tab
            links = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot svg a')]"
                                  ".map(a => a.outerHTML.slice(0, 300))")
            assert links == [], (tab, links)
        assert LINK in page.locator("#sc-status").inner_text()  # shown, as text
        page.locator("#sc-status").scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "links-as-text.png"))
