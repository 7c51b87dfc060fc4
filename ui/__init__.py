"""The Gradio front end of Decoding Lab: one module trio per lab tab, each tab a Blocks that also runs alone.

    ui/worker.py           the worker thread that streams a run, compute slots, the async bridge that makes
                           Stop stop compute, redraw throttling, the live status line
    ui/wiring.py           handlers bound by name, the Generate/Stop/preset/lesson/replay wiring every lab
                           shares, the two-column layout, session state
    ui/widgets.py          widgets from a parameter's spec, the model menu, clamping warnings, stat cards,
                           Markdown-safe text, engine errors as gr.Error
    ui/plugin_fields.py    a family's plug-in knobs as widgets (the chosen plug-in's shown)
    ui/gradio_import.py    Gradio imported without regenerating its type stubs (2.5 s per start)
    ui/launch.py           launch options, start-up line and preload, a tab served alone
    ui/guard.py            the bounds a public Space needs (per-client queue, sessions, uploads, replay time)
    ui/api.py              the `generate` API endpoint (streams events, ends with the CLI summary)
    ui/<tab>.py            layout and wiring of a tab: playground, speculative, scaling, diffusion
    ui/<tab>_callbacks.py  its event handlers, plain functions returning {output name: value}
    ui/<tab>_views.py      rendering the state (trace, comparison, selection) into those outputs

Method menus and parameter widgets come from the registry (`decoding.registry`). No algorithm
lives here: callbacks validate inputs, call `decoding.run.generate`, and hand the growing Trace
to `visualizers`.
"""

from ui.gradio_import import skip_stub_generation

skip_stub_generation()  # before any tab module imports Gradio: 2.5 s less per start (see ui/gradio_import.py)
