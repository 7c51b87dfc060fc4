"""A model served by an OpenAI-compatible engine: `openai:<base_url>#<model>`.

    python -m decoding run --model "openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-0.5B-Instruct" --prompt "..."

The engine (vLLM, TGI, SGLang, llama.cpp's server) runs the model; this side only asks for
completions with log-probabilities. The API key is read from DECODING_LAB_OPENAI_API_KEY and is
never part of the model name, so it never reaches a trace. The app accepts remote sources only where
its operator sets DECODING_LAB_ALLOW_REMOTE=1, and only for the base URLs the operator lists in
DECODING_LAB_REMOTE_ENGINES (a public Space must not make requests to any URL a visitor types, nor
send it the key); the CLI accepts any URL unless that list is set (`decoding.remote.source`).

What the OpenAI API gives is text: each generated token as a string, and the top alternatives as
{string: logprob}. It does not give token ids, so a `RemoteLM` numbers the token strings it has
seen (its token table: id = first time seen, shared by every run in this process); trace ids of a
remote run index that table, and continuing a run (a branch, the next reasoning step) sends the
text back as the prompt. Id 0 is the end of text: engines report it as a finish reason, not a token.

Glossary
    source        the whole `openai:<base_url>#<model>` string; what a trace records as its model.
    engine        what the server says it is (`owned_by` of /models: "vllm", ...; llama.cpp says "me").
    token table   token string <-> id of this process, in order of first sight.
"""

from __future__ import annotations

import threading

from decoding.remote.client import Client, RemoteError, excerpt, served_text
from decoding.remote.source import PREFIX, api_key, parse_source, timeout_s

EOS_ID = 0  # the end of text (a finish reason of the engine, never a token string)


class RemoteLM:
    """The narrow model interface the remote strategies use: text in, tokens with log-probs out.

    Plays both roles the local side splits (a loaded model and its `LM` wrapper), so `load_model`
    and `as_lm` hand it through unchanged. `forward_passes` counts requests to the engine.
    """

    device = "remote"
    max_length = None  # the engine checks its own context length (and says so in its error)

    def __init__(self, source: str):
        self.base_url, self.model_name = parse_source(source)
        self.name = f"{PREFIX}{self.base_url}#{self.model_name}"
        self.client = Client(self.base_url, api_key(self.base_url), timeout_s())
        self.engine = self._check_served()
        self.loaded, self.dtype = self, "remote"  # `generate` reads lm.loaded.dtype
        self.forward_passes = 0
        self._texts: list[str] = [""]  # id -> token string (id 0: the end of text)
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def _check_served(self) -> str:
        """The engine's name; RemoteError unless the server lists `model_name` (engines that serve one
        model answer any name, so this is the only place a wrong name shows)."""
        served = self.client.models()
        if self.model_name not in served:
            raise RemoteError(f"the server at {self.base_url} does not serve {excerpt(self.model_name, 80)}; it "
                              f"serves {served_text(served)}: write one after the # in the model name")
        owner = str(served[self.model_name].get("owned_by", ""))
        return {"me": "llama.cpp (llama-cpp-python)", "": "openai-compatible"}.get(owner, owner)

    def source(self) -> dict:
        """What a trace records: the engine, its URL (never a key) and the model name."""
        return {"engine": self.engine, "base_url": self.base_url, "model": self.model_name}

    # ------------------------------------------------------------------ token table
    @property
    def vocab_size(self) -> int:
        """Ids in use so far: a branch's ids must be below it."""
        return len(self._texts)

    @property
    def stop_ids(self) -> frozenset[int]:
        return frozenset({EOS_ID})

    def token_id(self, text: str) -> int:
        with self._lock:
            if text not in self._ids:
                self._ids[text] = len(self._texts)
                self._texts.append(text)
            return self._ids[text]

    def ids_for(self, token_ids: list[int], texts: dict[int, str]) -> list[int]:
        """This process's ids for a saved trace's `token_ids`, read through the trace's own id -> text
        table `texts` (a remote trace's ids number the token texts of the process that recorded it, so
        a replayed trace is re-numbered before it is continued). ValueError for an id it does not know."""
        unknown = [i for i in token_ids if i not in texts]
        if unknown:
            raise ValueError(f"the trace does not record the text of token ids {unknown[:5]}, so it cannot be "
                             "continued on a remote engine; branch from a step of the original run")
        return [self.token_id(texts[i]) for i in token_ids]

    def token_text(self, token_id: int) -> str:
        return self._texts[token_id]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(self._texts[i] for i in token_ids)

    def encode_prompt(self, prompt: str, chat: bool = True) -> tuple[list[int], str, bool]:
        """([], the prompt, False): the completions endpoint takes text, and the chat template lives on the
        server (write it into the prompt, or ask the engine's chat route); ids are the engine's business."""
        return [], prompt, False

    def check_fits(self, num_prompt: int, max_new_tokens: int, lookahead: int = 0) -> None:
        """Nothing to check here: the engine refuses a request past its context with a message."""

    # ------------------------------------------------------------------ requests
    def complete(self, body: dict) -> dict:
        self.forward_passes += 1
        return self.client.complete({"model": self.model_name} | body)

    def stream(self, body: dict):
        self.forward_passes += 1
        return self.client.stream({"model": self.model_name} | body)


_cache: dict[str, RemoteLM] = {}
_cache_lock = threading.Lock()


def load_remote(source: str) -> RemoteLM:
    """The (cached) RemoteLM of `source`: one token table per server and model in a process."""
    base_url, model = parse_source(source)
    key = f"{base_url}#{model}"
    with _cache_lock:
        if key not in _cache:
            _cache[key] = RemoteLM(source)
        return _cache[key]
