"""Check loaded JSON against type annotations: the trace schema, written once for every event.

A trace is shared between students, so loading one must not trust it: every field of every event
is checked against its dataclass annotation (`check_fields`), and a value of the wrong type, out
of its range or nested too deeply is refused with a message naming the field, the value
(shortened) and what is allowed. Visualizers can then rely on the types the annotations promise.

Glossary
    hint        an annotation: int, float, str, bool, None, X | Y, list[X], a TypedDict (a record
                with named keys), bare `dict` / `list` (any JSON object / array), and
                Annotated[int | float, Range(...)] for a number with a range.
    JSON value  text, a finite number, true / false, null, or an array / object of JSON values,
                nested at most MAX_DEPTH deep (objects have text keys).
    max_items   the most items any list may hold (`check_fields(..., max_items=)`; None: no bound): a
                trace's bound on tokens per list (decoding/trace_checks.py).
    record      a TypedDict: its required keys must be there and its annotated keys typed; other
                keys may be any JSON value (visualizers never read them).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Union

from decoding.errors import short_repr

MAX_DEPTH = 8  # containers inside an event field (finish.extra.particles[i].answer is depth 3)
INT_LIMIT = 2**63  # integers are int64: |x| < 2**63
QUOTE_CHARS = 80  # how much of a refused value the message shows


@dataclass(frozen=True)
class Range:
    """low <= x <= high (None = unbounded); `slack` tolerates float rounding at the ends."""

    low: float | None = None
    high: float | None = None
    slack: float = 0.0

    def holds(self, x) -> bool:
        return ((self.low is None or x >= self.low - self.slack)
                and (self.high is None or x <= self.high + self.slack))

    def describe(self) -> str:
        if self.high is None:
            return f">= {self.low:g}" if self.low is not None else ""
        if self.low is None:
            return f"<= {self.high:g}"
        return f"in [{self.low:g}, {self.high:g}]"


class SchemaError(ValueError):
    """A value that does not fit its annotation: `path` (e.g. "nodes[2].token_text") and the message."""

    def __init__(self, path: str, value, allowed: str, got: str | None = None):
        self.path, self.got = path, got or short_repr(value, QUOTE_CHARS)
        super().__init__(f"`{path}` must be {allowed}, got {self.got}")


def check_fields(cls, data: dict, max_items: int | None = None) -> dict:
    """`data` checked against the dataclass `cls`: no unknown or missing fields, every value of its
    annotated type, no list longer than `max_items`. Returns `data` (values are not converted);
    SchemaError otherwise."""
    fields = dataclasses.fields(cls)
    required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing, unknown = required - data.keys(), data.keys() - {f.name for f in fields}
    if missing or unknown:
        raise ValueError(f"missing fields {short_repr(sorted(missing), QUOTE_CHARS)}, "
                         f"unknown fields {short_repr(sorted(map(str, unknown)), QUOTE_CHARS)}")
    hints = _hints(cls)
    for name, value in data.items():
        check(value, hints[name], name, max_items=max_items)
    return data


def check(value, hint, path: str, depth: int = 0, *, max_items: int | None = None):
    """`value` if it fits `hint` (and its lists hold at most `max_items`), else SchemaError naming `path`."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        try:
            check(value, base, path, depth, max_items=max_items)
        except SchemaError as err:
            if err.path != path:
                raise
            raise SchemaError(path, value, describe(hint), got=err.got) from None
        for rule in meta:
            if isinstance(rule, Range) and not rule.holds(value):
                raise SchemaError(path, value, describe(hint))
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return value
        others = [o for o in options if o is not type(None)]
        if len(others) == 1:  # X | None: a problem inside X is reported where it is
            try:
                return check(value, others[0], path, depth, max_items=max_items)
            except SchemaError as err:
                if err.path != path:
                    raise
                raise SchemaError(path, value, describe(hint)) from None
        for option in others:
            try:
                return check(value, option, path, depth, max_items=max_items)
            except SchemaError:
                continue
        raise SchemaError(path, value, describe(hint))
    if hint is typing.Any or hint is object:
        return check_json(value, path, depth, max_items=max_items)
    if hint in _SCALARS:
        if not _SCALARS[hint][0](value):
            too_big = isinstance(value, int) and not isinstance(value, bool) and hint in (int, float)
            raise SchemaError(path, value, describe(hint),
                              got=f"{short_repr(value, 40)} (beyond 64 bits)" if too_big else None)
        return value
    if hint is list or origin is list:
        if not isinstance(value, list):
            raise SchemaError(path, value, describe(hint))
        _deeper(path, depth)
        _not_longer(path, value, max_items)
        item = (typing.get_args(hint) or (typing.Any,))[0]
        fits = _scalar_test(item) or _never
        for i, x in enumerate(value):
            if not fits(x):  # lists of numbers or texts: a quick test first, the full check for a misfit
                check(x, item, f"{path}[{i}]", depth + 1, max_items=max_items)
        return value
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(path, value, describe(hint))
        return check_json(value, path, depth, max_items=max_items)
    if typing.is_typeddict(hint):
        return _check_record(value, hint, path, depth, max_items)
    raise TypeError(f"no schema rule for the annotation {hint!r} of `{path}`")  # a programming error


def check_json(value, path: str, depth: int = 0, *, max_items: int | None = None):
    """`value` if it is a JSON value nested at most MAX_DEPTH deep (lists of at most `max_items`), else
    SchemaError."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return check(value, int, path, depth)
    if isinstance(value, float):
        return check(value, float, path, depth)
    if isinstance(value, list):
        _deeper(path, depth)
        _not_longer(path, value, max_items)
        for i, x in enumerate(value):
            check_json(x, f"{path}[{i}]", depth + 1, max_items=max_items)
        return value
    if isinstance(value, dict):
        _deeper(path, depth)
        _not_longer(path, value, max_items)
        for k, x in value.items():
            if not isinstance(k, str):
                raise SchemaError(path, value, "an object with text keys")
            check_json(x, f"{path}.{k}", depth + 1, max_items=max_items)
        return value
    raise SchemaError(path, value, "a JSON value")


def describe(hint) -> str:
    """What `hint` allows, in words ("an integer >= 0", "a list of text", "a number in [0, 1]")."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        bounds = " ".join(r.describe() for r in meta if isinstance(r, Range))
        return f"{describe(base)} {bounds}".strip()
    if origin in (Union, types.UnionType):
        return " or ".join(describe(o) for o in typing.get_args(hint))
    if hint in _SCALARS:
        return _SCALARS[hint][1]
    if hint is list or origin is list:
        args = typing.get_args(hint)
        return f"a list of {_plural(describe(args[0]))}" if args else "a list of JSON values"
    if hint is dict or origin is dict:
        return f"an object of JSON values (nested at most {MAX_DEPTH} deep)"
    if typing.is_typeddict(hint):
        return f"an object with keys {', '.join(sorted(hint.__required_keys__))}"
    return str(hint)


# ---------------------------------------------------------------- internals


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and -INT_LIMIT < x < INT_LIMIT


def _is_float(x) -> bool:
    return ((isinstance(x, float) and math.isfinite(x))
            or (isinstance(x, int) and not isinstance(x, bool) and -INT_LIMIT < x < INT_LIMIT))


_SCALARS = {
    int: (_is_int, "an integer"),
    float: (_is_float, "a finite number"),
    str: (lambda x: isinstance(x, str), "text"),
    bool: (lambda x: isinstance(x, bool), "true or false"),
    type(None): (lambda x: x is None, "null"),
}


def _plural(words: str) -> str:
    for a, plural in (("an integer", "integers"), ("a finite number", "finite numbers"), ("a list", "lists"),
                      ("an object", "objects"), ("true or false", "true / false values")):
        if words.startswith(a):
            return plural + words[len(a):]
    return words


def _deeper(path: str, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise SchemaError(path, None, f"nested at most {MAX_DEPTH} containers deep", got="deeper nesting")


def _not_longer(path: str, value, max_items: int | None) -> None:
    if max_items is not None and len(value) > max_items:
        what = "a list" if isinstance(value, list) else "an object"
        raise SchemaError(path, None, f"{what} of at most {max_items} items", got=f"{len(value)} items")


def _check_record(value, hint, path: str, depth: int, max_items: int | None = None):
    if not isinstance(value, dict):
        raise SchemaError(path, value, describe(hint))
    _deeper(path, depth)
    _not_longer(path, value, max_items)
    missing = hint.__required_keys__ - value.keys()
    if missing:
        raise SchemaError(path, value, f"{describe(hint)} (missing {', '.join(sorted(missing))})")
    hints = _hints(hint)
    for key, x in value.items():
        if not isinstance(key, str):
            raise SchemaError(path, value, "an object with text keys")
        if key in hints:
            check(x, hints[key], f"{path}.{key}", depth + 1, max_items=max_items)
        else:
            check_json(x, f"{path}.{key}", depth + 1, max_items=max_items)
    return value


def _never(x) -> bool:
    return False


@functools.cache
def _scalar_test(hint):
    """A fast test for a scalar hint (int, float, str, bool, with a Range, or | None), else None.
    It never passes a value `check` refuses (it may fail some that `check` then accepts)."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        tests = [_scalar_test(a) for a in args if a is not type(None)]
        if len(tests) != 1 or tests[0] is None or type(None) not in args:
            return None
        inner = tests[0]
        return lambda x: x is None or inner(x)
    rule = Range()
    if origin is Annotated:
        hint, *meta = typing.get_args(hint)
        ranges = [r for r in meta if isinstance(r, Range)]
        if len(ranges) != len(meta) or len(ranges) > 1:
            return None
        rule = ranges[0] if ranges else rule
    lo = -math.inf if rule.low is None else rule.low - rule.slack
    hi = math.inf if rule.high is None else rule.high + rule.slack
    if hint is int:
        lo, hi = max(lo, -INT_LIMIT + 1), min(hi, INT_LIMIT - 1)
        return lambda x: type(x) is int and lo <= x <= hi
    if hint is float:
        return lambda x: (type(x) is float and math.isfinite(x) and lo <= x <= hi) or (
            type(x) is int and -INT_LIMIT < x < INT_LIMIT and lo <= x <= hi)
    if hint is str:
        return lambda x: type(x) is str
    if hint is bool:
        return lambda x: type(x) is bool
    return None


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls, include_extras=True)
