"""Which strategies run over a remote engine, and the Playground's two: greedy and sampling.

The engine decodes; this side streams what it sends. Each SSE chunk carries the chosen token, its
log-probability and the engine's top-k alternatives {token: logprob}; every token becomes a
`TokenStep` as it arrives, so the Playground grows the text at the engine's pace.

Exact and estimated (what a TokenStep of a remote run means)
    prob, top_probs     exact: the engine's own log-probabilities (temperature 1, before its sampler).
    entropy             a lower bound: the top-k alternatives plus one bucket holding the rest of
                        the mass (merging outcomes never raises entropy, so H >= this). The full
                        distribution never leaves the engine. `extra["entropy"]` says so.
    rank                exact within the top-k; k + 1 means "below the top k".
    sampling_prob, entropy_truncated, kept_size, top_kept
                        not reported by engines: for sampling they repeat the raw values, for greedy
                        they are the point mass the engine drew from.

Strategies a remote engine cannot run are refused with the reason (`REMOTE_REFUSED`): beam search
and contrastive search need several rows of the model at every step (contrastive also its hidden
states), the speculative drafters need the target's logits for a whole draft in one pass, and a
diffusion model is not served through the completions API. The scaling methods that grow steps of
text (best-of-n, majority vote, reward beam, particle filter) run through `RemoteParticleBatch`.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

from decoding.papers import Uncited
from decoding.contracts import Outcome, RunContext
from decoding.events import Event, TokenStep
from decoding.registry import Registry, StrategyInfo
from decoding.remote.client import RemoteError
from decoding.remote.lm import RemoteLM
from decoding.sampling import SamplingParams

TOP_ALTERNATIVES = 10  # top_logprobs asked for (vLLM serves up to 20 by default; OpenAI's own cap is 5)
ENTROPY_LABEL = f"lower bound from the top-{TOP_ALTERNATIVES} (the rest of the mass as one bucket)"
NEUTRAL = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0, "repetition_penalty": 1.0}  # engines' samplers off
#          (llama.cpp's server defaults to top_k 40, min_p 0.05, repeat_penalty 1.1: greedy would not be argmax)

REMOTE_SCALING = ("best-of-n", "majority-vote", "reward-beam", "particle-filter")  # step-wise: run as they are
ENGINE_FORM = Uncited("the engine-side form of the local strategy of this name, which declares the papers")
REMOTE: Registry[Callable] = Registry("remote strategy")  # strategy name -> fn(ctx, params, outcome)
REMOTE_REFUSED = {
    "beam": "beam search keeps several rows of the model alive at every step; a completions API serves one sequence "
            "per request",
    "contrastive": "contrastive search needs the hidden states of k candidates at every step; engines return tokens "
                   "and log-probabilities only",
    "mirostat": "mirostat truncates the full distribution with its own state at every step; the engine samples, and "
                "sends back only its top-k",
    "speculative": "speculative decoding needs the target's logits for a whole draft in one pass; the engine does its "
                   "own speculation, if configured (vLLM --speculative-config)",
    "diffusion": "a masked diffusion model is not served through the completions API",
    "a-star": "A* re-expands step prefixes by their scores and needs its own batch bookkeeping; not ported to remote "
              "engines yet",
    "first-finish": "first-finish needs N samples in token lockstep; remote steps end at the step delimiter",
    "refine": "refine restarts its particles from a kept prefix with a batch of its own; not ported to remote "
              "engines yet",
    "compute-optimal": "compute-optimal hands a prompt to the method its table picks, refine among them; not ported "
                       "to remote engines yet",
}


def remote_strategy(info: StrategyInfo) -> Callable:
    """The function that runs `info` over a remote engine; ValueError with the reason when none can."""
    if info.name in REMOTE:
        return REMOTE.get(info.name)
    if info.name in REMOTE_SCALING:  # unchanged: their `ScalingRun` takes a `RemoteParticleBatch`
        return info.fn
    reason = REMOTE_REFUSED.get(info.name) or REMOTE_REFUSED.get(info.family) or "it has no remote implementation"
    raise ValueError(f"strategy {info.name!r} cannot run on a remote engine: {reason}. Remote engines run "
                     f"{', '.join(REMOTE.names() + REMOTE_SCALING)}")


def remote_menu(names: list[str]) -> tuple[list[str], str]:
    """(the strategies among `names` a remote engine runs, a sentence saying why the others are not offered)."""
    kept = [n for n in names if n in REMOTE or n in REMOTE_SCALING]
    left = [n for n in names if n not in kept]
    if not left:
        return kept, ""
    return kept, (f"A remote engine runs {' and '.join(kept)} here; {', '.join(left)} need several rows, hidden "
                  "states or the whole distribution at every step, and an engine sends only the chosen token and its "
                  "top-k.")


def entropy_lower_bound(logprobs: list[float]) -> float:
    """-sum p log p over the top-k plus the rest of the mass as one outcome: a lower bound of the entropy."""
    probs = [math.exp(lp) for lp in logprobs]
    rest = max(0.0, 1.0 - sum(probs))
    return sum(-p * math.log(p) for p in probs + [rest] if p > 0)


def token_step(ctx: RunContext, step: int, text: str, logprob: float, top: dict, greedy: bool) -> TokenStep:
    """A TokenStep from one streamed token: its text, log-prob and the engine's {token: logprob} top-k."""
    lm: RemoteLM = ctx.lm
    ranked = sorted(top.items(), key=lambda kv: -kv[1])[:TOP_ALTERNATIVES]
    top_ids = [lm.token_id(t) for t, _ in ranked]
    top_probs = [min(1.0, math.exp(lp)) for _, lp in ranked]
    prob = min(1.0, math.exp(logprob))
    entropy = entropy_lower_bound([lp for _, lp in ranked])
    token_id = lm.token_id(text)
    return TokenStep(
        step=step, token_id=token_id, token_text=text, prob=prob, sampling_prob=1.0 if greedy else prob,
        rank=1 + sum(p > prob for p in top_probs), entropy=entropy, entropy_truncated=0.0 if greedy else entropy,
        kept_size=1 if greedy else len(top_ids), top_ids=top_ids, top_tokens=[t for t, _ in ranked],
        top_probs=top_probs, top_kept=[i == token_id for i in top_ids] if greedy else [True] * len(top_ids),
        elapsed_s=ctx.elapsed(), forward_passes=1, extra={"entropy": ENTROPY_LABEL})


def stream_tokens(ctx: RunContext, outcome: Outcome, body: dict, greedy: bool) -> Iterator[Event]:
    """One streamed request for the whole run: a TokenStep per token as it arrives; Stop closes the stream
    (the engine stops generating when the connection goes)."""
    lm: RemoteLM = ctx.lm
    prompt = ctx.prompt + lm.decode(ctx.prompt_ids)  # a branch: the prompt and the tokens so far, as text
    chunks = lm.stream(NEUTRAL | body | {"prompt": prompt, "max_tokens": ctx.max_new_tokens,
                                         "logprobs": TOP_ALTERNATIVES})
    step = ctx.step_offset
    try:
        for chunk in chunks:
            choice = (chunk.get("choices") or [{}])[0]
            logprobs = choice.get("logprobs")
            if logprobs and logprobs.get("tokens"):
                for text, lp, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"]):
                    yield token_step(ctx, step, text, lp, top or {text: lp}, greedy)
                    step += 1
                    if outcome.add(ctx, lm.token_id(text)):
                        return
            elif choice.get("text"):
                raise RemoteError(f"the server at {lm.base_url} sent tokens without log-probabilities; the Playground "
                                  "needs them (llama.cpp: start the server with logits_all; vLLM: --max-logprobs "
                                  f">= {TOP_ALTERNATIVES})")
            if choice.get("finish_reason") == "stop":  # no stop strings were sent: the end of text
                outcome.stop_reason = "eos"
    finally:
        chunks.close()


@REMOTE.register("greedy", help="the engine decodes at temperature 0 and streams each token with its top-k",
                 papers=ENGINE_FORM)
def remote_greedy(ctx: RunContext, params, outcome: Outcome) -> Iterator[Event]:
    yield from stream_tokens(ctx, outcome, {"temperature": 0.0}, greedy=True)


UNSUPPORTED_KNOBS = {"typical_p": 1.0, "epsilon": 0.0, "eta": 0.0, "top_h": 0.0}  # off values


@REMOTE.register("sample", help="the engine samples (temperature, top-k/p, min-p, repetition penalty, seed)",
                 papers=ENGINE_FORM)
def remote_sample(ctx: RunContext, params: SamplingParams, outcome: Outcome) -> Iterator[Event]:
    used = [k for k, off in UNSUPPORTED_KNOBS.items() if getattr(params, k) != off]
    if used:
        raise ValueError(f"{', '.join(f'`{k}`' for k in used)}: the OpenAI completions API has no such sampler; set "
                         "it off for a remote engine (temperature, top_k, top_p, min_p and repetition_penalty work)")
    seed = int(ctx.generator.initial_seed()) % 2**31  # engines take a 32-bit seed
    body = {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k, "min_p": params.min_p,
            "repeat_penalty": params.repetition_penalty, "repetition_penalty": params.repetition_penalty, "seed": seed}
    yield from stream_tokens(ctx, outcome, body, greedy=False)
