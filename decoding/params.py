"""Parameters described where they are declared: one spec per dataclass field, one checker.

A method's parameter dataclass declares each field with `param(...)`: default, range or
choices, and one line of help. `check_fields` validates an instance against those specs (the
`Params` base calls it in `__post_init__`), and `describe` turns them into the rows the CLI
(`list`, `--set`), the API and the tabs' widgets are generated from. Nothing about a parameter
lives in a second table.

    @dataclass(frozen=True)
    class BeamParams(Params):
        num_beams: int = param(4, low=1, high=32, help="How many partial sequences stay alive.")

Glossary
    spec      a `ParamSpec`: type, default, allowed values, help.
    range     an interval [low, high] (ends open or closed) for int / float fields; an int field's ends
              are finite (checked at import).
    choices   the allowed strings of a str field (a tuple, or a function returning one when the
              names come from a registry filled at import time, e.g. rewards or drafters).
    note      how the allowed values read when neither a range nor choices say it ("name or hub
              id"); such a str field is checked here to be text of at most MAX_TEXT_CHARS, and its
              content by the class's own `__post_init__` code (or the plug-in that reads it).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from dataclasses import dataclass
from typing import Callable

from decoding.errors import short_repr

TYPES = (int, float, bool, str)
MAX_TEXT_CHARS = 1_000  # free-form text parameters (a word list, a model id, a reference answer)


def _fmt(x: float) -> str:
    if x == math.inf:
        return "inf"
    if x == -math.inf:
        return "-inf"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def range_text(low: float, high: float, low_inclusive: bool = True, high_inclusive: bool = True) -> str:
    """Interval notation, e.g. "(0, 1]"."""
    return f"{'[' if low_inclusive else '('}{_fmt(low)}, {_fmt(high)}{']' if high_inclusive else ')'}"


@dataclass(frozen=True)
class ParamSpec:
    name: str  # the field / parameter name
    type: type  # int, float, bool or str
    default: object  # the default (for sampling knobs it means "off")
    help: str  # one short sentence for `list`, the API docs and the UI tooltips
    low: float = -math.inf  # int / float: lower end of the allowed range
    high: float = math.inf  # int / float: upper end (math.inf when unbounded)
    low_inclusive: bool = True  # whether `low` itself is allowed
    high_inclusive: bool = True  # whether `high` itself is allowed
    choices: tuple | Callable[[], tuple] | None = None  # str: the allowed values
    note: str | None = None  # how the allowed values read when no range or choices say it
    off: object = None  # a value outside the range that means "off" (e.g. 0 for an optional threshold)

    def allowed_choices(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices

    def range_text(self) -> str:
        """What is allowed, as `list` prints it: "(0, 1]", "a|b|c", "true|false" or the note."""
        if self.note:
            return self.note
        if self.type is bool:
            return "true|false"
        choices = self.allowed_choices()
        if choices is not None:
            return "|".join(map(str, choices))
        if self.type is str:
            return "text"
        text = range_text(self.low, self.high, self.low_inclusive, self.high_inclusive)
        return f"{_fmt(self.off)} or {text}" if self.off is not None else text

    def check(self, value, name: str | None = None) -> None:
        """Raise ValueError naming the parameter, the value and what is allowed, unless allowed."""
        name = name or self.name
        if self.off is not None and value == self.off and type(value) is not bool:
            return
        if self.type is bool:
            if not isinstance(value, bool):
                raise ValueError(f"`{name}` must be true or false, got {short_repr(value)}")
            return
        if self.type is str:
            if not isinstance(value, str):
                what = f" ({self.note})" if self.note else ""
                raise ValueError(f"`{name}` must be text{what}, got {short_repr(value)}")
            if self.note and len(value) > MAX_TEXT_CHARS:
                raise ValueError(f"`{name}` is {len(value)} characters long; at most {MAX_TEXT_CHARS} ({self.note}), "
                                 f"got {short_repr(value, 60)}")
            choices = self.allowed_choices()
            if choices is not None and value not in choices:
                raise ValueError(f"`{name}` must be one of {', '.join(map(str, choices))}, got {short_repr(value)}")
            return
        interval = range_text(self.low, self.high, self.low_inclusive, self.high_inclusive)
        if self.type is int:
            ok_type = isinstance(value, numbers.Integral) and not isinstance(value, bool)
            allowed = f"an integer in {interval}"
        else:
            ok_type = isinstance(value, numbers.Real) and not isinstance(value, bool)
            allowed = f"in {interval}"
        if self.off is not None:
            allowed = f"{_fmt(self.off)} (off) or {allowed}"
        in_range = ok_type and (self.low <= value if self.low_inclusive else self.low < value) and (
            value <= self.high if self.high_inclusive else value < self.high)  # NaN fails both
        if not in_range:
            raise ValueError(f"`{name}` must be {allowed}, got {short_repr(value)}")


def param(default, *, help: str, low: float = -math.inf, high: float = math.inf, low_inclusive: bool = True,
          high_inclusive: bool = True, choices=None, note: str | None = None, off=None) -> dataclasses.Field:
    """A dataclass field carrying its ParamSpec (type and name are filled in from the annotation)."""
    spec = dict(default=default, help=help, low=low, high=high, low_inclusive=low_inclusive,
                high_inclusive=high_inclusive, choices=choices, note=note, off=off)
    return dataclasses.field(default=default, metadata={"param": spec})


def specs(cls) -> list[ParamSpec]:
    """The ParamSpec of every field of a parameter dataclass, in field order.

    Raises TypeError naming the class and field when a field was not declared with `param(...)`
    or lacks help, a range, choices or a note (the check the registry runs at import).
    """
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("param")
        if meta is None:
            raise TypeError(f"{cls.__name__}.{f.name} has no parameter spec: declare it with "
                            f"decoding.params.param(default, help=..., low=/high= or choices=)")
        kind = hints[f.name]
        if kind not in TYPES:
            raise TypeError(f"{cls.__name__}.{f.name} is a {kind}; parameters are int, float, bool or str")
        if not meta["help"] or not meta["help"].strip():
            raise TypeError(f"{cls.__name__}.{f.name} has no help: give param(..., help='one line')")
        bounded = meta["low"] != -math.inf or meta["high"] != math.inf
        if kind in (int, float) and not bounded and not meta["note"]:
            raise TypeError(f"{cls.__name__}.{f.name} has no range: give param(..., low=..., high=...)")
        if kind is int and not (math.isfinite(meta["low"]) and math.isfinite(meta["high"])):
            # an unbounded integer passes validation as 10**30, then breaks the trace (64-bit fields), the
            # JSON the app streams and every loop sized by it
            raise TypeError(f"{cls.__name__}.{f.name} is an integer without a finite range: give "
                            f"param(..., low=..., high=...) with finite ends, got {range_text(meta['low'], meta['high'])}")
        out.append(ParamSpec(name=f.name, type=kind, **meta))
    return out


def check_fields(obj) -> None:
    """Validate every field of a parameter dataclass instance against its spec."""
    for spec in specs(type(obj)):
        spec.check(getattr(obj, spec.name))  # free-form text: its type and length (its content: the class)


class Params:
    """Base of frozen parameter dataclasses: every field is checked against its spec on creation.

    Subclasses with cross-field rules override `__post_init__` and call `super().__post_init__()`.
    """

    def __post_init__(self):
        check_fields(self)


def describe(cls) -> list[dict]:
    """Rows for `list`, the API and the UI widgets: name, type, default, range (as text), help, and the
    structured allowed values: choices, and for a plain numeric interval (no note, no "off" value)
    low / high with their inclusiveness."""
    rows = []
    for s in specs(cls):
        choices = s.allowed_choices()
        rows.append({"name": s.name, "type": s.type.__name__, "default": s.default, "range": s.range_text(),
                     "help": s.help, "choices": list(choices) if choices is not None else None,
                     "interval": s.type in (int, float) and s.note is None and s.off is None,
                     "low": s.low, "high": s.high, "low_inclusive": s.low_inclusive, "high_inclusive": s.high_inclusive})
    return rows
