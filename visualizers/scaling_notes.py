"""What a scaling method tells the reader beside its particles, from its events' `extra` (HTML, pure).

- `feedback_html`: refine's feedback for one round (decoding/scaling/refine.py): the round it came
  from, the steps kept, the bad step and the checker's verdict, and the correction forced into the
  round's context (or that none was given).
- `rounds_html`: refine's rounds in the final choice: each round's best score and answer, and the
  feedback the round was given.
- `allocation_html`: compute-optimal's decision (decoding/scaling/compute_optimal.py): the probe
  samples' agreement and checks, the estimated difficulty and its bin, the method and budget chosen.
"""

from __future__ import annotations

from visualizers._common import esc

_CSS = (".dl-feedback{font-size:12px;margin:.2em 0 .5em;padding:4px 8px;border-left:3px solid #f2b701;"
        "background:rgba(242,183,1,.08)}.dl-feedback code{font-size:12px}.dl-feedback .forced{background:#d9f0d3;"
        "padding:0 3px;border-radius:3px}.dl-feedback .bad{background:#fde0c5;padding:0 3px;border-radius:3px}"
        ".dl-rounds{font-size:12px;margin-top:.4em}.dl-rounds td,.dl-rounds th{padding:1px 6px;text-align:left}")

_MODES = {"correction": "the verified steps and the checker's correction, forced into the context",
          "prefix": "the verified steps only; the bad step is sampled again",
          "none": "nothing (the review is not fed back: the round samples from the prompt afresh)"}


def _code(text: str, cls: str = "") -> str:
    return f'<code class="{cls}">{esc(text.strip())}</code>'


def _num(value) -> str:
    return "–" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def feedback_text(feedback: dict) -> str:
    """The feedback as HTML: what round `from_round`'s review found, and what this round is given."""
    bad = feedback.get("bad_step")
    found = (f"step {bad + 1} {_code(feedback.get('bad_text', ''), 'bad')} is marked wrong "
             f"({esc(feedback.get('verdict') or 'below accept')})" if isinstance(bad, int)
             else "no step marked wrong, but the solution did not end")
    given = _MODES.get(feedback.get("mode"), esc(feedback.get("mode")))
    kept = feedback.get("kept_steps", 0)
    text = (f"<b>feedback from round {esc(feedback.get('from_round'))}</b> (its best solution so far, score "
            f"{esc(_num(feedback.get('score')))}): {found}. Given to this round: {esc(given)}")
    if feedback.get("mode") != "none":
        text += f"; steps 1-{kept} kept" if kept else "; no step kept"
    if feedback.get("correction"):
        text += f"; forced: {_code(feedback['correction'], 'forced')}"
    return text + "."


def feedback_html(extra: dict | None) -> str:
    """The block under a refine step's header (empty for round 1 and for other methods)."""
    feedback = (extra or {}).get("feedback")
    if not isinstance(feedback, dict):
        return ""
    mode = esc(feedback.get("mode"))
    return f'<style>{_CSS}</style><div class="dl-feedback" data-mode="{mode}">{feedback_text(feedback)}</div>'


def rounds_html(rounds: list | None) -> str:
    """refine's rounds in the final choice: best score and answer after each, and its feedback."""
    if not rounds:
        return ""
    rows = "".join(
        f'<tr data-round="{esc(r.get("round"))}"><td>{esc(r.get("round"))}</td><td>{esc(_num(r.get("best_score")))}</td>'
        f'<td>{esc(r.get("best_answer") if r.get("best_answer") is not None else "–")}</td>'
        f'<td>{_short_feedback(r.get("feedback"))}</td></tr>' for r in rounds)
    return (f'<style>{_CSS}</style><table class="dl-rounds"><tr><th>round</th><th>best so far: score</th>'
            f"<th>answer</th><th>feedback it was given</th></tr>{rows}</table>")


def _short_feedback(feedback) -> str:
    if not isinstance(feedback, dict):
        return "– (the first round: the prompt only)"
    if feedback.get("mode") == "none":
        return "none (sampled afresh)"
    bad = feedback.get("bad_step")
    where = f"from step {bad + 1}" if isinstance(bad, int) else "the unfinished end"
    if feedback.get("correction"):
        return f"{esc(where)}: forced {_code(feedback['correction'], 'forced')}"
    return f"{esc(where)}: resampled"


def allocation_html(extra: dict | None) -> str:
    """compute-optimal's decision for the prompt (empty for other methods)."""
    alloc = (extra or {}).get("allocation")
    if not isinstance(alloc, dict):
        return ""
    probe = alloc.get("probe") or {}
    if "difficulty" not in alloc and alloc.get("phase") != "probe":  # allocation=uniform: no probe, one option
        head = (f"<b>uniform allocation</b>: {esc(alloc.get('choice'))} for every prompt, the single option the fit "
                f"found best at budget level N = {esc(alloc.get('level'))}")
    elif alloc.get("phase") == "probe":
        head = (f"<b>estimating the difficulty</b>: {esc(probe.get('n'))} probe samples; the allocation is chosen "
                "from their checks and agreement when they finish")
    else:
        pool = " · the pool: the new samples and the probes, chosen together" if alloc.get("phase") == "pool" else ""
        head = (f"<b>estimated difficulty {esc(_num(alloc.get('difficulty')))}</b> ({esc(probe.get('passed'))} of "
                f"{esc(probe.get('n'))} probe samples pass every check, {esc(probe.get('agree'))} agree on the "
                f"answer) → bin <b>{esc(alloc.get('bin'))}</b> → <b>{esc(alloc.get('choice'))}</b> "
                f"(budget level N = {esc(alloc.get('level'))}; {esc(alloc.get('fitted', 'the fitted table'))}){pool}")
    return f'<style>{_CSS}</style><div class="dl-feedback dl-allocation">{head}</div>'
