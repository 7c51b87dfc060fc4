"""Continue training the shipped `tiny-ar` with LayerSkip's early-exit loss, shipped as `tiny-ar-layerskip`.

Follows Elhoushi et al. 2024, "LayerSkip: Enabling Early Exit Inference and Self-Speculative
Decoding": every layer l's hidden state goes through the model's own final norm and LM head (the
head is shared, no new parameters) and is scored against the next token; the loss is
    sum_l  e~_l * CE(head(norm(h_l)), next token),   e~_l = C(t, l) e_l / sum_i C(t, i) e_i
with a scale rising with depth (`sum_l`, the form of the released LayerSkip recipe:
e_l = e_scale * (1 + 2 + ... + l) for l < N, e_N = 1 + 2 + ... + N for the last layer), a
rotational curriculum C(t, l) (`rotation` R: at step t only the exits with (l + t) % R == 0 are on,
the last layer always; R = 1 turns every exit on at every step) and optional layer dropout with a
rate rising exponentially with depth, p_l = p_max * (exp((l - 1) ln 2 / (N - 1)) - 1) (0 for the first
layer, p_max for the last; per sequence). The exit head is exactly the one
`decoding.speculative.drafters.EarlyExitDrafter` drafts with, so what is trained here is what drafts.

Glossary
    exit     exit layer l in 1..N: logits = LM head(final norm(hidden state after layer l));
             exit N is the full model.
    scale    e~_l, the weight of exit l's cross-entropy in the loss (they sum to 1).
    agree    top-1 agreement: how often exit l's argmax equals the full model's argmax (what a
             greedy self-speculative draft from layer l needs to be accepted).

CLI (heavy work only under `main()`; the budget counts CPU time of this process, one thread):
    python -m decoding.training.train corpus --out /tmp/layerskip/data   (needs the `bible` program)
    python -m decoding.training.layerskip --data /tmp/layerskip/data/train.txt --out /tmp/layerskip/run --minutes 40
        [--resume]  (continue from OUT/checkpoint.pt: weights, optimizer, data order, CPU time spent)
    python -m decoding.training.layerskip --data ... --out ... --eval-only --base assets/tiny-ar-layerskip
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from decoding.training.checkpoint import load_checkpoint, run_log, save_checkpoint
from decoding.training.train import encode_stream, load_trained, read_documents, save_fp16, window_batches

ASSETS = Path(__file__).resolve().parents[2] / "assets"
SCALES = ("sum_l", "l", "uniform")


@dataclass(frozen=True)
class LayerSkipConfig:
    minutes: float = 40.0  # CPU-time budget of the whole run (resumes included); the cosine decays over it
    batch_size: int = 32  # windows per step
    seq_len: int = 128  # tokens per window
    lr: float = 5e-4  # peak AdamW learning rate (tiny-ar ended its own schedule at 2e-4)
    min_lr_ratio: float = 0.1  # final lr = lr * this
    warmup_steps: int = 20  # linear warmup
    weight_decay: float = 0.1  # AdamW decoupled decay on matrices
    e_scale: float = 1.0  # weight of the early exits relative to the last layer (LayerSkip's e_scale)
    scale: str = "sum_l"  # how e_l rises with depth: "sum_l" (1+..+l), "l" or "uniform"
    rotation: int = 1  # rotational curriculum: exits on every R-th step each (1 = all exits every step)
    layer_dropout: float = 0.0  # p_max: dropout rate of the last layer (0 = off); lower layers less
    seed: int = 0  # data order and layer dropout
    threads: int = 1  # torch CPU threads
    eval_minutes: float = 5.0  # evaluate + checkpoint every this many CPU minutes
    log_every: int = 10  # steps between train-loss lines
    max_steps: int = 0  # stop after this many steps too (0 = only the budget)


# ---------------------------------------------------------------- the early-exit loss


def exit_scales(num_layers: int, e_scale: float = 1.0, scale: str = "sum_l") -> torch.Tensor:
    """Unnormalised e_l for exits l = 1..N (index l-1). # (N,)"""
    if scale not in SCALES:
        raise ValueError(f"`scale` must be one of {SCALES}, got {scale!r}")
    depth = torch.arange(1, num_layers + 1, dtype=torch.float)
    e = {"sum_l": torch.cumsum(depth, 0), "l": depth, "uniform": torch.ones(num_layers)}[scale]
    e[:-1] *= e_scale
    return e


def curriculum(num_layers: int, step: int, rotation: int) -> torch.Tensor:
    """C(t, l) for exits l = 1..N: rotational, the last layer always on. # (N,) float 0/1"""
    if rotation < 1:
        raise ValueError(f"`rotation` must be >= 1, got {rotation}")
    on = torch.tensor([(layer + step) % rotation == 0 for layer in range(1, num_layers + 1)], dtype=torch.float)
    on[-1] = 1.0
    return on


def exit_logits(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """Logits of every exit l = 1..N (the last is the model's own output). N x (B, T, V)"""
    out = model(input_ids=ids, output_hidden_states=True)
    hidden = out.hidden_states  # embeddings, layer 1, ..., layer N (the last already normed)
    head, norm = model.get_output_embeddings(), model.model.norm
    return [head(norm(h)) for h in hidden[1:-1]] + [out.logits]


def early_exit_loss(model, ids: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """sum_l weights[l-1] * CE(exit l, next token) / sum(weights) over windows `ids` (B, T).

    Exits with weight 0 are not computed. Returns (loss, per-exit CE in nats/token; nan where skipped).
    """
    if weights.shape != (model.config.num_hidden_layers,) or weights.sum() <= 0:
        raise ValueError(f"`weights` must be {model.config.num_hidden_layers} non-negative numbers with a positive sum, "
                         f"got {weights.tolist()}")
    out = model(input_ids=ids, output_hidden_states=True)
    head, norm = model.get_output_embeddings(), model.model.norm
    targets = ids[:, 1:].reshape(-1)
    weights = weights / weights.sum()
    loss, per_exit = 0.0, []
    for layer, w in enumerate(weights.tolist(), start=1):
        if w == 0:
            per_exit.append(math.nan)
            continue
        logits = out.logits if layer == len(weights) else head(norm(out.hidden_states[layer]))  # (B, T, V)
        ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets)
        loss = loss + w * ce
        per_exit.append(ce.item())
    return loss, per_exit


def add_layer_dropout(model, p_max: float, generator: torch.Generator) -> list:
    """LayerSkip's layer dropout as forward hooks: in training, each sequence skips layer l
    (its output := its input) with probability p_max * (exp((l-1) ln 2 / (N-1)) - 1). Returns the hooks."""
    layers = model.model.layers[: model.config.num_hidden_layers]
    num_layers = len(layers)
    hooks = []
    for index, layer in enumerate(layers):
        p = p_max * (math.exp(index * math.log(2) / max(num_layers - 1, 1)) - 1)
        if p <= 0:
            continue

        def hook(module, args, output, p=p):
            if not module.training:
                return output
            keep = torch.rand(output.shape[0], generator=generator) >= p  # (B,)
            return torch.where(keep[:, None, None], output, args[0])

        hooks.append(layer.register_forward_hook(hook))
    return hooks


@torch.no_grad()
def exit_metrics(model, val_batches: list) -> dict:
    """Per exit l = 1..N over fixed validation windows: next-token loss (nats/token) and top-1
    agreement with the full model's argmax (the full model agrees with itself: 1.0)."""
    was_training = model.training
    model.eval()
    num_layers = model.config.num_hidden_layers
    loss_sum, agree_sum, count = [0.0] * num_layers, [0.0] * num_layers, 0
    for ids, _ in val_batches:
        logits = exit_logits(model, ids)
        targets = ids[:, 1:].reshape(-1)
        full = logits[-1][:, :-1].argmax(-1).reshape(-1)
        for i, lg in enumerate(logits):
            flat = lg[:, :-1].reshape(-1, lg.shape[-1]).float()
            loss_sum[i] += F.cross_entropy(flat, targets, reduction="sum").item()
            agree_sum[i] += (flat.argmax(-1) == full).sum().item()
        count += targets.numel()
    model.train(was_training)
    return {"val_loss": [round(s / count, 4) for s in loss_sum], "agree": [round(s / count, 4) for s in agree_sum],
            "tokens": count}


def format_metrics(metrics: dict) -> str:
    losses = " ".join(f"L{i}={v:.4f}" for i, v in enumerate(metrics["val_loss"], start=1))
    agree = " ".join(f"L{i}={v:.3f}" for i, v in enumerate(metrics["agree"], start=1))
    return f"val loss {losses} | top-1 agree with full {agree}"


# ---------------------------------------------------------------- training loop


def lr_at(cfg: LayerSkipConfig, step: int, frac: float) -> float:
    """Linear warmup over steps, then cosine decay over the spent fraction of the CPU budget."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    return cfg.lr * warm * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cos)


def make_optimizer(model, cfg: LayerSkipConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def train(model, tokenizer, train_ids: torch.Tensor, val_batches: list, cfg: LayerSkipConfig, out: Path,
          resume: bool = False, log=print, info: dict | None = None) -> dict:
    """Train `model` in place with the early-exit loss; checkpoint to OUT/checkpoint.pt and export
    float16 to OUT at every evaluation and at the end. Returns the summary written to training.json."""
    num_layers = model.config.num_hidden_layers
    e = exit_scales(num_layers, cfg.e_scale, cfg.scale)
    generator = torch.Generator().manual_seed(cfg.seed)
    dropout_generator = torch.Generator().manual_seed(cfg.seed + 1)
    optimizer = make_optimizer(model, cfg)
    step, spent = 0, 0.0  # steps done, CPU seconds spent before this process
    info = dict(info or {})
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "checkpoint.pt"
    generators = {"generator": generator, "dropout_generator": dropout_generator}
    if resume:
        state = load_checkpoint(ckpt_path, model, optimizer, generators)
        step, spent, info = state["step"], state["cpu_seconds"], state["info"]
        log(f"resumed at step {step}, {spent / 60:.1f} CPU minutes spent")
    hooks = add_layer_dropout(model, cfg.layer_dropout, dropout_generator) if cfg.layer_dropout > 0 else []
    info.update(config=asdict(cfg), scales=(e / e.sum()).tolist())
    budget = cfg.minutes * 60
    started, last_eval = time.process_time(), spent
    wall_started = time.time()
    window, window_exits = [], []

    def save(final: bool) -> None:
        info.update(steps=step, tokens=step * cfg.batch_size * cfg.seq_len, cpu_minutes=round(cpu() / 60, 2))
        info["after"] = exit_metrics(model, val_batches)
        log(f"{'final' if final else 'eval'} step {step} cpu {cpu() / 60:.1f}min {format_metrics(info['after'])}")
        save_checkpoint(ckpt_path, model, optimizer, generators, step=step, cpu_seconds=cpu(), info=info)
        save_fp16(model, tokenizer, out, info)

    def cpu() -> float:
        return spent + time.process_time() - started

    model.train()
    while cpu() < budget and not (cfg.max_steps and step >= cfg.max_steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(cfg, step, cpu() / budget)
        offsets = torch.randint(0, len(train_ids) - cfg.seq_len, (cfg.batch_size,), generator=generator)
        ids = torch.stack([train_ids[o : o + cfg.seq_len] for o in offsets.tolist()])  # (B, T)
        loss, per_exit = early_exit_loss(model, ids, e * curriculum(num_layers, step, cfg.rotation))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        window.append(loss.item())
        window_exits.append(per_exit)
        if step % cfg.log_every == 0:
            computed = [[v for v in col if not math.isnan(v)] for col in zip(*window_exits)]
            means = [sum(col) / len(col) if col else math.nan for col in computed]  # nan: an exit weighted 0
            log(f"step {step} cpu {cpu() / 60:.1f}min wall {(time.time() - wall_started) / 60:.1f}min "
                f"lr {optimizer.param_groups[0]['lr']:.2e} loss {sum(window) / len(window):.4f} train CE "
                + " ".join(f"L{i}={v:.3f}" for i, v in enumerate(means, start=1)))
            info["train_ce"] = [round(v, 4) for v in means]
            window, window_exits = [], []
        if cpu() - last_eval >= cfg.eval_minutes * 60:
            save(final=False)
            last_eval = cpu()
    for hook in hooks:
        hook.remove()
    model.eval()
    save(final=True)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.training.layerskip", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True,
                        help="train.txt written by `python -m decoding.training.train corpus` (val.txt beside it)")
    parser.add_argument("--base", default=str(ASSETS / "tiny-ar"), help="the model to continue training")
    parser.add_argument("--out", required=True, help="folder for the checkpoint, the float16 export and train.log")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    parser.add_argument("--eval-only", action="store_true", help="print the per-exit metrics of --base and stop")
    for name, value in asdict(LayerSkipConfig()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    args = parser.parse_args(argv)
    cfg = LayerSkipConfig(**{k: getattr(args, k) for k in asdict(LayerSkipConfig())})
    if cfg.scale not in SCALES:
        raise SystemExit(f"error: `--scale` must be one of {SCALES}, got {cfg.scale!r}")
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model, tokenizer, kind = load_trained(args.base)
    if kind != "ar":
        raise SystemExit(f"error: --base must be a causal model, {args.base} is {kind}")
    val_path = Path(args.data).with_name("val.txt")
    val_batches = window_batches(encode_stream(tokenizer, read_documents(val_path)), cfg.seq_len, cfg.batch_size)
    if args.eval_only:
        print(json.dumps(exit_metrics(model, val_batches)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with run_log(out / "train.log", "a") as log:
        log("cmd " + " ".join(["python -m decoding.training.layerskip", *(argv if argv is not None else sys.argv[1:])]))
        log(repr(cfg))
        train_ids = encode_stream(tokenizer, read_documents(Path(args.data)))
        info = {"base": Path(args.base).name, "params": sum(p.numel() for p in model.parameters())}
        if not args.resume:
            info["before"] = exit_metrics(model, val_batches)
            log(f"base {args.base}: {format_metrics(info['before'])}")
        scales = exit_scales(model.config.num_hidden_layers, cfg.e_scale, cfg.scale)
        log(f"train tokens {len(train_ids)}, val windows {sum(len(ids) for ids, _ in val_batches)} x {cfg.seq_len}, "
            f"exit scales {[round(v, 3) for v in (scales / scales.sum()).tolist()]}")
        train(model, tokenizer, train_ids, val_batches, cfg, out, resume=args.resume, log=log, info=info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
