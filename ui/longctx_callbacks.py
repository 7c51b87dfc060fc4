"""The Long context tab's event handlers as plain functions: values in, {output name: value} out.

`generate_run` streams one run: in the worker (holding the model's compute slot) it loads the model, builds the
document for the chosen window and seed (or takes the pasted text), computes the context's marks with the
tokenizer (`context_marks`: the planted facts' and the answer's token positions) and runs the method; Stop closes
it, which stops the compute within one model call. A replayed trace gets its marks from its own prompt
(`recover_question` finds the question's reference in the context, as the document builder planted it).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from decoding.events import Trace
from decoding.longctx.document import SEPARATOR, build_document, count_tokens
from decoding.longctx.rag import split_prompt
from decoding.longctx.retriever import BM25
from decoding.models import load_model
from decoding.run import MAX_PROMPT_CHARS, generate, make_params
from decoding.speculative.memory import kv_bytes_per_position
from ui.plugin_fields import namespaced
from ui.widgets import USER_ERRORS, md_esc, user_error
from ui.wiring import RunControls, as_int
from ui.worker import Status, check_model, finished_status, load_queued, pump_views, wait_for_finish
from ui.longctx_views import (OWN, PLAIN, QUESTION_CHOICES, SPECULATIVE, TRAINS, UI_MAX_NEW_TOKENS, collect, field_rows,
                              answer_html, method_help, method_of, methods, shows, stats_line,
                              views)

ASK = " Answer in a few words."  # what `Document.prompt` puts after a question
NEEDLE_LINE = re.compile(r"^The secret number of (\w+) is (\d+)\.$", re.MULTILINE)
TITLE_LINE = re.compile(r"^(Ruth|Esther|Jonah) \d+$")
READS_ALL = ("greedy", "speculative")  # strategies whose model reads the whole prompt (the tab checks the window first)


@dataclass(frozen=True)
class Prepared:
    """What the worker built before the run: the prompt and the marks of its context."""

    prompt: str
    marks: dict


# The document and its marks -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def shipped_document(model: str, size: int, seed: int):
    """The shipped book cut for a `size`-token window from `seed`, under `model`'s tokenizer (kept: deterministic)."""
    return build_document(load_model(model, progress=None).tokenizer, size, seed)


def recover_question(context: str, question: str) -> dict | None:
    """The question's kind, reference and evidence line, found in `context` the way `document.py` makes them (a
    needle's planted line; the verse a quote opens, the words after it, its chapter); None for any other question."""
    question = question.removesuffix(ASK).strip()
    lines = context.split("\n")
    m = re.fullmatch(r"What is the secret number of (\w+)\?", question)
    if m:
        hit = next((n for n in NEEDLE_LINE.finditer(context) if n.group(1) == m.group(1)), None)
        return None if hit is None else {"kind": "needle", "question": question, "answer": hit.group(2),
                                         "evidence": hit.group(0)}
    m = re.fullmatch(r'In the text, which (\d+) words come right after "(.+)"\?', question) or \
        re.fullmatch(r'Which chapter of the text contains the words "(.+)"\?', question)
    if not m:
        return None
    quote = m.group(m.lastindex)
    at = next((i for i, line in enumerate(lines) if line.startswith(quote)), None)
    if at is None:
        return None
    if question.startswith("In the text"):
        words = lines[at].split()
        n = len(quote.split())
        answer = " ".join(words[n:n + int(m.group(1))])
        kind = "continue"
    else:
        answer = next((line for line in reversed(lines[:at]) if TITLE_LINE.match(line)), "")
        kind = "chapter"
    return {"kind": kind, "question": question, "answer": answer, "evidence": lines[at]} if answer else None


MAX_NEEDLES = 64  # planted facts marked in a context (the builder plants a handful; a pasted text may hold thousands)


class TokenOffsets:
    """Where each character of a text falls in its tokens, from ONE tokenisation (a fast tokenizer's offsets): the
    marks of a context cost one pass over it, however many facts it holds. Without offsets (a slow tokenizer), the
    text before a character is counted, as the document builder counts it."""

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.text = tokenizer, text
        self.ends = None
        if getattr(tokenizer, "is_fast", False):
            encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            self.ends = [end for _, end in encoded["offset_mapping"]]  # each token's last character + 1
            self.count = len(self.ends)
        else:
            self.count = count_tokens(tokenizer, text)

    def at(self, char: int) -> int:
        """The tokens that end at or before character `char` (the tokens of the text before it)."""
        if self.ends is None:
            return count_tokens(self.tokenizer, self.text[:char])
        return bisect.bisect_right(self.ends, char)


def _span(offsets: TokenOffsets, start: int, end: int) -> list[int]:
    """[first, last) token positions of the characters start..end (counting the text before them, as the document
    builder places its facts)."""
    return [offsets.at(start), offsets.at(end)]


def context_marks(tokenizer, context: str, question: dict | None) -> dict:
    """The context's length in tokens, the planted facts (the first MAX_NEEDLES) and the question's evidence as token
    spans; one tokenisation of the context (`TokenOffsets`), so its cost grows with the text's length only."""
    offsets = TokenOffsets(tokenizer, context)
    needles = []
    for m in itertools.islice(NEEDLE_LINE.finditer(context), MAX_NEEDLES):
        a, b = _span(offsets, m.start(), m.end())
        needles.append({"name": m.group(1), "value": int(m.group(2)), "start": a, "end": b})
    evidence = None
    if question and question.get("evidence"):
        at = context.find(question["evidence"])
        if at >= 0:
            evidence = _span(offsets, at, at + len(question["evidence"]))
    return {"context_tokens": offsets.count, "needles": needles, "evidence": evidence, "question": question}


def rapid_ranking(tokenizer, trace: Trace) -> list[int] | None:
    """rapid's retrieved chunks in rank order for a trace recorded before rapid kept them (`ranked`; its record then
    had them in document order, the scores in rank order): BM25 over the recorded chunks for the text after them,
    kept only when it gives back exactly the recorded chunks and scores."""
    rounds = trace.of_kind("spec_round") if trace.start is not None else []
    first = (rounds[0].extra or {}) if rounds else {}
    chunks, kept, scores = first.get("chunks"), first.get("retrieved"), first.get("scores")
    if not chunks or not kept:
        return None
    ids = trace.start.prompt_ids
    texts = [tokenizer.decode(ids[a:b]) for a, b in chunks]
    hits = BM25(texts).rank(tokenizer.decode(ids[chunks[-1][1]:]), len(kept))
    if sorted(h.index for h in hits) != sorted(kept) or [round(h.score, 4) for h in hits] != scores:
        return None
    return [h.index for h in hits]


def prepare(loaded, source: str, doc_seed: int, own_text: str, question: str, own_question: str,
            reference: str) -> Prepared:
    """The prompt and its marks for the chosen document and question (ValueError naming what is wrong)."""
    tokenizer = loaded.tokenizer
    typed = (own_question or "").strip()
    if source == OWN:
        text = (own_text or "").strip()
        if not text:
            raise ValueError("your own text is empty: paste a long text (or upload a .txt file), or choose a size of "
                             "the shipped book")
        if not typed:
            raise ValueError("type a question about your text (the generated questions are the shipped book's)")
        prompt, context, line = f"{text}{SEPARATOR}{typed}", text, "your own text,"
    else:
        doc = shipped_document(loaded.name, int(source), doc_seed)
        line = f"the shipped book (window {int(source) // 1024}K, seed {doc_seed}, {', '.join(doc.chapters[:1])}…),"
        context = doc.text
        if question == OWN:
            if not typed:
                raise ValueError("type your question, or choose one of the generated questions")
            prompt = doc.prompt(typed)
        else:
            prompt = doc.prompt(doc.questions[int(question)])
    q_text = split_prompt(prompt)[1]
    found = recover_question(context, q_text)
    if found is None:
        found = {"kind": "typed", "question": q_text.removesuffix(ASK), "answer": (reference or "").strip(),
                 "evidence": ""}
    if source != OWN and question != OWN:
        q = doc.questions[int(question)]  # the builder's own question, with its evidence line
        found = {"kind": q.kind, "question": q.question, "answer": q.answer, "evidence": q.evidence}
    marks = context_marks(tokenizer, context, found) | {"source_line": line}
    return Prepared(prompt, marks)


def model_marks(loaded) -> dict:
    """What the pictures need of the model: its KV bytes per position and its window."""
    model = loaded.model
    dtype = next(model.parameters()).dtype
    window = getattr(model.config, "max_position_embeddings", None)
    return {"kv_bytes_per_position": kv_bytes_per_position(model.config, dtype), "window": window,
            "model": loaded.name}


def check_window(loaded, prompt: str, strategy: str, max_new_tokens: int, chat: bool) -> None:
    """A clear refusal before the run when a method that reads the whole prompt cannot fit it in the window."""
    if strategy not in READS_ALL:
        return
    window = getattr(loaded.model.config, "max_position_embeddings", None)
    tokens = count_tokens(loaded.tokenizer, prompt)
    room = 32 if chat else 0  # the chat template's few tokens
    if window and tokens + room + max_new_tokens > window:
        raise ValueError(f"the text and question are {tokens:,} tokens: with {max_new_tokens} new tokens they do not fit "
                         f"{loaded.name}'s window of {window:,} positions, and this method reads all of it. Shorten the "
                         "text, or choose rag, which reads only the chunks it retrieves")


def reading_line(loaded, prompt: str, strategy: str, method: str) -> str:
    """The status while the run reads its prompt: a long prompt's prefill is most of a run on a CPU (45 s for 8K
    tokens of SmolLM2 on one thread), so the line says how much the model reads before its first token."""
    if strategy == "rag":
        return f"Generating with {loaded.name} ({method}): retrieving chunks, then reading only those…"
    tokens = count_tokens(loaded.tokenizer, prompt)
    return (f"Generating with {loaded.name} ({method}): reading all {tokens:,} tokens of the text and question first "
            "(the first token waits for it)…")


# Handlers -------------------------------------------------------------------------------------------------------
def method_changed(method: str) -> dict:
    """Show the chosen method's knobs (as its parameter dataclass declares them) and its help; hide the others'."""
    import gradio as gr

    rows = field_rows()
    knobs = {f"lc:{name}": gr.update(visible=shows(owner, method)) for name, (owner, _) in rows.items()
             if owner != SPECULATIVE}  # the family's stay visible inside their accordion
    folded = {"spec_settings": gr.update(visible=shows(SPECULATIVE, method))} if any(
        owner == SPECULATIVE for owner, _ in rows.values()) else {}
    return knobs | folded | {"method_help": method_help(method), "training": gr.update(visible=method == TRAINS)}


def source_changed(source: str, question: str) -> dict:
    """Your own text: the text box and the typed question; the shipped book: its seed and generated questions."""
    import gradio as gr

    own = source == OWN
    choices = [c for c in QUESTION_CHOICES if c[1] == OWN] if own else QUESTION_CHOICES
    chosen = OWN if own else question
    return {"own_text": gr.update(visible=own), "own_file": gr.update(visible=own), "doc_seed": gr.update(visible=not own),
            "question": gr.update(choices=choices, value=chosen),
            "own_question": gr.update(visible=chosen == OWN), "reference": gr.update(visible=chosen == OWN)}


def question_changed(question: str) -> dict:
    import gradio as gr

    return {"own_question": gr.update(visible=question == OWN), "reference": gr.update(visible=question == OWN)}


def preview(model, source, doc_seed, question, own_question, reference, own_text) -> dict:
    """The document and question the next run reads (loads the model's tokenizer once)."""
    from ui.longctx_views import document_md

    if source == OWN and not (own_text or "").strip():
        return {"document": "Paste your text (or upload a .txt file) and type a question about it."}
    try:
        check_inputs(model, source, doc_seed, own_text)
        loaded = load_queued(model)  # a model not loaded yet loads in turn with the runs
        prepared = prepare(loaded, source, as_int(doc_seed), own_text, question, own_question, reference)
    except USER_ERRORS as err:
        return {"document": f"⚠ {md_esc(err)}"}
    return {"document": document_md(prepared.marks)}


def read_upload(path) -> dict:
    """An uploaded .txt file into the text box (UTF-8, at most the prompt's character limit)."""
    if not path:
        return {}
    with open(path, "rb") as f:
        raw = f.read(MAX_PROMPT_CHARS * 4 + 1)  # a UTF-8 character is at most 4 bytes: more is too long anyway
    if len(raw) > MAX_PROMPT_CHARS * 4:
        text = None
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise user_error(ValueError(f"{Path(path).name} is not UTF-8 text")) from None
    if text is None or len(text) > MAX_PROMPT_CHARS:
        raise user_error(ValueError(f"{Path(path).name} has more than {MAX_PROMPT_CHARS:,} characters, the most a "
                                    "prompt may have (about 8K tokens of English for SmolLM2)"))
    return {"own_text": text}


def check_inputs(model, source, doc_seed, own_text) -> None:
    check_model(model)
    if source != OWN and str(source) not in {c for c in ("1024", "2048", "4096", "8192")}:
        raise ValueError(f"`size` must be 1024, 2048, 4096, 8192 or {OWN!r}, got {source!r}")
    seed = as_int(doc_seed)
    if source != OWN and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"the document's `seed` must be an integer >= 0, got {doc_seed!r}")
    if source == OWN and len(own_text or "") > MAX_PROMPT_CHARS:
        raise ValueError(f"your text is {len(own_text):,} characters; the most is {MAX_PROMPT_CHARS:,} (about 8K "
                         "tokens of English for SmolLM2, whose window is 8,192)")


def generate_run(model, source, doc_seed, own_text, question, own_question, reference, method, max_new_tokens, chat,
                 **fields) -> Iterator[dict]:
    """Build the document, run the method on it and stream the views. `fields` are every method's knobs by input name
    (`longctx_views.field_rows`); only the chosen method's are sent."""
    max_new_tokens, doc_seed = as_int(max_new_tokens), as_int(doc_seed)
    try:
        check_inputs(model, source, doc_seed, own_text)
        strategy, params = collect(method, fields)
        make_params(strategy, params)  # a bad knob fails here, before any model work
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or \
                not 1 <= max_new_tokens <= UI_MAX_NEW_TOKENS:
            raise ValueError(f"`max_new_tokens` must be an integer in [1, {UI_MAX_NEW_TOKENS}], got {max_new_tokens!r}")
    except USER_ERRORS as err:
        raise user_error(err) from None
    trace, state = Trace(), {"marks": None}
    yield views(trace) | {"trace": trace, "marks": None, "status": f"Starting {md_esc(model)}…"}

    def work(emit, should_stop):
        loaded = load_model(model, progress=lambda message: emit(Status(message)))
        if should_stop():
            return
        emit(Status("Building the document…"))
        prepared = prepare(loaded, source, doc_seed, own_text, question, own_question, reference)
        check_window(loaded, prepared.prompt, strategy, max_new_tokens, bool(chat))
        emit(Prepared(prepared.prompt, prepared.marks | model_marks(loaded)))
        emit(Status(reading_line(loaded, prepared.prompt, strategy, method)))
        for event in generate(loaded, prepared.prompt, strategy=strategy, params=params, max_new_tokens=max_new_tokens,
                              seed=0, chat=bool(chat), should_stop=should_stop):
            emit(event)

    def take(item) -> bool:
        if isinstance(item, Prepared):
            state["marks"] = item.marks
            return True
        if hasattr(item, "kind"):
            trace.append(item)
            return True
        return False

    def render() -> dict:
        return views(trace, state["marks"], live=True) | {"marks": state["marks"]}

    def line(status, progress) -> str:
        count = len(trace.of_kind("token"))  # a speculative run's tokens too (its rounds' tokens are token events)
        return md_esc(status or "Working…") + (f" {count} tokens so far." if count else "")

    def quick(_) -> dict:  # the answer as it grows (no figures: they wait for a redraw)
        return {"answer": answer_html(trace, state["marks"])}

    try:
        yield from pump_views(work, take, render, line, quick, on_late=take)
    except USER_ERRORS as err:
        raise user_error(err) from None
    marks = finished_marks(trace, state["marks"])
    yield views(trace, marks) | {"trace": trace, "marks": marks,
                                 "status": finished_status(trace, "Finished") + verdict_line(trace, marks)}


def finished_marks(trace: Trace, marks: dict | None) -> dict | None:
    """The marks with rapid's ranking added once its first round is in, for a trace whose record lacks it (an older
    one: the ranking is then recomputed with the tokenizer; the model is loaded)."""
    rounds = trace.of_kind("spec_round")
    if marks is None or trace.start is None or not rounds or "ranked" in marks or "ranked" in (rounds[0].extra or {}):
        return marks
    try:
        tokenizer = load_queued(trace.start.model).tokenizer
    except USER_ERRORS:
        return marks
    return marks | {"ranked": rapid_ranking(tokenizer, trace)}


def verdict_line(trace: Trace, marks: dict | None) -> str:
    from ui.longctx_views import answer_text, verdict

    right = verdict(marks, answer_text(trace)) if trace.finish is not None else None
    return "" if right is None else " The answer is **right**." if right else " The answer is **wrong**."


def stop_run(trace, marks, wait_s: float = 3.0) -> dict:
    """After Stop cancelled the running event: show what was generated (the export button offers it)."""
    if trace is None:
        return {"status": "Nothing is running."}
    if not wait_for_finish(trace, wait_s) and trace.finish is not None:
        return {"status": "Nothing is running."}
    return views(trace, marks) | {"status": f"**Stopped** the run. {stats_line(trace)}."}


def replay_marks(trace: Trace) -> dict | None:
    """A replayed run's marks, from its prompt (the facts and the question's reference found in its context) with its
    model's tokenizer; None for a model outside the registry (a hub id, a remote engine) or one that cannot load."""
    from decoding.models import REGISTRY

    context, question = split_prompt(trace.start.prompt)
    if trace.start.model not in REGISTRY:  # a replay never loads a hub model or reaches an engine a trace names
        return None
    try:
        loaded = load_queued(trace.start.model)  # in turn with the runs, within the memory budget
    except USER_ERRORS:
        return None
    found = recover_question(context, question) or {"kind": "typed", "question": question.removesuffix(ASK),
                                                    "answer": "", "evidence": ""}
    marks = context_marks(loaded.tokenizer, context, found) | model_marks(loaded) | {"source_line": "replayed,"}
    return finished_marks(trace, marks)


def run_controls(run) -> dict:
    """The controls for a preset (its model, method, knobs, and the shipped book it names by size, seed and
    question) or a replayed run (its model, method and knobs; its text and question as your own)."""
    start = run
    preset = getattr(start, "document", None) is not None
    method = method_of(start) if preset or hasattr(start, "prompt_ids") else None
    out = {"model": start.model, "chat": start.chat,
           "max_new_tokens": min(max(1, start.max_new_tokens), UI_MAX_NEW_TOKENS)}
    if method is None:
        return out
    params = namespaced(start.strategy, start.params) if method != PLAIN else {}
    knobs = {}
    for name, (owner, _) in field_rows().items():
        key = name.partition(".")[2]
        if shows(owner, method) and key in params:
            knobs[f"lc:{name}"] = params[key]
    if preset:
        doc = start.document
        return out | {"method": method, "source": str(doc["size"]), "doc_seed": doc["seed"],
                      "question": str(doc["question"]), "own_question": "", "own_text": ""} | knobs
    context, question = split_prompt(start.prompt)
    return out | {"method": method, "source": OWN, "own_text": context, "question": OWN,
                  "own_question": question.removesuffix(ASK)} | knobs


def _runs(strategy: str) -> bool:
    return strategy in {"greedy", SPECULATIVE} | {m for m in methods()}


TAB = RunControls("longctx", "Long context", _runs, run_controls)


def replay(path, trace, marks) -> dict:
    """Load a saved run of this tab into the views (and its settings into the controls)."""
    state: dict = {}

    def render(loaded: Trace) -> dict:
        state["marks"] = replay_marks(loaded)
        return views(loaded, state["marks"])

    shown = TAB.replay(path, "a long-context run", lambda t: method_of(t.start) is not None, render, stats_line,
                       {})
    return shown | ({"marks": state.get("marks")} if shown else {})


def preset_choices() -> list[tuple[str, str]]:
    from decoding.presets import preset_menu

    return preset_menu("longctx")


def preset_chosen(name) -> dict:
    """Every control from the preset (the shipped book by size, seed and question; defaults for what it leaves out)
    and its teaching note."""
    return TAB.preset_chosen(name)
