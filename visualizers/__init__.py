"""Visualizers: pure functions from a Trace (or its prefix while streaming) to a figure or HTML.

No model, no tokenizer, no globals: each call builds a new plotly Figure or HTML string from the
events alone, so the same functions serve the app, notebooks, saved traces and tests.

    tokens_html(trace, color_by="prob", selected_step=None) -> str   coloured token chips
    token_table(trace) -> pandas.DataFrame                            one row per TokenStep (CSV)
    entropy_figure(trace, selected_step=None) -> go.Figure            entropy / p(chosen) / kept size
    distribution_figure(trace, step=None) -> go.Figure                top alternatives at one step
    beams_figure(trace) -> go.Figure                                  beam search tree
    figure_to_html(fig, include_plotlyjs=True) -> str                 standalone HTML (offline when inlined)
"""

from __future__ import annotations

import plotly.graph_objects as go

from visualizers.beams import beams_figure
from visualizers.distribution import distribution_figure
from visualizers.entropy import entropy_figure
from visualizers.tokens import token_table, tokens_html


def figure_to_html(fig: go.Figure, include_plotlyjs: bool | str = True) -> str:
    """A complete HTML page. By default plotly.js is inlined (4.8 MB; works offline); "cdn" loads it from
    cdn.plot.ly when the page is opened (a few kB: what the app's downloads use)."""
    if not isinstance(fig, go.Figure):
        raise ValueError(f"`fig` must be a plotly.graph_objects.Figure, got {type(fig).__name__}")
    if include_plotlyjs not in (True, "cdn"):
        raise ValueError(f"`include_plotlyjs` must be True (inline) or 'cdn', got {include_plotlyjs!r}")
    return fig.to_html(include_plotlyjs=include_plotlyjs, full_html=True)


__all__ = ["beams_figure", "distribution_figure", "entropy_figure", "figure_to_html", "token_table", "tokens_html"]

# speculative decoding (draft tree, acceptance, p vs q overlap, round-coloured text, summary table)
from visualizers.speculative import (
    acceptance_figure,
    draft_tree_figure,
    overlap_figure,
    spec_tokens_html,
    speculative_summary_html,
)

__all__ += ["acceptance_figure", "draft_tree_figure", "overlap_figure", "spec_tokens_html", "speculative_summary_html"]

# inference-time scaling (weights + ESS, lineage, particle cards, final choice, budget curve)
from visualizers.particles import (
    budget_figure,
    choice_html,
    lineage_figure,
    search_tree_figure,
    particles_html,
    scaling_summary_html,
    weights_figure,
)

__all__ += ["budget_figure", "choice_html", "lineage_figure", "particles_html", "scaling_summary_html",
            "search_tree_figure", "weights_figure"]

# diffusion LMs (live canvas, unmasking order, confidence, tokens per step, sampler and AR comparisons)
from visualizers.diffusion import (
    ar_vs_diffusion_html,
    canvas_html,
    compare_samplers_figure,
    confidence_figure,
    diffusion_summary_html,
    tokens_per_step_figure,
    unmask_order_figure,
)

__all__ += ["ar_vs_diffusion_html", "canvas_html", "compare_samplers_figure", "confidence_figure",
            "diffusion_summary_html", "tokens_per_step_figure", "unmask_order_figure"]

# Playground methods with pictures of their own (momentum graph, AdaDec pauses, superposed drafts)
from visualizers.token_methods import adadec_figure, method_figure, momentum_graph_figure, superposed_figure

__all__ += ["adadec_figure", "method_figure", "momentum_graph_figure", "superposed_figure"]
