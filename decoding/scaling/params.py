"""Parameters of the scaling methods: the budget, the reward, sampling and the step shape.

`ScalingParams` holds what every method shares; each method's dataclass adds its own fields.
The reward names are the scoring registry's (`decoding.scaling.scoring.REWARDS`); a reward's own knobs
are declared with it there and travel as `params.own` (`<reward>.<field>` in a flat dict).
"""

from __future__ import annotations

from dataclasses import dataclass

from decoding.params import Params, own_params, param
from decoding.scaling import particles as pf
from decoding.scaling.scoring import REWARDS, check_reward_params

STEP_DELIMITERS = {"newline": "\n", "blank-line": "\n\n"}
AGGREGATES = ("last", "min", "mean", "product")


@dataclass(frozen=True)
class ScalingParams(Params):
    """Parameters every scaling method shares: budget, reward, sampling and step shape."""

    n: int = param(4, low=1, high=64, ui_high=16, label="N (particles)",
                   help="Particles / samples / beams decoded together: the budget.")
    reward: str = param("arith-step", plugins=REWARDS, help="What scores each step (list: python -m decoding list).")
    temperature: float = param(0.8, low=0.0, high=5.0, help="Token sampling temperature of every particle (0 = greedy).")
    top_p: float = param(0.95, low=0.0, high=1.0, low_inclusive=False, help="Nucleus mass kept for every token (1 = off).")
    step_delimiter: str = param("newline", choices=tuple(STEP_DELIMITERS), help="Where one reasoning step ends.")
    max_step_tokens: int = param(48, low=1, high=512, ui_high=128, label="max step tokens",
                                 help="A step also ends after this many tokens.")
    aggregate: str = param("min", choices=AGGREGATES, help="How a solution's step rewards make its score.")
    reference: str = param("", note="a number", help="The task's expected answer: final-answer's oracle (best-of-N "
                                                     "becomes pass@N) and the ✓/✗ of the final choice.")
    own: Params | None = own_params()  # the chosen reward's own knobs (`forbid-letter.letter`, ...)

    def __post_init__(self):
        super().__post_init__()
        check_reward_params(self)  # the reward's own parameters are checked now, not mid-run


@dataclass(frozen=True)
class BestOfNParams(ScalingParams):
    select: str = param("max", choices=("max", "softmax"), label="selection",
                        help="Pick the highest score, or draw from softmax(score / select_temperature).")
    select_temperature: float = param(0.1, low=1e-3, high=10.0, step=0.01, ui_high=2, label="selection temperature",
                                      help="select=softmax: lower = closer to the maximum.")


@dataclass(frozen=True)
class VoteParams(ScalingParams):
    weighted: bool = param(False, label="reward-weighted vote", help="Weight each answer's votes by its score.")
    shortest: float = param(1.0, low=0.0, high=1.0, low_inclusive=False, label="vote among the shortest",
                            help="Only this share of the complete answers votes, the shortest first (Think Deep, "
                                 "Think Fast: right answers tend to be shorter); 1 = every answer.")


@dataclass(frozen=True)
class RewardBeamParams(ScalingParams):
    beam_width: int = param(2, low=1, high=64, note="divides n", ui_high=16, label="beam width",
                            help="Each kept beam is copied this many times; n / beam_width are kept.")

    def __post_init__(self):
        super().__post_init__()
        if self.n % self.beam_width:
            raise ValueError(f"`n` ({self.n}) must be a multiple of `beam_width` ({self.beam_width})")


@dataclass(frozen=True)
class ParticleFilterParams(ScalingParams):
    reward_temperature: float = param(1.0, low=1e-3, high=100.0, step=0.05, ui_high=5, label="reward temperature T",
                                      help="Weights = softmax(logit(reward) / this): lower = greedier.")
    resampling: str = param("multinomial", choices=pf.RESAMPLE_METHODS, label="resampling",
                            help="How N particles are drawn from the weights.")
    ess_threshold: float = param(0.0, low=0.0, high=1.0, step=0.05, label="ESS threshold",
                                 help="Resample only when ESS < this x N (0 = every step, as the paper).")
    entropic: float = param(0.0, low=0.0, high=1.0, step=0.05, label="entropic (our ePF variant)",
                            help="The project's own budget-free variant of ePF's annealing (not the paper's rule, "
                                 "that is `annealing`): flatten weights to at least this fraction of the maximum "
                                 "entropy (0 = off).")
    annealing: str = param("none", choices=pf.ANNEALING_METHODS, label="entropic annealing (ePF)",
                           help="ePF's Entropic Annealing as the authors' code (its_hub) writes it: while ESS < 0.5 N "
                                "and t < annealing_steps / 2, resample from softmax(logit(r) / (T tau)), "
                                "tau = max(1, (1 - t/T_max) N / ESS) (ess) or max(1, 1 / (H + (1 - H) t/T_max)) "
                                "(entropy, H = weight entropy / log N).")
    annealing_steps: int = param(8, low=1, high=256, ui_high=32, label="annealing T_max",
                                 help="annealing: T_max of the progress t / T_max (its_hub: its step cap).")
    lookahead: float = param(0.0, low=0.0, high=10.0, step=0.1, ui_high=2, label="look-ahead (our ePF variant)",
                             help="The project's own variant of ePF's look-ahead (the paper's formula was not read): "
                                  "weight of the reward of one more sampled step (0 = off; costs a step per step).")
    select: str = param("best", choices=("best", "vote"), label="final choice",
                        help="Final answer: the highest weight, or the weighted majority.")

    def __post_init__(self):
        super().__post_init__()
        if self.entropic > 0 and self.annealing != "none":
            raise ValueError(f"`annealing` must be none when `entropic` > 0 (choose the paper's annealing or the "
                             f"project's variant), got {self.annealing!r} with entropic={self.entropic}")


@dataclass(frozen=True)
class FirstFinishParams(ScalingParams):
    chunk_tokens: int = param(8, low=1, high=256, ui_high=64, label="chunk tokens",
                              help="Tokens each sample generates between two pictures.")
