"""Speculative decoding pictures: the draft tree of a round, acceptance over rounds, p versus q at one
position, the generated text coloured by round, and a summary table.

Papers followed: Leviathan et al. 2023 and Chen et al. 2023 (speculative sampling of a chain),
Miao et al. 2024 "SpecInfer" and Chen et al. 2024 "Sequoia" (token trees). The events are
`SpecRound` (one per round) followed by the round's `TokenStep`s (see decoding/events.py).

Glossary
    draft / drafted   tokens the drafter proposed this round, as a tree rooted at the context.
    accepted          drafted tokens the target kept (green); they reach the output.
    rejected          drafted tokens the target tried and refused (red, faded).
    unvisited         drafted tokens never judged, because an ancestor was rejected or a sibling
                      was accepted first (grey, faded).
    source            RASD rounds (drafter=rasd): the hover says whether a node's token came from the
                      draft model, from retrieval (prompt lookup), or both; the title counts the
                      accepted tokens by source.
    diffusion block   DEER rounds (drafter=diffusion): a dashed box around the drafted positions, all
                      filled by one call of the diffusion model.
    extra token       the target's own token that ends every round (gold diamond): "bonus" (all
                      accepted to a leaf, drawn from p), "residual" (after a rejection, drawn from
                      norm(max(0, p - q)); under rule spectr, SpecTr's residual) or "correction"
                      (greedy: the target's argmax).
    overlap           Σ min(p, q) over the vocabulary at one position: the probability that a
                      token drawn from q is accepted there (a deterministic draft x: p(x)).
"""

from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.events import SpecRound, Trace, stats
from visualizers._common import (MARKS, NODES, TEMPLATE, WAITING, cap, empty_figure, esc, label, note_capped,
                                 plotly_safe, shown_of, title_block, token_steps, visible)
from visualizers.beams import _lines
from visualizers.tokens import _chip_text

STATUSES = ("accepted", "rejected", "unvisited")
COLORS = {"accepted": "#54a24b", "rejected": "#e45756", "unvisited": "#bab0ac", "extra": "#f2b701",
          "root": "#555555", "edge": "#b0b0b0", "p": "#4c78a8", "q": "#f58518", "overlap": "#54a24b"}
OPACITY = {"accepted": 1.0, "rejected": 0.55, "unvisited": 0.4}
ROUND_COLORS = ["#b3cde3", "#fed9a6", "#ccebc5", "#decbe4", "#fbb4ae", "#ffffcc", "#e5d8bd", "#fddaec"]
TREE_X_TITLE, TREE_Y_TITLE = "draft depth (0 = context)", "branches"
WAITING_ROUND = "waiting for the first draft round…"
NOT_SPECULATIVE = "no speculative rounds in this trace: run the speculative strategy to see one"
ACCEPTANCE_HEIGHT = 360
OWN = ("bonus", "residual", "correction")


def spec_rounds(trace: Trace) -> list[SpecRound]:
    return [e for e in trace.events if isinstance(e, SpecRound)]


def _no_rounds_message(trace: Trace) -> str:
    # In a speculative trace every TokenStep follows its SpecRound, so tokens without rounds mean another strategy.
    return NOT_SPECULATIVE if token_steps(trace) or trace.finish else WAITING_ROUND


def _pick_round(trace: Trace, round_index: int | None) -> tuple[SpecRound | None, str | None]:
    """The requested round (default: the latest), or None and a message for an empty figure."""
    if round_index is not None and (isinstance(round_index, bool) or not isinstance(round_index, int)
                                    or round_index < 0):
        raise ValueError(f"`round_index` must be None or an integer >= 0, got {round_index!r}")
    rounds = spec_rounds(trace)
    if not rounds:
        return None, _no_rounds_message(trace)
    if round_index is None:
        return rounds[-1], None
    found = next((r for r in rounds if r.round == round_index), None)
    return found, None if found else f"round {round_index} has not been played yet (last round: {rounds[-1].round})"


def _fmt(x, spec=".3g") -> str:
    return "—" if x is None else format(x, spec)


def _context_text(trace: Trace, r: SpecRound) -> str | None:
    """Text of the last token before the round (None at the start of the generation)."""
    before = [e for e in token_steps(trace) if e.step < r.step]
    return before[-1].token_text if before else None


def _extra_anchor(r: SpecRound) -> int:
    return r.accepted_path[-1] if r.accepted_path else -1


# ---------------------------------------------------------------- draft tree


def tree_layout(nodes: list[dict], extra_parent: int | None = None) -> dict:
    """Tidy (x, y) per node id, root = -1 at (0, y): leaves on consecutive y slots in creation order,
    parents centred over their children. With `extra_parent`, a virtual child "extra" is laid out last.
    Iterative, and each node is placed once: a chain of 65,536 nodes or a parent link that loops (a
    hand-made trace) cannot recurse or run forever; a node the root does not reach hangs off the root."""
    ids = {n["id"] for n in nodes}
    children: dict = {}
    for n in nodes:
        parent = n["parent"] if n["parent"] in ids and n["parent"] != n["id"] else -1
        children.setdefault(parent, []).append(n["id"])
    if extra_parent is not None:
        children.setdefault(extra_parent if extra_parent in ids else -1, []).append("extra")
    pos, next_slot, seen = {}, 0, {-1}
    stack = [(-1, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        if not done:
            stack.append((node, depth, True))
            kids = [k for k in children.get(node, []) if k not in seen]
            seen.update(kids)
            stack.extend((k, depth + 1, False) for k in reversed(kids))
            children[node] = kids  # the children this node lays out
            continue
        kids = children.get(node, [])
        if kids:
            y = (pos[kids[0]][1] + pos[kids[-1]][1]) / 2
        else:
            y, next_slot = next_slot, next_slot + 1
        pos[node] = (depth, y)
    for node in [n["id"] for n in nodes] + (["extra"] if extra_parent is not None else []):
        if node not in pos:  # in a loop of parents, unreachable from the root: a leaf under the root
            pos[node], next_slot = (1, next_slot), next_slot + 1
    return pos


def draft_tree_figure(trace: Trace, round_index: int | None = None) -> go.Figure:
    """The draft tree of one round (default: the latest), coloured by the target's verdict."""
    r, message = _pick_round(trace, round_index)
    if r is None:
        return empty_figure(message, x_title=TREE_X_TITLE, y_title=TREE_Y_TITLE)
    anchor = _extra_anchor(r)
    on_path = set(r.accepted_path)
    nodes = [n for k, n in enumerate(r.nodes) if k < cap(NODES) or n["id"] in on_path]  # parents come first
    pos = tree_layout(nodes, anchor)
    by_id = {n["id"]: n for n in nodes}
    fig = go.Figure()
    edges, path_edges = [], []
    for n in nodes:
        parent = n["parent"] if n["parent"] in by_id else -1
        (path_edges if n["id"] in on_path else edges).append((*pos[parent], *pos[n["id"]]))
    fig.add_trace(_lines(edges, "draft edge", dict(color=COLORS["edge"], width=1.5)))
    fig.add_trace(_lines(path_edges, "accepted path", dict(color=COLORS["accepted"], width=4)))
    fig.add_trace(_lines([(*pos[anchor], *pos["extra"])], f"to {plotly_safe(r.extra_kind)} token",
                         dict(color=COLORS["extra"], width=3, dash="dot")))
    context = _context_text(trace, r)
    fig.add_trace(go.Scatter(
        x=[pos[-1][0]], y=[pos[-1][1]], mode="markers+text", name="context", showlegend=False,
        text=[plotly_safe(label(context, 10)) if context is not None else "prompt"], textposition="top center",
        cliponaxis=False,
        marker=dict(symbol="square", size=12, color=COLORS["root"]),
        hovertemplate="context (last token before the round)<extra></extra>"))
    show_text = len(nodes) <= 120
    for status in STATUSES:
        group = [n for n in nodes if n.get("status") == status]
        fig.add_trace(go.Scatter(
            x=[pos[n["id"]][0] for n in group], y=[pos[n["id"]][1] for n in group], name=status,
            mode="markers+text" if show_text else "markers", showlegend=True,
            text=[plotly_safe(label(n["token_text"], 10)) for n in group], textposition="top center",
            textfont=dict(size=11), opacity=OPACITY[status], cliponaxis=False,
            marker=dict(size=[_size(n.get("q")) for n in group], color=COLORS[status],
                        line=dict(color="#333", width=0.6)),
            customdata=[[plotly_safe(label(n["token_text"], 30)), n["depth"], _fmt(n.get("q")), _fmt(n.get("p")),
                         _fmt(n.get("accept_prob")), _fmt(n.get("u")), status, _source(r, n["id"])] for n in group],
            hovertemplate="%{customdata[0]} · depth %{customdata[1]}<br>q = %{customdata[2]} (draft) · "
                          "p = %{customdata[3]} (target)<br>accept prob %{customdata[4]} · u = %{customdata[5]}"
                          "%{customdata[7]}<extra>%{customdata[6]}</extra>"))
    extra_label = plotly_safe(label(r.extra_token_text, 10))
    fig.add_trace(go.Scatter(
        x=[pos["extra"][0]], y=[pos["extra"][1]], mode="markers+text", name=f"target's own ({plotly_safe(r.extra_kind)})",
        text=[f"{extra_label} ({plotly_safe(r.extra_kind)})"], textposition="top center", textfont=dict(size=11),
        cliponaxis=False,
        marker=dict(symbol="diamond", size=16, color=COLORS["extra"], line=dict(color="#333", width=0.8)),
        customdata=[[plotly_safe(label(r.extra_token_text, 30)), plotly_safe(r.extra_kind), _fmt(r.extra_p)]],
        hovertemplate="%{customdata[0]}: the target's %{customdata[1]} token<br>p = %{customdata[2]}<extra></extra>"))
    leaves = 1 + max(y for _, y in pos.values())
    depth = max(x for x, _ in pos.values())
    block = r.extra.get("diffusion_block") if isinstance(r.extra, dict) else None
    if block and nodes:  # DEER: the whole drafted block came from ONE diffusion call
        right = max(n["depth"] for n in nodes) + 0.45
        fig.add_shape(type="rect", x0=0.55, x1=right, y0=-0.55, y1=leaves - 0.45,
                      line=dict(color="#7f5fbf", width=1.5, dash="dash"), fillcolor="rgba(127,95,191,0.07)", layer="below")
        fig.add_annotation(x=right, y=leaves - 0.45, xanchor="right", yanchor="bottom", showarrow=False,
                           text=f"diffusion block: {plotly_safe(block)} positions drafted in one pass",
                           font=dict(size=11, color="#7f5fbf"))
    fig.update_layout(
        template=TEMPLATE, height=min(max(300, 150 + 42 * leaves), 700), margin=dict(l=70, r=60, t=80, b=40),
        title=dict(text=tree_title(r), font=dict(size=14)),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
        # room beside the first and last nodes for their labels (centred on them, drawn past the axes if need be)
        xaxis=dict(title=dict(text=TREE_X_TITLE), dtick=1, range=[-0.8, depth + 1.0]),
        yaxis=dict(title=dict(text=TREE_Y_TITLE), range=[leaves - 0.4, -0.7], showticklabels=False, zeroline=False,
                   showgrid=False))  # reversed: the first child on top; room above for the labels
    return note_capped(fig, [shown_of(len(nodes), len(r.nodes), "draft nodes (the first made, and the accepted path)")])


def _source(r: SpecRound, node: int) -> str:
    """RASD rounds: where the node's token came from (model, retrieval or both), as a hover line."""
    sources = r.extra.get("sources") if isinstance(r.extra, dict) else None
    if not isinstance(sources, list) or not 0 <= node < len(sources):
        return ""
    return f"<br>drafted by: {plotly_safe(str(sources[node]))}"


def tree_title(r: SpecRound) -> str:
    title = (f"round {r.round}: accepted {len(r.accepted_path)} of {len(r.nodes)} drafted · "
             f"+1 {plotly_safe(r.extra_kind)} {plotly_safe(label(r.extra_token_text))}")
    sources = r.extra.get("sources") if isinstance(r.extra, dict) else None
    if isinstance(sources, list) and r.accepted_path:
        got = [str(sources[i]) for i in r.accepted_path if 0 <= i < len(sources)]
        title += " · accepted from " + ", ".join(f"{k} {got.count(k)}" for k in ("model", "retrieval", "both") if k in got)
    return title


def _size(q) -> float:
    return 9 + 15 * min(max(q, 0.0), 1.0) if isinstance(q, (int, float)) else 9


# ---------------------------------------------------------------- acceptance over rounds


def acceptance_figure(trace: Trace) -> go.Figure:
    """Accepted length per round (+ running acceptance rate), its histogram, and acceptance by depth."""
    rounds = spec_rounds(trace)
    if not rounds:
        return empty_figure(_no_rounds_message(trace), height=ACCEPTANCE_HEIGHT, x_title="round",
                            y_title="accepted tokens")
    x = [r.round for r in rounds]
    accepted = [len(r.accepted_path) for r in rounds]
    judged = [sum(1 for n in r.nodes if n.get("status") != "unvisited") for r in rounds]
    running, acc_sum, judged_sum = [], 0, 0
    for a, j in zip(accepted, judged):
        acc_sum, judged_sum = acc_sum + a, judged_sum + j
        running.append(acc_sum / judged_sum if judged_sum else None)
    max_depth = max([n["depth"] for r in rounds for n in r.nodes] + accepted + [0])
    fig = make_subplots(rows=1, cols=3, specs=[[{"secondary_y": True}, {}, {}]], horizontal_spacing=0.16,
                        column_widths=[0.45, 0.25, 0.3],
                        subplot_titles=("accepted per round", "accepted-length histogram", "acceptance by depth"))
    fig.add_trace(go.Bar(
        x=x, y=accepted, name="accepted tokens", marker=dict(color=COLORS["accepted"]),
        customdata=[[len(r.nodes), j, plotly_safe(r.extra_kind)] for r, j in zip(rounds, judged)],
        hovertemplate="round %{x}: accepted %{y} of %{customdata[0]} drafted (%{customdata[1]} judged)"
                      "<br>+1 %{customdata[2]}<extra></extra>"), row=1, col=1, secondary_y=False)
    fig.add_trace(go.Scatter(
        x=x, y=running, name="acceptance rate (running)", mode="lines+markers",
        line=dict(color=COLORS["p"], width=2), marker=dict(size=5),
        hovertemplate="after round %{x}: %{y:.3f} of judged drafts accepted<extra></extra>"),
        row=1, col=1, secondary_y=True)
    lengths = list(range(max_depth + 1))
    rounds_by_length = Counter(accepted)  # one pass (not accepted.count per length: rounds x depth)
    fig.add_trace(go.Bar(
        x=lengths, y=[rounds_by_length[k] for k in lengths], name="rounds", marker=dict(color="#72b7b2"),
        showlegend=False, hovertemplate="%{y} rounds accepted %{x} tokens<extra></extra>"), row=1, col=2)
    depths = list(range(1, max_depth + 1))
    nodes = [n for r in rounds for n in r.nodes if n.get("status") != "unvisited"]
    judged_at, accepted_at = Counter(n["depth"] for n in nodes), Counter(n["depth"] for n in nodes
                                                                          if n["status"] == "accepted")
    per_depth = [(accepted_at[d], judged_at[d]) for d in depths]
    fig.add_trace(go.Bar(
        x=depths, y=[a / j if j else None for a, j in per_depth], name="accepted / judged",
        marker=dict(color=COLORS["accepted"], opacity=0.75), showlegend=False, customdata=per_depth,
        hovertemplate="depth %{x}: %{customdata[0]} of %{customdata[1]} judged accepted<extra></extra>"),
        row=1, col=3)
    fig.update_xaxes(title_text="round", row=1, col=1)
    fig.update_yaxes(title_text="accepted tokens", rangemode="tozero", dtick=_int_dtick(max(accepted)),
                     row=1, col=1, secondary_y=False)
    fig.update_yaxes(title_text="acceptance rate", range=[0, 1.02], tickmode="linear", tick0=0, dtick=0.2,
                     showgrid=False, row=1, col=1, secondary_y=True)
    # the histogram's column is narrow: about five unrotated ticks (one per length squashed 0-10 into a smear)
    fig.update_xaxes(title_text="accepted length", dtick=_int_dtick(max_depth), tickangle=0, row=1, col=2)
    fig.update_yaxes(title_text="rounds", rangemode="tozero", dtick=_int_dtick(max(rounds_by_length.values())),
                     row=1, col=2)
    fig.update_xaxes(title_text="draft depth", dtick=1 if max_depth <= 12 else _int_dtick(max_depth), tickangle=0,
                     row=1, col=3)
    fig.update_yaxes(title_text="accepted fraction", range=[0, 1.02], row=1, col=3)
    fig.update_annotations(font=dict(size=12))
    fig.update_layout(template=TEMPLATE, height=ACCEPTANCE_HEIGHT, margin=dict(l=55, r=30, t=70, b=45),
                      bargap=0.25, legend=dict(orientation="h", yanchor="bottom", y=1.1, xanchor="left", x=0))
    return fig


def _int_dtick(top: int) -> int:
    """Integer tick spacing giving about five ticks up to `top` (counts have no fractional ticks)."""
    return max(1, -(-top // 5))


# ---------------------------------------------------------------- p versus q at one position


def _token_names(trace: Trace, r: SpecRound, d: dict) -> dict:
    """token id -> text, from everything the trace knows (dists may carry p_/q_top_tokens)."""
    names = {}
    for e in token_steps(trace):
        names.update(zip(e.top_ids, e.top_tokens))
        names[e.token_id] = e.token_text
    names.update((n["token_id"], n["token_text"]) for n in r.nodes)
    names[r.extra_token_id] = r.extra_token_text
    for side in ("p", "q"):
        names.update(zip(d.get(f"{side}_top_ids") or [], d.get(f"{side}_top_tokens") or []))
    return names


def overlap_figure(trace: Trace, round_index: int | None = None, parent: int = -1) -> go.Figure:
    """Target p and draft q at the position after `parent` (-1 = the context) of one round."""
    if isinstance(parent, bool) or not isinstance(parent, int) or parent < -1:
        raise ValueError(f"`parent` must be -1 (the context) or a node id >= 0, got {parent!r}")
    x_title, y_title = "next token (union of p's and q's recorded top tokens)", "probability"
    r, message = _pick_round(trace, round_index)
    if r is None:
        return empty_figure(message, x_title=x_title, y_title=y_title)
    d = next((d for d in r.dists if d.get("parent") == parent), None)
    if d is None:
        known = ", ".join(str(d.get("parent")) for d in r.dists) or "none"
        return empty_figure(f"round {r.round} has no distributions recorded after node {parent} "
                            f"(recorded: {known})", x_title=x_title, y_title=y_title)
    p_top = dict(zip(d.get("p_top_ids") or [], d.get("p_top_probs") or []))
    q_top = dict(zip(d.get("q_top_ids") or [], d.get("q_top_probs") or []))
    kids = [n for n in r.nodes if n["parent"] == parent]
    for n in kids:  # drafted tokens are always known exactly
        p_top.setdefault(n["token_id"], n.get("p"))
        if q_top:
            q_top.setdefault(n["token_id"], n.get("q"))
    ids = sorted(set(p_top) | set(q_top), key=lambda t: -max(p_top.get(t) or 0, q_top.get(t) or 0))
    total = len(ids)
    ids = ids[:cap(MARKS)]  # the likeliest tokens, within the cap
    names = _token_names(trace, r, d)
    labels = [plotly_safe(label(names[t], 12)) if t in names else f"#{t}" for t in ids]
    xs = list(range(1, len(ids) + 1))
    fig = go.Figure()
    width = 0.4 if q_top else 0.7
    bars = [("p (target)", p_top, "p", -width if q_top else -width / 2)]
    if q_top:
        bars.append(("q (draft)", q_top, "q", 0.0))
    for name, values, key, offset in bars:
        fig.add_trace(go.Bar(
            x=xs, y=[values.get(t) for t in ids], name=name, offset=offset, width=width,
            marker=dict(color=COLORS[key]), customdata=[[lab, t] for lab, t in zip(labels, ids)],
            hovertemplate=f"%{{customdata[0]}} (id %{{customdata[1]}})<br>{key} = %{{y:.4f}}<extra></extra>"))
    if q_top:
        both = [min(p_top[t], q_top[t]) if p_top.get(t) is not None and q_top.get(t) is not None else None
                for t in ids]
        fig.add_trace(go.Bar(
            x=xs, y=both, name="min(p, q)", offset=-width, width=2 * width,
            marker=dict(color="rgba(84,162,75,0.35)", line=dict(color=COLORS["overlap"], width=1.5),
                        pattern=dict(shape="/", fgcolor=COLORS["overlap"])),
            hovertemplate="min(p, q) = %{y:.4f}<extra></extra>"))
    mark = {"accepted": "✓", "rejected": "✗", "unvisited": "·"}
    at = {t: i for i, t in enumerate(ids)}
    drafted_here = [n for n in kids if n["token_id"] in at]  # one text trace for all the marks (not one annotation each)
    if drafted_here:
        fig.add_trace(go.Scatter(
            x=[xs[at[n["token_id"]]] for n in drafted_here],
            y=[max(p_top.get(n["token_id"]) or 0, q_top.get(n["token_id"]) or 0) for n in drafted_here],
            text=[f"▼ drafted {mark.get(n.get('status'), '?')}" for n in drafted_here], mode="text", name="drafted",
            textposition="top center", textfont=dict(size=11, color=[COLORS.get(n.get("status"), "#333")
                                                                     for n in drafted_here]),
            hoverinfo="skip", showlegend=False))
    if parent == _extra_anchor(r) and r.extra_token_id in ids:  # above its bars (under the axis it hid a tick label)
        t = r.extra_token_id
        drafted = any(n["token_id"] == t for n in kids)
        fig.add_annotation(x=xs[ids.index(t)], y=max(p_top.get(t) or 0, q_top.get(t) or 0),
                           text=f"◆ {plotly_safe(r.extra_kind)}", showarrow=False, yanchor="bottom",
                           yshift=18 if drafted else 2, font=dict(size=11, color="#b58900"))
    highest = max([v for v in list(p_top.values()) + list(q_top.values()) if v is not None] + [0.01])
    lines, drafted = _overlap_title(trace, r, d, parent, kids, p_top, q_top)
    title, top = title_block(lines, width=90, small=drafted)
    fig.update_layout(
        template=TEMPLATE, height=267 + top, barmode="overlay", margin=dict(l=55, r=20, t=top + 22, b=70),
        title=title | dict(font=dict(size=13)),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1),
        xaxis=dict(title=dict(text=x_title), tickmode="array", tickvals=xs, ticktext=labels, tickangle=-35),
        yaxis=dict(title=dict(text=y_title), range=[0, highest * 1.25]))  # room for the labels above the bars
    return note_capped(fig, [shown_of(len(ids), total, "tokens (the likeliest)")])


def position_text(trace: Trace, r: SpecRound, parent: int, context_word: str = "") -> str:
    """Where a round's position is: "after <the context's last token>" (parent -1) or "after node N <token>"."""
    if parent == -1:
        ctx = _context_text(trace, r)
        return f"after {context_word}{plotly_safe(label(ctx, 12))}" if ctx is not None else "after the prompt"
    node = next((n for n in r.nodes if n["id"] == parent), None)
    return f"after node {parent} {plotly_safe(label(node['token_text'], 12))}" if node else f"after node {parent}"


def _overlap_title(trace, r, d, parent, kids, p_top, q_top) -> tuple[list[str], str]:
    """(the title's lines: where, how drafts are checked here, a figure that goes with it; the drafted tokens'
    verdicts as the small line). One thought per line: plotly cuts a long title at the figure's edge."""
    where = position_text(trace, r, parent, "the context ")
    verdicts = ", ".join(f"{plotly_safe(label(n['token_text'], 12))} {plotly_safe(n.get('status'))}" for n in kids)
    drafted = f"drafted here: {verdicts}" if kids else "nothing drafted here"
    greedy = bool(kids) and all(n.get("u") is None for n in kids if n.get("status") != "unvisited")
    lines = [f"round {r.round}, {where}:"]
    if not q_top:
        lines.append("greedy check: a draft token is accepted iff it is the target's argmax" if greedy else
                     "deterministic drafter: a drafted token x is accepted with probability p(x)")
        if isinstance(d.get("overlap"), (int, float)) and kids and not greedy:
            lines.append(f"Σ p(drafted) = {d['overlap']:.3f}")
    else:
        exact = d.get("overlap")
        if isinstance(exact, (int, float)):
            lines.append(f"overlap Σ min(p, q) = {exact:.3f} = P(accept a token drawn from q)")
        else:
            top = sum(min(p, q_top[t]) for t, p in p_top.items() if p is not None and q_top.get(t) is not None)
            lines.append(f"overlap Σ min(p, q) ≥ {top:.3f} (recorded top tokens only) = P(accept a token drawn from q)")
        if greedy:
            lines.append("(with sampling; the check here was greedy: accepted iff argmax)")
    return lines, drafted


# ---------------------------------------------------------------- text and summary (HTML)

_CSS = " ".join("""
.dl-spec-tokens{line-height:1.9;font-size:15px}
.dl-spec-tokens .dl-text{white-space:pre-wrap;word-break:break-word;overflow-wrap:anywhere}
.dl-spec-tokens .tok{color:#111;border-radius:3px;padding:1px 0;box-shadow:inset -1px 0 0 rgba(0,0,0,.18)}
.dl-spec-tokens .tok.own{font-weight:700;text-decoration:underline;text-decoration-thickness:2px;
 text-decoration-color:#b58900;text-underline-offset:3px}
.dl-spec-tokens .tok .sym{opacity:.6}
.dl-spec-tokens .dl-legend{display:flex;flex-wrap:wrap;align-items:center;gap:.5em;font-size:12px;opacity:.85;
 margin-bottom:.4em}
.dl-spec-tokens .dl-empty,.dl-spec-tokens .dl-note{font-size:13px;opacity:.75;font-style:italic}
""".split())


def spec_tokens_html(trace: Trace) -> str:
    """The generated text, one chip per TokenStep, background by round; the target's own tokens bold and underlined."""
    steps, head = token_steps(trace), f'<div class="dl-spec-tokens"><style>{_CSS}</style>'
    if not steps:
        return f'{head}<div class="dl-empty">{esc(WAITING)}</div></div>'
    rounds = spec_rounds(trace)
    by_round = {r.round: r for r in rounds}
    chips = []
    for e in steps:
        r = by_round.get(e.extra.get("round")) or next((r for r in reversed(rounds) if r.step <= e.step), None)
        k = e.step - r.step if r else None
        node = None
        if r is not None and 0 <= k < len(r.accepted_path):
            node = next((n for n in r.nodes if n["id"] == r.accepted_path[k]), None)
        origin = e.extra.get("origin") or ("draft" if node else r.extra_kind if r else None)
        own = origin in OWN
        color = ROUND_COLORS[r.round % len(ROUND_COLORS)] if r else "#eeeeee"
        if own:
            p, q = (r.extra_p if r and k == len(r.accepted_path) else e.prob), None
            what = f"{origin}: the target's own token"
        else:
            p, q = (node.get("p"), node.get("q")) if node else (e.prob, None)
            what = f"drafted & accepted (depth {node['depth']})" if node else (origin or "token")
        tooltip = (f"step {e.step} · round {r.round if r else '—'} · '{visible(e.token_text)}'\n{what}\n"
                   f"p = {_fmt(p)} (target)" + (f" · q = {_fmt(q)} (draft)" if q is not None else ""))
        chips.append(f'<span class="tok{" own" if own else ""}" data-step="{esc(e.step)}" '
                     f'data-round="{esc(r.round) if r else ""}" data-origin="{esc(origin or "")}" '
                     f'style="background:{esc(color)}" title="{esc(tooltip).replace(chr(10), "&#10;")}">'
                     f'{_chip_text(e.token_text)}</span>')
    legend = (f'<div class="dl-legend"><span>colour = round:</span>'
              f'<span class="tok" style="background:{ROUND_COLORS[0]}">drafted &amp; accepted</span>'
              f'<span class="tok own" style="background:{ROUND_COLORS[1]}">target&#x27;s own token</span>'
              f'<span>(bonus · residual · correction) · hover a token for p and q</span></div>')
    note = "" if rounds else f'<div class="dl-note">{esc(NOT_SPECULATIVE)}</div>'
    return f'{head}{note}{legend}<div class="dl-text">{"".join(chips)}</div></div>'


def speculative_summary_html(trace: Trace, baseline: dict | None = None) -> str:
    """A table of the run's speculative statistics; with `baseline` (stats of plain decoding of the
    same target on the same prompt), both tokens/s and the speed-up."""
    if baseline is not None and not isinstance(baseline, dict):
        raise ValueError("`baseline` must be None or a stats dict (decoding.events.stats), "
                         f"got {type(baseline).__name__}")
    s = stats(trace)
    if "rounds" not in s:
        body = f'<div class="dl-empty">{esc(_no_rounds_message(trace))}</div>'
        return f'<div class="dl-spec-summary">{body}</div>'
    draft, verify = s["draft_time_s"], s["verify_time_s"]
    share = f" ({draft / (draft + verify):.0%} drafting)" if draft + verify > 0 else ""
    rows = [("rounds", s["rounds"], ""),
            ("target forward passes per token", _fmt(s["target_forward_passes_per_token"]), "plain decoding: 1"),
            ("mean accepted length", _fmt(s["mean_accepted_length"]), "drafted tokens kept per round (+1 own token)"),
            ("acceptance rate", _fmt(s["acceptance_rate"]), "accepted / judged drafts"),
            ("draft efficiency", _fmt(s["draft_efficiency"]), "accepted / all drafted nodes"),
            ("draft vs verify time", f"{draft:.3f} s vs {verify:.3f} s{share}", "")]
    tps = s["tokens_per_s"]
    if baseline is not None:
        base = baseline.get("tokens_per_s")
        speedup = f"{tps / base:.2f}×" if tps and base else "—"
        rows += [("tokens/s: speculative vs plain", f"{_fmt(tps)} vs {_fmt(base)}", "wall clock, same target"),
                 ("speed-up", speedup, "measured side by side; > 1 means faster")]
    else:
        rows.append(("tokens/s", _fmt(tps), "wall clock"))
    cells = "".join(f"<tr><th>{esc(a)}</th><td>{esc(b)}</td><td class=\"dl-hint\">{esc(c)}</td></tr>"
                    for a, b, c in rows)
    css = (".dl-spec-summary table{border-collapse:collapse;font-size:14px}"
           ".dl-spec-summary th{text-align:left;font-weight:600;padding:2px 12px 2px 0}"
           ".dl-spec-summary td{padding:2px 12px 2px 0;font-variant-numeric:tabular-nums}"
           ".dl-spec-summary .dl-hint{opacity:.65;font-size:12px}")
    return f'<div class="dl-spec-summary"><style>{css}</style><table>{cells}</table></div>'
