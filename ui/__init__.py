"""The Gradio front end of Decoding Lab: one module trio per lab tab, each tab a Blocks that also runs alone.

    ui/common.py           settings from the environment, the ZeroGPU decorator, the worker thread that
                           streams a run, redraw throttling, gr.Error, launch options; the tabs' shared
                           skeleton (stat cards, streaming into views, Generate/Stop/Replay wiring, widgets
                           generated from a parameter's spec)
    ui/api.py              the `generate` API endpoint (streams events, ends with the CLI summary)
    ui/<tab>.py            layout and wiring of a tab: playground, speculative, scaling, diffusion
    ui/<tab>_callbacks.py  its event handlers, plain functions returning {output name: value}
    ui/<tab>_views.py      rendering the state (trace, comparison, selection) into those outputs

Method menus and parameter widgets come from the registry (`decoding.registry`). No algorithm
lives here: callbacks validate inputs, call `decoding.run.generate`, and hand the growing Trace
to `visualizers`.
"""
