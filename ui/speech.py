"""The Streaming speech tab: Whisper transcribing audio while it is still arriving. The clip plays in chunks
(simulated real time, or the browser's microphone as you speak); after each chunk a policy decodes what has been
heard and decides which words are committed. Watch the transcript change, words withdrawn (struck through), and
when each word was committed against when it was spoken; run two policies side by side on the same clip.

    build_speech()   lays the tab out inside the current Blocks and wires it (used by app.py)
    demo()           the tab as a Blocks of its own:  python -m ui.speech

Handlers live in `ui/speech_callbacks.py` (plain functions, {output name: value}); rendering in
`ui/speech_views.py` and `visualizers/speech.py`. This module only creates widgets and binds names to them.
"""

from __future__ import annotations

import decoding  # noqa: F401  (switches telemetry off before gradio is imported)
import gradio as gr

from decoding.speech.audio import missing_programs
from ui import speech_callbacks as cb
from ui.exports import wire_download
from ui.launch import serve, standalone
from ui.speech_views import (COLUMNS, NO_SECOND, OUTPUTS, PLUGIN_ROWS, SHARED, DEFAULT_POLICY, policy_choices, spec,
                             views)
from ui.widgets import QUIET, spec_widget
from ui.wiring import bind, lab_columns, named_inputs, on, run_buttons, session_state
from ui.worker import MODEL_CONCURRENCY_ID, model_event, runs_at_once

INTRO = ("Whisper reads **30-second windows**, so to transcribe speech that is still arriving a system decodes the "
         "audio heard so far again after every **chunk**, and must decide which words are final. **Committed** words "
         "(coloured by the token's probability) are promised; the **unconfirmed** tail (dashed) may still change; a "
         "committed word withdrawn later is **retracted** (struck through). **redecode** shows everything it writes "
         "(the naive baseline: it retracts); **local-agreement** (Whisper-Streaming) commits what two consecutive "
         "hypotheses agree on and never retracts. A word's **latency** is how long after it was spoken (on the "
         "audio timeline) it was committed.")
CSS = """<style>
#sp-stats .dl-stats .dl-cards, #sp-stats2 .dl-stats .dl-cards { grid-template-columns: repeat(3, minmax(0, 1fr)); }
#sp-status p { font-size: 0.95rem; margin: 0.2rem 0; }
#sp-css, #sp-note:empty { display: none; }
#sp-transcript, #sp-transcript2 { min-height: 5em; }
</style>"""


def _eid(key: str) -> str:
    return key.replace(":", "-").replace(".", "-").replace("_", "-")


def _policy_widgets(c: dict, prefix: str, label: str, value: str, choices: list[str]) -> None:
    """A column's policy selector and every policy's own knobs (the chosen one's shown)."""
    c[f"{prefix}:policy"] = gr.Radio(choices, value=value, label=label, elem_id=_eid(f"{prefix}:policy"),
                                     info=spec("policy")["help"])
    for row in PLUGIN_ROWS:
        key = f"{prefix}:{row['name']}"
        c[key] = spec_widget(row, label=f"{row['name'].partition('.')[2].replace('_', ' ')} ({row['plugin']})",
                             elem_id=_eid(key), visible=row["plugin"] == value)


def _controls(c: dict) -> None:
    opening = cb.opening()
    c["source"] = gr.Radio(list(cb.SOURCES), value=opening["source"], label="Audio", elem_id="sp-source",
                           info="A sentence espeak-ng speaks (its word times known, so latencies and WER are exact), "
                                "a file of yours, or your microphone.")
    c["preset"] = gr.Dropdown(list(cb.PRESETS), value=opening["preset"], label="Sentence", elem_id="sp-preset",
                              info="Synthesised on demand on this machine (espeak-ng, British English, 150 words a "
                                   "minute) and cached.")
    c["upload"] = gr.Audio(sources=["upload"], type="filepath", label="Audio file", visible=False,
                           elem_id="sp-upload")
    c["mic"] = gr.Audio(sources=["microphone"], type="numpy", streaming=True, label="Microphone", visible=False,
                        elem_id="sp-mic")
    c["reference"] = gr.Textbox("", label="Reference transcript (optional)", visible=False, elem_id="sp-reference",
                                info="What was said, for the word error rate (latencies need word times, which only "
                                     "the preset sentences have).")
    run_buttons(c, "sp", "Transcribe")
    c["realtime"] = gr.Checkbox(True, label="Real time", elem_id="sp-realtime",
                                info="Feed each chunk when the audio clock reaches its end, as a live stream would; "
                                     "off: as fast as the model goes (latencies are on the audio timeline either way).")
    _policy_widgets(c, COLUMNS[0], "Policy", DEFAULT_POLICY, policy_choices())
    _policy_widgets(c, COLUMNS[1], "Side by side with", opening["policy2"], [NO_SECOND, *policy_choices()])
    for name in SHARED:
        c[f"sp:{name}"] = spec_widget(spec(name), elem_id=_eid(f"sp:{name}"), ui_max=spec(name)["high"])
    note = cb.unavailable_note()
    c["note"] = gr.Markdown(note, elem_classes="dl-help", elem_id="sp-note")
    with gr.Accordion("Export & replay", open=False, elem_id="sp-export"):
        with gr.Row():
            c["dl_json"] = gr.Button("Trace (JSON)", size="sm", elem_id="sp-download-json")
            c["dl_other"] = gr.Button("Side-by-side trace (JSON)", size="sm", elem_id="sp-download-other")
        c["replay"] = gr.File(label="Replay a saved speech trace (.json)", file_types=[".json"], type="filepath",
                              height=110, elem_id="sp-replay")


def _column(c: dict, suffix: str, initial: dict) -> None:
    c[f"stats{suffix}"] = gr.HTML(initial[f"stats{suffix}"], elem_id=f"sp-stats{suffix}")
    c[f"transcript{suffix}"] = gr.HTML(initial[f"transcript{suffix}"], elem_id=f"sp-transcript{suffix}",
                                       elem_classes="dl-panel")
    c[f"timeline{suffix}"] = gr.Plot(initial[f"timeline{suffix}"], label="Spoken vs committed, per word",
                                     elem_id=f"sp-timeline{suffix}")
    c[f"lengths{suffix}"] = gr.Plot(initial[f"lengths{suffix}"], label="Hypothesis and committed tokens per chunk",
                                    elem_id=f"sp-lengths{suffix}")


def needs_note() -> str:
    """What this machine lacks for the tab (sox, espeak-ng), each with the command that installs it: shown at the top
    of the tab before any run; "" when nothing is missing."""
    missing = missing_programs()
    return "**Before you start:** " + " ".join(missing) if missing else ""


def _views(c: dict) -> None:
    initial = {k: v for k, v in views(None, None).items() if k != "chunk"}
    gr.HTML(CSS, elem_id="sp-css", padding=False)
    needs = needs_note()
    c["needs"] = gr.Markdown(needs, visible=bool(needs), elem_id="sp-needs", elem_classes="dl-warning")
    gr.Markdown(INTRO, elem_classes="dl-help", elem_id="sp-intro")
    c["chunk"] = gr.Slider(1, 2, value=1, step=1, label="Chunk", interactive=False, elem_id="sp-chunk",
                           info="After the run: step back to see the transcripts after an earlier chunk.")
    with gr.Row(equal_height=False):
        with gr.Column(elem_id="sp-column1"):
            _column(c, "", initial)
        with gr.Column(elem_id="sp-column2", visible=cb.opening()["policy2"] != NO_SECOND) as c["column2"]:
            _column(c, "2", initial)


def build_speech() -> dict:
    """Create the tab's widgets in the current Blocks, wire them, and return them by name."""
    c: dict = {}
    lab_columns(c, _controls, _views, "dl-speech")
    c["trace"], c["other"], c["live"] = session_state(), session_state(), session_state()
    _wire(c)
    return c


def _wire(c: dict) -> None:
    outputs = {name: c[name] for name in OUTPUTS}
    state = {k: c[k] for k in ("trace", "other")}
    on(c["source"].change, cb.source_shown, {k: c[k] for k in ("preset", "upload", "mic", "reference", "generate")},
       {"source": c["source"]}, **QUIET)
    for prefix in COLUMNS:
        own = {f"{prefix}:{r['name']}": c[f"{prefix}:{r['name']}"] for r in PLUGIN_ROWS}
        on(c[f"{prefix}:policy"].change, lambda policy, p=prefix: cb.shown_policy(p, policy), own,
           {"policy": c[f"{prefix}:policy"]}, **QUIET)
    on(c["sp2:policy"].change, cb.second_shown, {"column2": c["column2"]}, {"policy2": c["sp2:policy"]}, **QUIET)
    knobs = named_inputs({name: c[f"sp:{name}"] for name in SHARED},  # the second column's own knobs as "2:<name>"
                         {r["name"]: c[f"sp:{r['name']}"] for r in PLUGIN_ROWS},
                         {f"2:{r['name']}": c[f"sp2:{r['name']}"] for r in PLUGIN_ROWS})
    run_inputs = named_inputs({k: c[k] for k in ("source", "preset", "upload", "reference", "realtime")},
                              {"policy": c["sp:policy"], "policy2": c["sp2:policy"]}, knobs)
    bound = dict(concurrency_id=MODEL_CONCURRENCY_ID, concurrency_limit=runs_at_once(), show_progress="minimal",
                 show_progress_on=[c["status"]], api_visibility="undocumented")
    run = c["generate"].click(model_event(bind(cb.generate_run, outputs | {"live": c["live"]}, run_inputs)),
                              list(run_inputs.values()), list(outputs.values()) + [c["live"]], **bound)
    # the microphone: a recording's pieces go to a feed; its run is a model-bound event as Transcribe's is
    mic_inputs = named_inputs({"reference": c["reference"], "policy": c["sp:policy"], "policy2": c["sp2:policy"]},
                              knobs)
    mic_outputs = outputs | {"live": c["live"]}
    mic_run = on(c["mic"].start_recording, cb.mic_started, mic_outputs, mic_inputs, **QUIET).success(
        model_event(bind(cb.mic_run, mic_outputs, {"live": c["live"]})), [c["live"]], list(mic_outputs.values()),
        **bound)
    on(c["mic"].stream, cb.mic_piece, {"status": c["status"]}, {"piece": c["mic"], "live": c["live"]},
       stream_every=0.5, time_limit=cb.max_audio_s() + 30, concurrency_limit=None, **QUIET)
    on(c["mic"].stop_recording, cb.mic_stopped, {"status": c["status"]}, {"live": c["live"]}, **QUIET)
    on(c["stop"].click(None, cancels=[run, mic_run], api_visibility="undocumented").then, cb.stop_run, outputs,
       {"live": c["live"]}, **QUIET)
    on(c["replay"].upload, cb.replay, outputs | {"column2": c["column2"]}, {"path": c["replay"]} | state, **QUIET)
    on(c["chunk"].input, cb.choose_chunk, outputs, {"chunk": c["chunk"]} | state, trigger_mode="always_last", **QUIET)
    wire_download(c["dl_json"], cb.download_first, [c["trace"]])
    wire_download(c["dl_other"], cb.download_second, [c["other"]])


def demo() -> gr.Blocks:
    """This tab alone, queued like the full app."""
    return standalone(build_speech, "Decoding Lab · Streaming speech")


if __name__ == "__main__":
    serve(demo())
