"""SPARE's trained process reward model: steps labelled against reference solutions train a PRM that
then scores steps with no reference at all (the reward `spare-prm`).

Paper followed
    Rizvi, Zhu and Gurevych 2025, "SPARE: Single-Pass Annotation with Reference-Guided Evaluation for
    Automatic Process Supervision and Reward Modelling" (arXiv 2506.15498; the authors' code,
    UKPLab/aaai2026-spare-prm). Sampled solutions are annotated step by step in one pass, each step
    aligned with the reference solution's step(s) and judged; a PRM is trained on those labels
    (there: a causal LM fine-tuned to put P(correct) on a tag after each step, training data balanced
    by outcome) and used, without the reference, to rank and aggregate candidate solutions.

As here
    - annotation: `ReferenceStepChecker.align`, the rule the reward `spare` scores with, labels each
      line of a sampled tiny-math solution right or wrong against the reference read from its
      question (the paper has an LLM do this alignment; for tiny-math's one question form a rule is exact);
    - data: tiny-math's own samples at temperature 1 on problems drawn afresh (`fresh_problems`: a seed of
      their own, no question of the val, test, open or unseen splits), so no held-out problem trains it;
    - the PRM: a one-hidden-layer MLP on tiny-math's own forward pass at each step (its last-layer
      state at the step's newline, and the log-probability and entropy it gave the step's tokens):
      a head on the policy, as `decoding.scaling.probe` is, but trained on step labels, not outcomes.
      Class-balanced cross-entropy. Shipped beside the model (`spare-prm.safetensors`, float16, with
      what it was trained on and its held-out AUC in the file's metadata);
    - use: reward `spare-prm` = P(the newest step is right); it reads the question and the steps
      through the policy, never the reference. Each score is one forward pass of the policy over the
      solution so far (counted with the run's passes).

        python -m decoding.scaling.spare_prm train --model tiny-math   # writes the file, prints the AUC
        python -m decoding.scaling.spare_prm eval --model tiny-math    # AUC on held-out val/test samples

Glossary
    label   a step (line) is right when it applies the question's operation and operand at its place
            to the previous line's result with right arithmetic (the answer line: after exactly as many
            steps, repeating the last result); lines that are neither are not labelled.
    AUC     P(a right step scores above a wrong one) on steps of held-out problems (0.5 = chance).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from functools import lru_cache
from pathlib import Path

import torch

PRM_FILE = "spare-prm.safetensors"
STATS = ("min_logprob", "mean_logprob", "sum_logprob", "min_margin", "not_top", "max_entropy", "mean_entropy", "tokens")


def step_labels(question: str, text: str) -> list[tuple[str, bool | None]]:
    """(line, label) for each non-empty line of a solution: True / False from the reference alignment
    (`ReferenceStepChecker.align`), None for a line that is neither a step nor the answer line."""
    from decoding.scaling.rewards import ReferenceStepChecker

    lines = [line.strip() for line in text.splitlines() if line.strip()]
    aligned = ReferenceStepChecker().align(question, lines)
    if aligned is None:
        raise ValueError(f"`question` is not in tiny-math's form, so there is no reference to align with: "
                         f"{question[:80]!r}")
    labels = {i: ok for i, ok, _ in aligned}
    return [(line, labels.get(i)) for i, line in enumerate(lines)]


@torch.inference_mode()
def step_features(lm, prompt: str, lines: list[str], with_hidden: bool = False) -> torch.Tensor:
    """(S, len(STATS)) one row per line, from the policy's distributions (temperature 1) at the line's tokens
    (the newline ending it included): the min, mean and sum of their log-probabilities, the least
    log-probability margin to the model's first choice, how many were not its first choice, the max and
    mean entropy, and their number. `with_hidden`: the policy's last-layer state at the line's newline
    first, (S, D + len(STATS)). One forward pass over prompt + lines, each line ended by a newline."""
    from decoding.scaling.probe import solution_text

    text = solution_text(lines)
    ids = lm.tokenizer(prompt + text).input_ids
    start = len(lm.tokenizer(prompt).input_ids)
    out = lm.forward(torch.tensor([ids]), output_hidden_states=with_hidden)
    logprobs = torch.log_softmax(out.logits[0, start - 1:-1].float(), dim=-1)  # (T', V): predicts ids[start:]
    chosen = logprobs.gather(1, torch.tensor(ids[start:]).view(-1, 1)).view(-1)  # (T',)
    margin = chosen - logprobs.max(-1).values  # 0 where the token was the first choice
    entropy = -(logprobs.exp() * logprobs).nan_to_num().sum(-1)
    rows, first = [], 0
    for end in (i - start for i in range(start, len(ids)) if "\n" in lm.tokenizer.decode([ids[i]])):
        lp, m, h = chosen[first:end + 1], margin[first:end + 1], entropy[first:end + 1]
        stats = torch.tensor([lp.min(), lp.mean(), lp.sum(), m.min(), float((m < 0).sum()), h.max(), h.mean(),
                              float(len(lp))])
        rows.append(torch.cat([out.hidden[0, start + end].float().cpu(), stats]) if with_hidden else stats)
        first = end + 1
    width = len(STATS) + (lm.config.hidden_size if with_hidden else 0)
    return torch.stack(rows) if rows else torch.zeros(0, width)


class PRM:
    """P(step right) = sigmoid(w2 . tanh(W1 z + b1) + b2), z the standardised features of the step."""

    def __init__(self, tensors: dict[str, torch.Tensor], info: dict | None = None):
        self.t = {k: v.double() for k, v in tensors.items()}
        self.info = info or {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        t = self.t
        z = (x.double() - t["mean"]) / t["std"]
        return torch.sigmoid(torch.tanh(z @ t["w1"].T + t["b1"]) @ t["w2"] + t["b2"])

    def save(self, path: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.to(torch.float32 if k in ("mean", "std") else torch.float16).contiguous()
                   for k, v in self.t.items()}, str(path), metadata={"info": json.dumps(self.info)})

    @classmethod
    def load(cls, path: Path) -> PRM:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return cls({k: f.get_tensor(k) for k in f.keys()}, json.loads(f.metadata().get("info", "{}")))


def prm_path(loaded) -> Path | None:
    from decoding.models import file_beside

    return file_beside(loaded, PRM_FILE)


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> PRM:
    return PRM.load(Path(path))


def prm_for(lm) -> PRM:
    """The policy's trained PRM, or ValueError saying how to train one."""
    path = prm_path(lm.loaded)
    if path is None or not path.exists():
        raise ValueError(f"reward spare-prm needs a PRM trained on {lm.name!r}'s own states ({PRM_FILE} beside the "
                         f"model): train one with `python -m decoding.scaling.spare_prm train --model NAME`, or use "
                         f"tiny-math, which ships one")
    return _load(str(path), path.stat().st_mtime)


class SparePRMReward:
    """reward=spare-prm: the trained PRM's P(the newest step is right). No reference is read."""

    name = "spare-prm"

    def __init__(self, lm):
        self.lm, self.prm = lm, prm_for(lm)

    def score(self, question: str, steps: list[str], final: bool):
        from decoding.scaling.rewards import RewardResult

        lines = [line.strip() for step in steps for line in step.splitlines() if line.strip()]
        if not lines:
            return RewardResult(0.5, False, "no step yet")
        newest = max(1, len([line for line in steps[-1].splitlines() if line.strip()]))
        p = float(self.prm(step_features(self.lm, question, lines)[-newest:]).min())
        return RewardResult(p, False, f"SPARE-PRM: P(step right) = {p:.2f}")


def solution_score(reward: SparePRMReward, prompt: str, text: str) -> float:
    """A whole solution's score under the PRM, the minimum over its lines (each line a step), from one forward
    pass: what best-of-N with reward=spare-prm (aggregate=min) ranks its samples by."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return float(reward.prm(step_features(reward.lm, prompt, lines)).min()) if lines else 0.5


# ---------------------------------------------------------------- labelled samples and training

def fresh_problems(count: int, seed: int) -> list:
    """`count` tiny-math problems from the training lists, drawn with a seed of their own, none with the
    question of a val, test, open or unseen problem."""
    from decoding.scaling.math_tasks import HELD_OUT_SPLITS, OPEN, SPLIT_SIZES, make_problem, make_splits

    held = make_splits(sizes={**SPLIT_SIZES, "train": 0})
    seen = {p.question for split in HELD_OUT_SPLITS for p in held[split]}
    rng, out = random.Random(f"spare-prm-{seed}"), []
    while len(out) < count:
        problem = make_problem(rng, OPEN)[0]
        if problem.question not in seen:
            seen.add(problem.question)
            out.append(problem)
    return out


def labelled(lm, problems, samples: int, seed: int, say=print) -> tuple[torch.Tensor, torch.Tensor, dict, torch.Tensor]:
    """(features (R, D + len(STATS)), labels (R,), counts, arith-step's value (R,)) for every labelled line of
    `samples` temperature-1 samples of the policy per problem (the features with the hidden state: the PRM
    reads the last columns; the rule reward arith-step, for comparison)."""
    from decoding.scaling.rewards import ArithmeticStepChecker

    checker = ArithmeticStepChecker(floor=0.05, ceiling=0.95, neutral=0.5)  # the reward arith-step
    from decoding.scaling.math_eval import generate
    from decoding.scaling.math_tasks import parse_answer, prompt

    prompts = [prompt(p.question) for p in problems]
    texts = generate(lm.model, lm.tokenizer, prompts, temperature=1.0, num_return=samples, generator_seed=seed)
    xs, ys, rules, right = [], [], [], 0
    for k, (problem, text_list) in enumerate(zip(problems, texts)):
        for text in text_list:
            lines = step_labels(problem.question, text)
            if not lines:
                continue
            features = step_features(lm, prompts[k], [line for line, _ in lines], with_hidden=True)
            keep = [j for j, (_, label) in enumerate(lines) if label is not None]
            xs.append(features[keep])
            ys.append(torch.tensor([float(lines[j][1]) for j in keep]))
            rules.append(torch.tensor([checker.score("", [lines[j][0]], False).value for j in keep]))
            right += parse_answer(text) == problem.answer
        if (k + 1) % 100 == 0:
            say(f"{k + 1} of {len(problems)} problems")
    x, y = torch.cat(xs).double(), torch.cat(ys).double()
    return x, y, {"problems": len(problems), "samples": len(problems) * samples, "steps": len(y),
                  "wrong_steps": int((y < 0.5).sum()), "right_answers": round(right / (len(problems) * samples), 3)
                  }, torch.cat(rules).double()


def fit(x: torch.Tensor, y: torch.Tensor, hidden: int = 32, steps: int = 600, l2: float = 1e-4, seed: int = 0,
        say=None) -> PRM:
    """The MLP by full-batch Adam on class-balanced cross-entropy (`probe.fit_mlp`)."""
    from decoding.scaling.probe import fit_mlp

    return PRM(fit_mlp(x, y, hidden, steps, l2, seed, say))


def evaluate(prm: PRM, x: torch.Tensor, y: torch.Tensor, rule: torch.Tensor | None = None) -> dict:
    """The PRM's AUC; with `rule` (arith-step's values) also its AUC against each kind of wrong step: wrong
    arithmetic (arith-step sees it) and the rest (a misread operand, an early or wrong answer line)."""
    from decoding.scaling.probe import auc

    scores = prm(x)
    out = {"steps": len(y), "wrong_share": round(float((y < 0.5).double().mean()), 3), "auc": round(auc(scores, y), 3)}
    if rule is not None:
        for name, kind in (("wrong_arithmetic", rule < 0.5), ("other_wrong_steps", rule >= 0.5)):
            pool = (y > 0.5) | kind
            out[f"auc_against_{name}"] = round(auc(scores[pool], y[pool]), 3)
            out[f"{name}_steps"] = int(((y < 0.5) & kind).sum())
        out["auc_of_arith_step"] = round(auc(rule, y), 3)
    return out


def main(argv=None) -> int:
    from decoding.run import as_lm
    from decoding.scaling.math_tasks import SPLIT_SIZES, make_splits
    from decoding.scaling.probe import auc

    parser = argparse.ArgumentParser(prog="python -m decoding.scaling.spare_prm", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("train", "eval"))
    parser.add_argument("--model", default="tiny-math")
    parser.add_argument("--problems", type=int, default=600, help="freshly drawn problems to label and train on")
    parser.add_argument("--samples", type=int, default=8, help="temperature-1 samples per problem")
    parser.add_argument("--held-out", type=int, default=150, help="val and test problems each (4 samples) for the AUC")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    lm = as_lm(args.model)
    splits = make_splits(sizes={**SPLIT_SIZES, "train": 0})
    t0 = time.process_time()
    held = splits["val"][:args.held_out] + splits["test"][:args.held_out]
    test_x, test_y, test_info, test_rule = labelled(lm, held, 4, args.seed + 1, say)
    stats = slice(-len(STATS), None)  # the PRM's columns; the hidden state comes before them
    if args.command == "eval":
        print(json.dumps(evaluate(prm_for(lm), test_x[:, stats], test_y, test_rule) | test_info, indent=1))
        return 0
    x, y, info, _ = labelled(lm, fresh_problems(args.problems, args.seed), args.samples, args.seed, say)
    prm = fit(x[:, stats], y, seed=args.seed)
    with_hidden = fit(x, y, seed=args.seed)  # what adding the policy's last-layer state does
    prm.info = {"model": args.model, "features": list(STATS),
                "labels": "ReferenceStepChecker.align (the rule of the reward spare)",
                "trained_on": f"{args.problems} fresh problems (seed {args.seed}, no val/test/open/unseen question) "
                              f"x {args.samples} samples at temperature 1",
                "train": evaluate(prm, x[:, stats], y) | info,
                "held_out": evaluate(prm, test_x[:, stats], test_y, test_rule) | test_info
                | {"problems": f"val and test, the first {args.held_out} of each, 4 samples each"},
                "held_out_auc_with_the_hidden_state": evaluate(with_hidden, test_x, test_y)["auc"],
                "held_out_auc_of_each_feature": {n: round(auc(test_x[:, -len(STATS) + j], test_y), 3)
                                                 for j, n in enumerate(STATS)}}
    path = prm_path(lm.loaded)
    prm.save(path)
    say(f"wrote {path}")
    print(json.dumps(prm.info | {"cpu_s": round(time.process_time() - t0, 1)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
