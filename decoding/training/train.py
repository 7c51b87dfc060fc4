"""Train the shipped offline models: a masked diffusion LM and a causal AR LM on the same data.

The diffusion model follows the masked diffusion objective of MDLM (Sahoo et al. 2024, "Simple
and Effective Masked Diffusion Language Models") in the form used by LLaDA (Nie et al. 2025,
"Large Language Diffusion Models"): per sequence draw a mask ratio t ~ U(eps, 1), mask each
token independently with probability t, and score the cross-entropy of the masked tokens only,
weighted by 1/t and divided by the number of tokens in the batch. That is an upper bound on
the negative log-likelihood (nats/token). The network is a bidirectional transformer
(`ModernBertForMaskedLM`, no causal mask): logits at position i predict the token at i.
The AR model is a `LlamaForCausalLM` trained with plain next-token cross-entropy.

Glossary
    mask     the tokenizer's mask token, which replaces a token hidden by the forward process.
    t        the mask ratio of one sequence, in (eps, 1]; t = 1 hides everything.
    unmask   commit a prediction at a masked position (the reverse process, one step).
    remask   low-confidence remasking (LLaDA): of all predictions made in a step, keep only the
             k most confident; the others stay masked for a later step.
    NFE      number of forward passes (one per sampling step).

CLI (heavy work only under `main()`):
    python -m decoding.training.train corpus --out /tmp/train/data
    python -m decoding.training.train tokenizer --data /tmp/train/data --out /tmp/train/tok
    python -m decoding.training.train train --kind diffusion --data ... --tokenizer ... --out ... --minutes 75
        [--init assets/tiny-diffusion]  (continue from a trained model; the schedule restarts)
        [--autocast bf16]  (bfloat16 matmuls: ~1.35x faster steps on CPUs with avx512_bf16)
        [--clock cpu]  (budget --minutes of this process's CPU time, not wall-clock time)
        [--resume]  (continue from OUT/checkpoint.pt, written at each evaluation: weights, optimizer,
                     data order, time spent; the schedule goes on where it stopped)
    python -m decoding.training.train sample --model assets/tiny-diffusion --prompt "In the beginning"
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from decoding.diffusion.samplers import select_top_k
from decoding.training.checkpoint import load_checkpoint, save_checkpoint

MASK_TOKEN = "<|mask|>"
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = (EOS_TOKEN, MASK_TOKEN, PAD_TOKEN)  # ids 0, 1, 2 in the trained tokenizer
KINDS = ("diffusion", "ar")
AUTOCASTS = ("none", "bf16")
CLOCKS = ("wall", "cpu")
DOCS = ("lines", "blocks", "pairs")  # one per line; blank-line separated; blank-line separated prompt + answer
# the chat template of prompt-answer models: the user's last message as the prompt line, then a newline
PROMPT_LINE_TEMPLATE = "{{ (messages | selectattr('role', 'equalto', 'user') | list | last)['content'] }}{{ '\\n' }}"
PAIR_EXTRA_POSITIONS = 24  # pairs, diffusion: up to this many eos positions beyond the longest answer of a batch
VAL_EVERY_NTH_CHAPTER = 50  # chapters 0, 50, 100, ... (in Bible order) form the validation split


# ---------------------------------------------------------------- corpus and tokenizer


def clean_bible(raw: str) -> list[tuple[str, str]]:
    """Parse `bible` output into (chapter header, verse text) pairs, one per verse.

    Headers ("Genesis 1") stand alone between blank lines; verses start with an indented
    verse number and may wrap onto following lines.
    """
    verses: list[tuple[str, str]] = []
    chapter, current, prev_blank = "", None, True
    for line in raw.splitlines():
        if not line.strip():
            prev_blank = True
            continue
        verse_start = re.match(r"^\s+\d+\s+(.*)$", line)
        if prev_blank and not line.startswith(" ") and re.search(r"\d+$", line):
            chapter, current = line.strip(), None
        elif verse_start:
            verses.append((chapter, verse_start.group(1).strip()))
            current = len(verses) - 1
        elif current is not None:
            verses[current] = (chapter, verses[current][1] + " " + line.strip())
        prev_blank = False
    return verses


def split_verses(verses: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """Whole chapters go to one split: every `VAL_EVERY_NTH_CHAPTER`-th chapter is validation."""
    train, val, chapters = [], [], {}
    for chapter, text in verses:
        index = chapters.setdefault(chapter, len(chapters))
        (val if index % VAL_EVERY_NTH_CHAPTER == 0 else train).append(text)
    return train, val


def build_corpus(out: Path) -> dict:
    raw = subprocess.run(["bible", "gen1:1-rev22:21"], capture_output=True, text=True, check=True).stdout
    train, val = split_verses(clean_bible(raw))
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.txt").write_text("\n".join(train) + "\n")
    (out / "val.txt").write_text("\n".join(val) + "\n")
    return {"train_lines": len(train), "val_lines": len(val)}


def train_tokenizer(lines: list[str], vocab_size: int, split_digits: bool = False):
    """Byte-level BPE with eos/mask/pad specials, wrapped as a `PreTrainedTokenizerFast`.

    `split_digits`: every digit is a token of its own (no merges across digits), as arithmetic
    models need (tiny-math); words still merge.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if split_digits:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS_TOKEN, mask_token=MASK_TOKEN, pad_token=PAD_TOKEN
    )


def read_documents(path: Path, docs: str = "lines") -> list[str]:
    """The documents of a data file: one per line ("lines", the KJV verses) or separated by a
    blank line ("blocks", multi-line documents such as tiny-math's problems and solutions)."""
    if docs not in DOCS:
        raise ValueError(f"`docs` must be one of {DOCS}, got {docs!r}")
    text = Path(path).read_text()
    if docs == "lines":
        return text.splitlines()
    return [block.strip("\n") for block in text.split("\n\n") if block.strip()]


def encode_pairs(tokenizer, documents: list[str]) -> list[tuple[list[int], list[int]]]:
    """("pairs" documents) each document's first line + newline as the prompt, the rest as the
    answer, both as ids: [(prompt_ids, answer_ids)]."""
    prompts, answers = zip(*(doc.split("\n", 1) for doc in documents))
    prompt_ids = tokenizer([p + "\n" for p in prompts], add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(list(answers), add_special_tokens=False)["input_ids"]
    return list(zip(prompt_ids, answer_ids))


def pair_batch(pairs: list[tuple[list[int], list[int]]], eos_id: int, extra: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Supervised fine-tuning rows as LLaDA builds them: prompt, answer, then eos up to one shared
    length (the longest prompt + answer + 1, plus `extra`), so the model learns to end an answer
    on a canvas of any size. Returns (ids (B, T), answer region (B, T) bool): only the region is
    ever masked, the prompt stays visible. No padding token is needed."""
    length = max(len(p) + len(a) for p, a in pairs) + 1 + extra
    ids = torch.full((len(pairs), length), eos_id, dtype=torch.long)
    region = torch.zeros(len(pairs), length, dtype=torch.bool)
    for row, (p, a) in enumerate(pairs):
        ids[row, : len(p) + len(a)] = torch.tensor(p + a)
        region[row, len(p):] = True
    return ids, region


def encode_stream(tokenizer, lines: list[str]) -> torch.Tensor:
    """All documents (lines) as one id stream, each followed by eos. # (N,)"""
    ids: list[int] = []
    for enc in tokenizer(lines, add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------- models


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int = 256  # residual width
    num_layers: int = 5  # transformer blocks
    num_heads: int = 4  # attention heads
    intermediate_size: int = 512  # gated MLP width (3 matrices: SwiGLU / GeGLU)
    max_positions: int = 256  # longest canvas (prompt + answer) the model accepts


def build_model(kind: str, tokenizer, shape: ModelShape = ModelShape()):
    """A fresh `ModernBertForMaskedLM` (diffusion) or `LlamaForCausalLM` (ar), embeddings tied."""
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}, got {kind!r}")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    if kind == "ar":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=shape.hidden_size,
            intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_layers,
            num_attention_heads=shape.num_heads, num_key_value_heads=shape.num_heads,
            max_position_embeddings=shape.max_positions, tie_word_embeddings=True,
            bos_token_id=eos, eos_token_id=eos, pad_token_id=pad,
        )
        return LlamaForCausalLM(config)
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    config = ModernBertConfig(
        vocab_size=len(tokenizer), hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, max_position_embeddings=shape.max_positions,
        global_attn_every_n_layers=1,  # every layer attends to the whole canvas
        local_attention=shape.max_positions,
        tie_word_embeddings=True, pad_token_id=pad, eos_token_id=eos, bos_token_id=eos,
        cls_token_id=eos, sep_token_id=eos,
        attention_dropout=0.0, mlp_dropout=0.0, embedding_dropout=0.0,
    )
    config.mask_token_id = tokenizer.mask_token_id  # ModernBertConfig has no such field
    return ModernBertForMaskedLM(config)


# ---------------------------------------------------------------- objectives


def mdlm_loss(logits: torch.Tensor, target_ids: torch.Tensor, masked: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """MDLM / LLaDA loss: sum over masked positions of CE / t, divided by B*T (nats/token).

    logits (B, T, V), target_ids (B, T), masked (B, T) bool, t (B,).
    """
    ce = F.cross_entropy(logits.float().transpose(1, 2), target_ids, reduction="none")  # (B, T)
    weighted = ce * masked.float() / t[:, None]
    return weighted.sum() / target_ids.numel()


def forward_mask(ids: torch.Tensor, mask_id: int, generator: torch.Generator, eps: float = 1e-3, t=None,
                 region: torch.Tensor | None = None):
    """Forward process: t ~ U(eps, 1) per row (unless given), mask each token w.p. t (only inside
    `region` (B, T) bool, when given: the answer of a prompt-answer pair).

    Returns (noisy_ids (B, T), masked (B, T) bool, t (B,)).
    """
    B, T = ids.shape
    if t is None:
        t = eps + (1 - eps) * torch.rand(B, generator=generator)
    masked = torch.rand(B, T, generator=generator) < t[:, None]
    if region is not None:
        masked &= region
    return torch.where(masked, torch.full_like(ids, mask_id), ids), masked, t


def batch_loss(model, kind: str, ids: torch.Tensor, mask_id: int, generator: torch.Generator, t=None,
               region: torch.Tensor | None = None):
    """Training loss of one batch of token rows `ids` (B, T); `region` as in `forward_mask`."""
    if kind == "ar":
        if region is not None:  # supervised pairs: the answer and its first end-of-text only
            repeat_eos = torch.zeros_like(region)
            eos = model.config.eos_token_id
            repeat_eos[:, 1:] = (ids[:, 1:] == eos) & (ids[:, :-1] == eos) & region[:, :-1]  # the fill after the first
            return model(input_ids=ids, labels=ids.masked_fill(~region | repeat_eos, -100)).loss
        return model(input_ids=ids, labels=ids).loss
    noisy, masked, t = forward_mask(ids, mask_id, generator, t=t, region=region)
    return mdlm_loss(model(input_ids=noisy).logits, ids, masked, t)


@torch.no_grad()
def evaluate(model, kind: str, val_batches: list, mask_id: int, seed: int = 1234) -> float:
    """Validation loss in nats/token over fixed (ids (B, T), region or None) batches; for
    diffusion the MDLM bound with a fixed grid of t and masks."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    n = sum(len(ids) for ids, _ in val_batches)
    t_grid = (torch.arange(n, dtype=torch.float) + 0.5) / n  # stratified t, same every eval
    total, start = 0.0, 0
    for ids, region in val_batches:
        t = t_grid[start : start + len(ids)] if kind == "diffusion" else None
        total += batch_loss(model, kind, ids, mask_id, generator, t=t, region=region).item() * len(ids)
        start += len(ids)
    model.train()
    return total / max(n, 1)


def window_batches(val_ids: torch.Tensor, seq_len: int, batch_size: int = 32) -> list:
    """Non-overlapping windows of a validation stream as evaluation batches (no region)."""
    n = len(val_ids) // seq_len
    windows = val_ids[: n * seq_len].view(n, seq_len)  # (N, T)
    return [(windows[i : i + batch_size], None) for i in range(0, n, batch_size)]


# ---------------------------------------------------------------- training loop


@dataclass(frozen=True)
class TrainConfig:
    kind: str = "diffusion"  # "diffusion" (ModernBERT, MDLM loss) or "ar" (Llama, next token)
    minutes: float = 75.0  # wall-clock budget; the cosine schedule decays over it
    batch_size: int = 32  # windows per step
    seq_len: int = 128  # tokens per window
    lr: float = 2e-3  # peak AdamW learning rate
    min_lr_ratio: float = 0.1  # final lr = lr * this
    warmup_steps: int = 100  # linear warmup
    weight_decay: float = 0.1  # AdamW decoupled decay on matrices
    threads: int = 1  # torch CPU threads
    seed: int = 0  # data order, init and masks
    eval_minutes: float = 5.0  # evaluate + checkpoint this often
    log_every: int = 20  # steps between train-loss lines
    max_steps: int = 0  # stop after this many steps too (0 = only the time budget)
    init: str = ""  # start from the weights in this trained model directory ("" = fresh init)
    autocast: str = "none"  # "bf16": bfloat16 autocast for forward/backward (weights stay float32)
    clock: str = "wall"  # what `minutes` counts: "wall" (elapsed time) or "cpu" (this process's CPU time)


def initial_model(cfg: TrainConfig, tokenizer, shape: ModelShape = ModelShape()):
    """A fresh model of `shape`, or (with `cfg.init`) the float32 weights of an earlier run.

    Continuing from a checkpoint restarts the warmup and cosine schedule over the new budget;
    the tokenizer must be the one the checkpoint was trained with.
    """
    if not cfg.init:
        return build_model(cfg.kind, tokenizer, shape)
    model, _, kind = load_trained(cfg.init)
    if kind != cfg.kind:
        raise ValueError(f"--init {cfg.init} holds a {kind} model, but --kind is {cfg.kind}")
    if model.config.vocab_size != len(tokenizer):
        raise ValueError(f"--init {cfg.init} has {model.config.vocab_size} tokens, the tokenizer {len(tokenizer)}")
    return model.train()


def lr_at(cfg: TrainConfig, step: int, frac: float) -> float:
    """Linear warmup over steps, then cosine decay over the elapsed fraction of the budget."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    return cfg.lr * warm * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cos)


def save_fp16(model, tokenizer, out: Path, info: dict) -> None:
    """Weights as float16 safetensors + config + tokenizer, so `out` loads on its own."""
    out.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(model).to(torch.float16)
    half.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "training.json").write_text(json.dumps(info, indent=2) + "\n")


def train(model, tokenizer, train_ids, val_batches: list, cfg: TrainConfig, out: Path | None = None, log=print,
          resume: bool = False) -> dict:
    """Train `model` in place; returns a summary dict.

    With `out`, each evaluation also writes OUT/checkpoint.pt; `resume` continues from it (same
    `cfg`, data and tokenizer): the step, the schedule's elapsed budget and the data order go on.

    `train_ids` is an id stream (N,) trained on in random windows of `cfg.seq_len`, or (diffusion
    supervised fine-tuning) a list of (prompt_ids, answer_ids) pairs, drawn `cfg.batch_size` at a
    time as `pair_batch` rows. `val_batches`: fixed (ids, region) batches for `evaluate`."""
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95),
    )
    mask_id = tokenizer.mask_token_id
    budget = cfg.minutes * 60
    clock = time.process_time if cfg.clock == "cpu" else time.time
    step, window, history, spent = 0, [], [], 0.0
    info = {"config": asdict(cfg), "params": sum(p.numel() for p in model.parameters())}
    ckpt = out / "checkpoint.pt" if out is not None else None
    if resume:
        state = load_checkpoint(ckpt, model, opt, {"generator": generator}, what="resume")
        step, spent, history = state["step"], state["spent"], state["history"]
        info.update({k: v for k, v in state["info"].items() if k != "config"})
        log(f"resumed at step {step}, {spent / 60:.1f} minutes ({cfg.clock}) spent")
    start = clock() - spent
    last_eval = clock()
    model.train()
    while True:
        elapsed = clock() - start
        if elapsed >= budget or (cfg.max_steps and step >= cfg.max_steps):
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step, elapsed / budget)
        if isinstance(train_ids, list):  # prompt-answer pairs
            rows = torch.randint(0, len(train_ids), (cfg.batch_size,), generator=generator).tolist()
            extra = int(torch.randint(0, PAIR_EXTRA_POSITIONS + 1, (1,), generator=generator)) if cfg.kind == "diffusion" else 0
            ids, region = pair_batch([train_ids[r] for r in rows], tokenizer.eos_token_id, extra)
        else:
            offsets = torch.randint(0, len(train_ids) - cfg.seq_len, (cfg.batch_size,), generator=generator)
            ids, region = torch.stack([train_ids[o : o + cfg.seq_len] for o in offsets.tolist()]), None  # (B, T)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.autocast == "bf16"):
            loss = batch_loss(model, cfg.kind, ids, mask_id, generator, region=region)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        window.append(loss.item())
        history.append(window[-1])
        if step % cfg.log_every == 0:
            log(f"step {step} elapsed {clock() - start:.0f}s lr {opt.param_groups[0]['lr']:.2e} "
                f"train {sum(window) / len(window):.4f} tokens {step * cfg.batch_size * cfg.seq_len}")
            info["train_loss"] = sum(window) / len(window)
            window = []
        if out is not None and clock() - last_eval >= cfg.eval_minutes * 60:
            last_eval = clock()
            info.update(steps=step, tokens=step * cfg.batch_size * cfg.seq_len, minutes=(last_eval - start) / 60)
            info["val_loss"] = evaluate(model, cfg.kind, val_batches, mask_id)
            log(f"eval step {step} val {info['val_loss']:.4f}")
            save_fp16(model, tokenizer, out, info)
            save_checkpoint(ckpt, model, opt, {"generator": generator}, step=step, spent=clock() - start, info=info,
                            history=history)
    info.update(steps=step, tokens=step * cfg.batch_size * cfg.seq_len, minutes=(clock() - start) / 60)
    if window:
        info["train_loss"] = sum(window) / len(window)
    info["val_loss"] = evaluate(model, cfg.kind, val_batches, mask_id) if val_batches else float("nan")
    info["history"] = history
    log(f"final step {step} train {info.get('train_loss', float('nan')):.4f} val {info['val_loss']:.4f}")
    if out is not None:
        save_fp16(model, tokenizer, out, {k: v for k, v in info.items() if k != "history"})
    return info


# ---------------------------------------------------------------- sampling


def select_unmask(confidence: torch.Tensor, masked: torch.Tensor, k: int) -> torch.Tensor:
    """Low-confidence remasking: the k most confident masked positions. (T,) -> (T,) bool.
    The lab's own choice rule (`decoding.diffusion.samplers.select_top_k`)."""
    return select_top_k(confidence, masked, k)


@torch.no_grad()
def diffusion_sample(model, prompt_ids: list[int], mask_id: int, gen_length: int = 32, steps: int = 32,
                     temperature: float = 0.0, banned_ids: tuple[int, ...] = (), generator=None) -> list[int]:
    """Start from prompt + `gen_length` masks; each step predict every mask, commit the most confident."""
    if steps < 1 or gen_length < 1:
        raise ValueError(f"`steps` and `gen_length` must be >= 1, got {steps} and {gen_length}")
    ids = torch.tensor(list(prompt_ids) + [mask_id] * gen_length)  # (T,)
    for step in range(steps):
        masked = ids == mask_id
        if not masked.any():
            break
        logits = model(input_ids=ids[None]).logits[0].float()  # (T, V)
        logits[:, list(banned_ids) + [mask_id]] = -math.inf
        if temperature > 0:
            probs = torch.softmax(logits / temperature, -1)
            pred = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            probs = torch.softmax(logits, -1)
            pred = probs.argmax(-1)
        confidence = probs.gather(-1, pred[:, None])[:, 0]  # (T,)
        k = math.ceil(int(masked.sum()) / (steps - step))  # spread the rest over the steps left
        chosen = select_unmask(confidence, masked, k)
        ids = torch.where(chosen, pred, ids)
    return ids[len(prompt_ids):].tolist()


def load_trained(path: str):
    """(model, tokenizer, kind) from a directory written by `train`; float32 for CPU."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    kind = "ar" if AutoConfig.from_pretrained(path).model_type == "llama" else "diffusion"
    cls = AutoModelForCausalLM if kind == "ar" else AutoModelForMaskedLM
    return cls.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path), kind


def sample_text(path: str, prompt: str, gen_length: int = 32, steps: int = 32, temperature: float = 0.0, seed: int = 0) -> str:
    model, tokenizer, kind = load_trained(path)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    torch.manual_seed(seed)
    if kind == "ar":
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=gen_length, do_sample=temperature > 0,
                             temperature=temperature if temperature > 0 else None, top_k=None, top_p=None,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        new_ids = out[0, len(prompt_ids):].tolist()
    else:
        new_ids = diffusion_sample(model, prompt_ids, tokenizer.mask_token_id, gen_length, steps, temperature,
                                   banned_ids=(tokenizer.pad_token_id,), generator=torch.Generator().manual_seed(seed))
    return prompt + tokenizer.decode(new_ids).replace(EOS_TOKEN, " / ")


# ---------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.training.train", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("corpus", help="KJV (Debian `bible`) -> train.txt / val.txt, one verse per line")
    p.add_argument("--out", required=True)
    p = sub.add_parser("tokenizer", help="train the byte-level BPE tokenizer on train.txt")
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--docs", choices=DOCS, default="lines",
                   help="documents: one per line, blank-line separated, or blank-line separated prompt line + answer")
    p.add_argument("--split-digits", action="store_true", help="one token per digit (arithmetic data)")
    p.add_argument("--prompt-line-template", action="store_true",
                   help="a chat template that writes the user's message as one prompt line (prompt-answer models)")
    p = sub.add_parser("train", help="train a diffusion (MDLM) or AR model")
    p.add_argument("--data", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--log", default=None, help="log file (default OUT/train.log)")
    p.add_argument("--docs", choices=DOCS, default="lines",
                   help="documents: one per line, blank-line separated, or blank-line separated prompt line + answer")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt (same options)")
    for name, default in asdict(TrainConfig()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    for name, default in asdict(ModelShape()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    p = sub.add_parser("sample", help="generate from a trained model directory")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", action="append", required=True)
    p.add_argument("--gen-length", type=int, default=32)
    p.add_argument("--steps", type=int, default=32, help="diffusion steps (NFE)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    if args.cmd == "corpus":
        print(json.dumps(build_corpus(Path(args.out))))
    elif args.cmd == "tokenizer":
        lines = read_documents(Path(args.data, "train.txt"), args.docs)
        tokenizer = train_tokenizer(lines, args.vocab, args.split_digits)
        if args.prompt_line_template:
            tokenizer.chat_template = PROMPT_LINE_TEMPLATE
        tokenizer.save_pretrained(args.out)
        print(f"saved tokenizer to {args.out}")
    elif args.cmd == "train":
        from transformers import AutoTokenizer

        cfg = TrainConfig(**{k: getattr(args, k) for k in asdict(TrainConfig())})
        if cfg.kind not in KINDS:
            raise SystemExit(f"error: `--kind` must be one of {KINDS}, got {cfg.kind!r}")
        if cfg.autocast not in AUTOCASTS:
            raise SystemExit(f"error: `--autocast` must be one of {AUTOCASTS}, got {cfg.autocast!r}")
        if cfg.clock not in CLOCKS:
            raise SystemExit(f"error: `--clock` must be one of {CLOCKS}, got {cfg.clock!r}")
        shape = ModelShape(**{k: getattr(args, k) for k in asdict(ModelShape())})
        torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        log_file = open(args.log or out / "train.log", "a", buffering=1)

        def log(msg: str) -> None:
            line = f"{time.strftime('%H:%M:%S')} {msg}"
            print(line, flush=True)
            log_file.write(line + "\n")

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        train_docs = read_documents(Path(args.data, "train.txt"), args.docs)
        val_docs = read_documents(Path(args.data, "val.txt"), args.docs)
        if args.docs == "pairs":  # supervised: only answers are masked (diffusion) or scored (ar)
            train_ids = encode_pairs(tokenizer, train_docs)
            val_pairs = encode_pairs(tokenizer, val_docs)
            val_batches = [pair_batch(val_pairs[i : i + cfg.batch_size], tokenizer.eos_token_id, PAIR_EXTRA_POSITIONS // 2)
                           for i in range(0, len(val_pairs), cfg.batch_size)]
        else:
            train_ids = encode_stream(tokenizer, train_docs)
            val_batches = window_batches(encode_stream(tokenizer, val_docs), cfg.seq_len, cfg.batch_size)
        model = initial_model(cfg, tokenizer, shape)
        log(f"cmd {' '.join(sys.argv)}")
        log(f"{cfg} {shape} params {sum(p.numel() for p in model.parameters())} "
            f"train {'pairs' if isinstance(train_ids, list) else 'tokens'} {len(train_ids)} "
            f"val rows {sum(len(ids) for ids, _ in val_batches)}")
        train(model, tokenizer, train_ids, val_batches, cfg, out=out, log=log, resume=args.resume)
    elif args.cmd == "sample":
        for i, prompt in enumerate(args.prompt):
            print(sample_text(args.model, prompt, args.gen_length, args.steps, args.temperature, args.seed + i))
    return 0


if __name__ == "__main__":
    sys.exit(main())
