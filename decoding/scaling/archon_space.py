"""Archon's search space as data: the lab's techniques, the candidates they compose, the architectures found.

Saad-Falcon et al. 2024, "Archon: An Architecture Search Framework for Inference-Time Techniques"
(arXiv 2409.15254) draws an inference-time system as layers (generate, rank, fuse, critique, verify,
...) and searches over which layers and settings to stack. Here a candidate is

    [generate N, sampler T / top-p] -> [rank | vote | first | search | speculate, with reward R] -> [refine rounds]

mapped onto one registered scaling strategy and its parameters (the lab's methods already are such
compositions: refine is sample N, rank by the reward, rewrite from the best one's first bad step).
The space is a list of entries: to add a method (`adaptive`, `compute-optimal`) append a `Technique`
to `TECHNIQUES` with the strategy's fixed settings; to add a reward (`spare-prm`) append its name to
`REWARD_CHOICES`. `decoding.scaling.archon_search` searches the space; strategy `archon`
(`decoding.scaling.archon`) runs what it found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from decoding.registry import get_strategy

ARCHON_FILE = "archon.json"  # a search's result, beside the model it was searched for
BASE = {"max_step_tokens": 40}  # what every candidate shares (the benchmark's step size on tiny-math)


@dataclass(frozen=True)
class Technique:
    """A way to turn N samples into an answer: a registered scaling strategy with its own settings fixed."""

    name: str  # its name in the space ("weighted-vote", "refine-3")
    strategy: str  # the registered strategy that runs it
    layer: str  # what it does with the samples: rank, vote, first, search, speculate, refine
    fixed: tuple = ()  # the strategy's own settings, ((name, value), ...)
    uses_reward: bool = True  # False: the reward never changes the answer (plain vote, first finish)
    min_n: int = 1  # below this N the technique is plain sampling (dropped from the space)
    n_multiple: int = 1  # N must be a multiple of this (reward-beam's beam width)


TECHNIQUES = (
    Technique("best-of-n", "best-of-n", "rank"),
    Technique("majority-vote", "majority-vote", "vote", (("weighted", False),), uses_reward=False, min_n=2),
    Technique("weighted-vote", "majority-vote", "vote", (("weighted", True),), min_n=2),
    Technique("first-finish", "first-finish", "first", uses_reward=False, min_n=2),
    Technique("reward-beam", "reward-beam", "search", (("beam_width", 2),), min_n=2, n_multiple=2),
    Technique("particle-filter", "particle-filter", "search", min_n=2),
    Technique("a-star", "a-star", "search", (("max_expansions", 16),)),
    Technique("step-speculation", "step-speculation", "speculate", (("draft_model", "tiny-math-draft"),)),
    Technique("refine-2", "refine", "refine", (("rounds", 2),)),
    Technique("refine-3", "refine", "refine", (("rounds", 3),)),
)  # to add a method (e.g. `adaptive`, `compute-optimal`): one more Technique here, with its fixed settings
SAMPLERS = ((0.0, 1.0), (1.0, 1.0), (0.7, 1.0), (0.5, 1.0), (1.0, 0.9), (0.7, 0.9))  # (temperature, top_p)
NS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16)
REWARD_CHOICES = ("arith-step", "spare", "probe")  # add a reward (e.g. `spare-prm`) here
REFERENCE_READING = ("spare",)  # rewards that read the question's reference solution at decode time


@dataclass(frozen=True)
class Candidate:
    """One architecture of the space: technique, N, sampler and reward."""

    technique: Technique
    n: int
    temperature: float
    top_p: float
    reward: str

    @property
    def key(self) -> str:
        reward = f" {self.reward}" if self.technique.uses_reward and (self.n > 1 or self.technique.layer != "rank") else ""
        return f"{self.technique.name} N={self.n} T={self.temperature:g} top_p={self.top_p:g}{reward}"

    @property
    def strategy(self) -> str:
        return self.technique.strategy

    def params(self) -> dict:
        """The composed strategy's parameters."""
        return {"n": self.n, "reward": self.reward, "temperature": self.temperature, "top_p": self.top_p, **BASE,
                **dict(self.technique.fixed)}

    def layers(self) -> list[dict]:
        """The architecture as the paper draws it: one dict per layer, first to last."""
        fixed = dict(self.technique.fixed)
        out = [{"layer": "generate", "n": self.n, "temperature": self.temperature, "top_p": self.top_p,
                "step": f"a line, at most {BASE['max_step_tokens']} tokens"}]
        if self.technique.layer == "refine":
            out.append({"layer": "rank", "technique": "best-of-n", "reward": self.reward})
            out.append({"layer": "refine", "rounds": fixed["rounds"], "rewrites_from": "the best one's first bad step"})
        else:
            out.append({"layer": self.technique.layer, "technique": self.technique.name,
                        **({"reward": self.reward} if self.technique.uses_reward else {}), **fixed})
        return out

    def architecture(self) -> dict:
        """What `archon.json` stores and strategy `archon` runs."""
        return {"key": self.key, "strategy": self.strategy, "params": self.params(), "layers": self.layers()}


def space(techniques=TECHNIQUES, samplers=SAMPLERS, ns=NS, rewards=REWARD_CHOICES) -> list[Candidate]:
    """Every candidate, in a fixed order. Temperature 0 is greedy decoding: one sample (best-of-n, N = 1);
    a reward that cannot change the answer (plain vote, first finish, one sample ranked) is not varied."""
    out, seen = [], set()
    for technique in techniques:
        for temperature, top_p in samplers:
            for n in ns:
                if n < technique.min_n or n % technique.n_multiple:
                    continue
                if temperature == 0 and (technique.name != "best-of-n" or n != 1):
                    continue
                for reward in rewards:
                    candidate = Candidate(technique, n, temperature, top_p, reward)
                    if candidate.key not in seen:  # one entry where the reward changes nothing
                        seen.add(candidate.key)
                        out.append(candidate)
    return out


# Architectures found by the shipped searches, copied from the JSON each wrote (SHIPPED_FROM, under assets/;
# tests/scaling/test_archon.py checks the copies)
SHIPPED_FROM = {"tiny-math-600": "tiny-math/archon.json",
                "tiny-math-600-no-reference": "tiny-math/archon-no-reference.json"}
SHIPPED: dict[str, dict] = {
    "tiny-math-600": {  # all three rewards; spare reads the question's reference steps at decode time
        "key": "a-star N=5 T=1 top_p=0.9 spare", "strategy": "a-star",
        "params": {"n": 5, "reward": "spare", "temperature": 1.0, "top_p": 0.9, "max_step_tokens": 40,
                   "max_expansions": 16},
        "layers": [{"layer": "generate", "n": 5, "temperature": 1.0, "top_p": 0.9, "step": "a line, at most 40 tokens"},
                   {"layer": "search", "technique": "a-star", "reward": "spare", "max_expansions": 16}]},
    "tiny-math-600-no-reference": {  # --rewards arith-step,probe: no reward that reads the question's steps
        "key": "reward-beam N=2 T=0.5 top_p=1 arith-step", "strategy": "reward-beam",
        "params": {"n": 2, "reward": "arith-step", "temperature": 0.5, "top_p": 1.0, "max_step_tokens": 40,
                   "beam_width": 2},
        "layers": [{"layer": "generate", "n": 2, "temperature": 0.5, "top_p": 1.0, "step": "a line, at most 40 tokens"},
                   {"layer": "search", "technique": "reward-beam", "reward": "arith-step", "beam_width": 2}]},
}


def architecture_for(config: str, lm=None) -> dict:
    """The architecture `config` names: "found" = archon.json beside the model; else a shipped one."""
    if config in SHIPPED:
        return SHIPPED[config]
    if config != "found":
        raise ValueError(f"`config` must be found or one of {', '.join(SHIPPED) or '(none shipped)'}, got {config!r}")
    from decoding.models import file_beside

    path = file_beside(lm.loaded, ARCHON_FILE) if lm is not None and hasattr(lm, "loaded") else None
    if path is None or not path.exists():
        name = getattr(lm, "name", "this model")
        raise ValueError(f"`config` found needs {ARCHON_FILE} beside the model, and {name!r} has none: run "
                         f"`python -m decoding.scaling.archon search --model {name} --out <its folder>/{ARCHON_FILE}`, "
                         f"or pick a shipped one ({', '.join(SHIPPED) or 'none'})")
    return checked(json.loads(path.read_text())["architecture"], str(path))


def checked(arch: dict, where: str) -> dict:
    """`arch` if it names a scaling strategy other than archon with parameters that strategy accepts."""
    from decoding.run import make_params

    strategy = arch.get("strategy") if isinstance(arch, dict) else None
    if not isinstance(strategy, str) or strategy == "archon" or get_strategy(strategy).family != "scaling":
        raise ValueError(f"{where}: an architecture must name a scaling strategy other than archon, got {strategy!r}")
    make_params(strategy, arch.get("params"))  # ValueError naming a bad parameter
    return arch


def describe(arch: dict) -> str:
    """One line: the layers, first to last."""
    parts = []
    for layer in arch.get("layers", []):
        rest = ", ".join(f"{k} {v}" for k, v in layer.items() if k != "layer")
        parts.append(f"[{layer['layer']}: {rest}]")
    return " -> ".join(parts) or f"{arch['strategy']} {arch['params']}"
