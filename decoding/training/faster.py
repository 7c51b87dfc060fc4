"""Train `tiny-ar` for the three drafter-free speed-ups of issue 29: FTP, LUD and HAMburger.

One CPU-budgeted, checkpointed loop (`train`) and one objective per method:
    ftp        a token router in front of every block of the frozen `tiny-ar` ("A Fine-grained
               Token-wise Pruner for Large Language Models via Token Routing", 2024): the routed
               model's next-token distribution is kept close to the full model's (KL), while dual
               ascent on a multiplier holds the fraction of blocks that run at `--density`.
    lud        Lexical Unit Decoding (Sun et al. 2024, "Decoding at the Speed of Thought: Harnessing
               Parallel Decoding of Lexical Units for LLMs"): the whole model is fine-tuned so that
               `--span` mask tokens appended after a prefix predict the tokens that follow the next
               one, as far as they form a lexical unit, and predict the end-of-unit label beyond it.
               A unit is what the original model already predicts confidently: after anchor a the
               tokens a+2, a+3, ... as long as each has probability >= `--unit-alpha` under `tiny-ar`
               given the true prefix (a unit by the model's own confidence, as the paper defines it).
               Plain next-token loss on every real position keeps the model a language model.
    hamburger  HAMburger ("Accelerating LLM Inference via Token Smashing", 2025): the text is cut
               into slots of 1..`--group` tokens, each slot smashed into ONE input embedding (and one
               cache entry) by a compositional embedder; from the model's output at a slot a
               micro-step decoder emits the next slot's tokens one by one (the first through the
               model's own LM head). Cuts are random, so every slot size is trained.

Each run keeps OUT/checkpoint.pt (weights, optimizer, data order, CPU time; `--resume` continues),
OUT/train.log and, at every evaluation and at the end, the shipped files (float16) with
training.json (the held-out figures).

CLI (heavy work only under `main()`; the budget counts CPU time of this process, one thread):
    python -m decoding.training.train corpus --out /tmp/faster/data   (needs the `bible` program)
    python -m decoding.training.faster ftp --data /tmp/faster/data/train.txt --out /tmp/faster/ftp --minutes 15
    python -m decoding.training.faster lud --data ... --out /tmp/faster/lud --minutes 30
    python -m decoding.training.faster hamburger --data ... --out /tmp/faster/hamburger --minutes 30
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from decoding.token.hamburger_model import HamburgerConfig, HamburgerParts, save_parts
from decoding.training.checkpoint import load_checkpoint, run_log, save_checkpoint
from decoding.training.train import encode_stream, load_trained, read_documents, save_fp16, window_batches

ASSETS = Path(__file__).resolve().parents[2] / "assets"
METHODS = ("ftp", "lud", "hamburger")


@dataclass(frozen=True)
class FasterConfig:
    minutes: float = 30.0  # CPU-time budget of the whole run (resumes included); the cosine decays over it
    batch_size: int = 16  # windows per step
    seq_len: int = 128  # tokens per window
    lr: float = 3e-4  # peak AdamW learning rate
    min_lr_ratio: float = 0.1  # final lr = lr * this
    warmup_steps: int = 20  # linear warmup
    weight_decay: float = 0.1  # AdamW decoupled decay on matrices
    seed: int = 0  # data order
    threads: int = 1  # torch CPU threads
    eval_minutes: float = 5.0  # evaluate + checkpoint every this many CPU minutes
    log_every: int = 10  # steps between train-loss lines
    max_steps: int = 0  # stop after this many steps too (0 = only the budget)
    # ftp
    density: float = 0.75  # target fraction of (token, block) pairs that run
    dual_lr: float = 0.05  # step of the density multiplier's dual ascent
    # lud
    span: int = 4  # mask tokens after the prefix: extra tokens one step can emit
    anchors: int = 16  # prefixes per window that get a span of masks
    unit_alpha: float = 0.5  # a token belongs to the unit when tiny-ar gives it at least this probability
    # hamburger
    group: int = 4  # most tokens smashed into one slot


# ---------------------------------------------------------------- FTP


class FtpObjective(nn.Module):
    """Router in front of the frozen model's blocks; loss = KL(full || routed) + lambda (density - target)."""

    def __init__(self, base, cfg: FasterConfig):
        super().__init__()
        from decoding.token.ftp_router import RouterConfig, TokenRouter

        self.base = base.requires_grad_(False).eval()
        self.router = TokenRouter(RouterConfig(base.config.num_hidden_layers, base.config.hidden_size,
                                               density=cfg.density))
        self.cfg = cfg
        self.register_buffer("multiplier", torch.zeros(()))

    def trainable(self) -> list[nn.Parameter]:
        return list(self.router.parameters())

    def routed_logits(self, ids: torch.Tensor, threshold: float, straight_through: bool = False):
        from decoding.token.ftp_router import gate_hooks

        record: list = []
        hooks = gate_hooks(self.base, self.router, threshold, record, straight_through)
        try:
            logits = self.base(input_ids=ids).logits
        finally:
            for hook in hooks:
                hook.remove()
        return logits, record

    def loss(self, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
        with torch.no_grad():
            full = F.log_softmax(self.base(input_ids=ids).logits.float(), -1)
        logits, record = self.routed_logits(ids, self.router.config.threshold, straight_through=True)
        kl = (full.exp() * (full - F.log_softmax(logits.float(), -1))).sum(-1).mean()
        soft = torch.stack([score.mean() for _, _, score in record]).mean()
        hard = torch.stack([ran.mean() for _, ran, _ in record]).mean().item()
        loss = kl + self.multiplier.item() * (soft - self.cfg.density)
        with torch.no_grad():  # dual ascent: raise the price of running blocks while too many run
            self.multiplier.add_(self.cfg.dual_lr * (hard - self.cfg.density)).clamp_(min=0.0)
        return loss, {"kl": kl.item(), "density": hard, "multiplier": self.multiplier.item()}

    @torch.no_grad()
    def metrics(self, val_batches: list) -> dict:
        """Held-out next-token loss and top-1 agreement with the full model, per router threshold."""
        out = {}
        for threshold in (0.0, 0.3, 0.5, 0.7):
            loss_sum, agree_sum, layer_sum, count = 0.0, 0.0, None, 0
            for ids, _ in val_batches:
                full = self.base(input_ids=ids).logits[:, :-1]
                logits, record = self.routed_logits(ids, threshold)
                logits, targets = logits[:, :-1].float(), ids[:, 1:]
                loss_sum += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                            reduction="sum").item()
                agree_sum += (logits.argmax(-1) == full.argmax(-1)).sum().item()
                ran = torch.stack([r[:, :-1].sum() for _, r, _ in record])  # (L,)
                layer_sum = ran if layer_sum is None else layer_sum + ran
                count += targets.numel()
            out[str(threshold)] = {"val_loss": round(loss_sum / count, 4), "agree": round(agree_sum / count, 4),
                                   "density": round(layer_sum.sum().item() / count / len(layer_sum), 4),
                                   "density_per_block": [round(v / count, 4) for v in layer_sum.tolist()]}
        return out

    def export(self, out: Path, tokenizer, info: dict) -> None:
        from decoding.token.ftp_router import save_router

        save_router(self.router, out)
        (out / "training.json").write_text(json.dumps(info, indent=2) + "\n")


# ---------------------------------------------------------------- LUD


def lud_layout(seq_len: int, anchors: list[int], span: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mask and positions of a window followed by `span` masks per anchor.

    Real token t sees real tokens <= t. Mask j (1..span) of anchor a sits at position a + j and sees
    real tokens <= a and the masks 1..j of its own anchor. Returns (mask (Q, Q) bool True = may attend,
    positions (Q,)), Q = seq_len + len(anchors) * span."""
    q = seq_len + len(anchors) * span
    mask = torch.zeros(q, q, dtype=torch.bool)
    mask[:seq_len, :seq_len] = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    positions = torch.cat([torch.arange(seq_len), torch.zeros(q - seq_len, dtype=torch.long)])
    for g, a in enumerate(anchors):
        start = seq_len + g * span
        mask[start:start + span, : a + 1] = True
        mask[start:start + span, start:start + span] = torch.ones(span, span, dtype=torch.bool).tril()
        positions[start:start + span] = torch.arange(a + 1, a + 1 + span)
    return mask, positions


def unit_targets(ids: torch.Tensor, confident: torch.Tensor, anchors: list[int], span: int, end_id: int) -> torch.Tensor:
    """Targets of the masks of one window: mask j of anchor a predicts ids[a + 1 + j] while tokens
    a + 2 .. a + 1 + j are all confident (the lexical unit), `end_id` at the first mask past the unit
    and -100 (ignored) after it. `confident[t]`: token t is confidently predicted from ids[< t]. # (A * span,)"""
    targets = torch.full((len(anchors) * span,), -100, dtype=torch.long)
    for g, a in enumerate(anchors):
        for j in range(1, span + 1):
            t = a + 1 + j
            if t < len(ids) and confident[t]:
                targets[g * span + j - 1] = ids[t]
            else:
                targets[g * span + j - 1] = end_id if t < len(ids) else -100
                break
    return targets


class LudObjective(nn.Module):
    """The whole model learns next-token prediction and, at mask positions, the rest of the unit."""

    def __init__(self, base, cfg: FasterConfig, mask_id: int):
        super().__init__()
        self.model = base
        self.reference = copy.deepcopy(base).requires_grad_(False).eval()  # tiny-ar, for the unit labels
        self.cfg, self.mask_id = cfg, mask_id
        self.generator = torch.Generator().manual_seed(cfg.seed + 7)

    def trainable(self) -> list[nn.Parameter]:
        return list(self.model.parameters())

    def batch(self, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t = ids.shape
        span = self.cfg.span
        with torch.no_grad():
            probs = F.softmax(self.reference(input_ids=ids).logits.float(), -1)
        confident = torch.zeros(b, t, dtype=torch.bool)
        confident[:, 1:] = probs[:, :-1].gather(-1, ids[:, 1:, None])[..., 0] >= self.cfg.unit_alpha
        inputs, masks, positions, targets = [], [], [], []
        for row in range(b):
            anchors = sorted(torch.randperm(t - 2, generator=self.generator)[: self.cfg.anchors].tolist())
            mask, pos = lud_layout(t, anchors, span)
            inputs.append(torch.cat([ids[row], torch.full((len(anchors) * span,), self.mask_id)]))
            masks.append(mask)
            positions.append(pos)
            real = torch.cat([ids[row, 1:], torch.tensor([-100])])
            targets.append(torch.cat([real, unit_targets(ids[row], confident[row], anchors, span, self.mask_id)]))
        return torch.stack(inputs), torch.stack(masks)[:, None], torch.stack(positions), torch.stack(targets)

    def loss(self, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
        inputs, mask, positions, targets = self.batch(ids)
        logits = self.model(input_ids=inputs, attention_mask=mask, position_ids=positions).logits.float()
        t = ids.shape[1]
        real = F.cross_entropy(logits[:, :t].reshape(-1, logits.shape[-1]), targets[:, :t].reshape(-1))
        span = F.cross_entropy(logits[:, t:].reshape(-1, logits.shape[-1]), targets[:, t:].reshape(-1))
        unit = (targets[:, t:] >= 0) & (targets[:, t:] != self.mask_id)
        return real + span, {"ce": real.item(), "span_ce": span.item(),
                             "unit_tokens_per_anchor": unit.sum().item() / (ids.shape[0] * self.cfg.anchors)}

    @torch.no_grad()
    def metrics(self, val_batches: list) -> dict:
        """Held-out next-token loss of the model and of tiny-ar, top-1 agreement with tiny-ar, and at
        the masks: how often the unit is predicted exactly up to each length."""
        self.model.eval()
        loss_sum = ref_sum = agree_sum = count = 0.0
        span_right = span_total = 0.0
        for ids, _ in val_batches:
            logits = self.model(input_ids=ids).logits[:, :-1].float()
            ref = self.reference(input_ids=ids).logits[:, :-1].float()
            targets = ids[:, 1:].reshape(-1)
            loss_sum += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, reduction="sum").item()
            ref_sum += F.cross_entropy(ref.reshape(-1, ref.shape[-1]), targets, reduction="sum").item()
            agree_sum += (logits.argmax(-1) == ref.argmax(-1)).sum().item()
            count += targets.numel()
            inputs, mask, positions, span_targets = self.batch(ids)
            out = self.model(input_ids=inputs, attention_mask=mask, position_ids=positions).logits[:, ids.shape[1]:]
            wanted = span_targets[:, ids.shape[1]:]
            scored = wanted >= 0
            span_right += ((out.argmax(-1) == wanted) & scored).sum().item()
            span_total += scored.sum().item()
        self.model.train()
        return {"val_loss": round(loss_sum / count, 4), "val_loss_tiny_ar": round(ref_sum / count, 4),
                "agree_tiny_ar": round(agree_sum / count, 4), "mask_accuracy": round(span_right / span_total, 4)}

    def export(self, out: Path, tokenizer, info: dict) -> None:
        self.model.config.lud = {"span": self.cfg.span, "mask_id": self.mask_id, "unit_alpha": self.cfg.unit_alpha}
        save_fp16(self.model, tokenizer, out, info)


# ---------------------------------------------------------------- HAMburger


def random_slots(length: int, group: int, rng: random.Random) -> list[int]:
    """Slot sizes, each uniform in 1..group, covering `length` tokens (the last one cut to fit)."""
    sizes, total = [], 0
    while total < length:
        size = min(rng.randint(1, group), length - total)
        sizes.append(size)
        total += size
    return sizes


def slot_batch(ids: torch.Tensor, sizes: list[list[int]], group: int):
    """Left-aligned slot tokens (B, S, G) (pad 0), sizes (B, S) (0 = padding slot), the index of each
    slot's last token (B, S) (-1 for padding) and the slot mask (B, S)."""
    b = ids.shape[0]
    s = max(len(row) for row in sizes)
    tokens = torch.zeros(b, s, group, dtype=torch.long)
    size_t = torch.zeros(b, s, dtype=torch.long)
    last = torch.full((b, s), -1, dtype=torch.long)
    for row, row_sizes in enumerate(sizes):
        start = 0
        for k, n in enumerate(row_sizes):
            tokens[row, k, :n] = ids[row, start:start + n]
            size_t[row, k], last[row, k] = n, start + n - 1
            start += n
    return tokens, size_t, last, size_t > 0


class HamburgerObjective(nn.Module):
    """Fine-tune the model with the smasher and the micro decoder over random slot cuts: from the
    model's output at every slot, micro-steps 1..G predict the G tokens that follow it (teacher-forced)."""

    def __init__(self, base, cfg: FasterConfig):
        super().__init__()
        self.model = base
        self.reference = copy.deepcopy(base).requires_grad_(False).eval()
        self.parts = HamburgerParts(HamburgerConfig(base.config.hidden_size, cfg.group, base.config.rms_norm_eps))
        self.cfg = cfg
        self.rng = random.Random(cfg.seed + 11)

    def trainable(self) -> list[nn.Parameter]:
        return list(self.model.parameters()) + list(self.parts.parameters())

    def step_logits(self, ids: torch.Tensor, sizes: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of micro-steps 1..G after every slot and their targets (-100 = none). (B, S, G, V), (B, S, G)"""
        g = self.cfg.group
        tokens, size_t, last, valid = slot_batch(ids, sizes, g)
        embed = self.model.get_input_embeddings()
        slots = self.parts.smasher(embed(tokens), size_t.clamp(min=1))  # (B, S, D)
        hidden = self.model.model(inputs_embeds=slots, attention_mask=valid.long(),
                                  position_ids=last.clamp(min=0)).last_hidden_state  # (B, S, D) normed
        head = self.model.get_output_embeddings()
        b, s = last.shape
        t = ids.shape[1]
        offsets = last[..., None] + torch.arange(1, g + 1)  # (B, S, G) positions of the targets
        targets = torch.where((offsets < t) & valid[..., None], ids.gather(1, offsets.clamp(max=t - 1).view(b, -1)).view(b, s, g),
                              torch.full_like(offsets, -100))
        logits = [head(hidden)]
        state = hidden.reshape(b * s, -1)
        for j in range(1, g):
            prev = targets[..., j - 1].clamp(min=0).reshape(-1)
            state = self.parts.micro.step(embed(prev), state)
            logits.append(head(self.parts.micro.features(state).to(hidden.dtype)).view(b, s, -1))
        return torch.stack(logits, 2), targets

    def loss(self, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
        sizes = [random_slots(ids.shape[1], self.cfg.group, self.rng) for _ in range(ids.shape[0])]
        logits, targets = self.step_logits(ids, sizes)
        per_step = [F.cross_entropy(logits[:, :, j].reshape(-1, logits.shape[-1]).float(), targets[:, :, j].reshape(-1))
                    for j in range(self.cfg.group)]
        loss = sum(per_step) / len(per_step)
        return loss, {f"ce{j + 1}": v.item() for j, v in enumerate(per_step)} | {"slots_per_window": len(sizes[0])}

    @torch.no_grad()
    def metrics(self, val_batches: list) -> dict:
        """Held-out: next-token loss with one-token slots (the model as a plain LM) and tiny-ar's, top-1
        agreement with tiny-ar there; with random slots, each micro-step's loss and accuracy."""
        self.model.eval()
        rng = random.Random(1234)
        plain = ref = agree = count = 0.0
        step_loss, step_right, step_count = [0.0] * self.cfg.group, [0.0] * self.cfg.group, [0.0] * self.cfg.group
        for ids, _ in val_batches:
            logits = self.model(input_ids=ids).logits[:, :-1].float()
            ref_logits = self.reference(input_ids=ids).logits[:, :-1].float()
            targets = ids[:, 1:].reshape(-1)
            plain += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, reduction="sum").item()
            ref += F.cross_entropy(ref_logits.reshape(-1, ref_logits.shape[-1]), targets, reduction="sum").item()
            agree += (logits.argmax(-1) == ref_logits.argmax(-1)).sum().item()
            count += targets.numel()
            sizes = [random_slots(ids.shape[1], self.cfg.group, rng) for _ in range(ids.shape[0])]
            step, wanted = self.step_logits(ids, sizes)
            for j in range(self.cfg.group):
                lg, tg = step[:, :, j].reshape(-1, step.shape[-1]).float(), wanted[:, :, j].reshape(-1)
                scored = tg >= 0
                step_loss[j] += F.cross_entropy(lg, tg, reduction="sum").item()
                step_right[j] += ((lg.argmax(-1) == tg) & scored).sum().item()
                step_count[j] += scored.sum().item()
        self.model.train()
        return {"val_loss": round(plain / count, 4), "val_loss_tiny_ar": round(ref / count, 4),
                "agree_tiny_ar": round(agree / count, 4),
                "micro_step_loss": [round(a / max(c, 1), 4) for a, c in zip(step_loss, step_count)],
                "micro_step_accuracy": [round(a / max(c, 1), 4) for a, c in zip(step_right, step_count)]}

    def export(self, out: Path, tokenizer, info: dict) -> None:
        save_fp16(self.model, tokenizer, out, info)
        save_parts(self.parts, out)


# ---------------------------------------------------------------- the loop


def lr_at(cfg: FasterConfig, step: int, frac: float) -> float:
    """Linear warmup over steps, then cosine decay over the spent fraction of the CPU budget."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    return cfg.lr * warm * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cos)


def make_optimizer(params: list[nn.Parameter], cfg: FasterConfig) -> torch.optim.AdamW:
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def train(objective: nn.Module, tokenizer, train_ids: torch.Tensor, val_batches: list, cfg: FasterConfig, out: Path,
          resume: bool = False, log=print, info: dict | None = None) -> dict:
    """Minimise `objective.loss` over random windows of `train_ids` within the CPU budget; evaluate,
    checkpoint and export every `eval_minutes` and at the end. Returns the summary (training.json)."""
    generator = torch.Generator().manual_seed(cfg.seed)
    params = objective.trainable()
    optimizer = make_optimizer(params, cfg)
    step, spent, info = 0, 0.0, dict(info or {})
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "checkpoint.pt"
    generators = {"generator": generator}
    if resume:
        state = load_checkpoint(ckpt_path, objective, optimizer, generators)
        step, spent, info = state["step"], state["cpu_seconds"], state["info"]
        log(f"resumed at step {step}, {spent / 60:.1f} CPU minutes spent")
    info["config"] = asdict(cfg)
    budget, started, wall_started = cfg.minutes * 60, time.process_time(), time.time()
    last_eval, window = spent, []

    def cpu() -> float:
        return spent + time.process_time() - started

    def save(final: bool) -> None:
        info.update(steps=step, tokens=step * cfg.batch_size * cfg.seq_len, cpu_minutes=round(cpu() / 60, 2))
        info["after"] = objective.metrics(val_batches)
        log(f"{'final' if final else 'eval'} step {step} cpu {cpu() / 60:.1f}min {json.dumps(info['after'])}")
        save_checkpoint(ckpt_path, objective, optimizer, generators, step=step, cpu_seconds=cpu(), info=info)
        objective.export(out, tokenizer, info)

    objective.train()
    while cpu() < budget and not (cfg.max_steps and step >= cfg.max_steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(cfg, step, cpu() / budget)
        offsets = torch.randint(0, len(train_ids) - cfg.seq_len, (cfg.batch_size,), generator=generator)
        ids = torch.stack([train_ids[o : o + cfg.seq_len] for o in offsets.tolist()])  # (B, T)
        loss, parts = objective.loss(ids)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        step += 1
        window.append({"loss": loss.item(), **parts})
        if step % cfg.log_every == 0:
            means = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
            log(f"step {step} cpu {cpu() / 60:.1f}min wall {(time.time() - wall_started) / 60:.1f}min "
                f"lr {optimizer.param_groups[0]['lr']:.2e} " + " ".join(f"{k} {v:.4f}" for k, v in means.items()))
            info["train"] = {k: round(v, 4) for k, v in means.items()}
            window = []
        if cpu() - last_eval >= cfg.eval_minutes * 60:
            save(final=False)
            last_eval = cpu()
    objective.eval()
    save(final=True)
    return info


def build_objective(method: str, base, tokenizer, cfg: FasterConfig) -> nn.Module:
    if method == "ftp":
        return FtpObjective(base, cfg)
    if method == "lud":
        return LudObjective(base, cfg, tokenizer.convert_tokens_to_ids("<|mask|>"))
    if method == "hamburger":
        return HamburgerObjective(base, cfg)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.training.faster", description=__doc__.split("\n\n")[0])
    parser.add_argument("method", choices=METHODS)
    parser.add_argument("--data", required=True,
                        help="train.txt written by `python -m decoding.training.train corpus` (val.txt beside it)")
    parser.add_argument("--base", default=str(ASSETS / "tiny-ar"), help="the model to start from")
    parser.add_argument("--out", required=True, help="folder for the checkpoint, the exported files and train.log")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    for name, value in asdict(FasterConfig()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    args = parser.parse_args(argv)
    cfg = FasterConfig(**{k: getattr(args, k) for k in asdict(FasterConfig())})
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model, tokenizer, kind = load_trained(args.base)
    if kind != "ar":
        raise SystemExit(f"error: --base must be a causal model, {args.base} is {kind}")
    val_batches = window_batches(encode_stream(tokenizer, read_documents(Path(args.data).with_name("val.txt"))),
                                 cfg.seq_len, cfg.batch_size)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with run_log(out / "train.log", "a") as log:
        log("cmd " + " ".join(["python -m decoding.training.faster", *(argv if argv is not None else sys.argv[1:])]))
        log(repr(cfg))
        objective = build_objective(args.method, model, tokenizer, cfg)
        train_ids = encode_stream(tokenizer, read_documents(Path(args.data)))
        info = {"method": args.method, "base": Path(args.base).name,
                "trainable_params": sum(p.numel() for p in objective.trainable())}
        if not args.resume:
            info["before"] = objective.metrics(val_batches)
            log(f"before: {json.dumps(info['before'])}")
        log(f"train tokens {len(train_ids)}, val windows {sum(len(ids) for ids, _ in val_batches)} x {cfg.seq_len}")
        train(objective, tokenizer, train_ids, val_batches, cfg, out, resume=args.resume, log=log, info=info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
