"""Inference-time scaling: N particles decoded as one batch, scored step by step, resampled.

    methods.py         the scaling strategies (best-of-N, majority vote, reward beam, particle filter,
                       First Finish) and their shared parameters
    astar.py           A*-decoding: best-first search over step prefixes (strategy a-star)
    refine.py          review, refine, repeat: rewrite the best solution from its first bad step
    specreason.py      step-level speculation: a drafter writes each step, the reward keeps it or the policy rewrites it
    adaptive.py        adaptive compute: waves of samples the policy's own self-evaluation token stops and prunes
                       (strategy adaptive, reward self-eval)
    archon.py          Archon: the space of compositions of these methods, and strategy archon (runs a found one)
    archon_search.py   Archon's search (ITAS): Bayesian optimisation under a token budget (python -m decoding.scaling.archon)
    particles.py       weights, ESS, resampling, lineage (pure functions)
    particle_batch.py  N particles as rows of one batched KV cache
    rewards.py         programmatic rewards: step checkers (arithmetic, last digit only, reference-guided
                       SPARE), constraints, final answers, LM judge
    prm.py             hub process reward models
    tasks.py           the shipped arithmetic task set (SmolLM2's word problems)
    math_tasks.py      tiny-math's generated multi-step problems, their checker, the training noise
    math_eval.py       tiny-math's evaluation: greedy, pass@1, oracle pass@k, step errors by difficulty

A new method is one module here (a new reward: one registration in `scoring.REWARDS` with its own
parameter dataclass). Its dataclass subclasses `params.ScalingParams` and adds its own fields; its
function drives a `run.ScalingRun` (`extend` a step for every particle, `event(...)` to yield the
step's picture, `finish(...)` to choose) with the public helpers `methods.independent_samples` (N
samples, no selection until the end), `run.score_weights` (weights from the particles' scores) and
`run.identity_ancestors` (a step without resampling). See `methods.best_of_n`, the shortest.
"""

MENU_ORDER = ("methods", "astar", "refine", "specreason")  # first in the menu, in this order (`decoding.discover`)
