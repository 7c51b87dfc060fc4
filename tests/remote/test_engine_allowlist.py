"""The operator's engines list (DECODING_LAB_REMOTE_ENGINES): a visitor's `openai:` URL that is not on it
gets no request at all, the API key goes only to the listed engines, and what a listed engine answers
reaches the user only as a short escaped excerpt.

Each test runs a real HTTP listener on loopback (`http.server` in a thread) that records every request
and its Authorization header, and asks through `decoding.run.generate` (what the app's tabs and API
call) or the CLI.
"""

import http.server
import json
import threading
from contextlib import contextmanager

import pytest

from decoding.remote.client import EXCERPT_CHARS, RemoteError
from decoding.remote.lm import RemoteLM
from decoding.remote.source import ALLOW_ENV, ENGINES_ENV, KEY_ENV, engine_key
from decoding.run import generate

KEY = "sk-operator-secret"
HOSTILE = "<script>alert(1)</script>\n" * 400  # 10 KB of what a host would like a visitor to see


class _Listener(http.server.BaseHTTPRequestHandler):
    """Records (method, path, Authorization) of every request; lists model "m" (and `extra_models`);
    answers every completion with HTTP 500 and `error_body`."""

    requests: list = []
    extra_models: list = []
    error_body = json.dumps({"error": {"message": HOSTILE}})

    def do_GET(self):
        self.requests.append(("GET", self.path, self.headers.get("Authorization")))
        models = [{"id": "m", "owned_by": "listener"}] + [{"id": n} for n in self.extra_models]
        self._send(200, json.dumps({"object": "list", "data": models}))

    def do_POST(self):
        self.requests.append(("POST", self.path, self.headers.get("Authorization")))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(500, self.error_body)

    def _send(self, status, body: str):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def listener(**behaviour):
    """(base URL http://127.0.0.1:PORT/v1, the list of requests it receives)."""
    handler = type("Handler", (_Listener,), {"requests": []} | behaviour)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler.requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def operator(monkeypatch):
    """An app whose operator allows remote engines and set an API key (the engines list: per test)."""
    monkeypatch.setenv(ALLOW_ENV, "1")
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.delenv(ENGINES_ENV, raising=False)
    return monkeypatch


def test_with_no_engine_listed_a_visitors_url_gets_no_request(operator):
    with listener() as (url, requests):
        with pytest.raises(ValueError, match=f"`model`: .* is not an engine this app may reach; .*{ENGINES_ENV}"):
            list(generate(f"openai:{url}#x", "hi", max_new_tokens=2))
    assert requests == []  # before: GET /v1/models with "Bearer sk-operator-secret"


@pytest.mark.parametrize("variant", [
    "{url}2",  # another path on the listed host
    "{root}/",  # the host's root
    "{url}/x",  # below the listed path (no prefix match)
    "{local}/v1",  # the same listener named differently (localhost resolves to it)
])
def test_a_url_not_on_the_list_gets_no_request(operator, variant):
    with listener() as (url, requests), listener() as (other, other_requests):
        operator.setenv(ENGINES_ENV, other)
        root = url.removesuffix("/v1")
        visitor = variant.format(url=url, root=root, local=root.replace("127.0.0.1", "localhost"))
        with pytest.raises(ValueError, match=f"is not an engine this app may reach; the engines its operator named "
                                             f"\\({ENGINES_ENV}\\) are: {other}"):
            list(generate(f"openai:{visitor}#m", "hi", max_new_tokens=2))
        operator.setenv(ENGINES_ENV, url)  # the listener's own /v1 listed: still not these
        with pytest.raises(ValueError, match="is not an engine this app may reach"):
            RemoteLM(f"openai:{visitor}#m")
    assert requests == [] and other_requests == []


def test_a_listed_engine_gets_the_key(operator):
    with listener() as (url, requests):
        operator.setenv(ENGINES_ENV, f" http://example.invalid/v1 , {url}/ ")  # spaces, a trailing slash
        with pytest.raises(RemoteError, match="answered HTTP 500"):
            list(generate(f"openai:{url}#m", "hi", max_new_tokens=2))
    assert [r[:2] for r in requests] == [("GET", "/v1/models"), ("POST", "/v1/completions")]
    assert {r[2] for r in requests} == {f"Bearer {KEY}"}


def test_engine_keys_compare_scheme_host_port_and_path():
    assert engine_key("HTTP://Engine.Example/v1/") == engine_key("http://engine.example:80/v1")
    assert engine_key("https://engine.example/v1") == engine_key("https://engine.example:443/v1")
    assert engine_key("http://engine.example/v1") != engine_key("https://engine.example/v1")
    assert engine_key("http://engine.example/v1") != engine_key("http://engine.example/V1")


def test_only_the_apps_own_key_variable_is_sent(operator):
    """OPENAI_API_KEY may be set on the machine for something else: it is never sent."""
    operator.delenv(KEY_ENV)
    operator.setenv("OPENAI_API_KEY", "sk-other-service")
    with listener() as (url, requests):
        operator.setenv(ENGINES_ENV, url)
        RemoteLM(f"openai:{url}#m")
    assert requests == [("GET", "/v1/models", None)]


def test_a_listed_engines_error_reaches_the_user_as_a_short_escaped_excerpt(operator):
    with listener() as (url, _):
        operator.setenv(ENGINES_ENV, url)
        with pytest.raises(RemoteError) as err:
            list(generate(f"openai:{url}#m", "hi", max_new_tokens=2))
    message = str(err.value)
    assert "\n" not in message and message.count("<script>") <= EXCERPT_CHARS // len("<script>")
    assert len(message) < len(f"the server at {url} answered HTTP 500: ") + EXCERPT_CHARS + 10  # before: 300 raw


@pytest.mark.parametrize("behaviour, what", [
    ({"error_body": HOSTILE}, "not JSON"),
    ({"error_body": json.dumps({"error": "x" * 10**5})}, "a long message"),
])
def test_any_error_body_is_quoted_short(operator, behaviour, what):
    with listener(**behaviour) as (url, _):
        operator.setenv(ENGINES_ENV, url)
        with pytest.raises(RemoteError) as err:
            list(generate(f"openai:{url}#m", "hi", max_new_tokens=2))
    assert len(str(err.value)) < 300 and "\n" not in str(err.value), what


def test_a_wrong_model_name_lists_a_bounded_number_of_served_models(operator):
    with listener(extra_models=[f"model-{i}-" + "y" * 500 for i in range(1000)]) as (url, _):
        operator.setenv(ENGINES_ENV, url)
        with pytest.raises(RemoteError, match="does not serve 'nope'.*and 993 more") as err:
            RemoteLM(f"openai:{url}#nope")
    assert len(str(err.value)) < 1000


@pytest.mark.parametrize("entry", ["ftp://127.0.0.1/v1", "127.0.0.1:8000", "http://user:pw@127.0.0.1:8000/v1",
                                   "http://127.0.0.1:99999/v1"])
def test_a_malformed_engines_list_names_the_variable(operator, entry):
    operator.setenv(ENGINES_ENV, entry)
    with pytest.raises(ValueError, match=f"environment variable {ENGINES_ENV}"):
        list(generate("openai:http://127.0.0.1:8000/v1#m", "hi", max_new_tokens=2))


def test_the_cli_reaches_its_users_own_url_with_their_key(operator, capsys):
    """The command line's user is its operator: with no list set, any URL is reached (and gets the key)."""
    from decoding.__main__ import main

    operator.setenv(ALLOW_ENV, "0")  # both restored after the test (main sets them)
    operator.setenv(ENGINES_ENV, "")
    with listener() as (url, requests):
        assert main(["run", "--model", f"openai:{url}#m", "--prompt", "hi", "--max-new-tokens", "2", "--quiet"]) == 2
    assert "answered HTTP 500" in capsys.readouterr().err
    assert requests and {r[2] for r in requests} == {f"Bearer {KEY}"}


def test_the_cli_keeps_to_a_list_its_user_set(operator, capsys):
    from decoding.__main__ import main

    with listener() as (url, requests):
        operator.setenv(ENGINES_ENV, "http://127.0.0.1:8000/v1")
        assert main(["run", "--model", f"openai:{url}#m", "--prompt", "hi", "--quiet"]) == 2
    assert "is not an engine this app may reach" in capsys.readouterr().err and requests == []
