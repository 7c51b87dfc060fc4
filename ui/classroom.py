"""Classroom mode: a presentation layout for a projector, and a lesson per lab.

Presentation layout: the "Present" button (or the P key) hides every tab's controls and the page
header, widens the views and enlarges the text (CSS class `dl-present` on the page body, rules in
assets/app.css). The keys step through the run that is on screen: Left / Right move the visible
tab's step (or round) slider by one; N / B play the next / previous lesson step; P toggles the
layout; G presses the tab's Generate (hidden with the controls). Keys typed into a text field are
left alone.

Lesson: a lab's presets in file order (the numbers in their names are the order a class meets
them). "Next" and "Previous" choose the next preset in the lab's Preset menu, which sets every
control and shows the teaching note, exactly as choosing it by hand does; the line above them
says where the class is ("lesson step 2 of 6").
"""

from __future__ import annotations

import gradio as gr

from decoding.presets import load_presets

# Installed once with the page (`launch(js=...)`): the keys of presentation mode.
KEYS_JS = """
() => {
  const sliders = ["#dl-step", "#spec-round", "#sc-step", "#df-step"];
  const visible = (el) => el && el.offsetParent !== null;
  const typing = (el) => el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName))
                        && el.type !== "range" && el.type !== "button";
  const activeTab = (el) => {  // in the tab on screen (its controls may be hidden by presentation mode)
    const panel = el.closest("[role=tabpanel]");
    return panel ? visible(panel) : visible(el);
  };
  const clickInTab = (selector) => {
    const button = [...document.querySelectorAll(selector)].find(activeTab);
    if (button) button.click();
  };
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const key = event.key.toLowerCase();
    if (key === "p") { document.body.classList.toggle("dl-present"); event.preventDefault(); return; }
    if (key === "n") { clickInTab(".dl-lesson-next"); return; }
    if (key === "b") { clickInTab(".dl-lesson-prev"); return; }
    if (key === "g") { clickInTab("#dl-generate, #spec-generate, #sc-generate, #df-generate"); return; }
    if (key !== "arrowright" && key !== "arrowleft") return;
    const slider = sliders.map((s) => document.querySelector(`${s} input[type=number]`)).find(visible);
    if (!slider || slider.disabled) return;
    const next = Number(slider.value) + (key === "arrowright" ? 1 : -1);
    if (next < Number(slider.min || 0) || (slider.max !== "" && next > Number(slider.max))) return;
    slider.value = String(next);
    slider.dispatchEvent(new Event("input", { bubbles: true }));
    slider.dispatchEvent(new Event("change", { bubbles: true }));
    slider.blur();
    event.preventDefault();
  });
}
"""

TOGGLE_JS = "() => { document.body.classList.toggle('dl-present'); }"


def present_button() -> gr.Button:
    """The header's "Present" toggle: runs in the browser only (no server round trip)."""
    button = gr.Button("Present (P)", size="sm", variant="secondary", elem_id="dl-present", scale=0, min_width=120)
    button.click(None, js=TOGGLE_JS, api_visibility="undocumented")
    return button


def lesson(lab: str) -> list[str]:
    """The lab's presets in lesson order (their names)."""
    return [p.name for p in load_presets(lab=lab)]


def lesson_line(lab: str, name) -> str:
    """Where the class is: "lesson step k of n: title", or how to start."""
    steps = load_presets(lab=lab)
    names = [p.name for p in steps]
    if name not in names:
        return f"**Lesson:** {len(steps)} steps; press Next (or N) to start with the first." if steps else ""
    k = names.index(name)
    return f"**Lesson step {k + 1} of {len(steps)}:** {steps[k].title}"


def lesson_step(lab: str, name, direction: int) -> dict:
    """The preset `direction` (+1 / -1) steps from `name` (the first one from no choice), clamped
    to the lesson's ends, and the line saying where the class now is."""
    names = lesson(lab)
    if not names:
        return {"lesson": ""}
    k = names.index(name) + direction if name in names else 0
    chosen = names[min(max(k, 0), len(names) - 1)]
    return {"preset": chosen, "lesson": lesson_line(lab, chosen)}


def lesson_row(c: dict, lab: str, prefix: str) -> None:
    """Previous / Next and the lesson line, under a tab's Preset menu (`c` gets lesson, lesson_prev,
    lesson_next)."""
    if not lesson(lab):
        return
    with gr.Row(elem_classes="dl-lesson"):
        c["lesson_prev"] = gr.Button("◀ Previous", size="sm", elem_id=f"{prefix}-lesson-prev",
                                     elem_classes="dl-lesson-prev", min_width=90)
        c["lesson_next"] = gr.Button("Next ▶", size="sm", elem_id=f"{prefix}-lesson-next",
                                     elem_classes="dl-lesson-next", min_width=90)
    c["lesson"] = gr.Markdown(lesson_line(lab, None), elem_id=f"{prefix}-lesson", elem_classes="dl-help")
