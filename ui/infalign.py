"""The Scaling tab's accordion "InfAlign: aligning for best-of-N" (Balashankar, Sun et al. 2025, arXiv
2412.19792): a small categorical base policy, aligned four ways at the same KL, each scored by the best-of-N
win rate against the base; the transforms drawn; and tiny-math's curves from the benchmark's file.

    build_infalign(c)    lays the accordion out in the current Blocks and wires it (ui/scaling.py calls it)
    infalign_view(...)   the callback: {output name: value}, plain function (tests call it directly)

Everything here is exact and needs no model (decoding/scaling/infalign.py); a slider's change recomputes it.
"""

from __future__ import annotations

import functools
from pathlib import Path

import gradio as gr

from decoding.scaling import infalign as ia
from ui.widgets import QUIET, benchmark_file, explain_clamping, seed_box, user_error
from ui.wiring import as_int, on, on_any
from visualizers.infalign import NAMES, tiny_math_figure, transform_figure, win_rate_figure

DEFAULTS = {"k": 8, "seed": 0, "n": 4, "kl": 0.5}
K_RANGE, N_RANGE = (3, 30), (1, 16)
BENCH_PATH = Path(__file__).resolve().parents[1] / "assets" / "tiny-math" / "infalign.json"
BENCH_COMMAND = "python bench/bench_infalign.py --write assets/tiny-math/infalign.json"
HELP = ("**What it is.** RLHF tunes a policy so that ONE sample beats the base policy, at a KL cost. If the "
        "aligned policy is then decoded with **best-of-N**, that is the wrong target: InfAlign (Balashankar, Sun "
        "et al. 2025) aligns for the procedure instead. It **calibrates** the reward (u = an outcome's win rate "
        "against one base sample, uniform under the base policy) and **transforms** it, Φ(u) = exp(t·u), before "
        "the usual tilt π ∝ π₀·exp(Φ(u)/β). Here a small categorical base policy (K outcomes, random "
        "probabilities and skewed rewards) is aligned four ways at the same KL, and each is scored exactly.\n\n"
        "**What to look for.** At N = 1 (left panel) the calibrated identity is the best there is: it is the "
        "optimum for one sample, and exp(t·u) gains nothing. Under best-of-N (right panel) the order flips: the "
        "exponential transform sits on the optimal curve (dashed, the paper's fixed point computed exactly), "
        "well above standard RLHF and the calibrated identity, because best-of-N already supplies the middle "
        "of the distribution and only the top outcomes are worth paying KL for (the steep Φ). Raise N: the gap "
        "grows. Set K small: ties and lumpy probabilities, and still the same order.")


def _check(k, seed, n, kl) -> tuple[int, int, int, float]:
    k, seed, n = as_int(k), as_int(seed), as_int(n)
    for name, value, (low, high) in (("k", k, K_RANGE), ("n", n, N_RANGE)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"`{name}` must be an integer in [{low}, {high}], got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be an integer >= 0, got {seed!r}")
    if isinstance(kl, bool) or not isinstance(kl, (int, float)) or not kl > 0:
        raise ValueError(f"`kl` must be a number > 0, got {kl!r}")
    return k, seed, n, float(kl)


@functools.lru_cache(maxsize=64)
def _best_t(n: int, kl: float) -> float:
    return ia.best_t(n, kl)


def infalign_view(k, seed, n, kl) -> dict:
    """The accordion's figures and table for a categorical of `k` outcomes (from `seed`), best-of-`n`, at KL
    `kl` (capped just under the most this base policy allows, which the table then says)."""
    try:
        k, seed, n, kl = _check(k, seed, n, kl)
        p0, r = ia.random_categorical(k, seed)
        top = ia.max_kl(p0, r)
        shown = min(kl, round(0.95 * top, 3))
        t = _best_t(n, shown)
        rows = []
        for m in ia.METHODS:
            try:
                pi, _ = ia.at_kl(p0, r, m, shown, n=n, t=t)
            except ValueError:  # the optimum stops short: more KL would not raise its win rate
                rows.append(f"| {NAMES[m]} | — | — (never spends this much KL) |")
                continue
            rows.append(f"| {NAMES[m]} | {ia.win_rate(pi, p0, r, 1):.3f} | {ia.win_rate(pi, p0, r, n):.3f} |")
        cap = (f" (asked {kl:g}; this base policy allows at most {top:.3f}: all mass on its best outcome)"
               if shown < kl else "")
        table = (f"At KL = {shown:g} nats{cap}, t = {t:.3g} (chosen for best-of-{n} at this KL on the "
                 f"uniform problem):\n\n| aligned by | win rate, N = 1 | win rate, best-of-{n} |\n|---|---|---|\n"
                 + "\n".join(rows))
        return {"ia_table": table, "ia_transform": transform_figure(p0, r, n, shown, t),
                "ia_curves": win_rate_figure(p0, r, n, shown, t, kl_high=max(2 * shown, 1.0))}
    except ValueError as err:
        raise user_error(err) from None


def tiny_math_view(path=None) -> tuple[str, object | None]:
    """(Markdown, figure) from the shipped benchmark file; without one, how to make it."""
    bench, figure, problem = benchmark_file(path or BENCH_PATH, BENCH_COMMAND, "tiny-math", tiny_math_figure)
    if bench is None:
        return problem, None
    tm = bench["tiny_math"]
    text = (f"**On tiny-math** ({tm['problems']} held-out problems × {tm['samples']} samples; a problem's base "
            "policy is the empirical law of its samples; one β for all problems, at each mean KL). Rewards: "
            "`probe` (the policy's own probe, continuous) and `step-share` (the share of right arithmetic lines: "
            f"most samples tie at the top). From `{BENCH_COMMAND}`; docs/scaling.md says what it shows.")
    return text, figure


def build_infalign(c: dict) -> None:
    """The accordion, in the current Blocks, wired; its widgets go into `c` under "ia_*"."""
    with gr.Accordion("InfAlign: aligning for best-of-N", open=False, elem_id="sc-infalign") as accordion:
        gr.Markdown(HELP, elem_classes="dl-help")
        d = DEFAULTS
        with gr.Row():
            c["ia_n"] = gr.Slider(*N_RANGE, value=d["n"], step=1, label="N (best-of-N at inference)",
                                  elem_id="sc-ia-n")
            c["ia_kl"] = gr.Slider(0.05, 3, value=d["kl"], step=0.05, label="KL(π ‖ π₀) budget (nats)",
                                   elem_id="sc-ia-kl")
        with gr.Row():
            c["ia_k"] = gr.Slider(*K_RANGE, value=d["k"], step=1, label="K (outcomes of the base policy)",
                                  elem_id="sc-ia-k")
            c["ia_seed"] = seed_box("sc-ia-seed", d["seed"])
        # drawn when the accordion first opens (a few seconds of exact computation the app's start never pays)
        c["ia_table"] = gr.Markdown("", elem_id="sc-ia-table")
        c["ia_curves"] = gr.Plot(None, show_label=False, elem_id="sc-ia-curves")
        c["ia_transform"] = gr.Plot(None, show_label=False, elem_id="sc-ia-transform")
        text, figure = tiny_math_view()
        gr.Markdown(text, elem_classes="dl-help", elem_id="sc-ia-tiny-math-text")
        if figure is not None:
            gr.Plot(figure, show_label=False, elem_id="sc-ia-tiny-math")
    sliders = ("ia_n", "ia_kl", "ia_k")  # a number typed past a slider's end is said (only these: the tab wires its own)
    explain_clamping({k: c[k] for k in sliders}, dict.fromkeys(sliders))
    outputs = {k: c[k] for k in ("ia_table", "ia_curves", "ia_transform")}
    inputs = {"k": c["ia_k"], "seed": c["ia_seed"], "n": c["ia_n"], "kl": c["ia_kl"]}
    c["ia_accordion"] = accordion
    on_any([accordion.expand, c["ia_n"].release, c["ia_kl"].release, c["ia_k"].release], infalign_view, outputs, inputs,
           trigger_mode="always_last", **QUIET)
    on(c["ia_seed"].submit, infalign_view, outputs, inputs, trigger_mode="always_last", **QUIET)
