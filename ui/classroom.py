"""Classroom mode: a presentation layout for a projector, and a lesson per lab.

Presentation layout: the "Present" button (or the P key) hides every tab's controls and the page
header, widens the views and enlarges the text (CSS class `dl-present` on the page body, rules in
assets/app.css). What the class needs to read stays on the projected page: the lesson line (its step and
title), the teaching note and the prompt (elements of class `dl-keep`, in a narrow column beside the
views). The keys step through the run that is on screen: Left / Right move the visible tab's step (or
round, or chunk) by one, and its pictures follow (each tab wires its step box's `.input`, which the keys
fire); N / B play the next / previous lesson step; P toggles the layout; G presses the tab's Generate
(or Transcribe; class `dl-generate`, hidden with the controls). Keys typed into a text field are left
alone.

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
  // the step (or round, or chunk) box of each tab: a slider's number box, or the Playground's step box
  const steppers = ["#dl-step", "#spec-round", "#sc-step", "#df-step", "#sp-chunk"];
  const visible = (el) => el && el.offsetParent !== null;
  const typing = (el) => el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName))
                        && el.type !== "range" && el.type !== "button";
  const activeTab = (el) => {  // in the tab on screen (its controls may be hidden by presentation mode)
    const panel = el.closest("[role=tabpanel]");
    return panel ? visible(panel) : visible(el);
  };
  const clickInTab = (selector) => {
    const button = [...document.querySelectorAll(selector)].find(activeTab);
    if (button && !button.disabled) button.click();
  };
  const lastChip = (box) => {  // a box without a maximum (the Playground's step): the last token chip's step
    const steps = [...(box.closest("[role=tabpanel]") || document).querySelectorAll(".tok[data-step]")]
      .map((chip) => Number(chip.dataset.step));
    return steps.length ? Math.max(...steps) : null;
  };
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const key = event.key.toLowerCase();
    if (key === "p") { document.body.classList.toggle("dl-present"); event.preventDefault(); return; }
    if (key === "n") { clickInTab(".dl-lesson-next"); return; }
    if (key === "b") { clickInTab(".dl-lesson-prev"); return; }
    if (key === "g") { clickInTab(".dl-generate"); return; }
    if (key !== "arrowright" && key !== "arrowleft") return;
    const box = steppers.map((s) => document.querySelector(`${s} input[type=number]`)).find(visible);
    if (!box || box.disabled) return;
    const low = Number(box.min || 0), high = box.max !== "" ? Number(box.max) : lastChip(box);
    if (high === null) return;
    // an empty step box means "the latest step": Left steps back from the last one
    const current = box.value === "" ? high + (key === "arrowleft" ? 0 : 1) : Number(box.value);
    const next = current + (key === "arrowright" ? 1 : -1);
    if (next < low || next > high) return;
    box.value = String(next);
    // what Gradio listens to: the box's `input` event (each tab wires its step's `.input`)
    box.dispatchEvent(new Event("input", { bubbles: true }));
    event.preventDefault();
  });
}
"""

KEEP = "dl-keep"  # the class of what presentation mode keeps on the page: lesson line, note, prompt

TOGGLE_JS = "() => { document.body.classList.toggle('dl-present'); }"


def keep_on_screen(*components) -> None:
    """Mark what the projected page keeps while the controls hide (a tab's note and prompt): class `dl-keep`.
    Called in a tab's build, inside its Blocks (the page's config is read when the Blocks closes)."""
    for component in components:
        classes = component.elem_classes or []
        component.elem_classes = [*([classes] if isinstance(classes, str) else classes), KEEP]


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
    with gr.Row(elem_classes=["dl-lesson", KEEP]):
        c["lesson_prev"] = gr.Button("◀ Previous", size="sm", elem_id=f"{prefix}-lesson-prev",
                                     elem_classes="dl-lesson-prev", min_width=90)
        c["lesson_next"] = gr.Button("Next ▶", size="sm", elem_id=f"{prefix}-lesson-next",
                                     elem_classes="dl-lesson-next", min_width=90)
    c["lesson"] = gr.Markdown(lesson_line(lab, None), elem_id=f"{prefix}-lesson", elem_classes=["dl-help", KEEP])
