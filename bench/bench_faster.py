"""Faster decoding without a drafter: LUD, HAMburger and FTP against tiny-ar's greedy decoding.

Each method runs greedily on the model trained for it (tiny-ar-lud, tiny-ar-hamburger; FTP on tiny-ar
with its router), on the same fixed prompts, next to plain greedy decoding of tiny-ar in this app's
engine and transformers' `model.generate` (greedy, the library column). Configurations run in
interleaved rounds (a rotating order); times are CPU seconds (time.process_time, one thread) summed
over the prompts, median over rounds.

Reported per configuration:
    big_passes_per_token   forwards of the big model per written token (LUD: one per unit; HAMburger:
                           one per slot; FTP: 1, and `blocks_per_token`, the share of decoder blocks run)
    speedup_cpu            tiny-ar greedy's CPU time / this configuration's (same prompts, same tokens)
    nll_tiny_ar            mean negative log-likelihood of the written tokens under tiny-ar itself (the
                           original model's judgement of the text; tiny-ar's own greedy text scores lowest
                           by construction, so read it against the greedy rows)
    distinct_1/2/3         distinct n-grams / n-grams over all outputs (repetition)
    agree_tiny_ar          share of positions where the token equals tiny-ar greedy's at that position
    prefix_tiny_ar         mean length of the common prefix with tiny-ar's greedy text
    same_as_own_greedy     the output equals greedy decoding of the model it runs on
    card                   the model's held-out figures from its training (training.json)

The tiny models end every verse with <|endoftext|>; runs decode through it so every run is `--tokens`
long (`--stop-at-eos` to stop there).

    python bench/bench_faster.py [--tokens 64] [--rounds 3] [--threads 1] [--quick] [--json]

SpecMemo (`"specmemo"` in the JSON): speculative decoding of tiny-ar with tiny-ar-draft under memory budgets
that leave room for 0, 1, 2, 4, 8 and 16 draft nodes a round (and none): acceptance, tokens per round, target
passes per token, the peak bytes each run measured, CPU speed-up over greedy, and whether the text is greedy's.

`--quick`: 16 tokens, one round, three prompts.
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
from decoding.models import load_model
from decoding.token.faster import HAMBURGER_MODELS, LUD_MODELS, trained_figures
from decoding.token.ftp_router import ROUTERS

PROMPTS = ("In the beginning", "The LORD is my shepherd", "And it came to pass", "Blessed are they",
           "And the king said", "Now the serpent")  # as bench_self_spec: two open held-out chapters
BASE = "tiny-ar"
# name -> (model, strategy, params); "generate" is transformers' greedy generate
CONFIGS: dict[str, tuple[str, str, dict]] = {
    "tiny-ar greedy": (BASE, "greedy", {}),
    "tiny-ar generate": (BASE, "generate", {}),
    "lud off (span 0)": ("tiny-ar-lud", "lud", {"span": 0}),
    "lud span 4": ("tiny-ar-lud", "lud", {"span": 4}),
    "lud span 4 p>=0.5": ("tiny-ar-lud", "lud", {"span": 4, "threshold": 0.5}),
    "hamburger off (group 1)": ("tiny-ar-hamburger", "hamburger", {"group": 1}),
    "hamburger p>=0.7": ("tiny-ar-hamburger", "hamburger", {"threshold": 0.7}),
    "hamburger p>=0.5": ("tiny-ar-hamburger", "hamburger", {"threshold": 0.5}),
    "hamburger p>=0.3": ("tiny-ar-hamburger", "hamburger", {"threshold": 0.3}),
    "ftp off (threshold 0)": (BASE, "ftp", {"threshold": 0.0}),
    "ftp threshold 0.3": (BASE, "ftp", {"threshold": 0.3}),
    "ftp threshold 0.5": (BASE, "ftp", {"threshold": 0.5}),
    "ftp threshold 0.7": (BASE, "ftp", {"threshold": 0.7}),
}
CARDS = {"tiny-ar-lud": LUD_MODELS["tiny-ar-lud"], "tiny-ar-hamburger": HAMBURGER_MODELS["tiny-ar-hamburger"],
         "ftp": ROUTERS[BASE]}


def decode(lm: LM, strategy: str, params: dict, prompt: str, tokens: int) -> tuple[float, list[int], int, list]:
    """(CPU seconds, written ids, big forwards, FTP block decisions per token)."""
    if strategy == "generate":
        ids = torch.tensor([lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        started = time.process_time()
        with torch.inference_mode():
            out = lm.model.generate(ids, max_new_tokens=tokens, do_sample=False, min_new_tokens=tokens,
                                    pad_token_id=0, eos_token_id=None if not lm.stop_ids else sorted(lm.stop_ids))
        return time.process_time() - started, out[0, ids.shape[1]:].tolist(), tokens, []
    started = time.process_time()
    trace = run_to_trace(lm, prompt, strategy=strategy, params=params, max_new_tokens=tokens, chat=False)
    spent = time.process_time() - started
    steps = trace.of_kind("token")
    return (spent, trace.finish.token_ids, sum(e.forward_passes for e in steps),
            [e.extra["blocks"] for e in steps if "blocks" in e.extra])


@torch.inference_mode()
def nll_under(lm: LM, prompt: str, written: list[int]) -> tuple[float, int]:
    """Summed negative log-likelihood of `written` after `prompt` under `lm`, and the count."""
    ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    logits = lm.model(input_ids=torch.tensor([ids + written])).logits[0, len(ids) - 1:-1].float()
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor(written), reduction="sum")
    return nll.item(), len(written)


def distinct(outputs: list[list[int]], n: int) -> float:
    grams = [tuple(o[i:i + n]) for o in outputs for i in range(len(o) - n + 1)]
    return round(len(set(grams)) / len(grams), 4) if grams else 0.0


SPECMEMO = {"drafter": "model", "model.draft_model": "tiny-ar-draft", "tree": "static", "width": 2, "draft_length": 4,
            "node_budget": 30}
SPECMEMO_NODES = (0, 1, 2, 4, 8, 16, None)  # draft nodes the budget leaves room for (None: no budget)


def specmemo(lm: LM, prompts, tokens: int, rounds: int) -> dict:
    """SpecMemo on tiny-ar with tiny-ar-draft (a static tree of width 2, depth 4: up to 30 nodes): budgets
    that leave room for 0, 1, 2, 4, 8 and 16 draft nodes a round, and no budget; acceptance, tokens per
    round, target passes per token, the peak bytes measured, CPU speed-up over greedy."""
    from decoding.params import from_values
    from decoding.speculative.memory import MB, Footprint
    from decoding.speculative.strategy import SpeculativeParams, make_drafter

    fp = Footprint.of(lm, make_drafter(lm, from_values(SpeculativeParams, SPECMEMO)))
    longest = max(len(lm.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    floor = fp.fixed(longest + tokens)
    budgets = {n: (None if n is None else (floor + n * fp.per_node) / MB + 1e-9) for n in SPECMEMO_NODES}
    cpu = {n: [] for n in budgets}
    cpu["greedy"] = []
    last = {}
    names = list(cpu)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            spent, traces = 0.0, []
            for prompt in prompts:
                started = time.process_time()
                if name == "greedy":
                    trace = run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=tokens, chat=False)
                else:
                    params = SPECMEMO | ({"memory_budget_mb": budgets[name]} if budgets[name] else {})
                    trace = run_to_trace(lm, prompt, strategy="speculative", params=params, max_new_tokens=tokens,
                                         chat=False)
                spent += time.process_time() - started
                traces.append(trace)
            cpu[name].append(spent)
            last[name] = traces
    rows = {}
    for n in SPECMEMO_NODES:
        spec_rounds = [r for t in last[n] for r in t.of_kind("spec_round")]
        judged = sum(1 for r in spec_rounds for node in r.nodes if node["status"] != "unvisited")
        accepted = sum(len(r.accepted_path) for r in spec_rounds)
        produced = sum(len(t.finish.token_ids) for t in last[n])
        rows["no budget" if n is None else f"{n} nodes"] = {
            "budget_mb": round(budgets[n], 3) if budgets[n] else None,
            "node_budget": spec_rounds[0].extra["memory"]["node_budget"],
            "peak_mb": round(max(sum(r.extra["memory"]["parts"].values()) for r in spec_rounds) / MB, 3),
            "acceptance": round(accepted / judged, 3) if judged else None,
            "tokens_per_round": round(sum(len(r.token_ids) for r in spec_rounds) / len(spec_rounds), 3),
            "target_passes_per_token": round(len(spec_rounds) / produced, 3),
            "speedup_cpu": round(statistics.median(g / s for g, s in zip(cpu["greedy"], cpu[n])), 3),
            "same_as_greedy": [t.finish.token_ids for t in last[n]] == [t.finish.token_ids for t in last["greedy"]]}
    return {"setting": SPECMEMO, "lower_bound_mb": round(floor / MB, 3), "per_node_kb": round(fp.per_node / 1024, 1),
            "budgets": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="tokens per prompt")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (each runs every configuration once)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stop-at-eos", action="store_true", help="end a run at the first <|endoftext|>")
    parser.add_argument("--quick", action="store_true", help="16 tokens, one round, three prompts")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    prompts = PROMPTS[:3] if args.quick else PROMPTS
    if args.quick:
        args.tokens, args.rounds = 16, 1
    torch.set_num_threads(args.threads)
    lms = {name: LM(load_model(name, dtype="float32", progress=None)) for name in {m for m, _, _ in CONFIGS.values()}}
    if not args.stop_at_eos:
        for lm in lms.values():
            lm.stop_ids = frozenset()  # decode through verse ends: every run is --tokens long
    for model, strategy, params in CONFIGS.values():  # warm-up: first calls pay one-off set-up
        decode(lms[model], strategy, params, prompts[0], 4)
    names = list(CONFIGS)
    cpu: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, list] = {}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            model, strategy, params = CONFIGS[name]
            runs = [decode(lms[model], strategy, params, prompt, args.tokens) for prompt in prompts]
            cpu[name].append(sum(run[0] for run in runs))
            last[name] = runs
    base = lms[BASE]
    reference = [ids for _, ids, _, _ in last["tiny-ar greedy"]]
    own_greedy = {"tiny-ar-lud": "lud off (span 0)", "tiny-ar-hamburger": "hamburger off (group 1)",
                  BASE: "tiny-ar greedy"}
    rows = {}
    for name in names:
        model, strategy, _ = CONFIGS[name]
        runs = last[name]
        outputs = [ids for _, ids, _, _ in runs]
        tokens = sum(len(o) for o in outputs)
        nll, count = map(sum, zip(*(nll_under(base, p, o) for p, o in zip(prompts, outputs))))
        agree = sum(a == b for o, g in zip(outputs, reference) for a, b in zip(o, g))
        prefixes = [next((i for i, (a, b) in enumerate(zip(o, g)) if a != b), min(len(o), len(g)))
                    for o, g in zip(outputs, reference)]
        row = {"model": model, "strategy": strategy, "tokens": tokens,
               "cpu_s_median": round(statistics.median(cpu[name]), 4),
               "cpu_ms_per_token": round(1000 * statistics.median(cpu[name]) / tokens, 3),
               "speedup_cpu": round(statistics.median(b / s for b, s in zip(cpu["tiny-ar greedy"], cpu[name])), 3),
               "big_passes_per_token": round(sum(run[2] for run in runs) / tokens, 3),
               "nll_tiny_ar": round(nll / count, 4),
               "distinct_1": distinct(outputs, 1), "distinct_2": distinct(outputs, 2), "distinct_3": distinct(outputs, 3),
               "agree_tiny_ar": round(agree / tokens, 4), "prefix_tiny_ar": round(statistics.mean(prefixes), 2),
               "same_as_own_greedy": outputs == [ids for _, ids, _, _ in last[own_greedy[model]]]}
        blocks = [b for run in runs for b in run[3]]
        if blocks:
            row["blocks_per_token"] = round(sum(map(sum, blocks)) / (len(blocks) * len(blocks[0])), 4)
        rows[name] = row
    cards = {name: trained_figures(folder) for name, folder in CARDS.items()}
    result = {"tokens": args.tokens, "rounds": args.rounds, "threads": args.threads, "prompts": list(prompts),
              "through_eos": not args.stop_at_eos, "configs": rows, "cards": cards,
              "specmemo": specmemo(base, prompts, args.tokens, args.rounds)}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.tokens} tokens x {len(prompts)} prompts, greedy, {args.threads} thread(s), CPU time, median of "
          f"{args.rounds} interleaved rounds; quality against tiny-ar")
    print(f"{'configuration':26}{'passes/tok':>11}{'blocks':>8}{'ms/tok':>8}{'speed-up':>9}{'nll':>7}{'dist-2':>7}"
          f"{'agree':>7}{'prefix':>7}{'=own greedy':>12}")
    for name, row in rows.items():
        print(f"{name:26}{row['big_passes_per_token']:11.3f}{row.get('blocks_per_token', 1.0):8.3f}"
              f"{row['cpu_ms_per_token']:8.2f}{row['speedup_cpu']:8.2f}x{row['nll_tiny_ar']:7.3f}{row['distinct_2']:7.3f}"
              f"{row['agree_tiny_ar']:7.3f}{row['prefix_tiny_ar']:7.1f}{str(row['same_as_own_greedy']):>12}")
    print("model cards (held-out): " + json.dumps(cards))
    memo = result["specmemo"]
    print(f"\nSpecMemo on tiny-ar + tiny-ar-draft (static tree, width 2, depth 4): lower bound {memo['lower_bound_mb']} MB, "
          f"{memo['per_node_kb']} KB per draft node")
    print(f"{'budget':12}{'MB':>9}{'nodes':>7}{'peak MB':>9}{'accept':>8}{'tok/round':>10}{'passes/tok':>11}{'speed-up':>9}"
          f"{'=greedy':>8}")
    for name, row in memo["budgets"].items():
        print(f"{name:12}{row['budget_mb'] or 0:9.3f}{row['node_budget']:7}{row['peak_mb']:9.3f}{row['acceptance'] or 0:8.3f}"
              f"{row['tokens_per_round']:10.2f}{row['target_passes_per_token']:11.3f}{row['speedup_cpu']:8.2f}x"
              f"{str(row['same_as_greedy']):>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
