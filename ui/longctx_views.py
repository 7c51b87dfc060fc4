"""Long context tab views as plain functions: the state (the trace and the marks of its context) rendered into
{output name: value} (see `OUTPUTS`), and the tab's methods and their knobs, derived from the registry.

    trace    the run (a `Trace`, growing while it streams)
    marks    what the tab computed of the run's context with the model's tokenizer (`longctx_callbacks.
             context_marks`): its length in tokens, the planted facts' and the answer's token spans, the
             question with its reference and checker kind, the model's KV bytes per position

Methods. "plain" is the whole context read by the model and answered greedily; every strategy registered in the
long-context family (`register_strategy(..., family="longctx")`: rag, and any added later) is one method with
the knobs of its parameter dataclass; every drafter defined in the family's package (`decoding/longctx/`: rapid)
is one method "speculative:<drafter>", with the speculative family's knobs and the drafter's own.

Glossary: see `decoding/longctx/__init__.py` (context, chunk, needle, depth, retrieved).
"""

from __future__ import annotations

import html
import math

from decoding.events import Trace, stats
from decoding.longctx.document import CHECKERS, SIZES
from decoding.registry import get_strategy, param_specs, strategies_of
from decoding.speculative.strategy import DRAFTERS
from ui.widgets import fmt, run_stats_html
from visualizers.longctx import context_strip_figure, kv_memory_figure, rag_compute_figure, speed_figure

PLAIN = "plain"
SPECULATIVE = "speculative"
LONG_PACKAGE = "decoding.longctx"
DEFAULT_MODEL = "smollm2-135m"
DEFAULT_METHOD = "rag"
DEFAULT_MAX_NEW_TOKENS = 24
UI_MAX_NEW_TOKENS = 128
OWN = "own"
SIZE_CHOICES = [(f"{s // 1024}K tokens", str(s)) for s in SIZES] + [("your own text", OWN)]
QUESTION_CHOICES = [("needle at depth 0.1", "0"), ("needle at depth 0.5", "1"), ("needle at depth 0.9", "2"),
                    ("continue the text (5 words)", "3"), ("which chapter", "4"), ("your own question", OWN)]
OUTPUTS = ("status", "stats", "answer", "strip", "memory", "speed", "compute", "document", "trace", "marks")


def long_drafters() -> list[str]:
    """Drafters defined in the long-context package (rapid; longspec once it is written), in registration order."""
    return [n for n in DRAFTERS.names() if getattr(DRAFTERS.get(n), "__module__", "").startswith(LONG_PACKAGE)]


def methods() -> list[str]:
    """The tab's methods: plain, the long-context strategies, speculative with each long-context drafter."""
    return [PLAIN] + strategies_of("longctx") + [f"{SPECULATIVE}:{d}" for d in long_drafters()]


def method_label(method: str) -> str:
    if method == PLAIN:
        return "full context · greedy"
    if method.startswith(f"{SPECULATIVE}:"):
        return f"speculative · {method.partition(':')[2]}"
    return method


def method_help(method: str) -> str:
    """One line saying what the method does (its registration's help)."""
    if method == PLAIN:
        return "**full context**: the model reads the whole document and the question, and answers greedily."
    if method.startswith(f"{SPECULATIVE}:"):
        drafter = method.partition(":")[2]
        return f"**speculative · {drafter}**: {DRAFTERS.entry(drafter).help}" if drafter in DRAFTERS else ""
    return f"**{method}**: {get_strategy(method).help}"


def strategy_of(method: str) -> str:
    return "greedy" if method == PLAIN else SPECULATIVE if method.startswith(f"{SPECULATIVE}:") else method


def field_rows() -> dict[str, tuple[str, dict]]:
    """{input name: (the method that shows it, its spec row)}. A long-context strategy's field is "<strategy>.<field>";
    the speculative family's "speculative.<field>" (shown for every speculative method: method "speculative"); a
    drafter's own "speculative.<drafter>.<field>"."""
    rows: dict[str, tuple[str, dict]] = {}
    for strategy in strategies_of("longctx"):
        for row in param_specs(strategy):
            rows[f"{strategy}.{row['name']}"] = (strategy, row)
    drafters = long_drafters()
    if drafters:
        for row in param_specs(SPECULATIVE):
            if row["plugin"] is None and row["name"] != "drafter":
                rows[f"{SPECULATIVE}.{row['name']}"] = (SPECULATIVE, row)
            elif row["plugin"] in drafters:
                rows[f"{SPECULATIVE}.{row['name']}"] = (f"{SPECULATIVE}:{row['plugin']}", row)
    return rows


def shows(owner: str, method: str) -> bool:
    return owner == method or (owner == SPECULATIVE and method.startswith(f"{SPECULATIVE}:"))


def _coerce(row: dict, value):
    """A widget's value as the engine wants it (sliders give 4.0 for 4; a number box None when emptied)."""
    if value is None:
        return row["default"]
    if row["type"] == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    if row["type"] == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if row["type"] == "str" and isinstance(value, str):
        return value.strip()
    return value


def collect(method: str, fields: dict) -> tuple[str, dict]:
    """(strategy, params) of a method from the widgets' values by input name; ValueError for an unknown method."""
    if method not in methods():
        raise ValueError(f"`method` must be one of {', '.join(methods())}, got {method!r}")
    strategy = strategy_of(method)
    params = {}
    for name, (owner, row) in field_rows().items():
        if shows(owner, method) and name in fields:
            key = name.partition(".")[2]  # "rag.top_k" -> "top_k"; "speculative.rapid.top_k" -> "rapid.top_k"
            params[key] = _coerce(row, fields[name])
    if strategy == SPECULATIVE:
        params["drafter"] = method.partition(":")[2]
    return strategy, params


def method_of(start) -> str | None:
    """The tab's method of a recorded run (None: a run this tab does not show)."""
    if start.strategy == "greedy":
        return PLAIN
    if start.strategy == SPECULATIVE:
        method = f"{SPECULATIVE}:{start.params.get('drafter')}"
        return method if method in methods() else None
    return start.strategy if start.strategy in strategies_of("longctx") else None


# Views ---------------------------------------------------------------------------------------------------
def answer_text(trace: Trace) -> str:
    """The run's answer: rag's final answer, otherwise the text generated (so far, while it streams)."""
    finish = trace.finish
    if finish is not None:
        if trace.start.strategy == "rag" and finish.stop_reason != "cancelled":
            return str(finish.extra.get("answer", finish.text)).strip()
        return finish.text.strip()
    parts = []
    for e in trace.events:
        if e.kind == "token" and (e.extra or {}).get("part", "answer") == "answer":
            parts.append(e.token_text)
        elif e.kind == "spec_round":
            nodes = {n["id"]: n for n in e.nodes}
            parts += [nodes[i]["token_text"] for i in e.accepted_path if i in nodes] + [e.extra_token_text]
    return "".join(parts).strip()


def verdict(marks: dict | None, answer: str) -> bool | None:
    """Whether `answer` is right by the question's checker (None: no reference to check against)."""
    q = (marks or {}).get("question") or {}
    if not q.get("answer"):
        return None
    checker = CHECKERS.get(q.get("kind"), contains_reference)
    return checker(q["answer"], answer)


def contains_reference(reference: str, answer: str) -> bool:
    """A typed question's checker: the expected answer's words occur in the answer, in order (case and punctuation
    ignored)."""
    import re

    ref, got = re.findall(r"[a-z0-9']+", reference.lower()), re.findall(r"[a-z0-9']+", answer.lower())
    return bool(ref) and any(got[i:i + len(ref)] == ref for i in range(len(got) - len(ref) + 1))


def answer_html(trace: Trace, marks: dict | None) -> str:
    if trace.start is None:
        return ('<div class="dl-placeholder">Press <b>Generate</b>: the answer appears here, and beside it whether the '
                "question's checker accepts it.</div>")
    answer = answer_text(trace)
    q = (marks or {}).get("question") or {}
    right = verdict(marks, answer) if trace.finish is not None else None
    if trace.finish is None:
        badge = '<span class="lc-verdict lc-pending">…</span>'
    elif right is None:
        badge = '<span class="lc-verdict lc-none">no checker (type an expected answer to check)</span>'
    else:
        mark = "✓ right" if right else "✗ wrong"
        badge = (f'<span class="lc-verdict lc-{"right" if right else "wrong"}" style="font-weight:bold;color:'
                 f'{"#2ca02c" if right else "#d62728"}">{mark}</span> <span class="lc-reference">reference: '
                 f'<b>{html.escape(q["answer"])}</b></span>')
    question = f'<div class="lc-question"><i>{html.escape(q["question"])}</i></div>' if q.get("question") else ""
    return (f'<div class="lc-answer">{question}<div><b>Answer:</b> <span class="lc-answer-text">'
            f'{html.escape(answer) or "…"}</span></div><div>{badge}</div></div>')


def document_md(marks: dict | None) -> str:
    """What the run read: the document, its planted facts and the question (with its reference)."""
    if not marks:
        return ("The book: chapters of Ruth, Esther and Jonah (King James Version) cut to the window, with three "
                "facts planted at depths 0.1, 0.5 and 0.9. Press **Generate** (or change the document) to see it.")
    lines = [f"**Document**: {marks.get('source_line', '')} {marks['context_tokens']:,} tokens."]
    if marks.get("needles"):
        facts = "; ".join(f"{n['name']} = {n['value']} (token {n['start']:,})" for n in marks["needles"])
        lines.append(f"**Planted facts**: {facts}.")
    q = marks.get("question") or {}
    if q.get("question"):
        ref = f" Reference: **{q['answer']}**" if q.get("answer") else " (no reference: no checker)"
        lines.append(f"**Question** ({q.get('kind', 'typed')}): {q['question']}{ref}")
    return "  \n".join(lines)


def stats_html(trace: Trace) -> str:
    def cards(trace: Trace) -> list:
        s = stats(trace)
        finish = trace.finish
        extra = finish.extra if finish is not None else {}
        out = [("tokens", s["num_tokens"]), ("tokens / s", fmt(s["tokens_per_s"], 1)),
               ("prompt tokens", len(trace.start.prompt_ids))]
        if s.get("rounds"):
            out += [("acceptance rate", fmt(s.get("acceptance_rate"), 2)),
                    ("mean accepted length", fmt(s.get("mean_accepted_length"), 2))]
        if "effective_context_tokens" in extra:
            out += [("effective context", extra["effective_context_tokens"]),
                    ("tokens processed", extra["tokens_processed"])]
        return out

    def setting(start) -> str:
        method = method_of(start) or start.strategy
        return method_label(method)

    return run_stats_html(trace, cards, setting)


def stats_line(trace: Trace) -> str:
    s = stats(trace)
    return f"{s['num_tokens']} tokens in {s['elapsed_s']:.1f} s ({fmt(s['tokens_per_s'], 1)} tokens/s)"


def views(trace: Trace | None, marks: dict | None = None, *, live: bool = False) -> dict:
    """Every display output from the state; `live=True` while streaming."""
    trace = trace or Trace()
    return {"stats": stats_html(trace), "answer": answer_html(trace, marks),
            "strip": context_strip_figure(trace, marks), "memory": kv_memory_figure(trace, marks),
            "speed": speed_figure(trace), "compute": rag_compute_figure(trace), "document": document_md(marks)}


def widget_value(row: dict):
    """A default as a widget shows it (inf as an empty number box)."""
    value = row["default"]
    return None if isinstance(value, float) and math.isinf(value) else value


def slider_end(row: dict) -> float:
    """Where a knob's slider stops when its spec gives no `ui_high`: 100, or four times a larger default (rag's
    `chunk_tokens` 128 of up to 1024)."""
    default = row["default"]
    number = isinstance(default, (int, float)) and not isinstance(default, bool) and math.isfinite(default)
    return max(100.0, 4.0 * default) if number else 100.0


def slider_fits(row: dict) -> bool:
    """Whether the slider `ui.widgets.spec_widget` makes for this knob (at `slider_end`) can show its default: a
    default below the slider's first step (0.001 on (0, 1], whose first step is 0.01) is
    refused by Gradio when the tab loads, so such a knob gets a number box."""
    default = row["default"]
    if row["type"] not in ("int", "float") or row.get("choices") or isinstance(default, bool):
        return True
    low, high = row["low"], row["high"]
    if (not row["interval"] and not row.get("ui_high")) or low == float("-inf"):
        return True  # spec_widget makes a number box
    high = min(high, row.get("ui_high") or max(slider_end(row), low + 1))
    step = row.get("step") or (1 if row["type"] == "int" else round((high - low) / 100, 6) or 0.01)
    if row.get("step"):
        low = math.ceil(low / step - 1e-9) * step
    if not row.get("low_inclusive", True) and low == row["low"]:
        low = low + step
    return low <= default <= high
