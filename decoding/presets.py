"""Named classroom demos: a preset is a run's settings plus a teaching note, stored as YAML.

A preset file in `presets/` holds one mapping:

    title: Greedy decoding loops on a base model
    model: gemma3-270m
    strategy: greedy
    params: {}
    prompt: The best thing about the city is
    chat: false
    max_new_tokens: 64
    seed: 0
    note: >
      What to look for, in two or three sentences.

A Long context preset names the shipped book instead of carrying it (a 4K-token book is 16 KB of text): it gives
`document: {size: 2048, seed: 0, question: 1}` (the window in tokens, the book's seed, the index of its generated
question: 0-2 the planted facts at depths 0.1, 0.5, 0.9, 3 the words after a quote, 4 a quote's chapter) and no
`prompt`; `document_prompt(preset, tokenizer)` builds the prompt the run reads (the CLI and the tab), the same
text for the same model's tokenizer every time (`decoding.longctx.document.build_document` is deterministic).

A shipped preset's file name starts with its own two-digit number, unique across `presets/`, in
its lab's range (`LAB_NUMBERS`): the number is the order a lab's lesson walks them, and code and
tests pick a preset by its full name, never by the number alone.

Loading validates everything a run would (strategy, parameters, prompt, limits, model name), so
a malformed preset fails with a message naming the file and the problem, before any model work.
YAML anchors and aliases (`&a`, `*a`) are refused before anything is built: a "billion laughs"
file of a few hundred bytes would otherwise expand into gigabytes. Messages quote at most
`QUOTE_CHARS` characters of a bad value.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from decoding.errors import QUOTE_CHARS, short_repr
from decoding.models import resolve_spec
from decoding.run import validate_request

PRESETS_DIR = Path(__file__).resolve().parents[1] / "presets"
REQUIRED = ("title", "model", "strategy", "prompt", "note")
OPTIONAL = {"params": dict, "chat": bool, "max_new_tokens": int, "seed": int, "lab": str, "document": dict}
LAB_NUMBERS = {"playground": range(1, 20), "speculative": range(20, 30), "scaling": range(30, 50),
               "diffusion": range(50, 80), "longctx": range(80, 90)}  # lab -> the file-name numbers its presets use
DOCUMENT_KEYS = ("size", "seed", "question")  # a Long context preset's `document`
QUESTIONS = 5  # questions the shipped book's builder makes per document (decoding.longctx.document)
BOOK: dict = {}  # {"sizes": (...), "build": build_document(tokenizer, size, seed)}: the long-context family registers
# its shipped book here when imported (the core imports no family; `_book` imports it by name when first needed)
BOOK_MODULE = "decoding.longctx.document"


def _book() -> dict:
    if not BOOK:
        importlib.import_module(BOOK_MODULE)  # registers into BOOK
    return BOOK


class _AliasRefused(yaml.YAMLError):
    pass


class _NoAliasLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses anchors and aliases as the composer meets them (nothing is expanded)."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            what = "alias *" if isinstance(event, yaml.AliasEvent) else "anchor &"
            raise _AliasRefused(f"YAML anchors and aliases are not allowed in presets (found the "
                                f"{what}{event.anchor[:40]} on line {event.start_mark.line + 1})")
        return super().compose_node(parent, index)


@dataclass(frozen=True)
class Preset:
    name: str  # file stem, e.g. "min-p-high-temperature"
    title: str  # one line shown in the menu
    model: str  # registry name or hub id
    strategy: str
    prompt: str
    note: str  # the teaching note: what to look for
    params: dict = field(default_factory=dict)
    chat: bool = True
    max_new_tokens: int = 64
    seed: int = 0
    lab: str = "playground"  # which tab shows it
    document: dict | None = None  # the shipped book by {size, seed, question} instead of a prompt (Long context)


def parse_preset(name: str, text: str) -> Preset:
    where = f"preset {name!r}"
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader, minus aliases
    except _AliasRefused as err:
        raise ValueError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{where}: not valid YAML ({str(err).splitlines()[0][:QUOTE_CHARS]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping of settings, got {type(data).__name__}")
    if "document" in data and "prompt" not in data:
        data["prompt"] = ""  # built from the book when the run starts (`document_prompt`)
    missing = [k for k in REQUIRED if k not in data]
    unknown = sorted(map(str, set(data) - set(REQUIRED) - set(OPTIONAL)))
    if missing or unknown:
        unknown_text = short_repr(unknown) if unknown else "nothing"
        raise ValueError(f"{where}: missing {missing or 'nothing'}, unknown {unknown_text}")
    for key in REQUIRED:
        if not isinstance(data[key], str):
            raise ValueError(f"{where}: `{key}` must be text, got {short_repr(data[key])}")
    for key, kind in OPTIONAL.items():
        if key in data and (not isinstance(data[key], kind) or (kind is int and isinstance(data[key], bool))):
            raise ValueError(f"{where}: `{key}` must be {kind.__name__}, got {short_repr(data[key])}")
    preset = Preset(name=name, **data)
    try:
        resolve_spec(preset.model)
        if preset.document is not None:
            check_document(preset)
        prompt = preset.prompt if preset.document is None else "the shipped book"  # the book's built at run time
        validate_request(prompt, preset.strategy, preset.params, preset.max_new_tokens, preset.seed)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return preset


_parsed: dict[tuple, Preset] = {}  # (path, mtime_ns, size) -> Preset: a tab build reads every preset a few times


def load_preset(path: str | Path) -> Preset:
    """The preset in `path`, parsed and checked once per version of the file (a changed file is read again)."""
    path = Path(path)
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        if key not in _parsed:
            if len(_parsed) >= 1024:  # files written by tests or a long-lived editor session
                _parsed.clear()
            _parsed[key] = parse_preset(path.stem, path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"preset {path.name!r}: cannot be read ({err})") from None
    return replace(_parsed[key], params=copy.deepcopy(_parsed[key].params))  # a caller's edit stays its own


def load_presets(folder: str | Path | None = None, lab: str | None = None) -> list[Preset]:
    """Every preset in `folder` (default `PRESETS_DIR`, sorted by file name), optionally only one lab's."""
    presets = [load_preset(p) for p in sorted(Path(folder or PRESETS_DIR).glob("*.yaml"))]
    return [p for p in presets if lab is None or p.lab == lab]


def preset_menu(lab: str) -> list[tuple[str, str]]:
    """(title, name) of every preset of `lab`: the choices of its tab's Preset menu."""
    return [(p.title, p.name) for p in load_presets(lab=lab)]


def find_preset(lab: str, name) -> Preset | None:
    """The preset of `lab` called `name`, or None (unknown name, another lab's, or no choice)."""
    return next((p for p in load_presets(lab=lab) if p.name == name), None)


def check_document(preset: Preset) -> None:
    """ValueError unless a preset's `document` names the shipped book exactly ({size, seed, question}, no prompt)."""
    sizes = _book()["sizes"]
    doc = preset.document
    if set(doc) != set(DOCUMENT_KEYS):
        raise ValueError(f"`document` must have exactly the keys {', '.join(DOCUMENT_KEYS)}, got "
                         f"{short_repr(sorted(map(str, doc)))}")
    if doc["size"] not in sizes or isinstance(doc["size"], bool):
        raise ValueError(f"`document.size` must be one of {', '.join(map(str, sizes))}, got {short_repr(doc['size'])}")
    if isinstance(doc["seed"], bool) or not isinstance(doc["seed"], int) or not 0 <= doc["seed"] < 2**31:
        raise ValueError(f"`document.seed` must be an integer in [0, 2**31), got {short_repr(doc['seed'])}")
    if isinstance(doc["question"], bool) or doc["question"] not in range(QUESTIONS):
        raise ValueError(f"`document.question` must be an integer in [0, {QUESTIONS - 1}], got "
                         f"{short_repr(doc['question'])}")
    if preset.prompt:
        raise ValueError("give `document` or `prompt`, not both: the document's question is the prompt's end")
    if preset.lab != "longctx":
        raise ValueError(f"a preset with a `document` belongs to lab 'longctx', got {short_repr(preset.lab)}")


def document_prompt(preset: Preset, tokenizer) -> str:
    """The prompt a Long context preset's run reads: the shipped book its `document` names, cut for its window under
    `tokenizer`, then its question."""
    doc = _book()["build"](tokenizer, preset.document["size"], preset.document["seed"])
    if preset.document["question"] >= len(doc.questions):
        raise ValueError(f"preset {preset.name!r}: the book of seed {preset.document['seed']} has "
                         f"{len(doc.questions)} questions, not {preset.document['question'] + 1}")
    return doc.prompt(doc.questions[preset.document["question"]])
