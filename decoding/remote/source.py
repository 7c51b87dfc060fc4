"""Remote model sources: `openai:<base_url>#<model>`, who may use them, the API key and the timeout.

Kept apart from the client so `decoding.models` can check a model name without importing HTTP code.

Who may reach which server: a visitor of a public app types the model name, so the app must never
make a request to a URL the visitor chose, nor hand the operator's API key to it. Two settings of
the operator decide:

    DECODING_LAB_ALLOW_REMOTE=1      the app accepts `openai:` sources at all (off by default);
    DECODING_LAB_REMOTE_ENGINES      the base URLs it may reach, comma-separated, e.g.
                                     "http://127.0.0.1:8000/v1,https://engine.example/v1".

A source whose base URL is not on the list is refused (ValueError) before any request; with the
list unset, every URL is refused and the message names the variable. `*` allows any URL: the CLI
sets it when the list is unset (its user types their own URLs and owns their key); never on a
public app. The API key (DECODING_LAB_OPENAI_API_KEY) is only sent to a URL on the list.

Glossary
    engine key   (scheme, host, port, path) of a base URL: scheme and host lower-cased, the port
                 explicit (80 / 443 by default), the path without a trailing slash. Two URLs name
                 the same engine when their keys are equal; nothing else (no prefix match).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from decoding.errors import short_repr

DEFAULT_TIMEOUT_S = 60.0  # per socket operation: connect, one read (a streamed token, a whole completion)
PREFIX = "openai:"
ALLOW_ENV = "DECODING_LAB_ALLOW_REMOTE"  # =1: the app accepts openai: sources
ENGINES_ENV = "DECODING_LAB_REMOTE_ENGINES"  # the base URLs the app may reach, comma-separated ("*": any)
ANY_ENGINE = "*"  # the engines list that allows every URL (the CLI's default)
KEY_ENV = "DECODING_LAB_OPENAI_API_KEY"  # sent as a bearer token, only to the engines on the list
TIMEOUT_ENV = "DECODING_LAB_REMOTE_TIMEOUT_S"
EXAMPLE = "openai:http://127.0.0.1:8000/v1#MODEL"
MAX_SHOWN_ENGINES = 5  # the most allowed URLs a message lists


def is_remote(name) -> bool:
    return isinstance(name, str) and name.strip().startswith(PREFIX)


def remote_allowed() -> bool:
    return os.environ.get(ALLOW_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def engine_key(url: str) -> tuple[str, str, int, str]:
    """The engine a base URL names (see the glossary); ValueError for a URL that is not http(s) with a host
    and a numeric port."""
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{short_repr(url, 120)} is not an http(s) URL with a host")
    port = parts.port  # ValueError for a bad port
    default = 443 if parts.scheme.lower() == "https" else 80
    return parts.scheme.lower(), parts.hostname.lower(), port or default, parts.path.rstrip("/")


def allowed_engines() -> list[str] | None:
    """The base URLs the operator named in DECODING_LAB_REMOTE_ENGINES ([] when unset), or None for `*`
    (any URL). ValueError naming the variable for an entry that is not a plain http(s) base URL."""
    raw = os.environ.get(ENGINES_ENV, "").strip()
    if raw == ANY_ENGINE:
        return None
    urls = [u.strip().rstrip("/") for u in raw.split(",") if u.strip()]
    for url in urls:
        parts = urlsplit(url)
        try:
            engine_key(url)
        except ValueError as err:
            raise ValueError(f"environment variable {ENGINES_ENV}: {err}; list base URLs such as "
                             f"http://127.0.0.1:8000/v1, comma-separated (or {ANY_ENGINE} for any URL)") from None
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError(f"environment variable {ENGINES_ENV}: {short_repr(url, 120)} must not carry "
                             f"credentials or a query (the key goes in {KEY_ENV})")
    return urls


def engine_allowed(base_url: str) -> bool:
    """Whether the operator lets this process reach `base_url` (and send it the API key)."""
    engines = allowed_engines()
    if engines is None:
        return True
    try:
        key = engine_key(base_url)
    except ValueError:
        return False
    return any(engine_key(url) == key for url in engines)


def parse_source(name: str, param: str = "model") -> tuple[str, str]:
    """(base_url, model) of `openai:<base_url>#<model>`; ValueError naming `param` when malformed, when the
    URL carries credentials or a query, when the operator has not enabled remote sources, or when the URL
    is not one of the engines the operator named. Makes no request."""
    if not remote_allowed():
        raise ValueError(f"`{param}`: remote engines (openai:...) are off in this app; its operator enables them "
                         f"with {ALLOW_ENV}=1")
    url, sep, model = name.strip()[len(PREFIX):].partition("#")
    parts = urlsplit(url)
    if not sep or not model.strip() or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"`{param}` {short_repr(name, 120)} is not a remote source; write it as {EXAMPLE} "
                         "(the base URL of an OpenAI-compatible server, then # and the model name it serves)")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"`{param}`: the server URL must not carry credentials or a query; the operator puts an "
                         f"API key in {KEY_ENV}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ValueError(f"`{param}`: the port in {short_repr(url, 120)} is not a number in [0, 65535]") from None
    base_url = url.rstrip("/")
    if not engine_allowed(base_url):
        raise ValueError(f"`{param}`: {short_repr(base_url, 120)} is not an engine this app may reach; "
                         f"{_engines_text()}")
    return base_url, model.strip()


def _engines_text() -> str:
    engines = allowed_engines() or []
    if not engines:
        return (f"its operator names the engines' base URLs in {ENGINES_ENV} (comma-separated, e.g. "
                "http://127.0.0.1:8000/v1), and none is named")
    shown = ", ".join(engines[:MAX_SHOWN_ENGINES]) + (", ..." if len(engines) > MAX_SHOWN_ENGINES else "")
    return f"the engines its operator named ({ENGINES_ENV}) are: {shown}"


def api_key(base_url: str) -> str:
    """The operator's API key (DECODING_LAB_OPENAI_API_KEY) for `base_url`: empty unless the URL is one of
    the engines the operator named, so the key never goes to a host a visitor chose."""
    key = os.environ.get(KEY_ENV, "").strip()
    return key if key and engine_allowed(base_url) else ""


def timeout_s() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"environment variable {TIMEOUT_ENV} must be a number of seconds, got {raw[:40]!r}") from None
    if not value > 0:
        raise ValueError(f"environment variable {TIMEOUT_ENV} must be > 0, got {value}")
    return value


def model_field_hint() -> str:
    """The model field's extra line where the operator allows remote engines (else nothing)."""
    if not remote_allowed():
        return ""
    try:
        engines = allowed_engines()
    except ValueError:
        return ""
    if engines is None:
        return f" A model on an OpenAI-compatible server: {EXAMPLE}."
    if not engines:
        return ""
    return f" A model on an OpenAI-compatible server: openai:{engines[0]}#MODEL."
