"""The Scaling tab's accordion "LLM-as-a-Judge: how many candidates?" (Halder and Pehlevan 2025, arXiv
2512.19905): a judge keeps one of k candidates by softmax(score / T); with a misspecified judge, accuracy peaks
at a finite k and falls past it. A three-type candidate law computed exactly, and tiny-math's measured and
predicted curves from the benchmark's file.

    build_judge(c)      lays the accordion out in the current Blocks and wires it (ui/scaling.py calls it)
    judge_view(...)     the callback: {output name: value}, plain function (tests call it directly)

Everything here is exact and needs no model (decoding/scaling/judge.py); a slider's change recomputes it.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import numpy as np

from decoding.scaling import judge
from ui.widgets import QUIET, benchmark_file, explain_clamping, user_error
from ui.wiring import as_int, on_any
from visualizers.judge import accuracy_figure, tiny_math_figure

DEFAULTS = {"p_right": 0.4, "misspecified": 0.1, "temperature": 0.3, "k_max": 48}
P_RANGE, M_RANGE, T_RANGE, K_RANGE = (0.05, 0.95), (0.0, 0.5), (0.0, 5.0), (2, 64)
SCORES = {"right": 0.0, "obvious wrong": -2.0, "plausible wrong": 1.0}  # the judge's score of each type
BENCH_PATH = Path(__file__).resolve().parents[1] / "assets" / "tiny-math" / "judge.json"
BENCH_COMMAND = "python bench/bench_judge.py --write assets/tiny-math/judge.json"
HELP = ("**What it is.** Draw k candidate answers and let a judge (another model, a reward) keep one: the "
        "highest score at temperature T = 0, a softmax(score / T) draw otherwise (T = ∞: a uniform pick, one "
        "sample's accuracy). Halder and Pehlevan (2025) solve a model of this exactly and find that a judge close "
        "to the truth gets better with every extra candidate, while a **misspecified** judge has a **finite best "
        "k**: past it, more candidates hurt. Here the candidates are of three kinds: right (judge score 0), "
        "obviously wrong (score −2: the judge sees through them) and *plausibly* wrong (score +1: the judge "
        "prefers them to the right answer). The curves are exact (no sampling).\n\n"
        "**What to look for.** With no plausible wrong answers (misspecified = 0) every curve rises with k. "
        "Add a few: the T = 0 curve climbs (the judge throws out the obvious mistakes), peaks at k* (the star) "
        "and falls, because with many candidates a plausible wrong one is almost surely among them and wins. A "
        "warmer judge peaks later and lower, and at large k it beats the greedy judge: for a fixed k there is a "
        "best temperature. Below, the same on tiny-math, measured, with the model fitted to the samples.")


def _number(name: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"`{name}` must be a number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _check(p_right, misspecified, temperature, k_max) -> tuple[float, float, float, int]:
    k_max = as_int(k_max)
    if isinstance(k_max, bool) or not isinstance(k_max, int) or not K_RANGE[0] <= k_max <= K_RANGE[1]:
        raise ValueError(f"`k_max` must be an integer in [{K_RANGE[0]}, {K_RANGE[1]}], got {k_max!r}")
    return (_number("p_right", p_right, *P_RANGE), _number("misspecified", misspecified, *M_RANGE),
            _number("temperature", temperature, *T_RANGE), k_max)


def three_types(p_right: float, misspecified: float) -> judge.Law:
    """Right with probability p_right; a wrong answer is plausible (the judge prefers it) with probability
    `misspecified`, else obvious."""
    wrong = 1 - p_right
    return judge.Law([p_right, wrong * (1 - misspecified), wrong * misspecified], [1.0, 0.0, 0.0],
                     list(SCORES.values()))


def judge_view(p_right, misspecified, temperature, k_max) -> dict:
    """The accordion's figure and table: accuracy against k = 1..k_max at T = 0, T/2, T, 2T and ∞."""
    try:
        p_right, misspecified, temperature, k_max = _check(p_right, misspecified, temperature, k_max)
        law, ks = three_types(p_right, misspecified), np.arange(1, k_max + 1)
        temps = sorted({0.0, temperature / 2, temperature, 2 * temperature}) + [float("inf")]
        curves, rows = {}, []
        for t in temps:
            key = "inf" if np.isinf(t) else f"{t:g}"
            curve = judge.value(law, ks, t)
            curves[key] = curve.round(6).tolist()
            k_star, interior = judge.optimal_k(curve, ks)
            where = ("finite: more candidates hurt past it" if interior else "every k alike" if np.ptp(curve) < 1e-9
                     else "no finite optimum: rising to the end, or flat")
            rows.append(f"| {'∞' if key == 'inf' else key} | {k_star} ({where}) | {curve[k_star - 1]:.3f} | "
                        f"{curve[-1]:.3f} |")
        table = (f"One sample is right with probability {p_right:.2f}; {misspecified:.0%} of wrong answers are "
                 f"ones the judge prefers.\n\n| judge T | k* | accuracy at k* | accuracy at k = {k_max} |\n"
                 "|---|---|---|---|\n" + "\n".join(rows))
        figure = accuracy_figure(ks.tolist(), curves, title="three kinds of candidate, exact (stars: k*)")
        return {"jd_table": table, "jd_curves": figure}
    except ValueError as err:
        raise user_error(err) from None


def tiny_math_view(path=None) -> tuple[str, object | None]:
    """(Markdown, figure) from the shipped benchmark file; without one, how to make it."""
    bench, figure, problem = benchmark_file(path or BENCH_PATH, BENCH_COMMAND, "tiny-math", tiny_math_figure)
    if bench is None:
        return problem, None
    greedy = bench["k_star"]["0"]
    text = (f"**On tiny-math** ({bench['problems']} held-out problems × {bench['samples']} samples; one sample is "
            f"right {bench['single_sample']:.1%} of the time). The judge: the share of right arithmetic lines "
            "(blind to a misread number) weighed first, the policy's own probe breaking ties (it trusts confident "
            f"misreads). At T = 0 the measured best k is {greedy['measured'][0]}, the model's "
            f"{greedy['predicted'][0]}. Circles: measured exactly on the samples; lines: the model fitted to them. "
            f"From `{BENCH_COMMAND}`; docs/scaling.md says what it shows and where the model misses.")
    return text, figure


def build_judge(c: dict) -> None:
    """The accordion, in the current Blocks, wired; its widgets go into `c` under "jd_*"."""
    with gr.Accordion("LLM-as-a-Judge: how many candidates?", open=False, elem_id="sc-judge") as accordion:
        gr.Markdown(HELP, elem_classes="dl-help")
        d = DEFAULTS
        with gr.Row():
            c["jd_p_right"] = gr.Slider(*P_RANGE, value=d["p_right"], step=0.05, label="P(one sample is right)",
                                        elem_id="sc-jd-p-right")
            c["jd_misspecified"] = gr.Slider(*M_RANGE, value=d["misspecified"], step=0.01,
                                             label="misspecified: share of wrong answers the judge prefers",
                                             elem_id="sc-jd-misspecified")
        with gr.Row():
            c["jd_temperature"] = gr.Slider(*T_RANGE, value=d["temperature"], step=0.05,
                                            label="judge temperature T (also drawn: 0, T/2, 2T, ∞)",
                                            elem_id="sc-jd-temperature")
            c["jd_k_max"] = gr.Slider(*K_RANGE, value=d["k_max"], step=1, label="largest k drawn",
                                      elem_id="sc-jd-k-max")
        # drawn when the accordion first opens, as InfAlign's is: the app's start never pays for it
        c["jd_table"] = gr.Markdown("", elem_id="sc-jd-table")
        c["jd_curves"] = gr.Plot(None, show_label=False, elem_id="sc-jd-curves")
        text, figure = tiny_math_view()
        gr.Markdown(text, elem_classes="dl-help", elem_id="sc-jd-tiny-math-text")
        if figure is not None:
            gr.Plot(figure, show_label=False, elem_id="sc-jd-tiny-math")
    sliders = ("jd_p_right", "jd_misspecified", "jd_temperature", "jd_k_max")  # say a number typed past an end
    explain_clamping({k: c[k] for k in sliders}, dict.fromkeys(sliders))
    outputs = {k: c[k] for k in ("jd_table", "jd_curves")}
    inputs = {"p_right": c["jd_p_right"], "misspecified": c["jd_misspecified"],
              "temperature": c["jd_temperature"], "k_max": c["jd_k_max"]}
    c["jd_accordion"] = accordion
    on_any([accordion.expand, *(c[k].release for k in sliders)], judge_view, outputs, inputs,
           trigger_mode="always_last", **QUIET)
