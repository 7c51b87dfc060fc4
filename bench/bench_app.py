"""Does drawing slow decoding? The Playground callback (live, throttled redraws of every view)
vs the engine alone, side by side in one process on the same model, prompt and settings.

The callback is driven as Gradio drives it (a generator of view updates), without a browser,
so the figure: decoding tokens/s (from each trace's own stats) with live redraws / without.
End-to-end tokens/s of the callback (including the final exports) is printed too.

    python bench/bench_app.py [--tokens 64] [--rounds 3]
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
from decoding.models import load_model
from ui import playground_callbacks as cb
from ui.playground_views import new_selection, param_widgets

PROMPT = "Explain why the sky is blue in two sentences."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load_model("smollm2-135m", dtype="float32", progress=None)
    defaults = {w.key: w.default for w in param_widgets()}

    def engine() -> float:
        trace = run_to_trace(loaded, PROMPT, strategy="greedy", max_new_tokens=args.tokens, chat=True)
        return stats(trace)["tokens_per_s"]

    def app() -> float:
        t0, updates, trace = time.perf_counter(), 0, None
        for update in cb.generate_run("smollm2-135m", "greedy", PROMPT, args.tokens, 0, True, "float32", "prob",
                                      new_selection(), **defaults):
            updates += 1
            trace = update.get("trace", trace)
        app.updates = updates
        app.end_to_end = len(trace.finish.token_ids) / (time.perf_counter() - t0)  # incl. the final exports
        return stats(trace)["tokens_per_s"]  # decoding speed while the views were being redrawn

    engine(), app()  # warm-up
    ratios = []
    for r in range(args.rounds):
        first, second = (engine, app) if r % 2 == 0 else (app, engine)
        a, b = first(), second()
        e, u = (a, b) if first is engine else (b, a)
        ratios.append(u / e)
        print(json.dumps({"round": r, "engine_tok_s": round(e, 2), "app_tok_s": round(u, 2), "redraws": app.updates,
                          "app_end_to_end_tok_s": round(app.end_to_end, 2),
                          "ratio": round(u / e, 3)}), flush=True)
    print(json.dumps({"median_ratio_app_over_engine": round(statistics.median(ratios), 3)}))


if __name__ == "__main__":
    main()
