"""Train LongSpec's draft for SmolLM2-135M-Instruct (`decoding.longctx.longspec`) on a CPU, from the target's own
answers about KJV passages (self-distillation).

Paper: Yang, Du et al. 2025, "LongSpec" (arXiv 2502.17421) and the authors' training code, read for the loss, the
cross-attention's block mask and the anchor-offset indices (nothing copied). What is trained: one decoder layer
(self-attention, cross-attention on the target's last-layer keys and values, MLP, four norms); the target's
embeddings and LM head stay frozen and are not stored with the draft.

Data (`data`): passages of KJV books that the lab's shipped document does NOT use (Debian's `bible-kjv`; Ruth,
Esther and Jonah are the shipped document's and are never trained on), built like the lab's documents
(`document.build_document`: facts planted at depths, the needle / continue / chapter questions) at 300-700 tokens, or
with a free request (summarise, continue, who is named). SmolLM2 answers greedily (chat template, batched). Then
one more target pass over each whole sequence stores what training needs and never recomputes: its last layer's
keys before the rotary embedding and its values (float16), and its top-16 next-token probabilities at every
position. Shards under --work; shard 0 is held out.

Training (`train`): each sequence gets ANCHOR-OFFSET position indices: its first 0-4 tokens keep theirs, every other
one is shifted by a random offset so that the sequence ends anywhere up to the target's window (8,192): the draft
learns the indices of a long context from short texts. The stored keys are rotated at those indices (RoPE makes
the target's attention depend on differences of indices only, so a shifted copy of a short text is what the
target computes, but for the anchors). The self-attention sees the window and the sinks; the cross-attention the
target's keys of the earlier blocks of `lag_block` positions (what drafting sees). Loss: cross-entropy against
the target's top-16 probabilities, renormalised on the draft vocabulary (the EAGLE head's 8,192 ids). Validation:
how often the draft's top token is the target's, on held-out answers, at offset 0 and at a long offset.

    python -m decoding.training.longspec data  --work ~/.cache/decoding-lab/longspec --minutes 40
    python -m decoding.training.longspec train --work ~/.cache/decoding-lab/longspec --minutes 60 [--resume]
    python -m decoding.training.longspec export --work ~/.cache/decoding-lab/longspec --out assets/smollm2-longspec-head

One thread; `train` checkpoints every --save-minutes and `--resume` continues; `data` adds shards until --minutes.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

from decoding.longctx.document import BOOKS, DEMO_NAMES, NAMES, build_document, parse_bible
from decoding.training.checkpoint import export_notes

DEFAULT_WORK = Path.home() / ".cache" / "decoding-lab" / "longspec"
TARGET = "smollm2-135m"
EAGLE_HEAD = Path(__file__).resolve().parents[2] / "assets" / "smollm2-eagle-head"
VAL_SHARDS = 1
TOP = 16  # target probabilities kept per position
MAX_POSITION = 8192  # the target's window: anchor offsets reach up to it
# Books of the KJV for training passages: not Ruth, Esther or Jonah (the lab's shipped document)
TRAIN_BOOKS = ("gen", "exo", "josh", "judg", "1sam", "2sam", "1kin", "2kin", "dan", "neh", "ezra", "job", "matt",
               "mark", "luke", "john", "acts")
FREE_REQUESTS = ("Summarize the text in two sentences.", "Continue the text with the next few lines.",
                 "Who are the people named in the text?", "What happens in the last part of the text?")


def log(work: Path, text: str) -> None:
    line = time.strftime("%H:%M:%S ") + text
    print(line, flush=True)
    with open(work / "train.log", "a") as f:
        f.write(line + "\n")


def load_target():
    from decoding.models import load_model

    return load_model(TARGET, dtype="float32", progress=None)


def training_chapters() -> list:
    """Chapters of TRAIN_BOOKS from Debian's `bible` program (the bible-kjv package)."""
    raw = "".join(subprocess.run(["bible", f"{b}1:1-{b}99:99"], capture_output=True, text=True).stdout
                  for b in TRAIN_BOOKS)
    chapters = [c for c in parse_bible(raw) if c.verses and not c.title.startswith(BOOKS)]
    if len(chapters) < 100:
        raise OSError("the training passages need Debian's bible-kjv (`apt-get install bible-kjv`)")
    return chapters


def make_prompts(tokenizer, chapters: list, seed: int, count: int) -> list[str]:
    """`count` prompts: a passage of 300-700 tokens with facts planted, then one of its questions or a free
    request, the same for the same seed."""
    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        doc = build_document(tokenizer, size=rng.randrange(460, 860), seed=seed * 1000 + i, chapters=chapters,
                             depths=tuple(sorted(rng.sample([0.1, 0.3, 0.5, 0.7, 0.9], rng.randint(1, 3)))),
                             names=rng.choice((NAMES, DEMO_NAMES)))
        ask = rng.random()
        prompts.append(doc.prompt(rng.choice(doc.questions)) if ask < 0.75 else
                       f"{doc.text}\n\n{rng.choice(FREE_REQUESTS)}")
    return prompts


@torch.inference_mode()
def target_records(model, ids: torch.Tensor) -> dict:
    """One pass of the target over `ids` (1, L): its last layer's keys before the rotary embedding and its values
    (L, Hkv * hd) float16, and its top-TOP next-token probabilities at every position."""
    attn = model.model.layers[-1].self_attn
    caught = {}
    hooks = [attn.k_proj.register_forward_hook(lambda m, i, o: caught.__setitem__("k", o)),
             attn.v_proj.register_forward_hook(lambda m, i, o: caught.__setitem__("v", o))]
    try:
        logits = model(ids).logits[0].float()
    finally:
        for h in hooks:
            h.remove()
    top = torch.softmax(logits, -1).topk(TOP, -1)
    return {"k": caught["k"][0].half().clone(), "v": caught["v"][0].half().clone(),
            "top_ids": top.indices.int(), "top_p": top.values.half()}


@torch.inference_mode()
def make_shard(model, tokenizer, texts: list[str], max_new_tokens: int) -> dict:
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
             for t in texts]
    tokenizer.padding_side = "left"
    enc = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    prompt_len, seqs = enc.input_ids.shape[1], []
    for b in range(len(texts)):
        pad = int((enc.attention_mask[b] == 0).sum())
        ids = out[b].tolist()
        end = next((j + 1 for j in range(prompt_len, len(ids)) if ids[j] in stops), len(ids))
        ids = ids[pad:end]
        record = target_records(model, torch.tensor([ids]))
        seqs.append({"ids": torch.tensor(ids, dtype=torch.int32), "start": prompt_len - pad} | record)
    return {"seqs": seqs, "prompts": texts}


def make_data(args) -> None:
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    loaded = load_target()
    chapters = training_chapters()
    index = len(sorted(work.glob("shard-*.pt")))
    t_end = time.time() + 60 * args.minutes
    log(work, f"data: {index} shards present, {len(chapters)} training chapters; until "
              f"{time.strftime('%H:%M', time.localtime(t_end))}")
    while time.time() < t_end:
        t0 = time.process_time()
        texts = make_prompts(loaded.tokenizer, chapters, seed=index, count=args.batch)
        shard = make_shard(loaded.model, loaded.tokenizer, texts, args.max_new_tokens)
        torch.save(shard, work / f"shard-{index:04d}.pt")
        tokens = sum(len(s["ids"]) for s in shard["seqs"])
        answers = sum(len(s["ids"]) - s["start"] for s in shard["seqs"])
        log(work, f"data: shard {index}: {len(texts)} sequences, {tokens} tokens ({answers} generated), "
                  f"{time.process_time() - t0:.0f} CPU s")
        index += 1


# ---------------------------------------------------------------- training


def load_seqs(work: Path) -> tuple[list[dict], list[dict]]:
    train, val = [], []
    for path in sorted(work.glob("shard-*.pt")):
        seqs = torch.load(path)["seqs"]
        (val if int(path.stem.split("-")[1]) < VAL_SHARDS else train).extend(seqs)
    return train, val


def anchor_offset(length: int, rng: random.Random, max_position: int = MAX_POSITION,
                  offset: int | None = None, anchors: int | None = None) -> torch.Tensor:
    """Position indices of a training sequence: the first `anchors` (0-4) keep theirs, the rest are shifted by
    `offset` (random: the sequence then ends anywhere up to `max_position`)."""
    anchors = rng.randint(0, 4) if anchors is None else anchors
    offset = rng.randint(0, max(0, max_position - length)) if offset is None else offset
    positions = torch.arange(length)
    positions[anchors:] += offset
    return positions


def make_batch(seqs: list[dict], head, embed: torch.Tensor, vocab_pos: torch.Tensor, rng: random.Random,
               offset: int | None = None) -> dict:
    """Inputs, masks and soft labels of a batch, right-padded; `offset` None: random anchor offsets."""
    c = head.config
    length = max(len(s["ids"]) for s in seqs)
    b, hkv, hd = len(seqs), c.num_kv_heads, c.head_dim
    emb = torch.zeros(b, length, embed.shape[1])
    tk, tv = torch.zeros(b, hkv, length, hd), torch.zeros(b, hkv, length, hd)
    positions = torch.zeros(b, length, dtype=torch.long)
    labels = torch.zeros(b, length, TOP, dtype=torch.long)
    label_p = torch.zeros(b, length, TOP)
    valid = torch.zeros(b, length, dtype=torch.bool)
    answer = torch.zeros(b, length, dtype=torch.bool)
    argmax = torch.full((b, length), -1)
    for row, s in enumerate(seqs):
        n = len(s["ids"])
        ids = s["ids"].long()
        emb[row, :n] = embed[ids]
        pos = anchor_offset(n, rng, offset=offset, anchors=0 if offset == 0 else None)
        positions[row, :n] = pos
        positions[row, n:] = pos[-1] + 1 + torch.arange(length - n)
        k = s["k"].float().view(n, hkv, hd).transpose(0, 1)[None]  # (1, Hkv, n, hd)
        tk[row, :, :n] = head.rope(k, pos)[0]
        tv[row, :, :n] = s["v"].float().view(n, hkv, hd).transpose(0, 1)
        mapped = vocab_pos[s["top_ids"].long()]  # (n, TOP) draft-vocab index, -1 outside it
        p = s["top_p"].float() * (mapped >= 0)
        labels[row, :n], label_p[row, :n] = mapped.clamp(min=0), p / p.sum(-1, keepdim=True).clamp(min=1e-9)
        valid[row, :n] = p.sum(-1) > 0
        answer[row, max(0, s["start"] - 1):n] = True
        top1 = s["top_ids"][:, 0].long()
        argmax[row, :n] = torch.where(vocab_pos[top1] >= 0, vocab_pos[top1], -2)  # -2: not draftable
    from decoding.longctx.longspec import training_masks

    own, cross = training_masks(length, c.window, c.sinks, c.lag_block)
    return {"emb": emb, "positions": positions, "target_kv": (tk, tv), "self_mask": own, "cross_mask": cross,
            "labels": labels, "label_p": label_p, "valid": valid, "answer": answer & valid, "argmax": argmax}


def losses(head, batch: dict, lm_rows: torch.Tensor) -> tuple[torch.Tensor, dict]:
    hidden, _ = head(batch["emb"], batch["positions"], batch["target_kv"], self_mask=batch["self_mask"],
                     cross_mask=batch["cross_mask"])
    logp = torch.log_softmax(hidden @ lm_rows.T, -1)  # (B, L, K)
    ce = -(logp.gather(-1, batch["labels"]) * batch["label_p"]).sum(-1)  # (B, L)
    valid, answer = batch["valid"], batch["answer"]
    loss = ce[valid].mean()
    hit = logp.argmax(-1) == batch["argmax"]
    return loss, {"loss": loss.item(), "answer_loss": ce[answer].mean().item(),
                  "acc": hit[valid].float().mean().item(), "answer_acc": hit[answer].float().mean().item()}


@torch.no_grad()
def evaluate(head, seqs: list[dict], embed, vocab_pos, lm_rows) -> dict:
    """Top-1 agreement with the target at offset 0 and at a long offset (the sequence ends near 8,000)."""
    head.eval()
    out = {}
    for name, offset in (("near", 0), ("far", 7000)):
        sums, count = {}, 0
        for i in range(0, len(seqs), 4):
            batch = make_batch(seqs[i:i + 4], head, embed, vocab_pos, random.Random(i), offset=offset)
            _, stats = losses(head, batch, lm_rows)
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
        out |= {f"{name}_{k}": round(v / count, 4) for k, v in sums.items()}
    head.train()
    return out


def init_from_target(head, model) -> None:
    """Start from the target's last layer: its attention as both the self- and the cross-attention (the cross
    query then reads the last layer's keys as the target does), its MLP and norms, the final norm."""
    layer = model.model.layers[-1]
    with torch.no_grad():
        for mine, theirs in (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("o_proj", "o_proj"),
                             ("cq_proj", "q_proj"), ("co_proj", "o_proj")):
            getattr(head, mine).weight.copy_(getattr(layer.self_attn, theirs).weight)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(head, name).weight.copy_(getattr(layer.mlp, name).weight)
        head.input_norm.copy_(layer.input_layernorm.weight)
        head.cross_norm.copy_(layer.input_layernorm.weight)
        head.mlp_norm.copy_(layer.post_attention_layernorm.weight)
        head.final_norm.copy_(model.model.norm.weight)


def train(args) -> None:
    from decoding.longctx.longspec import LongSpecConfig, LongSpecHead
    from decoding.speculative.eagle import load_head as load_eagle

    work = args.work
    loaded = load_target()
    model = loaded.model.requires_grad_(False)
    embed = model.get_input_embeddings().weight.detach()
    vocab_ids = load_eagle(EAGLE_HEAD).vocab_ids.clone()
    vocab_pos = torch.full((embed.shape[0],), -1)
    vocab_pos[vocab_ids] = torch.arange(len(vocab_ids))
    lm_rows = model.get_output_embeddings().weight.detach()[vocab_ids]
    train_seqs, val_seqs = load_seqs(work)
    config = LongSpecConfig.like(model.config, len(vocab_ids), TARGET, window=args.window, sinks=args.sinks,
                                 lag_block=args.lag_block)
    head = LongSpecHead(config)
    head.vocab_ids.copy_(vocab_ids)
    init_from_target(head, model)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt_path, best_path = work / "ckpt.pt", work / "best.pt"
    step, best, seen = 0, -1.0, 0
    if args.resume and ckpt_path.exists():
        state = torch.load(ckpt_path)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        step, best, seen = state["step"], state["best"], state["seen"]
    tokens = sum(len(s["ids"]) for s in train_seqs)
    log(work, f"train: {len(train_seqs)} train / {len(val_seqs)} val sequences, {tokens} tokens; {config}; step {step}")
    if step == 0:
        log(work, f"eval step 0 (the target's last layer): {json.dumps(evaluate(head, val_seqs, embed, vocab_pos, lm_rows))}")
    rng = random.Random(args.seed + step)
    t_end, last_save = time.time() + 60 * args.minutes, time.time()
    order: list[int] = []
    while time.time() < t_end:
        if not order:
            order = list(range(len(train_seqs)))
            rng.shuffle(order)
        picked, order = order[:args.batch], order[args.batch:]
        batch = make_batch([train_seqs[i] for i in picked], head, embed, vocab_pos, rng)
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup)
        loss, stats = losses(head, batch, lm_rows)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step, seen = step + 1, seen + int(batch["valid"].sum())
        if step % 10 == 0:
            log(work, f"step {step} seen {seen} " + " ".join(f"{k} {v:.4f}" for k, v in stats.items()))
        done = time.time() >= t_end
        if time.time() - last_save > 60 * args.save_minutes or done:
            val = evaluate(head, val_seqs, embed, vocab_pos, lm_rows)
            score = val["far_answer_acc"] + val["near_answer_acc"]
            if score > best:
                best = score
                torch.save({"head": head.state_dict(), "step": step, "val": val, "seen": seen}, best_path)
            torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "best": best, "seen": seen,
                        "config": config.__dict__}, work / "ckpt.tmp")
            (work / "ckpt.tmp").replace(ckpt_path)
            log(work, f"eval step {step}: val {json.dumps(val)} (best {best:.4f}); checkpoint saved")
            last_save = time.time()


def export(args) -> None:
    from decoding.longctx.longspec import LongSpecConfig, LongSpecHead, save_head

    state, best = torch.load(args.work / "ckpt.pt"), torch.load(args.work / "best.pt")
    head = LongSpecHead(LongSpecConfig(**state["config"]))
    head.load_state_dict(best["head"])
    save_head(head, args.out)
    export_notes(args.out, args.work, {"step": best["step"], "tokens_seen": best["seen"], "val": best["val"],
                                       "shards": len(list(args.work.glob("shard-*.pt")))})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.training.longspec", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("data", help="the target's answers about KJV passages, with its keys and probabilities")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--minutes", type=float, default=40)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p = sub.add_parser("train", help="train the draft (checkpoints to --work)")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--sinks", type=int, default=4)
    p.add_argument("--lag-block", type=int, default=6)
    p.add_argument("--save-minutes", type=float, default=5)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("export", help="write the best draft (float16), its config and the log")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=Path("assets/smollm2-longspec-head"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    {"data": make_data, "train": train, "export": export}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
