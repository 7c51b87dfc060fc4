"""Helpers for error messages that quote what they were given, without quoting too much.

An error message names the bad value, but the value may be hostile or huge: a 10 MB string, a
list nested 10^5 deep, a YAML alias expanded into millions of items. `short_repr` quotes a
bounded prefix of it, in time that does not depend on its size. `ModelLoadError` is the error of a
model that cannot be loaded (here, so that the loaders and the remote client share it without a circle);
`MissingDependency` that of a system program or library that is not installed (sox, espeak-ng).
"""

from __future__ import annotations

import reprlib

QUOTE_CHARS = 200  # the most an error message quotes of one value


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says why and what to do."""


class MissingDependency(RuntimeError):
    """A program or library a feature needs is not installed here; the message names it and the command that
    installs it (the app shows it in the page, as it shows a bad input)."""


_repr = reprlib.Repr()
_repr.maxlevel = 3  # nested containers below this show as [...] / {...}
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxdict = 8
_repr.maxstring = _repr.maxother = QUOTE_CHARS + 20
_repr.maxlong = 60


def short_repr(value, limit: int = QUOTE_CHARS) -> str:
    """repr(value) cut to about `limit` characters (ending in "…" when cut); never walks all of it."""
    try:
        text = _repr.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"
