"""Learn2PD: a small learned filter that says which masked positions are already final.

Bao et al. 2025, "Learning to Parallel: Accelerating Diffusion Large Language Models via Adaptive
Parallel Decoding" (Learn2PD): a lightweight filter model, trained after the fact on the dLLM's
own decoding runs, predicts for every masked position whether the token the model would put
there now equals the token it ends with; every position predicted final is committed at once.
Here the filter is a two-layer MLP over a handful of per-position features, trained in seconds
by this module's CLI on one-per-step greedy runs of the model (its reference canvases), and
stored as a small JSON file beside the model (`learn2pd.json`). The sampler `learn2pd` (its own knob
`learn2pd.filter_threshold`) is registered at the end of this module: a plug-in in a module of its own.

Glossary
    features   per masked position at one step: top-1 probability, top-1 minus top-2, entropy
               over log V, whether the top-1 token ends the text (eos), relative position,
               fraction of the canvas still masked, and whether each neighbour is decided.
    final      label of a (step, position): the top-1 token now equals the token the one-per-step
               greedy run commits there in the end.
    precision  of the filter's "final" predictions on held-out runs: the fraction that were final.

    python -m decoding.diffusion.learn2pd train --model tiny-parallel          # writes assets/tiny-parallel/learn2pd.json
    python -m decoding.diffusion.learn2pd eval --model tiny-parallel           # precision / recall on held-out runs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from decoding import bibliography as bib
from decoding.diffusion.samplers import SAMPLERS, scheduled_step, select_top_k
from decoding.params import Params, param

FILTER_FILE = "learn2pd.json"
FEATURES = ("top1", "margin", "entropy", "eos", "position", "masked_fraction", "left_decided", "right_decided")
HIDDEN = 16


def position_features(logits: torch.Tensor, canvas: torch.Tensor, mask_id: int, stop_ids) -> torch.Tensor:
    """Features (L, F) of every canvas position from the model's logits for the canvas (L, V),
    the mask id already excluded (-inf). `canvas` (L,) holds mask ids where undecided."""
    probs = torch.softmax(logits.double(), -1)  # (L, V)
    top2 = probs.topk(2, dim=-1)
    entropy = -(probs * torch.log(probs.clamp_min(1e-300))).sum(-1) / math.log(probs.shape[-1])
    length = len(canvas)
    masked = canvas == mask_id
    decided = torch.cat([torch.ones(1, dtype=torch.bool), ~masked, torch.ones(1, dtype=torch.bool)])  # prompt / end
    eos = torch.isin(top2.indices[:, 0], torch.tensor(sorted(stop_ids) or [-1]))
    return torch.stack([
        top2.values[:, 0], top2.values[:, 0] - top2.values[:, 1], entropy, eos.double(),
        torch.arange(length, dtype=torch.float64) / max(length - 1, 1),
        masked.double().mean().expand(length), decided[:-2].double(), decided[2:].double(),
    ], dim=-1).float()


class Filter(torch.nn.Module):
    """Features (N, F) -> probability (N,) that the position's top-1 token is final."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(len(FEATURES), HIDDEN), torch.nn.ReLU(),
                                       torch.nn.Linear(HIDDEN, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(x)[:, 0])

    def to_json(self, info: dict) -> dict:
        return {"features": list(FEATURES), "hidden": HIDDEN, "info": info,
                "state": {k: v.tolist() for k, v in self.state_dict().items()}}

    @classmethod
    def from_json(cls, data: dict) -> "Filter":
        if data.get("features") != list(FEATURES) or data.get("hidden") != HIDDEN:
            raise ValueError("this Learn2PD filter was trained with other features; train it again")
        f = cls()
        f.load_state_dict({k: torch.tensor(v) for k, v in data["state"].items()})
        return f.eval()


def filter_path(loaded) -> Path | None:
    """Where a model's filter lives: beside a model loaded from a folder; None for others."""
    from decoding.models import file_beside

    return file_beside(loaded, FILTER_FILE)


@lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> Filter:
    return Filter.from_json(json.loads(Path(path).read_text()))


def filter_for(loaded) -> Filter:
    """The model's trained filter, or ValueError saying how to train one."""
    path = filter_path(loaded)
    if path is None or not path.exists():
        raise ValueError(f"`sampler`=learn2pd needs a filter trained for {loaded.name!r} ({FILTER_FILE} beside the "
                         "model): train one with `python -m decoding.diffusion.learn2pd train --model NAME`, or "
                         "use tiny-parallel, which ships one")
    return _load(str(path), path.stat().st_mtime)


# ---------------------------------------------------------------- training data from the model's own runs


@torch.no_grad()
def labelled_run(lm, prompt: str, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One one-per-step low-confidence greedy run: (features (N, F), final (N,) bool) of every
    masked position at every step, labelled against the run's own end canvas."""
    prompt_ids = torch.tensor(lm.encode_prompt(prompt)[0])  # with the chat template, as the labs run it
    canvas = torch.full((length,), lm.mask_id, dtype=torch.long)
    one_per_step = (0, 0, length, 1)  # (block, lo, hi, k): the best masked position of the whole canvas
    rows, tops = [], []
    for _ in range(length):
        masked = canvas == lm.mask_id
        logits = lm.logits(torch.cat([prompt_ids, canvas]))[len(prompt_ids):]
        new_canvas, _, drawn, _, masked_logits = scheduled_step(canvas, logits, lm.mask_id, "low-confidence",
                                                                one_per_step, None)
        rows.append(position_features(masked_logits, canvas, lm.mask_id, lm.stop_ids)[masked])
        tops.append((drawn[masked], torch.nonzero(masked)[:, 0]))
        canvas = new_canvas
    labels = [canvas[pos] == top for top, pos in tops]
    return torch.cat(rows), torch.cat(labels)


def collect(lm, prompts: list[str], length: int, say=print) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for i, prompt in enumerate(prompts):
        x, y = labelled_run(lm, prompt, length)
        xs.append(x)
        ys.append(y)
        if (i + 1) % 50 == 0:
            say(f"{i + 1} of {len(prompts)} runs")
    return torch.cat(xs), torch.cat(ys)


def fit(x: torch.Tensor, y: torch.Tensor, steps: int = 600, seed: int = 0) -> Filter:
    """Full-batch Adam on binary cross-entropy."""
    torch.manual_seed(seed)
    f = Filter()
    opt = torch.optim.Adam(f.parameters(), lr=1e-2)
    target = y.float()
    for _ in range(steps):
        loss = torch.nn.functional.binary_cross_entropy(f(x).clamp(1e-6, 1 - 1e-6), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return f.eval()


@torch.no_grad()
def precision_recall(f: Filter, x: torch.Tensor, y: torch.Tensor, threshold: float) -> dict:
    predicted = f(x) >= threshold
    tp = int((predicted & y).sum())
    return {"threshold": threshold, "predicted_final": int(predicted.sum()), "precision": tp / max(int(predicted.sum()), 1),
            "recall": tp / max(int(y.sum()), 1), "positives": int(y.sum()), "examples": len(y)}


def _prompts(split: str, count: int) -> list[str]:
    """The first `count` prompts of tiny-parallel's training or test split (the splits as the
    model's training data had them: held-out prompts are drawn first, with the same seed)."""
    from decoding.diffusion.parallel_tasks import SPLIT_SIZES, TASKS, make_splits

    per_task = count // len(TASKS) + 1
    sizes = {**SPLIT_SIZES, "train": per_task if split == "train" else 0}
    if split == "test":
        sizes["test"] = per_task
    return [e.prompt for e in make_splits(sizes=sizes)[split][:count]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.diffusion.learn2pd", description=__doc__.splitlines()[0])
    parser.add_argument("cmd", choices=("train", "eval"))
    parser.add_argument("--model", default="tiny-parallel")
    parser.add_argument("--runs", type=int, default=300, help="greedy runs to learn from (train) or to score (eval)")
    parser.add_argument("--length", type=int, default=32, help="canvas length of the runs")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from decoding.run import as_lm

    lm = as_lm(args.model)
    start = time.time()
    if args.cmd == "train":
        x, y = collect(lm, _prompts("train", args.runs), args.length)
        f = fit(x, y)
        held_x, held_y = collect(lm, _prompts("test", max(args.runs // 3, 10)), args.length)
        info = {"model": args.model, "runs": args.runs, "length": args.length, "examples": len(y),
                "final_rate": float(y.float().mean()), "seconds": round(time.time() - start, 1),
                "held_out": [precision_recall(f, held_x, held_y, t) for t in (0.5, 0.7, 0.9, 0.95)]}
        path = filter_path(lm.loaded)
        if path is None:
            raise SystemExit(f"error: {args.model} is not loaded from a folder; nowhere to store its filter")
        path.write_text(json.dumps(f.to_json(info)) + "\n")
        print(json.dumps(info, indent=2))
        return 0
    f = filter_for(lm.loaded)
    x, y = collect(lm, _prompts("test", args.runs), args.length)
    print(json.dumps([precision_recall(f, x, y, t) for t in (0.5, 0.7, 0.9, 0.95)], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------- the sampler
@dataclass(frozen=True)
class Learn2PDParams(Params):
    filter_threshold: float = param(0.9, low=0.0, high=1.0, low_inclusive=False,
                                    help="Commit every masked position the filter says is final with at least this "
                                         "probability.")


@SAMPLERS.register("learn2pd", help="commit every masked position a small learned filter predicts is already final "
                                     "(Learn2PD; the filter ships with tiny-parallel)",
                   params=Learn2PDParams, needs_view=True, check_model=filter_for, papers=(bib.BAO_2025,))
def _learn2pd(scores, candidates, params, scheduled: int, view) -> tuple[torch.Tensor, dict]:
    lm = view.lm
    final_p = filter_for(lm.loaded)(position_features(view.logits, view.canvas, lm.mask_id, lm.stop_ids))  # (L,)
    final = candidates & (final_p >= params.own.filter_threshold)
    chosen = final | select_top_k(scores, candidates, 1)
    return chosen, {"filter_threshold": params.own.filter_threshold, "predicted_final": torch.nonzero(final)[:, 0].tolist(),
                    "filter_p": [round(float(p), 4) if c else None for p, c in zip(final_p.tolist(), candidates.tolist())]}
