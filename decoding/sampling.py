"""Sampling: logits transforms (truncation rules) and the pure decisions made from logits.

Papers and reference implementations followed (definitions checked against, never copied from,
transformers' `generation/logits_process.py`, llama.cpp's `llama-sampling.cpp` and the Top-H
authors' repository ErfanBaghaei/Top-H-Decoding):

- temperature, top-k: Ackley et al. 1985; Fan et al. 2018, "Hierarchical Neural Story Generation".
- top-p (nucleus): Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration".
- min-p: Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling for Creative and Coherent LLM Outputs".
- typical-p: Meister et al. 2023, "Locally Typical Sampling" (TACL).
- epsilon / eta cutoff: Hewitt et al. 2022, "Truncation Sampling as Language Model Desmoothing".
- repetition penalty: Keskar et al. 2019, "CTRL" (as implemented by transformers).
- Top-H: Baghaei Potraghloo et al. 2025, "Top-H Decoding: Adapting the Creativity and Coherence with
  Bounded Entropy in Text Generation" (NeurIPS 2025, arXiv:2509.02510).
- mirostat v2: Basu et al. 2021, "Mirostat: A Neural Text Decoding Algorithm that Directly
  Controls Perplexity" (ICLR), in the simplified "v2" form of llama.cpp.
- contrastive search: Su et al. 2022, "A Contrastive Framework for Neural Text Generation".
- beam search: one expansion step of the classic algorithm (Graves 2012; Sutskever et al. 2014).

Glossary
- logits: unnormalised scores, one per vocabulary token; -inf means "removed".
- probs / logprobs: softmax(logits) and its log (natural log unless a name says bits).
- surprise: -log p of a token; in bits (-log2 p) for mirostat.
- entropy H: expected surprise, sum_i -p_i log p_i, in nats; 0 log 0 counts as 0.
- truncation: removing unlikely tokens before sampling; the survivors are the kept set.
- top-1: the most probable token (argmax of the logits) of a row.
- transform: a function (logits, input_ids) -> new logits; transforms are applied in a chain.
- mu: mirostat's current surprise cutoff in bits, updated after every sampled token.
- beam: one partial sequence kept alive by beam search, scored by its summed logprobs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace
from typing import ClassVar, Iterable, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from decoding.errors import short_repr
from decoding.params import ParamSpec, Params, param

NEG_INF = float("-inf")
LN2 = math.log(2.0)


# --------------------------------------------------------------------------- probabilities


def log_softmax(logits: Tensor) -> Tensor:
    """Log-probabilities over the last dim, in float32; -inf logits stay -inf (a row needs a finite one)."""
    return torch.log_softmax(logits.float(), dim=-1)


def entropy(logits: Tensor) -> Tensor:
    """Entropy in nats of softmax(logits): (..., V) -> (...). Tokens at -inf contribute 0 (no NaN)."""
    logprobs = log_softmax(logits)  # (..., V)
    probs = logprobs.exp()  # (..., V)
    terms = torch.where(probs > 0, -probs * logprobs, torch.zeros_like(probs))  # 0 log 0 := 0
    return terms.sum(dim=-1)


def _keep(logits: Tensor, keep: Tensor, always: Tensor | None = None) -> Tensor:
    """New logits with -inf outside `keep` (B, V).

    The ids in `always` (B, 1) survive; by default that is every token tied with the top-1 logit
    (transformers' `min_tokens_to_keep` test `scores < topk(scores, 1)`), so a rule never cuts a
    token tied with one it keeps and the kept set does not depend on token order.
    """
    if always is None:
        keep = keep | (logits == logits.amax(dim=-1, keepdim=True))  # (B, V), a new tensor
    else:
        keep = keep.scatter(-1, always, True)  # (B, V), a new tensor
    return logits.masked_fill(~keep, NEG_INF)


# --------------------------------------------------------------------------- validation


def _check(knob_name: str, value, **active) -> None:
    """Raise ValueError naming the knob, `value` and the allowed range unless value is in range.

    The range is PARAMETERS[knob_name]'s (declared once); `active` narrows it where a transform
    exists only when its knob is on (TopK needs k >= 1, where the knob's 0 means "off"), or renames
    the value (`name="alpha"` for Top-H's)."""
    replace(PARAMETERS[knob_name], **active).check(value)


def _check_in(name: str, value, kind: type, low: float, high: float) -> None:
    """Raise ValueError naming `name`, `value` and [low, high] unless value is in it (a function argument's
    bound that depends on the call, such as the number of beams a score table allows)."""
    ParamSpec(name=name, type=kind, default=None, help="", low=low, high=high).check(value)


_INF = math.inf
MAX_TOP_K = 1 << 20  # more tokens than any vocabulary (gemma3's has 262,144): every int parameter is bounded
PARAMETERS: dict[str, ParamSpec] = {  # the sampling knobs, shared by `sample`, mirostat and the transforms
    s.name: s
    for s in [
        ParamSpec("temperature", float, 1.0, "Divides the logits: below 1 sharpens the distribution, above 1 flattens it.",
                  0.0, _INF, False, False),
        ParamSpec("top_k", int, 0, "Keep only the k most likely tokens (0 = off).", 0, MAX_TOP_K),
        ParamSpec("top_p", float, 1.0, "Keep the most likely tokens until their probabilities add up to p (1 = off).",
                  0.0, 1.0, False, True),
        ParamSpec("min_p", float, 0.0, "Drop tokens less likely than min_p times the top token's probability (0 = off).",
                  0.0, 1.0),
        ParamSpec("typical_p", float, 1.0, "Keep the tokens whose surprise is closest to the average, up to this mass (1 = off).",
                  0.0, 1.0, False, True),
        ParamSpec("epsilon", float, 0.0, "Drop every token whose probability is below epsilon (0 = off).",
                  0.0, 1.0, True, False),
        ParamSpec("eta", float, 0.0, "Like epsilon, but the cutoff shrinks when the model is unsure (0 = off).",
                  0.0, 1.0, True, False),
        ParamSpec("repetition_penalty", float, 1.0,
                  "Above 1 makes tokens already in the text less likely, below 1 more likely (1 = off).",
                  0.0, _INF, False, False),
        ParamSpec("top_h", float, 0.0,
                  "Keep top tokens while their summed -q log q stays under this share of the top-100 entropy.", 0.0, 1.0),
        ParamSpec("mirostat_tau", float, 3.0, "Mirostat's target surprise per token, in bits; higher gives more varied text.",
                  0.0, _INF, False, False),
        ParamSpec("mirostat_eta", float, 0.1, "How fast mirostat moves its cutoff after each token.", 0.0, 1.0, False, True),
    ]
}


TOP_N = ParamSpec("top_n", int, 100, "How many top tokens Top-H considers at all.", 1, MAX_TOP_K)


def knob(name: str):
    """A dataclass field declared from PARAMETERS[name] (its default, range and help)."""
    s = PARAMETERS[name]
    return param(s.default, help=s.help, low=s.low, high=s.high, low_inclusive=s.low_inclusive,
                 high_inclusive=s.high_inclusive)


# --------------------------------------------------------------------------- transforms


class LogitsTransform(Protocol):
    """One step of the logits chain (transformers' LogitsProcessor signature, arguments swapped).

    logits: (B, V) float; input_ids: (B, T) long, prompt + tokens generated so far.
    Returns a NEW (B, V) tensor; removed tokens are -inf; inputs are never modified.
    """

    name: str  # class-level short name, e.g. "top_p"

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class Temperature:
    name: ClassVar[str] = "temperature"
    temperature: float  # divides the logits; > 0

    def __post_init__(self):
        _check("temperature", self.temperature)

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        return logits / self.temperature


@dataclass(frozen=True)
class TopK:
    """Keep the top_k highest logits. Tokens tied with the k-th logit are kept too (as transformers)."""

    name: ClassVar[str] = "top_k"
    top_k: int  # number of tokens kept; >= 1

    def __post_init__(self):
        _check("top_k", self.top_k, low=1)  # 0 means off: no transform

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        k = min(self.top_k, logits.shape[-1])
        kth = logits.topk(k, dim=-1).values[..., -1:]  # (B, 1)
        return _keep(logits, logits >= kth)


@dataclass(frozen=True)
class TopP:
    """Nucleus: keep token i iff the mass of the tokens ranked above it is < top_p.

    That is the smallest top set whose mass reaches top_p (transformers' rule); tokens tied
    with the last kept one are kept too, so the result does not depend on sort order.
    """

    name: ClassVar[str] = "top_p"
    top_p: float  # probability mass kept; (0, 1]

    def __post_init__(self):
        _check("top_p", self.top_p)

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        probs = torch.softmax(logits.double(), dim=-1)  # (B, V) float64: a float32 running sum over a
        #                                                  large vocabulary drifts by a token at the boundary
        sorted_probs = probs.sort(dim=-1, descending=True).values  # (B, V)
        mass_above = sorted_probs.cumsum(dim=-1) - sorted_probs  # (B, V) mass ranked strictly above
        num_kept = (mass_above < self.top_p).sum(dim=-1, keepdim=True).clamp(min=1)  # (B, 1)
        smallest_kept = sorted_probs.gather(-1, num_kept - 1)  # (B, 1)
        return _keep(logits, probs >= smallest_kept)


@dataclass(frozen=True)
class MinP:
    """Keep tokens with p >= min_p * p_max."""

    name: ClassVar[str] = "min_p"
    min_p: float  # fraction of the top probability a token needs; [0, 1]

    def __post_init__(self):
        _check("min_p", self.min_p)

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        probs = log_softmax(logits).exp()  # (B, V)
        return _keep(logits, probs >= self.min_p * probs.amax(dim=-1, keepdim=True))


@dataclass(frozen=True)
class TypicalP:
    """Locally typical sampling: rank tokens by |surprise - entropy| (most typical first) and keep
    the shortest such prefix whose mass reaches typical_p, plus ties (transformers' rule).

    Unlike the other rules this may remove the top-1 token (that is the point of the method);
    the guaranteed survivor is the most typical token.
    """

    name: ClassVar[str] = "typical_p"
    typical_p: float  # probability mass kept; (0, 1]

    def __post_init__(self):
        _check("typical_p", self.typical_p)

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        logprobs = log_softmax(logits)  # (B, V)
        atypicality = (-logprobs - entropy(logits)[:, None]).abs()  # (B, V); inf for removed tokens
        sorted_atyp, order = atypicality.sort(dim=-1, stable=True)  # (B, V) most typical first
        cum_mass = logprobs.exp().gather(-1, order).cumsum(dim=-1)  # (B, V)
        last = (cum_mass < self.typical_p).sum(dim=-1, keepdim=True).clamp(max=logits.shape[-1] - 1)  # (B, 1)
        return _keep(logits, atypicality <= sorted_atyp.gather(-1, last), always=order[:, :1])


@dataclass(frozen=True)
class EpsilonCutoff:
    """Keep tokens with p >= epsilon (Hewitt et al. 2022)."""

    name: ClassVar[str] = "epsilon"
    epsilon: float  # absolute probability floor; [0, 1)

    def __post_init__(self):
        _check("epsilon", self.epsilon)

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        return _keep(logits, log_softmax(logits).exp() >= self.epsilon)


@dataclass(frozen=True)
class EtaCutoff:
    """Keep tokens with p >= min(eta, sqrt(eta) * exp(-H)), H the entropy in nats (Hewitt et al. 2022)."""

    name: ClassVar[str] = "eta"
    eta: float  # base of the entropy-dependent floor; [0, 1)

    def __post_init__(self):
        _check("eta", self.eta)

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        floor = torch.clamp(math.sqrt(self.eta) * torch.exp(-entropy(logits)), max=self.eta)  # (B,)
        return _keep(logits, log_softmax(logits).exp() >= floor[:, None])


@dataclass(frozen=True)
class RepetitionPenalty:
    """CTRL penalty as in transformers: for every token id in input_ids (once, however often it
    occurs) a negative logit is multiplied by `penalty` and a non-negative one divided by it."""

    name: ClassVar[str] = "repetition_penalty"
    penalty: float  # > 1 discourages repeats, < 1 encourages them; > 0

    def __post_init__(self):
        _check("repetition_penalty", self.penalty)

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        if input_ids.shape[0] != logits.shape[0]:
            raise ValueError(f"`input_ids` must have {logits.shape[0]} rows, got {input_ids.shape[0]}")
        if input_ids.numel() == 0:
            return logits.clone()
        seen = logits.gather(-1, input_ids)  # (B, T)
        penalised = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)  # (B, T)
        return logits.scatter(-1, input_ids, penalised)


@dataclass(frozen=True)
class TopH:
    """Top-H bounded-entropy truncation, matching transformers' `TopHLogitsWarper` (contributed by
    the Top-H authors):

    1. take the top_n tokens by logit and renormalise them: q = softmax(top-n logits);
    2. tau = alpha * H(q);
    3. walking down the ranking, keep token j iff the accumulated entropy terms
       sum_{i<=j} -q_i log q_i  are <= tau (the top-1 is always kept).

    Note the accumulated sum in 3 is not the entropy of the renormalised kept set (that would be
    S/m + log m for kept mass m); the authors' original loop compares that renormalised entropy
    against tau/m + log m, which reduces to the same test S <= tau. Their original code uses the
    top-n probabilities of the full softmax without renormalising; identical when top_n >= V.
    tau is taken as alpha times the last accumulated sum so that alpha = 1 keeps all top_n tokens
    despite rounding. Tokens tied with the last kept one are kept too (as in TopP), so the kept
    set never depends on how a sort orders equal logits.
    """

    name: ClassVar[str] = "top_h"
    alpha: float  # fraction of the top-n entropy the kept set may carry; (0, 1]
    top_n: int = TOP_N.default  # how many top tokens are considered at all; >= 1

    def __post_init__(self):
        _check("top_h", self.alpha, name="alpha", low_inclusive=False)  # 0 means off: no transform
        TOP_N.check(self.top_n)

    def __call__(self, logits: Tensor, input_ids: Tensor) -> Tensor:
        n = min(self.top_n, logits.shape[-1])
        sorted_logits, order = logits.float().sort(dim=-1, descending=True, stable=True)  # (B, V)
        logq = torch.log_softmax(sorted_logits[:, :n], dim=-1)  # (B, n) renormalised over the top n
        q = logq.exp()
        accumulated = torch.where(q > 0, -q * logq, torch.zeros_like(q)).cumsum(dim=-1)  # (B, n)
        selected = accumulated <= self.alpha * accumulated[:, -1:]  # (B, n)
        selected[:, 0] = True
        last_kept = torch.where(selected, sorted_logits[:, :n], math.inf).amin(dim=-1, keepdim=True)  # (B, 1)
        return _keep(logits, logits.float() >= last_kept)  # tokens tied with the last kept one stay too


# --------------------------------------------------------------------------- the `sample` strategy


@dataclass(frozen=True)
class SamplingParams(Params):
    """All knobs of plain sampling; every default means "off" (temperature 1 = unchanged)."""

    temperature: float = knob("temperature")  # logits divisor; > 0
    top_k: int = knob("top_k")  # keep the k most likely tokens; 0 = off
    top_p: float = knob("top_p")  # nucleus mass; 1 = off
    min_p: float = knob("min_p")  # fraction of the top probability; 0 = off
    typical_p: float = knob("typical_p")  # typical-set mass; 1 = off
    epsilon: float = knob("epsilon")  # absolute probability floor; 0 = off
    eta: float = knob("eta")  # entropy-adaptive probability floor; 0 = off
    repetition_penalty: float = knob("repetition_penalty")  # CTRL penalty on tokens already seen; 1 = off
    top_h: float = knob("top_h")  # Top-H alpha; 0 = off


def build_transforms(params: SamplingParams) -> list[LogitsTransform]:
    """The active transforms in transformers' order (`GenerationMixin._get_logits_processor`):
    penalty, temperature, Top-H, then top-k, top-p, min-p, typical, epsilon, eta.

    Top-H comes right after temperature, as in the warper the Top-H authors contributed to
    transformers: its entropy budget is measured on the tempered distribution before any other
    truncation, so combining it with top-k or top-p gives the same kept set as `generate`.
    """
    p = params
    candidates = [
        (p.repetition_penalty != 1.0, lambda: RepetitionPenalty(p.repetition_penalty)),
        (p.temperature != 1.0, lambda: Temperature(p.temperature)),
        (p.top_h > 0.0, lambda: TopH(p.top_h)),
        (p.top_k > 0, lambda: TopK(p.top_k)),
        (p.top_p < 1.0, lambda: TopP(p.top_p)),
        (p.min_p > 0.0, lambda: MinP(p.min_p)),
        (p.typical_p < 1.0, lambda: TypicalP(p.typical_p)),
        (p.epsilon > 0.0, lambda: EpsilonCutoff(p.epsilon)),
        (p.eta > 0.0, lambda: EtaCutoff(p.eta)),
    ]
    return [make() for active, make in candidates if active]


def apply_transforms(transforms: Iterable[LogitsTransform], logits: Tensor, input_ids: Tensor) -> Tensor:
    """Run the chain left to right; returns a new (B, V) tensor even for an empty chain.

    A transform whose parameter is so extreme that the logits stop being usable (a temperature of
    1e-320 or a repetition penalty of 1e-300 overflow them to infinity, and softmax gives NaN) is a
    ValueError naming that parameter, not a NaN that fails later inside the sampler.
    """
    out = logits.clone()
    for transform in transforms:
        new = transform(out, input_ids)
        if not finite_rows(new) and finite_rows(out):
            fields = dataclasses.fields(transform) if dataclasses.is_dataclass(transform) else ()
            raise non_finite(transform.name, getattr(transform, fields[0].name) if fields else None)
        out = new
    return out


def finite_rows(logits: Tensor) -> bool:
    """Whether softmax can be taken of every row (..., V): no NaN, no +inf, and a finite logit in each row."""
    return not (torch.isnan(logits).any() or torch.isposinf(logits).any()
                or (logits.amax(dim=-1) == NEG_INF).any())


def non_finite(name: str, value) -> ValueError:
    """The error for a parameter value that made the probabilities non-finite."""
    shown = f" = {short_repr(value, 40)}" if value is not None else ""
    return ValueError(f"`{name}`{shown} makes the probabilities non-finite (the logits overflow to infinity or "
                      f"NaN); choose a less extreme `{name}`")


def tempered(logits: Tensor, temperature: float) -> Tensor:
    """logits / temperature (a new tensor), or ValueError naming `temperature` when that overflows."""
    out = logits / temperature
    if not finite_rows(out) and finite_rows(logits):
        raise non_finite("temperature", temperature)
    return out


def sample_from_logits(logits: Tensor, generator: torch.Generator) -> Tensor:
    """Draw one token per row from softmax(logits): (B, V) -> (B,) long."""
    if logits.dim() != 2:
        raise ValueError(f"`logits` must have shape (B, V), got {tuple(logits.shape)}")
    probs = log_softmax(logits).exp().to(generator.device)  # (B, V) where the generator lives (CPU generators
    #                                                            cannot draw for CUDA tensors)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)  # (B,)


# --------------------------------------------------------------------------- mirostat v2


@dataclass(frozen=True)
class MirostatParams(Params):
    tau: float = knob("mirostat_tau")  # target surprise per token, in bits; > 0
    eta: float = knob("mirostat_eta")  # learning rate of the mu update; (0, 1]

    @property
    def initial_mu(self) -> float:
        """mu before the first token: 2 * tau, as in the paper's code and llama.cpp."""
        return 2.0 * self.tau


def mirostat_v2_step(
    logits: Tensor, mu: float, params: MirostatParams, generator: torch.Generator
) -> tuple[int, Tensor, float]:
    """One mirostat v2 step on one row of logits (V,). Pure: returns (token_id, kept_logits, mu_new).

    Keeps the tokens whose surprise -log2 p is <= mu (at least the top-1), renormalises, samples,
    then mu_new = mu - eta * (observed - tau). As in llama.cpp's mirostat v2, `observed` is the
    surprise of the sampled token under the renormalised kept distribution (the paper's v1 code
    uses the untruncated probability instead). kept_logits: the input logits, -inf outside the kept
    set. Start with mu = params.initial_mu (2 * tau).
    """
    if logits.dim() != 1:
        raise ValueError(f"`logits` must have shape (V,), got {tuple(logits.shape)}")
    surprise_bits = -log_softmax(logits) / LN2  # (V,)
    keep = surprise_bits <= mu  # (V,)
    keep[logits.argmax()] = True
    kept_logits = logits.masked_fill(~keep, NEG_INF)  # (V,)
    kept_logprobs = log_softmax(kept_logits)  # (V,) renormalised over the kept set
    token_id = int(torch.multinomial(kept_logprobs.exp(), num_samples=1, generator=generator))
    observed = -float(kept_logprobs[token_id]) / LN2
    return token_id, kept_logits, mu - params.eta * (observed - params.tau)


# --------------------------------------------------------------------------- search decisions


def contrastive_scores(
    top_probs: Tensor, candidate_hidden: Tensor, context_hidden: Tensor, penalty_alpha: float
) -> Tensor:
    """Contrastive search (Su et al. 2022): (1 - alpha) * p_k - alpha * max_t cos(h_k, h_t).

    top_probs (K,) model probabilities of the K candidates; candidate_hidden (K, D) their hidden
    states; context_hidden (T, D) hidden states of the context so far. Returns (K,) scores.
    """
    _check_in("penalty_alpha", penalty_alpha, float, 0.0, 1.0)
    if context_hidden.shape[0] == 0:
        raise ValueError("`context_hidden` must have at least one row, got shape (0, D)")
    candidates = F.normalize(candidate_hidden.float(), dim=-1)  # (K, D)
    context = F.normalize(context_hidden.float(), dim=-1)  # (T, D)
    degeneration = (candidates @ context.T).amax(dim=-1)  # (K,) worst-case similarity
    return (1.0 - penalty_alpha) * top_probs.float() - penalty_alpha * degeneration


def beam_step(beam_scores: Tensor, logprobs: Tensor, num_beams: int) -> tuple[Tensor, Tensor, Tensor]:
    """Pick the num_beams best (beam, token) continuations by beam_score + logprob.

    beam_scores (B,) cumulative logprobs of the live beams; logprobs (B, V) next-token logprobs.
    Returns parent_idx, token_ids, new_scores, each (num_beams,), best first; ties go to the lower
    flat index beam * V + token.
    """
    num_live, vocab = logprobs.shape
    _check_in("num_beams", num_beams, int, 1, num_live * vocab)
    totals = (beam_scores.float()[:, None] + logprobs.float()).reshape(-1)  # (B * V,)
    new_scores, flat = totals.sort(descending=True, stable=True)
    flat, new_scores = flat[:num_beams], new_scores[:num_beams]  # (num_beams,)
    return flat // vocab, flat % vocab, new_scores
