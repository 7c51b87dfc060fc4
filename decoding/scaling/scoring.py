"""How the scaling methods score a step: the reward registry (one name per reward) and the
helpers around it (LM judge, token bans for hard constraints, aggregating step rewards).

Each reward registers a builder  build(params, policy: LM) -> (reward, extra LMs)  (params: the
method's `ScalingParams`; the reward's own knobs are `params.own`, declared by the dataclass it
registers with, namespaced `<reward>.<field>` outside) where the extra LMs' calls count as the run's
forward passes. Rewards are `decoding.scaling.rewards` classes (or a hub PRM); the names here are the
ones `--set reward=NAME` takes.

A reward's own parameters are checked when the parameters are made, before any model work
(`check_reward_params`): a rule reward (capability `rule=True`: it needs no model) is built once (its
class validates them); a reward that needs a model declares a `precheck(params)` capability that checks
the model id it will load (without loading it). Every check raises ValueError naming the field, the
value (short) and what is allowed.
"""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from decoding import bibliography as bib
from decoding.papers import Uncited
from decoding.errors import short_repr
from decoding.params import Params, param
from decoding.registry import Registry
from decoding.remote.lm import RemoteLM
from decoding.remote.source import is_remote
from decoding.scaling import rewards as rw

NEUTRAL = 0.5  # reward of a step an outcome-only reward cannot judge yet (weight logit 0)
# name -> build(params, policy) -> (reward, extra LMs). Capabilities a reward declares when it registers:
#   rule      it needs no model: built (so checked) when the parameters are made
#   precheck  check(params) of what a reward that needs a model can check before loading it (its model id)
#   reads_reference  it scores against the family's `reference` (the tab shows that field with it)
REWARDS: Registry[Callable] = Registry("reward", capabilities={"rule": False, "precheck": None,
                                                               "reads_reference": False})


def rule(name: str, help: str, params: type | None = None, **capabilities):
    """Register a programmatic reward: it needs no model and is checked with the parameters."""
    return REWARDS.register(name, help=help, rule=True, **({"params": params} if params else {}), **capabilities)


def _hard(**kw):
    return param(True, help="A violation gives weight 0 (true) or lowers the weight (false).", **kw)


@dataclass(frozen=True)
class ForbidLetterParams(Params):
    letter: str = param("e", note="a letter", help="No word may contain it (hard: masked while sampling).")
    hard: bool = _hard()


@dataclass(frozen=True)
class MaxWordLengthParams(Params):
    max_word_length: int = param(5, low=1, high=40, help="Letters per word at most.")
    hard: bool = _hard()


@dataclass(frozen=True)
class RequiredWordsParams(Params):
    words: str = param("", note="word,word", help="Words the answer must contain, comma-separated.")
    hard: bool = _hard()


@dataclass(frozen=True)
class JudgeParams(Params):
    judge_model: str = param("", note="name or hub id", help="The model asked 'is this step correct?' (empty = the "
                                                             "policy itself).")


@dataclass(frozen=True)
class PRMParams(Params):
    prm_model: str = param("Qwen/Qwen2.5-Math-PRM-7B", note="hub id",
                           help="A process reward model from the hub (needs internet).")


@rule("arith-step", "process reward: 0.05 + 0.9 x the share of 'a op b = c' in the newest step that are right (0.5 if none)",
      papers=(bib.PURI_2025,))
def _arith_step(params: Params, policy=None):
    return rw.ArithmeticStepChecker(floor=0.05, ceiling=0.95, neutral=0.5), []


@rule("arith-lastdigit", "misspecified on purpose: like arith-step but checks only each result's last digit "
                         "(a slipped carry passes): shows reward hacking",
      papers=Uncited("a checker of ours, misspecified on purpose to show reward hacking"))
def _arith_lastdigit(params: Params, policy=None):
    return rw.LastDigitChecker(floor=0.05, ceiling=0.95, neutral=0.5), []


@rule("spare", "reference-guided process reward (SPARE): each step must match the reference solution's step in "
               "the same place (tiny-math questions: read from the question)", papers=(bib.RIZVI_2025,))
def _spare(params: Params, policy=None):
    return rw.ReferenceStepChecker(), []


@rule("final-answer", "outcome reward: 1 if the final answer equals `reference` (an oracle), 0 otherwise",
      reads_reference=True, papers=(bib.COBBE_2021,))
def _final_answer(params: Params, policy=None):
    if not params.reference.strip():
        raise ValueError("reward final-answer needs `reference`, the expected number (e.g. --set reference=42)")
    return rw.FinalAnswerChecker(params.reference), []


@rule("forbid-letter", "constraint: no word may contain `letter` (hard: masked while sampling; soft: share of clean words)",
      ForbidLetterParams, papers=(bib.LEW_2023,))
def _forbid_letter(params: Params, policy=None):
    return rw.ForbiddenLetter(params.own.letter, params.own.hard), []


@rule("max-word-length", "constraint: every word at most `max_word_length` letters (hard: weight 0 when broken)",
      MaxWordLengthParams, papers=(bib.LEW_2023,))
def _max_word_length(params: Params, policy=None):
    return rw.MaxWordLength(params.own.max_word_length, params.own.hard), []


@rule("required-words", "constraint: the text must contain every word of `words`", RequiredWordsParams,
      papers=(bib.LEW_2023,))
def _required_words(params: Params, policy=None):
    if not params.own.words.strip():
        raise ValueError("reward required-words needs `words`, comma-separated (e.g. --set words=sun,moon)")
    words = tuple(w.strip() for w in params.own.words.split(",") if w.strip())
    return rw.RequiredWords(words, params.own.hard), []


def _lm_judge_check(params: Params) -> None:
    from decoding.models import check_loadable

    judge = params.own.judge_model
    if judge.strip() and not is_remote(judge):  # remote: `validate_request` says why not
        check_loadable(judge, "lm-judge.judge_model")


@REWARDS.register("lm-judge", help="LM as judge: P(Yes) / (P(Yes) + P(No)) of `judge_model` asked whether the step is correct",
                  params=JudgeParams, precheck=_lm_judge_check, papers=(bib.PURI_2025,))
def _lm_judge(params: Params, policy):
    from decoding.diffusion.lm import DiffusionLM
    from decoding.run import as_lm

    judge_model = params.own.judge_model.strip()
    judge_lm = policy if not judge_model else as_lm(judge_model)
    if isinstance(judge_lm, RemoteLM):
        raise ValueError("lm-judge reads the judge's next-token distribution, which a remote engine does not send; "
                         "set `judge_model` to a local model (e.g. smollm2-135m)")
    if isinstance(judge_lm, DiffusionLM):
        raise ValueError(f"`judge_model` {short_repr(judge_model, 80)} is a masked diffusion model; "
                         "the judge must be a causal (autoregressive) model")
    return rw.LMJudgeReward(lm_judge(judge_lm)), [] if judge_lm is policy else [judge_lm]


@REWARDS.register("probe", help="self-evaluation: a linear probe on the policy's hidden state predicts whether the "
                                 "solution will end right (trained per model; tiny-math ships one)",
                  papers=(bib.MANVI_2024,))
def _probe(params: Params, policy):
    from decoding.remote.lm import RemoteLM
    from decoding.scaling.probe import ProbeReward

    if isinstance(policy, RemoteLM):
        raise ValueError("reward probe reads the policy's hidden states, which a remote engine does not send; "
                         "use a rule reward (arith-step, spare) with a remote model")
    return ProbeReward(policy), []


@REWARDS.register("spare-prm", help="SPARE's trained PRM: P(the newest step is right) from a small head on the policy's "
                                     "own forward pass, trained on steps labelled against reference solutions; reads no "
                                     "reference (tiny-math ships one)", papers=(bib.RIZVI_2025,))
def _spare_prm(params: Params, policy):
    from decoding.scaling.spare_prm import SparePRMReward

    if isinstance(policy, RemoteLM):
        raise ValueError("reward spare-prm reads the policy's hidden states, which a remote engine does not send; "
                         "use a rule reward (arith-step, spare) with a remote model")
    return SparePRMReward(policy), []


def _prm_check(params: Params) -> None:
    from decoding.models import check_loadable

    check_loadable(params.own.prm_model, "prm.prm_model")


@REWARDS.register("prm", help="a hub process reward model (`prm_model`, e.g. Qwen2.5-Math-PRM-7B; needs internet and a GPU)",
                  params=PRMParams, precheck=_prm_check, papers=(bib.ZHANG_2025, bib.PURI_2025))
def _prm(params: Params, policy):
    from decoding.scaling.prm import HubPRM

    prm = HubPRM.load(params.own.prm_model)
    return prm, [prm]


@rule("none", "a constant reward: weights stay uniform, every method becomes plain sampling",
      papers=Uncited("a constant: the baseline of no reward"))
def _none(params: Params, policy=None):
    return ConstantReward(), []


def build_reward(params: Params, policy) -> tuple[object, list]:
    """(reward, extra LMs whose calls count as this run's forward passes)."""
    return REWARDS.get(params.reward)(params, policy)


def check_reward_params(params: Params) -> None:
    """Check the chosen reward's own parameters before any model work: build a rule reward once (its class
    validates them), or run the precheck of a reward that needs a model."""
    try:
        if REWARDS.capability(params.reward, "rule"):
            build_reward(params, None)
        elif REWARDS.capability(params.reward, "precheck") is not None:
            REWARDS.capability(params.reward, "precheck")(params)
    except ValueError as error:  # a reward class names its own field: say whose it is
        message = str(error)
        for name in (f.name for f in dataclasses.fields(params.own)):
            if message.startswith(f"`{name}`"):
                raise ValueError(f"`{params.reward}.{name}`" + message[len(name) + 2:]) from None
        raise


def reward_help() -> dict[str, str]:
    return {e.name: e.help for e in REWARDS.entries.values()}


class ConstantReward:
    """reward=none: every step scores 1 (weights stay uniform; methods reduce to plain sampling)."""

    name = "none"

    def score(self, question, steps, final):
        return rw.RewardResult(1.0, False, "no reward")


def lm_judge(lm) -> callable:
    """prompt -> P(Yes) / (P(Yes) + P(No)) of `lm`'s next token after the judging prompt.

    Normalised over the two answers because a small model spreads most mass elsewhere; the
    probability the judge gives to "Yes" relative to "No" is what ranks particles.
    """
    vocab = {}
    for word in ("Yes", " Yes", "yes", "No", " No", "no"):
        ids = lm.tokenizer(word, add_special_tokens=False).input_ids
        if len(ids) == 1:
            vocab.setdefault(word.strip().lower(), set()).add(ids[0])
    if "yes" not in vocab or "no" not in vocab:
        raise ValueError(f"the judge {lm.name}'s tokenizer has no single-token Yes/No")
    yes, no = sorted(vocab["yes"]), sorted(vocab["no"])

    def judge(prompt: str) -> float:
        ids, _, _ = lm.encode_prompt(prompt, chat=True)
        probs = torch.softmax(lm.forward(torch.tensor([ids]), last_only=True).logits[0, -1], -1)  # (V,)
        p_yes, p_no = float(probs[yes].sum()), float(probs[no].sum())
        return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else NEUTRAL

    return judge


def banned_tokens(reward, lm) -> torch.Tensor | None:
    """(V,) bool mask of tokens a hard forbidden-letter constraint can never accept, else None."""
    if not isinstance(reward, rw.ForbiddenLetter) or not reward.hard:
        return None
    if isinstance(lm, RemoteLM):
        raise ValueError("a hard forbid-letter constraint masks tokens while sampling, which needs the model's "
                         "logits; with a remote engine set hard=false (the reward then scores clean words)")
    letter = reward.letter.lower()
    cached = getattr(lm, "_banned_by_letter", {})
    if letter in cached:
        return cached[letter]
    banned = torch.zeros(lm.vocab_size, dtype=torch.bool)
    special = set(lm.tokenizer.all_special_ids) | set(lm.stop_ids)
    for token_id in range(min(lm.vocab_size, len(lm.tokenizer))):
        if token_id not in special and letter in lm.token_text(token_id).lower():
            banned[token_id] = True
    lm._banned_by_letter = cached | {letter: banned}
    return banned


def aggregate(rewards: list[float], how: str) -> float:
    if not rewards:
        return NEUTRAL
    if how == "last":
        return rewards[-1]
    if how == "min":
        return min(rewards)
    if how == "mean":
        return sum(rewards) / len(rewards)
    return math.prod(rewards)
