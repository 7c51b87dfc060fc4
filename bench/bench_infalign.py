"""InfAlign (Balashankar, Sun et al. 2025, arXiv 2412.19792): aligning for best-of-N against aligning for one
sample, exactly (decoding/scaling/infalign.py), at equal KL(pi || pi0).

Win rate = P(the aligned policy's best-of-N beats the base policy's best-of-N in reward) + 1/2 P(tie), exact.
Methods, each at the KL asked for (beta by bisection):
    rlhf        standard RLHF: pi ∝ pi0 exp(r / beta) on the raw reward
    calibrated  the calibrated reward (the base policy's mid-CDF of r), identity transform
    exp         calibrated, then Phi_t(u) = exp(t u), t chosen per (N, KL) on the uniform problem (never on the task)
    optimal     the exact optimum of W_bon - beta KL on that support (the paper's fixed point): the ceiling

Sections:
    categorical  no model: a random categorical base policy (K outcomes, log-normal rewards) and the uniform
                 problem (the calibrated, model-agnostic one), for N = 1 (plain sampling) and larger N
    tiny-math    held-out problems (test split), M samples each from tiny-math at temperature 1; a problem's base
                 policy is the empirical law of its M samples. Rewards: `probe` (tiny-math's shipped probe, its
                 P(the solution ends right) at the last line: continuous, a learned reward model like the
                 paper's) and `step-share` (the share of right `a op b = c` lines: a rule with many ties). One beta
                 for all problems (one alignment run over every prompt), set so the MEAN KL is the target. Also
                 the best-of-N pick's accuracy (right final answer), exact on the support.

    python bench/bench_infalign.py [--quick] [--json] [--no-model] [--problems 24] [--samples 16]
    python bench/bench_infalign.py --write assets/tiny-math/infalign.json --png assets/infalign.png
    python bench/bench_infalign.py --from-json assets/tiny-math/infalign.json [--png assets/infalign.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from decoding.scaling import infalign as ia

REWARDS = ("probe", "step-share")


def table(problems, ns, kls, methods=ia.METHODS) -> dict:
    """{"N=n": {"base": {...}, "kl=x": {"t": t, method: {"win", "accuracy", "kl"}}}} with one shared beta per
    method (pooled); "base" is best-of-n of the base policy itself (KL 0, win rate 1/2)."""
    out: dict = {}
    for n in ns:
        base = np.mean([ia.bon_accuracy(p0, p0, r, c, n) for p0, r, c in problems])
        rows = out[f"N={n}"] = {"base": {"win": 0.5, "accuracy": round(float(base), 4), "kl": 0.0}}
        for target in kls:
            t = ia.best_t(n, target)
            row = rows[f"kl={target:g}"] = {"t": t}
            for m in methods:
                try:
                    got = ia.pooled(problems, m, n, target, t=t)
                except ValueError as err:  # out of reach for this support
                    row[m] = {"skipped": str(err)}
                    continue
                row[m] = {k: round(v, 4) for k, v in got.items() if k != "beta"}
    return out


CURVE_N = 4  # the tiny-math curves (the Scaling tab's picture) are best-of-4
CURVE_METHODS = ("rlhf", "calibrated", "exp")  # the optimal's pooled fixed points are too slow for a curve


def pooled_curve(problems, n: int, top: float, points: int = 10) -> dict:
    """Pooled win rate (one beta per method and point) on a KL grid up to 90% of the mean maximum KL."""
    kls = [round(float(x), 4) for x in np.linspace(0, 0.9 * top, points + 1)[1:]]
    return {"n": n, "kl": kls, "t": [ia.best_t(n, k) for k in kls],
            "win": {m: [round(ia.pooled(problems, m, n, k, t=ia.best_t(n, k))["win"], 4) for k in kls]
                    for m in CURVE_METHODS}}


def categorical_section(quick: bool) -> dict:
    ns, kls = ((1, 4), (0.25, 1.0)) if quick else ((1, 4, 16), (0.1, 0.25, 0.5, 1.0))
    p0, r = ia.random_categorical(8, 0)
    c = np.zeros_like(p0)  # no notion of correct here
    return {"random K=8 seed 0": {"p0": p0.round(4).tolist(), "r": r.round(4).tolist(),
                                  "rows": table([(p0, r, c)], ns, kls)},
            "uniform K=16": {"rows": table([(*ia.uniform_problem(16), np.zeros(16))], ns, kls)}}


def sample_tiny_math(count: int, samples: int, seed: int, say) -> list[dict]:
    """For each of the first `count` test-split problems: `samples` solutions at temperature 1, each with its
    probe score, step share and correctness."""
    import torch

    from decoding.lm import LM
    from decoding.models import load_model
    from decoding.scaling.math_eval import generate
    from decoding.scaling.math_tasks import SPLIT_SIZES, make_splits, parse_answer, prompt, step_errors
    from decoding.scaling.probe import probe_for, solution_text, step_states

    lm = LM(load_model("tiny-math", progress=None))
    probe = probe_for(lm)
    problems = make_splits(sizes={**SPLIT_SIZES, "train": 0})["test"][:count]
    prompts = [prompt(p.question) for p in problems]
    t0 = time.process_time()
    texts = generate(lm.model, lm.tokenizer, prompts, temperature=1.0, num_return=samples, generator_seed=seed)
    say(f"sampled {count} x {samples} in {time.process_time() - t0:.0f} s CPU")
    out = []
    with torch.inference_mode():
        for problem, text_prompt, solutions in zip(problems, prompts, texts):
            rows = []
            for text in solutions:
                states = step_states(lm, text_prompt, solution_text(text.splitlines()))
                steps, wrong = step_errors(text)
                rows.append({"probe": float(probe(states[-1])) if len(states) else 0.0,
                             "step-share": (steps - wrong) / steps if steps else 0.0,
                             "correct": float(parse_answer(text) == problem.answer)})
            out.append({"id": problem.id if hasattr(problem, "id") else problem.question, "rows": rows})
    return out


def tiny_math_section(args, say) -> dict:
    t0 = time.process_time()
    drawn = sample_tiny_math(args.problems, args.samples, args.seed, say)
    ns = tuple(n for n in ((4,) if args.quick else (4, 8)) if n <= args.samples)
    kls = (0.25, 1.0) if args.quick else (0.1, 0.25, 0.5, 1.0)
    out = {"problems": len(drawn), "samples": args.samples, "seed": args.seed,
           "base_accuracy": round(float(np.mean([r["correct"] for d in drawn for r in d["rows"]])), 4)}
    for reward in REWARDS:
        problems = []
        for d in drawn:
            r = np.array([row[reward] for row in d["rows"]])
            problems.append((np.full(len(r), 1 / len(r)), r, np.array([row["correct"] for row in d["rows"]])))
        top = float(np.mean([ia.max_kl(p0, r) for p0, r, _ in problems]))
        out[reward] = {"distinct_rewards": round(float(np.mean([len(np.unique(r)) for _, r, _ in problems])), 2),
                       "max_kl": round(top, 4), "rows": table(problems, ns, kls),
                       "curve": pooled_curve(problems, CURVE_N, top)}
    out["cpu_s"] = round(time.process_time() - t0, 1)
    return out


def show(name: str, rows: dict, accuracy: bool = False) -> None:
    print(f"\n{name}")
    for n, by_kl in rows.items():
        for kl_key, row in by_kl.items():
            if kl_key == "base":
                if accuracy:
                    print(f"  {n:5} base     best-of-{n[2:]} of the base policy: accuracy {row['accuracy']:.3f}")
                continue
            if not any("win" in row[m] for m in ia.METHODS):
                print(f"  {n:5} {kl_key:8} out of reach (past the mean maximum KL)")
                continue
            cells = [f"{m} {row[m]['win']:.3f}" if "win" in row[m] else f"{m} -" for m in ia.METHODS]
            acc = [f"{row[m]['accuracy']:.3f}" for m in ia.METHODS if "accuracy" in row[m]]
            print(f"  {n:5} {kl_key:8} t={row['t']:<5.3g} win: " + "  ".join(cells)
                  + (f"   accuracy: {' / '.join(acc)}" if accuracy else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer N and KL values, 8 problems x 16 samples")
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument("--no-model", action="store_true", help="the categorical section only (no model)")
    parser.add_argument("--problems", type=int, default=24, help="held-out tiny-math problems (test split)")
    parser.add_argument("--samples", type=int, default=16, help="samples per problem: the base policy's support")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--png", type=Path, help="also draw the Scaling tab's InfAlign pictures (categorical at "
                                                 "its defaults, and tiny-math's curves) to this PNG")
    parser.add_argument("--from-json", type=Path, help="print (and --png) a result written by --write; compute nothing")
    parser.add_argument("--write", type=Path, help="also write the result here (the Scaling tab reads "
                                                   "assets/tiny-math/infalign.json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.problems = min(args.problems, 8)
    for name in ("problems", "samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")

    def say(text: str) -> None:
        if not args.json:
            print(text, flush=True)

    import torch

    torch.set_num_threads(args.threads)
    t0 = time.process_time()
    if args.from_json:
        result = json.loads(args.from_json.read_text(encoding="utf-8"))
    else:
        result = {"categorical": categorical_section(args.quick)}
        if not args.no_model:
            result["tiny_math"] = tiny_math_section(args, say)
        result["cpu_s"] = round(time.process_time() - t0, 1)
        result["command"] = "python bench/bench_infalign.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.write:
        args.write.write_text(json.dumps(result, indent=1) + "\n")
    if args.png:
        draw(result, args.png)
    if args.json:
        print(json.dumps(result))
        return 0
    for name, section in result["categorical"].items():
        show(f"categorical, {name}: win rate of best-of-N vs the base's best-of-N (rlhf / calibrated / exp / "
             "optimal)", section["rows"])
    if "tiny_math" in result:
        tm = result["tiny_math"]
        print(f"\ntiny-math: {tm['problems']} test problems x {tm['samples']} samples, base accuracy "
              f"{tm['base_accuracy']:.3f} (accuracy columns: rlhf / calibrated / exp / optimal)")
        for reward in REWARDS:
            show(f"reward {reward} ({tm[reward]['distinct_rewards']} distinct values per problem, mean max KL "
                 f"{tm[reward]['max_kl']})", tm[reward]["rows"], accuracy=True)
    print(f"\nCPU {result['cpu_s']} s")
    return 0


def draw(result: dict, png: Path) -> None:
    """The accordion's pictures at its defaults (win rate vs KL, the transforms) and, with a model section,
    tiny-math's curves, stacked in one PNG drawn by plotly.js in headless Chromium (no kaleido needed)."""
    from figure_png import figures_png

    from ui.infalign import DEFAULTS
    from visualizers.infalign import tiny_math_figure, transform_figure, win_rate_figure

    p0, r = ia.random_categorical(DEFAULTS["k"], DEFAULTS["seed"])
    n, kl = DEFAULTS["n"], DEFAULTS["kl"]
    t = ia.best_t(n, kl)
    figures = [win_rate_figure(p0, r, n, kl, t, kl_high=1.0), transform_figure(p0, r, n, kl, t)]
    if "tiny_math" in result:
        figures.append(tiny_math_figure(result))
    figures_png(figures, png)


if __name__ == "__main__":
    sys.exit(main())
