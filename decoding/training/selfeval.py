"""Teach `tiny-math` to evaluate itself: one token that says whether starting over would do better.

What came of it on tiny-math (docs/scaling.md, "Adaptive compute"): after 600 steps the answer did
not tell right solutions from wrong ones (held-out AUC about 0.5) and the policy's pass@1 fell from
56% to 39% despite the KL term, so no such model ships; the recipe stays, for a larger policy.

Follows Manvi, Singh and Ermon 2024, "Adaptive Inference-Time Compute: LLMs Can Predict if They Can
Do Better, Even Mid-Generation" (arXiv 2410.02725): after a (partial) response the model reads a
fixed self-evaluation query and its next-token probability of one predefined answer is the
probability that restarting the generation would NOT give a better response. The target is
capability-aware: it is measured against the policy's own samples of the same prompt, so a
wrong answer to a prompt the policy rarely solves is "no better" (restarting would not help),
while a wrong answer to an easy prompt is "yes, restart". Ties count as not better. Partial
responses get their own sample's target (one Monte Carlo draw of how it continues), which is
what lets the token be read mid-generation to prune.

For tiny-math, whose reward is correctness:
    target(sample) = 1                                   if the sample's answer is right
                     1 - (right others / other samples)  otherwise
(the other samples of the same prompt estimate P(a fresh sample is right), leave-one-out).

The query is `SELF_EVAL_QUERY` appended after the solution so far (a newline ends each step) and
the answer is one token: `NO_BETTER` ("N") or `BETTER` ("Y"). Only that answer token is trained
(cross-entropy against the soft target over the two answers), so the model never learns to write
the query itself; a KL term to the frozen original on every solution token keeps the policy's
sampling distribution where it was (the paper trains the model itself, not a separate head).

    python -m decoding.training.selfeval data --out /tmp/selfeval [--problems 3000 --samples 8]
    python -m decoding.training.selfeval train --data /tmp/selfeval --out /tmp/selfeval/out
        [--minutes 25] [--resume]
    python -m decoding.training.selfeval eval --out /tmp/selfeval/out --problems 200
        # on held-out test problems: pass@1 of the base and the tuned policy, the self-evaluation's AUC

Glossary
    self-evaluation  P(no better) = P(N) / (P(N) + P(Y)) at the position after the query.
    prefix           the solution cut after its first k lines (k = 1 .. all); the full solution
                     includes its answer line.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from decoding.scaling.adaptive import SELF_EVAL_FILE, SELF_EVAL_QUERY, answer_ids, query_text

KL_WEIGHT = 1.0  # weight of KL(original || tuned) per solution token against the answer's cross-entropy


def capability_targets(correct: list[bool]) -> list[float]:
    """P(no better) per sample of one prompt: 1 when right; else 1 - the right share of the others."""
    total, right = len(correct), sum(correct)
    out = []
    for ok in correct:
        if ok:
            out.append(1.0)
        else:
            others = total - 1
            out.append(1.0 - right / others if others else 0.0)
    return out


def examples(prompt: str, texts: list[str], correct: list[bool]) -> list[tuple[str, float, int, bool]]:
    """(query text, target, lines so far, whole solution) for every prefix of every sample: after each
    of its lines (the last prefix is the whole solution)."""
    out = []
    for text, target in zip(texts, capability_targets(correct)):
        lines = [line for line in text.splitlines() if line.strip()]
        for k in range(1, len(lines) + 1):
            out.append((query_text(prompt, lines[:k]), target, k, k == len(lines)))
    return out


@torch.no_grad()
def self_evaluations(model, tokenizer, texts: list[str], batch_rows: int = 64) -> list[float]:
    """P(no better) for each query text (prompt + solution so far + query), batched (left padding)."""
    no_id, yes_id = answer_ids(tokenizer)
    tokenizer.padding_side = "left"
    out = []
    for start in range(0, len(texts), batch_rows):
        enc = tokenizer(texts[start:start + batch_rows], return_tensors="pt", padding=True, add_special_tokens=False)
        logits = model(**enc).logits[:, -1]  # (B, V)
        pair = torch.stack([logits[:, no_id], logits[:, yes_id]], -1).float()  # (B, 2)
        out += torch.softmax(pair, -1)[:, 0].tolist()
    return out


# ---------------------------------------------------------------- data: the policy's own samples


def make_data(model_dir: str, out: Path, problems: int, samples: int, seed: int, say=print) -> dict:
    """Sample `samples` solutions per training-distribution problem at temperature 1 and write
    examples.jsonl (text, target, lines) plus a summary."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from decoding.scaling.math_eval import generate
    from decoding.scaling.math_tasks import SPLIT_SIZES, make_splits, parse_answer, prompt

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    drawn = make_splits(sizes={**SPLIT_SIZES, "train": problems})["train"]  # never a held-out question
    out.mkdir(parents=True, exist_ok=True)
    rows, right = 0, 0
    t0 = time.process_time()
    with open(out / "examples.jsonl", "w") as f:
        for start in range(0, len(drawn), 32):
            chunk = [p for p, _ in drawn[start:start + 32]]
            prompts = [prompt(p.question) for p in chunk]
            texts = generate(model, tokenizer, prompts, temperature=1.0, num_return=samples,
                             generator_seed=seed + start)
            for problem, p, sample_texts in zip(chunk, prompts, texts):
                correct = [parse_answer(t) == problem.answer for t in sample_texts]
                right += sum(correct)
                for text, target, k, whole in examples(p, sample_texts, correct):
                    f.write(json.dumps({"text": text, "target": round(target, 4), "lines": k, "final": whole}) + "\n")
                    rows += 1
            say(f"{min(start + 32, len(drawn))}/{len(drawn)} problems, {rows} examples, "
                f"{time.process_time() - t0:.0f} s CPU")
    summary = {"problems": problems, "samples": samples, "examples": rows, "seed": seed,
               "sample_accuracy": round(right / (problems * samples), 4),
               "cpu_s": round(time.process_time() - t0, 1), "policy": model_dir}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


# ---------------------------------------------------------------- fine-tuning


def batch_loss(model, teacher, tokenizer, texts: list[str], targets: torch.Tensor, no_id: int, yes_id: int,
               kl_weight: float = KL_WEIGHT) -> tuple[torch.Tensor, dict]:
    """Cross-entropy of the answer (soft target over N/Y at the last position) + KL to the frozen
    original on the solution tokens (every position but the query's)."""
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    logits = model(**enc).logits  # (B, T, V)
    pair = torch.stack([logits[:, -1, no_id], logits[:, -1, yes_id]], -1)  # (B, 2)
    soft = torch.stack([targets, 1 - targets], -1)  # (B, 2)
    answer = -(soft * F.log_softmax(pair, -1)).sum(-1).mean()
    query_len = len(tokenizer(SELF_EVAL_QUERY, add_special_tokens=False).input_ids)
    keep = enc["attention_mask"].clone().bool()
    keep[:, -query_len:] = False  # the query's positions are not the policy's
    with torch.no_grad():
        ref = F.log_softmax(teacher(**enc).logits, -1)  # (B, T, V)
    kl = (ref.exp() * (ref - F.log_softmax(logits, -1))).sum(-1)  # (B, T) KL(original || tuned)
    kl = kl[keep].mean()
    return answer + kl_weight * kl, {"answer_ce": float(answer.detach()), "kl": float(kl.detach())}


def train(model_dir: str, data: Path, out: Path, minutes: float, seed: int, resume: bool, lr: float = 3e-4,
          batch_size: int = 32, kl_weight: float = KL_WEIGHT, say=print) -> dict:
    import copy

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from decoding.training.checkpoint import load_checkpoint, save_checkpoint
    from decoding.training.train import save_fp16

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    no_id, yes_id = answer_ids(tokenizer)
    rows = [json.loads(line) for line in open(data / "examples.jsonl")]
    rng = random.Random(seed)
    held = set(rng.sample(range(len(rows)), k=min(2000, len(rows) // 20)))  # a held-out slice of the training prompts
    train_rows = [r for i, r in enumerate(rows) if i not in held]
    val_rows = [rows[i] for i in sorted(held)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    state = {"step": 0, "cpu_s": 0.0, "log": []}
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = data / "checkpoint.pt"  # beside the data, never in the shipped folder
    if resume and checkpoint.exists():
        state = load_checkpoint(checkpoint, model, optimizer, {"data": generator})
    budget = minutes * 60
    t0 = time.process_time() - state["cpu_s"]
    model.train()
    while time.process_time() - t0 < budget:
        index = torch.randint(len(train_rows), (batch_size,), generator=generator).tolist()
        batch = [train_rows[i] for i in index]
        frac = (time.process_time() - t0) / budget
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (state["step"] + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        loss, parts = batch_loss(model, teacher, tokenizer, [r["text"] for r in batch],
                                 torch.tensor([r["target"] for r in batch]), no_id, yes_id, kl_weight)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        state["step"] += 1
        if state["step"] % 200 == 0:
            model.eval()
            metrics = evaluate_rows(model, tokenizer, val_rows)
            model.train()
            state["cpu_s"] = time.process_time() - t0
            entry = {"step": state["step"], "cpu_s": round(state["cpu_s"]), **parts, **metrics}
            state["log"].append(entry)
            say(json.dumps(entry))
            save_checkpoint(checkpoint, model, optimizer, {"data": generator}, **state)
    model.eval()
    final = evaluate_rows(model, tokenizer, val_rows)
    info = {"base": model_dir, "data": json.loads((data / "summary.json").read_text()), "steps": state["step"],
            "cpu_minutes": round((time.process_time() - t0) / 60, 1), "lr": lr, "batch_size": batch_size,
            "kl_weight": kl_weight, "validation": final, "log": state["log"]}
    save_fp16(model, tokenizer, out, info)
    (out / SELF_EVAL_FILE).write_text(json.dumps({"query": SELF_EVAL_QUERY, "no_better": "N", "better": "Y",
                                                 "trained_by": "python -m decoding.training.selfeval"}, indent=1) + "\n")
    return info


def auc(scores: list[float], labels: list[bool]) -> float:
    from decoding.scaling.probe import auc as probe_auc

    return probe_auc(torch.tensor(scores), torch.tensor([float(x) for x in labels]))


def evaluate_rows(model, tokenizer, rows: list[dict]) -> dict:
    """AUC of the self-evaluation against 'this sample is right' (target 1), overall and on full solutions."""
    scores = self_evaluations(model, tokenizer, [r["text"] for r in rows])
    right = [r["target"] >= 1.0 for r in rows]
    final = [i for i, r in enumerate(rows) if r["final"]]
    return {"auc": round(auc(scores, right), 4),
            "auc_final": round(auc([scores[i] for i in final], [right[i] for i in final]), 4),
            "mae": round(sum(abs(s - r["target"]) for s, r in zip(scores, rows)) / len(rows), 4)}


def held_out(model_dir: str, base_dir: str, problems: int, samples: int, seed: int) -> dict:
    """On `problems` held-out test problems: the tuned policy's pass@1 beside the base policy's (same
    seeds), and the self-evaluation's AUC against rightness on the tuned policy's own samples, for whole
    solutions and after each line (early pruning reads it mid-way)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from decoding.scaling.math_eval import generate
    from decoding.scaling.math_tasks import SPLIT_SIZES, make_splits, parse_answer, prompt

    drawn = make_splits(sizes={**SPLIT_SIZES, "train": 0})["test"][:problems]
    prompts = [prompt(p.question) for p in drawn]
    out = {"problems": len(drawn), "samples": samples}
    for name, path in (("base", base_dir), ("tuned", model_dir)):
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        texts = generate(model, tokenizer, prompts, temperature=1.0, num_return=samples, generator_seed=seed)
        correct = [[parse_answer(t) == p.answer for t in ts] for p, ts in zip(drawn, texts)]
        out[f"pass1_{name}"] = round(sum(map(sum, correct)) / (len(drawn) * samples), 4)
        if name == "tuned":
            rows = [{"text": q, "target": t, "lines": k, "final": whole}
                    for p, ts, cs in zip(prompts, texts, correct) for q, t, k, whole in examples(p, ts, cs)]
            out |= evaluate_rows(model, tokenizer, rows)
            by_line = {}
            for k in range(1, 5):
                picked = [r for r in rows if r["lines"] == k and not r["final"]]
                if picked:
                    scores = self_evaluations(model, tokenizer, [r["text"] for r in picked])
                    by_line[k] = round(auc(scores, [r["target"] >= 1.0 for r in picked]), 4)
            out["auc_after_line"] = by_line
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.training.selfeval", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("data", "train", "eval"))
    parser.add_argument("--model", default="assets/tiny-math", help="the policy to sample from / fine-tune")
    parser.add_argument("--data", type=Path, default=Path("/tmp/selfeval"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--problems", type=int, default=3000)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=25.0, help="CPU minutes of fine-tuning")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (warm-up 50 steps, cosine to 0)")
    parser.add_argument("--kl-weight", type=float, default=KL_WEIGHT, help="weight of the KL term to the original")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    if args.command == "eval":
        print(json.dumps(held_out(str(args.out or "/tmp/selfeval/out"), args.model, args.problems,
                                  args.samples, args.seed + 1), indent=1))
    elif args.command == "data":
        print(json.dumps(make_data(args.model, args.out or args.data, args.problems, args.samples, args.seed, say)))
    else:
        if args.out is None:
            parser.error("train needs --out")
        info = train(args.model, args.data, args.out, args.minutes, args.seed, args.resume, lr=args.lr,
                     kl_weight=args.kl_weight, say=say)
        print(json.dumps({k: v for k, v in info.items() if k != "log"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
