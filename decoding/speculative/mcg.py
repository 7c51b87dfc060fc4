"""The rate-limited Markov coding game of Ebrahimi, Chen and Khisti 2024 ("Minimum Entropy Coupling with
Bottleneck", NeurIPS 2024, their section on Markov coding games; the game itself is Sokota et al. 2022,
"Communicating via Markov Decision Processes"), on a small grid (pure functions).

A source holds a message M (prior `prior`) and may send the agent only a code T with H(T) <= R: the EBIM
encoder of `decoding.speculative.mecb`. The agent plays an episode of a small MDP. Its policy is fixed in
advance: the maximum-entropy policy of temperature tau (soft value iteration), which trades reward for
randomness. At every step it couples the receiver's current belief over T with the policy's action law
(greedy minimum-entropy coupling, Kocaoglu et al. 2017) and draws its action from the coupling's row of its
own code: the action's law, seen from outside, is exactly the policy's (the coupling's columns sum to it), so
the message costs no reward; it rides on the policy's randomness. The receiver, who knows the policy and the
coupling, sees the action and sets its belief to the coupling's column: P(T = t | a) = C[t, a] / pi(a). At the
end it decodes the likeliest message of the likeliest code. Lower R: less to send, so a less random (higher
reward) policy suffices, but messages that share a code cannot be told apart. Higher tau: more bits per step,
lower reward.

The MDP (`Grid`): a size x size grid, start top-left, goal bottom-right; moves up / down / left / right
(a move into the wall stays put); reward -1 per move; the episode ends at the goal or after `max_steps`.

Glossary
    message       one of len(prior) symbols, drawn from the prior.   code  its EBIM code word t (a group).
    belief        the receiver's law over codes after each action (the agent knows it too).
    temperature   tau of the soft policy, in reward units: pi(a|s) ~ exp(Q(s, a) / tau).
    accuracy      P(decoded message = message) over episodes;  return  the episode's total reward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from decoding.speculative.coupling import greedy_coupling
from decoding.speculative.mecb import check_distribution, check_rate, encoder_groups

ACTIONS = ("↑", "↓", "←", "→")  # up, down, left, right
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))  # (row, column) steps


@dataclass(frozen=True)
class Grid:
    size: int = 4  # cells per side; start (0, 0), goal (size - 1, size - 1)
    max_steps: int = 12  # the episode's length when the goal is not reached
    gamma: float = 0.95  # discount of the soft value iteration

    def __post_init__(self):
        if not isinstance(self.size, int) or not 2 <= self.size <= 8:
            raise ValueError(f"`size` must be an integer in [2, 8], got {self.size!r}")
        if not isinstance(self.max_steps, int) or not 1 <= self.max_steps <= 64:
            raise ValueError(f"`max_steps` must be an integer in [1, 64], got {self.max_steps!r}")

    @property
    def goal(self) -> int:
        return self.size * self.size - 1

    def step(self, state: int, action: int) -> int:
        r, c = divmod(state, self.size)
        dr, dc = MOVES[action]
        r, c = min(max(r + dr, 0), self.size - 1), min(max(c + dc, 0), self.size - 1)
        return r * self.size + c


DEFAULT_GRID = Grid()


def soft_policy(grid: Grid, temperature: float, iterations: int = 200) -> list[list[float]]:
    """pi(a|s) for every state (S, A): soft value iteration, V(s) = tau log sum_a exp(Q(s, a) / tau),
    Q(s, a) = -1 + gamma V(s'), V(goal) = 0; pi = exp((Q - V) / tau)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"`temperature` must be a number > 0, got {temperature!r}")
    states = range(grid.size * grid.size)
    values = [0.0] * len(states)
    q = [[0.0] * len(ACTIONS) for _ in states]
    for _ in range(iterations):
        q = [[-1.0 + grid.gamma * values[grid.step(s, a)] for a in range(len(ACTIONS))] for s in states]
        values = [0.0 if s == grid.goal else _soft_max(q[s], temperature) for s in states]
    policy = []
    for s in states:
        top = _soft_max(q[s], temperature)
        row = [math.exp((x - top) / temperature) for x in q[s]]
        policy.append([x / sum(row) for x in row])
    return policy


def _soft_max(xs: list[float], tau: float) -> float:
    top = max(xs)
    return top + tau * math.log(sum(math.exp((x - top) / tau) for x in xs))


@dataclass(frozen=True)
class Episode:
    message: int
    groups: list[list[int]]  # the encoder: code word t is the group groups[t]
    code: int  # the message's code word
    states: list[int]  # the cells visited, the start first
    actions: list[int]  # indices into ACTIONS
    beliefs: list[list[float]]  # the receiver's law over codes: before the first action, then after each
    decoded: int  # the receiver's message
    ret: float  # the episode's return (-1 per move)

    @property
    def correct(self) -> bool:
        return self.decoded == self.message

    def message_beliefs(self, prior) -> list[list[float]]:
        """The receiver's law over messages at each point: P(m) = P(code of m) prior(m) / P_prior(code)."""
        prior = [float(x) for x in prior]
        mass = [sum(prior[m] for m in g) for g in self.groups]
        code_of = {m: t for t, g in enumerate(self.groups) for m in g}
        return [[b[code_of[m]] * prior[m] / mass[code_of[m]] if mass[code_of[m]] > 0 else 0.0
                 for m in range(len(prior))] for b in self.beliefs]


def play(message: int, prior, rate: float, temperature: float, generator: torch.Generator, grid: Grid = DEFAULT_GRID,
         policy: list[list[float]] | None = None, method: str = "greedy") -> Episode:
    """One episode: encode the message at `rate` (`method`: the EBIM encoder, Algorithm 1, or the uniform
    quantiser, Algorithm 5), act by coupling belief and policy, decode."""
    prior = check_distribution("prior", prior)
    if isinstance(message, bool) or not isinstance(message, int) or not 0 <= message < prior.numel():
        raise ValueError(f"`message` must be an integer in [0, {prior.numel() - 1}], got {message!r}")
    groups = encoder_groups(prior, check_rate(rate), method)
    code = next(t for t, g in enumerate(groups) if message in g)
    policy = policy or soft_policy(grid, temperature)
    belief = [sum(prior[m].item() for m in g) for g in groups]  # P(T), what the receiver knows at first
    state, states, actions, beliefs = 0, [0], [], [belief]
    while state != grid.goal and len(actions) < grid.max_steps:
        pi = policy[state]
        joint = greedy_coupling(belief, pi).tolist()  # (|T|, A): rows sum to the belief, columns to pi
        row = joint[code]
        action = _draw([x / belief[code] for x in row], generator)
        column = sum(joint[t][action] for t in range(len(groups)))  # = pi[action], up to rounding
        belief = [joint[t][action] / column for t in range(len(groups))]
        state = grid.step(state, action)
        states.append(state), actions.append(action), beliefs.append(belief)
    best_code = max(range(len(groups)), key=lambda t: belief[t])
    decoded = max(groups[best_code], key=lambda m: prior[m].item())
    return Episode(message, groups, code, states, actions, beliefs, decoded, -float(len(actions)))


def _draw(probs: list[float], generator: torch.Generator) -> int:
    u, total = torch.rand(1, generator=generator, dtype=torch.float64).item() * sum(probs), 0.0
    for i, p in enumerate(probs):
        total += p
        if u < total and p > 0:
            return i
    return max(range(len(probs)), key=lambda i: probs[i])


def evaluate(prior, rate: float, temperature: float, *, episodes: int = 64, seed: int = 0, grid: Grid = DEFAULT_GRID,
             method: str = "greedy") -> dict:
    """The paper's two numbers for one (rate, temperature): the receiver's accuracy and the mean return, over
    `episodes` messages drawn from the prior (one generator, seeded: the same seed gives the same numbers)."""
    prior = check_distribution("prior", prior)
    gen = torch.Generator().manual_seed(seed)
    policy = soft_policy(grid, temperature)
    runs = [play(int(torch.multinomial(prior, 1, generator=gen)), prior, rate, temperature, gen, grid, policy, method)
            for _ in range(episodes)]
    return {"rate": rate, "temperature": temperature, "method": method, "accuracy": sum(e.correct for e in runs) / episodes,
            "mean_return": sum(e.ret for e in runs) / episodes,
            "code_entropy": _entropy([sum(prior[m].item() for m in g) for g in runs[0].groups])}


def _entropy(probs: list[float]) -> float:
    return -sum(p * math.log2(p) for p in probs if p > 0)


def tradeoff(prior, rates, temperatures, *, episodes: int = 64, seed: int = 0, grid: Grid = DEFAULT_GRID,
             methods=("greedy",)) -> list[dict]:
    """`evaluate` for every encoder, rate and temperature: the paper's reward-vs-accuracy curves."""
    return [evaluate(prior, r, t, episodes=episodes, seed=seed, grid=grid, method=m)
            for m in methods for r in rates for t in temperatures]
