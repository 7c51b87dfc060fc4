"""exact-extract vs greedy decoding on extractive QA: SQuAD exact match and F1 (issue 27).

Castel, Ram, Efrat and Levy, "How Optimal is Greedy Decoding for Extractive Question Answering?"
(AKBC 2022, arXiv 2108.05857) find that with no training examples exact-extract (the passage span of
highest probability, found exactly) beats greedy decoding on extractive QA, and that a few fine-tuning
examples close the gap. This bench puts that headline to SmolLM2-135M-Instruct, zero-shot, on the
items of `bench/extract_qa.jsonl`: short passages invented for the project (no dataset's text), each
with questions whose gold answers are spans of their passage (SQuAD's form: `context`, `question`,
`answers.text`, `answers.answer_start`).

Prompt: the paper's pattern `Text: <passage>\\nQuestion: <question>\\nAnswer:` (its T5 mask sentinel
left out: a decoder-only model continues after `Answer:`), through the engine as the CLI sends it,
with the chat template (the CLI's default) and without it; both are reported, because which one a
135M chat model answers better in is what the figures show, not something to assume.

Per item and chat setting, the same prompt goes through
    greedy         the project's `greedy` strategy, `--tokens` new tokens at most; its answer is the first
                   non-empty line of its text (a newline is the end exact-extract scores), stripped; a
                   stop token first gives the empty answer (`empty` counts them)
    exact-extract  the registered strategy with its defaults (whole-word spans of up to 12 tokens), with
                   max_new_tokens 12, its longest span (which also bounds the greedy answer it records)
and each answer is scored against the gold answers (max over golds) with SQuAD's official
normalisation (lowercase; punctuation and the articles a/an/the removed; whitespace collapsed):
    exact_match    100 x the fraction of items whose normalised answer equals a gold one
    f1             100 x the mean token-overlap F1 with the best gold
    is_span        fraction of answers that are a candidate span of the passage (exact-extract: all)
    logprob        log P(answer span, then the answer ends) under the model, as exact-extract scores
                   it: exact-extract's best span; greedy's answer when it is a candidate span (the best
                   cell of that text), else undefined. Mean over the items where it is defined
                   (`logprob_items` of them); `logprob_paired` compares both on the items where
                   greedy's answer is a span, so the two means cover the same items
    same_as_exact  fraction of items where greedy's answer is exact-extract's span (the paper's
                   "greedy finds the most probable span" rate)
    gold_logprob   (exact-extract) mean over items of the best gold span's log P; `gold_is_best`: the
                   fraction where the model's most probable span is a gold answer. The search is
                   exact, so every miss of exact-extract is the model's preference, not the search's
    forward_passes mean model calls per item: greedy's run (a stop token or `--tokens` ends it);
                   exact-extract's prefill, span rows and chosen-span pass, without the greedy answer
                   it also records for its picture

Nothing here is timed: this bench measures answers, not speed.

    python bench/bench_extract.py [--model smollm2-135m] [--items N] [--chat on|off|both]
                                  [--tokens 32] [--threads 1] [--json] [--smoke]

`--smoke`: the first 2 items, 16 tokens (the smoke test). `--json` prints one JSON object: model,
items, prompt form, and per chat setting the per-method summary and every item's answers.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import string
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from decoding import run_to_trace
from decoding.lm import LM
from decoding.models import load_model
from decoding.token.extractive import ExactExtractParams, passage_of
from visualizers.extract import extract_record

DATA = Path(__file__).with_name("extract_qa.jsonl")
PROMPT = "Text: {context}\nQuestion: {question}\nAnswer:"  # the paper's pattern, without T5's sentinel
METHODS = ("greedy", "exact-extract")
EXTRACT_TOKENS = ExactExtractParams().max_span_tokens  # exact-extract's max_new_tokens: its longest span
SMOKE_ITEMS, SMOKE_TOKENS = 2, 16


# SQuAD's answer normalisation and scores ------------------------------------------------------------

def normalize_answer(text: str) -> str:
    """SQuAD v1.1's normalisation: lowercase, drop punctuation, drop the articles a/an/the, collapse spaces."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token-overlap F1 of the normalised answers (1.0 when both are empty, 0.0 when one is)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((collections.Counter(pred) & collections.Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_over_golds(metric, prediction: str, golds: list[str]) -> float:
    return max(metric(prediction, gold) for gold in golds)


# items ----------------------------------------------------------------------------------------------

def load_items(path: Path = DATA) -> list[dict]:
    """The items, each checked: a question, and gold answers that lie at their `answer_start` in the context."""
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for n, item in enumerate(items, 1):
        answers = item.get("answers", {})
        texts, starts = answers.get("text", []), answers.get("answer_start", [])
        if not item.get("question") or not texts or len(texts) != len(starts):
            raise ValueError(f"{path.name} line {n}: an item needs `question` and `answers` with as many `text` as "
                             f"`answer_start`, got {item!r}")
        for text, start in zip(texts, starts):
            if item["context"][start:start + len(text)] != text:
                raise ValueError(f"{path.name} line {n}: answer {text!r} is not at answer_start {start} of its context")
    return items


# one item -------------------------------------------------------------------------------------------

def span_logprobs(lm: LM, record: dict, passage: str) -> dict[str, float]:
    """{a candidate span's text (stripped): the best recorded log P of a span with that text}, decoded once
    per item (an answer's log P is then a lookup: None when it is no candidate)."""
    passage_ids = lm.tokenizer(" " + passage, add_special_tokens=False).input_ids
    best: dict[str, float] = {}
    for start, row in enumerate(record["logprobs"]):
        for k, value in enumerate(row):
            if value is not None:
                text = lm.decode(passage_ids[start:start + k + 1]).strip()
                best[text] = max(value, best.get(text, value))
    return best


def run_item(lm: LM, item: dict, chat: bool, tokens: int) -> dict:
    """Both methods on one item: their answers, scores, log-probabilities and model calls."""
    prompt = PROMPT.format(context=item["context"], question=item["question"])
    passage, golds = passage_of(prompt), item["answers"]["text"]
    greedy = run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=tokens, chat=chat)
    extract = run_to_trace(lm, prompt, strategy="exact-extract", max_new_tokens=EXTRACT_TOKENS, chat=chat)
    record = extract_record(extract)
    greedy_answer = next((line.strip() for line in greedy.finish.text.split("\n") if line.strip()), "")
    best = record["best"]["text"].strip()
    spans = span_logprobs(lm, record, passage)
    greedy_logprob = spans.get(greedy_answer) if greedy_answer else None
    gold_logprobs = [spans[g.strip()] for g in golds if g.strip() in spans]
    row = {"id": item["id"], "question": item["question"], "golds": golds}
    row["greedy"] = {"answer": greedy_answer, "raw": greedy.finish.text, "is_span": greedy_logprob is not None,
                     "logprob": greedy_logprob, "same_as_exact": greedy_answer == best,
                     "forward_passes": greedy.finish.forward_passes}
    row["exact-extract"] = {"answer": best, "is_span": True, "logprob": record["best"]["logprob"],
                            "gold_logprob": max(gold_logprobs) if gold_logprobs else None,
                            "gold_is_best": best in [g.strip() for g in golds],
                            "forward_passes": extract.finish.forward_passes - len(record["greedy"]["token_ids"])}
    for method in METHODS:
        answer = row[method]["answer"]
        row[method]["exact_match"] = best_over_golds(exact_match, answer, golds)
        row[method]["f1"] = best_over_golds(f1_score, answer, golds)
    return row


# summary --------------------------------------------------------------------------------------------

def mean(values, scale: float = 1.0) -> float | None:
    values = [v for v in values if v is not None]
    return round(scale * statistics.fmean(values), 3) if values else None


def summarise(rows: list[dict]) -> dict:
    paired = [r for r in rows if r["greedy"]["is_span"]]
    out = {}
    for method in METHODS:
        cells = [r[method] for r in rows]
        out[method] = {
            "exact_match": mean((c["exact_match"] for c in cells), 100), "f1": mean((c["f1"] for c in cells), 100),
            "is_span": mean(float(c["is_span"]) for c in cells),
            "logprob": mean(c["logprob"] for c in cells),
            "logprob_items": sum(c["logprob"] is not None for c in cells),
            "logprob_paired": mean(r[method]["logprob"] for r in paired),
            "forward_passes": mean(c["forward_passes"] for c in cells),
        }
    out["greedy"]["same_as_exact"] = mean(float(r["greedy"]["same_as_exact"]) for r in rows)
    out["greedy"]["empty"] = sum(not r["greedy"]["answer"] for r in rows)
    out["exact-extract"]["gold_logprob"] = mean(r["exact-extract"]["gold_logprob"] for r in rows)
    out["exact-extract"]["gold_is_best"] = mean(float(r["exact-extract"]["gold_is_best"]) for r in rows)
    out["paired_items"] = len(paired)
    return out


def cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_table(result: dict) -> None:
    print(f"{result['model']}, {result['items']} items of {DATA.name}, zero-shot, prompt {result['prompt']!r}")
    print(f"{'chat':5} {'method':14} {'EM':>6} {'F1':>6} {'span':>5} {'log P':>7} {'n':>3} {'paired':>7} "
          f"{'passes':>7}")
    for run in result["runs"]:
        s = run["methods"]
        for method in METHODS:
            m = s[method]
            print(f"{'on' if run['chat'] else 'off':5} {method:14} {cell(m['exact_match'], '6.1f')} "
                  f"{cell(m['f1'], '6.1f')} {cell(m['is_span'], '5.2f')} {cell(m['logprob'], '7.2f')} "
                  f"{m['logprob_items']:3d} {cell(m['logprob_paired'], '7.2f')} {cell(m['forward_passes'], '7.1f')}")
        e = s["exact-extract"]
        print(f"      greedy answer empty on {s['greedy']['empty']} items, = exact-extract's span on "
              f"{cell(s['greedy']['same_as_exact'], '.2f')} of items; "
              f"paired log P over the {s['paired_items']} items where greedy's answer is a span; the best span is "
              f"a gold answer on {cell(e['gold_is_best'], '.2f')} (mean gold log P {cell(e['gold_logprob'], '.2f')})")
    for run in result["runs"]:
        print(f"\nchat {'on' if run['chat'] else 'off'}, first items:")
        for r in run["per_item"][:4]:
            print(f"  {r['question']}  gold {r['golds'][0]!r}: greedy {r['greedy']['answer']!r}, "
                  f"exact-extract {r['exact-extract']['answer']!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--items", type=int, default=None, help="use the first N items (default: all)")
    parser.add_argument("--chat", choices=("on", "off", "both"), default="both", help="the chat template")
    parser.add_argument("--tokens", type=int, default=32, help="max new tokens of the greedy answer")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_ITEMS} items, {SMOKE_TOKENS} tokens")
    args = parser.parse_args(argv)
    items = load_items()
    count = SMOKE_ITEMS if args.smoke else (args.items if args.items is not None else len(items))
    if not 1 <= count <= len(items):
        parser.error(f"--items must be in [1, {len(items)}], got {count}")
    if args.tokens < 1:
        parser.error(f"--tokens must be >= 1, got {args.tokens}")
    tokens = SMOKE_TOKENS if args.smoke else args.tokens
    torch.set_num_threads(args.threads)
    lm = LM(load_model(args.model, dtype=args.dtype, progress=None))
    chats = {"on": [True], "off": [False], "both": [True, False]}[args.chat]
    runs = []
    for chat in chats:
        rows = [run_item(lm, item, chat, tokens) for item in items[:count]]
        runs.append({"chat": chat, "methods": summarise(rows), "per_item": rows})
    result = {"model": args.model, "items": count, "tokens": tokens, "prompt": PROMPT, "runs": runs}
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
