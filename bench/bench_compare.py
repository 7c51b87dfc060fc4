"""Greedy, top-p, min-p, Top-H, mirostat, momentum and AdaDec on the same open-ended prompts (issue 16).

Every method writes a continuation of each of six fixed prompts (three story openings, two
explanations, one list; written once, not tuned for any method) and is scored by the project's own
compare statistics (decoding/compare.py: `compare_runs`, `table_rows` -> `compare_stats`, `distinct`,
`repeated_ngrams`); nothing is re-implemented here. Per method, the mean over its runs of:
    distinct_2 / distinct_3   distinct token n-grams / n-grams of the continuation (1.0 = none twice)
    repeated_4grams           4-grams that occurred earlier in the same continuation (loops)
    logprob_per_token         log P(continuation | prompt) under the model at T = 1 / tokens, scored by
                              one forward pass as compare.py does (how likely the model finds the text)
    mean_entropy              mean raw entropy of the model's next-token distribution (nats, T = 1)
    tokens                    generated tokens (a stop token ends a run early)
    tokens_per_s              tokens / the run's own wall-clock seconds (compare.py's own time)
    cpu_ms_per_token          time.process_time() spent on the run's own events / tokens (the project's
                              benches prefer CPU time: the machine is shared); the scoring pass is excluded

Settings (the registry's parameter names; `python -m decoding list`):
    greedy; sample top_p=0.9; sample min_p=0.1; sample top_h=0.4; mirostat (tau 3, eta 0.1);
    momentum (alpha 0.2, top_k 5, max_ngram 5); adadec (threshold 1.5 nats, top_k 3, lookahead 3).
All three samplers run at temperature 1 (`--temperature`), so they differ only in their truncation
rule. That is min-p's ordinary setting, not the high-temperature regime (T 1.5-3) where the min-p
paper (Nguyen et al. 2024) and Top-H (Baghaei Potraghloo et al. 2025) claim their advantage over top-p; this
bench does not test that claim (presets 02-04 show it on single prompts). Top-H's default is 0 (off);
0.4 is the alpha of the project's Top-H preset, inside the 0.3-0.6 range transformers' docs call typical.
Mirostat, momentum and AdaDec keep their registered defaults.

Seeds: the four sampling methods run `--seeds` seeds (0, 1, ...) per prompt; greedy, momentum and
AdaDec are deterministic (no random draw), so they run once per prompt (seed 0) and their means are
over prompts only. Runs: per prompt and seed, the methods that need that seed go through ONE
`compare_runs` call, which interleaves them one event each in turn (each run equals the same run made
alone; its wall-clock and CPU time are its own), so a slow moment of the shared machine hits every
method alike. Prompts are continued as plain text without the chat template (`--chat` to apply it), as
the other open-ended benches do (bench_scaling, bench_spec_trees): loops and their cures are the
subject here, and SmolLM2-135M-Instruct's chat answers often stop after a few tokens.

    python bench/bench_compare.py [--model smollm2-135m] [--prompts 6] [--seeds 3] [--tokens 64]
                                  [--temperature 1.0] [--chat] [--threads 1] [--json] [--quick]

`--quick`: 2 prompts, 1 seed, 24 tokens (a smoke test). `--json` prints one JSON object instead of
the table: the settings, the per-method summary and every run's row with its text.
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

from decoding.compare import (MAX_RUNS, RunScore, Setting, compare_runs, parse_settings, table_rows,
                              validate_settings)
from decoding.events import Trace
from decoding.lm import LM
from decoding.models import load_model

PROMPTS = (
    "Once upon a time, in a small village by the sea, there lived",
    "The old lighthouse keeper opened the door and saw",
    "It was the last day of summer, and the children",
    "The reason the sky looks blue during the day is that",
    "Photosynthesis is the process by which plants",
    "Here are five things to pack for a weekend camping trip:\n1.",
)
SAMPLED = {"top-p 0.9": {"top_p": 0.9}, "min-p 0.1": {"min_p": 0.1}, "top-h 0.4": {"top_h": 0.4}}  # + temperature
DETERMINISTIC = ("greedy", "momentum", "adadec")  # no random draw: one seed is enough
METHODS = ("greedy", "top-p 0.9", "min-p 0.1", "top-h 0.4", "mirostat", "momentum", "adadec")
STATS = ("distinct_2", "distinct_3", "repeated_4grams", "logprob_per_token", "mean_entropy", "tokens",
         "tokens_per_s", "cpu_ms_per_token")


def method_settings(temperature: float) -> list[Setting]:
    """The seven settings, checked by `parse_settings` (it takes the app's 2-4 at a time)."""
    specs = [{"strategy": "sample", "params": {**SAMPLED[m], "temperature": temperature}, "label": m}
             if m in SAMPLED else {"strategy": m, "label": m} for m in METHODS]
    return [s for i in range(0, len(specs), MAX_RUNS) for s in parse_settings(specs[i:i + MAX_RUNS])]


def run_group(lm: LM, prompt: str, settings: list[Setting], tokens: int, seed: int, chat: bool) -> list[dict]:
    """One interleaved `compare_runs` over `settings`: a `table_rows` row per run plus its CPU time."""
    traces, scores, cpu = [Trace() for _ in settings], [None] * len(settings), [0.0] * len(settings)
    clock = time.process_time()
    for i, item in compare_runs(lm, prompt, settings, max_new_tokens=tokens, seed=seed, chat=chat):
        spent = time.process_time() - clock  # the work since the last item: this run's next event
        if isinstance(item, RunScore):
            scores[i] = item  # its scoring pass is not charged to the run
        else:
            traces[i].append(item)
            cpu[i] += spent
        clock = time.process_time()
    rows = table_rows(settings, traces, scores)
    for row, trace, cpu_s in zip(rows, traces, cpu):
        per_token = round(1000 * cpu_s / row["tokens"], 2) if row["tokens"] else None
        row.update(cpu_s=round(cpu_s, 4), cpu_ms_per_token=per_token, text=trace.finish.text if trace.finish else "")
    return rows


def mean_or_none(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), 4) if values else None


def summarise(runs: list[dict]) -> dict:
    """Per method: the number of runs and the mean of each statistic over them (None if none had it)."""
    return {m: {"runs": len(rows)} | {k: mean_or_none(r[k] for r in rows) for k in STATS}
            for m in METHODS for rows in [[r for r in runs if r["method"] == m]]}


def cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_table(result: dict) -> None:
    print(f"{result['model']}, {result['tokens']} tokens, {result['prompts']} prompts, {result['seeds']} seed(s) "
          f"for the samplers (one for greedy, momentum, adadec), chat={result['chat']}")
    print(f"{'method':10} {'runs':>4} {'dist-2':>7} {'dist-3':>7} {'rep-4g':>7} {'logp/tok':>8} {'entropy':>7} "
          f"{'tokens':>6} {'tok/s':>6} {'CPU ms/tok':>10}")
    for m, s in result["summary"].items():
        print(f"{m:10} {s['runs']:4d} {cell(s['distinct_2'], '7.3f')} {cell(s['distinct_3'], '7.3f')} "
              f"{cell(s['repeated_4grams'], '7.2f')} {cell(s['logprob_per_token'], '8.3f')} "
              f"{cell(s['mean_entropy'], '7.3f')} {cell(s['tokens'], '6.1f')} {cell(s['tokens_per_s'], '6.1f')} "
              f"{cell(s['cpu_ms_per_token'], '10.1f')}")
    first = [r for r in result["runs"] if r["prompt"] == 0 and r["seed"] == 0]
    print(f"\n{PROMPTS[0]!r} (seed 0)")
    for r in first:
        print(f"  {r['method']:10} {r['text']!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"use the first N prompts (1-{len(PROMPTS)})")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per prompt for the sampling methods")
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens per run")
    parser.add_argument("--temperature", type=float, default=1.0, help="temperature of top-p, min-p and Top-H")
    parser.add_argument("--chat", action="store_true", help="apply the model's chat template to the prompts")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="2 prompts, 1 seed, 24 tokens (a smoke test)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.seeds, args.tokens = 2, 1, 24
    if not 1 <= args.prompts <= len(PROMPTS):
        parser.error(f"--prompts must be in [1, {len(PROMPTS)}], got {args.prompts}")
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    torch.set_num_threads(args.threads)
    settings = method_settings(args.temperature)
    prompts = PROMPTS[:args.prompts]
    for prompt in prompts:
        validate_settings(prompt, settings, args.tokens, 0)
    lm = LM(load_model(args.model, dtype=args.dtype, progress=None))
    run_group(lm, prompts[0], settings[:1], 4, 0, args.chat)  # warm-up, not counted
    runs = []
    for p, prompt in enumerate(prompts):
        for seed in range(args.seeds):
            group = [s for s in settings if seed == 0 or s.label not in DETERMINISTIC]
            for s, row in zip(group, run_group(lm, prompt, group, args.tokens, seed, args.chat)):
                row.pop("run")  # its place in the group, not a property of the run
                runs.append({"method": s.label, "prompt": p, "seed": seed} | row | {"strategy": s.strategy})
    result = {"model": args.model, "dtype": args.dtype, "tokens": args.tokens, "prompts": len(prompts),
              "seeds": args.seeds, "temperature": args.temperature, "chat": args.chat, "threads": args.threads,
              "settings": {s.label: {"strategy": s.strategy, "params": s.params} for s in settings},
              "prompt_texts": list(prompts), "summary": summarise(runs), "runs": runs}
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
