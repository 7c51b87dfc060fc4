"""Remote model sources: `openai:<base_url>#<model>`, who may use them, the API key and the timeout.

Kept apart from the client so `decoding.models` can check a model name without importing HTTP code.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from decoding.errors import short_repr

DEFAULT_TIMEOUT_S = 60.0  # per socket operation: connect, one read (a streamed token, a whole completion)
PREFIX = "openai:"
ALLOW_ENV = "DECODING_LAB_ALLOW_REMOTE"  # =1: the app accepts openai: sources
KEY_ENVS = ("DECODING_LAB_OPENAI_API_KEY", "OPENAI_API_KEY")  # the first one set is sent as a bearer token
TIMEOUT_ENV = "DECODING_LAB_REMOTE_TIMEOUT_S"
EXAMPLE = "openai:http://127.0.0.1:8000/v1#MODEL"


def is_remote(name) -> bool:
    return isinstance(name, str) and name.strip().startswith(PREFIX)


def remote_allowed() -> bool:
    return os.environ.get(ALLOW_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def parse_source(name: str, param: str = "model") -> tuple[str, str]:
    """(base_url, model) of `openai:<base_url>#<model>`; ValueError naming `param` when malformed, when the
    URL carries credentials or a query, or when the operator has not enabled remote sources."""
    if not remote_allowed():
        raise ValueError(f"`{param}`: remote engines (openai:...) are off in this app; its operator enables them "
                         f"with {ALLOW_ENV}=1")
    url, sep, model = name.strip()[len(PREFIX):].partition("#")
    parts = urlsplit(url)
    if not sep or not model.strip() or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"`{param}` {short_repr(name, 120)} is not a remote source; write it as {EXAMPLE} "
                         "(the base URL of an OpenAI-compatible server, then # and the model name it serves)")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"`{param}`: the server URL must not carry credentials or a query; put an API key in "
                         f"{KEY_ENVS[0]}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ValueError(f"`{param}`: the port in {short_repr(url, 120)} is not a number in [0, 65535]") from None
    return url.rstrip("/"), model.strip()


def api_key() -> str:
    return next((os.environ[k].strip() for k in KEY_ENVS if os.environ.get(k, "").strip()), "")


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
    return f" A model on an OpenAI-compatible server: {EXAMPLE}." if remote_allowed() else ""
