"""Drawing time of the worst-case traces: every figure of a trace at the bounds of `decoding/trace_checks.py`.

Issue 25: plotly's `add_vline` / `add_annotation` copy the layout on every call, so drawing one layout
object per mark is quadratic (500 lines took 79 s), and a hostile trace held a worker for minutes. The
visualizers now draw repeated marks as one trace and cap what they draw (`visualizers/_limits.py`). This
builds, in memory and without a model, the traces that hurt most:

    diffusion   a canvas of 2,048 positions (the canvas bound) with block_length 1: one block boundary per
                position, one step per position (what a legitimate run of length 2,048 with block length 1
                records)
    scaling     a particle filter that resampled after each of 320 steps, 64 particles (n's bound)
    spec        one speculative round whose draft tree has 400 children of the root, each with its
                target / draft probabilities recorded at the root (400 "drafted" marks on p vs q)
    astar       an A* search tree of 2,000 expansions x 16 candidates (32,001 nodes: about what a 5 MB
                upload can hold)
    momentum    2,048 momentum-decoding steps (one graph edge per step)

and reports, per figure, the median wall-clock and CPU seconds (`time.process_time`) to build it.

    python bench/bench_draw.py [--rounds 3] [--quick] [--json]

`--quick` builds smaller traces (the smoke test's size); the bounds of the figures are the same.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoding.events import (
    DiffusionStep,
    ParticleStep,
    RunFinished,
    RunStarted,
    SpecRound,
    TokenStep,
    Trace,
)


def start(strategy: str) -> RunStarted:
    return RunStarted(model="tiny", strategy=strategy, params={}, prompt="p", prompt_text="p", prompt_ids=[1],
                      chat=False, seed=0, max_new_tokens=2048, device="cpu", dtype="float32", vocab_size=50_000)


def diffusion_steps(length: int = 2048, steps: int | None = None) -> list[DiffusionStep]:
    """`steps` denoising steps (default: one per position) over a canvas of `length` with block_length 1:
    step t commits position t (left to right), block t."""
    steps = length if steps is None else steps
    canvas, out = [-1] * length, []
    for t in range(steps):
        p = t % length
        canvas = canvas.copy()
        canvas[p] = 100 + p
        out.append(DiffusionStep(
            step=t, block=p, canvas=canvas, canvas_text=[f"w{i}" if c != -1 else "" for i, c in enumerate(canvas)],
            unmasked=[p], unmasked_tokens=[100 + p], confidence=[0.5 + 0.4 * (p % 7) / 7],
            masked_confidence=[None if c != -1 else 0.3 for c in canvas], nfe=t + 1, elapsed_s=0.01 * t,
            extra={"block_length": 1}))
    return out


def scaling_steps(steps: int = 320, n: int = 64) -> list[ParticleStep]:
    """A particle filter over `n` particles that resampled (ancestors all 0) after every step."""
    out = []
    for t in range(steps):
        particles = [{"id": i, "parent": -1 if t == 0 else 0, "weight": 1 / n, "text": f"step {t} of particle {i}",
                      "step_text": f" s{t}", "steps": t + 1, "reward": 0.5, "score": 0.5, "finished": False,
                      "num_tokens": 4 * (t + 1), "answer": None} for i in range(n)]
        out.append(ParticleStep(step=t, method="particle-filter", particles=particles, ancestors=[0] * n,
                                resampled=True, weights_after=[1 / n] * n, ess=float(n), tokens_spent=4 * n * (t + 1),
                                elapsed_s=0.1 * t, extra={"ess_threshold": 0.5}))
    return out


def spec_trace(children: int = 400) -> Trace:
    """One speculative round whose draft tree is `children` children of the root (all rejected but the
    first), with p and q recorded at the root for each of them."""
    nodes = [{"id": i, "parent": -1, "depth": 1, "token_id": 1000 + i, "token_text": f" t{i}",
              "status": "accepted" if i == 0 else "rejected", "q": 1 / children, "logq_cum": -6.0,
              "p": 1 / children, "u": 0.5, "accept_prob": 1.0} for i in range(children)]
    ids = [1000 + i for i in range(children)]
    dist = {"parent": -1, "overlap": 0.9, "p_top_ids": ids, "p_top_probs": [1 / children] * children,
            "p_top_tokens": [f" t{i}" for i in range(children)], "q_top_ids": ids,
            "q_top_probs": [1 / children] * children, "q_top_tokens": [f" t{i}" for i in range(children)]}
    r = SpecRound(round=0, step=0, drafter="model", nodes=nodes, accepted_path=[0], extra_token_id=5,
                  extra_token_text=" x", extra_kind="residual", extra_p=0.2, token_ids=[1000, 5], dists=[dist],
                  draft_forward_passes=1, target_forward_passes=1, draft_time_s=0.0, verify_time_s=0.0, elapsed_s=0.1)
    return Trace([start("speculative"), r])


def astar_steps(expansions: int = 2000, n: int = 16) -> tuple[list[ParticleStep], dict]:
    """A* that expands node 0, then always the newest node's first child (a deep, bushy tree); the last
    candidate is complete and chosen."""
    out, next_id, expand = [], 1, 0
    depth = {0: 0}
    for t in range(expansions):
        nodes = [{"id": next_id + i, "f": (i + 1) / (n + 1), "complete": t == expansions - 1 and i == 0}
                 for i in range(n)]
        for node in nodes:
            depth[node["id"]] = depth[expand] + 1
        particles = [{"id": i, "parent": -1, "weight": 1 / n, "text": f"node {next_id + i}", "step_text": " s",
                      "steps": depth[expand] + 1, "reward": 0.5, "score": 0.5, "finished": False,
                      "num_tokens": 4} for i in range(n)]
        out.append(ParticleStep(step=t, method="a-star", particles=particles, ancestors=list(range(n)),
                                resampled=False, weights_after=[1 / n] * n, ess=float(n), tokens_spent=4 * n * (t + 1),
                                elapsed_s=0.1 * t, extra={"expanded": {"id": expand, "f": 0.1, "depth": depth[expand]},
                                                          "nodes": nodes, "frontier": n * (t + 1)}))
        expand, next_id = next_id, next_id + n
    finish = {"method": "a-star", "chosen": 0, "answer": None, "votes": {},
              "particles": [{"id": 0, "text": f"node {expand}", "weight": 1.0, "score": 0.5}]}
    return out, finish


def momentum_trace(steps: int = 2048) -> Trace:
    """Momentum decoding writing `steps` tokens over 64 distinct ids (every step after the first lap a loop)."""
    events = [start("momentum")]
    for t in range(steps):
        events.append(TokenStep(step=t, token_id=t % 64, token_text=f" w{t % 64}", prob=0.5, sampling_prob=1.0, rank=1,
                                entropy=1.0, entropy_truncated=0.0, kept_size=1, top_ids=[t % 64], top_tokens=[" w"],
                                top_probs=[0.5], top_kept=[True], elapsed_s=0.01 * t,
                                extra={"depth": 0 if t < 64 else 3, "alpha": 0.5}))
    events.append(RunFinished(text="", token_ids=[t % 64 for t in range(steps)], stop_reason="max_new_tokens",
                              elapsed_s=1.0))
    return Trace(events)


def figures(quick: bool = False) -> dict:
    """name -> a function drawing one figure of a worst-case trace (traces built once, here)."""
    from visualizers import (
        acceptance_figure,
        confidence_figure,
        draft_tree_figure,
        lineage_figure,
        overlap_figure,
        search_tree_figure,
        tokens_per_step_figure,
        unmask_order_figure,
        weights_figure,
    )
    from visualizers.token_methods import momentum_graph_figure

    diffusion = diffusion_steps(256 if quick else 2048)
    scaling = scaling_steps(40 if quick else 320, 16 if quick else 64)
    spec = spec_trace(400)
    astar, astar_finish = astar_steps(100 if quick else 2000)
    momentum = momentum_trace(256 if quick else 2048)
    return {
        "diffusion: unmask order": lambda: unmask_order_figure(diffusion),
        "diffusion: confidence": lambda: confidence_figure(diffusion),
        "diffusion: tokens per step": lambda: tokens_per_step_figure(diffusion),
        "scaling: weights + ESS": lambda: weights_figure(scaling),
        "scaling: lineage": lambda: lineage_figure(scaling, {"chosen": 0}),
        "spec: draft tree": lambda: draft_tree_figure(spec),
        "spec: p vs q": lambda: overlap_figure(spec),
        "spec: acceptance": lambda: acceptance_figure(spec),
        "a-star: search tree": lambda: search_tree_figure(astar, astar_finish),
        "momentum: graph": lambda: momentum_graph_figure(momentum),
    }


class TooLong(Exception):
    pass


def _alarm(signum, frame):
    raise TooLong


def measure(draw, rounds: int, limit_s: int = 0) -> dict:
    """Median wall / CPU seconds of `rounds` draws; with `limit_s`, a draw still running after that many
    seconds is stopped and reported as {"over_s": limit_s} (the old quadratic code takes minutes)."""
    walls, cpus = [], []
    for _ in range(rounds):
        w, c = time.perf_counter(), time.process_time()
        if limit_s:
            signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(limit_s)
        try:
            draw()
        except TooLong:
            return {"over_s": limit_s}
        finally:
            signal.alarm(0)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {"wall_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="draws per figure (the median is reported)")
    ap.add_argument("--quick", action="store_true", help="smaller traces (the smoke test)")
    ap.add_argument("--only", default="", help="draw only the figures whose name contains this")
    ap.add_argument("--limit-s", type=int, default=0, help="stop a draw after this many seconds (0 = never)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.limit_s < 0:
        ap.error(f"--rounds must be >= 1 and --limit-s >= 0, got {args.rounds} and {args.limit_s}")
    results = {}
    for name, draw in figures(args.quick).items():
        if args.only in name:
            results[name] = measure(draw, args.rounds, args.limit_s)
            if not args.json:
                r = results[name]
                print(f"{name:32s} " + (f"> {r['over_s']} s (stopped)" if "over_s" in r else
                                        f"{r['wall_s']:8.3f} s wall {r['cpu_s']:8.3f} s CPU"), flush=True)
    if args.json:
        print(json.dumps({"quick": args.quick, "rounds": args.rounds, "figures": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
