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

The prompt set (`bench/spec_prompts.py`: twenty held-out prompts, four each of summarise, answer from a
passage, edit code, continue a story, write a list) runs our drafter against the library's on EVERY prompt:
prompt lookup on SmolLM2-135M (chat template; ours at its defaults against `prompt_lookup_num_tokens=10`) and
the draft model tiny-ar-draft for tiny-ar (no template; ours at its defaults against `assistant_model`'s;
tiny-ar ends its KJV verses at once on such prompts, so both decode through <|endoftext|>: every run is
`--tokens` long).
Per prompt, the four jobs (our plain, our speculative, generate(), generate() with the drafter) run in
rotating order for `--rounds` rounds; `vs_peer` is the library's speculative CPU time over ours (median
over rounds; > 1: ours is faster); the summary gives the median and the worst prompt, per kind and overall.

    python bench/bench_speculative.py [--tokens 64] [--rounds 3] [--only NAME,...] [--no-prompt-set | --set-only]
                                      [--set-rounds 2] [--set-drafters NAME,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # spec_prompts beside it

import torch

from decoding import run_to_trace
from decoding.events import stats
from decoding.lm import LM
from decoding.models import load_model
from spec_prompts import prompt_set

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
                                        {"drafter": "model", "draft_model": "tiny-ar-draft", "draft_length": 4,
                                         "confidence": 0.0},
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
                                              "width": 3, "draft_length": 4}, None),
    "tiny-ar / DEER, tiny-diffusion (block 4)": ("tiny-ar", BIBLE, False, {"drafter": "diffusion", "draft_length": 4},
                                                 None),
    "tiny-ar / DEER, tiny-diffusion (block 8, confidence 0.4)": ("tiny-ar", BIBLE, False,
                                                                 {"drafter": "diffusion", "draft_length": 8,
                                                                  "confidence": 0.4}, None),
}
VERIFY_K = (1, 2, 3, 4, 6, 8)
# the prompt set's drafters: name -> (target, chat template, our params, the peer's generate() kwargs,
#                                     decode through end-of-text)
SET_DRAFTERS = {
    "prompt lookup": ("smollm2-135m", True, {"drafter": "prompt-lookup"}, {"prompt_lookup_num_tokens": 10}, False),
    # ours at its defaults: a chain of up to 8 that stops after a draft token under 0.4 (transformers drafts up to
    # 20 tokens with the same 0.4 cut-off)
    "draft model": ("tiny-ar", False, {"drafter": "model", "draft_model": "tiny-ar-draft"},
                    {"assistant_model": "tiny-ar-draft"}, True),
    # the schedule ours had before it took the library's cut-off: a fixed chain of 4
    "draft model (chain of 4 without cut-off)": ("tiny-ar", False, {"drafter": "model", "draft_model": "tiny-ar-draft",
                                                                "confidence": 0.0, "draft_length": 4},
                                             {"assistant_model": "tiny-ar-draft"}, True),
}


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


def run_prompt(models: Models, drafter: str, kind: str, prompt: str, tokens: int, rounds: int) -> dict:
    """One prompt of the set: ours and the library's, plain and speculative, interleaved; medians."""
    target, chat, params, peer, through_eos = SET_DRAFTERS[drafter]
    lm = models(target)
    saved = lm.stop_ids
    if through_eos:
        lm.stop_ids = frozenset()  # generate() gets eos_token_id=[] from it
    try:
        return _run_prompt(models, lm, drafter, kind, prompt, tokens, rounds)
    finally:
        lm.stop_ids = saved


def _run_prompt(models: Models, lm: LM, drafter: str, kind: str, prompt: str, tokens: int, rounds: int) -> dict:
    _, chat, params, peer, _ = SET_DRAFTERS[drafter]
    ids = run_to_trace(lm, prompt, max_new_tokens=1, chat=chat).start.prompt_ids
    jobs = {
        "plain": lambda: run_to_trace(lm, prompt, max_new_tokens=tokens, chat=chat),
        "spec": lambda: run_to_trace(lm, prompt, strategy="speculative", params=params, max_new_tokens=tokens, chat=chat),
        "peer plain": lambda: peer_generate(lm, ids, tokens, {}, models),
        "peer spec": lambda: peer_generate(lm, ids, tokens, peer, models),
    }
    times: dict[str, list[float]] = {k: [] for k in jobs}
    outs: dict = {}
    for r in range(rounds):
        order = list(jobs)[r % len(jobs):] + list(jobs)[:r % len(jobs)]
        for which in order:
            seconds, outs[which] = cpu_timed(jobs[which])
            times[which].append(seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    ours, plain = outs["spec"].finish.token_ids, outs["plain"].finish.token_ids
    peer_ids, calls = outs["peer spec"]
    rounds_run = outs["spec"].of_kind("spec_round")
    return {"drafter": drafter, "kind": kind, "prompt": prompt[:60], "tokens": len(ours),
            "vs_peer": round(med["peer spec"] / med["spec"], 3),
            "speedup": round(med["plain"] / med["spec"], 3),
            "peer_speedup": round(med["peer plain"] / med["peer spec"], 3),
            "plain_vs_peer_plain": round(med["peer plain"] / med["plain"], 3),
            "passes_per_token": round(stats(outs["spec"])["target_forward_passes"] / max(1, len(ours)), 3),
            "peer_passes_per_token": round(calls / max(1, len(peer_ids)), 3),
            "mean_accepted_length": round(sum(len(r.accepted_path) for r in rounds_run) / max(1, len(rounds_run)), 3),
            "identical": ours == plain and peer_ids == outs["peer plain"][0] and ours[:len(peer_ids)] == peer_ids}


def summarise_set(rows: list[dict]) -> dict:
    """Median and worst vs_peer per drafter, overall and per kind."""
    out = {}
    for drafter in SET_DRAFTERS:
        mine = [r for r in rows if r["drafter"] == drafter]
        if not mine:
            continue
        ratios = [r["vs_peer"] for r in mine]
        worst = min(mine, key=lambda r: r["vs_peer"])
        out[drafter] = {"prompts": len(mine), "median_vs_peer": round(statistics.median(ratios), 3),
                        "worst_vs_peer": worst["vs_peer"], "worst_prompt": worst["prompt"],
                        "losses": sum(r < 1 for r in ratios),
                        "median_speedup": round(statistics.median(r["speedup"] for r in mine), 3),
                        "identical": all(r["identical"] for r in mine),
                        "by_kind": {kind: round(statistics.median(r["vs_peer"] for r in mine if r["kind"] == kind), 3)
                                    for kind in dict.fromkeys(r["kind"] for r in mine)}}
    return out


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
    parser.add_argument("--no-prompt-set", action="store_true", help="skip the twenty-prompt set")
    parser.add_argument("--set-only", action="store_true", help="the twenty-prompt set only (no named cases)")
    parser.add_argument("--set-rounds", type=int, default=2, help="rounds per prompt of the set")
    parser.add_argument("--set-drafters", default=",".join(SET_DRAFTERS), help="which of the set's drafters")
    parser.add_argument("--set-limit", type=int, default=0, help="the first N prompts of the set only (0: all 20)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    chosen = [d.strip() for d in args.set_drafters.split(",") if d.strip()]
    unknown = [d for d in chosen if d not in SET_DRAFTERS]
    if unknown:  # before any model loads (a name is never split: none contains a comma)
        parser.error(f"--set-drafters: unknown {unknown}; the set's drafters are {', '.join(SET_DRAFTERS)}")
    torch.set_num_threads(args.threads)
    models = Models()
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    rows = []
    for name, case in CASES.items():
        if args.set_only or (wanted and not any(w in name for w in wanted)):
            continue
        rows.append(run_case(models, name, case, args.tokens, args.rounds))
        if not args.json:
            print(json.dumps(rows[-1]), flush=True)
    set_rows = []
    if not args.no_prompt_set:
        prompts = prompt_set()[:args.set_limit or None]
        for drafter in chosen:
            for kind, prompt in prompts:
                set_rows.append(run_prompt(models, drafter, kind, prompt, args.tokens, args.set_rounds))
                if not args.json:
                    print(json.dumps(set_rows[-1]), flush=True)
    targets = {r["target"] for r in rows} | {SET_DRAFTERS[r["drafter"]][0] for r in set_rows}
    cost = {name: verification_cost(models(name)) for name in sorted(targets)}
    result = {"tokens": args.tokens, "rounds": args.rounds, "threads": args.threads, "rows": rows,
              "verification_cost": cost,
              "prompt_set": {"rounds": args.set_rounds, "rows": set_rows, "summary": summarise_set(set_rows)}}
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
    if set_rows:
        print("\n| prompt set: drafter | prompts | ours vs library (median) | worst (prompt) | prompts lost | "
              "ours vs plain (median) | identical | by kind |")
        print("|---|---|---|---|---|---|---|---|")
        for drafter, s in result["prompt_set"]["summary"].items():
            print(f"| {drafter} | {s['prompts']} | {s['median_vs_peer']}x | {s['worst_vs_peer']}x ({s['worst_prompt']!r}) | "
                  f"{s['losses']} | {s['median_speedup']}x | {s['identical']} | "
                  + ", ".join(f"{k} {v}x" for k, v in s["by_kind"].items()) + " |")
    for name, c in cost.items():
        print(f"\n{name}: a verification over k tokens costs " + ", ".join(f"k={k}: {v}x" for k, v in c.items())
              + " a one-token step (CPU time)")
    return result


if __name__ == "__main__":
    main()
