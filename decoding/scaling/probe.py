"""Self-evaluation: a linear probe on the policy's hidden state predicts, mid-solution, whether the
solution will end right.

In the spirit of "Adaptive Inference-Time Compute: LLMs Can Predict if They Can Do Better, Even
Mid-Generation" (Manvi et al. 2024), which asks the policy itself (a self-evaluation token) whether
a fresh sample would do better, and prunes or restarts samples early. Here the predictor is a
logistic probe on the policy's last-layer hidden state at the end of each step, trained in
seconds on the policy's own samples (val split of `decoding.scaling.math_tasks`) and stored beside
the model (`probe.json`). As the reward `probe` it scores every step with P(this solution ends
right): the particle filter then restarts doomed particles from promising ones, and A* and refine
see a slip the moment the policy's own state reveals it. Each score is one forward pass of the
policy over the solution so far (counted with the run's passes).

    python -m decoding.scaling.probe train --model tiny-math     # writes assets/tiny-math/probe.json, prints AUC
    python -m decoding.scaling.probe eval --model tiny-math      # AUC on held-out test-split samples

Glossary
    feature   the policy's last-layer (normed) hidden state at a step's last token (its newline).
    label     whether the sample's final answer equals the reference.
    AUC       probability that a right sample's step scores above a wrong one's (0.5 = chance).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import lru_cache
from pathlib import Path

import torch

PROBE_FILE = "probe.json"


class Probe:
    """P(right) = sigmoid(w . h + b) of a hidden state h."""

    def __init__(self, weight: torch.Tensor, bias: float, info: dict | None = None):
        self.weight, self.bias, self.info = weight.double(), float(bias), info or {}

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(hidden.double() @ self.weight + self.bias)

    def to_json(self) -> dict:
        return {"weight": self.weight.tolist(), "bias": self.bias, "info": self.info}

    @classmethod
    def from_json(cls, data: dict) -> Probe:
        return cls(torch.tensor(data["weight"], dtype=torch.float64), data["bias"], data.get("info"))


def probe_path(loaded) -> Path | None:
    """Where a model's probe lives: beside a model loaded from a folder; None for others."""
    from decoding.models import file_beside

    return file_beside(loaded, PROBE_FILE)


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> Probe:
    return Probe.from_json(json.loads(Path(path).read_text()))


def probe_for(lm) -> Probe:
    """The policy's trained probe, or ValueError saying how to train one."""
    path = probe_path(lm.loaded)
    if path is None or not path.exists():
        raise ValueError(f"reward probe needs a probe trained for {lm.name!r} ({PROBE_FILE} beside the model): "
                         "train one with `python -m decoding.scaling.probe train --model NAME`, or use tiny-math, "
                         "which ships one")
    return _load(str(path), path.stat().st_mtime)


def solution_text(steps: list[str]) -> str:
    """The steps as the policy wrote them: one line each, every line ended by its newline."""
    return "".join(step.strip() + "\n" for step in steps if step.strip())


@torch.inference_mode()
def step_states(lm, prompt: str, text: str) -> torch.Tensor:
    """(S, D) the policy's last-layer hidden state at the newline ending each line of `text`
    (the state in which it finished that step), from one forward pass over prompt + text."""
    ids = lm.tokenizer(prompt + text).input_ids
    start = len(lm.tokenizer(prompt).input_ids)
    out = lm.forward(torch.tensor([ids]), output_hidden_states=True, last_only=True)
    ends = [i for i in range(start, len(ids)) if "\n" in lm.tokenizer.decode([ids[i]])]
    return out.hidden[0, ends].float().cpu()


class ProbeReward:
    """Step reward = the probe's P(the solution ends right) at the newest step."""

    name = "probe"

    def __init__(self, lm):
        self.lm, self.probe = lm, probe_for(lm)

    def score(self, question: str, steps: list[str], final: bool):
        from decoding.scaling.rewards import RewardResult

        states = step_states(self.lm, question, solution_text(steps))
        if not len(states):
            return RewardResult(0.5, False, "no finished step yet")
        p = float(self.probe(states[-1]))
        return RewardResult(p, False, f"probe: P(ends right) = {p:.2f}")


# ---------------------------------------------------------------- training on the policy's own samples

def labelled(lm, problems, samples: int, seed: int, say=print) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(features (R, D), labels (R,), step index (R,)) for every step of `samples` temperature-1
    samples per problem."""
    from decoding.scaling.math_eval import generate
    from decoding.scaling.math_tasks import parse_answer, prompt

    prompts = [prompt(p.question) for p in problems]
    texts = generate(lm.model, lm.tokenizer, prompts, temperature=1.0, num_return=samples, generator_seed=seed)
    xs, ys, steps = [], [], []
    for k, (problem, text_list) in enumerate(zip(problems, texts)):
        for text in text_list:
            states = step_states(lm, prompts[k], solution_text(text.splitlines()))
            xs.append(states)
            ys.append(torch.full((len(states),), float(parse_answer(text) == problem.answer)))
            steps.append(torch.arange(len(states)))
        if (k + 1) % 50 == 0:
            say(f"{k + 1} of {len(problems)} problems")
    return torch.cat(xs), torch.cat(ys), torch.cat(steps)


def fit(x: torch.Tensor, y: torch.Tensor, l2: float = 1e-3, steps: int = 300) -> Probe:
    """Logistic regression (full batch, L-BFGS), class-balanced, standardised inputs folded back."""
    x = x.double()
    mean, std = x.mean(0), x.std(0).clamp(min=1e-6)
    z = (x - mean) / std
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    pos = y.mean().clamp(1e-3, 1 - 1e-3)
    weights = torch.where(y > 0.5, 0.5 / pos, 0.5 / (1 - pos)).double()
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = (weights * torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y.double(),
                                                                               reduction="none")).mean()
        loss = loss + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    weight = (w / std).detach()
    return Probe(weight, float((b - (mean / std * w).sum()).detach()))


def fit_mlp(x: torch.Tensor, y: torch.Tensor, hidden: int, steps: int, l2: float, seed: int = 0,
            say=None) -> dict[str, torch.Tensor]:
    """A one-hidden-layer MLP, P(y) = sigmoid(w2 . tanh(W1 z + b1) + b2) with z = (x - mean) / std, by full-batch
    Adam (lr 0.01) on class-balanced cross-entropy plus l2 on the weights; seeded. Returns its tensors (mean, std,
    w1, b1, w2, b2). Arbitrage's router and SPARE's PRM are two of these on different features."""
    g = torch.Generator().manual_seed(seed)
    mean, std = x.mean(0), x.std(0).clamp(min=1e-6)
    z = (x - mean) / std
    w1 = (torch.randn(hidden, x.shape[1], generator=g, dtype=torch.float64) / x.shape[1] ** 0.5).requires_grad_()
    b1 = torch.zeros(hidden, dtype=torch.float64, requires_grad=True)
    w2 = (torch.randn(hidden, generator=g, dtype=torch.float64) / hidden ** 0.5).requires_grad_()
    b2 = torch.zeros((), dtype=torch.float64, requires_grad=True)
    pos = y.mean().clamp(1e-3, 1 - 1e-3)
    weights = torch.where(y > 0.5, 0.5 / pos, 0.5 / (1 - pos))
    opt = torch.optim.Adam([w1, b1, w2, b2], lr=0.01)
    for step in range(steps):
        opt.zero_grad()
        logits = torch.tanh(z @ w1.T + b1) @ w2 + b2
        loss = (weights * torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")).mean()
        (loss + l2 * ((w1 * w1).sum() + (w2 * w2).sum())).backward()
        opt.step()
        if say and step % 100 == 0:
            say(f"step {step}: loss {float(loss):.4f}")
    return {"mean": mean, "std": std, "w1": w1.detach(), "b1": b1.detach(), "w2": w2.detach(), "b2": b2.detach()}


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties half."""
    pos, neg = scores[labels > 0.5], scores[labels <= 0.5]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).double().mean()
    ties = (pos[:, None] == neg[None, :]).double().mean()
    return float(greater + 0.5 * ties)


def evaluate(probe: Probe, x: torch.Tensor, y: torch.Tensor, step: torch.Tensor) -> dict:
    scores = probe(x)
    by_step = {int(s): round(auc(scores[step == s], y[step == s]), 3) for s in step.unique().tolist()[:8]}
    return {"rows": len(y), "right_fraction": round(float(y.mean()), 3), "auc": round(auc(scores, y), 3),
            "auc_by_step": by_step}


def main(argv=None) -> int:
    from decoding.run import as_lm
    from decoding.scaling.math_tasks import SPLIT_SIZES, make_splits

    parser = argparse.ArgumentParser(prog="python -m decoding.scaling.probe", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("train", "eval"))
    parser.add_argument("--model", default="tiny-math")
    parser.add_argument("--problems", type=int, default=300, help="val problems to train on (test problems to eval)")
    parser.add_argument("--samples", type=int, default=8, help="temperature-1 samples per problem")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    lm = as_lm(args.model)
    splits = make_splits(sizes={**SPLIT_SIZES, "train": 0})
    t0 = time.process_time()
    test_x, test_y, test_step = labelled(lm, splits["test"][: min(args.problems, 100)], 4, args.seed + 1, say)
    if args.command == "train":
        x, y, step = labelled(lm, splits["val"][: args.problems], args.samples, args.seed, say)
        probe = fit(x, y)
        held_out = evaluate(probe, test_x, test_y, test_step)
        probe.info = {"model": args.model, "trained_on": f"{args.problems} val problems x {args.samples} samples at "
                      f"temperature 1 ({len(y)} steps)", "train": evaluate(probe, x, y, step), "held_out": held_out}
        path = probe_path(lm.loaded)
        path.write_text(json.dumps(probe.to_json()))
        say(f"wrote {path}")
        print(json.dumps(probe.info | {"cpu_s": round(time.process_time() - t0, 1)}, indent=1))
    else:
        print(json.dumps(evaluate(probe_for(lm), test_x, test_y, test_step), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
