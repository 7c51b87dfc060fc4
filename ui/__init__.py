"""The Gradio front end of Decoding Lab: one module per lab tab, each a Blocks that also runs alone.

    ui/common.py                settings from the environment, the ZeroGPU decorator, the worker
                                thread that streams a run, redraw throttling, gr.Error, launch options
    ui/api.py                   the `generate` API endpoint (streams events, ends with the CLI summary)
    ui/playground.py            the Playground tab: layout and wiring
    ui/playground_callbacks.py  its event handlers, plain functions returning {output name: value}
    ui/playground_views.py      rendering the state (trace, branch, selection) into those outputs

No algorithm lives here: callbacks validate inputs, call `decoding.run.generate`, and hand the
growing Trace to `visualizers`.
"""
