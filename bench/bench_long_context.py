"""Long context: plain greedy decoding against RAPID (drafter rapid) at 1K-8K-token prompts, and transformers'
assisted generation with prompt lookup as the peer, side by side in one run.

The prompt is the shipped book (`decoding.longctx.document`, seed `--seed`) cut for each window, and one of its
questions (`--question`, default 0: the first planted fact), with SmolLM2-135M's chat template. Each run decodes
`--tokens` tokens greedily through end-of-text (the stop tokens are ignored, so every run is as long). Per window,
every round runs these jobs in an order that rotates from round to round, and the medians are reported (CPU time
of this process, one thread):

    prefill      our greedy run of one token: the prompt's pass and one token
    plain        our greedy run of `--tokens` tokens
    rapid        our speculative run with drafter rapid at its defaults (self-speculation: the target drafts from
                 the 4 best chunks of 128 tokens and the question; chains of up to 10 that stop under 0.4)
    longspec     drafter longspec at its defaults (the shipped one-layer draft, its own cache a window of 256 plus
                 4 sinks, cross-attention on the target's last-layer cache; chains of 5)
    eagle        drafter eagle at its defaults (the shipped EAGLE head, trained on short answers; its cache grows
                 with the context: the comparison LongSpec's paper makes)
    peer plain   transformers' generate(), greedy
    peer lookup  generate() with prompt_lookup_num_tokens=10 (assisted generation with prompt lookup)

Reported per window:
    prefill_s, plain_s, peer_*_s   medians;  plain_ms_per_token  (plain - prefill) / (tokens - 1)
    peer_speedup       peer plain / peer lookup
    drafters.NAME      s (median), ms_per_token (after the prefill), speedup (plain / it, end to end), decode_speedup
                       (the same after the prefill), acceptance, tokens per round, target passes per token, the
                       target's and the draft's cache in MB at the last round (measured from the tensors), identical
                       (its tokens = our greedy tokens)
    identical          each drafter's tokens = our greedy tokens = generate()'s, and prompt lookup's = generate()'s
and, as before the other drafters came, RAPID's figures at the top level (rapid_s, speedup, decode_speedup,
rapid_vs_peer = peer lookup / rapid, acceptance, draft_prompt_tokens).

    python bench/bench_long_context.py [--sizes 1024,2048,4096,8192] [--tokens 32] [--rounds 3] [--seed 0]
                                       [--question 0] [--model smollm2-135m] [--drafters rapid,longspec,eagle]
                                       [--checkpoint FILE] [--json]

`--checkpoint FILE` keeps each finished window's row in FILE (JSON lines) and skips the windows already there, so
a long run that stops can go on where it was (the full run takes about 25 CPU minutes on one thread).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from decoding import run_to_trace
from decoding.events import stats
from decoding.lm import LM
from decoding.longctx.document import SIZES, build_document
from decoding.models import load_model

DRAFTERS = {"rapid": {"drafter": "rapid"},  # each drafter at its defaults
            "longspec": {"drafter": "longspec"},
            "eagle": {"drafter": "eagle"}}
PEER_LOOKUP = {"prompt_lookup_num_tokens": 10}


def cpu_timed(fn):
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def peer_generate(lm: LM, prompt_ids: list[int], tokens: int, kwargs: dict) -> list[int]:
    """transformers' generate() greedy (with `kwargs`), through end-of-text: the new ids."""
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                                pad_token_id=lm.tokenizer.eos_token_id, eos_token_id=sorted(lm.stop_ids), **kwargs)
    return out[0, len(prompt_ids):].tolist()


def drafter_row(name: str, trace, med: dict, tokens: int, plain_ids: list[int]) -> dict:
    """One drafter's figures in a window: its time, speed-ups, acceptance, and the memory each side held."""
    s = stats(trace)
    rounds = trace.of_kind("spec_round")
    parts = rounds[-1].extra.get("memory", {}).get("parts", {}) if rounds else {}
    per_token = lambda total: round(1000 * (total - med["prefill"]) / max(1, tokens - 1), 2)
    return {"s": round(med[name], 3), "ms_per_token": per_token(med[name]),
            "speedup": round(med["plain"] / med[name], 3),
            "decode_speedup": round((med["plain"] - med["prefill"]) / max(1e-9, med[name] - med["prefill"]), 3),
            "acceptance_rate": s["acceptance_rate"], "mean_accepted_length": s["mean_accepted_length"],
            "target_passes_per_token": s["target_forward_passes_per_token"], "draft_passes": s["draft_forward_passes"],
            "target_cache_mb": round(parts.get("target cache", 0) / 2**20, 2),
            "draft_cache_mb": round(parts.get("draft cache", 0) / 2**20, 3),
            "identical": trace.finish.token_ids == plain_ids}


def usable_drafters(lm: LM, names: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """The drafters asked for that can run on `lm`, and why each other one cannot."""
    unknown = [n for n in names if n not in DRAFTERS]
    if unknown:
        raise SystemExit(f"--drafters: unknown {', '.join(unknown)}; choose from {', '.join(DRAFTERS)}")
    from decoding.longctx.longspec import HEADS as LONGSPEC
    from decoding.speculative.eagle import HEADS as EAGLE

    trained = {"longspec": LONGSPEC, "eagle": EAGLE}
    keep, skipped = [], []
    for name in names:
        folder = trained.get(name, {}).get(lm.name) if name in trained else True
        if folder is True or (folder is not None and folder.is_dir()):
            keep.append(name)
        else:
            skipped.append(f"{name}: no draft trained for {lm.name}")
    return tuple(keep), skipped


def run_size(lm: LM, size: int, tokens: int, rounds: int, seed: int, question: int,
             drafters: tuple[str, ...] = ("rapid",)) -> dict:
    doc = build_document(lm.tokenizer, size, seed=seed)
    prompt = doc.prompt(doc.questions[question])
    chat = lm.has_chat_template
    ids = run_to_trace(lm, prompt, max_new_tokens=1, chat=chat).start.prompt_ids  # also the warm-up
    jobs = {
        "prefill": lambda: run_to_trace(lm, prompt, max_new_tokens=1, chat=chat),
        "plain": lambda: run_to_trace(lm, prompt, max_new_tokens=tokens, chat=chat),
        **{name: (lambda name=name: run_to_trace(lm, prompt, strategy="speculative", params=DRAFTERS[name],
                                                 max_new_tokens=tokens, chat=chat)) for name in drafters},
        "peer plain": lambda: peer_generate(lm, ids, tokens, {}),
        "peer lookup": lambda: peer_generate(lm, ids, tokens, PEER_LOOKUP),
    }
    times: dict[str, list[float]] = {k: [] for k in jobs}
    outs: dict = {}
    for r in range(rounds):
        order = list(jobs)[r % len(jobs):] + list(jobs)[:r % len(jobs)]  # rotate who goes first
        for which in order:
            seconds, outs[which] = cpu_timed(jobs[which])
            times[which].append(seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    plain = outs["plain"].finish.token_ids
    per_token = lambda total: round(1000 * (total - med["prefill"]) / max(1, tokens - 1), 2)
    row = {
        "size": size, "prompt_tokens": len(ids), "document_tokens": doc.num_tokens, "tokens": len(plain),
        "prefill_s": round(med["prefill"], 3), "plain_s": round(med["plain"], 3),
        "peer_plain_s": round(med["peer plain"], 3), "peer_lookup_s": round(med["peer lookup"], 3),
        "plain_ms_per_token": per_token(med["plain"]),
        "peer_speedup": round(med["peer plain"] / med["peer lookup"], 3),
        "drafters": {name: drafter_row(name, outs[name], med, tokens, plain) for name in drafters},
        "identical": {"plain_vs_generate": outs["peer plain"] == plain,
                      "lookup_vs_generate": outs["peer lookup"] == outs["peer plain"]},
        "text": outs["plain"].finish.text[:80],
    }
    for name in drafters:
        row["identical"][f"{name}_vs_plain"] = row["drafters"][name]["identical"]
    if "rapid" in drafters:  # RAPID's figures at the top level, as before the other drafters came
        r = row["drafters"]["rapid"]
        first = outs["rapid"].of_kind("spec_round")[0].extra
        row |= {"draft_prompt_tokens": first.get("draft_prompt_tokens"), "rapid_s": r["s"],
                "rapid_ms_per_token": r["ms_per_token"], "speedup": r["speedup"], "decode_speedup": r["decode_speedup"],
                "speedups": [round(a / b, 3) for a, b in zip(times["plain"], times["rapid"])],
                "rapid_vs_peer": round(med["peer lookup"] / med["rapid"], 3),
                "acceptance_rate": r["acceptance_rate"], "mean_accepted_length": r["mean_accepted_length"],
                "target_passes_per_token": r["target_passes_per_token"], "draft_passes": r["draft_passes"]}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="windows in tokens, comma-separated")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="the book's seed")
    parser.add_argument("--question", type=int, default=0, help="which of its questions follows the book")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--drafters", default="rapid,longspec,eagle",
                        help=f"speculative drafters to time, comma-separated, of {', '.join(DRAFTERS)} (longspec and "
                             "eagle need a draft trained for the model: skipped, and said, where there is none)")
    parser.add_argument("--checkpoint", metavar="FILE", help="keep finished windows here; skip those already there")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    lm = LM(load_model(args.model, dtype="float32", progress=None))
    drafters, skipped = usable_drafters(lm, [d.strip() for d in args.drafters.split(",") if d.strip()])
    saved = lm.stop_ids
    lm.stop_ids = frozenset()  # decode through end-of-text: every run is --tokens long
    started = time.perf_counter()
    done = {}
    if args.checkpoint and Path(args.checkpoint).is_file():
        for line in Path(args.checkpoint).read_text().splitlines():
            row = json.loads(line)
            if (row["setup"] == [args.model, args.tokens, args.rounds, args.seed, args.question, list(drafters)]):
                done[row["size"]] = row
    rows = []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            if size not in done:
                done[size] = run_size(lm, size, args.tokens, args.rounds, args.seed, args.question, drafters)
                done[size]["setup"] = [args.model, args.tokens, args.rounds, args.seed, args.question, list(drafters)]
                if args.checkpoint:
                    with open(args.checkpoint, "a") as f:
                        f.write(json.dumps(done[size]) + "\n")
            rows.append(done[size])
    finally:
        lm.stop_ids = saved
    result = {"model": args.model, "tokens": args.tokens, "rounds": args.rounds, "seed": args.seed,
              "question": args.question, "drafters": list(drafters), "skipped": skipped, "rows": rows,
              "wall_s": round(time.perf_counter() - started, 1),
              "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                          "torch": torch.__version__}}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.model}, {args.tokens} tokens, medians of {args.rounds} rounds (CPU s, 1 thread)"
          + (f"; skipped: {'; '.join(skipped)}" if skipped else ""))
    print(f"{'window':>7} {'prompt':>7} {'prefill':>8} {'plain':>7} {'ms/tok':>7} {'peer':>6}  "
          + "  ".join(f"{d + ' s':>12} {'ms/tok':>7} {'speedup':>7} {'decode':>7} {'accept':>6} {'cache MB':>9}"
                      for d in drafters) + "  identical")
    for r in rows:
        cells = "  ".join(f"{x['s']:>12} {x['ms_per_token']:>7} {x['speedup']:>7} {x['decode_speedup']:>7} "
                          f"{x['acceptance_rate']!s:>6} {x['draft_cache_mb']:>9}"
                          for x in (r["drafters"][d] for d in drafters))
        print(f"{r['size']:>7} {r['prompt_tokens']:>7} {r['prefill_s']:>8} {r['plain_s']:>7} {r['plain_ms_per_token']:>7} "
              f"{r['peer_speedup']:>6}  {cells}  {all(r['identical'].values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
