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
import functools
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
    off_means: str = "off"  # what `off` means, as error messages say it (e.g. "the drafter's default")
    plugins: object = None  # a `decoding.registry.Registry`: this field picks one of its plug-ins (its choices)
    label: str | None = None  # UI hint: the widget's label (default: the name, spaces for underscores)
    step: float | None = None  # UI hint: a slider's step
    ui_high: float | None = None  # UI hint: where a slider stops (the range goes further: typed values are kept)

    def allowed_choices(self) -> tuple | None:
        if self.plugins is not None:
            return self.plugins.names()
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
            allowed = f"{_fmt(self.off)} ({self.off_means}) or {allowed}"
        in_range = ok_type and (self.low <= value if self.low_inclusive else self.low < value) and (
            value <= self.high if self.high_inclusive else value < self.high)  # NaN fails both
        if not in_range:
            raise ValueError(f"`{name}` must be {allowed}, got {short_repr(value)}")


def param(default, *, help: str, low: float = -math.inf, high: float = math.inf, low_inclusive: bool = True,
          high_inclusive: bool = True, choices=None, note: str | None = None, off=None,
          off_means: str = "off", plugins=None, label: str | None = None, step: float | None = None,
          ui_high: float | None = None) -> dataclasses.Field:
    """A dataclass field carrying its ParamSpec (type and name are filled in from the annotation).

    `plugins=REGISTRY` makes the field a plug-in selector: its choices are the registry's names, and the
    chosen plug-in's own parameters (its `params` dataclass) travel with it, namespaced
    `"<plug-in>.<field>"` (see `Params` and `from_values`).

    `label`, `step` and `ui_high` are hints for the widget a tab generates (`ui.widgets.spec_widget`); they
    change nothing the engine accepts."""
    spec = dict(default=default, help=help, low=low, high=high, low_inclusive=low_inclusive,
                high_inclusive=high_inclusive, choices=choices, note=note, off=off, off_means=off_means, plugins=plugins,
                label=label, step=step, ui_high=ui_high)
    return dataclasses.field(default=default, metadata={"param": spec})


def own_params() -> dataclasses.Field:
    """The field that holds the chosen plug-in's parameters (an instance of its `params` dataclass) in a
    family dataclass with a `param(..., plugins=...)` selector. Declare it as `own: Params | None = own_params()`;
    `Params.__post_init__` fills it (the plug-in's defaults, or a dict of its values) and checks it."""
    return dataclasses.field(default=None, metadata={"own": True})


def specs(cls) -> list[ParamSpec]:
    """The ParamSpec of every field of a parameter dataclass, in field order.

    Raises TypeError naming the class and field when a field was not declared with `param(...)`
    or lacks help, a range, choices or a note (the check the registry runs at import). Read once per
    class (`_specs`): resolving the type hints took a fifth of a short run's time when every params
    object did it again.
    """
    return list(_specs(cls))


@functools.cache
def _specs(cls) -> tuple[ParamSpec, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("own"):
            continue  # the chosen plug-in's parameters: described by the plug-in's own dataclass
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
    return tuple(out)


def check_fields(obj) -> None:
    """Validate every field of a parameter dataclass instance against its spec."""
    for spec in specs(type(obj)):
        spec.check(getattr(obj, spec.name))  # free-form text: its type and length (its content: the class)


class Params:
    """Base of frozen parameter dataclasses: every field is checked against its spec on creation.

    A family dataclass whose selector field is declared `param(..., plugins=REGISTRY)` also declares
    `own: Params | None = own_params()`; on creation `own` becomes the chosen plug-in's parameters (its
    declared defaults, or built from a dict of its values), and the plug-in's cross-checks against the
    family's fields run (`check_with(family)` on the plug-in's dataclass, when it defines one). So a
    drafter, sampler or reward owns its knobs: two plug-ins' fields of one name never meet.

    Subclasses with cross-field rules override `__post_init__` and call `super().__post_init__()`.
    """

    def __post_init__(self):
        check_fields(self)
        selector = selector_of(type(self))
        if selector is None:
            return
        chosen = getattr(self, selector.name)
        own_cls = selector.plugins.params_of(chosen)
        own = getattr(self, "own", None)
        if own is None:
            own = own_cls()
        elif isinstance(own, dict):
            own = from_values(own_cls, own, where=f"{selector.name} {chosen}", prefix=f"{chosen}.")
        elif type(own) is not own_cls:
            raise ValueError(f"`own` must be the parameters of {selector.name} {chosen} ({own_cls.__name__}), "
                             f"got {type(own).__name__}")
        object.__setattr__(self, "own", own)
        check_with = getattr(own, "check_with", None)
        if check_with is not None:
            check_with(self)


@dataclass(frozen=True)
class NoParams(Params):
    """The parameters of a plug-in that has none."""


def selector_of(cls) -> ParamSpec | None:
    """The spec of `cls`'s plug-in selector field (declared with `plugins=`), or None. A class has at most one,
    and has it exactly when it declares the `own` field (checked: TypeError naming the class)."""
    selectors = [s for s in specs(cls) if s.plugins is not None]
    has_own = any(f.metadata.get("own") for f in dataclasses.fields(cls))
    if len(selectors) > 1 or bool(selectors) != has_own:
        raise TypeError(f"{cls.__name__}: a parameter dataclass has at most one plug-in selector (param(..., plugins=)), "
                        f"and has it exactly when it declares `own: Params | None = own_params()`")
    return selectors[0] if selectors else None


def flat(params) -> dict:
    """The parameters as one flat dict (what `RunStarted.params` records, what `from_values` reads): the family's
    fields, then the chosen plug-in's as `"<plug-in>.<field>"`, all effective values."""
    out = {s.name: getattr(params, s.name) for s in specs(type(params))}
    selector = selector_of(type(params))
    if selector is not None:
        chosen = out[selector.name]
        out |= {f"{chosen}.{s.name}": getattr(params.own, s.name) for s in specs(type(params.own))}
    return out


def from_values(cls, values: dict | None, *, where: str = "", prefix: str = "", lenient: bool = False):
    """An instance of the parameter dataclass `cls` from a dict; strings (CLI `--set`) are converted.

    With a plug-in selector, the chosen plug-in's parameters come as `"<plug-in>.<field>"` (or, when the
    family has no field of that name, as the plain `<field>`, the older flat form of traces and presets).
    Values for a plug-in not chosen are checked against that plug-in's specs and left out. A plain name that
    only another plug-in declares is an error naming its owner, or with `lenient` (reading a trace recorded
    before plug-ins owned their knobs, which recorded every plug-in's flat) left out.
    Unknown names and bad values raise ValueError naming the parameter and what is allowed."""
    values = dict(values or {})
    fields = {s.name: s for s in specs(cls)}
    selector = selector_of(cls)
    own: dict = {}
    if selector is not None:
        chosen = values.get(selector.name, selector.default)
        selector.check(chosen)
        registry = selector.plugins
        for key in list(values):
            if not isinstance(key, str):
                continue
            name, dot, field = key.partition(".")
            if dot and name in registry:
                part = values.pop(key)
                if name == chosen:
                    own[field] = part
                else:  # another plug-in's knob: must be right (its spec), is not used
                    other = {s.name: s for s in specs(registry.params_of(name))}
                    if field not in other:
                        raise ValueError(f"unknown parameter {short_repr(key, 80)}: {selector.name} {name} has "
                                         f"{', '.join(f'{name}.{n}' for n in other) or 'no parameters'}")
                    other[field].check(convert(key, part, other[field].type), key)
            elif not dot and key not in fields:
                if key in {s.name for s in specs(registry.params_of(chosen))}:
                    own.setdefault(key, values.pop(key))
                else:
                    owners = [n for n in registry.names() if key in {s.name for s in specs(registry.params_of(n))}]
                    if owners and lenient:
                        values.pop(key)  # another plug-in's knob, in the older flat form (a trace recorded them all)
                    elif owners:
                        raise ValueError(f"`{key}` is a parameter of {selector.name} {' and '.join(owners)} "
                                         f"({', '.join(f'{n}.{key}' for n in owners)}), not of the chosen "
                                         f"{selector.name} {chosen}")
    unknown = sorted(set(values) - set(fields), key=str)
    if unknown:
        allowed = [prefix + name for name in fields]
        if selector is not None:
            allowed += [f"{chosen}.{s.name}" for s in specs(registry.params_of(chosen))]
        names = ", ".join(short_repr(name, 80) for name in unknown[:5]) + (", …" if len(unknown) > 5 else "")
        raise ValueError(f"unknown parameter(s) {names} for {where or cls.__name__}; allowed: {', '.join(allowed) or 'none'}")
    converted = {name: convert(prefix + name, value, fields[name].type) for name, value in values.items()}
    if selector is not None:
        converted["own"] = own
    try:
        return cls(**converted)
    except ValueError as error:
        if prefix and str(error).startswith("`"):  # name the namespaced key the caller wrote
            raise ValueError("`" + prefix + str(error)[1:]) from None
        raise


def convert(name: str, value, kind):
    """`value` as a `kind` (int, float, bool, str): the CLI's strings and JSON's 1.0 for an int are accepted."""
    if kind is bool:
        if isinstance(value, str):
            if value.lower() in {"1", "true", "yes", "on"}:
                return True
            if value.lower() in {"0", "false", "no", "off"}:
                return False
            raise ValueError(f"`{name}` must be true or false, got {short_repr(value)}")
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return bool(value)
        raise ValueError(f"`{name}` must be true or false, got {short_repr(value)}")  # not [1] or {"a": 1}
    try:
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value) if not isinstance(value, str) else int(value.strip())
        if kind is float:
            return float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: float(10**400)
        raise ValueError(f"`{name}` must be {'an integer' if kind is int else 'a number'}, got {short_repr(value)}") from None
    return value


def describe(cls) -> list[dict]:
    """Rows for `list`, the API and the UI widgets: name, type, default, range (as text), help, and the
    structured allowed values: choices, and for a plain numeric interval (no note, no "off" value)
    low / high with their inclusiveness. With a plug-in selector, every registered plug-in's own
    parameters follow, named `"<plug-in>.<field>"`, with `plugin` (its name) and `selector` (the field
    that picks it); the family's rows have `plugin` None."""
    rows = []
    for s in specs(cls):
        choices = s.allowed_choices()
        rows.append({"name": s.name, "type": s.type.__name__, "default": s.default, "range": s.range_text(),
                     "help": s.help, "choices": list(choices) if choices is not None else None,
                     "interval": s.type in (int, float) and s.note is None and s.off is None,
                     "low": s.low, "high": s.high, "low_inclusive": s.low_inclusive, "high_inclusive": s.high_inclusive,
                     "plugin": None, "selector": None, "label": s.label, "step": s.step, "ui_high": s.ui_high})
    selector = selector_of(cls)
    if selector is not None:
        for name in selector.plugins.names():
            for row in describe(selector.plugins.params_of(name)):
                rows.append(row | {"name": f"{name}.{row['name']}", "plugin": name, "selector": selector.name})
    return rows
