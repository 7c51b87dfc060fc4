"""Parameters of the scaling methods: the budget, the reward, sampling and the step shape.

`ScalingParams` holds what every method shares; each method's dataclass adds its own fields.
The reward names are the scoring registry's (`decoding.scaling.scoring.REWARDS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from decoding.params import Params, param
from decoding.scaling import particles as pf
from decoding.scaling.scoring import REWARDS, check_reward_params

STEP_DELIMITERS = {"newline": "\n", "blank-line": "\n\n"}
AGGREGATES = ("last", "min", "mean", "product")


@dataclass(frozen=True)
class ScalingParams(Params):
    """Parameters every scaling method shares: budget, reward, sampling and step shape."""

    n: int = param(4, low=1, high=64, help="Particles / samples / beams decoded together: the budget.")
    reward: str = param("arith-step", choices=REWARDS.names, help="What scores each step (list: python -m decoding list).")
    temperature: float = param(0.8, low=0.0, high=5.0, help="Token sampling temperature of every particle (0 = greedy).")
    top_p: float = param(0.95, low=0.0, high=1.0, low_inclusive=False, help="Nucleus mass kept for every token (1 = off).")
    step_delimiter: str = param("newline", choices=tuple(STEP_DELIMITERS), help="Where one reasoning step ends.")
    max_step_tokens: int = param(48, low=1, high=512, help="A step also ends after this many tokens.")
    aggregate: str = param("min", choices=AGGREGATES, help="How a solution's step rewards make its score.")
    letter: str = param("e", note="a letter", help="forbid-letter: no word may contain it (hard: masked while sampling).")
    max_word_length: int = param(5, low=1, high=40, help="max-word-length: letters per word at most.")
    words: str = param("", note="word,word", help="required-words: words the answer must contain.")
    reference: str = param("", note="a number", help="final-answer: the expected answer (an oracle: best-of-N becomes pass@N).")
    hard: bool = param(True, help="Constraints: a violation gives weight 0 (true) or lowers it (false).")
    judge_model: str = param("", note="name or hub id",
                             help="lm-judge: the model asked 'is this step correct?' (empty = the same model).")
    prm_model: str = param("Qwen/Qwen2.5-Math-PRM-7B", note="hub id",
                           help="prm: a process reward model from the hub (needs internet).")

    def __post_init__(self):
        super().__post_init__()
        check_reward_params(self)  # the reward's own parameters are checked now, not mid-run


@dataclass(frozen=True)
class BestOfNParams(ScalingParams):
    select: str = param("max", choices=("max", "softmax"),
                        help="Pick the highest score, or draw from softmax(score / select_temperature).")
    select_temperature: float = param(0.1, low=1e-3, high=10.0, help="select=softmax: lower = closer to the maximum.")


@dataclass(frozen=True)
class VoteParams(ScalingParams):
    weighted: bool = param(False, help="Weight each answer's votes by its score.")


@dataclass(frozen=True)
class RewardBeamParams(ScalingParams):
    beam_width: int = param(2, low=1, high=64, note="divides n",
                            help="Each kept beam is copied this many times; n / beam_width are kept.")

    def __post_init__(self):
        super().__post_init__()
        if self.n % self.beam_width:
            raise ValueError(f"`n` ({self.n}) must be a multiple of `beam_width` ({self.beam_width})")


@dataclass(frozen=True)
class ParticleFilterParams(ScalingParams):
    reward_temperature: float = param(1.0, low=1e-3, high=100.0,
                                      help="Weights = softmax(logit(reward) / this): lower = greedier.")
    resampling: str = param("multinomial", choices=pf.RESAMPLE_METHODS, help="How N particles are drawn from the weights.")
    ess_threshold: float = param(0.0, low=0.0, high=1.0,
                                 help="Resample only when ESS < this x N (0 = every step, as the paper).")
    entropic: float = param(0.0, low=0.0, high=1.0,
                            help="ePF: flatten weights to at least this fraction of the maximum entropy.")
    lookahead: float = param(0.0, low=0.0, high=10.0,
                             help="ePF look-ahead: weight of the reward of one more sampled step "
                                  "(0 = off; costs a step per step).")
    select: str = param("best", choices=("best", "vote"), help="Final answer: the highest weight, or the weighted majority.")


@dataclass(frozen=True)
class FirstFinishParams(ScalingParams):
    chunk_tokens: int = param(8, low=1, high=256, help="Tokens each sample generates between two pictures.")
