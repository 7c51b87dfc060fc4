"""N particles grown a reasoning step at a time by a remote engine (the remote `ParticleBatch`).

The step-wise continuation pattern of its_hub's `StepGeneration` (Red-Hat-AI-Innovation-Team/its_hub,
its_hub/core/lms/step_generation.py): each request sends the prompt plus a particle's steps so far,
asks for the next step with `stop` at the step delimiter, and the scaling method resamples between
steps. Particles that share a prefix (copies after resampling, or every particle at the first step)
share one request with `n` completions; an engine that answers fewer choices than asked (llama.cpp's
server answers one) is asked again, one request per missing particle, each with that slot's seed.
The reward runs here, on the returned text.

How a step ended, from the engine's finish reason:
    "length"                         the step hit its token cap ("length").
    "stop", delimiter among tokens   the step delimiter (engines cut it from `text` but list its token).
    "stop", no delimiter             the end of text ("eos"): the particle is finished.
A step that is blank before its delimiter (a second newline) is continued within the same step, as the
local batch only counts a step once it has text.

Same interface as `decoding.scaling.particle_batch.ParticleBatch`: `extend`, `reorder`, `tokens_spent`,
`banned` (always None: masking tokens while sampling needs the logits) and `log_mass`.
"""

from __future__ import annotations

from typing import Callable

import torch

from decoding.contracts import Cancelled, never
from decoding.remote.lm import EOS_ID, RemoteLM
from decoding.remote.strategies import NEUTRAL


class RemoteParticleBatch:
    def __init__(self, lm: RemoteLM, prompt: str, generators: list[torch.Generator], *, delimiter: str,
                 temperature: float = 1.0, top_p: float = 1.0, banned=None, should_stop: Callable[[], bool] = never):
        assert banned is None, "scoring.banned_tokens refuses hard constraints for a remote engine"
        self.lm, self.prompt, self.generators, self.delimiter = lm, prompt, generators, delimiter
        self.n = len(generators)
        self.sampling = {"temperature": temperature, "top_p": top_p}
        self.should_stop = should_stop
        self.rows: list[list[int]] = [[] for _ in range(self.n)]  # each slot's generated token ids
        self.banned = None
        self.log_mass = [0.0] * self.n
        self.tokens_spent = 0

    def extend(self, rows: list[int], step_done: Callable[[list[int]], bool], max_tokens: list[int]) -> dict:
        """Grow each slot in `rows` by one step; {row: (new token ids, end)} with end "eos", "step" or "length".
        Raises Cancelled when Stop comes before one of the requests."""
        new = {i: [] for i in rows}
        ends: dict[int, str] = {}
        while len(ends) < len(rows):
            groups: dict[tuple, list[int]] = {}
            for i in rows:
                if i not in ends:
                    groups.setdefault((tuple(self.rows[i] + new[i]), max_tokens[i] - len(new[i])), []).append(i)
            for (prefix, budget), slots in groups.items():
                for i, (ids, finish) in zip(slots, self._complete(list(prefix), budget, slots)):
                    new[i] += ids
                    self.tokens_spent += len(ids)
                    end = self._end(ids, finish, step_done(new[i]))
                    if end == "eos":
                        new[i].append(EOS_ID)
                    if end or len(new[i]) >= max_tokens[i]:
                        ends[i] = end or "length"
        for i in rows:
            self.rows[i] += new[i]
        return {i: (new[i], ends[i]) for i in rows}

    def _end(self, ids: list[int], finish: str, step_done: bool) -> str | None:
        """How the request ended the step (None: a blank step, to be continued)."""
        if finish == "length":
            return "length"
        if self.delimiter not in self.lm.decode(ids):
            return "eos"
        return "step" if step_done else None

    def _complete(self, prefix: list[int], budget: int, slots: list[int]) -> list[tuple[list[int], str]]:
        """(token ids, finish reason) for each slot continuing `prefix`: one request with n = len(slots), then one
        request per slot the engine did not answer."""
        answers = self._request(prefix, budget, len(slots), slots[0])
        for slot in slots[len(answers):]:
            answers += self._request(prefix, budget, 1, slot)
        return answers[:len(slots)]

    def _request(self, prefix: list[int], budget: int, n: int, slot: int) -> list[tuple[list[int], str]]:
        if self.should_stop():
            raise Cancelled("stopped before a remote step request")
        seed = int(torch.randint(0, 2**31, (1,), generator=self.generators[slot]))
        reply = self.lm.complete(NEUTRAL | self.sampling | {
            "prompt": self.prompt + self.lm.decode(prefix), "max_tokens": max(1, budget), "n": n, "seed": seed,
            "stop": [self.delimiter], "logprobs": 1})
        out = []
        for choice in reply.get("choices", []):
            tokens = (choice.get("logprobs") or {}).get("tokens") or ([choice["text"]] if choice.get("text") else [])
            if isinstance(choice.get("stop_reason"), str) and self.delimiter not in "".join(tokens):
                tokens.append(self.delimiter)  # vLLM names the stop string it cut, without listing its token
            out.append(([self.lm.token_id(t) for t in tokens], choice.get("finish_reason") or "length"))
        return out

    def reorder(self, ancestors: list[int]) -> None:
        """Slot j now continues slot ancestors[j]'s text; generators stay with their slots."""
        self.rows = [list(self.rows[a]) for a in ancestors]
        self.log_mass = [self.log_mass[a] for a in ancestors]
