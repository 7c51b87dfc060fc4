"""Inference-time scaling pictures: particle weights and ESS per step, the particles' lineage, the
current particles as cards, the final choice, accuracy against budget, and a summary table.

Papers followed: Puri et al. 2025 (particle filtering with a process reward), Lew et al. 2023
(SMC steering, ESS-triggered resampling), Wang et al. 2023 (self-consistency: majority vote).
The events are `ParticleStep` (one per step, particles *before* resampling) and `RunFinished`
whose `extra` holds {"method", "particles", "chosen", "answer", "votes"} (see decoding/events.py).

Glossary
    particle    one partial solution carried in parallel; slot i of N. Colour = slot, everywhere.
    weight      normalised importance before resampling (the slots' weights sum to 1).
    ESS         effective sample size 1 / Σ w²: N when uniform, 1 when one particle has it all.
    resample    after step t, new slot j continues old slot `ancestors[j]`; slots nobody
                continues are dropped, popular ones are copied.
    lineage     the parent links: particle j at step t+1 has "parent" = ancestors_t[j].
    alive       a particle with a descendant after the last step; the others are dead branches.
"""

from __future__ import annotations

import itertools

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.contracts import StepProgress
from decoding.events import ParticleStep
from visualizers._common import (MARKS, NODES, TEMPLATE, cap, empty_figure, esc, label, note_capped, plotly_safe,
                                 shown_of, table, vlines)
from visualizers.beams import _hover_text, _lines
from visualizers.scaling_notes import allocation_html, feedback_html, rounds_html

SLOT_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6",
               "#9d755d", "#17becf"]
COLORS = {"dead": "#c7c7c7", "edge": "#8c8c8c", "chosen": "#f2b701", "prompt": "#555555", "n": "#888888",
          "threshold": "#e45756", "ess": "#333333"}
METHOD_COLORS = {"best-of-n": "#4c78a8", "majority-vote": "#f58518", "reward-beam": "#54a24b",
                 "particle-filter": "#e45756", "first-finish": "#b279a2", "greedy": "#555555",
                 "weighted-vote": "#9d755d", "a-star": "#72b7b2", "oracle pass@N": "#bab0ac", "refine": "#d6616b",
                 "particle-filter, spare": "#17becf", "particle-filter, arith-lastdigit": "#8c564b",
                 "particle-filter, probe": "#bcbd22", "step-speculation": "#9467bd",
                 "particle-filter, ePF": "#ff9da6", "particle-filter, ePF+LaM": "#a05195"}
RULES = {"best-of-n": "best score: the particle whose final score is highest wins",
         "majority-vote": "majority: the answer given by the most particles wins",
         "reward-beam": "best score: the highest-scoring beam left at the end wins",
         "particle-filter": "weighted majority: each answer collects its particles' final weights",
         "first-finish": "first to finish: the first particle to reach an answer wins",
         "a-star": "A*: the first complete solution popped from the frontier wins"}
WAITING_PARTICLES = "waiting for the first particle step…"
SHOWN_SLOTS = 64  # weights: one bar trace per slot up to n's bound; a loaded trace's other slots share one bar


def slot_color(slot: int) -> str:
    return SLOT_COLORS[slot % len(SLOT_COLORS)]


def _fmt(x, spec=".3g") -> str:
    return "—" if x is None else format(x, spec)


def _slots(steps: list[ParticleStep]) -> list[int]:
    return sorted({p["id"] for s in steps for p in s.particles})


# ---------------------------------------------------------------- weights and ESS


def weights_figure(steps: list[ParticleStep]) -> go.Figure:
    """Top: each slot's weight before resampling, stacked to 1 per step (▼ = resampled after that
    step). Bottom: ESS per step against N (dashed) and the resampling threshold when one is set."""
    if not steps:
        return empty_figure(WAITING_PARTICLES, height=420, x_title="step", y_title="weight")
    x = [s.step for s in steps]  # (S,)
    n = len(steps[-1].particles)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.65, 0.35], vertical_spacing=0.08)
    by_slot = [{p["id"]: p for p in s.particles} for s in steps]  # (S,) slot -> particle
    bars, steps_x, slots = [], np.array(x), _slots(steps)
    for slot in slots[:SHOWN_SLOTS]:
        ps = [b.get(slot) for b in by_slot]  # (S,), None = absent
        bars.append(go.Bar(  # arrays, not lists: plotly checks a list item by item (256 slots x 100 steps: 1.5 s)
            x=steps_x, y=np.array([p["weight"] if p else np.nan for p in ps], dtype=float), name=f"slot {plotly_safe(slot)}",
            marker=dict(color=slot_color(slot), line=dict(color="white", width=0.5)),
            customdata=table([[slot, _fmt(p.get("reward")), plotly_safe(label(p.get("step_text", ""), 60))] if p
                              else [slot, "—", ""] for p in ps]),
            hovertemplate="step %{x} · slot %{customdata[0]}<br>weight %{y:.3f} · reward %{customdata[1]}"
                          "<br>%{customdata[2]}<extra></extra>"))
    rest = set(slots[SHOWN_SLOTS:])
    if rest:  # beyond the cap, one grey bar holds the other slots' weight (a stack still sums to 1)
        bars.append(go.Bar(x=steps_x, y=np.array([sum(p["weight"] for p in s.particles if p["id"] in rest) for s in steps]),
                           name=f"{len(rest)} other slots", marker=dict(color=COLORS["dead"]),
                           hovertemplate="step %{x} · the other slots<br>weight %{y:.3f}<extra></extra>"))
    fig.add_traces(bars, rows=1, cols=1)  # one call for every slot
    resampled = [s for s in steps if s.resampled]
    fig.add_trace(go.Scatter(
        x=[s.step for s in resampled], y=[1.06] * len(resampled), mode="markers+text", name="resampled",
        text=["resampled"] * len(resampled), textposition="middle right", textfont=dict(size=10),
        marker=dict(symbol="triangle-down", size=10, color=COLORS["ess"]), showlegend=False,
        customdata=[[len(set(s.ancestors)), len(s.ancestors)] for s in resampled],
        hovertemplate="resampled after step %{x}: %{customdata[0]} distinct of %{customdata[1]} slots kept"
                      "<extra></extra>"), row=1, col=1)
    lines = resampled[:cap(MARKS)]  # resampling happens between step t and t+1: one trace for all the lines
    if lines:
        fig.add_trace(vlines([s.step + 0.5 for s in lines], 0, 1.15, "resampling",
                             dict(color=COLORS["ess"], dash="dash", width=1)), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[s.ess for s in steps], mode="lines+markers", name="ESS",
                             line=dict(color=COLORS["ess"], width=2), marker=dict(size=6),
                             hovertemplate="step %{x}: ESS %{y:.2f}<extra></extra>"), row=2, col=1)
    span = [x[0] - 0.5, x[-1] + 0.5]
    fig.add_trace(go.Scatter(x=span, y=[n, n], mode="lines", name=f"N = {n}", hoverinfo="skip",
                             line=dict(color=COLORS["n"], dash="dash", width=1)), row=2, col=1)
    threshold = steps[-1].extra.get("ess_threshold")
    if threshold:
        fig.add_trace(go.Scatter(x=span, y=[threshold * n] * 2, mode="lines", hoverinfo="skip",
                                 name=f"resample below {threshold:g}·N", line=dict(color=COLORS["threshold"],
                                                                                    dash="dot", width=1.5)),
                      row=2, col=1)
    fig.update_xaxes(dtick=1, range=span)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_yaxes(title_text="weight (before resampling)", range=[0, 1.15], row=1, col=1)
    fig.update_yaxes(title_text="ESS", range=[0, n * 1.12], row=2, col=1)
    fig.update_layout(template=TEMPLATE, height=460, barmode="stack", bargap=0.15,
                      margin=dict(l=60, r=20, t=40, b=45),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0, traceorder="normal"))
    return note_capped(fig, [shown_of(len(lines), len(resampled), "resampling lines"),
                             shown_of(min(len(slots), SHOWN_SLOTS), len(slots), "slots (the rest as one bar)")])


# ---------------------------------------------------------------- lineage


def surviving(steps: list[ParticleStep]) -> list[set[int]]:
    """Per step, the slots with a descendant after the last step. The last step's survivors are the
    slots its `ancestors` continue; step t's are the parents of step t+1's survivors."""
    if not steps:
        return []
    last = steps[-1]
    alive = [set(last.ancestors) if last.ancestors else {p["id"] for p in last.particles}]
    for nxt in reversed(steps[1:]):  # built from the end, then reversed (no insert at the front)
        alive.append({p["parent"] for p in nxt.particles if p["id"] in alive[-1] and p["parent"] >= 0})
    return alive[::-1]


def chosen_slot(steps: list[ParticleStep], finish_extra: dict | None) -> int | None:
    """The slot, at the last step, of the chosen particle. RunFinished's "chosen" indexes the slots
    after the last step's resampling, so it continues last-step slot `ancestors[chosen]`."""
    chosen = (finish_extra or {}).get("chosen")
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not steps:
        return None
    ancestors = steps[-1].ancestors
    return ancestors[chosen] if 0 <= chosen < len(ancestors) else chosen


def chosen_path(steps: list[ParticleStep], slot: int | None) -> list[tuple[int, int]]:
    """(step, slot) from step 0 to `slot` at the last step, following "parent" back."""
    if slot is None or not steps:
        return []
    path = []
    for s in reversed(steps):  # one step back per event: at most len(steps) links
        p = next((p for p in s.particles if p["id"] == slot), None)
        if p is None:
            break
        path.append((s.step, slot))
        slot = p["parent"]
    return path[::-1]


def lineage_figure(steps: list[ParticleStep], finish_extra: dict | None = None) -> go.Figure:
    """Particles as nodes (x = step, y = slot; size and colour = weight, ■ = finished) linked to the
    slot they continue. Grey thin branches die out at resampling; the gold path leads to the answer."""
    x_title, y_title = "step (-1 = prompt)", "slot"
    if not steps:
        return empty_figure(WAITING_PARTICLES, x_title=x_title, y_title=y_title)
    alive = surviving(steps)  # (S,) sets of slots
    path = chosen_path(steps, chosen_slot(steps, finish_extra))
    total = len(steps)
    keep = max(1, cap(NODES) // max(1, max(len(s.particles) for s in steps)))  # the last steps, within the cap
    if total > keep:
        steps, alive = steps[-keep:], alive[-keep:]
        path = [(t, i) for t, i in path if t >= steps[0].step]
    slots = _slots(steps)
    root = (steps[0].step - 1, (slots[0] + slots[-1]) / 2)
    max_w = max((p["weight"] for s in steps for p in s.particles), default=1.0) or 1.0
    edges, dead_edges, nodes, dead = [], [], [], []
    prev = None
    for s, live in zip(steps, alive):
        for p in s.particles:
            start = root if p["parent"] < 0 or prev is None else (prev.step, p["parent"])
            (edges if p["id"] in live else dead_edges).append((*start, s.step, p["id"]))
            (nodes if p["id"] in live else dead).append((s.step, p))
        prev = s
    path_edges = [(*a, *b) for a, b in zip([root] + path, path)] if path else []
    fig = go.Figure()
    fig.add_trace(_lines(dead_edges, "dead branch", dict(color=COLORS["dead"], width=1)))
    fig.add_trace(_lines(edges, "lineage", dict(color=COLORS["edge"], width=2)))
    fig.add_trace(_lines(path_edges, "chosen path", dict(color=COLORS["chosen"], width=6)))
    fig.add_trace(go.Scatter(x=[root[0]], y=[root[1]], mode="markers+text", text=["prompt"], name="prompt",
                             textposition="bottom center", showlegend=False, hoverinfo="skip",
                             marker=dict(symbol="square", size=12, color=COLORS["prompt"])))
    for name, group, live in (("dead particle", dead, False), ("particle", nodes, True)):
        fig.add_trace(go.Scatter(
            x=[t for t, _ in group], y=[p["id"] for _, p in group], mode="markers", name=name,
            marker=dict(size=[7 + 18 * (p["weight"] / max_w) ** 0.5 if live else 6 for _, p in group],
                        symbol=["square" if p.get("finished") else "circle" for _, p in group],
                        color=[p["weight"] for _, p in group] if live else COLORS["dead"],
                        colorscale="YlGnBu", cmin=0, cmax=max_w, showscale=live and bool(group),
                        colorbar=dict(title=dict(text="weight"), thickness=12) if live else None,
                        line=dict(color="#333" if live else COLORS["dead"], width=0.6)),
            opacity=1.0 if live else 0.6,
            customdata=table([[p["id"], _fmt(p["weight"]), _fmt(p.get("reward")), _fmt(p.get("score")),
                               _hover_text(p.get("text", ""), 70),
                               "finished · answer " + plotly_safe(str(p.get("answer"))) if p.get("finished") else
                               ("alive" if live else "dead branch")] for _, p in group]),
            hovertemplate="step %{x} · slot %{customdata[0]}<br>weight %{customdata[1]} · reward %{customdata[2]}"
                          " · score %{customdata[3]}<br>%{customdata[4]}<extra>%{customdata[5]}</extra>"))
    fig.add_trace(go.Scatter(x=[t for t, _ in path], y=[i for _, i in path], mode="markers", name="chosen",
                             showlegend=bool(path), hoverinfo="skip",
                             marker=dict(symbol="circle-open", size=24, color=COLORS["chosen"],
                                         line=dict(width=3))))
    fig.update_layout(
        template=TEMPLATE, height=min(max(300, 120 + 40 * len(slots)), 700), margin=dict(l=70, r=30, t=40, b=45),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
        xaxis=dict(title=dict(text=x_title), dtick=1, range=[root[0] - 0.8, steps[-1].step + 0.6]),
        yaxis=dict(title=dict(text=y_title), autorange="reversed", zeroline=False, showgrid=False,
                   tickmode="array", tickvals=slots,
                   ticktext=[f"<span style='color:{slot_color(i)}'>■</span> {plotly_safe(i)}" for i in slots]))
    return note_capped(fig, [shown_of(len(steps), total, "steps (the last ones)")])


def search_tree(steps: list[ParticleStep]) -> tuple[dict, dict, dict, dict, dict, set]:
    """A*'s tree from the `extra` of its steps: (parent, depth, f, complete, text) per node id, and the
    expanded ids. Node 0 is the prompt. A step whose expanded node was not made before is skipped, and a
    node id made twice keeps its first parent, so the parents always form a tree (even for a hand-made
    trace that skipped `decoding/extra_checks.py`)."""
    first = _search_extra(steps[0]) if steps else None
    parent, depth, f = {0: None}, {0: 0}, {0: first[0].get("f") if first else None}
    complete, text, expanded = {0: False}, {0: ""}, set()
    for s in steps:
        found = _search_extra(s)
        here = found[0].get("id") if found else None
        if not isinstance(here, int) or here not in parent:  # not a node made before: no edge to draw
            continue
        expanded.add(here)
        for node, p in zip(found[1], s.particles):
            n = node.get("id") if isinstance(node, dict) else None
            if not isinstance(n, int) or n in parent:  # a node made twice would make its parent chain loop
                continue
            parent[n], depth[n], f[n] = here, depth[here] + 1, node.get("f")
            complete[n], text[n] = bool(node.get("complete")), str(p.get("text", ""))
    return parent, depth, f, complete, text, expanded


def _search_extra(step: ParticleStep) -> tuple[dict, list] | None:
    extra = step.extra if isinstance(step.extra, dict) else {}
    expanded, nodes = extra.get("expanded"), extra.get("nodes")
    return (expanded, nodes) if isinstance(expanded, dict) and isinstance(nodes, list) else None


def path_to_root(parent: dict, node) -> list:
    """`node`, its parent, ... up to the root: at most len(parent) nodes, and a node met twice ends the
    walk (a parent chain that loops cannot run forever)."""
    path, seen = [], set()
    while node is not None and node in parent and node not in seen and len(path) <= len(parent):
        path.append(node)
        seen.add(node)
        node = parent[node]
    return path


def search_tree_figure(steps: list[ParticleStep], finish_extra: dict | None = None) -> go.Figure:
    """A*-decoding's search tree as it grew (x = depth in steps, nodes of a depth stacked in the order
    they were made): every node it generated, coloured by its priority f (lower = more promising);
    filled = expanded, hollow = still on the frontier, ★ = complete solution; the chosen solution
    gold. Reads the `extra` of a-star's events (expanded node, the candidates' ids and f). Beyond
    DECODING_LAB_MAX_FIGURE_NODES nodes, the first ones made (and the chosen path) are drawn."""
    x_title, y_title = "depth (steps written; 0 = the prompt)", "nodes in the order they were made"
    if not steps or _search_extra(steps[0]) is None:
        return empty_figure(WAITING_PARTICLES, x_title=x_title, y_title=y_title)
    parent, depth, f, complete, text, expanded = search_tree(steps)
    rows: dict[int, int] = {}
    y = {}
    for node in parent:  # in creation order
        y[node] = rows.get(depth[node], 0)
        rows[depth[node]] = y[node] + 1
    chosen_text = ((finish_extra or {}).get("particles") or [{}])[0]
    chosen_text = chosen_text.get("text") if isinstance(chosen_text, dict) else None
    chosen = next((n for n in parent if complete[n] and text[n] == chosen_text), None)
    path = path_to_root(parent, chosen)
    limit = cap(NODES)
    drawn = set(itertools.islice(parent, limit)) | set(path)  # parents are made first: a closed subtree
    edges = [(depth[parent[n]], y[parent[n]], depth[n], y[n]) for n in parent
             if n in drawn and parent[n] is not None and parent[n] in drawn]
    fig = go.Figure()
    fig.add_trace(_lines(edges, "tree", dict(color=COLORS["edge"], width=1)))
    fig.add_trace(_lines([(depth[b], y[b], depth[a], y[a]) for a, b in zip(path, path[1:])], "chosen path",
                         dict(color=COLORS["chosen"], width=5)))
    groups = (("expanded", [n for n in parent if n in drawn and n in expanded], "circle"),
              ("frontier", [n for n in parent if n in drawn and n not in expanded and not complete[n]], "circle-open"),
              ("complete", [n for n in parent if n in drawn and complete[n]], "star"))
    for name, group, symbol in groups:
        fig.add_trace(go.Scatter(
            x=[depth[n] for n in group], y=[y[n] for n in group], mode="markers", name=name,
            marker=dict(symbol=symbol, size=14 if symbol == "star" else 11, color=[_number(f[n]) for n in group],
                        colorscale="RdYlGn", reversescale=True, cmin=0, cmax=1, showscale=name == "expanded",
                        colorbar=dict(title=dict(text="f"), thickness=12), line=dict(width=1.5, color="#333")),
            customdata=table([[n, _fmt(_number(f[n])), _hover_text(text[n], 70)] for n in group]),
            hovertemplate="node %{customdata[0]} · f %{customdata[1]}<br>%{customdata[2]}<extra>" + name + "</extra>"))
    shown_rows = max(rows[d] for d in {depth[n] for n in drawn})
    fig.update_layout(template=TEMPLATE, height=min(max(300, 80 + 22 * shown_rows), 700),
                      margin=dict(l=60, r=30, t=40, b=45),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
                      xaxis=dict(title=dict(text=x_title), dtick=1 if max(depth.values()) <= 40 else None),
                      yaxis=dict(title=dict(text=y_title), autorange="reversed", showgrid=False, zeroline=False))
    return note_capped(fig, [shown_of(len(drawn), len(parent), "nodes (the first made, and the chosen path)")])


def _number(x) -> float | None:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


# ---------------------------------------------------------------- HTML: particles, choice, summary

_CSS = " ".join("""
.dl-particles{font-size:14px}.dl-particles .dl-head{font-size:13px;opacity:.8;margin-bottom:.4em}
.dl-particles .grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:8px}
.dl-particles .card{border:1px solid #ddd;border-radius:6px;padding:6px 8px;background:#fff;color:#111}
.dl-particles .card.dead{opacity:.45}.dl-particles .card.chosen{outline:3px solid #f2b701}
.dl-particles .bar{height:6px;background:#eee;border-radius:3px;margin:3px 0}
.dl-particles .fill{height:6px;border-radius:3px}.dl-particles .nums{font-variant-numeric:tabular-nums}
.dl-particles .detail,.dl-particles .small{font-size:11px;opacity:.7}
.dl-particles .badge{font-size:11px;border-radius:8px;padding:0 6px;margin-right:4px;background:#e8e8e8}
.dl-particles .badge.ans{background:#d9f0d3}.dl-particles mark{background:#fff3b0;color:inherit}
.dl-particles .badge.spec-kept{background:#dbe9f6}.dl-particles .badge.spec-rewritten{background:#fde0c5}
.dl-particles .text{white-space:pre-wrap;word-break:break-word;max-height:12em;overflow:auto;margin-top:4px;
 font-family:ui-monospace,monospace;font-size:12px}.dl-empty{font-size:13px;opacity:.75;font-style:italic}
""".split())


def _highlighted(text: str, step_text: str) -> str:
    """Escaped text with its last `step_text` in <mark>."""
    if step_text and text.endswith(step_text):
        return f"{esc(text[:-len(step_text)])}<mark>{esc(step_text)}</mark>"
    return esc(text)


def _search_note(extra: dict) -> str:
    """What a search method's step is doing: refine's round, A*'s expanded node (from `extra`)."""
    if "round" in extra:
        bad = extra.get("bad_step")
        return f' · round {extra["round"]}' + (f', rewriting from step {bad + 1} (steps before it kept)'
                                                 if isinstance(bad, int) else "")
    if isinstance(extra.get("speculation"), dict):
        sp = extra["speculation"]
        written = sp.get("accepted_tokens", 0) + sp.get("policy_tokens", 0)
        gate = f' (gate {sp["gate"]})' if isinstance(sp.get("gate"), str) else ""
        return (f' · drafts kept{gate} {len(sp.get("accepted", []))}, rewritten by the policy {len(sp.get("rewritten", []))};'
                f' so far {sp.get("accepted_tokens", 0)} of {written} solution tokens came from the drafter,'
                f' policy calls {sp.get("policy_calls")}, drafter calls {sp.get("draft_calls")}')
    if isinstance(extra.get("expanded"), dict):
        node = extra["expanded"]
        return (f' · expanding node {node.get("id")} (depth {node.get("depth")}, f {_fmt(node.get("f"))}); '
                f'frontier {extra.get("frontier")}')
    return ""


def _archon_note(extra: dict) -> str:
    """Strategy archon: the architecture it runs (its search-space key)."""
    arch = extra.get("archon")
    return f' · archon ({arch.get("config")}): {arch.get("key") or arch.get("strategy")}' if isinstance(arch, dict) else ""


def _speculation_badge(sp: dict | None, slot: int) -> str:
    """Step speculation: whether this slot's step is the drafter's (kept) or the policy's (the refused
    draft and its reward on hover), with the gate's number: the router's P(the policy would do better),
    or under the oracle the policy's own step's reward."""
    if not isinstance(sp, dict) or str(slot) not in sp.get("drafts", {}):
        return ""
    reward = _fmt(sp.get("draft_rewards", {}).get(str(slot)))
    why = f"reward {reward}"
    if str(slot) in (sp.get("router_p") or {}):
        why += f", router P(policy better) {_fmt(sp['router_p'][str(slot)])}"
    if str(slot) in (sp.get("policy_rewards") or {}):
        why += f", the policy's step {_fmt(sp['policy_rewards'][str(slot)])}"
    if slot in sp.get("accepted", []):
        return f'<span class="badge spec-kept">draft kept ({esc(why)})</span>'
    draft = sp["drafts"][str(slot)]
    return (f'<span class="badge spec-rewritten" title="{esc("refused draft: " + draft)}">rewritten by the policy '
            f'(draft {esc(why)})</span>')


def particles_html(step: ParticleStep | None, chosen: int | None = None) -> str:
    """The particles of one step as cards: weight bar (width = weight), reward, score, the reward's
    detail, badges, and the text with this step's addition highlighted. Dropped or zero-weight
    particles are dimmed; slot `chosen` of this step is outlined (for the last step of a finished
    run: `chosen_slot(steps, finish.extra)`)."""
    if step is None or not step.particles:
        return f'<div class="dl-particles"><style>{_CSS}</style><div class="dl-empty">{esc(WAITING_PARTICLES)}</div></div>'
    kept = set(step.ancestors)
    cards = []
    for p in step.particles:
        w, i = p["weight"], p["id"]
        dropped = step.resampled and i not in kept
        cls = "card" + (" dead" if w <= 0 or dropped else "") + (" chosen" if i == chosen else "")
        badges = ('<span class="badge">cut off at the token cap: no answer</span>' if p.get("cut_off") else
                  '<span class="badge">finished</span>' if p.get("finished") else "") + (
            f'<span class="badge ans">answer: {esc(p["answer"])}</span>'
            if p.get("answer") is not None else "") + ('<span class="badge">dropped</span>' if dropped else "")
        badges += _speculation_badge((step.extra or {}).get("speculation"), i)
        parent = "prompt" if p.get("parent", -1) < 0 else f"slot {p['parent']}"
        color = esc(slot_color(i))
        cards.append(
            f'<div class="{cls}" data-slot="{esc(i)}" data-weight="{esc(format(w, ".6g"))}">'
            f'<b style="color:{color}">slot {esc(i)}</b> <span class="small">← {esc(parent)} · '
            f'{esc(p.get("num_tokens", 0))} tokens</span>'
            f'<div class="bar"><div class="fill" style="width:{esc(format(100 * w, ".1f"))}%;background:{color}">'
            f'</div></div><div class="nums">weight {esc(_fmt(w))} · reward {esc(_fmt(p.get("reward")))} · '
            f'score {esc(_fmt(p.get("score")))}</div>'
            f'<div class="detail">{esc(p.get("detail") or "")}</div><div>{badges}</div>'
            f'<div class="text">{_highlighted(p.get("text", ""), p.get("step_text", ""))}</div></div>')
    n = len(step.particles)
    head = esc(f'step {step.step} · {step.method} · ESS {step.ess:.2f} of {n}'
               + (f' · resampled: {len(kept)} of {n} slots continue' if step.resampled else "")
               + _search_note(step.extra or {}) + _archon_note(step.extra or {}))
    notes = feedback_html(step.extra) + allocation_html(step.extra)  # refine's feedback, compute-optimal's choice
    return (f'<div class="dl-particles"><style>{_CSS}</style><div class="dl-head">{head}</div>{notes}'
            f'<div class="grid">{"".join(cards)}</div></div>')


def sampling_html(progress: StepProgress, title: str = "") -> str:
    """The particles of a step under way as cards: each slot's text with what this step has sampled so
    far highlighted (rewards and weights come with the step's event, which replaces this view)."""
    cards = "".join(
        f'<div class="card" data-slot="{esc(i)}"><b style="color:{esc(slot_color(i))}">slot {esc(i)}</b> '
        f'<span class="small">{"sampling…" if new else "waiting"}</span>'
        f'<div class="text">{_highlighted(text + new, new)}</div></div>'
        for i, (text, new) in enumerate(zip(progress.texts, progress.new_texts)))
    head = esc(f"{title + ' · ' if title else ''}step {progress.step} · sampling: "
               f"{progress.tokens_spent} tokens so far over {len(progress.texts)} particles")
    return (f'<div class="dl-particles dl-sampling"><style>{_CSS}</style><div class="dl-head">{head}</div>'
            f'<div class="grid">{cards}</div></div>')


def choice_html(finish_extra: dict | None) -> str:
    """The final choice: method, rule, chosen answer and particle, and the vote tally when there is one."""
    if not finish_extra or "method" not in finish_extra:
        return '<div class="dl-particles"><div class="dl-empty">no final choice yet</div></div>'
    method, answer, chosen = finish_extra["method"], finish_extra.get("answer"), finish_extra.get("chosen")
    rule = finish_extra.get("rule") or RULES.get(method, "")
    particles = finish_extra.get("particles") or []
    pick = next((p for p in particles if p.get("id") == chosen), None)
    who = esc(f'slot {chosen} · score {_fmt(pick.get("score"))} · weight {_fmt(pick.get("weight"))}' if pick
              else f"slot {chosen}" if chosen is not None else "no particle")
    votes = sorted((finish_extra.get("votes") or {}).items(), key=lambda kv: -kv[1])
    total = sum(v for _, v in votes) or 1.0
    bars = "".join(
        f'<div class="vote{" win" if a == answer else ""}" data-answer="{esc(a)}">'
        f'<span class="a">{esc(a)}</span><span class="b"><span style="width:{esc(format(100 * v / total, ".1f"))}%">'
        f'</span></span><span class="v">{esc(f"{v:.3g} ({v / total:.0%})")}</span></div>' for a, v in votes)
    css = (".dl-choice .ans{font-size:18px;font-weight:700}.dl-choice .rule,.dl-choice .who{font-size:12px;"
           "opacity:.75}.dl-choice .vote{display:flex;align-items:center;gap:8px;font-size:13px}"
           ".dl-choice .vote .a{min-width:6em;text-align:right}.dl-choice .vote .b{flex:1;max-width:240px;"
           "background:#eee;height:10px;border-radius:3px}.dl-choice .vote .b span{display:block;height:10px;"
           "background:#9ecae1;border-radius:3px}.dl-choice .vote.win .b span{background:#f2b701}"
           ".dl-choice .vote.win .a{font-weight:700}")
    if answer is not None:
        shown = esc(answer)
    elif pick is not None and not pick.get("ended", True):
        shown = "<i>cut off at the token cap before an answer</i>"
    else:  # a text task (a poem, a constraint): the chosen text itself is the result
        shown = f"<i>the text of slot {esc(chosen)}</i> (no final number in it)"
    return (f'<div class="dl-choice"><style>{css}</style><div>{esc(method)}: '
            f'<span class="ans">{shown}</span></div><div class="rule">rule: {esc(rule)}</div>'
            f'<div class="who">chosen particle: {who}</div>'
            + (f'<div class="votes">{bars}</div>' if votes else "")
            + rounds_html(finish_extra.get("rounds")) + allocation_html(finish_extra) + "</div>")


def budget_figure(rows: list[dict], x: str = "budget") -> go.Figure:
    """Accuracy against the budget N (particles / samples, log2 axis), one line per method; with
    x="tokens", against the mean tokens spent per problem (the accuracy-vs-compute Pareto view)."""
    if x not in ("budget", "tokens"):
        raise ValueError(f"`x` must be 'budget' or 'tokens', got {x!r}")
    x_title = "budget N (particles or samples)" if x == "budget" else "tokens spent per problem (mean)"
    y_title = "accuracy"
    if not rows:
        return empty_figure("no benchmark rows yet", x_title=x_title, y_title=y_title)
    for k, r in enumerate(rows):
        missing = {"method", "budget", "accuracy", x} - set(r)
        if missing:
            raise ValueError(f"`rows[{k}]` is missing {sorted(missing)}; each row needs method, budget, accuracy"
                             + (", tokens" if x == "tokens" else ""))
        if not 0 <= r["accuracy"] <= 1 or r["budget"] <= 0:
            raise ValueError(f"`rows[{k}]` needs budget > 0 and accuracy in [0, 1], got {r['budget']!r}, "
                             f"{r['accuracy']!r}")
    fig = go.Figure()
    for k, method in enumerate(dict.fromkeys(r["method"] for r in rows)):
        rs = sorted((r for r in rows if r["method"] == method), key=lambda r: r["budget"])
        fig.add_trace(go.Scatter(
            x=[r[x] for r in rs], y=[r["accuracy"] for r in rs], mode="lines+markers", name=plotly_safe(method),
            line=dict(color=METHOD_COLORS.get(method, SLOT_COLORS[k % len(SLOT_COLORS)]), width=2,
                      dash="dot" if method.startswith("oracle") else "dash" if "," in method else None),
            customdata=[[r["budget"], _fmt(r.get("tokens"), ",")] for r in rs],
            hovertemplate=f"{plotly_safe(method)}<br>N = %{{customdata[0]}}: %{{y:.1%}}"
                          + ("<br>tokens %{customdata[1]}" if any("tokens" in r for r in rs) else "")
                          + "<extra></extra>"))
    if x == "budget":
        budgets = sorted({r["budget"] for r in rows})
        xaxis = dict(title=dict(text=x_title), type="log", tickmode="array", tickvals=budgets,
                     ticktext=[f"{b:g}" for b in budgets])
    else:
        xaxis = dict(title=dict(text=x_title), type="log")
    fig.update_layout(template=TEMPLATE, height=360, margin=dict(l=60, r=20, t=30, b=45), xaxis=xaxis,
                      yaxis=dict(title=dict(text=y_title), range=[0, 1.02], tickformat=".0%"),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0))
    return fig


SUMMARY = [("num_particles", "particles N"), ("particle_steps", "steps"), ("resampling_events", "resampling events"),
           ("ess", "final ESS"), ("tokens_spent", "tokens spent (all particles)"),
           ("forward_passes", "forward passes"), ("tokens_spent_per_s", "tokens spent / s"),
           ("elapsed_s", "elapsed (s)"), ("answer", "answer")]


def scaling_summary_html(stats: dict | None) -> str:
    """A table of the run's scaling statistics (only the keys present)."""
    rows = [(name, (stats or {})[key]) for key, name in SUMMARY if key in (stats or {})]
    if not rows:
        return '<div class="dl-scaling-summary"><div class="dl-empty">no particle statistics yet</div></div>'
    shown = [(a, _fmt(b, ".4g") if isinstance(b, float) else "—" if b is None else str(b)) for a, b in rows]
    cells = "".join(f"<tr><th>{esc(a)}</th><td>{esc(b)}</td></tr>" for a, b in shown)
    css = (".dl-scaling-summary table{border-collapse:collapse;font-size:14px}.dl-scaling-summary th{text-align:left;"
           "font-weight:600;padding:2px 12px 2px 0}.dl-scaling-summary td{font-variant-numeric:tabular-nums}")
    return f'<div class="dl-scaling-summary"><style>{css}</style><table>{cells}</table></div>'
