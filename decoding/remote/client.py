"""A small client for OpenAI-compatible completion servers (vLLM, TGI, SGLang, llama.cpp's server).

Only what the labs need: the model list, one completion, and a streamed completion read as
server-sent events (SSE), each with per-token log-probabilities. Plain `http.client`, so the app
needs no HTTP library; every request has a timeout.

Every failure a user can act on becomes a `RemoteError` whose message says what happened and what
to do: the server is unreachable, the model name is not served, the server sent no
log-probabilities, a rate limit (HTTP 429), a timeout. The API key is sent as a bearer token and
never appears in a message. What a server says reaches a message only as `excerpt(...)`: at most
EXCERPT_CHARS characters, quoted with Python's escapes (no raw newline or control character), so a
server cannot hand the user a page of text. (Which servers are reached at all, and which get the
key, is `decoding.remote.source`'s allow-list.)

Glossary
    base URL   where the OpenAI routes live, e.g. http://127.0.0.1:8000/v1 (`/completions`, `/models`).
    SSE        `data: {json}` lines, one chunk per generated token (or a few), ending with `data: [DONE]`.
    choice     one completion of a request; `n` > 1 asks for several in one request.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Iterator
from urllib.parse import urlsplit

from decoding.errors import ModelLoadError, short_repr
from decoding.remote.source import DEFAULT_TIMEOUT_S, KEY_ENV, TIMEOUT_ENV

EXCERPT_CHARS = 120  # the most of a server's own text (an error message, a header) quoted to the user
MAX_SHOWN_MODELS = 8  # the most served model names a message lists


class RemoteError(ModelLoadError):
    """A remote engine failed in a way the user can act on; the message says how."""


class Client:
    """One OpenAI-compatible server: `models()`, `complete(body)`, `stream(body)`."""

    def __init__(self, base_url: str, api_key: str = "", timeout_s: float = DEFAULT_TIMEOUT_S):
        parts = urlsplit(base_url)
        self.base_url = base_url.rstrip("/")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname or "", parts.port
        self.path = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s

    # ------------------------------------------------------------------ requests
    def models(self) -> dict[str, dict]:
        """The models the server serves (GET /models): {id: its entry (owned_by, ...)}."""
        data = self._json(*self._request("GET", "/models"))
        return {str(m.get("id")): m for m in data.get("data", []) if isinstance(m, dict)}

    def complete(self, body: dict) -> dict:
        """One non-streamed completion (POST /completions)."""
        return self._json(*self._request("POST", "/completions", body))

    def stream(self, body: dict) -> Iterator[dict]:
        """The chunks of a streamed completion, as the server sends them. Closing the generator (Stop)
        closes the connection, which is how the OpenAI API cancels a generation on the server."""
        connection, response = self._request("POST", "/completions", body | {"stream": True})
        try:
            if response.status != 200:
                self._json(connection, response)  # raises with the server's message
            for line in self._lines(response):
                if not line.startswith("data:"):
                    continue  # comments, event names, keep-alives
                payload = line[5:].strip()
                if payload == "[DONE]":
                    return
                yield self._parse(payload)
        finally:
            connection.close()

    # ------------------------------------------------------------------ plumbing
    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout_s)

    def _request(self, method: str, route: str, body: dict | None = None):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        connection = self._connection()
        try:
            connection.request(method, self.path + route, body=None if body is None else json.dumps(body),
                               headers=headers)
            return connection, connection.getresponse()
        except (socket.timeout, TimeoutError):
            connection.close()
            raise RemoteError(f"the server at {self.base_url} did not answer within {self.timeout_s:g} s; "
                              "it may be overloaded or still loading the model: try again, or raise the timeout "
                              f"({TIMEOUT_ENV})") from None
        except OSError as err:
            connection.close()
            raise RemoteError(f"cannot reach the server at {self.base_url} ({err.strerror or err}); is it running, "
                              "and is the URL right (scheme, host, port, and the /v1 path)?") from None

    def _json(self, connection, response) -> dict:
        try:
            raw = self._read(response)
        finally:
            connection.close()
        if response.status == 429:
            retry = (response.getheader("Retry-After") or "").strip()
            retry = retry if retry.isdigit() and len(retry) <= 6 else ""  # seconds; anything else is not quoted
            raise RemoteError(f"the server at {self.base_url} is rate-limiting requests (HTTP 429)"
                              f"{f'; it asks to retry after {retry} s' if retry else ''}; wait, lower n, or ask "
                              "its operator for a higher limit")
        if response.status in (401, 403):
            raise RemoteError(f"the server at {self.base_url} refused the API key (HTTP {response.status}); its "
                              f"operator sets {KEY_ENV} to a valid key")
        if response.status != 200:
            raise RemoteError(f"the server at {self.base_url} answered HTTP {response.status}: {_message(raw)}")
        return self._parse(raw)

    def _read(self, response) -> str:
        try:
            return response.read().decode("utf-8", errors="replace")
        except (socket.timeout, TimeoutError):
            raise RemoteError(f"the server at {self.base_url} stopped answering for {self.timeout_s:g} s "
                              "mid-response") from None

    def _lines(self, response) -> Iterator[str]:
        while True:
            try:
                line = response.readline()
            except (socket.timeout, TimeoutError):
                raise RemoteError(f"the server at {self.base_url} sent no token for {self.timeout_s:g} s; the "
                                  "stream was closed") from None
            if not line:
                return
            yield line.decode("utf-8", errors="replace").rstrip("\r\n")

    def _parse(self, raw: str) -> dict:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            raise RemoteError(f"the server at {self.base_url} did not answer JSON ({excerpt(raw)}); is this an "
                              "OpenAI-compatible base URL (it usually ends in /v1)?") from None
        if not isinstance(data, dict):
            raise RemoteError(f"the server at {self.base_url} answered {excerpt(raw)}, not a JSON object")
        if "error" in data and "choices" not in data:
            raise RemoteError(f"the server at {self.base_url} reported an error: {_message(raw)}")
        return data


def excerpt(text, limit: int = EXCERPT_CHARS) -> str:
    """A server's text as a message may quote it: at most `limit` characters, in quotes, newlines and control
    characters escaped (repr), whatever its length."""
    return short_repr(str(text)[: limit * 4].strip(), limit)


def served_text(names) -> str:
    """The model names a server lists, as a message shows them: at most MAX_SHOWN_MODELS, each short."""
    names = list(names)
    shown = ", ".join(excerpt(n, 60) for n in names[:MAX_SHOWN_MODELS])
    more = f" and {len(names) - MAX_SHOWN_MODELS} more" if len(names) > MAX_SHOWN_MODELS else ""
    return (shown + more) or "no model"


def _message(raw: str) -> str:
    """The server's own error message, as a short escaped excerpt."""
    try:
        data = json.loads(raw[: EXCERPT_CHARS * 64])  # a longer body is no message: quote its start
        error = data.get("error", data.get("detail", data)) if isinstance(data, dict) else data
        text = error.get("message", error) if isinstance(error, dict) else error
    except (json.JSONDecodeError, RecursionError):
        text = raw
    text = str(text)[: EXCERPT_CHARS * 4].strip()
    return excerpt(text) if text else "(empty body)"
