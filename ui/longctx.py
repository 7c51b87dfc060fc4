"""The Long context tab: the prompt is a book. Choose a window (1K-8K tokens) of the shipped KJV text with facts
planted in it, or paste your own text; ask one of its generated questions (each with a checker) or your own; answer
it by reading the whole context, by retrieval (rag: DRAG / IterDRAG), by speculation with a drafter that reads only
the retrieved chunks (rapid), or by any other method the long-context family registers. Watch where in the context
the model looked, the memory each side holds, the speed, and the compute spent.

    build_longctx()   lays the tab out inside the current Blocks and wires it (used by app.py)
    demo()            the tab as a Blocks of its own:  python -m ui.longctx

Handlers live in `ui/longctx_callbacks.py` (plain functions, {output name: value}); rendering in
`ui/longctx_views.py` and `visualizers/longctx.py`. This module only creates widgets and binds names to them.
"""

from __future__ import annotations

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from ui import longctx_callbacks as cb
from ui.classroom import lesson_row
from ui.exports import download, wire_download
from ui.launch import serve, standalone
from ui.longctx_views import (DEFAULT_MAX_NEW_TOKENS, DEFAULT_METHOD, DEFAULT_MODEL, OUTPUTS, QUESTION_CHOICES,
                              SIZE_CHOICES, SPECULATIVE, TRAINS, UI_MAX_NEW_TOKENS, field_rows, method_help, method_label,
                              methods, shows, slider_end, views, widget_value)
from ui.widgets import QUIET, explain_clamping, model_choices, seed_box, spec_widget
from ui.wiring import lab_columns, named_inputs, on, on_any, run_buttons, session_state, wire_lab

INTRO = ("A long prompt is expensive twice: every generated token attends over the whole cache, and the cache holds "
         "keys and values for every position. **Retrieval** (rag) lets the model read only the chunks a query ranks "
         "highest (BM25); **RAPID** lets a drafter read only those chunks while the target, reading it all, verifies "
         "its guesses (lossless by default). The strip shows where each reader looked and where the answer was.")
CSS = """<style>
#lc-strip, #lc-memory, #lc-speed, #lc-compute, #lc-training { padding-top: 2.1rem !important; }
#lc-css { display: none; }
.lc-answer { font-size: 1.05rem; line-height: 1.6; }
.lc-verdict { margin-right: 0.6em; }
</style>"""
CONTROLS = ("model", "method", "source", "doc_seed", "own_text", "question", "own_question", "max_new_tokens", "chat")
# The tab opens on its lesson (issue 43): the controls' defaults (rag: DRAG, top 4 of 128-token chunks; the 1K book of
# seed 0; question 0, the fact at depth 0.1). tests/test_lessons.py runs it and checks what this note says.
OPENING_NOTE = (
    "**This tab's lesson: read four chunks, not the book.** The 1K book (seed 0) has three secret numbers planted "
    "at depths 0.1, 0.5 and 0.9, and the question asks for the first. **Generate** runs retrieval (DRAG, Yue et "
    "al. 2024): BM25 ranks the book's 128-token chunks for the question and SmolLM2 reads only the best four, 402 "
    "of the book's 849 tokens. The strip shows which chunks it read (the answer's chunk, outlined green, ranks "
    "first), the Memory plot its cache beside the whole book's, and the answer is right: 9376. Retrieval is only "
    "as good as its ranking: ask question 1 (the fact at depth 0.5) and the four chunks it reads answer 7634, "
    "another fact's number, where the whole book gives 8961. The presets walk the other methods: IterDRAG, RAPID, "
    "test-time training.")


def _controls(c: dict) -> None:
    c["preset"] = gr.Dropdown(cb.preset_choices(), value=None, label="Preset", elem_id="lc-preset",
                              info="A lesson: the method, its knobs and the shipped book by size, seed and question.")
    lesson_row(c, "longctx", "lc")
    c["note"] = gr.Markdown(OPENING_NOTE, elem_classes="dl-help", elem_id="lc-note")
    c["model"] = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Model", allow_custom_value=True,
                             elem_id="lc-model", info="SmolLM2-135M's window is 8,192 tokens.")
    run_buttons(c, "lc")
    with gr.Row():
        c["source"] = gr.Radio(SIZE_CHOICES, value="1024", label="Document", elem_id="lc-source", scale=3,
                               info="The shipped book (KJV: Ruth, Esther, Jonah) cut to a window, facts planted at "
                                    "depths 0.1, 0.5, 0.9; or your own text.")
        c["doc_seed"] = seed_box("lc-doc-seed")
    c["own_text"] = gr.Textbox("", label="Your text", lines=6, max_lines=12, visible=False, elem_id="lc-own-text",
                               info="At most 40,000 characters; the question follows it after a blank line.")
    c["own_file"] = gr.File(label="…or upload a .txt file", file_types=[".txt"], type="filepath", height=90,
                            visible=False, elem_id="lc-own-file")
    c["question"] = gr.Dropdown(QUESTION_CHOICES, value="0", label="Question", elem_id="lc-question",
                                info="Generated from the document, each with a checker; or type your own.")
    c["own_question"] = gr.Textbox("", label="Your question", visible=False, elem_id="lc-own-question")
    c["reference"] = gr.Textbox("", label="Expected answer (optional: the checker looks for its words)", visible=False,
                                elem_id="lc-reference")
    c["method"] = gr.Radio([(method_label(m), m) for m in methods()], value=DEFAULT_METHOD, label="Method",
                           elem_id="lc-method")
    c["method_help"] = gr.Markdown(method_help(DEFAULT_METHOD), elem_classes="dl-help", elem_id="lc-method-help")
    rows = field_rows()
    for name, (owner, row) in rows.items():  # a method's own knobs (a drafter's too)
        if owner != SPECULATIVE:
            _knob(c, name, owner, row)
    if any(owner == SPECULATIVE for owner, _ in rows.values()):  # the speculative family's, folded
        with gr.Accordion("speculative settings (tree, draft length, temperature, …)", open=False,
                          visible=shows(SPECULATIVE, DEFAULT_METHOD), elem_id="lc-spec-settings") as c["spec_settings"]:
            for name, (owner, row) in rows.items():
                if owner == SPECULATIVE:
                    _knob(c, name, owner, row)
    with gr.Row():
        c["max_new_tokens"] = gr.Slider(1, UI_MAX_NEW_TOKENS, value=DEFAULT_MAX_NEW_TOKENS, step=1,
                                        label="Max new tokens", elem_id="lc-max-new-tokens", scale=2)
        c["chat"] = gr.Checkbox(True, label="Chat template", elem_id="lc-chat")
    with gr.Accordion("Export & replay", open=False, elem_id="lc-export"):
        c["dl_json"] = gr.Button("Trace (JSON)", size="sm", elem_id="lc-download-json")
        c["upload"] = gr.File(label="Replay a saved long-context trace (.json)", file_types=[".json"],
                              type="filepath", height=110, elem_id="lc-upload")


def _knob(c: dict, name: str, owner: str, row: dict) -> None:
    """The widget of one method knob from its spec row (input name `name`), shown while its method is chosen."""
    label = row["name"].replace("_", " ").replace(".", ": ")
    c[f"lc:{name}"] = spec_widget(row, label=label, elem_id=f"lc-{name.replace('.', '-').replace('_', '-')}",
                                  visible=owner == SPECULATIVE or shows(owner, DEFAULT_METHOD), value=widget_value(row),
                                  ui_max=slider_end(row))


def _views(c: dict) -> None:
    gr.HTML(CSS, elem_id="lc-css")
    first = views(None)
    c["stats"] = gr.HTML(first["stats"], elem_id="lc-stats")
    c["answer"] = gr.HTML(first["answer"], elem_id="lc-answer", elem_classes="dl-panel")
    c["document"] = gr.Markdown(first["document"], elem_id="lc-document", elem_classes="dl-help")
    c["strip"] = gr.Plot(first["strip"], label="Where the model looked", elem_id="lc-strip")
    with gr.Row():
        c["memory"] = gr.Plot(first["memory"], label="Memory: KV cache", elem_id="lc-memory")
        c["speed"] = gr.Plot(first["speed"], label="Speed and acceptance", elem_id="lc-speed")
    with gr.Row():
        c["compute"] = gr.Plot(first["compute"], label="Compute spent", elem_id="lc-compute")
        c["training"] = gr.Plot(first["training"], label="Test-time training", elem_id="lc-training",
                                visible=DEFAULT_METHOD == TRAINS)
    gr.Markdown(INTRO, elem_classes="dl-help")


def build_longctx() -> dict:
    """Create the tab's widgets in the current Blocks, wire them, and return them by name."""
    c: dict = {}
    lab_columns(c, _controls, _views, "dl-longctx")
    c["trace"], c["marks"] = session_state(), session_state()
    _wire(c)
    return c


def _wire(c: dict) -> None:
    outputs = {name: c[name] for name in OUTPUTS}
    state = {k: c[k] for k in ("trace", "marks")}
    knobs = {name: c[f"lc:{name}"] for name in field_rows()}
    explain_clamping(c, {f"lc:{name}": row for name, (_, row) in field_rows().items()})
    shown = {f"lc:{name}": c[f"lc:{name}"] for name in field_rows()} | {k: c[k] for k in ("method_help", "training")} | \
        ({"spec_settings": c["spec_settings"]} if "spec_settings" in c else {})
    on(c["method"].change, cb.method_changed, shown, {"method": c["method"]}, **QUIET)
    own = {k: c[k] for k in ("own_text", "own_file", "doc_seed", "question", "own_question", "reference")}
    on(c["source"].change, cb.source_changed, own, {"source": c["source"], "question": c["question"]}, **QUIET)
    on(c["question"].change, cb.question_changed, {k: c[k] for k in ("own_question", "reference")},
       {"question": c["question"]}, **QUIET)
    on(c["own_file"].upload, cb.read_upload, {"own_text": c["own_text"]}, {"path": c["own_file"]}, **QUIET)
    document = {k: c[k] for k in ("model", "source", "doc_seed", "question", "own_question", "reference", "own_text")}
    on_any([c["source"].input, c["doc_seed"].submit, c["question"].input, c["own_question"].submit], cb.preview,
           {"document": c["document"]}, document, trigger_mode="always_last", concurrency_limit=None,
           **QUIET)  # linear and bounded (one tokenisation): no visitor's preview waits for another's
    run_inputs = named_inputs({k: c[k] for k in ("model", "source", "doc_seed", "own_text", "question", "own_question",
                                                 "reference", "method", "max_new_tokens", "chat")}, knobs)
    controls = CONTROLS + tuple(f"lc:{name}" for name in field_rows())
    wire_lab(c, cb, outputs, state, run_inputs, controls, lab="longctx")
    wire_download(c["dl_json"], download, [c["trace"]])


def demo() -> gr.Blocks:
    """This tab alone, queued like the full app."""
    return standalone(build_longctx, "Decoding Lab · Long context")


if __name__ == "__main__":
    serve(demo())
