"""Speculative decoding vs plain greedy decoding of the same target, side by side in one run.

For each prompt (a summarising one, where the answer copies from the context, and an open-ended
one) and each drafter, runs plain greedy and speculative greedy alternately over several rounds
and reports: target forward passes per generated token, mean accepted length, acceptance rate,
and the wall-clock tokens/s ratio speculative / plain (median over rounds). Greedy verification
makes both outputs identical, which is checked.

    python bench/bench_speculative.py [--model smollm2-135m] [--tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from decoding import run_to_trace  # noqa: E402
from decoding.events import stats  # noqa: E402
from decoding.lm import LM  # noqa: E402
from decoding.models import load_model  # noqa: E402

PROMPTS = {
    "summarise": (
        "Summarise this paragraph in two sentences, reusing its words.\n\n"
        "The lighthouse on the northern cliff was built in 1871 to warn ships away from the rocks. "
        "For a hundred years a keeper lived in the small stone house beside it, climbing the tower "
        "every evening to light the lamp. In 1971 the lamp was automated and the keeper's house was "
        "turned into a small museum about the ships that were saved by the lighthouse."
    ),
    "open-ended": "Write a short story about a robot who learns to paint.",
}
DRAFTERS = {
    "early-exit (DEL)": {"drafter": "early-exit"},
    "early-exit L24": {"drafter": "early-exit", "exit_layer": 24},
    "prompt-lookup": {"drafter": "prompt-lookup"},
    "prompt-lookup tree": {"drafter": "prompt-lookup", "tree": "static", "width": 3},
    "token-recycling": {"drafter": "token-recycling", "tree": "static", "width": 4, "draft_length": 4},
    "eagle head (chain 3)": {"drafter": "eagle", "tree": "chain", "draft_length": 3},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = LM(load_model(args.model, dtype=args.dtype, progress=None))
    rows = []
    for prompt_name, prompt in PROMPTS.items():
        run_to_trace(lm, prompt, max_new_tokens=8)  # warm-up
        for name, params in DRAFTERS.items():
            ratios, spec_stats, same = [], None, True
            for r in range(args.rounds):
                order = ["plain", "spec"] if r % 2 == 0 else ["spec", "plain"]
                timed = {}
                for which in order:
                    t0 = time.perf_counter()
                    trace = (run_to_trace(lm, prompt, max_new_tokens=args.tokens) if which == "plain" else
                             run_to_trace(lm, prompt, strategy="speculative", params=params, max_new_tokens=args.tokens))
                    timed[which] = (time.perf_counter() - t0, trace)
                plain_s, plain = timed["plain"]
                spec_s, spec = timed["spec"]
                same &= plain.finish.token_ids == spec.finish.token_ids
                ratios.append((len(spec.finish.token_ids) / spec_s) / (len(plain.finish.token_ids) / plain_s))
                spec_stats = stats(spec)
            row = {
                "prompt": prompt_name, "drafter": name, "same_output_as_plain": same,
                "target_passes_per_token": spec_stats["target_forward_passes_per_token"],
                "mean_accepted_length": spec_stats["mean_accepted_length"],
                "acceptance_rate": spec_stats["acceptance_rate"],
                "speedup_wallclock_median": round(statistics.median(ratios), 3),
                "speedups": [round(x, 3) for x in ratios],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| prompt | drafter | target passes / token | mean accepted | acceptance | wall-clock vs plain |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['prompt']} | {row['drafter']} | {row['target_passes_per_token']} | {row['mean_accepted_length']} | "
              f"{row['acceptance_rate']} | {row['speedup_wallclock_median']}x |")


if __name__ == "__main__":
    main()
