"""The strategy registry: names the CLI and the UI offer, their parameter dataclasses, their code.

A strategy is `fn(ctx: RunContext, params, outcome: Outcome) -> Iterator[Event]`. Later labs
(speculative, scaling, diffusion) register theirs here under new names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from decoding import sampling
from decoding.strategies import autoregressive as ar
from decoding.strategies import diffusion
from decoding.strategies import scaling
from decoding.strategies import speculative as spec


@dataclass(frozen=True)
class StrategyInfo:
    name: str  # CLI / UI name
    fn: Callable  # the generator function
    params_cls: type  # frozen dataclass of its parameters (validated in __post_init__)
    help: str  # one line for `list` and the UI
    family: str = "token"  # which lab / view shows it
    uses_seed: bool = False  # whether the seed changes the result


STRATEGIES: dict[str, StrategyInfo] = {
    s.name: s
    for s in (
        StrategyInfo("greedy", ar.greedy, ar.GreedyParams, "always the most probable token"),
        StrategyInfo("sample", ar.sample, sampling.SamplingParams,
                     "sample after temperature, penalties and truncation (top-k/p, min-p, typical, epsilon, eta, top-H)",
                     uses_seed=True),
        StrategyInfo("mirostat", ar.mirostat, sampling.MirostatParams,
                     "mirostat v2: truncate to keep the surprise near a target tau", uses_seed=True),
        StrategyInfo("beam", ar.beam, ar.BeamParams, "beam search: keep the num_beams best partial sequences",
                     family="beam"),
        StrategyInfo("contrastive", ar.contrastive, ar.ContrastiveParams,
                     "contrastive search: top-k re-ranked by probability minus similarity to the context"),
        StrategyInfo("speculative", spec.speculative, spec.SpeculativeParams,
                     "speculative decoding: a drafter proposes a token tree, the target verifies it in one pass",
                     family="speculative", uses_seed=True),
        StrategyInfo("best-of-n", scaling.best_of_n, scaling.BestOfNParams,
                     "N samples as one batch; the one the reward scores highest wins", family="scaling", uses_seed=True),
        StrategyInfo("majority-vote", scaling.majority_vote, scaling.VoteParams,
                     "self-consistency: N samples vote with their final answers (optionally reward-weighted)",
                     family="scaling", uses_seed=True),
        StrategyInfo("reward-beam", scaling.reward_beam, scaling.RewardBeamParams,
                     "beam search over reasoning steps: keep the N/beam_width best by reward, copy, expand",
                     family="scaling", uses_seed=True),
        StrategyInfo("particle-filter", scaling.particle_filter, scaling.ParticleFilterParams,
                     "particle filtering (Puri et al. 2025): weight steps by reward, resample, repeat",
                     family="scaling", uses_seed=True),
        StrategyInfo("first-finish", scaling.first_finish, scaling.FirstFinishParams,
                     "First Finish Search: N samples in lockstep, the first to finish is the answer",
                     family="scaling", uses_seed=True),
        StrategyInfo("diffusion", diffusion.diffusion, diffusion.DiffusionParams,
                     "masked diffusion LM: unmask a canvas of masks over steps (LLaDA / Dream / Fast-dLLM / LocalLeap)",
                     family="diffusion", uses_seed=True),
    )
}


def get_strategy(name: str) -> StrategyInfo:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


# Range and one-line help of every parameter, for `python -m decoding list` and the UI.
_EXTRA_HELP = {
    ("beam", "num_beams"): ("[1, 32]", "How many partial sequences stay alive after each step."),
    ("beam", "length_penalty"): ("[-5, 5]", "Finished scores are divided by length ** this: above 0 favours longer answers."),
    ("contrastive", "top_k"): ("[2, 64]", "How many likely candidates are re-ranked at each step."),
    ("contrastive", "penalty_alpha"): ("[0, 1]", "Weight of the penalty for repeating the context (0 = greedy)."),
    ("speculative", "drafter"): ("model|early-exit|prompt-lookup|token-recycling", "Who proposes the draft tokens."),
    ("speculative", "draft_model"): ("name or hub id", "drafter=model: a smaller model with the target's tokenizer."),
    ("speculative", "tree"): ("chain|static|dynamic", "Shape of the draft: one chain, a full tree, or best-first by draft probability."),
    ("speculative", "draft_length"): ("[1, 16]", "Draft tokens per chain / maximum tree depth."),
    ("speculative", "width"): ("[1, 8]", "Children per node (static) or nodes kept per level (dynamic)."),
    ("speculative", "node_budget"): ("[1, 64]", "At most this many draft tokens per round."),
    ("speculative", "adaptive"): ("true|false", "Chains: lengthen after a fully accepted round, shorten otherwise."),
    ("speculative", "exit_layer"): ("[0, layers-1]", "early-exit: draft with the first L layers; 0 picks L each round (DEL)."),
    ("speculative", "ngram"): ("[1, 8]", "prompt-lookup: longest n-gram matched in the context."),
    ("speculative", "temperature"): ("[0, 5]", "0 verifies greedily; above 0 speculative sampling at this temperature."),
    **{(name, key): value for name in ("best-of-n", "majority-vote", "reward-beam", "particle-filter", "first-finish")
       for key, value in {
           "n": ("[1, 64]", "Particles / samples / beams decoded together: the budget."),
           "reward": ("|".join(scaling.REWARD_NAMES), "What scores each step (list: python -m decoding list)."),
           "temperature": ("[0, 5]", "Token sampling temperature of every particle (0 = greedy)."),
           "top_p": ("(0, 1]", "Nucleus mass kept for every token (1 = off)."),
           "step_delimiter": ("newline|blank-line", "Where one reasoning step ends."),
           "max_step_tokens": ("[1, 512]", "A step also ends after this many tokens."),
           "aggregate": ("last|min|mean|product", "How a solution's step rewards make its score."),
           "letter": ("a letter", "forbid-letter: no word may contain it (hard: masked while sampling)."),
           "max_word_length": ("[1, 40]", "max-word-length: letters per word at most."),
           "words": ("word,word", "required-words: words the answer must contain."),
           "reference": ("a number", "final-answer: the expected answer (an oracle: best-of-N becomes pass@N)."),
           "hard": ("true|false", "Constraints: a violation gives weight 0 (true) or lowers it (false)."),
           "judge_model": ("name or hub id", "lm-judge: the model asked 'is this step correct?' (empty = the same model)."),
           "prm_model": ("hub id", "prm: a process reward model from the hub (needs internet)."),
       }.items()},
    ("best-of-n", "select"): ("max|softmax", "Pick the highest score, or draw from softmax(score / select_temperature)."),
    ("best-of-n", "select_temperature"): ("[0.001, 10]", "select=softmax: lower = closer to the maximum."),
    ("majority-vote", "weighted"): ("true|false", "Weight each answer's votes by its score."),
    ("reward-beam", "beam_width"): ("divides n", "Each kept beam is copied this many times; n / beam_width are kept."),
    ("particle-filter", "reward_temperature"): ("(0, 100]", "Weights = softmax(logit(reward) / this): lower = greedier."),
    ("particle-filter", "resampling"): ("multinomial|systematic", "How N particles are drawn from the weights."),
    ("particle-filter", "ess_threshold"): ("[0, 1]", "Resample only when ESS < this x N (0 = every step, as the paper)."),
    ("particle-filter", "entropic"): ("[0, 1]", "ePF: flatten weights to at least this fraction of the maximum entropy."),
    ("particle-filter", "select"): ("best|vote", "Final answer: the highest weight, or the weighted majority."),
    ("first-finish", "chunk_tokens"): ("[1, 256]", "Tokens each sample generates between two pictures."),
    ("diffusion", "steps"): ("0 or [1, length]", "Denoising steps over the whole canvas (0 = one per token); unused with a threshold."),
    ("diffusion", "block_length"): ("0 or divides length", "Semi-autoregressive blocks decoded left to right (0 = one block)."),
    ("diffusion", "remasking"): ("|".join(diffusion.REMASKING), "Which predictions are committed first: random key, top-1 prob, top1-top2 margin, -entropy."),
    ("diffusion", "threshold"): ("0 or (0, 1]", "Fast-dLLM: commit every token whose confidence >= this (0 = fixed schedule); localleap's relaxed threshold."),
    ("diffusion", "sampler"): ("|".join(diffusion.SAMPLERS), "fixed: schedule or threshold; localleap: anchors plus relaxed neighbours."),
    ("diffusion", "radius"): ("[0, 64]", "localleap: neighbours within this many positions of an anchor may leap."),
    ("diffusion", "anchor_threshold"): ("(0, 1]", "localleap: confidence that makes a masked position an anchor."),
    ("diffusion", "temperature"): ("[0, 5]", "Gumbel-max token draw at this temperature (0 = argmax)."),
    ("diffusion", "cache"): ("|".join(diffusion.CACHES), "delayed: dKV-Cache, recompute only masked and just-committed positions."),
    ("diffusion", "refresh_interval"): ("[1, 64]", "cache=delayed: a full forward every this many steps (1 = no saving)."),
    ("mirostat", "tau"): None,
    ("mirostat", "eta"): None,
}


def param_specs(strategy: str) -> list[dict]:
    """[{name, type, default, range, help}] for the strategy's parameters, in field order."""
    import dataclasses

    info = get_strategy(strategy)
    rows = []
    for f in dataclasses.fields(info.params_cls):
        key = f"mirostat_{f.name}" if strategy == "mirostat" else f.name
        if key in sampling.PARAMETERS and (strategy, f.name) not in _EXTRA_HELP or _EXTRA_HELP.get((strategy, f.name), 0) is None:
            spec = sampling.PARAMETERS[key]
            range_text, help_text = spec.range_text(), spec.help
        else:
            range_text, help_text = _EXTRA_HELP[(strategy, f.name)]
        rows.append({"name": f.name, "type": f.type if isinstance(f.type, str) else f.type.__name__,
                     "default": f.default, "range": range_text, "help": help_text})
    return rows
