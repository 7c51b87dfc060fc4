"""Self-speculation (LayerSkip early exit, DEL, S2D) on tiny-ar, tiny-ar-layerskip and tiny-ar-s2d.

For each model, on the same fixed prompts, greedy: plain greedy decoding vs speculative decoding with
drafter=early-exit at every exit layer L (chain drafts of `--draft-lengths` tokens), DEL
(exit_layer=0: the layer and the draft length, up to 4, chosen per round from running acceptance
estimates) and S2D (drafter=s2d, Kavehzadeh et al. 2024: chains of 4 drafted position by position by
the smallest of the model's own sub-models (`--s2d-exits`, e.g. L1 then L4) whose top probability
reaches the threshold, `--s2d-thresholds`). tiny-ar-layerskip (LayerSkip's early-exit loss) and tiny-ar-s2d (S2D's sorted
fine-tuning, equal exit weights) were each trained 40 CPU minutes from tiny-ar: equal training
compute. S2D's multi-target setting is the extra rows "S2D from tiny-ar-s2d" on tiny-ar: the sorted
model's sub-models draft for the unchanged tiny-ar.

Reported per model and configuration, from the runs' own events (`decoding.events.stats`): acceptance
rate (accepted / judged draft tokens), tokens per round (accepted + the target's own), target passes
per token, "identical" (the output equals plain greedy, as greedy verification promises) and the
speed-up: plain CPU time / speculative CPU time (time.process_time, one thread, summed over the
prompts; median over `--rounds` rounds, configurations interleaved in a rotating order). DEL's rows
also give the share of rounds per exit layer and acceptance there. Why the speed-up is what it is:
`draft_cost` times one cached forward step of the first L layers (+ final norm + LM head) against one
full step (median of many), next to DEL's parameter-count estimate of the same ratio; `speedup_cost_model`
is the speed-up those step costs alone allow (no other overhead), and `draft_ms_per_pass` /
`verify_ms_per_round` are what a draft pass and a verification cost inside the real runs.

The tiny models end every verse with <|endoftext|>; the runs decode through it (`--stop-at-eos` to
stop there), so every run is `--tokens` long.

    python bench/bench_self_spec.py [--tokens 64] [--rounds 3] [--draft-lengths 2,3,4] [--threads 1] [--json]
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
from decoding.events import stats
from decoding.lm import LM
from decoding.models import LoadedModel, load_model
from decoding.speculative.drafters import shallow_view

MODELS = ("tiny-ar", "tiny-ar-layerskip", "tiny-ar-s2d")
S2D_DRAFT = "tiny-ar-s2d"  # the sorted model that also drafts for the unchanged tiny-ar
PROMPTS = ("In the beginning", "The LORD is my shepherd", "And it came to pass", "Blessed are they",
           "And the king said", "Now the serpent")  # the first two open held-out chapters (Genesis 1, Psalm 23)
DEL_MAX_LENGTH = 4


def configs(model: str, num_layers: int, lengths: list[int], thresholds: list[float],
            s2d_exits: list[str]) -> dict[str, dict | None]:
    """Name -> speculative params (None = plain greedy)."""
    out: dict[str, dict | None] = {"greedy": None}
    for layer in range(1, num_layers):
        for k in lengths:
            out[f"L{layer} k{k}"] = {"drafter": "early-exit", "exit_layer": layer, "draft_length": k}
    out["DEL"] = {"drafter": "early-exit", "exit_layer": 0, "draft_length": DEL_MAX_LENGTH}
    for exits in s2d_exits:
        for t in thresholds:
            name = f"S2D {exits} t{t}"
            out[name] = {"drafter": "s2d", "s2d.draft_model": model, "s2d.threshold": t, "s2d.exits": exits,
                         "draft_length": DEL_MAX_LENGTH}
            if model != S2D_DRAFT:
                out[f"{name} from {S2D_DRAFT}"] = out[name] | {"s2d.draft_model": S2D_DRAFT}
    return out


def s2d_by_exit(traces: list) -> dict:
    """S2D: per sub-model, the share of drafted positions it drafted, and the mean sub-model calls per position."""
    chosen = [k for t in traces for r in t.of_kind("spec_round") for k in r.extra.get("s2d_exits", [])]
    calls = [n for t in traces for r in t.of_kind("spec_round") for n in r.extra.get("s2d_calls", [])]
    shares = {f"L{k}": round(chosen.count(k) / len(chosen), 3) for k in sorted(set(chosen))}
    return {"share": shares, "calls_per_position": round(sum(calls) / len(calls), 3) if calls else None}


def round_draft_cost(r, cost: dict[int, float]) -> float:
    """A round's draft passes in full-step units: S2D's cascade pays every sub-model it asked."""
    if "s2d_calls" in r.extra:
        stages = r.extra["s2d_stages"]
        return sum(cost[k] for n in r.extra["s2d_calls"] for k in stages[:n])
    return r.draft_forward_passes * cost[r.extra["exit_layer"]]


def decode(lm: LM, prompt: str, params: dict | None, tokens: int):
    started = time.process_time()
    if params is None:
        trace = run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=tokens, chat=False)
    else:
        trace = run_to_trace(lm, prompt, strategy="speculative", params=params, max_new_tokens=tokens, chat=False)
    return time.process_time() - started, trace


def per_layer(traces: list) -> dict:
    """DEL: per exit layer, the share of rounds drafted there and the acceptance of its tokens."""
    rounds = [r for t in traces for r in t.of_kind("spec_round")]
    table: dict[str, dict] = {}
    for r in rounds:
        layer = str(r.extra.get("exit_layer")) if r.extra.get("draft_length") else "no draft"
        row = table.setdefault(layer, {"rounds": 0, "drafted": 0, "accepted": 0})
        row["rounds"] += 1
        row["drafted"] += sum(1 for n in r.nodes if n["status"] != "unvisited")
        row["accepted"] += len(r.accepted_path)
    for row in table.values():
        row["share"] = round(row["rounds"] / len(rounds), 3)
        row["acceptance"] = round(row["accepted"] / row["drafted"], 3) if row["drafted"] else None
    return dict(sorted(table.items()))


def summarise(traces: list, plain: list, cost: dict[int, float]) -> dict:
    """Acceptance, tokens per round and target passes per token over all prompts' traces; and the
    speed-up a pure cost model predicts: plain forward passes / (speculative target passes + each draft
    pass weighted by `cost[L]`, its measured share of a full step), i.e. with no other overhead."""
    rounds = [r for t in traces for r in t.of_kind("spec_round")]
    judged = sum(1 for r in rounds for n in r.nodes if n["status"] != "unvisited")
    accepted = sum(len(r.accepted_path) for r in rounds)
    num_tokens = sum(len(t.finish.token_ids) for t in traces)
    target = sum(stats(t)["target_forward_passes"] for t in traces)
    draft_passes = sum(r.draft_forward_passes for r in rounds)
    weighted = sum(round_draft_cost(r, cost) for r in rounds)
    modelled = sum(stats(p)["forward_passes"] for p in plain) / (sum(stats(t)["forward_passes"] for t in traces) + weighted)
    return {"acceptance": round(accepted / judged, 3) if judged else None,
            "tokens_per_round": round(sum(len(r.token_ids) for r in rounds) / len(rounds), 3),
            "target_passes_per_token": round(target / num_tokens, 3),
            "draft_passes_per_token": round(draft_passes / num_tokens, 3),
            # where a round's time goes (wall clock, from the events): one draft pass, one verification
            "draft_ms_per_pass": round(1000 * sum(r.draft_time_s for r in rounds) / max(draft_passes, 1), 3),
            "verify_ms_per_round": round(1000 * sum(r.verify_time_s for r in rounds) / len(rounds), 3),
            "speedup_cost_model": round(modelled, 3),
            "identical": all(t.finish.token_ids == p.finish.token_ids for t, p in zip(traces, plain))}


@torch.inference_mode()
def draft_cost(lm: LM, prompt: str, steps: int = 60) -> dict:
    """Median seconds of one cached one-token forward step of the first L layers (+ norm + head)
    over the full model's, per L; next to the parameter-count estimate DEL uses for the same ratio
    (L layers + the LM head over all layers + the LM head)."""
    ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    layer_params = sum(p.numel() for p in lm.model.model.layers[0].parameters())
    head_params = lm.model.get_output_embeddings().weight.numel()
    out = {}
    for layer in range(1, lm.num_layers + 1):
        model = lm.model if layer == lm.num_layers else shallow_view(lm.model, layer)
        view = LM(LoadedModel(f"{lm.name}@L{layer}", model, lm.tokenizer, lm.loaded.device, lm.loaded.dtype, lm.loaded.source))
        times = []
        for _ in range(3):
            cache = view.prefill(ids).cache
            token = torch.tensor([[ids[-1]]])
            for _ in range(steps // 3):
                t0 = time.process_time()
                view.forward(token, cache)
                times.append(time.process_time() - t0)
        out[layer] = statistics.median(times)
    full = out[lm.num_layers]
    return {f"L{layer}": {"ms": round(1000 * s, 3), "vs_full": round(s / full, 3),
                          "param_estimate": round((layer * layer_params + head_params)
                                                  / (lm.num_layers * layer_params + head_params), 3)}
            for layer, s in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (each runs every configuration once)")
    parser.add_argument("--draft-lengths", default="2,3,4", help="chain draft lengths of the fixed-layer rows")
    parser.add_argument("--s2d-thresholds", default="0.3,0.5", help="S2D rows: confidence thresholds")
    parser.add_argument("--s2d-exits", default="1,4;1,2,3,4", help="S2D rows: sub-model sets, ';' between sets")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stop-at-eos", action="store_true", help="end a run at the first <|endoftext|>")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lengths = [int(k) for k in args.draft_lengths.split(",")]
    thresholds = [float(t) for t in args.s2d_thresholds.split(",")]
    lms = {name: LM(load_model(name, dtype="float32", progress=None)) for name in MODELS}
    if not args.stop_at_eos:
        for lm in lms.values():
            lm.stop_ids = frozenset()  # decode through verse ends: every run is --tokens long
    tables = {m: configs(m, lms[m].num_layers, lengths, thresholds, args.s2d_exits.split(";")) for m in MODELS}
    cpu = {m: {c: [] for c in tables[m]} for m in MODELS}  # per round: CPU seconds summed over prompts
    last: dict = {m: {} for m in MODELS}  # config -> traces of the last round, one per prompt
    for lm in lms.values():
        run_to_trace(lm, PROMPTS[0], max_new_tokens=8, chat=False)  # warm-up
    for r in range(args.rounds):
        for model in MODELS:
            names = list(tables[model])
            order = names[r % len(names):] + names[: r % len(names)]  # rotate, so no config always runs first
            for name in order:
                runs = [decode(lms[model], prompt, tables[model][name], args.tokens) for prompt in PROMPTS]
                cpu[model][name].append(sum(s for s, _ in runs))
                last[model][name] = [t for _, t in runs]
    result = {"tokens": args.tokens, "rounds": args.rounds, "threads": args.threads, "prompts": list(PROMPTS),
              "through_eos": not args.stop_at_eos, "models": {}}
    for model in MODELS:
        plain = last[model]["greedy"]
        num_plain = sum(len(t.finish.token_ids) for t in plain)
        rows = {"greedy": {"cpu_s_median": round(statistics.median(cpu[model]["greedy"]), 4),
                           "cpu_ms_per_token": round(1000 * statistics.median(cpu[model]["greedy"]) / num_plain, 3)}}
        cost = draft_cost(lms[model], PROMPTS[0])
        ratios = {int(layer[1:]): v["vs_full"] for layer, v in cost.items()}
        for name in list(tables[model])[1:]:
            row = summarise(last[model][name], plain, ratios)
            row["speedup_cpu"] = round(statistics.median(p / s for p, s in zip(cpu[model]["greedy"], cpu[model][name])), 3)
            row["cpu_s_median"] = round(statistics.median(cpu[model][name]), 4)
            rounds = sum(len(t.of_kind("spec_round")) for t in last[model][name])
            tokens = sum(len(t.finish.token_ids) for t in last[model][name])
            row["cpu_ms_per_round"] = round(1000 * row["cpu_s_median"] / rounds, 3)
            row["cpu_ms_per_token"] = round(1000 * row["cpu_s_median"] / tokens, 3)
            if name == "DEL":
                row["by_layer"] = per_layer(last[model][name])
            if name.startswith("S2D"):
                row["by_exit"] = s2d_by_exit(last[model][name])
            rows[name] = row
        result["models"][model] = {"configs": rows, "draft_cost": cost}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.tokens} tokens x {len(PROMPTS)} prompts, greedy, {args.threads} thread(s), median of {args.rounds} rounds")
    for model in MODELS:
        print(f"\n{model}\n{'config':34} {'acc':>6} {'tok/rnd':>8} {'pass/tok':>9} {'speedup':>8} {'modelled':>9} {'same':>5}")
        for name, row in result["models"][model]["configs"].items():
            if name == "greedy":
                continue
            acc = row["acceptance"] if row["acceptance"] is not None else "-"
            print(f"{name:34} {acc:>6} {row['tokens_per_round']:8.2f} {row['target_passes_per_token']:9.3f} "
                  f"{row['speedup_cpu']:7.2f}x {row['speedup_cost_model']:8.2f}x {str(row['identical']):>5}"
                  + (f"  {json.dumps(row['by_exit'])}" if "by_exit" in row else ""))
    for model in MODELS:
        rows = result["models"][model]["configs"]
        print(f"\n{model}: greedy {rows['greedy']['cpu_ms_per_token']} CPU ms/token; per config draft ms/pass, "
              "verify ms/round: " + ", ".join(f"{n} {r['draft_ms_per_pass']}/{r['verify_ms_per_round']}"
                                             for n, r in rows.items() if n != "greedy"))
        print(f"{model} DEL by layer: {json.dumps(result['models'][model]['configs']['DEL']['by_layer'])}")
        print(f"{model} draft step cost vs full step: {json.dumps(result['models'][model]['draft_cost'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
