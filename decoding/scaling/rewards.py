"""Rewards for particle filtering: one interface for step-level and outcome-level scores.

A reward scores a partial solution (the question and the steps generated so far) with a value in
[0, 1]; `decoding.scaling.particles.weights_from_rewards` turns those values into particle weights.
Papers followed:

- Puri et al. 2025, "A Probabilistic Inference Approach to Inference-Time Scaling of LLMs using
  Particle-Based Monte Carlo Methods": a process reward model (PRM) scores every step; here the
  PRM can be a rule (`ArithmeticStepChecker`) or an LM judge (`LMJudgeReward`, P("Yes") of a
  causal LM asked whether the step is correct, in the spirit of LLM-as-a-judge PRMs).
- Lew et al. 2023, "Sequential Monte Carlo Steering of Large Language Models using Probabilistic
  Programs": hard text constraints (no letter "e", short words) that zero out a particle the
  moment they are violated; soft ones only lower its weight.
- Outcome reward (GSM8K-style "#### X" / "\\boxed{X}" answers): Cobbe et al. 2021, "Training
  Verifiers to Solve Math Word Problems".

Glossary
- step: one chunk of generated text (a reasoning line); `steps` are those so far, last = newest.
- final: True when the particle has finished (outcome-level scoring may apply).
- value: the reward in [0, 1]; 1 = fully satisfied.
- hard violation: a constraint that can never be repaired; value is 0 and the particle dies.
- soft constraint: a preference; its value is a fraction in [0, 1].
- judge: a callable prompt -> P("Yes") in [0, 1], injected (no model is loaded here).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from decoding.errors import short_repr

# --------------------------------------------------------------------------- interface


@dataclass(frozen=True)
class RewardResult:
    value: float  # reward in [0, 1]
    hard_violation: bool = False  # True: a hard constraint is broken, value is 0
    detail: str = ""  # human-readable explanation

    def __post_init__(self):
        if not isinstance(self.value, (int, float)) or not 0 <= self.value <= 1:
            raise ValueError(f"`value` must be in [0, 1], got {short_repr(self.value)}")
        if self.hard_violation and self.value != 0:
            raise ValueError(f"`value` must be 0 when `hard_violation` is True, got {short_repr(self.value)}")


class Reward(Protocol):
    name: str

    def score(self, question: str, steps: list[str], final: bool) -> RewardResult: ...


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False, got {short_repr(value)}")


# --------------------------------------------------------------------------- numbers

# 1,200  1,200.5  12  3.25  .5 ; a leading minus only where it cannot be a binary operator
_NUM = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
_OPS = {"+": "+", "-": "-", "−": "-", "*": "*", "×": "*", "x": "*", "X": "*", "/": "/", "÷": "/"}
_EQUATION = re.compile(
    rf"(?<![\w.,])(?P<a>-?{_NUM})\s*(?P<op>[+\-−*×xX/÷])\s*(?P<b>-?{_NUM})\s*=\s*(?P<c>-?{_NUM})(?![\d])"
)
_NUMBER = re.compile(rf"-?{_NUM}")


def parse_number(text: str) -> float | None:
    """A float from '1,200', '-3.5', '$12', '3/4' (simple fraction), '\\frac{3}{4}'; None if none."""
    s = text.strip().replace("$", "").replace(",", "").replace(" ", "").rstrip(".")
    frac = re.fullmatch(r"\\[dt]?frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}", s)
    if frac:
        s = f"{frac.group(1)}/{frac.group(2)}"
    match = re.fullmatch(r"(-?[\d.]+)/(-?[\d.]+)", s)
    try:
        if match:
            denominator = float(match.group(2))
            return float(match.group(1)) / denominator if denominator else None
        return float(s)
    except ValueError:
        return None


def _decimals(number: str) -> int:
    return len(number.split(".")[1]) if "." in number else 0


def check_equation(a: str, op: str, b: str, c: str) -> tuple[bool, float | None]:
    """(correct, true value) of `a op b = c`; a result written with d decimals may be rounded."""
    x, y, claimed = parse_number(a), parse_number(b), parse_number(c)
    symbol = _OPS[op]
    if symbol == "/" and y == 0:
        return False, None
    true = {"+": x + y, "-": x - y, "*": x * y, "/": x / y if y else math.nan}[symbol]
    d = _decimals(c)
    tolerance = 0.5 * 10.0**-d + 1e-9 if d else 1e-6 * max(1.0, abs(true))
    return abs(true - claimed) <= tolerance, true


def extract_answer(text: str, last_number: bool = True) -> str | None:
    """The final answer: last \\boxed{X}, else '#### X', else 'answer is X', else (with
    `last_number`) the last number. Pass False for a text cut off at its token cap, whose last
    number is whatever it was in the middle of ("Step 2")."""
    boxed = re.findall(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}", text)
    if boxed:
        return boxed[-1].strip()
    for pattern in (rf"####\s*\$?\s*(-?{_NUM})", rf"answer is:?\s*\$?\s*(-?{_NUM})"):
        found = re.findall(pattern, text, flags=re.IGNORECASE)
        if found:
            return found[-1]
    numbers = _NUMBER.findall(text) if last_number else []
    return numbers[-1] if numbers else None


# --------------------------------------------------------------------------- math rewards


@dataclass(frozen=True)
class ArithmeticStepChecker:
    """Step-level: the fraction of 'a op b = c' in the newest step that are right (1.0 if none).

    `floor`, `ceiling` and `neutral` calibrate it like a PRM's probability that the step is right:
    value = floor + (ceiling - floor) * fraction right, and `neutral` when the step has no
    arithmetic. The defaults (0, 1, 1) give the plain fraction; the scaling strategies use
    (0.05, 0.95, 0.5), so a step with a checked sum outweighs one with none, and an exact 0 or 1
    never makes softmax(logit(r)) all-or-nothing.
    """

    name: str = "arithmetic"
    floor: float = 0.0  # value when every equation is wrong
    ceiling: float = 1.0  # value when every equation is right
    neutral: float = 1.0  # value when the step has no equation

    def __post_init__(self):
        for key in ("floor", "ceiling", "neutral"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"`{key}` must be in [0, 1], got {short_repr(value)}")
        if self.floor > self.ceiling:
            raise ValueError(f"`floor` ({self.floor}) must not exceed `ceiling` ({self.ceiling})")

    def score(self, question: str, steps: list[str], final: bool) -> RewardResult:
        step = steps[-1] if steps else ""
        checks = [self.check(m) for m in _EQUATION.finditer(step)]
        return self.calibrated(checks, "no arithmetic found")

    def check(self, m: re.Match) -> tuple[bool, str]:
        """(right, what to show) for one equation."""
        ok, true = check_equation(m["a"], m["op"], m["b"], m["c"])
        shown = f"{m['a']} {m['op']} {m['b']} = {m['c']}"
        return ok, shown + (" ✓" if ok else f" ✗ (is {true:g})" if true is not None else " ✗ (undefined)")

    def calibrated(self, checks: list[tuple[bool, str]], nothing: str) -> RewardResult:
        """floor + (ceiling - floor) x the share of right checks; `neutral` (detail `nothing`) for none."""
        if not checks:
            return RewardResult(self.neutral, False, nothing)
        value = self.floor + (self.ceiling - self.floor) * sum(ok for ok, _ in checks) / len(checks)
        return RewardResult(value, False, "; ".join(text for _, text in checks))


@dataclass(frozen=True)
class LastDigitChecker(ArithmeticStepChecker):
    """A misspecified step checker, on purpose: it compares only the last digit of each result, so
    a slipped carry (a wrong tens or hundreds digit, tiny-math's commonest slip) passes as right.
    Search against it shows reward hacking: particles that slipped keep their weight."""

    name: str = "last digit"

    def check(self, m: re.Match) -> tuple[bool, str]:
        _, true = check_equation(m["a"], m["op"], m["b"], m["c"])
        claimed = parse_number(m["c"])
        ok = true is not None and claimed is not None and round(true) % 10 == round(claimed) % 10
        return ok, f"{m['a']} {m['op']} {m['b']} = {m['c']}" + (" ✓ (last digit)" if ok else " ✗")


@dataclass(frozen=True)
class ReferenceStepChecker(ArithmeticStepChecker):
    """Reference-guided process reward in the spirit of SPARE (Rizvi, Zhu and Gurevych 2025, arXiv 2506.15498,
    "SPARE: Single-Pass Annotation with Reference-Guided Evaluation for Automatic Process Supervision and
    Reward Modelling"): each step of
    the solution is aligned with the reference solution's step in the same place and scored by
    the match. For a tiny-math question the reference is read from the question itself
    (`math_tasks.parse_question`): step i must apply the question's i-th operation and operand to
    the previous line's result, with right arithmetic; the answer line must repeat the last result
    after exactly as many steps as the question has operations. So, unlike `arith-step`, it also
    sees a misread operand or operation and a solution that stops early. Values as
    ArithmeticStepChecker's (floor / ceiling / neutral); neutral for a question it cannot read."""

    name: str = "reference steps"
    floor: float = 0.05
    ceiling: float = 0.95
    neutral: float = 0.5

    def align(self, question: str, lines: list[str]) -> list[tuple[int, bool, str]] | None:
        """(line index, right, what to show) for each line of a solution that is a step or the answer
        line, aligned with the reference solution's line in the same place; other lines are left out.
        None for a question it cannot read (not tiny-math's form). SPARE-PRM's labels come from here."""
        from decoding.scaling.math_tasks import _STEP, apply, parse_answer, parse_question

        reference = parse_question(question.strip().splitlines()[0] if question.strip() else "")
        if reference is None:
            return None
        start, ops = reference
        value, aligned = start, []
        for i, line in enumerate(lines):
            match = _STEP.match(line)
            answer = parse_answer(line)
            if match:
                a, op, b, c = int(match[1]), match[2], int(match[3]), int(match[4])
                want = ops[i] if i < len(ops) else None
                ok = want == (op, b) and a == value and apply(a, op, b) == c
                why = "" if ok else (" ✗ (extra step)" if want is None else
                                     f" ✗ (the question says {value} {want[0]} {want[1]})")
                value = c
            elif answer is not None:
                ok = i == len(ops) and answer == value
                why = "" if ok else f" ✗ (after {i} of {len(ops)} steps, last result {value})"
            else:
                continue
            aligned.append((i, ok, line + (" ✓" if ok else why)))
        return aligned

    def score(self, question: str, steps: list[str], final: bool) -> RewardResult:
        lines = [line.strip() for step in steps for line in step.splitlines() if line.strip()]
        aligned = self.align(question, lines)
        if aligned is None:
            return RewardResult(self.neutral, False, "no reference: not a tiny-math question")
        first_new = len(lines) - len([line for line in (steps[-1] if steps else "").splitlines() if line.strip()])
        # only the newest step's lines are scored; earlier ones set up the chain
        return self.calibrated([(ok, shown) for i, ok, shown in aligned if i >= first_new], "nothing to check")


@dataclass(frozen=True)
class FinalAnswerChecker:
    """Outcome-level: 1.0 when the extracted answer equals `reference` within 1e-6, else 0.0.

    Scores whatever text it is given; the strategy decides whether to call it only when final.
    """

    reference: str  # the expected answer, a number ('1,200', '3/4', '-2.5')
    tolerance: float = 1e-6  # absolute tolerance of the numeric comparison
    name: str = "final_answer"

    def __post_init__(self):
        text = self.reference
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            text = str(text)
        number = parse_number(text) if isinstance(text, str) else None
        if number is None or not math.isfinite(number):
            raise ValueError(f"`reference` must be a number, got {short_repr(self.reference)} (a finite number such "
                             "as 42, 1,200, 3/4 or -2.5)")
        if not isinstance(self.tolerance, (int, float)) or not 0 <= self.tolerance < math.inf:
            raise ValueError(f"`tolerance` must be >= 0, got {short_repr(self.tolerance)}")

    def score(self, question: str, steps: list[str], final: bool) -> RewardResult:
        answer = extract_answer("\n".join(steps))
        value = parse_number(answer) if answer is not None else None
        if value is None:
            return RewardResult(0.0, False, "no answer found")
        ok = abs(value - parse_number(str(self.reference))) <= self.tolerance
        return RewardResult(1.0 if ok else 0.0, False, f"answer {answer} {'✓' if ok else '✗'} (reference {self.reference})")


# --------------------------------------------------------------------------- text constraints

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")  # letters, with inner apostrophes


def _violation(hard: bool, fraction_ok: float, detail: str) -> RewardResult:
    return RewardResult(0.0, True, detail) if hard else RewardResult(fraction_ok, False, detail)


@dataclass(frozen=True)
class ForbiddenLetter:
    """No word may contain `letter` (case-insensitive). Soft: fraction of words without it."""

    letter: str  # a single letter, e.g. 'e' (a lipogram)
    hard: bool = True  # True: any occurrence kills the particle
    name: str = "forbidden_letter"

    def __post_init__(self):
        if not isinstance(self.letter, str) or len(self.letter) != 1 or not self.letter.isalpha():
            raise ValueError(f"`letter` must be a single letter, got {short_repr(self.letter)} (one letter such as e)")
        _check_bool("hard", self.hard)

    def score(self, question: str, steps: list[str], final: bool) -> RewardResult:
        words = _WORD.findall(" ".join(steps))
        bad = [w for w in words if self.letter.lower() in w.lower()]
        if not bad:
            return RewardResult(1.0, False, f"no '{self.letter}'")
        return _violation(self.hard, 1 - len(bad) / len(words), f"'{self.letter}' in: {', '.join(bad[:5])}")


@dataclass(frozen=True)
class MaxWordLength:
    """Every word at most `n` letters. Soft: fraction of words within the limit."""

    n: int  # maximum letters per word, >= 1
    hard: bool = True  # True: one long word kills the particle
    name: str = "max_word_length"

    def __post_init__(self):
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ValueError(f"`n` must be an integer >= 1, got {short_repr(self.n)}")
        _check_bool("hard", self.hard)

    def score(self, question: str, steps: list[str], final: bool) -> RewardResult:
        words = _WORD.findall(" ".join(steps))
        long = [w for w in words if len(w) > self.n]
        if not long:
            return RewardResult(1.0, False, f"all words <= {self.n} letters")
        return _violation(self.hard, 1 - len(long) / len(words), f"longer than {self.n}: {', '.join(long[:5])}")


@dataclass(frozen=True)
class RequiredWords:
    """The text must contain every word of `words` (whole words, case-insensitive).

    Final: value = fraction present (hard: any missing is a violation). Before the end a missing
    word may still come, so each counts `pending_credit` instead of 0 and nothing is violated.
    """

    words: tuple[str, ...]  # required words
    hard: bool = False  # True: a word missing at the final step kills the particle
    pending_credit: float = 0.5  # credit for a word not yet present before the final step, in [0, 1]
    name: str = "required_words"

    def __post_init__(self):
        words = (self.words,) if isinstance(self.words, str) else tuple(self.words)
        if not words or any(not isinstance(w, str) or not w.strip() for w in words):
            raise ValueError(f"`words` must be a non-empty list of non-empty strings, got {short_repr(self.words)}")
        object.__setattr__(self, "words", tuple(w.strip() for w in words))
        _check_bool("hard", self.hard)
        if not isinstance(self.pending_credit, (int, float)) or not 0 <= self.pending_credit <= 1:
            raise ValueError(f"`pending_credit` must be in [0, 1], got {short_repr(self.pending_credit)}")

    def score(self, question: str, steps: list[str], final: bool) -> RewardResult:
        text = " ".join(steps)
        present = [w for w in self.words if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", text, flags=re.IGNORECASE)]
        missing = [w for w in self.words if w not in present]
        detail = f"{len(present)}/{len(self.words)} present" + (f"; missing: {', '.join(missing)}" if missing else "")
        if final:
            fraction = len(present) / len(self.words)
            return _violation(self.hard, fraction, detail) if missing else RewardResult(1.0, False, detail)
        value = (len(present) + self.pending_credit * len(missing)) / len(self.words)
        return RewardResult(value, False, detail)


# --------------------------------------------------------------------------- LM judge

DEFAULT_JUDGE_TEMPLATE = "Question: {question}\nProposed step: {step}\nIs this step correct? Answer Yes or No."


@dataclass(frozen=True)
class LMJudgeReward:
    """Step-level PRM from a causal LM: value = judge(prompt) = P("Yes" | judging prompt).

    The template may use {question}, {step} (the newest step) and {previous} (earlier steps).
    """

    judge: Callable[[str], float]  # prompt -> P("Yes") in [0, 1], injected by the strategy code
    template: str = DEFAULT_JUDGE_TEMPLATE  # must contain {question} and {step}
    name: str = "lm_judge"

    def __post_init__(self):
        if not callable(self.judge):
            raise ValueError(f"`judge` must be callable prompt -> P(Yes), got {short_repr(self.judge)}")
        if not isinstance(self.template, str) or "{question}" not in self.template or "{step}" not in self.template:
            raise ValueError(f"`template` must contain {{question}} and {{step}}, got {short_repr(self.template)}")

    def build_prompt(self, question: str, steps: Sequence[str]) -> str:
        step = steps[-1] if steps else ""
        return self.template.format(question=question, step=step, previous="\n".join(steps[:-1]))

    def score(self, question: str, steps: list[str], final: bool) -> RewardResult:
        p_yes = float(self.judge(self.build_prompt(question, steps)))
        if not 0 <= p_yes <= 1:
            raise ValueError(f"`judge` must return P(Yes) in [0, 1], got {short_repr(p_yes)}")
        return RewardResult(p_yes, False, f"P(Yes) = {p_yes:.3f}")
