"""LLM-as-a-Judge (Halder and Pehlevan 2025, arXiv 2512.19905): keep one of k candidates by softmax(score / T)
of a misspecified judge; accuracy against k for several T, measured on tiny-math and predicted by the fitted
model (decoding/scaling/judge.py, judge_fit.py).

The judge (misspecified on purpose, from two rewards the lab has): score = logit P_probe(right) + W x share,
where `share` is the share of a solution's `a op b = c` lines whose arithmetic is right (the `step-share` rule,
blind to a misread quantity) and P_probe the policy's own probe (the `probe` reward: within a problem it
prefers confident misreads). W = 20 nats: the arithmetic verdict comes first, the probe breaks the ties.

    measured    each problem's pool of M samples (test split, temperature 1) is the candidate law: the exact
                value of keeping one of k draws from it (with replacement, which is what averaging over every
                resampled k-subset gives), averaged over problems. Exact on the pool; no Monte Carlo.
    predicted   the model (judge_fit.py): three classes (right, wrong with clean arithmetic, slipped
                arithmetic), Gaussian judge scores per class around a problem offset, fitted by maximum
                likelihood on the same pools; a problem keeps only its class mix. The curve is the model's exact
                value, so measured vs predicted tests the model's assumptions, not its arithmetic.
    k*(T)       the best k in 1..k_max, and whether it is interior (the paper's finite optimum): better than
                k_max by at least MARGIN.

    python bench/bench_judge.py [--quick] [--json] [--problems 32] [--samples 40]
    python bench/bench_judge.py --write assets/tiny-math/judge.json      (the Scaling tab reads it)
    python bench/bench_judge.py --from-json assets/tiny-math/judge.json [--png assets/judge.png]  (no sampling)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from decoding.scaling import judge
from decoding.scaling import judge_fit as jf

WEIGHT = 20.0  # nats the arithmetic share weighs in the judge's score
TEMPERATURES = (0.0, 0.5, 1.0, 2.0, 4.0)  # in the probe's logit units
CLASSES = ("right", "right, slipped arithmetic", "wrong, clean arithmetic", "wrong, slipped arithmetic")
VALUES = (1.0, 1.0, 0.0, 0.0)  # a class's worth: right or not
MARGIN = 0.005  # an interior k* must beat the largest k by half a point (a measured plateau is not one)
PROBE_CLIP = 1e-6  # P_probe kept in [1e-6, 1 - 1e-6] before its logit


def probe_scores(lm, probe, text_prompt: str, texts: list[str]) -> list[float]:
    """P_probe(right) of each solution at its last line, as `probe.step_states(...)[-1]` gives it, in one padded
    forward pass for all `texts` (a solution without a line scores 0)."""
    import torch

    from decoding.scaling.probe import solution_text

    start = len(lm.tokenizer(text_prompt).input_ids)
    rows, ends = [], []
    for text in texts:
        ids = lm.tokenizer(text_prompt + solution_text(text.splitlines())).input_ids
        last = [i for i in range(start, len(ids)) if "\n" in lm.tokenizer.decode([ids[i]])]
        rows.append(ids)
        ends.append(last[-1] if last else None)
    width = max(len(r) for r in rows)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])  # (B, T) right-padded: causal rows unchanged
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    with torch.inference_mode():
        hidden = lm.forward(ids, attention_mask=mask, output_hidden_states=True, last_only=True).hidden  # (B, T, D)
        return [float(probe(hidden[b, e].float())) if e is not None else 0.0 for b, e in enumerate(ends)]


def sample_pool(count: int, samples: int, seed: int, say) -> list[list[dict]]:
    """For each of the first `count` test-split problems, `samples` solutions at temperature 1: per solution its
    probe score, arithmetic share and correctness."""
    from decoding.lm import LM
    from decoding.models import load_model
    from decoding.scaling.math_eval import generate
    from decoding.scaling.math_tasks import SPLIT_SIZES, make_splits, parse_answer, prompt, step_errors
    from decoding.scaling.probe import probe_for

    lm = LM(load_model("tiny-math", progress=None))
    probe = probe_for(lm)
    problems = make_splits(sizes={**SPLIT_SIZES, "train": 0})["test"][:count]
    prompts = [prompt(p.question) for p in problems]
    t0 = time.process_time()
    texts = generate(lm.model, lm.tokenizer, prompts, temperature=1.0, num_return=samples, generator_seed=seed)
    say(f"sampled {count} x {samples} in {time.process_time() - t0:.0f} s CPU")
    pool = []
    for problem, text_prompt, solutions in zip(problems, prompts, texts):
        probes = probe_scores(lm, probe, text_prompt, solutions)
        rows = []
        for text, p in zip(solutions, probes):
            steps, wrong = step_errors(text)
            rows.append({"probe": p, "share": (steps - wrong) / steps if steps else 0.0,
                         "correct": float(parse_answer(text) == problem.answer)})
        pool.append(rows)
    return pool


def scores_of(rows: list[dict], weight: float) -> np.ndarray:
    p = np.clip([r["probe"] for r in rows], PROBE_CLIP, 1 - PROBE_CLIP)
    return np.log(p / (1 - p)) + weight * np.array([r["share"] for r in rows])


def classes_of(rows: list[dict]) -> np.ndarray:
    """CLASSES' index: right or wrong, then clean (every line's arithmetic right) or slipped (or no line)."""
    return np.array([2 * (not r["correct"]) + (r["share"] != 1.0) for r in rows])


def analyse(pool: list[list[dict]], ks, temperatures, weight: float) -> dict:
    """Measured and predicted accuracy against k per temperature, the fitted model, and k*(T) of each."""
    problems = [(scores_of(rows, weight), classes_of(rows)) for rows in pool]
    fit = jf.fit_classes(problems, len(CLASSES))
    values = np.array(VALUES)
    weights = np.array([np.bincount(c, minlength=len(CLASSES)) / c.size for _, c in problems])  # (J, C)
    out = {"ks": [int(k) for k in ks], "temperatures": [], "measured": {}, "predicted": {}, "k_star": {},
           "fit": {"classes": list(CLASSES), "means": fit.means.round(4).tolist(), "sds": fit.sds.round(4).tolist(),
                   "counts": fit.counts.tolist(), "weight": weight}}
    for t in temperatures:
        key = "inf" if np.isinf(t) else f"{t:g}"
        out["temperatures"].append(key)
        measured = np.mean([judge.value(judge.Law(np.full(s.size, 1 / s.size), values[c], s), ks, t)
                            for s, c in problems], axis=0)
        predicted = jf.predict(fit, values, weights, ks, t)
        out["measured"][key] = measured.round(4).tolist()
        out["predicted"][key] = predicted.round(4).tolist()
        out["k_star"][key] = {"measured": judge.optimal_k(measured, ks, MARGIN),
                              "predicted": judge.optimal_k(predicted, ks, MARGIN)}
    out["single_sample"] = round(float(np.mean([np.mean(values[c]) for _, c in problems])), 4)
    return out


def alone(pool, ks) -> dict:
    """T = 0 accuracy of each reward alone (probe; arithmetic share): neither has an interior optimum."""
    out = {}
    for name, weight, probe_weight in (("probe", 0.0, 1.0), ("share", 1.0, 0.0)):
        curves = []
        for rows in pool:
            s = weight * np.array([r["share"] for r in rows]) + probe_weight * np.array([r["probe"] for r in rows])
            c = np.array([r["correct"] for r in rows])
            curves.append(judge.value(judge.Law(np.full(s.size, 1 / s.size), c, s), ks, 0.0))
        curve = np.mean(curves, axis=0)
        out[name] = {"accuracy": curve.round(4).tolist(), "k_star": judge.optimal_k(curve, ks, MARGIN)}
    return out


def show(result: dict) -> None:
    ks = result["ks"]
    picks = [k for k in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32) if k in ks]
    at = [ks.index(k) for k in picks]
    print(f"\ntiny-math: {result['problems']} test problems x {result['samples']} samples, single-sample accuracy "
          f"{result['single_sample']:.3f}; judge = logit P_probe + {result['fit']['weight']:g} x arithmetic share")
    print("  fitted classes (score around the problem's offset): " + "; ".join(
        f"{n}: {m:+.2f} ± {s:.2f} ({c})" for n, m, s, c in zip(result["fit"]["classes"], result["fit"]["means"],
                                                             result["fit"]["sds"], result["fit"]["counts"])))
    print("  k:              " + " ".join(f"{k:>6}" for k in picks) + "   k* measured / predicted")
    for t in result["temperatures"]:
        for what in ("measured", "predicted"):
            curve = result[what][t]
            ks_, interior = result["k_star"][t][what]
            print(f"  T={t:<4} {what:9}" + " ".join(f"{curve[i]:6.3f}" for i in at)
                  + f"   k*={ks_}{' (interior)' if interior else ''}")
    for name, row in result["alone"].items():
        print(f"  alone, T=0, {name:6}  " + " ".join(f"{row['accuracy'][i]:6.3f}" for i in at)
              + f"   k*={row['k_star'][0]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 problems x 24 samples, k up to 16")
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument("--problems", type=int, default=32, help="held-out tiny-math problems (test split)")
    parser.add_argument("--samples", type=int, default=40, help="samples per problem (the pool)")
    parser.add_argument("--k-max", type=int, default=32, help="the largest k")
    parser.add_argument("--weight", type=float, default=WEIGHT, help="nats the arithmetic share weighs")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--write", type=Path, help="also write the result here (the Scaling tab reads "
                                                   "assets/tiny-math/judge.json)")
    parser.add_argument("--from-json", type=Path, help="print a result written by --write; compute nothing")
    parser.add_argument("--png", type=Path, help="also draw the accordion's pictures (its default three-type "
                                                 "case and tiny-math's curves) to this PNG (headless Chromium)")
    args = parser.parse_args(argv)
    if args.quick:
        args.problems, args.samples, args.k_max = min(args.problems, 8), min(args.samples, 24), min(args.k_max, 16)
    for name in ("problems", "samples", "k_max"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")

    def say(text: str) -> None:
        if not args.json:
            print(text, flush=True)

    if args.from_json:
        result = json.loads(args.from_json.read_text(encoding="utf-8"))
    else:
        import torch

        torch.set_num_threads(args.threads)
        t0 = time.process_time()
        pool = sample_pool(args.problems, args.samples, args.seed, say)
        ks = np.arange(1, args.k_max + 1)
        result = {"problems": args.problems, "samples": args.samples, "seed": args.seed,
                  **analyse(pool, ks, TEMPERATURES, args.weight), "alone": alone(pool, ks)}
        result["cpu_s"] = round(time.process_time() - t0, 1)
        result["command"] = "python bench/bench_judge.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.write:
        args.write.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.png:
        draw(result, args.png)
    if args.json:
        print(json.dumps(result))
        return 0
    show(result)
    print(f"\nCPU {result.get('cpu_s', '?')} s")
    return 0


def draw(result: dict, png: Path) -> None:
    """The accordion's figure at its defaults and tiny-math's, stacked in one PNG drawn by plotly.js in
    headless Chromium (as bench_infalign.py draws its own)."""
    from figure_png import figures_png

    from ui.judge import DEFAULTS, judge_view
    from visualizers.judge import tiny_math_figure

    figures = [judge_view(**DEFAULTS)["jd_curves"], tiny_math_figure(result)]
    figures_png(figures, png)


if __name__ == "__main__":
    sys.exit(main())
