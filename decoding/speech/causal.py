"""CarelessWhisper's causal encoder: Whisper's encoder run chunk by chunk, each chunk attending only to the past.

Krichli, Raj and Keshet 2025, "CarelessWhisper: Turning Whisper into a Causal Streaming Model" (arXiv 2508.12301;
v2 is retitled "WhisperRT"). Whisper's encoder attends over a whole 30 s window, so the states of audio heard early
change when more audio arrives and a streaming system must re-encode everything after every chunk. The paper puts
a causal mask on every encoder self-attention layer and fine-tunes with LoRA (`decoding.speech.lora`) so that
the model works with it. What follows is this project's reading of the paper's abstract and of the authors'
released code (github.com/tomer9080/CarelessWhisper-Streaming, `streaming_model.py`, `streaming_decoding.py`,
`audio.py`); the paper's full text was not readable here, so nothing below claims more of it than that.

The mask is block-causal over chunks: encoder frame i (20 ms each) may attend to frame j iff j arrived in the same
chunk as i or an earlier one (the authors' mask has fixed blocks of `gran` frames, with the first block longer;
here a block is whatever one chunk of the stream delivered, so the mask follows the policy's `chunk_s`). Every
other piece of the encoder is made causal too, so that a frame's state is fixed once computed:

    log-mel    each 25 ms STFT window ends where its 10 ms hop ends (the window is left-padded with zeros instead
               of centred with reflection, 12.5 ms later than Whisper's), and the floor `max - 8` uses the running
               maximum of everything heard when the frame arrived (the authors' `SpectrogramStream` keeps a running
               maximum the same way); Whisper's own features use the maximum of the whole window.
    conv stem  Whisper's two convolutions (kernel 3, the second with stride 2) give encoder frame j from mel frames
               2j-2..2j+2: a frame is computed only once all of them have been heard, so no frame is ever computed
               from zero padding that later turns into audio. After `s` samples, `s // 320` frames are ready.
    padding    none: the encoder sees only the frames heard so far (positions 0..n-1 of its positional embedding),
               and the decoder cross-attends to those n frames, as in the authors' streaming inference. Whisper
               was trained on 30 s windows padded with silence, which is why it needs the fine-tuning.

Streaming (`EncoderStream.extend`): the new chunk's frames go through the conv stem and every layer once, against the
keys and values cached for earlier frames; a new frame may see everything cached and its own chunk, so no mask is
needed. The work per chunk grows only with the attention span (linear in the frames heard), not with the 1,500
frames of the window. `CausalEncoder.full` is the same computation in one masked pass over all frames (training; the
tests check the two agree).

Glossary
    frame      one encoder state, 20 ms of audio (two mel hops).
    block      the frames one chunk delivered; frames attend to their own block and earlier ones.
    ready      a frame whose whole receptive field has been heard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from decoding.speech.whisper import HOP_LENGTH, N_FFT

FRAME_SAMPLES = 2 * HOP_LENGTH  # 320 samples = 20 ms: one encoder frame
LOG_FLOOR = 8.0  # Whisper's dynamic range: log-mel below max - 8 is clamped


def ready_frames(num_samples: int) -> int:
    """How many encoder frames are ready once `num_samples` samples have been heard."""
    return num_samples // FRAME_SAMPLES


def block_ids(chunk_ends: list[int]) -> torch.Tensor:
    """(n,) the chunk each ready encoder frame arrived with, for chunks ending at these sample indices."""
    ids, start = [], 0
    for k, end in enumerate(chunk_ends):
        stop = ready_frames(end)
        ids += [k] * max(0, stop - start)
        start = max(start, stop)
    return torch.tensor(ids, dtype=torch.long)


def block_mask(ids: torch.Tensor) -> torch.Tensor:
    """(n, n) bool: frame i may attend to frame j iff j's block is not later than i's (True = attend)."""
    return ids[None, :] <= ids[:, None]


class MelStream:
    """Causal log-mel features, computed as audio arrives (see the module docstring)."""

    def __init__(self, mel_filters: np.ndarray):
        self.filters = torch.tensor(np.asarray(mel_filters).T, dtype=torch.float32)  # (n_mels, n_freq)
        self.window = torch.hann_window(N_FFT)
        self.audio = np.zeros(N_FFT, np.float32)  # left padding: frame t covers padded[160 t : 160 t + 400]
        self.frames: list[torch.Tensor] = []  # (n_mels, f) per extension
        self.num_frames = 0
        self.running_max = -np.inf

    def extend(self, heard: np.ndarray) -> torch.Tensor:
        """All mel frames so far, (n_mels, F), after hearing `heard` (every sample so far, a prefix of what comes)."""
        self.audio = np.concatenate([self.audio, heard[len(self.audio) - N_FFT:].astype(np.float32)])
        total = (len(self.audio) - N_FFT) // HOP_LENGTH + 1  # frames whose window has been heard
        if total > self.num_frames:
            segment = torch.from_numpy(self.audio[self.num_frames * HOP_LENGTH:(total - 1) * HOP_LENGTH + N_FFT])
            spectrum = torch.stft(segment, N_FFT, HOP_LENGTH, window=self.window, center=False, return_complex=True)
            log_spec = torch.clamp(self.filters @ spectrum.abs() ** 2, min=1e-10).log10()  # (n_mels, new)
            self.running_max = max(self.running_max, float(log_spec.max()))
            self.frames.append((torch.clamp(log_spec, min=self.running_max - LOG_FLOOR) + 4.0) / 4.0)
            self.num_frames = total
        return torch.cat(self.frames, dim=1) if self.frames else self.filters.new_zeros(self.filters.shape[0], 0)


def causal_log_mel(audio: np.ndarray, chunk_ends: list[int], mel_filters: np.ndarray) -> torch.Tensor:
    """(n_mels, F) the mel frames a stream of `audio` arriving in chunks ending at `chunk_ends` computes."""
    stream = MelStream(mel_filters)
    mel = None
    for end in chunk_ends:
        mel = stream.extend(audio[:end])
    return mel


def conv_stem(encoder, mel: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """(stop - start, d) encoder frames [start, stop) from the conv stem and positions, reading mel frames
    up to 2 stop (the module's own zero padding emulated at the left edge only)."""
    lo = 2 * start - 1  # the first conv1 output conv2 needs (-1 is conv2's zero padding)
    first = max(lo, 0)
    window = mel[:, max(first - 1, 0):2 * stop + 1]  # conv1 output p reads mel p-1..p+1
    if first == 0:
        window = F.pad(window, (1, 0))  # conv1's zero padding before mel frame 0
    hidden = F.gelu(F.conv1d(window[None], encoder.conv1.weight, encoder.conv1.bias))  # (1, d, positions)
    if lo < 0:
        hidden = F.pad(hidden, (1, 0))  # conv2's zero padding before conv1 output 0
    x = F.gelu(F.conv1d(hidden, encoder.conv2.weight, encoder.conv2.bias, stride=2))  # (1, d, stop - start)
    return x[0].T + encoder.embed_positions.weight[start:stop]


def _layer(layer, x: torch.Tensor, past: tuple | None, mask: torch.Tensor | None):
    """One Whisper encoder layer over new frames `x` (1, n, d), attending to cached keys/values `past` and
    themselves (`mask` (n, n_past + n) bool, None = all). Returns (output, (keys, values) including x's)."""
    attn = layer.self_attn
    heads, head_dim = attn.num_heads, attn.head_dim
    h = layer.self_attn_layer_norm(x)
    split = lambda t: t.view(1, -1, heads, head_dim).transpose(1, 2)  # (1, H, n, hd)
    q = split(attn.q_proj(h) * attn.scaling)
    k, v = split(attn.k_proj(h)), split(attn.v_proj(h))
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)  # (1, H, n, hd)
    x = x + attn.out_proj(out.transpose(1, 2).reshape(1, -1, heads * head_dim))
    h = layer.final_layer_norm(x)
    x = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
    return x, (k, v)


class CausalEncoder:
    """Whisper's encoder (of a WhisperForConditionalGeneration, LoRA-wrapped or not) with the block-causal mask."""

    def __init__(self, model, mel_filters: np.ndarray):
        self.model, self.encoder, self.mel_filters = model, model.model.encoder, mel_filters
        self.max_frames = self.encoder.embed_positions.weight.shape[0]

    def full(self, mel: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """(1, n, d) encoder states of the n = len(ids) frames in one masked pass (frame i sees blocks <= ids[i])."""
        n = len(ids)
        if not 0 < n <= self.max_frames:
            raise ValueError(f"`audio` must give 1..{self.max_frames} encoder frames, got {n}")
        x = conv_stem(self.encoder, mel, 0, n)[None]
        mask = block_mask(ids)
        for layer in self.encoder.layers:
            x, _ = _layer(layer, x, None, mask)
        return self.encoder.layer_norm(x)

    def encode(self, audio: np.ndarray, chunk_ends: list[int]) -> torch.Tensor:
        """The masked pass over `audio` arriving in chunks ending at `chunk_ends` (the stream's states, at once)."""
        return self.full(causal_log_mel(audio, chunk_ends, self.mel_filters), block_ids(chunk_ends))

    def stream(self) -> EncoderStream:
        return EncoderStream(self)


@dataclass
class EncoderStream:
    """Incremental encoding: each `extend` encodes only the frames that became ready, against cached keys/values."""

    encoder: CausalEncoder
    mel: MelStream = None
    cache: list = field(default_factory=list)  # per layer: (keys, values) (1, H, n, hd)
    states: torch.Tensor | None = None  # (1, n, d) after the final layer norm
    new_frames: int = 0  # frames the last extension encoded

    def __post_init__(self):
        self.mel = MelStream(self.encoder.mel_filters)

    @property
    def num_frames(self) -> int:
        return 0 if self.states is None else self.states.shape[1]

    @torch.inference_mode()
    def extend(self, heard: np.ndarray) -> torch.Tensor:
        """(1, n, d) the states of every ready frame after hearing `heard` (all samples so far)."""
        mel = self.mel.extend(heard)
        start, stop = self.num_frames, min(ready_frames(len(heard)), self.encoder.max_frames)
        self.new_frames = max(0, stop - start)
        if self.new_frames == 0:
            return self.states
        enc = self.encoder.encoder
        x = conv_stem(enc, mel, start, stop)[None]
        for i, layer in enumerate(enc.layers):
            x, kv = _layer(layer, x, self.cache[i] if i < len(self.cache) else None, None)
            self.cache[i:i + 1] = [kv]
        x = enc.layer_norm(x)
        self.states = x if self.states is None else torch.cat([self.states, x], dim=1)
        return self.states


# ---------------------------------------------------------------- the commit rule


def revise(old_probs: list[float], new_probs: list[float], still_top: list[bool], start: int) -> int:
    """How many tokens of the previous hypothesis to keep: the first token at or after `start` whose probability
    fell with the new audio and which is no longer the most likely token there is dropped, with all after it.
    (The authors' `StreamingDecoder._check_last_tokens`: a token is stable if its probability did not fall, or
    fell but it is still the argmax.) Tokens before `start` are committed and never re-examined."""
    for i in range(start, len(old_probs)):
        if new_probs[i] < old_probs[i] and not still_top[i]:
            return i
    return len(old_probs)


def _allowed(asr, logits: torch.Tensor, first: bool) -> torch.Tensor:
    """Logits with the tokens Whisper's greedy decoding never picks set to -inf (as `Whisper.decode` does)."""
    logits = logits.float().clone()
    logits[asr.suppress] = -float("inf")
    logits[asr.first_timestamp_id:] = -float("inf")
    if first:
        logits[asr.suppress_begin] = -float("inf")
    return logits


def _choice_of(asr, logits: torch.Tensor, token_id: int, top_k: int):
    """A TokenChoice for `token_id` (not necessarily the argmax) under `logits` (already suppressed)."""
    from decoding.speech.whisper import TokenChoice

    best = asr._choice(logits, top_k)
    prob = float(torch.softmax(logits, dim=-1)[token_id])
    return TokenChoice(token_id, asr.token_text(token_id), prob, best.entropy, best.top_ids, best.top_tokens,
                       best.top_probs)


@torch.inference_mode()
def careless_decode(asr, model, states: torch.Tensor, tokens: list, committed: int, *, max_new_tokens: int,
                    top_k: int) -> tuple[list, int, int]:
    """One chunk of CarelessWhisper's greedy streaming decoding over the encoder `states` heard so far.

    One decoder pass over the prompt and the previous hypothesis `tokens` re-scores every token with the new
    audio; `revise` keeps the stable ones (never fewer than `committed`); then greedy decoding goes on from the
    first dropped position until the end token or `max_new_tokens`. Returns (hypothesis with fresh
    distributions, tokens kept, decoder passes)."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    decoder, prompt = model.model.decoder, list(asr.prompt_ids)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    ids = torch.tensor([prompt + [t.token_id for t in tokens]])  # (1, P + T)
    hidden = decoder(input_ids=ids, encoder_hidden_states=states, past_key_values=cache, use_cache=True).last_hidden_state
    rows = model.proj_out(hidden[0, len(prompt) - 1:])  # (T + 1, V): row i predicts text token i
    passes = 1
    rows = [_allowed(asr, rows[i], first=i == 0) for i in range(len(rows))]
    fresh = [_choice_of(asr, rows[i], t.token_id, top_k) for i, t in enumerate(tokens)]
    keep = revise([t.prob for t in tokens], [t.prob for t in fresh],
                  [int(rows[i].argmax()) == t.token_id for i, t in enumerate(tokens)], committed)
    hypothesis = fresh[:keep]
    if keep < len(tokens):
        cache.crop(keep - len(tokens))  # drop the revised tokens' keys and values (a negative count)
    logits = rows[keep]
    room = asr.max_target_positions - len(prompt) - keep
    for _ in range(max(0, min(max_new_tokens, room))):
        choice = asr._choice(logits, top_k)
        if choice.token_id == asr.eot_id:
            break
        hypothesis.append(choice)
        hidden = decoder(input_ids=torch.tensor([[choice.token_id]]), encoder_hidden_states=states,
                         past_key_values=cache, use_cache=True).last_hidden_state
        passes += 1
        logits = _allowed(asr, model.proj_out(hidden[0, -1]), first=False)
    return hypothesis, keep, passes
