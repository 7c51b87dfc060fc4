"""Train an EAGLE draft head for SmolLM2-135M-Instruct on the target's own features (self-distillation).

Papers followed: Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature
Uncertainty" (a one-layer head autoregressive at the feature level: input concat(embedding of
token t+1, target feature at t), output the feature at t+1; loss = SmoothL1 on the feature plus
0.1 x cross-entropy of the token distribution through the target's frozen LM head; uniform noise
on the input features); Zhao et al. 2025, "FR-Spec" and Li et al. 2025, "EAGLE-3" (draft over a
reduced vocabulary of the target's most frequent tokens, verification on the full vocabulary).

Glossary
    feature     the target's last hidden state after the final norm (its LM head's input) at a position.
    head        the draft network of `decoding.speculative.eagle` (fc + one decoder layer).
    draft vocab the K most frequent tokens in the target's own outputs; the head's logits cover only them.
    shard       one batch of generated sequences with their features, saved under --work.

Two phases, each resumable (one long job at a time on a shared CPU: one thread):
    python -m decoding.training.eagle data  --work ~/.cache/decoding-lab/eagle --minutes 35
    python -m decoding.training.eagle train --work ~/.cache/decoding-lab/eagle --minutes 60 [--resume]
    python -m decoding.training.eagle export --work ~/.cache/decoding-lab/eagle --out assets/smollm2-eagle-head
`train --from-head assets/smollm2-eagle-head` continues an exported head on (more) data in --work.
`data` asks the target for greedy answers to seeded open-ended prompts (`eagle_prompts`), batched,
and stores token ids and features (float16) per sequence; `train` checkpoints to --work every few
minutes and logs to --work/train.log; `export` writes the float16 head, its config and the log.

`train --fspad` trains the FSPAD variant (Gui et al. 2024, arXiv 2408.15562): the head's input is
sampled in a higher-dimensional space (`HeadConfig.fspad_channels`, see `decoding.speculative.eagle`)
and its feature loss is a PARTIAL alignment: SmoothL1 on the first `--pad-fraction` of the feature's
dimensions only, while the token loss reads the whole predicted feature, so the head is not forced
to trade logit confidence for an exact copy of every feature dimension. Both forms are this project's
reading of the paper's description (its full text was not available here). `--max-shards N` trains
on the first N shards only, so two heads can be compared on the same data.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from decoding.training.checkpoint import export_notes
from decoding.training.eagle_prompts import prompts

DEFAULT_WORK = Path.home() / ".cache" / "decoding-lab" / "eagle"
TARGET = "smollm2-135m"
VAL_SHARDS = 1  # shard 0 is held out for validation


def log(work: Path, text: str) -> None:
    line = time.strftime("%H:%M:%S ") + text
    print(line, flush=True)
    with open(work / "train.log", "a") as f:
        f.write(line + "\n")


def load_target(dtype: str = "float32"):
    from decoding.models import load_model

    return load_model(TARGET, dtype=dtype, progress=None)


# ---------------------------------------------------------------- data: the target's own answers


@torch.inference_mode()
def generate_shard(model, tokenizer, texts: list[str], max_new_tokens: int) -> dict:
    """Greedy answers to `texts` (chat template), with the target's feature at every position but the last."""
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
             for t in texts]
    tokenizer.padding_side = "left"
    enc = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, output_hidden_states=True,
                         return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
    steps = [out.hidden_states[0][-1]] + [h[-1] for h in out.hidden_states[1:]]  # last layer (already normed)
    feats = torch.cat(steps, 1)  # (B, T_prompt + steps - 1, D)
    prompt_len = enc.input_ids.shape[1]
    stops = set(model.generation_config.eos_token_id if isinstance(model.generation_config.eos_token_id, list)
                else [model.generation_config.eos_token_id])
    ids_list, feat_list, starts = [], [], []
    for b in range(len(texts)):
        pad = int((enc.attention_mask[b] == 0).sum())
        ids = out.sequences[b].tolist()
        end = len(ids)
        for j in range(prompt_len, len(ids)):
            if ids[j] in stops:
                end = j + 1
                break
        ids = ids[pad:end]
        ids_list.append(torch.tensor(ids, dtype=torch.int32))
        feat_list.append(feats[b, pad:pad + len(ids) - 1].to(torch.float16).clone())  # (L - 1, D)
        starts.append(prompt_len - pad)
    return {"ids": ids_list, "feats": feat_list, "answer_start": starts, "prompts": texts}


def make_data(work: Path, minutes: float, batch: int, max_new_tokens: int) -> None:
    work.mkdir(parents=True, exist_ok=True)
    loaded = load_target()
    done = sorted(work.glob("shard-*.pt"))
    index, t_end = len(done), time.time() + 60 * minutes
    log(work, f"data: {len(done)} shards present; generating until {time.strftime('%H:%M', time.localtime(t_end))}")
    while time.time() < t_end:
        texts = prompts(seed=1000 + index, count=batch)
        t0 = time.process_time()
        shard = generate_shard(loaded.model, loaded.tokenizer, texts, max_new_tokens)
        torch.save(shard, work / f"shard-{index:04d}.pt")
        new = sum(len(ids) - s for ids, s in zip(shard["ids"], shard["answer_start"]))
        log(work, f"data: shard {index}: {len(texts)} answers, {new} generated tokens, "
                  f"{new / (time.process_time() - t0):.1f} tokens/CPU-s")
        index += 1


# ---------------------------------------------------------------- training


def load_shards(work: Path, max_shards: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, validation) sequences: {"ids": (L,), "feats": (L-1, D) float16, "start": answer start}
    from the first `max_shards` shards (0: all)."""
    train, val = [], []
    paths = sorted(work.glob("shard-*.pt"))
    for path in paths[:max_shards or len(paths)]:
        shard = torch.load(path)
        seqs = [{"ids": ids.long(), "feats": f, "start": s}
                for ids, f, s in zip(shard["ids"], shard["feats"], shard["answer_start"]) if len(ids) >= 4]
        (val if int(path.stem.split("-")[1]) < VAL_SHARDS else train).extend(seqs)
    return train, val


def draft_vocab(seqs: list[dict], size: int, vocab: int, always: list[int]) -> tuple[torch.Tensor, float]:
    """The `size` most frequent tokens of the target's answers (ascending ids; `always` included) and the
    share of answer tokens they cover."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for s in seqs:
        counts += torch.bincount(s["ids"][s["start"]:], minlength=vocab)
    ranked = counts.clone()
    ranked[always] = counts.sum() + 1  # end-of-turn tokens: always draftable
    top = ranked.topk(size).indices
    return top.sort().values, float(counts[top].sum() / counts.sum())


def make_batch(seqs: list[dict], embed: torch.Tensor, noise: float, gen: torch.Generator) -> dict:
    """Head positions i = 0..L-3 of each sequence: input (embedding of token i+1, feature i), target feature i+1."""
    t = max(len(s["ids"]) - 2 for s in seqs)
    b, d = len(seqs), embed.shape[1]
    emb, feat_in, feat_out = torch.zeros(b, t, d), torch.zeros(b, t, d), torch.zeros(b, t, d)
    next_ids, mask = torch.full((b, t), -1), torch.zeros(b, t, dtype=torch.bool)
    for row, s in enumerate(seqs):
        n = len(s["ids"]) - 2
        emb[row, :n] = embed[s["ids"][1:n + 1]]
        feat_in[row, :n] = s["feats"][:n].float()
        feat_out[row, :n] = s["feats"][1:n + 1].float()
        next_ids[row, :n] = s["ids"][2:n + 2]
        mask[row, max(0, s["start"] - 2):n] = True  # predicted features of the answer (and its first token's)
    if noise:
        feat_in = feat_in + (torch.rand(feat_in.shape, generator=gen) - 0.5) * 2 * noise
    return {"emb": emb, "feat_in": feat_in, "feat_out": feat_out, "next_ids": next_ids, "mask": mask}


def head_losses(head, batch: dict, lm_rows: torch.Tensor, unroll: int, cls_weight: float,
                pad_fraction: float = 1.0) -> tuple[torch.Tensor, dict]:
    """EAGLE's loss (SmoothL1 on features + cls_weight x soft cross-entropy over the draft vocab), for step 1
    and, with unroll=2, for a second step fed the head's own step-1 prediction at the newest position (the
    others keep their true features, as at draft depth 2; "training-time test", Li et al. 2025, EAGLE-3).
    `pad_fraction` < 1: FSPAD's partial alignment, the feature loss on the first dimensions only
    (`vloss` reports it on all of them, so runs with and without it read alike)."""
    emb, feat_out, mask, next_ids = batch["emb"], batch["feat_out"], batch["mask"], batch["next_ids"]
    t, d = emb.shape[1], emb.shape[2]
    aligned = max(1, round(d * pad_fraction))
    positions = torch.arange(t)
    target_logp = torch.log_softmax(feat_out @ lm_rows.T, -1)  # (B, T, K)
    pred, kv = head(emb, batch["feat_in"], positions)
    total, stats = 0.0, {}
    for step in range(1, unroll + 1):
        if step == 2:  # position p is fed the step-1 prediction of feature p; it sees true keys j < p and itself
            feat2 = torch.cat([torch.zeros_like(pred[:, :1]), pred[:, :-1]], 1)
            m2 = torch.cat([torch.ones(t, t, dtype=torch.bool).tril(-1), torch.eye(t, dtype=torch.bool)], 1)
            pred, _ = head(emb, feat2, positions, kv, m2)
            mask = mask & (positions >= 1)
        logits = pred @ lm_rows.T  # (B, T, K)
        vloss = F.smooth_l1_loss(pred[mask], feat_out[mask])
        align = vloss if aligned == d else F.smooth_l1_loss(pred[mask][:, :aligned], feat_out[mask][:, :aligned])
        ploss = -(target_logp.exp() * torch.log_softmax(logits, -1)).sum(-1)[mask].mean()
        total = total + align + cls_weight * ploss
        hit = (batch["vocab_ids"][logits.argmax(-1)] == next_ids)[mask & (next_ids >= 0)]
        stats |= {f"vloss{step}": vloss.item(), f"ploss{step}": ploss.item(), f"acc{step}": hit.float().mean().item()}
    return total, stats


@torch.no_grad()
def evaluate(head, seqs, embed, lm_rows, vocab_ids, unroll: int) -> dict:
    head.eval()
    sums, count = {}, 0
    for i in range(0, len(seqs), 8):
        batch = make_batch(seqs[i:i + 8], embed, 0.0, None) | {"vocab_ids": vocab_ids}
        _, stats = head_losses(head, batch, lm_rows, unroll, 0.1)
        for k, v in stats.items():
            sums[k] = sums.get(k, 0.0) + v
        count += 1
    head.train()
    return {k: round(v / count, 4) for k, v in sums.items()}


def init_from_target(head, model) -> None:
    """Start the decoder layer from the target's last layer (same shapes), fc as [0 | identity] + noise."""
    layer = model.model.layers[-1]
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(head, name).weight.copy_(getattr(layer.self_attn, name).weight)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(head, name).weight.copy_(getattr(layer.mlp, name).weight)
        head.norm.copy_(layer.post_attention_layernorm.weight)
        if head.sample is not None:  # FSPAD's sampled input: no identity to start from
            return
        d = head.config.hidden_size
        head.fc.weight.normal_(0, 0.02)
        head.fc.weight[:, d:] += torch.eye(d)
        head.fc.bias.zero_()


def train(args) -> None:
    from decoding.speculative.eagle import EagleHead, HeadConfig, load_head

    work = args.work
    loaded = load_target()
    model = loaded.model.requires_grad_(False)
    embed = model.get_input_embeddings().weight.detach()
    train_seqs, val_seqs = load_shards(work, args.max_shards)
    ckpt_path, best_path = work / "ckpt.pt", work / "best.pt"
    state = torch.load(ckpt_path) if args.resume and ckpt_path.exists() else None
    start = load_head(args.from_head) if args.from_head and not state else None
    if state:
        vocab_ids, coverage = state["vocab_ids"], state["coverage"]
    elif start is not None:  # an exported head's draft vocabulary, and what it covers of this data
        vocab_ids = start.vocab_ids.clone()
        counts = torch.zeros(embed.shape[0], dtype=torch.long)
        for s in train_seqs:
            counts += torch.bincount(s["ids"][s["start"]:], minlength=embed.shape[0])
        coverage = float(counts[vocab_ids].sum() / counts.sum())
    else:
        stops = sorted(loaded.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))
        vocab_ids, coverage = draft_vocab(train_seqs, args.draft_vocab, embed.shape[0], stops)
    channels = (state.get("fspad_channels", 0) if state else start.config.fspad_channels if start is not None
                else args.fspad_channels if args.fspad else 0)
    pad_fraction = args.pad_fraction if channels else 1.0
    head = EagleHead(HeadConfig.like(model.config, len(vocab_ids), TARGET, channels))
    head.vocab_ids.copy_(vocab_ids)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    step, best, seen = 0, -1.0, 0
    if state:
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        step, best, seen = state["step"], state["best"], state["seen"]
        for group in opt.param_groups:
            group["lr"] = args.lr
    elif start is not None:  # its weights and its count of steps and tokens seen; a fresh optimizer
        head.load_state_dict(start.state_dict())
        done = json.loads((args.from_head / "training.json").read_text())
        step, seen = done["step"], done["answer_tokens_seen"]
    elif args.init == "target":
        init_from_target(head, model)
    lm_rows = model.get_output_embeddings().weight.detach()[vocab_ids]  # (K, D)
    tokens = sum(len(s["ids"]) - s["start"] for s in train_seqs)
    fspad = f"; FSPAD: {channels} sampling channels, alignment on {pad_fraction:.0%} of the feature" if channels else ""
    log(work, f"train: {len(train_seqs)} train / {len(val_seqs)} val answers, {tokens} answer tokens; draft vocab "
              f"{len(vocab_ids)} covers {coverage:.2%} of answer tokens; step {step}; resume={bool(state)}{fspad}")
    warm_from = step if start is not None else 0  # a fresh optimizer warms up again
    gen = torch.Generator().manual_seed(args.seed + step)
    t_end, last_save = time.time() + 60 * args.minutes, time.time()
    order: list[int] = []
    while time.time() < t_end and not (args.max_steps and step >= args.max_steps):
        if not order:
            order = torch.randperm(len(train_seqs), generator=gen).tolist()
        picked, order = order[:args.batch], order[args.batch:]
        batch = make_batch([train_seqs[i] for i in picked], embed, args.noise, gen) | {"vocab_ids": vocab_ids}
        warm = min(1.0, (step - warm_from + 1) / args.warmup)
        for group in opt.param_groups:
            group["lr"] = args.lr * warm
        loss, stats = head_losses(head, batch, lm_rows, args.unroll, args.cls_weight, pad_fraction)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 0.5)
        opt.step()
        step, seen = step + 1, seen + int(batch["mask"].sum())
        if step % 10 == 0:
            log(work, f"step {step} seen {seen} " + " ".join(f"{k} {v:.4f}" for k, v in stats.items()))
        done = time.time() >= t_end or (args.max_steps and step >= args.max_steps)
        if time.time() - last_save > 60 * args.save_minutes or done:
            val = evaluate(head, val_seqs, embed, lm_rows, vocab_ids, args.unroll)
            score = val["acc1"] + val.get("acc2", 0.0)
            if score > best:
                best = score
                torch.save({"head": head.state_dict(), "step": step, "val": val, "seen": seen}, best_path)
            torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "best": best, "seen": seen,
                        "vocab_ids": vocab_ids, "coverage": coverage, "fspad_channels": channels,
                        "shards": args.max_shards}, work / "ckpt.tmp")
            (work / "ckpt.tmp").replace(ckpt_path)
            log(work, f"eval step {step}: val {json.dumps(val)} (best {best:.4f}); checkpoint saved")
            last_save = time.time()


def export(args) -> None:
    from decoding.speculative.eagle import EagleHead, HeadConfig, save_head

    state, best = torch.load(args.work / "ckpt.pt"), torch.load(args.work / "best.pt")
    loaded = load_target()
    channels = state.get("fspad_channels", 0)
    head = EagleHead(HeadConfig.like(loaded.model.config, len(state["vocab_ids"]), TARGET, channels))
    head.load_state_dict(best["head"])
    save_head(head, args.out)
    shards = len(list(args.work.glob("shard-*.pt")))
    export_notes(args.out, args.work, {"step": best["step"], "answer_tokens_seen": best["seen"], "val": best["val"],
                                       "draft_vocab_coverage": state["coverage"],
                                       "shards": min(state.get("shards") or shards, shards), "fspad_channels": channels})


# ---------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.training.eagle", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("data", help="generate the target's greedy answers and features (resumable)")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--minutes", type=float, default=35)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p = sub.add_parser("train", help="train the head on the generated data (checkpoints to --work)")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--resume", action="store_true", help="continue from --work/ckpt.pt")
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--noise", type=float, default=0.1, help="uniform noise half-width on input features (EAGLE)")
    p.add_argument("--unroll", type=int, default=2, choices=(1, 2), help="2 also trains on its own step-1 output")
    p.add_argument("--cls-weight", type=float, default=0.1, help="weight of the token cross-entropy")
    p.add_argument("--draft-vocab", type=int, default=8192)
    p.add_argument("--init", choices=("target", "random"), default="random")
    p.add_argument("--from-head", type=Path, default=None,
                   help="continue training an exported head (e.g. assets/smollm2-eagle-head): its weights, draft "
                        "vocabulary and step count, a fresh optimizer (warm-up again), on --work's data")
    p.add_argument("--save-minutes", type=float, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-shards", type=int, default=0, help="train on the first N shards only (0: all)")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps in all (0: only --minutes)")
    p.add_argument("--fspad", action="store_true",
                   help="FSPAD (Gui et al. 2024): feature sampling in the head's input, partial alignment in the loss")
    p.add_argument("--fspad-channels", type=int, default=4, help="with --fspad: sampling channels C (input C x D)")
    p.add_argument("--pad-fraction", type=float, default=0.5,
                   help="with --fspad: share of the feature's dimensions the feature loss aligns")
    p = sub.add_parser("export", help="write the best head (float16), its config and the log")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=Path("assets/smollm2-eagle-head"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    if args.cmd == "data":
        make_data(args.work, args.minutes, args.batch, args.max_new_tokens)
    elif args.cmd == "train":
        train(args)
    else:
        export(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
