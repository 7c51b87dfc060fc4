"""Arbitrage's router: predict, before the policy writes a step, whether its step would beat the drafter's.

Paper followed
    Maheswaran et al. 2025, "Arbitrage: Efficient Reasoning via Advantage-Aware Speculation" (arXiv
    2512.05033; the authors' code, SqueezeAILab/Arbitrage `arbitrage.py`). Step-level speculation gates
    each drafted step. A fixed reward threshold (SpecReason, RSD) sends the policy every step whose
    draft scores low, even where the policy would write no better step. The **Arbitrage oracle**
    writes both steps, scores both with the same process reward, and keeps the policy's when its
    reward exceeds the draft's by more than a margin (the advantage); it is an upper bound that pays
    for both. The **Arbitrage router** is a small model trained on the oracle's decisions (label: the
    policy's step scored higher than the draft's) that predicts them from what exists before the
    policy writes: it escalates a step to the policy when its P(advantage) is above its threshold.

As here (`step-speculation` with `gate=oracle` or `gate=router`, `decoding.scaling.specreason`)
    The paper's router is a 1.5B PRM fine-tuned on the text (question, earlier steps each annotated
    with the model that wrote it, the draft). Ours is a small MLP on features of the drafter's own
    step, read from the drafter's forward pass and the run's reward (no policy call): the draft's
    reward, the drafter's log-probability and entropy at its tokens (its confidence), the step's
    length and index, whether the previous step was the policy's (the paper's annotation), and
    whether the draft is the answer line. Trained on tiny-math's validation problems, labelled by
    running the oracle (margin 0) on them, and stored beside the policy (`arbitrage-router.json`)
    with what it was trained for (drafter, its temperature, the reward) and its held-out AUC:

        python -m decoding.scaling.arbitrage train --drafter tiny-math-draft --draft-temperature 1
        python -m decoding.scaling.arbitrage eval

Glossary
    draft       the drafter's step; policy step: the step the policy writes itself.
    advantage   reward(policy step) - reward(draft), both under the run's step reward.
    escalate    the policy writes the step (it costs one policy call per token instead of one
                verification call).
    AUC         P(the router scores a step whose policy alternative was better above one whose was not).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import lru_cache
from pathlib import Path

import torch

ROUTER_FILE = "arbitrage-router.json"
FEATURES = ("draft_reward", "min_logprob", "mean_logprob", "mean_entropy", "max_entropy", "tokens", "step",
            "previous_by_policy", "answer_line")


def draft_features(reward: float, stats: list[tuple[float, float]], step: int, previous_by_policy: bool,
                   text: str) -> list[float]:
    """The router's input for one draft (`FEATURES`' order): `stats` is the drafter's (log-prob, entropy) at each
    token it drew (`ParticleBatch(token_stats=True)`), `step` the number of steps before it."""
    logprobs = [lp for lp, _ in stats] or [0.0]
    entropies = [h for _, h in stats] or [0.0]
    return [float(reward), min(logprobs), sum(logprobs) / len(logprobs), sum(entropies) / len(entropies),
            max(entropies), float(len(stats)), float(step), float(previous_by_policy), float("answer" in text.lower())]


class Router:
    """P(the policy's step beats the draft) = sigmoid(w2 . tanh(W1 z + b1) + b2), z the standardised features."""

    def __init__(self, mean, std, w1, b1, w2, b2, info: dict | None = None):
        as64 = lambda v: torch.as_tensor(v, dtype=torch.float64)
        self.mean, self.std, self.w1, self.b1, self.w2, self.b2 = map(as64, (mean, std, w1, b1, w2, b2))
        self.info = info or {}

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        z = (x.double() - self.mean) / self.std  # (R, F)
        return torch.tanh(z @ self.w1.T + self.b1) @ self.w2 + self.b2  # (R,)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(x))

    def to_json(self) -> dict:
        round_list = lambda t: [round(v, 6) for v in t.flatten().tolist()]
        return {"features": list(FEATURES), "hidden": int(self.w1.shape[0]), "mean": round_list(self.mean),
                "std": round_list(self.std), "w1": round_list(self.w1), "b1": round_list(self.b1),
                "w2": round_list(self.w2), "b2": float(self.b2), "info": self.info}

    @classmethod
    def from_json(cls, data: dict) -> Router:
        if list(data.get("features", [])) != list(FEATURES):
            raise ValueError(f"the router file was trained on features {data.get('features')}, this code reads "
                             f"{list(FEATURES)}: train it again (python -m decoding.scaling.arbitrage train)")
        hidden = int(data["hidden"])
        w1 = torch.tensor(data["w1"], dtype=torch.float64).view(hidden, len(FEATURES))
        return cls(data["mean"], data["std"], w1, data["b1"], data["w2"], data["b2"], data.get("info"))


def router_path(loaded) -> Path | None:
    """Where a policy's router lives: beside a model loaded from a folder; None for others."""
    from decoding.models import file_beside

    return file_beside(loaded, ROUTER_FILE)


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> Router:
    return Router.from_json(json.loads(Path(path).read_text()))


def router_for(lm, drafter: str, reward: str) -> Router:
    """The policy's trained router for this drafter and reward, or ValueError saying how to train one."""
    path = router_path(lm.loaded)
    train = (f"train one with `python -m decoding.scaling.arbitrage train --model {lm.name} --drafter {drafter} "
             f"--reward {reward}`")
    if path is None or not path.exists():
        raise ValueError(f"gate=router needs an Arbitrage router trained for {lm.name!r} ({ROUTER_FILE} beside the "
                         f"model): {train}, or use tiny-math with drafter tiny-math-draft, which ships one")
    router = _load(str(path), path.stat().st_mtime)
    trained = (router.info.get("drafter"), router.info.get("reward"))
    if trained != (drafter, reward):
        raise ValueError(f"the shipped router of {lm.name!r} was trained for drafter {trained[0]!r} with reward "
                         f"{trained[1]!r}, not drafter {drafter!r} with reward {reward!r}: set draft_model and reward "
                         f"to those, or {train}")
    return router


# ---------------------------------------------------------------- labelled steps, from the oracle

def oracle_steps(lm, problems, drafter: str, draft_temperatures: tuple[float, ...], reward: str, samples: int,
                 seed: int, say=print) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(features (R, F), labels (R,), summary) of every step of `samples` oracle runs (step-speculation,
    gate=oracle, margin 0) per problem and drafter temperature: label 1 when the policy's step scored
    higher than the draft."""
    from decoding import run_to_trace
    from decoding.scaling.math_eval import MAX_NEW_TOKENS
    from decoding.scaling.math_tasks import prompt

    params = {"n": 1, "gate": "oracle", "oracle_margin": 0.0, "draft_model": drafter, "reward": reward,
              "temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}
    xs, ys, right = [], [], 0
    runs = [(t, s) for t in draft_temperatures for s in range(samples)]
    for k, problem in enumerate(problems):
        for t, s in runs:
            trace = run_to_trace(lm, prompt(problem.question), strategy="step-speculation",
                                 params=params | {"draft_temperature": t}, max_new_tokens=MAX_NEW_TOKENS, chat=False,
                                 seed=seed + 1000 * s + k)
            for event in trace.of_kind("particles"):
                sp = event.extra["speculation"]
                for slot, features in sp["features"].items():
                    xs.append(features)
                    ys.append(float(sp["policy_rewards"][slot] > sp["draft_rewards"][slot]))
            right += trace.finish.extra["answer"] == str(problem.answer)
        if (k + 1) % 50 == 0:
            say(f"{k + 1} of {len(problems)} problems")
    x, y = torch.tensor(xs, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64)
    return x, y, {"steps": len(y), "advantage_share": round(float(y.mean()), 3),
                  "oracle_accuracy": round(right / max(1, len(problems) * len(runs)), 3)}


def fit(x: torch.Tensor, y: torch.Tensor, hidden: int = 16, steps: int = 1500, l2: float = 1e-3,
        seed: int = 0) -> Router:
    """A one-hidden-layer MLP by full-batch Adam on class-balanced cross-entropy (`probe.fit_mlp`)."""
    from decoding.scaling.probe import fit_mlp

    t = fit_mlp(x, y, hidden, steps, l2, seed)
    return Router(t["mean"], t["std"], t["w1"], t["b1"], t["w2"], t["b2"])


def evaluate(router: Router, x: torch.Tensor, y: torch.Tensor) -> dict:
    from decoding.scaling.probe import auc

    scores = router(x)
    rounded = lambda a: round(a, 3) if a == a else None  # nan (one class only) -> None
    by_reward = {f"{r:g}": rounded(auc(scores[x[:, 0] == r], y[x[:, 0] == r]))
                 for r in sorted(set(x[:, 0].tolist())) if int((x[:, 0] == r).sum()) >= 20}
    return {"steps": len(y), "advantage_share": round(float(y.mean()), 3), "auc": round(auc(scores, y), 3),
            "auc_of_the_draft_reward_alone": round(auc(-x[:, 0], y), 3), "auc_within_each_draft_reward": by_reward}


def main(argv=None) -> int:
    from decoding.run import as_lm
    from decoding.scaling.math_tasks import SPLIT_SIZES, make_splits

    parser = argparse.ArgumentParser(prog="python -m decoding.scaling.arbitrage", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("train", "eval"))
    parser.add_argument("--model", default="tiny-math")
    parser.add_argument("--drafter", default="tiny-math-draft")
    parser.add_argument("--draft-temperatures", default="0,1", help="the drafter's temperatures, one oracle run each")
    parser.add_argument("--reward", default="arith-step")
    parser.add_argument("--problems", type=int, default=300, help="val problems to train on")
    parser.add_argument("--samples", type=int, default=1, help="oracle runs per problem and drafter temperature")
    parser.add_argument("--held-out", type=int, default=100, help="test problems (100 onwards) to measure the AUC on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    lm = as_lm(args.model)
    splits = make_splits(sizes={**SPLIT_SIZES, "train": 0})
    t0 = time.process_time()
    temperatures = tuple(float(t) for t in args.draft_temperatures.split(","))
    common = dict(drafter=args.drafter, draft_temperatures=temperatures, reward=args.reward, say=say)
    test_x, test_y, test_info = oracle_steps(lm, splits["test"][100:100 + args.held_out], samples=1,
                                             seed=args.seed + 1, **common)
    if args.command == "eval":
        router = router_for(lm, args.drafter, args.reward)
        print(json.dumps(evaluate(router, test_x, test_y) | test_info, indent=1))
        return 0
    x, y, info = oracle_steps(lm, splits["val"][: args.problems], samples=args.samples, seed=args.seed, **common)
    router = fit(x, y, seed=args.seed)
    blind = lambda t: torch.cat([torch.zeros(len(t), 1, dtype=t.dtype), t[:, 1:]], 1)  # the reward hidden
    without_reward = fit(blind(x), y, seed=args.seed)
    router.info = {"model": args.model, "drafter": args.drafter, "draft_temperatures": list(temperatures),
                   "reward": args.reward, "policy_temperature": 1.0,
                   "trained_on": f"{args.problems} val problems x {len(temperatures) * args.samples} oracle runs "
                                 f"(margin 0; drafter temperatures {args.draft_temperatures}), {len(y)} steps",
                   "train": evaluate(router, x, y) | info,
                   "held_out": evaluate(router, test_x, test_y) | test_info
                   | {"problems": f"test split {100}-{100 + args.held_out - 1}, one oracle run per drafter temperature"},
                   "held_out_auc_without_the_reward": evaluate(without_reward, blind(test_x), test_y)["auc"]}
    path = router_path(lm.loaded)
    path.write_text(json.dumps(router.to_json()))
    say(f"wrote {path}")
    print(json.dumps(router.info | {"cpu_s": round(time.process_time() - t0, 1)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
