"""The Long context lab's pictures: where in a long context the model looked, what each side keeps in memory,
how fast it went and what it spent.

    context_strip_figure(trace, marks)   the context as a strip of token positions: its chunks, one row per reader
                                         (the target reading it all, a retrieval's top chunks with rank and BM25
                                         score on hover), the planted facts at their depths and the chunk that
                                         holds the question's answer
    kv_memory_figure(trace, marks)       bytes of KV cache each side holds: the target's against the drafter's
                                         (speculative runs: measured each round), or the run's one cache
                                         (positions x bytes per position) beside the whole context's
    speed_figure(trace)                  speculative: drafted and accepted tokens per round, tokens/s so far;
                                         otherwise tokens/s so far, token by token
    rag_compute_figure(trace)            rag: tokens fed and written per iteration, the totals (effective context
                                         tokens, tokens processed) in the title; ttt: its finish record's FLOPs
                                         (prefill, training, after the context); otherwise prompt read and tokens
                                         written
    ttt_figure(trace)                    ttt, live from its events: each training step's loss on its span and the
                                         tokens trained (train), or the thinking and answer tokens against time
                                         (think)
    chunk_rows(trace)                    the strip's rows: {"name", "chunks": [[start, end]], "ranked": [...],
                                         "scores": [...]} in context positions

`marks` is plain data the tab computes once with the model's tokenizer (`ui.longctx_callbacks.context_marks`):
{"context_tokens", "needles": [{"name", "value", "start", "end"}], "evidence": [start, end] or None,
"kv_bytes_per_position", "ranked": chunk indices in rank order for a rapid trace whose record lacks them (recorded
before rapid kept `ranked`)}; no model here.

Glossary: see `decoding/longctx/__init__.py` (context, chunk, needle, depth, retrieved).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from decoding.events import Trace, stats
from visualizers._common import MARKS, NODES, TEMPLATE, cap, empty_figure, plotly_safe, title_block

MB = 1 << 20
HALF, HALF_SMALL = 44, 62  # title widths (characters) of a half-page picture
GREY, RETRIEVED, EVIDENCE, NEEDLE, FULL = "#d9d9d9", "#f58518", "#2ca02c", "#e45756", "#9ecae9"


def _start_extra(trace: Trace) -> dict:
    """The first speculative round's record (rapid's chunks and retrieval), {} otherwise."""
    rounds = trace.of_kind("spec_round")
    return dict(rounds[0].extra or {}) if rounds else {}


def chunk_rows(trace: Trace, marks: dict | None = None) -> list[dict]:
    """One row per reader of the context, chunks as [start, end) context positions: rag's retrievals (the question's,
    then each follow-up's), rapid's drafter; [] for a run without chunks."""
    marks = marks or {}
    finish = trace.finish
    extra = finish.extra if finish is not None else {}
    rows = []
    if trace.start is not None and trace.start.strategy == "rag" and extra.get("chunks"):
        for r in extra.get("retrievals", []):
            name = "question's retrieval" if r.get("iteration", 0) == 0 else f"follow-up {r['iteration']}"
            rows.append({"name": name, "chunks": extra["chunks"], "ranked": list(r.get("chunks", [])),
                         "scores": list(r.get("scores", [])), "query": r.get("query", "")})
        return rows
    first = _start_extra(trace)
    if first.get("chunks"):
        offset = first["chunks"][0][0]  # rapid counts positions in the prompt ids (after the chat template's head)
        chunks = [[a - offset, b - offset] for a, b in first["chunks"]]
        ranked = first.get("ranked") or marks.get("ranked")  # the record's rank order; an older trace: the tab's
        if not ranked or sorted(ranked) != sorted(first.get("retrieved", [])) or \
                len(first.get("scores", [])) != len(ranked):
            ranked = list(first.get("retrieved", []))  # document order: the scores then are not per chunk
            scores = []
        else:
            scores = list(first.get("scores", []))
        rows.append({"name": "drafter reads", "chunks": chunks, "ranked": ranked, "scores": scores, "query": ""})
    return rows


def _context_tokens(trace: Trace, marks: dict) -> int | None:
    if marks.get("context_tokens"):
        return int(marks["context_tokens"])
    finish = trace.finish
    if finish is not None and finish.extra.get("context_tokens"):
        return int(finish.extra["context_tokens"])
    return _start_extra(trace).get("context_tokens")


def _evidence_chunk(chunks: list, evidence) -> int | None:
    if not evidence:
        return None
    middle = (evidence[0] + evidence[1]) / 2
    return next((i for i, (a, b) in enumerate(chunks) if a <= middle < b), None)


def context_strip_figure(trace: Trace | None, marks: dict | None = None) -> go.Figure:
    """The context as a strip (see the module docstring)."""
    marks = marks or {}
    trace = trace or Trace()
    total = _context_tokens(trace, marks)
    if trace.start is not None and not total:
        return empty_figure("This run's context cannot be placed: the model's tokenizer is needed (a replayed run of a "
                            "model outside the registry)", height=260, title="The context")
    if trace.start is None:
        return empty_figure("Generate: the context appears here as a strip of token positions, with its chunks, "
                            "the retrieved ones, the planted facts and the answer's chunk", height=260,
                            title="The context")
    rows = chunk_rows(trace, marks)
    strategy = trace.start.strategy
    reads_all = strategy != "rag"
    names = (["target reads all"] if reads_all else []) + [r["name"] for r in rows]
    fig = go.Figure()
    evidence = marks.get("evidence")
    limit = cap(MARKS)
    if reads_all:
        fig.add_trace(go.Bar(y=["target reads all"], x=[total], base=[0], orientation="h", marker_color=FULL,
                             name="read by the target", hovertemplate=f"the target reads all {total} tokens<extra></extra>"))
    drawn = 0
    for row in rows:
        chunks = row["chunks"][:limit]
        drawn = max(drawn, len(chunks))
        rank = {c: k for k, c in enumerate(row["ranked"])}
        colors, hover = [], []
        for i, (a, b) in enumerate(chunks):
            if i in rank:
                score = f", BM25 {row['scores'][rank[i]]:g}" if rank[i] < len(row["scores"]) else ""
                ordinal = f"rank {rank[i] + 1}" if row["scores"] else "retrieved"
                colors.append(RETRIEVED)
                hover.append(f"chunk {i}: tokens {a}–{b}; {ordinal}{score}")
            else:
                colors.append(GREY)
                hover.append(f"chunk {i}: tokens {a}–{b}; not retrieved")
        query = f" (query: {row['query'][:60]})" if row.get("query") else ""
        fig.add_trace(go.Bar(y=[row["name"]] * len(chunks), x=[b - a for a, b in chunks], base=[a for a, _ in chunks],
                             orientation="h", marker=dict(color=colors, line=dict(color="white", width=1)),
                             name="chunks (retrieved: orange)", showlegend=row is rows[0],
                             hovertext=[plotly_safe(h + query) for h in hover], hoverinfo="text"))
        at = _evidence_chunk(chunks, evidence)
        if at is not None:
            a, b = chunks[at]
            fig.add_trace(go.Bar(y=[row["name"]], x=[b - a], base=[a], orientation="h", name="the answer's chunk",
                                 marker=dict(color="rgba(0,0,0,0)", line=dict(color=EVIDENCE, width=3)),
                                 showlegend=row is rows[0], hoverinfo="text",
                                 hovertext=plotly_safe(f"chunk {at} holds the answer"
                                                       + ("" if at in rank else " (not retrieved)"))))
    facts = "facts & answer"
    needles = marks.get("needles") or []
    if needles or evidence:
        names.insert(0, facts)
    if needles:
        fig.add_trace(go.Scatter(x=[n["start"] for n in needles], y=[facts] * len(needles), mode="markers+text",
                                 marker=dict(symbol="triangle-down", size=13, color=NEEDLE), name="planted fact",
                                 text=[plotly_safe(n["name"]) for n in needles], textposition="middle right",
                                 cliponaxis=False, hoverinfo="text",
                                 hovertext=[plotly_safe(f"“The secret number of {n['name']} is {n['value']}.” at token "
                                                        f"{n['start']} (depth {n['start'] / total:.2f})") for n in needles]))
    if evidence:
        fig.add_trace(go.Bar(y=[facts], x=[max(1, evidence[1] - evidence[0])], base=[evidence[0]], orientation="h",
                             marker_color=EVIDENCE, name="the answer's line", width=0.35, hoverinfo="text",
                             hovertext=plotly_safe(f"the line that answers the question: tokens {evidence[0]}–"
                                                   f"{evidence[1]} (depth {evidence[0] / total:.2f})")))
    what = {"rag": "the model reads only the retrieved chunks",
            "speculative": "the target reads it all; the drafter only the retrieved chunks"}.get(
        strategy, "the model reads it all")
    capped = f" (first {limit} chunks drawn)" if any(len(r["chunks"]) > limit for r in rows) else ""
    title, top = title_block([f"The context: {total} tokens; {what}"], width=100,
                             small="orange: retrieved (hover: rank, BM25 score) · green: the answer's line and chunk · "
                                   "red: planted facts" + capped, small_width=110)
    fig.update_layout(template=TEMPLATE, barmode="overlay", title=title, height=120 + top + 44 * len(names),
                      margin=dict(l=150, r=60, t=top, b=40), showlegend=False, bargap=0.25)
    fig.update_xaxes(title_text="token position in the context", range=[0, total], title_standoff=4)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(names)))
    return fig


def _cache_positions(trace: Trace) -> int:
    """Positions the run's one KV cache holds at the end: what it processed (rag), else prompt + generated."""
    finish = trace.finish
    if finish is not None and isinstance(finish.extra.get("tokens_processed"), int):
        return finish.extra["tokens_processed"]
    return len(trace.start.prompt_ids) + stats(trace)["num_tokens"]


def kv_memory_figure(trace: Trace | None, marks: dict | None = None) -> go.Figure:
    """KV cache bytes each side holds (see the module docstring)."""
    marks = marks or {}
    trace = trace or Trace()
    rounds = [r for r in trace.of_kind("spec_round") if isinstance((r.extra or {}).get("memory"), dict)]
    if trace.start is None:
        return empty_figure("Generate: the KV cache each side holds appears here", height=300, title="Memory")
    if rounds:
        x = [r.round for r in rounds]
        fig = go.Figure()
        for part, color in (("target cache", "#f58518"), ("draft cache", "#4c78a8")):
            y = [r.extra["memory"]["parts"].get(part, 0) / MB for r in rounds]
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=part.replace("draft", "drafter's"),
                                     line=dict(color=color), hovertemplate=f"{part}: %{{y:.2f}} MB<extra>round %{{x}}"
                                                                           "</extra>"))
        last = rounds[-1].extra["memory"]["parts"]
        target, draft = last.get("target cache", 0), last.get("draft cache", 0)
        ratio = f"; the drafter holds {draft / target:.0%} of the target's" if target else ""
        title, top = title_block([f"KV cache: target {target / MB:.1f} MB, drafter {draft / MB:.1f} MB{ratio}"],
                                 width=HALF, small="measured each round (SpecMemo); the weights are the target's "
                                                   "(self-speculation) or the draft model's own", small_width=HALF_SMALL)
        fig.update_layout(template=TEMPLATE, title=title, height=300 + top - 64, margin=dict(l=60, r=20, t=top, b=40),
                          legend=dict(orientation="h", y=-0.25))
        fig.update_xaxes(title_text="round", title_standoff=4, dtick=1 if len(x) <= 12 else None)
        fig.update_yaxes(title_text="MB", rangemode="tozero")
        return fig
    per = marks.get("kv_bytes_per_position")
    if not per:
        return empty_figure("No bytes per position known for this run's model", height=300, title="Memory")
    if trace.finish is None and trace.start.strategy == "rag":  # its cache holds its own prompt, known at the end:
        return empty_figure("RAG's KV cache holds the retrieved chunks, not the book: measured when the run ends",
                            height=300, title="Memory")  # not the whole book's positions, as it said while running
    held = _cache_positions(trace)
    bars = [("this run holds", held, "#f58518")]
    total = _context_tokens(trace, marks)
    if trace.start.strategy == "rag" and total:
        bars.append(("the whole context", total, FULL))
    fig = go.Figure(go.Bar(y=[b[0] for b in bars], x=[b[1] * per / MB for b in bars], orientation="h",
                           marker_color=[b[2] for b in bars], text=[f"{b[1]} positions" for b in bars],
                           textposition="auto", hoverinfo="x+y"))
    title, top = title_block([f"KV cache: {held * per / MB:.1f} MB ({held} positions × {per:,} bytes)"],
                             width=HALF, small="keys and values of every layer, one entry per position the model read or "
                                                 "wrote", small_width=HALF_SMALL)
    fig.update_layout(template=TEMPLATE, title=title, height=160 + top + 40 * len(bars),
                      margin=dict(l=170, r=20, t=top, b=40), showlegend=False)
    fig.update_xaxes(title_text="MB", title_standoff=4, rangemode="tozero")
    return fig


def speed_figure(trace: Trace | None) -> go.Figure:
    """Speculative: drafted and accepted tokens per round with tokens/s so far; otherwise tokens/s so far."""
    trace = trace or Trace()
    rounds = trace.of_kind("spec_round")
    tokens = trace.of_kind("token")
    if trace.start is None or not (rounds or tokens):
        return empty_figure("Generate: speed (and a speculative run's acceptance) appears here", height=300,
                            title="Speed")
    if rounds:
        fig = make_subplots(specs=[[{"secondary_y": True}]])
        x = [r.round for r in rounds]
        drafted = [len(r.nodes) for r in rounds]
        accepted = [len(r.accepted_path) for r in rounds]
        made, rate = 0, []
        for r in rounds:
            made += len(r.token_ids)
            rate.append(made / r.elapsed_s if r.elapsed_s > 0 else None)
        fig.add_trace(go.Bar(x=x, y=drafted, name="drafted", marker_color="#c6dbef"), secondary_y=False)
        fig.add_trace(go.Bar(x=x, y=accepted, name="accepted", marker_color="#2ca02c"), secondary_y=False)
        fig.add_trace(go.Scatter(x=x, y=rate, name="tokens/s so far", mode="lines+markers",
                                 line=dict(color="#e45756")), secondary_y=True)
        s = stats(trace)
        rate_text = f"{s['acceptance_rate']:.2f}" if s.get("acceptance_rate") is not None else "–"
        title, top = title_block([f"Acceptance {rate_text}, {s.get('mean_accepted_length') or 0:.2f} accepted a round"],
                                 width=HALF, small="bars: tokens the drafter proposed and the target kept, per "
                                                   "round; line: tokens/s so far", small_width=HALF_SMALL)
        fig.update_layout(template=TEMPLATE, barmode="overlay", title=title, height=300 + top - 64,
                          margin=dict(l=50, r=50, t=top, b=40), legend=dict(orientation="h", y=-0.25))
        top_rate = max((r for r in rate if r is not None), default=1.0)
        fig.update_xaxes(title_text="round", title_standoff=4, dtick=1 if len(x) <= 12 else None)
        fig.update_yaxes(title_text="tokens", secondary_y=False, range=[0, max(drafted) * 1.1])
        fig.update_yaxes(title_text="tokens/s", secondary_y=True, range=[0, top_rate * 1.15], showgrid=False)
        return fig
    x = list(range(1, len(tokens) + 1))
    rate = [k / t.elapsed_s if t.elapsed_s > 0 else None for k, t in zip(x, tokens)]
    fig = go.Figure(go.Scatter(x=x, y=rate, mode="lines+markers", name="tokens/s so far", line=dict(color="#e45756")))
    first = tokens[0].elapsed_s
    title, top = title_block([f"Tokens/s so far (the first token after {first:.2f} s: the prompt's prefill and "
                              "anything the method did before it)"],
                             width=HALF, small="one point per generated token", small_width=HALF_SMALL)
    fig.update_layout(template=TEMPLATE, title=title, height=300 + top - 64, margin=dict(l=50, r=20, t=top, b=40))
    fig.update_xaxes(title_text="tokens generated", title_standoff=4)
    fig.update_yaxes(title_text="tokens/s", rangemode="tozero")
    return fig


def _chunk_tokens(chunks: list, ids: list) -> int:
    return sum(chunks[i][1] - chunks[i][0] for i in ids if 0 <= i < len(chunks))


def rag_compute_figure(trace: Trace | None) -> go.Figure:
    """rag: per iteration, the retrieved tokens fed and the tokens the model wrote; the finish record's totals in the
    title. Other runs: the prompt read and the tokens written."""
    trace = trace or Trace()
    if trace.start is None:
        return empty_figure("Generate: the compute the run spent appears here", height=300, title="Compute")
    tokens = trace.of_kind("token")
    finish = trace.finish
    extra = finish.extra if finish is not None else {}
    if trace.start.strategy == "ttt" and isinstance(extra.get("flops"), dict):
        return _flops_figure(trace)
    if trace.start.strategy != "rag":
        written = stats(trace)["num_tokens"]
        read = len(trace.start.prompt_ids)
        bars = [("the target read", read, FULL)]
        drafted = _start_extra(trace).get("draft_prompt_tokens")
        if drafted:  # rapid: the drafter's own, short prompt
            bars.append(("the drafter read", drafted, RETRIEVED))
        trained = extra.get("tokens_trained")
        if isinstance(trained, int) and trained:  # a method that trains on the context first (its finish record says)
            bars.append(("trained on", trained, "#b279a2"))
        bars.append(("written", written, "#4c78a8"))
        fig = go.Figure(go.Bar(x=[b[0] for b in bars], y=[b[1] for b in bars], marker_color=[b[2] for b in bars],
                               text=[str(b[1]) for b in bars], textposition="outside", cliponaxis=False))
        head = f"Compute: {read} prompt tokens read" + (f" by the target, {drafted} by the drafter" if drafted else "")
        title, top = title_block([f"{head}, {written} written"],
                                 small="rag spends it differently: only the retrieved chunks, per iteration",
                                 small_width=90)
        fig.update_layout(template=TEMPLATE, title=title, height=300 + top - 64, margin=dict(l=60, r=20, t=top, b=40),
                          showlegend=False)
        fig.update_yaxes(title_text="tokens", range=[0, max(b[1] for b in bars) * 1.2 or 1])
        return fig
    chunks = extra.get("chunks") or []
    retrievals = extra.get("retrievals") or []
    iterations = sorted({int(t.extra.get("iteration", 0)) for t in tokens if t.extra.get("part") != "answer"}
                        | {int(r.get("iteration", 0)) for r in retrievals} | {0})
    labels = ["question" if it == 0 else f"iteration {it}" for it in iterations] + ["final answer"]
    fed = [_chunk_tokens(chunks, next((r["chunks"] for r in retrievals if r.get("iteration") == it), []))
           for it in iterations] + [0]
    written = [sum(1 for t in tokens if t.extra.get("part") != "answer" and t.extra.get("iteration") == it)
               for it in iterations] + [sum(1 for t in tokens if t.extra.get("part") == "answer")]
    effective, processed = extra.get("effective_context_tokens"), extra.get("tokens_processed")
    rest = processed - sum(fed) - sum(written) if isinstance(processed, int) else 0
    if rest > 0:  # once the run ends: what else it fed (the question, the labels, the chat template, demonstrations)
        labels, fed, written = labels + ["the rest"], fed + [0], written + [0]
    bars = [go.Bar(x=labels, y=fed, name="retrieved chunk tokens fed", marker_color=RETRIEVED),
            go.Bar(x=labels, y=written, name="tokens the model wrote", marker_color="#4c78a8")]
    if rest > 0:
        bars.append(go.Bar(x=labels, y=[0] * (len(labels) - 1) + [rest], marker_color="#bab0ac",
                           name="question, labels, chat template and demonstrations fed"))
    fig = go.Figure(bars)
    head = (f"Compute: effective context {effective} tokens, {processed} processed" if effective is not None
            else "Compute: the run is going")
    title, top = title_block([head], small="per iteration (the question's retrieval, each follow-up, the final answer); "
                                           "effective context: every request's input, as the paper counts it; "
                                           "processed: what this run, keeping its cache, fed the model (the "
                                           "bars add up to it)",
                             small_width=90)
    fig.update_layout(template=TEMPLATE, barmode="stack", title=title, height=300 + top - 64,
                      margin=dict(l=60, r=20, t=top, b=40), legend=dict(orientation="h", y=-0.25))
    fig.update_yaxes(title_text="tokens", rangemode="tozero")
    return fig


def ttt_figure(trace: Trace | None) -> go.Figure:
    """Test-time training as it runs (strategy ttt). train: each gradient step's next-token loss on its span (before
    the step's update) and the tokens trained so far, the span, gradient norm and time on hover; think: the thinking
    tokens and the answer's against the time they took. Drawn from the `train_step` and `token` events alone."""
    trace = trace or Trace()
    if trace.start is None or trace.start.strategy != "ttt":
        return empty_figure("Choose ttt and Generate: its training steps (or thinking tokens) appear here", height=300,
                            title="Test-time training")
    if trace.start.params.get("mode", "train") == "think":
        return _thinking_figure(trace)
    steps = trace.of_kind("train_step")
    if not steps:
        return empty_figure("The context's prefill runs first; each training step then adds a point", height=300,
                            title="Test-time training")
    limit = cap(NODES)
    shown = steps[::max(1, -(-len(steps) // limit))]
    x = [s.step + 1 for s in shown]
    hover = [plotly_safe(f"step {s.step + 1}: loss {s.loss:.3f} on positions {s.span_start}–"
                         f"{s.span_start + s.span_tokens - 1}<br>{s.tokens_trained} tokens trained, gradient norm "
                         f"{s.grad_norm:.3g}, at {s.elapsed_s:.2f} s") for s in shown]
    # plotly draws the second y axis's traces over the first's: the bars on the first (its axis on the right), the loss
    # line on the second (on the left), so no bar hides the line
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=x, y=[s.tokens_trained for s in shown], name="tokens trained so far",
                         marker_color="#dadaeb", hoverinfo="skip"), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=[s.loss for s in shown], mode="lines+markers", name="loss on the step's span",
                             line=dict(color="#b279a2"), hovertext=hover, hoverinfo="text"), secondary_y=True)
    last = steps[-1]
    per_step = last.elapsed_s - steps[0].elapsed_s
    pace = f", {per_step / (len(steps) - 1):.2f} s a step" if len(steps) > 1 else ""
    planned = trace.start.params.get("steps")
    count = f"{len(steps)} of {planned}" if isinstance(planned, int) and trace.finish is None else f"{len(steps)}"
    title, top = title_block([f"Training: {count} steps, {last.tokens_trained} tokens trained by {last.elapsed_s:.1f} s"
                              f"{pace}; loss {steps[0].loss:.2f} → {last.loss:.2f}"],
                             width=HALF, small="line: next-token loss on each step's span, before its update (spans "
                                               "are drawn at random, so it moves with the span); bars: tokens trained",
                             small_width=HALF_SMALL)
    fig.update_layout(template=TEMPLATE, title=title, height=300 + top - 64, margin=dict(l=50, r=50, t=top, b=40),
                      legend=dict(orientation="h", y=-0.25), bargap=0.3)
    capped = f" (every {x[1] - x[0]}th drawn)" if len(shown) < len(steps) else ""
    fig.update_xaxes(title_text=f"gradient step{capped}", title_standoff=4, dtick=1 if len(x) <= 16 else None)
    fig.update_yaxes(title_text="loss (nats)", secondary_y=True, rangemode="tozero", side="left")
    fig.update_yaxes(title_text="tokens", secondary_y=False, rangemode="tozero", showgrid=False, side="right")
    return fig


def _thinking_figure(trace: Trace) -> go.Figure:
    tokens = trace.of_kind("token")
    if not tokens:
        return empty_figure("The whole prompt is read first; each thinking token then adds a point", height=300,
                            title="Thinking")
    fig = go.Figure()
    limit = cap(NODES)
    counts = {}
    for part, color in (("think", "#b279a2"), ("answer", "#4c78a8")):
        mine = [(k, t) for k, t in enumerate(tokens, 1) if (t.extra or {}).get("part", "answer") == part]
        counts[part] = len(mine)
        mine = mine[::max(1, -(-len(mine) // limit))]
        if mine:
            fig.add_trace(go.Scatter(x=[t.elapsed_s for _, t in mine], y=[k for k, _ in mine], mode="lines",
                                     name="thinking tokens" if part == "think" else "answer tokens",
                                     line=dict(color=color, width=3), hoverinfo="text",
                                     hovertext=[plotly_safe(f"token {k} ({part}) at {t.elapsed_s:.2f} s: "
                                                            f"{t.token_text!r}") for k, t in mine]))
    extra = trace.finish.extra if trace.finish is not None else {}
    planned = extra.get("planned_think_tokens")
    plan = f" of {planned} planned" if isinstance(planned, int) else ""
    title, top = title_block([f"Thinking: {counts['think']} tokens{plan}, then {counts['answer']} of answer"],
                             width=HALF, small="the in-context baseline at the compute training would spend (0 = "
                                               "matched FLOPs): tokens generated against time", small_width=HALF_SMALL)
    fig.update_layout(template=TEMPLATE, title=title, height=300 + top - 64, margin=dict(l=50, r=20, t=top, b=40),
                      legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title_text="seconds", title_standoff=4)
    fig.update_yaxes(title_text="tokens generated", rangemode="tozero")
    return fig


def _count(record: dict, key: str) -> int | float:
    """A number of a record (a replayed trace's extra is any JSON): the value, 0 for anything else."""
    value = record.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _flops_figure(trace: Trace) -> go.Figure:
    """ttt's finish record: the FLOPs of the context's prefill, the training steps, and everything after the context
    (the question, thinking and answer tokens), with the total in decoded-token equivalents."""
    extra = trace.finish.extra
    flops = extra["flops"]
    after = "question, thinking and answer" if _count(extra, "think_tokens") else "question and answer"
    bars = [("the context's prefill", _count(flops, "prefill"), FULL), ("training", _count(flops, "train"), "#b279a2"),
            (after, _count(flops, "after_context"), "#4c78a8")]
    fig = go.Figure(go.Bar(x=[b[0] for b in bars], y=[b[1] / 1e9 for b in bars], marker_color=[b[2] for b in bars],
                           text=[f"{b[1] / 1e9:.1f}" for b in bars], textposition="outside", cliponaxis=False,
                           hovertemplate="%{x}: %{y:.2f} GFLOPs<extra></extra>"))
    units = _count(extra, "compute_tokens")
    same = f" ≈ {units:,.0f} decoded tokens" if units else ""
    spent = (f"{_count(extra, 'think_tokens'):.0f} thinking tokens" if extra.get("mode") == "think"
             else f"{_count(extra, 'steps_run'):.0f} steps, {_count(extra, 'tokens_trained'):.0f} tokens trained")
    title, top = title_block([f"Compute: {_count(flops, 'total') / 1e9:.1f} GFLOPs{same} ({spent})"],
                             small="FLOPs counted from what ran (2 per weight per token, attention per key, a training "
                                   "step's backward); the paper compares training and thinking at equal FLOPs "
                                   f"(think_tokens 0 = matched; the paper's rule 2 × steps × span = "
                                   f"{_count(extra, 'paper_think_tokens'):.0f} tokens)", width=HALF,
                             small_width=HALF_SMALL)  # beside the training picture: half the page
    fig.update_layout(template=TEMPLATE, title=title, height=300 + top - 64, margin=dict(l=60, r=20, t=top, b=40),
                      showlegend=False)
    fig.update_yaxes(title_text="GFLOPs", range=[0, max(b[1] for b in bars) / 1e9 * 1.2 or 1])
    return fig
