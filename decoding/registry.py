"""One place per method: strategies and plug-ins register themselves where they are written.

    @register_strategy("greedy", params=GreedyParams, help="always the most probable token")
    def greedy(ctx, params, outcome): ...

The CLI (`list`, `run --set`), the `/generate` API, the presets and the tabs' method menus and
parameter widgets are all generated from `STRATEGIES` and the parameter dataclasses' specs
(`decoding.params`). Plug-ins inside a method (speculative drafters, diffusion samplers,
scaling rewards) live in a `Registry` of their own; its names are the choices of the method's
parameter (`drafter`, `sampler`, `reward`).

Each registration declares the papers it follows where it is written (`papers=`, `decoding.papers`):
`python -m decoding papers` lists them.

A registration that misses a piece (no help, a parameter without range or help, an unknown
family) fails at import with a sentence saying what is missing.

Glossary
    family   which lab shows a strategy: token (Playground), beam (Playground), speculative,
             scaling, diffusion, longctx (Long context). A family may register a `check` hook run before a strategy of
             that family starts (model kind, context length, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field, is_dataclass
from typing import Callable, Generic, TypeVar

from decoding.papers import Declaration, check_declaration
from decoding.params import NoParams, Params, describe, selector_of, specs

FAMILIES = ("token", "beam", "speculative", "scaling", "diffusion", "longctx")


@dataclass(frozen=True)
class StrategyInfo:
    name: str  # CLI / UI name
    fn: Callable  # the generator function fn(ctx, params, outcome) -> events
    params_cls: type  # frozen dataclass of its parameters (fields declared with decoding.params.param)
    help: str  # one line for `list` and the UI
    family: str = "token"  # which lab / view shows it
    uses_seed: bool = False  # whether the seed changes the result
    papers: Declaration = None  # its papers (decoding.papers): a tuple of Paper, Uncited(reason), None = undeclared
    models: tuple[str, ...] = ()  # the models it runs on (trained for it), the first the one a tab picks; () = any
    batched: bool = False  # its model calls are one new position over a one-row cache (a prefill aside): the app's
    #                        visitors' runs of it share the model's steps (decoding.batching)


STRATEGIES: dict[str, StrategyInfo] = {}
FAMILY_CHECKS: dict[str, Callable] = {}  # family -> check(lm, config, prompt_ids, max_new_tokens, prefix_ids)


def register_strategy(name: str, *, params: type, help: str, family: str = "token", uses_seed: bool = False,
                      replace: bool = False, papers: Declaration = None, models: tuple[str, ...] = (),
                      batched: bool = False) -> Callable:
    """Decorator registering a strategy function under `name` (see the module docstring)."""

    def decorate(fn: Callable) -> Callable:
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"a strategy name must be a non-empty string, got {name!r}")
        where = f"strategy {name!r} ({getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')})"
        if name in STRATEGIES and not replace:
            raise TypeError(f"{where}: the name is already registered by {STRATEGIES[name].fn.__module__}")
        if family not in FAMILIES:
            raise TypeError(f"{where}: family must be one of {', '.join(FAMILIES)}, got {family!r}")
        if not help or not help.strip():
            raise TypeError(f"{where}: give help='one line saying what it does'")
        if not (isinstance(params, type) and is_dataclass(params)):
            raise TypeError(f"{where}: params must be a dataclass of its parameters, got {params!r}")
        try:
            specs(params)  # every field declared with param(...): type, range or choices, help
            selector_of(params)  # a plug-in selector comes with its `own` field
        except TypeError as error:
            raise TypeError(f"{where}: {error}") from None
        declared = check_declaration(papers, where)
        if not isinstance(models, tuple) or not all(isinstance(m, str) and m for m in models):
            raise TypeError(f"{where}: models must be a tuple of model names, got {models!r}")
        if not isinstance(batched, bool):
            raise TypeError(f"{where}: batched must be True or False, got {batched!r}")
        STRATEGIES[name] = StrategyInfo(name, fn, params, help, family, uses_seed, declared, models, batched)
        return fn

    return decorate


def unregister_strategy(name: str) -> None:
    """Remove a registration (tests that register throw-away methods)."""
    STRATEGIES.pop(name, None)


def family_check(*families: str) -> Callable:
    """Decorator registering the check these families run before any of their strategies starts."""
    unknown = [f for f in families if f not in FAMILIES]
    if not families or unknown:
        raise TypeError(f"family_check needs families among {', '.join(FAMILIES)}, got {families!r}")

    def decorate(fn: Callable) -> Callable:
        for family in families:
            FAMILY_CHECKS[family] = fn
        return fn

    return decorate


def get_strategy(name: str) -> StrategyInfo:
    if not isinstance(name, str) or name not in STRATEGIES:
        from decoding.errors import short_repr

        raise ValueError(f"unknown strategy {short_repr(name, 80)}; choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def param_specs(strategy: str) -> list[dict]:
    """[{name, type, default, range, help, choices, low, high}] for the strategy's parameters, in field order."""
    return describe(get_strategy(strategy).params_cls)


def strategies_of(*families: str) -> list[str]:
    """Names of the registered strategies of these families, in registration order."""
    return [name for name, info in STRATEGIES.items() if info.family in families]


T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    item: T  # the plug-in: a class or a factory
    help: str
    params_cls: type = NoParams  # its own parameters: a Params dataclass (namespaced "<name>.<field>" outside)
    capabilities: dict = field(default_factory=dict)  # what the family asks of it, with the registry's defaults
    papers: Declaration = None  # its papers (decoding.papers), not a capability; None = undeclared


class Registry(Generic[T]):
    """Named plug-ins of one kind (drafters, diffusion samplers, rewards), in registration order.

    A plug-in declares its own parameters (`params=`, a frozen `Params` dataclass whose fields are declared
    with `param(...)`) and its capabilities (keyword arguments among the registry's `capabilities`, e.g. a
    drafter's `default_draft_length`); the family reads them from here, never from a side table.

        @DRAFTERS.register("prompt-lookup", help="...", params=PromptLookupParams, default_draft_length=10)
        def _prompt_lookup(lm, params): return PromptLookupDrafter(params.own.ngram)
    """

    def __init__(self, kind: str, capabilities: dict | None = None):
        self.kind = kind  # e.g. "drafter": names the parameter whose choices these are
        self.defaults = dict(capabilities or {})  # capability -> its value for a plug-in that does not say
        self.entries: dict[str, Entry[T]] = {}

    def register(self, name: str, *, help: str, params: type = NoParams, replace: bool = False,
                 papers: Declaration = None, **capabilities) -> Callable[[T], T]:
        def decorate(item: T) -> T:
            if not isinstance(name, str) or not name.strip() or "." in name:
                raise TypeError(f"a {self.kind} name must be a non-empty string without '.', got {name!r}")
            if name in self.entries and not replace:
                raise TypeError(f"{self.kind} {name!r} is already registered")
            if not help or not help.strip():
                raise TypeError(f"{self.kind} {name!r}: give help='one line saying what it does'")
            if not (isinstance(params, type) and is_dataclass(params) and issubclass(params, Params)):
                raise TypeError(f"{self.kind} {name!r}: params must be a Params dataclass of its own knobs, got {params!r}")
            try:
                specs(params)
            except TypeError as error:
                raise TypeError(f"{self.kind} {name!r}: {error}") from None
            unknown = sorted(set(capabilities) - set(self.defaults))
            if unknown:
                raise TypeError(f"{self.kind} {name!r}: unknown capability {', '.join(unknown)}; "
                                f"a {self.kind} may declare {', '.join(self.defaults) or 'none'}")
            declared = check_declaration(papers, f"{self.kind} {name!r}")
            self.entries[name] = Entry(name, item, help, params, self.defaults | capabilities, declared)
            return item

        return decorate

    def unregister(self, name: str) -> None:
        self.entries.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self.entries)

    def entry(self, name: str) -> Entry[T]:
        if name not in self.entries:
            raise ValueError(f"`{self.kind}` must be one of {', '.join(self.entries)}, got {name!r}")
        return self.entries[name]

    def get(self, name: str) -> T:
        return self.entry(name).item

    def params_of(self, name: str) -> type:
        """The plug-in's own parameter dataclass."""
        return self.entry(name).params_cls

    def capability(self, name: str, key: str):
        """What plug-in `name` declared for `key`, or the registry's default."""
        return self.entry(name).capabilities[key]

    def with_capability(self, key: str, value=True) -> tuple[str, ...]:
        """Names of the plug-ins whose `key` is `value`."""
        return tuple(n for n, e in self.entries.items() if e.capabilities[key] == value)

    def __contains__(self, name) -> bool:
        return name in self.entries
