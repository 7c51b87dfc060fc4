"""Remote engines (decoding.remote) against a REAL OpenAI-compatible server: llama.cpp's server from
llama-cpp-python serving the embedded SmolLM2 GGUF on loopback (the `llama_server` fixture,
tests/conftest.py).

No mock stands in for the engine. One tiny fake server appears below, labelled FAKE: it produces
what a healthy llama.cpp server cannot (HTTP 429, a stream without log-probabilities, a server that
never answers), to check the messages a user gets.
"""

import http.server
import json
import math
import threading
import time

import pytest

from decoding import run_to_trace
from decoding.events import Trace
from decoding.remote.client import Client, RemoteError
from decoding.remote.lm import RemoteLM
from decoding.remote.source import ALLOW_ENV, ENGINES_ENV, KEY_ENV
from decoding.remote.strategies import NEUTRAL, TOP_ALTERNATIVES, entropy_lower_bound
from decoding.run import generate

PROMPT = "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n"
MATH = ("<|im_start|>user\nTom has 3 apples. He buys 4 more. How many apples does he have? Solve it step by step, one "
        "short step per line. Finish with \"The answer is\" and the number.<|im_end|>\n<|im_start|>assistant\n")


pytestmark = pytest.mark.usefixtures("remote_allowed")


def source(base_url: str, model: str = "smollm2-135m") -> str:
    return f"openai:{base_url}#{model}"


def server_greedy(base_url: str, prompt: str, max_tokens: int, logprobs: int | None = None) -> dict:
    """The server's own greedy completion (its samplers' defaults switched off, as the strategies do)."""
    body = NEUTRAL | {"model": "smollm2-135m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    return Client(base_url).complete(body | ({"logprobs": logprobs} if logprobs else {}))["choices"][0]


# ---------------------------------------------------------------------------- no server needed


def test_entropy_lower_bound_is_below_the_full_entropy():
    probs = [0.5, 0.2, 0.1, 0.1, 0.05, 0.05]
    full = -sum(p * math.log(p) for p in probs)
    bound = entropy_lower_bound([math.log(p) for p in probs[:3]])  # top-3, the rest (0.2) as one bucket
    assert bound == pytest.approx(-sum(p * math.log(p) for p in (0.5, 0.2, 0.1, 0.2)))
    assert bound < full
    assert entropy_lower_bound([math.log(p) for p in probs]) == pytest.approx(full)  # all of it: exact


def test_remote_sources_are_off_in_the_app_unless_the_operator_enables_them(monkeypatch):
    monkeypatch.delenv(ALLOW_ENV)
    with pytest.raises(ValueError, match=f"remote engines .* are off in this app.*{ALLOW_ENV}=1"):
        list(generate("openai:http://127.0.0.1:9/v1#m", "hi"))


@pytest.mark.parametrize("name, match", [
    ("openai:127.0.0.1:8000#m", "not a remote source"),
    ("openai:http://127.0.0.1:8000/v1", "not a remote source"),
    ("openai:http://user:sk-secret@127.0.0.1:8000/v1#m", "must not carry credentials"),
])
def test_malformed_sources_are_refused_with_the_form_to_use(name, match):
    with pytest.raises(ValueError, match=match):
        list(generate(name, "hi"))


@pytest.mark.parametrize("strategy, field", [("speculative", "draft_model"), ("best-of-n", "judge_model")])
def test_a_remote_engine_is_never_a_helper_model(strategy, field):
    chooser = {"reward": "lm-judge"} if field == "judge_model" else {"drafter": "model"}
    params = {field: "openai:http://127.0.0.1:9/v1#m"} | chooser
    with pytest.raises(ValueError, match=rf"`[\w-]+\.{field}` must be a local model or hub id"):  # the plug-in's own
        list(generate("tiny-random", "hi", strategy=strategy, params=params))


def test_unreachable_server_says_so(remote_allowed):
    from decoding.processes import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    remote_allowed(url)
    with pytest.raises(RemoteError, match=r"cannot reach the server at http://127.0.0.1:\d+/v1.*is it running"):
        list(generate(f"openai:{url}#m", "hi"))


class _FakeServer(http.server.BaseHTTPRequestHandler):
    """FAKE (not an engine): lists model "m", then answers completions the way `behaviour` says."""

    behaviour = "429"

    def do_GET(self):
        self._send(200, {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "fake"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.behaviour == "429":
            self._send(429, {"error": {"message": "Too many requests"}}, {"Retry-After": "7"})
        elif self.behaviour == "silent":
            time.sleep(2)
        else:  # a stream without logprobs
            chunk = {"choices": [{"text": "Hi", "index": 0, "logprobs": None, "finish_reason": None}]}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())

    def _send(self, status, data, headers=None):
        body = json.dumps(data).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("behaviour, match", [
    ("429", r"rate-limiting requests \(HTTP 429\); it asks to retry after 7 s"),
    ("no-logprobs", "sent tokens without log-probabilities.*logits_all"),
    ("silent", "did not answer within 0.5 s"),
])
def test_fake_server_errors_reach_the_user_as_sentences(behaviour, match, monkeypatch, remote_allowed):
    """FAKE server: what a real llama.cpp server cannot be made to do here."""
    monkeypatch.setenv("DECODING_LAB_REMOTE_TIMEOUT_S", "0.5")
    handler = type("Handler", (_FakeServer,), {"behaviour": behaviour})
    fake = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=fake.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    remote_allowed(f"http://127.0.0.1:{fake.server_address[1]}/v1")
    try:
        lm = RemoteLM(f"openai:http://127.0.0.1:{fake.server_address[1]}/v1#m")
        with pytest.raises(RemoteError, match=match):
            list(generate(lm, "hi", max_new_tokens=4))
    finally:
        fake.shutdown()
        fake.server_close()


# ---------------------------------------------------------------------------- the real engine


@pytest.mark.slow
def test_wrong_model_name_lists_what_the_server_serves(llama_server):
    with pytest.raises(RemoteError, match=r"does not serve 'nope'; it serves 'smollm2-135m'"):
        list(generate(source(llama_server, "nope"), "hi"))


@pytest.mark.slow
def test_strategies_an_engine_cannot_run_are_refused_with_the_reason(llama_server):
    with pytest.raises(ValueError, match="'beam' cannot run on a remote engine: beam search keeps several rows"):
        list(generate(source(llama_server), "hi", strategy="beam"))
    with pytest.raises(ValueError, match="'refine' cannot run on a remote engine: refine restarts"):
        list(generate(source(llama_server), "hi", strategy="refine"))
    with pytest.raises(ValueError, match="reward probe reads the policy's hidden states"):
        list(generate(source(llama_server), "hi", strategy="particle-filter", params={"reward": "probe"}))


@pytest.mark.slow
def test_greedy_through_the_server_equals_its_own_greedy_completion(llama_server):
    trace = run_to_trace(source(llama_server), PROMPT, strategy="greedy", max_new_tokens=24)
    tokens = trace.of_kind("token")
    assert trace.finish.text == server_greedy(llama_server, PROMPT, 24)["text"]
    assert len(tokens) == 24 and all(e.rank == 1 for e in tokens)  # greedy = the engine's argmax
    assert trace.start.source == {"engine": "llama.cpp (llama-cpp-python)", "base_url": llama_server,
                                  "model": "smollm2-135m"}


@pytest.mark.slow
def test_recorded_top_k_logprobs_equal_the_servers_for_the_same_prefix(llama_server):
    """Asked one prefix after another, each request adds one token to what the server has cached, so it
    computes every step the way the stream did. (Evaluated in one batch instead, a prefix of Q4 weights
    gives log-probs a few percent apart: llama.cpp's kernels differ with the batch size.)"""
    trace = run_to_trace(source(llama_server), PROMPT, strategy="greedy", max_new_tokens=6)
    tokens = trace.of_kind("token")
    for event in tokens:
        prefix = PROMPT + "".join(e.token_text for e in tokens[:event.step])
        top = server_greedy(llama_server, prefix, 1, logprobs=TOP_ALTERNATIVES)["logprobs"]["top_logprobs"][0]
        ranked = sorted(top, key=lambda t: -top[t])[:TOP_ALTERNATIVES]
        assert event.top_tokens == ranked
        assert event.top_probs == pytest.approx([math.exp(top[t]) for t in ranked], rel=1e-5)
        assert 0 < event.entropy and event.extra["entropy"].startswith("lower bound from the top-")


@pytest.mark.slow
def test_branch_continues_from_the_chosen_alternative(llama_server):
    trace = run_to_trace(source(llama_server), PROMPT, strategy="greedy", max_new_tokens=8)
    step = trace.of_kind("token")[2]
    alternative = step.top_ids[1]
    prefix_ids = [e.token_id for e in trace.of_kind("token")[:2]] + [alternative]
    branch = run_to_trace(source(llama_server), PROMPT, strategy="greedy", max_new_tokens=4, prefix_ids=prefix_ids)
    lead = "".join(e.token_text for e in trace.of_kind("token")[:2]) + step.top_tokens[1]
    assert branch.finish.text.startswith(lead) and branch.of_kind("token")[0].step == 3
    assert branch.finish.text == lead + server_greedy(llama_server, PROMPT + lead, 4)["text"]


@pytest.mark.slow
def test_stop_closes_the_stream_and_the_engine_stops_generating(llama_server):
    """llama.cpp's server decodes one request at a time: had it gone on with the 400 tokens asked for
    (about 11 per second with log-probs here), the next request would wait for them."""
    asked = []
    trace = run_to_trace(source(llama_server), PROMPT, strategy="greedy", max_new_tokens=400,
                         should_stop=lambda: len(asked.append(1) or asked) > 3)
    assert trace.finish.stop_reason == "cancelled" and len(trace.of_kind("token")) < 5
    started = time.perf_counter()
    assert server_greedy(llama_server, PROMPT, 2)["text"]
    assert time.perf_counter() - started < 5


@pytest.mark.slow
def test_particle_filter_with_a_rule_reward_completes_through_the_server(llama_server):
    trace = run_to_trace(source(llama_server), MATH, strategy="particle-filter", max_new_tokens=48, seed=0,
                         params={"n": 4, "reward": "arith-step", "max_step_tokens": 24})
    steps = trace.of_kind("particles")
    assert steps and all(len(s.particles) == 4 for s in steps)
    assert all(sum(p["weight"] for p in s.particles) == pytest.approx(1.0) for s in steps)
    assert trace.finish.stop_reason in ("eos", "max_new_tokens") and trace.finish.text
    assert all(p["num_tokens"] <= 48 for p in steps[-1].particles)
    assert trace.finish.extra["particles"] and trace.start.source["engine"].startswith("llama.cpp")
    for before, after in zip(steps, steps[1:]):  # a particle continues the text of the slot it copied
        for p in after.particles:
            assert p["text"].startswith(before.particles[before.ancestors[p["id"]]]["text"])


@pytest.mark.slow
@pytest.mark.parametrize("method, params", [("reward-beam", {"beam_width": 2}), ("majority-vote", {})])
def test_other_step_wise_methods_complete_through_the_server(llama_server, method, params):
    trace = run_to_trace(source(llama_server), MATH, strategy=method, max_new_tokens=32, seed=1,
                         params={"n": 4, "reward": "arith-step", "max_step_tokens": 16} | params)
    assert trace.of_kind("particles") and trace.finish.extra["method"] == method


class _FakeBatchServer(http.server.BaseHTTPRequestHandler):
    """FAKE (not an engine): answers `n` choices per request, as vLLM does and llama.cpp's server does not,
    and records the requests, to show how particles that share a prefix share a request."""

    requests: list = []

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "fake"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(body)
        k = len(self.requests)
        steps = [f"{i} + {k} = {i + k}" for i in range(body["n"])]  # a different step per choice
        choices = [{"index": i, "text": step, "finish_reason": "stop",
                    "logprobs": {"tokens": [step, "\n"], "token_logprobs": [-1.0, -0.1], "top_logprobs": None}}
                   for i, step in enumerate(steps)]
        self._send({"choices": choices})

    def _send(self, data):
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


def test_particles_sharing_a_prefix_share_one_request_with_n_completions(remote_allowed):
    """FAKE server answering n choices (vLLM's behaviour): 4 particles start from the prompt in one request;
    after a best-of-n step each continues its own text, one request each."""
    handler = type("Handler", (_FakeBatchServer,), {"requests": []})
    fake = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=fake.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    remote_allowed(f"http://127.0.0.1:{fake.server_address[1]}/v1")
    try:
        lm = RemoteLM(f"openai:http://127.0.0.1:{fake.server_address[1]}/v1#m")
        trace = run_to_trace(lm, "Q:\n", strategy="best-of-n", max_new_tokens=4, params={"n": 4, "reward": "none"})
    finally:
        fake.shutdown()
        fake.server_close()
    first, *rest = handler.requests
    assert first["n"] == 4 and first["stop"] == ["\n"] and first["prompt"] == "Q:\n"
    assert all(r["n"] == 1 for r in rest) and len(rest) == 4  # the copies now differ: one request each
    assert [r["prompt"] for r in rest] == [f"Q:\n{i} + 1 = {i + 1}\n" for i in range(4)]
    assert len(trace.of_kind("particles")) == 2


@pytest.mark.slow
def test_a_remote_trace_exports_and_replays_without_the_key(llama_server, tmp_path, monkeypatch):
    from visualizers.entropy import entropy_figure

    monkeypatch.setenv(KEY_ENV, "sk-never-in-a-trace")  # llama.cpp's server ignores it
    trace = run_to_trace(RemoteLM(source(llama_server)), PROMPT, strategy="sample", max_new_tokens=8, seed=3,
                         params={"temperature": 0.7})
    path = tmp_path / "remote.json"
    trace.save(path)
    assert "sk-never-in-a-trace" not in path.read_text()
    loaded = Trace.load(path)
    assert loaded.to_dict() == trace.to_dict()
    assert entropy_figure(loaded).data[0].name == "entropy (raw, lower bound from the top-k)"


@pytest.mark.slow
def test_cli_runs_a_model_on_the_server(llama_server, capsys, monkeypatch):
    from decoding.__main__ import main

    monkeypatch.delenv(ALLOW_ENV)  # the command line allows remote engines by itself
    monkeypatch.setenv(ALLOW_ENV, "0")  # restored after the test (main sets it)
    monkeypatch.setenv(ENGINES_ENV, "")  # unset: the command line reaches any URL (main sets "*")
    assert main(["run", "--model", f"openai:{llama_server}#smollm2-135m", "--prompt", PROMPT, "--max-new-tokens", "8",
                 "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == f"openai:{llama_server}#smollm2-135m"
    assert out["text"] == server_greedy(llama_server, PROMPT, 8)["text"]
