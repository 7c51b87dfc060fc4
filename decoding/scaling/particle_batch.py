"""N partial solutions decoded as one batch from one prompt cache, a step at a time.

Particles (best-of-N samples, reward-guided beams, particle-filter particles) share the prompt:
it is run once and its KV cache repeated N times. Every model call then feeds one token per row.
Rows advance in lockstep but stop at different times (a row that has finished its step waits
while the others finish theirs), so a waiting row is fed a padding token that the attention mask
hides; each row keeps its own position counter, so its positions stay 0, 1, 2, ... with no gaps.
Where nothing is scored between steps that could change what a row does next (best-of-N, voting),
`extend_free` removes that barrier: a row that has finished its step goes on decoding its next
steps (queued, shown at later events) while the slowest row finishes, so every call feeds every
live row and N samples cost about as many calls as the longest one alone.
Resampling selects (and repeats) cache rows by ancestor index (`reorder`), so a copied particle
never re-runs its prefix: this is what makes particle filtering affordable.

Randomness: each slot owns a `torch.Generator` that stays with the slot when particles are
copied, so two copies of one particle continue differently, and a slot's draws do not depend on
how many other rows the batch has (tested: the batch gives each particle the tokens it gets when
decoded alone with the same generator).

Glossary
    slot      index 0..N-1 of a row in the batch; resampling changes what a slot holds.
    pending   a token already sampled for a row but not yet fed to the model (it is fed at the
              start of the next model call, so a finished step costs no extra call).
    ahead     steps a row has completed beyond the last `extend_free` result (no barrier), queued in
              order with their end and log-mass; `partial` is the step it is decoding now.
    banned    token ids a hard constraint forbids (masked before sampling); `log_mass` adds up
              log P(allowed) per row, the constraint's importance weight (Lew et al. 2023).
    token_stats  with `token_stats=True`, `extend` keeps, per row, (log-probability, entropy) of the
              model's temperature-1 distribution at each token it drew (`self.stats`): a drafter's
              confidence in its own step, which Arbitrage's router reads (`decoding.scaling.arbitrage`).
"""

from __future__ import annotations

from typing import Callable

import torch

from decoding import sampling
from decoding.contracts import Cancelled, never
from decoding.lm import LM, crop_cache, reorder_cache

PAD_ID = 0  # fed to waiting rows; the attention mask hides it, so its value does not matter


class ParticleBatch:
    """The decoding state of N rows: cache, attention mask, positions, next-token logits."""

    def __init__(self, lm: LM, prompt_ids: list[int], generators: list[torch.Generator], *,
                 temperature: float = 1.0, top_p: float = 1.0, banned: torch.Tensor | None = None,
                 should_stop: Callable[[], bool] = never,
                 on_tokens: Callable[[dict[int, list[int]]], None] | None = None, token_stats: bool = False):
        self.lm = lm
        self.stats: dict[int, list[tuple[float, float]]] | None = {} if token_stats else None  # extend's last
        #                                                   step per row: (log-prob, entropy) of each drawn token
        self.on_tokens = on_tokens  # told {row: this step's tokens so far} after every sampling round
        self.should_stop = should_stop  # asked before every model call; True raises Cancelled
        self.n = len(generators)
        self.generators = generators
        self.temperature = temperature
        self.transforms = sampling.build_transforms(sampling.SamplingParams(
            temperature=temperature if temperature > 0 else 1.0, top_p=top_p))
        self.banned = banned  # (V,) bool or None
        self._check_stop()
        out = lm.prefill(prompt_ids, rows=self.n)
        self.cache = out.cache
        self.logits = out.logits[:, -1].float().cpu().clone()  # (N, V) next-token logits of every row (CPU: the
        #                                                 generators are CPU generators)
        self.mask = torch.ones(self.n, len(prompt_ids), dtype=torch.long)  # (N, L) 1 = a real token
        self.positions = torch.full((self.n,), len(prompt_ids), dtype=torch.long)  # (N,) next position
        self.pending: list[int | None] = [None] * self.n
        self.tokens_spent = 0  # tokens sampled over all rows (padding excluded)
        self.log_mass = [0.0] * self.n  # log P(allowed tokens) summed over the current step
        self.ahead: list[list[tuple[list[int], str, float]]] = [[] for _ in range(self.n)]  # extend_free's queue
        self.partial: list[list[int]] = [[] for _ in range(self.n)]  # the step a row decodes ahead
        self.partial_mass = [0.0] * self.n
        self.exhausted = [False] * self.n  # a row that sampled a stop token or its whole budget ahead

    # ------------------------------------------------------------------ model calls
    def _check_stop(self) -> None:
        if self.should_stop():
            raise Cancelled("stopped before a particle batch call")

    def feed(self) -> bool:
        """Feed every pending token in one call (waiting rows get a hidden pad). False if none.
        Raises Cancelled, before the call, once the run's stop flag is set."""
        fed = [i for i, t in enumerate(self.pending) if t is not None]
        if not fed:
            return False
        self._check_stop()
        ids = torch.tensor([[t if t is not None else PAD_ID] for t in self.pending])  # (N, 1)
        column = torch.tensor([[int(t is not None)] for t in self.pending])  # (N, 1)
        self.mask = torch.cat([self.mask, column], dim=1)  # (N, L + 1)
        out = self.lm.forward(ids.to(self.lm.device), self.cache,
                              attention_mask=self.mask.to(self.lm.device),
                              position_ids=self.positions.view(-1, 1).to(self.lm.device))
        self.cache = out.cache
        rows = torch.tensor(fed)
        self.logits[rows] = out.logits[:, -1].float().cpu()[rows]
        self.positions[rows] += 1
        self.pending = [None] * self.n
        return True

    def sample(self, row: int) -> int:
        """Draw row's next token with its own generator (banned tokens masked first)."""
        return self.sample_rows([row])[row]

    def sample_rows(self, rows: list[int]) -> dict[int, int]:
        """Each row's next token: the constraint mask and the temperature / top-p transforms run once
        over all the rows (one call, not one per row); each row then draws with its own generator,
        so the tokens are the ones each row gets alone. Adds log P(allowed) to `log_mass`."""
        if not rows:
            return {}
        index = torch.tensor(rows)
        logits = self.logits[index].float()  # (R, V)
        if self.banned is not None:
            allowed = torch.logsumexp(sampling.log_softmax(logits)[:, ~self.banned], dim=-1)  # (R,)
            for i, mass in zip(rows, allowed.tolist()):
                self.log_mass[i] += mass
            logits = logits.masked_fill(self.banned, float("-inf"))
        if self.temperature <= 0:
            return dict(zip(rows, logits.argmax(dim=-1).tolist()))
        final = sampling.apply_transforms(self.transforms, logits, torch.empty(len(rows), 0, dtype=torch.long))
        return {i: int(sampling.sample_from_logits(final[j:j + 1], self.generators[i])[0]) for j, i in enumerate(rows)}

    def extend(self, rows: list[int], step_done: Callable[[list[int]], bool], max_tokens: list[int]) -> dict:
        """Grow each row in `rows` until it emits a stop token, `step_done(its new tokens)` says
        the step is complete, or it has `max_tokens[row]` new tokens. Rows not listed wait.

        Returns {row: (new token ids, end)} with end "eos", "step" or "length". Raises Cancelled
        when the run's stop flag is set before one of its model calls (the batch is then unusable).
        """
        if any(self.ahead[i] or self.partial[i] for i in rows):
            raise RuntimeError("extend after extend_free would drop the tokens decoded ahead")
        stop_ids = self.lm.stop_ids
        new = {i: [] for i in rows}
        ends: dict[int, str] = {}
        for i in rows:
            self.log_mass[i] = 0.0
        if self.stats is not None:
            self.stats = {i: [] for i in rows}
        while True:
            running = [i for i in rows if i not in ends]
            if not running:
                break
            self.feed()
            drawn = self.sample_rows(running)
            if self.stats is not None:
                self._record(running, drawn)
            for i in running:
                token = drawn[i]
                new[i].append(token)
                self.tokens_spent += 1
                if token in stop_ids:
                    ends[i] = "eos"  # never fed: nothing follows a stop token
                    continue
                self.pending[i] = token
                if step_done(new[i]):
                    ends[i] = "step"
                elif len(new[i]) >= max_tokens[i]:
                    ends[i] = "length"
            if self.on_tokens is not None:
                self.on_tokens(new)
        return {i: (new[i], ends[i]) for i in rows}

    def _record(self, rows: list[int], drawn: dict[int, int]) -> None:
        """Append (log P(token), entropy) of each row's temperature-1 distribution to `stats`."""
        logprobs = torch.log_softmax(self.logits[torch.tensor(rows)].float(), dim=-1)  # (R, V)
        entropy = -(logprobs.exp() * logprobs).nan_to_num().sum(-1)  # (R,)
        for j, i in enumerate(rows):
            self.stats[i].append((float(logprobs[j, drawn[i]]), float(entropy[j])))

    def extend_free(self, rows: list[int], step_done: Callable[[list[int]], bool], step_cap: int,
                    budgets: dict[int, int]) -> dict:
        """`extend` without the step barrier: returns each row's next step, as `extend` does, but a
        row that has finished its step does not wait: it goes on decoding its following steps (kept
        for later calls) until every row in `rows` has one to return. A row decodes at most
        `budgets[row]` tokens beyond what earlier calls returned (its whole remaining budget), and a
        step ends at a stop token ("eos"), when `step_done` says so ("step"), or at `step_cap` tokens
        or the budget ("length"). Each row draws from its own generator in the same order as under
        `extend`, so the steps are the ones `extend` would give; only the waiting is gone.
        Raises Cancelled like `extend`."""
        stop_ids = self.lm.stop_ids
        if any(self.exhausted[i] and not self.ahead[i] for i in rows):
            raise RuntimeError("extend_free: a row that has nothing left to decode was asked for a step")
        while any(not self.ahead[i] for i in rows):
            self.feed()
            growing = [i for i in rows if not self.exhausted[i]]
            before = {i: self.log_mass[i] for i in growing}
            drawn = self.sample_rows(growing)
            for i in growing:
                token = drawn[i]
                self.partial_mass[i] += self.log_mass[i] - before[i]
                self.log_mass[i] = before[i]
                self.partial[i].append(token)
                self.tokens_spent += 1
                decoded = sum(len(ids) for ids, _, _ in self.ahead[i]) + len(self.partial[i])
                if token in stop_ids:
                    end = "eos"  # never fed
                else:
                    self.pending[i] = token
                    end = "step" if step_done(self.partial[i]) else None
                    if end is None and (len(self.partial[i]) >= step_cap or decoded >= budgets[i]):
                        end = "length"
                if end == "eos" or decoded >= budgets[i]:
                    self.exhausted[i] = True
                    self.pending[i] = None  # nothing follows: no call feeds it
                if end is not None:
                    self.ahead[i].append((self.partial[i], end, self.partial_mass[i]))
                    self.partial[i], self.partial_mass[i] = [], 0.0
            if self.on_tokens is not None:
                self.on_tokens({i: [t for ids, _, _ in self.ahead[i] for t in ids] + self.partial[i] for i in rows})
        out = {}
        for i in rows:
            ids, end, mass = self.ahead[i].pop(0)
            self.log_mass[i] = mass
            out[i] = (ids, end)
        return out

    def checkpoint(self) -> tuple:
        """What `rewind` needs to undo later calls for some rows."""
        return self.mask.shape[1], self.positions.clone(), list(self.pending), self.logits.clone()

    def rewind(self, rows: list[int], checkpoint: tuple) -> None:
        """Rows as they were at `checkpoint`: the columns fed since are hidden by the attention mask
        (they stay in the cache, unseen), positions, pending token and logits restored. Other rows
        keep what they did since."""
        width, positions, pending, logits = checkpoint
        for i in rows:
            self.mask[i, width:] = 0
            self.positions[i], self.pending[i], self.logits[i] = positions[i], pending[i], logits[i]

    def feed_block(self, tokens: dict[int, list[int]]) -> dict[int, list[float]]:
        """Teacher-force a whole step per row in ONE call (a model verifying a step it did not write):
        row i is fed its pending token and tokens[i][:-1]; tokens[i][-1] becomes pending (unless it is
        a stop token: nothing follows). Shorter rows are padded and the padding hidden; other rows
        wait. Returns each row's log-probabilities (temperature 1) of its tokens under this model.
        Raises Cancelled like `feed`."""
        stop_ids = self.lm.stop_ids
        rows = [i for i, t in tokens.items() if t]
        blocks = {i: ([self.pending[i]] if self.pending[i] is not None else []) + tokens[i][:-1] for i in rows}
        width = max((len(b) for b in blocks.values()), default=0)
        logprobs = {i: [] for i in rows}
        outputs = None
        if width:
            self._check_stop()
            ids = torch.full((self.n, width), PAD_ID, dtype=torch.long)
            columns = torch.zeros(self.n, width, dtype=torch.long)
            positions = self.positions.view(-1, 1).repeat(1, width)  # (N, width); padding's positions are hidden
            for i, block in blocks.items():
                ids[i, :len(block)] = torch.tensor(block, dtype=torch.long)
                columns[i, :len(block)] = 1
                positions[i, :len(block)] += torch.arange(len(block))
            self.mask = torch.cat([self.mask, columns], dim=1)
            out = self.lm.forward(ids.to(self.lm.device), self.cache, attention_mask=self.mask.to(self.lm.device),
                                  position_ids=positions.to(self.lm.device))
            self.cache = out.cache
            outputs = out.logits.float().cpu()  # (N, width, V)
        for i in rows:
            block, offset = blocks[i], len(blocks[i]) - (len(tokens[i]) - 1)  # offset: 1 when a pending token led
            for j, token in enumerate(tokens[i]):
                column = offset + j - 1  # the output that predicts tokens[i][j]
                dist = self.logits[i] if column < 0 else outputs[i, column]
                logprobs[i].append(float(torch.log_softmax(dist, dim=-1)[token]))
            if block:
                self.logits[i] = outputs[i, len(block) - 1]
                self.positions[i] += len(block)
            self.pending[i] = None if tokens[i][-1] in stop_ids else tokens[i][-1]
        return logprobs

    def look_ahead(self, rows: list[int], step_done: Callable[[list[int]], bool], max_tokens: list[int],
                   generators: list[torch.Generator]) -> dict:
        """One more step for each row in `rows`, sampled with `generators` (not the slots' own, so
        their streams are untouched) and then undone: the cache is cropped back and the mask,
        positions, logits and pending tokens restored, so the batch continues as if nothing had
        been sampled. The tokens count in `tokens_spent` (they were computed). Returns what `extend`
        returns. Raises Cancelled like `extend` (the batch is restored first)."""
        saved = (self.mask, self.positions.clone(), self.logits.clone(), list(self.pending), list(self.log_mass),
                 self.generators, self.on_tokens, self.cache.get_seq_length())
        self.generators, self.on_tokens = generators, None  # a live view shows the particles, not the look-ahead
        try:
            return self.extend(rows, step_done, max_tokens)
        finally:
            (self.mask, self.positions, self.logits, self.pending, self.log_mass, self.generators, self.on_tokens,
             length) = saved
            crop_cache(self.cache, length)

    def reorder(self, ancestors: list[int]) -> None:
        """Slot j now holds a copy of slot ancestors[j] (cache, mask, positions, logits, pending);
        generators stay with their slots."""
        if list(ancestors) == list(range(self.n)):
            return
        index = torch.tensor(ancestors, dtype=torch.long)
        self.cache = reorder_cache(self.cache, index.to(self.lm.device))
        self.mask = self.mask[index]
        self.positions = self.positions[index]
        self.logits = self.logits[index]
        self.pending = [self.pending[a] for a in ancestors]
        self.log_mass = [self.log_mass[a] for a in ancestors]
        self.ahead = [list(self.ahead[a]) for a in ancestors]
        self.partial = [list(self.partial[a]) for a in ancestors]
        self.partial_mass = [self.partial_mass[a] for a in ancestors]
        self.exhausted = [self.exhausted[a] for a in ancestors]


def slot_generators(seed: int, n: int) -> list[torch.Generator]:
    """One generator per slot, seeded from the run's seed and the slot index."""
    generators = []
    for i in range(n):
        g = torch.Generator(device="cpu")
        g.manual_seed((seed * 1_000_003 + 7919 * i) % 2**63)
        generators.append(g)
    return generators
