"""Decoding Lab: watch language models decode, one event at a time.

Public entry points::

    from decoding import load_model, generate, Trace
    lm = load_model("smollm2-135m")
    for event in generate(lm, "Why is the sky blue?", strategy="sample", params={"top_p": 0.9}):
        ...

See ARCHITECTURE.md: strategies are generators of typed events; a Trace collects them;
visualizers and statistics read traces, never models. Importing this package registers every
shipped method: it imports every module of each family package (`discover`), and each module
registers its own methods and plug-ins. Then the packages named in `DECODING_LAB_PLUGINS` (comma-
separated importable names; set by whoever runs the app or the CLI) are discovered the same way: a
project's own methods and plug-ins, outside this repository (`load_plugins`).
"""

import importlib
import os
import pkgutil
import sys

from decoding.env import configure_offline_env

configure_offline_env()

from decoding.events import Trace
from decoding.models import load_model
from decoding.run import generate, run_to_trace

FAMILY_PACKAGES = ("token", "speculative", "scaling", "diffusion", "longctx", "speech")  # the shipped families, in menu order


def discover(package_name: str) -> None:
    """Import every module of a family package, so each registers what it defines (`decoding.registry`).

    Registration order is menu order (`python -m decoding list`, the tabs' menus). The modules a
    package names in its `MENU_ORDER` tuple come first, in that order; every other module follows,
    alphabetically. A new module in a family package is therefore the only edit a new method needs:
    it is found here and listed after the named ones (name it in `MENU_ORDER` only to move it up).
    A module started with `python -m` (a family module's command line, e.g.
    `decoding.scaling.math_tasks`) is left to runpy, which would warn about it imported first.
    """
    package = importlib.import_module(package_name)
    first = tuple(getattr(package, "MENU_ORDER", ()))
    found = sorted(info.name for info in pkgutil.iter_modules(package.__path__))
    missing = [name for name in first if name not in found]
    if missing:
        raise ImportError(f"{package_name}.MENU_ORDER names {', '.join(missing)}, which the package does not have")
    for name in first + tuple(name for name in found if name not in first):
        if f"{package_name}.{name}" != _started_with_dash_m():
            importlib.import_module(f"{package_name}.{name}")


def _started_with_dash_m() -> str:
    """The module `python -m NAME` is about to run, else "". While runpy imports NAME's packages,
    sys.argv is ["-m", *NAME's arguments] and the interpreter's own argv ends with NAME and them."""
    if sys.argv[:1] != ["-m"] or len(sys.orig_argv) <= len(sys.argv):
        return ""
    name = sys.orig_argv[-len(sys.argv)]
    return name.removeprefix("-m")


PLUGINS_ENV = "DECODING_LAB_PLUGINS"  # packages (or modules) of methods and plug-ins from outside, comma-separated


def load_plugins() -> list[str]:
    """Import the packages (each of their modules, as `discover` does) or modules named in `DECODING_LAB_PLUGINS`,
    so what they register joins the shipped methods everywhere (list, run, the API, the tabs). Returns the
    names imported; a name that does not import is an ImportError saying which and why."""
    names = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            raise ImportError(f"{PLUGINS_ENV} names {name!r}, which does not import: {error}") from error
        if hasattr(module, "__path__"):
            discover(name)
    return names


for _family in FAMILY_PACKAGES:
    discover(f"decoding.{_family}")
del _family
load_plugins()

__all__ = ["Trace", "generate", "load_model", "load_plugins", "run_to_trace"]
