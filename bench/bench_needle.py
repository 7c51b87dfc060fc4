"""Needle accuracy at each context length and depth: the whole context read greedily, RAG top-k (DRAG), IterDRAG,
test-time training on the context (qTTT) and the same compute spent on thinking tokens in context, with each
method's compute per question.

The documents are the shipped book (`decoding.longctx.document`) cut for each window, one per seed, with a fact
planted at each depth; each planted fact's question follows its document (SmolLM2-135M's chat template). Per
question the methods run in an order that rotates from question to question, each answer checked by the question's
checker (the first number of the answer must be the planted one):

    full      strategy greedy on the whole prompt
    drag      strategy rag, mode drag: the top 4 chunks of 128 tokens BM25 ranks for the question
    iterdrag  strategy rag, mode iterdrag: 2 follow-up queries, each retrieving 4 chunks, then the final answer
    ttt       strategy ttt, mode train: `--steps` Adam steps (lr `--lr`) on spans of `--span` tokens of the context,
              updating the query projections of every layer (the paper's qTTT), then the answer
    think     strategy ttt, mode think: thinking tokens in context at the FLOPs ttt spends training (the paper's
              comparison at matched compute), then the answer

Compute is counted in FLOPs from what each run fed the model (`decoding.longctx.adapt.FlopCounter`: 2 per weight
per token, 4 per key per head dimension for attention; a training step's backward included), reported in GFLOPs
per question. Time is CPU time of this process (one thread), medians.

    python bench/bench_needle.py [--sizes 1024,2048,4096] [--depths 0.1,0.5,0.9] [--seeds 1] [--steps 8] [--span 64]
                                 [--lr 0.001] [--tokens 24] [--methods full,drag,iterdrag,ttt,think]
                                 [--model smollm2-135m] [--checkpoint FILE] [--quick] [--json]

`--quick` is the smoke table (one 1K document, 2 steps of 32 tokens, 8 answer tokens). The defaults (9 questions,
5 methods) took about 20 minutes of CPU time on one thread (docs/longctx.md); `--checkpoint FILE` keeps each finished
question in FILE (JSON lines) and skips those already there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.longctx.adapt import FlopCounter
from decoding.longctx.document import build_document
from decoding.longctx.ttt import Plan, TttParams, context_end
from decoding.models import load_model

METHODS = ("full", "drag", "iterdrag", "ttt", "think")


def method_runs(args) -> dict[str, tuple[str, dict]]:
    train = {"steps": args.steps, "span_tokens": args.span, "lr": args.lr}
    return {"full": ("greedy", {}), "drag": ("rag", {"mode": "drag"}), "iterdrag": ("rag", {"mode": "iterdrag"}),
            "ttt": ("ttt", train), "think": ("ttt", {**train, "mode": "think"})}


def flops_of(trace, counter: FlopCounter) -> int:
    """FLOPs the run spent: ttt counts its own; rag's parts are one growing sequence; greedy is prompt + tokens."""
    extra = trace.finish.extra
    if "flops" in extra:
        return extra["flops"]["total"]
    if "tokens_processed" in extra:
        return counter.forward(extra["tokens_processed"], 0)
    prompt = len(trace.start.prompt_ids)
    return counter.forward(prompt, 0) + counter.forward(max(0, len(trace.finish.token_ids) - 1), prompt)


def run_question(lm, counter, doc, q, depth: float, order: list[str], runs: dict, args) -> dict:
    prompt = doc.prompt(q)
    out = {"size": doc.size, "seed": doc.seed, "depth": depth, "measured_depth": round(q.depth, 4),
           "answer_reference": q.answer, "methods": {}}
    for name in order:
        strategy, params = runs[name]
        tokens = args.tokens
        if name == "think":  # room for the matched thinking tokens and the answer
            ids = lm.encode_prompt(prompt, chat=True)[0]
            tokens += Plan(lm, TttParams(**params), len(ids), context_end(lm, ids)).think_tokens
        t0 = time.process_time()
        trace = run_to_trace(lm, prompt, strategy=strategy, params=params, max_new_tokens=min(tokens, 2048), seed=0)
        cpu = time.process_time() - t0
        extra = trace.finish.extra
        answer = extra.get("answer") if isinstance(extra.get("answer"), str) else trace.finish.text
        out["methods"][name] = {"answer": answer, "correct": q.check(answer), "gflops": round(flops_of(trace, counter) / 1e9, 2),
                                "cpu_s": round(cpu, 2), "prompt_tokens": len(trace.start.prompt_ids),
                                "think_tokens": extra.get("think_tokens"), "losses": extra.get("losses")}
    return out


def summarize(results: list[dict], methods: list[str]) -> list[dict]:
    rows = []
    for size in sorted({r["size"] for r in results}):
        for depth in sorted({r["depth"] for r in results}) + [None]:
            chosen = [r for r in results if r["size"] == size and (depth is None or r["depth"] == depth)]
            if not chosen:
                continue
            row = {"size": size, "depth": "all" if depth is None else depth, "questions": len(chosen)}
            for m in methods:
                done = [r["methods"][m] for r in chosen if m in r["methods"]]
                if done:
                    row[m] = {"accuracy": round(sum(d["correct"] for d in done) / len(done), 3),
                              "gflops": statistics.median(d["gflops"] for d in done),
                              "cpu_s": statistics.median(d["cpu_s"] for d in done)}
                    same = [r["methods"][m]["answer"] == r["methods"]["full"]["answer"] for r in chosen
                            if m in r["methods"] and "full" in r["methods"]]
                    if same and m != "full":  # how often the method's answer is the whole context's, word for word
                        row[m]["same_answer_as_full"] = round(sum(same) / len(same), 3)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1024,2048,4096", help="windows in tokens, comma-separated")
    parser.add_argument("--depths", default="0.1,0.5,0.9", help="depths of the planted facts")
    parser.add_argument("--seeds", type=int, default=1, help="documents per window (seeds 0, 1, ...)")
    parser.add_argument("--steps", type=int, default=8, help="ttt: gradient steps")
    parser.add_argument("--span", type=int, default=64, help="ttt: tokens per span")
    parser.add_argument("--lr", type=float, default=1e-3, help="ttt: Adam's learning rate")
    parser.add_argument("--tokens", type=int, default=24, help="answer tokens")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--checkpoint", metavar="FILE", help="keep finished questions here; skip those already there")
    parser.add_argument("--quick", action="store_true", help="the smoke table: one 1K document, 2 steps of 32 tokens")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.seeds, args.steps, args.span, args.tokens = "1024", 1, 2, 32, 8
    torch.set_num_threads(1)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if unknown := sorted(set(methods) - set(METHODS)):
        parser.error(f"--methods: unknown {', '.join(unknown)}; choose among {', '.join(METHODS)}")
    sizes = [int(s) for s in args.sizes.split(",")]
    depths = tuple(float(d) for d in args.depths.split(","))
    lm = LM(load_model(args.model, progress=None))
    counter, runs = FlopCounter(lm.model), method_runs(args)
    done: dict[tuple, dict] = {}
    if args.checkpoint and Path(args.checkpoint).is_file():
        for line in Path(args.checkpoint).read_text().splitlines():
            r = json.loads(line)
            done[(r["size"], r["seed"], r["depth"])] = r
    results, k = [], 0
    for size in sizes:
        for seed in range(args.seeds):
            doc = build_document(lm.tokenizer, size, seed, depths=depths)
            asked = {str(n.value): n.depth for n in doc.needles}  # the depth asked for (q.depth: where it landed)
            for q in [q for q in doc.questions if q.kind == "needle"]:
                depth = asked[q.answer]
                key = (size, seed, depth)
                if key not in done:
                    order = methods[k % len(methods):] + methods[:k % len(methods)]  # rotates: interleaved
                    done[key] = run_question(lm, counter, doc, q, depth, order, runs, args)
                    if args.checkpoint:
                        with open(args.checkpoint, "a") as f:
                            f.write(json.dumps(done[key]) + "\n")
                    if not args.json:
                        print(json.dumps({m: v["correct"] for m, v in done[key]["methods"].items()} | {"key": key}),
                              file=sys.stderr)
                results.append(done[key])
                k += 1
    rows = summarize(results, methods)
    report = {"model": args.model, "sizes": sizes, "depths": list(depths), "seeds": args.seeds,
              "settings": {m: {"strategy": runs[m][0], "params": runs[m][1]} for m in methods},
              "answer_tokens": args.tokens, "rows": rows, "questions": results}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{args.model}: accuracy (GFLOPs per question, CPU s) by window and depth")
    print("| window | depth | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for row in rows:
        cells = [f"{row[m]['accuracy']:.2f} ({row[m]['gflops']:.0f}, {row[m]['cpu_s']:.1f} s)" if m in row else "-"
                 for m in methods]
        print(f"| {row['size']} | {row['depth']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
