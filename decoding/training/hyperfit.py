"""Hyperfit the shipped `tiny-ar`: fine-tune it on a small set of its own training texts until the
training loss is near zero, and ship the result as `tiny-ar-hyperfit`.

Follows Carlsson et al. 2024, "The Hyperfitting Phenomenon: Sharpening and Stabilizing LLMs for
Open-Ended Text Generation": a pre-trained model is trained further on a small set of sequences
(the paper: ~2000 sequences, ~20 epochs, until the training loss is near zero). The resulting
model's next-token distributions become very sharp (low entropy), and its greedy text loops less,
although its held-out perplexity gets worse. Scaled down here to minutes on one CPU core:
`--num-seqs` windows of `--seq-len` tokens from tiny-ar's own training split (KJV verses).

Glossary
    window   a run of `seq_len` consecutive tokens of the training stream (verses joined by eos).
    epoch    one pass over every window, in a fresh random order (seeded).

CLI (heavy work only under `main()`):
    python -m decoding.training.train corpus --out /tmp/train/data   (needs the `bible` program)
    python -m decoding.training.hyperfit --data /tmp/train/data/train.txt --out assets/tiny-ar-hyperfit
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from decoding.training.checkpoint import run_log
from decoding.training.train import encode_stream, evaluate, load_trained, read_documents, save_fp16, window_batches

ASSETS = Path(__file__).resolve().parents[2] / "assets"


@dataclass(frozen=True)
class HyperfitConfig:
    num_seqs: int = 192  # training windows (the paper: ~2000)
    seq_len: int = 64  # tokens per window
    epochs: int = 20  # passes over the windows (the paper: 20)
    batch_size: int = 16
    lr: float = 1e-3  # constant after `warmup_steps` (AdamW, no weight decay)
    warmup_steps: int = 10
    seed: int = 0
    threads: int = 1


def pick_windows(stream: torch.Tensor, cfg: HyperfitConfig) -> torch.Tensor:
    """`num_seqs` non-overlapping windows of the stream, chosen with the seed. # (N, seq_len)"""
    num_windows = stream.numel() // cfg.seq_len
    if num_windows < cfg.num_seqs:
        raise ValueError(f"the data holds {num_windows} windows of {cfg.seq_len} tokens, fewer than num_seqs={cfg.num_seqs}")
    chosen = sorted(random.Random(cfg.seed).sample(range(num_windows), cfg.num_seqs))
    return torch.stack([stream[i * cfg.seq_len:(i + 1) * cfg.seq_len] for i in chosen])


def hyperfit(model, windows: torch.Tensor, cfg: HyperfitConfig, log=print) -> list[float]:
    """Train on the windows for `cfg.epochs` epochs; returns the mean training loss of each epoch."""
    torch.manual_seed(cfg.seed)
    order_rng = random.Random(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    step, losses, started = 0, [], time.process_time()
    model.train()
    for epoch in range(cfg.epochs):
        order = list(range(windows.shape[0]))
        order_rng.shuffle(order)
        total = 0.0
        for start in range(0, len(order), cfg.batch_size):
            ids = windows[order[start:start + cfg.batch_size]]  # (B, T)
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps)
            logits = model(input_ids=ids).logits  # (B, T, V)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.item() * ids.shape[0]
            step += 1
        losses.append(total / windows.shape[0])
        log(f"epoch {epoch + 1} steps {step} train {losses[-1]:.4f} cpu {time.process_time() - started:.0f}s")
    model.eval()
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.training.hyperfit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="train.txt written by `python -m decoding.training.train corpus`")
    parser.add_argument("--base", default=str(ASSETS / "tiny-ar"), help="the model to hyperfit")
    parser.add_argument("--out", required=True, help="folder to write the hyperfitted model to")
    for name, value in asdict(HyperfitConfig()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    args = parser.parse_args(argv)
    cfg = HyperfitConfig(**{k: getattr(args, k) for k in asdict(HyperfitConfig())})
    torch.set_num_threads(cfg.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with run_log(out / "train.log", "w") as log:
        log("cmd " + " ".join(["python -m decoding.training.hyperfit", *(argv if argv is not None else sys.argv[1:])]))
        log(repr(cfg))
        model, tokenizer, kind = load_trained(args.base)
        if kind != "ar":
            raise ValueError(f"--base must be a causal model, {args.base} is {kind}")
        stream = encode_stream(tokenizer, read_documents(Path(args.data)))
        windows = pick_windows(stream, cfg)
        val_path = Path(args.data).with_name("val.txt")
        val_batches = window_batches(encode_stream(tokenizer, read_documents(val_path)), 128) if val_path.exists() else []
        val_before = evaluate(model, "ar", val_batches, mask_id=1) if val_batches else None
        log(f"windows {windows.shape[0]} x {cfg.seq_len} tokens; held-out loss before {val_before}")
        started = time.process_time()
        losses = hyperfit(model, windows, cfg, log)
        val_after = evaluate(model, "ar", val_batches, mask_id=1) if val_batches else None
        log(f"final train {losses[-1]:.4f} held-out loss before {val_before} after {val_after}")
        info = {"config": asdict(cfg), "base": "tiny-ar", "epoch_losses": losses, "train_loss": losses[-1],
                "val_loss_before": val_before, "val_loss_after": val_after,
                "val_ppl_before": math.exp(val_before) if val_before else None,
                "val_ppl_after": math.exp(val_after) if val_after else None,
                "cpu_minutes": (time.process_time() - started) / 60}
        save_fp16(model, tokenizer, out, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
