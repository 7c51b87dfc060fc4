"""Speculative decoding vs plain greedy decoding of the same target, and vs transformers' own
assisted generation (the peer), side by side in one run.

For each case (a target, a prompt, a drafter) every round runs, in an order that rotates from round
to round: this project's plain greedy, this project's speculative greedy, and, where transformers
has the same drafter, `model.generate` greedy and `model.generate` with that drafter:
prompt lookup (`prompt_lookup_num_tokens`) and a draft model (`assistant_model`, its defaults:
20 draft tokens with the heuristic schedule and a 0.4 confidence cut-off). Times are CPU time of
this process (one thread: steadier than wall-clock on a shared machine); medians over rounds.

Reported per case:
    speedup        our plain CPU time / our speculative CPU time
    peer_speedup   generate() greedy / generate() with the drafter (the library's own speed-up)
    vs_peer        the peer's speculative CPU time / ours (> 1: ours is faster than the library)
    passes/token   target forward passes per generated token (ours from the events; the peer's
                   counted with a forward hook on the target)
    identical      every speculative output equals the plain greedy output (ours and the peer's)

Also measured: what a verification over k tokens costs relative to a one-token step on this CPU
(median CPU time of a forward over k new tokens after a 96-token context), the reason a drafter
must be accepted often to pay here.

    python bench/bench_speculative.py [--tokens 64] [--rounds 3] [--only NAME,...] [--json]
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
from decoding.models import load_model

SUMMARISE = (
    "Summarise this paragraph in two sentences, reusing its words.\n\n"
    "The lighthouse on the northern cliff was built in 1871 to warn ships away from the rocks. "
    "For a hundred years a keeper lived in the small stone house beside it, climbing the tower "
    "every evening to light the lamp. In 1971 the lamp was automated and the keeper's house was "
    "turned into a small museum about the ships that were saved by the lighthouse."
)
OPEN = "Write a short story about a robot who learns to paint."
# tiny-ar's own kind of text (it was trained on the King James Bible); its greedy answers run 6 to 64 tokens
BIBLE = ("And God said unto Moses,", "In the beginning", "And it came to pass, when", "Blessed are they",
         "The LORD is my shepherd;", "And Jesus answered and said unto them,", "Now the serpent was")
# name -> (target, prompt or prompts (run one after the other in each job), chat template, our params,
#          the peer's generate() kwargs or None)
CASES = {
    "summarise / prompt lookup (defaults: chain 10)": ("smollm2-135m", SUMMARISE, True, {"drafter": "prompt-lookup"},
                                                       {"prompt_lookup_num_tokens": 10}),
    "summarise / prompt lookup (chain 4)": ("smollm2-135m", SUMMARISE, True,
                                            {"drafter": "prompt-lookup", "draft_length": 4},
                                            {"prompt_lookup_num_tokens": 10}),
    "summarise / prompt lookup (tree, width 3)": ("smollm2-135m", SUMMARISE, True,
                                                  {"drafter": "prompt-lookup", "tree": "static", "width": 3}, None),
    "summarise / early exit (DEL)": ("smollm2-135m", SUMMARISE, True, {"drafter": "early-exit"}, None),
    "summarise / Token Recycling (tree, width 4)": ("smollm2-135m", SUMMARISE, True,
                                                    {"drafter": "token-recycling", "tree": "static", "width": 4}, None),
    "open-ended / prompt lookup (defaults: chain 10)": ("smollm2-135m", OPEN, True, {"drafter": "prompt-lookup"},
                                                        {"prompt_lookup_num_tokens": 10}),
    "open-ended / prompt lookup (chain 4)": ("smollm2-135m", OPEN, True,
                                             {"drafter": "prompt-lookup", "draft_length": 4},
                                             {"prompt_lookup_num_tokens": 10}),
    "open-ended / EAGLE head (chain 3)": ("smollm2-135m", OPEN, True, {"drafter": "eagle", "draft_length": 3}, None),
    "open-ended / early exit (DEL)": ("smollm2-135m", OPEN, True, {"drafter": "early-exit"}, None),
    "tiny-ar / draft model (chain 4)": ("tiny-ar", BIBLE, False,
                                        {"drafter": "model", "draft_model": "tiny-ar-draft"},
                                        {"assistant_model": "tiny-ar-draft"}),
    "tiny-ar / draft model (confidence 0.4, adaptive)": ("tiny-ar", BIBLE, False,
                                                         {"drafter": "model", "draft_model": "tiny-ar-draft",
                                                          "draft_length": 6, "confidence": 0.4, "adaptive": True},
                                                         {"assistant_model": "tiny-ar-draft"}),
    "tiny-ar / RASD (draft model + prompt lookup, dynamic tree)": ("tiny-ar", BIBLE, False,
                                                                   {"drafter": "rasd", "draft_model": "tiny-ar-draft",
                                                                    "tree": "dynamic", "width": 3}, None),
    "tiny-ar / draft model (dynamic tree)": ("tiny-ar", BIBLE, False,
                                             {"drafter": "model", "draft_model": "tiny-ar-draft", "tree": "dynamic",
                                              "width": 3}, None),
    "tiny-ar / DEER, tiny-diffusion (block 4)": ("tiny-ar", BIBLE, False, {"drafter": "diffusion", "draft_length": 4},
                                                 None),
    "tiny-ar / DEER, tiny-diffusion (block 8, confidence 0.4)": ("tiny-ar", BIBLE, False,
                                                                 {"drafter": "diffusion", "draft_length": 8,
                                                                  "confidence": 0.4}, None),
}
VERIFY_K = (1, 2, 3, 4, 6, 8)


class Models:
    """Each model loaded once (float32), as our LM wrapper."""

    def __init__(self):
        self.lms: dict[str, LM] = {}

    def __call__(self, name: str) -> LM:
        if name not in self.lms:
            self.lms[name] = LM(load_model(name, dtype="float32", progress=None))
        return self.lms[name]


def cpu_timed(fn):
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def peer_generate(lm: LM, prompt_ids: list[int], tokens: int, kwargs: dict, models: Models) -> tuple[list[int], int]:
    """transformers' generate() greedy (with `kwargs`: its drafter); (new ids, target forward calls)."""
    kwargs = dict(kwargs)
    if "assistant_model" in kwargs:
        kwargs["assistant_model"] = models(kwargs["assistant_model"]).model
    calls = [0]
    hook = lm.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        ids = torch.tensor([prompt_ids])
        eos = lm.tokenizer.eos_token_id
        with torch.inference_mode():
            out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                                    pad_token_id=eos, eos_token_id=sorted(lm.stop_ids), **kwargs)
    finally:
        hook.remove()
    return out[0, len(prompt_ids):].tolist(), calls[0]


def run_case(models: Models, name: str, case, tokens: int, rounds: int) -> dict:
    target, prompts, chat, params, peer = case
    prompts = (prompts,) if isinstance(prompts, str) else prompts
    lm = models(target)
    run_to_trace(lm, prompts[0], max_new_tokens=4, chat=chat)  # warm-up
    if params.get("drafter") == "model":
        models(params["draft_model"])
    jobs = {
        "plain": lambda: [run_to_trace(lm, p, max_new_tokens=tokens, chat=chat) for p in prompts],
        "spec": lambda: [run_to_trace(lm, p, strategy="speculative", params=params, max_new_tokens=tokens, chat=chat)
                         for p in prompts],
    }
    prompt_ids = [t.start.prompt_ids for t in jobs["plain"]()]
    if peer:
        jobs["peer plain"] = lambda: [peer_generate(lm, ids, tokens, {}, models) for ids in prompt_ids]
        jobs["peer spec"] = lambda: [peer_generate(lm, ids, tokens, peer, models) for ids in prompt_ids]
    times: dict[str, list[float]] = {k: [] for k in jobs}
    outs: dict = {}
    for r in range(rounds):
        order = list(jobs)[r % len(jobs):] + list(jobs)[:r % len(jobs)]  # rotate who goes first
        for which in order:
            seconds, out = cpu_timed(jobs[which])
            times[which].append(seconds)
            outs[which] = out
    med = {k: statistics.median(v) for k, v in times.items()}
    plain = [t.finish.token_ids for t in outs["plain"]]
    spec = [t.finish.token_ids for t in outs["spec"]]
    per_run = [stats(t) for t in outs["spec"]]
    num_tokens = sum(len(ids) for ids in spec)
    rounds_run = sum(len(t.of_kind("spec_round")) for t in outs["spec"])
    drafted = sum(len(r.nodes) for t in outs["spec"] for r in t.of_kind("spec_round"))
    accepted = sum(len(r.accepted_path) for t in outs["spec"] for r in t.of_kind("spec_round"))
    row = {"case": name, "target": target, "params": params, "prompts": len(prompts), "tokens": num_tokens,
           "speedup": round(med["plain"] / med["spec"], 3),
           "speedups": [round(a / b, 3) for a, b in zip(times["plain"], times["spec"])],
           "passes_per_token": round(sum(s["target_forward_passes"] for s in per_run) / max(1, num_tokens), 3),
           "mean_accepted_length": round(accepted / max(1, rounds_run), 3),
           "acceptance_rate": round(accepted / drafted, 3) if drafted else None,
           "identical": spec == plain, "peer": None}
    if peer:
        peer_ids = [ids for ids, _ in outs["peer spec"]]
        calls = sum(c for _, c in outs["peer spec"])
        plain_ids = [ids for ids, _ in outs["peer plain"]]
        row["peer"] = {"kwargs": peer, "speedup": round(med["peer plain"] / med["peer spec"], 3),
                       "passes_per_token": round(calls / max(1, sum(map(len, peer_ids))), 3),
                       "identical": peer_ids == plain_ids and all(a == b[:len(a)] for a, b in zip(peer_ids, plain)),
                       "plain_vs_ours": round(med["plain"] / med["peer plain"], 3)}
        row["vs_peer"] = round(med["peer spec"] / med["spec"], 3)
    return row


def verification_cost(lm: LM, context: int = 96, reps: int = 12) -> dict[int, float]:
    """CPU time of a forward over k new tokens after `context` cached ones, relative to k = 1 (medians)."""
    ids = torch.randint(10, lm.vocab_size - 10, (1, context + max(VERIFY_K)))
    base = lm.forward(ids[:, :context]).cache
    times = {k: [] for k in VERIFY_K}
    from decoding.lm import crop_cache

    for _ in range(reps):
        for k in VERIFY_K:
            crop_cache(base, context)
            seconds, _ = cpu_timed(lambda k=k: lm.forward(ids[:, context:context + k], base))
            times[k].append(seconds)
    one = statistics.median(times[1])
    return {k: round(statistics.median(v) / one, 3) for k, v in times.items()}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated substrings of case names to run")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = Models()
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    rows = []
    for name, case in CASES.items():
        if wanted and not any(w in name for w in wanted):
            continue
        rows.append(run_case(models, name, case, args.tokens, args.rounds))
        if not args.json:
            print(json.dumps(rows[-1]), flush=True)
    cost = {name: verification_cost(models(name)) for name in sorted({r["target"] for r in rows})}
    result = {"tokens": args.tokens, "rounds": args.rounds, "threads": args.threads, "rows": rows,
              "verification_cost": cost}
    if args.json:
        print(json.dumps(result))
        return result
    print("\n| case | ours vs plain | peer vs its plain | ours vs peer | passes / token (ours, peer) | identical |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        p = r["peer"]
        print(f"| {r['case']} | {r['speedup']}x | {p['speedup'] if p else '–'}x | {r.get('vs_peer', '–')}x | "
              f"{r['passes_per_token']}, {p['passes_per_token'] if p else '–'} | "
              f"{r['identical'] and (p is None or p['identical'])} |")
    for name, c in cost.items():
        print(f"\n{name}: a verification over k tokens costs " + ", ".join(f"k={k}: {v}x" for k, v in c.items())
              + " a one-token step (CPU time)")
    return result


if __name__ == "__main__":
    main()
