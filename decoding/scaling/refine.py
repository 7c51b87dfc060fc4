"""Review, refine, repeat: sample, check every step, feed the verdict back, select among the rounds.

Iterative Agent Decoding (IAD; Chakraborty et al. 2025, "Review, Refine, Repeat: Understanding
Iterative Decoding of AI Agents with Dynamic Evaluation and Selection", arXiv 2504.01931, retitled
in its v4 "On the Role of Feedback in Test-Time Scaling of Agentic AI Workflows"): a verifier
scores every candidate; the evaluation is put back into the next attempt's context (the paper turns
scores and critiques into text in the prompt: improve on the best response so far, avoid the
mistakes of the worst), and the output is selected dynamically among all iterations by the
verifier. Only the paper's abstract and third-party summaries could be read offline (its method
section could not), so what follows is our reading of those, for a policy that reads nothing but
its own question form.

What "feeding back" means for tiny-math (a 2.7M model that reads one question line and then its
own `a op b = c` lines): it cannot read a critique in words ("step 3 is wrong, it should be 77"),
so a textual prompt would be out of its distribution and ignored or worse. What it does read is
the solution so far. So the feedback goes into the next round's context as tokens it consumes:

- `feedback=correction` (default, the nearest faithful form of IAD): the best solution so far is
  reviewed step by step; the steps before its first bad step (reward below `accept`) are kept
  (the verified prefix), and the bad step is replaced by the checker's own verdict made concrete:
  the step as the checker says it should read (`arith-step`: the same `a op b` with the right
  result; `spare`: the question's operation applied to the previous result, or the answer line;
  `arith-lastdigit`: only the last digit fixed, as blind as that checker). Those tokens are forced
  (prefilled, not sampled: they are not counted as generated tokens), and the round samples `n`
  continuations after them. The contrastive "worst response" of the paper has no form this policy
  can read; the wrong value it wrote is excluded anyway, since the forced step replaces it.
  A reward that cannot say what a step should be (probe, LM judge, PRM) gives no correction and
  the round falls back to `prefix`.
- `feedback=prefix` (this module's earlier behaviour, in the spirit of Self-Refine, Madaan et al.
  2023, with the critique replaced by the step reward): the verified prefix only; the bad step is
  sampled again. The evaluation decides only where to cut.
- `feedback=none`: the evaluation is not fed back at all: each round samples `n` solutions from
  the prompt afresh (the paper's control for "diversity only": sequential best-of-N).

Selection among iterations (the paper's dynamic selection): after every round the best solution
over all rounds so far (complete solutions first, then the highest score) is the one reviewed, so
a round that made things worse is ignored and the next round refines the earlier best (ties in
score go to the solution whose first bad step comes later: it got further); the final answer is the
best over all rounds. It stops after `rounds` rounds, or early once the best is
complete with no bad step (or what a next round would be given fills the token cap).

Each round's steps stream as ParticleStep events with `extra` {"round", "kept_steps" (steps the
round continues, a forced correction included), "bad_step" (the step rewritten, 0-based), and from
round 2 on "feedback": {"mode", "from_round", "score", "kept_steps", "bad_step", "bad_text",
"verdict" (the reward's detail on the bad step), "correction" (the forced step, or None),
"correction_tokens"}}; the final record's `rounds` lists every round's best score and answer and the
feedback it was given, and `forced_tokens` counts the tokens forced in all (prefilled, never sampled).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

import torch

from decoding import bibliography as bib
from decoding.contracts import Outcome, RunContext
from decoding.events import Event
from decoding.params import param
from decoding.registry import register_strategy
from decoding.scaling import rewards as rw
from decoding.scaling.params import ScalingParams
from decoding.scaling.run import Particle, ScalingRun, identity_ancestors, score_weights
from decoding.scaling.scoring import aggregate

FEEDBACK = ("correction", "prefix", "none")


@dataclass(frozen=True)
class RefineParams(ScalingParams):
    rounds: int = param(3, low=1, high=16, help="refine: rounds of sampling; each after the first is given the review "
                                                "of the best solution so far.")
    accept: float = param(0.5, low=0.0, high=1.0, help="refine: a step whose reward is below this is a bad step.")
    feedback: str = param("correction", choices=FEEDBACK,
                          help="refine: what the next round is given: correction (IAD: the best solution's verified "
                               "steps and the checker's corrected step, forced), prefix (the verified steps only; the "
                               "bad step is sampled again), none (nothing: each round samples afresh).")


def first_bad_step(p: Particle, accept: float) -> int | None:
    """Index of the first step whose reward is below `accept`, None when every step passes."""
    return next((i for i, r in enumerate(p.rewards) if r < accept), None)


def _number(value: float, like: str) -> str:
    """`value` written the way `like` writes a number (an integer, or as many decimals)."""
    decimals = len(like.split(".")[1]) if "." in like else 0
    return f"{value:.{decimals}f}" if decimals else str(int(round(value)))


def correction(reward, question: str, steps: list[str]) -> str | None:
    """The newest step as `reward` says it should read, or None when the reward cannot say (it only
    scores) or finds nothing to fix. The step's own layout (spaces, the newline) is kept."""
    step = steps[-1] if steps else ""
    body, tail = step.rstrip(), step[len(step.rstrip()):]
    if isinstance(reward, rw.ReferenceStepChecker):
        fixed = _reference_step(question, steps)
        return None if fixed is None or fixed == body.strip() else body[:len(body) - len(body.lstrip())] + fixed + tail

    if isinstance(reward, rw.ArithmeticStepChecker):  # arith-step, and arith-lastdigit with its blind spot
        last_digit_only = isinstance(reward, rw.LastDigitChecker)

        def fix(m: re.Match) -> str:
            ok, true = rw.check_equation(m["a"], m["op"], m["b"], m["c"])
            if true is None or (ok if not last_digit_only else round(true) % 10 == round(float(m["c"])) % 10):
                return m.group(0)
            right = m["c"][:-1] + str(round(true) % 10) if last_digit_only else _number(true, m["c"])
            return m.group(0)[:m.start("c") - m.start()] + right + m.group(0)[m.end("c") - m.start():]

        fixed = rw._EQUATION.sub(fix, body)
        return None if fixed == body else fixed + tail
    return None


def _reference_step(question: str, steps: list[str]) -> str | None:
    """The line a tiny-math reference solution has where `steps` ends (the earlier lines as written):
    the question's next operation applied to the previous line's result, or the answer line."""
    from decoding.scaling.math_tasks import ANSWER_PREFIX, _STEP, apply, parse_question

    reference = parse_question(question.strip().splitlines()[0] if question.strip() else "")
    lines = [line.strip() for step in steps for line in step.splitlines() if line.strip()]
    if reference is None or not lines:
        return None
    value, ops = reference
    for line in lines[:-1]:
        match = _STEP.match(line)
        if match:
            value = int(match[4])
    i = len(lines) - 1
    if i < len(ops):
        op, b = ops[i]
        return f"{value} {op} {b} = {apply(value, op, b)}"
    return f"{ANSWER_PREFIX}{value}." if i == len(ops) else None


def review(run: ScalingRun, best: Particle, bad: int | None, mode: str, from_round: int) -> tuple[Particle, dict]:
    """(what the next round continues, the feedback record) from the review of `best`: its first bad
    step `bad` (None: every step passed, but it did not end), as `mode` feeds it back."""
    cut = bad if bad is not None else len(best.steps)
    record = {"mode": mode, "from_round": from_round, "score": aggregate(best.rewards, run.params.aggregate),
              "kept_steps": cut, "bad_step": bad, "bad_text": best.steps[bad] if bad is not None else "",
              "verdict": "", "correction": None}
    if bad is not None:
        record["verdict"] = run.reward.score(run.ctx.prompt, _visible(best.steps[:bad + 1]), False).detail
    if mode == "none":
        return Particle(), record | {"kept_steps": 0}
    prefix = best.prefix(cut)
    fixed = correction(run.reward, run.ctx.prompt, _visible(best.steps[:bad + 1])) if mode == "correction" and \
        bad is not None else None
    if fixed is not None:
        ids = run.lm.tokenizer(fixed, add_special_tokens=False).input_ids
        prefix.token_ids += ids
        prefix.steps.append(fixed)
        prefix.step_lengths.append(len(ids))
        prefix.rewards.append(run.reward.score(run.ctx.prompt, _visible(prefix.steps), False).value)
        record["correction"], record["correction_tokens"] = fixed, len(ids)
    return prefix, record


def _visible(steps: list[str]) -> list[str]:
    return [s for s in steps if s.strip()] or [""]


@register_strategy("refine", params=RefineParams, family="scaling", uses_seed=True,
                   help="review, refine, repeat (IAD): sample n, check each step, feed the verdict on the best "
                        "solution so far (its verified steps and the checker's correction) into the next round, "
                        "keep the best over all rounds", papers=(bib.CHAKRABORTY_2025, bib.MADAAN_2023))
def refine(ctx: RunContext, params: RefineParams, outcome: Outcome) -> Iterator[Event]:
    run = ScalingRun(ctx, params, "refine", outcome)
    seed = int(torch.randint(0, 2**62, (1,), generator=ctx.generator))
    seen: list[Particle] = []  # every complete or cut-off solution of every round
    prefix, record, rounds = Particle(), None, []
    for round_ in range(params.rounds):
        if round_ and not run.restart(prefix, seed + round_):
            break
        first = True
        while not run.all_finished:  # one round: n solutions grow a step at a time, no selection
            if not first:
                run.keep()
            first = False
            live = run.live()
            if not run.extend():
                break
            weights = score_weights(run)
            rewrites = record["bad_step"] if record and record["mode"] != "none" else None
            extra = {"round": round_ + 1, "kept_steps": len(prefix.steps), "bad_step": rewrites} | (
                {"feedback": record} if record else {})
            yield run.event(weights, identity_ancestors(params.n), False, weights, live, extra)
            if run.cancelled():
                break
        seen += [p.copy(parent=-1) for p in run.particles]
        if outcome.stop_reason == "cancelled":
            break
        best = _best(run, seen)  # dynamic selection: the best over every round so far is the one reviewed
        bad = first_bad_step(best, params.accept)
        rounds.append({"round": round_ + 1, "best_score": aggregate(best.rewards, params.aggregate),
                       "best_answer": _answer(run, best)} | ({"feedback": record} if record else {}))
        if bad is None and _ended(run, best):
            break  # complete and every step passes: nothing to refine
        prefix, record = review(run, best, bad, params.feedback, round_ + 1)
        if len(prefix.token_ids) >= ctx.max_new_tokens:
            break  # the kept (and forced) tokens fill the token cap: a next round could write nothing
    ranked = sorted(range(len(seen)), key=lambda i: _rank(run, seen[i], i))[: params.n]
    run.particles = [seen[i] for i in ranked] or run.particles  # the best first, then the runners-up
    run.finish(outcome, 0, score_weights(run),
               rule="best solution over all rounds (complete first, then the highest score)")
    outcome.extra["rounds"] = rounds
    outcome.extra["forced_tokens"] = sum(r["feedback"].get("correction_tokens", 0) for r in rounds if "feedback" in r)


def _ended(run: ScalingRun, p: Particle) -> bool:
    return bool(p.token_ids) and p.token_ids[-1] in run.lm.stop_ids


def _answer(run: ScalingRun, p: Particle) -> str | None:
    """The final answer `p` wrote, as `ScalingRun.answers` reads it (None when it has none)."""
    answer = rw.extract_answer(run.lm.decode(p.token_ids), last_number=_ended(run, p)) if p.finished else None
    value = rw.parse_number(answer) if answer is not None else None
    return None if value is None else f"{value:g}"


def _rank(run: ScalingRun, p: Particle, i: int) -> tuple:
    """Smaller is better: complete first, then the higher score, then the later first bad step (under
    `aggregate=min` every solution with a slip scores the same; the one that got further is the
    better one to refine), then the earlier one."""
    bad = first_bad_step(p, run.params.accept)
    return (not _ended(run, p), -aggregate(p.rewards, run.params.aggregate), -(len(p.steps) if bad is None else bad), i)


def _best(run: ScalingRun, seen: list[Particle]) -> Particle:
    return min(((p, i) for i, p in enumerate(seen)), key=lambda pi: _rank(run, *pi))[0]
