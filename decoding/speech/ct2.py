"""Read a CTranslate2 `model.bin` into named numpy arrays, and map a Whisper one onto transformers' names.

The file layout is the one CTranslate2's own `specs/model_spec.py` writes (`ModelSpec._serialize`), binary
version 6, all little-endian:

    u32 binary version | string spec name | u32 spec revision | u32 number of variables
    per variable: string name | u8 rank | u32 dims[rank] | u8 dtype id | u32 byte count | raw bytes
    u32 number of aliases | per alias: string alias | string name it points to
    (a string: u16 length including a final NUL, the UTF-8 bytes, the NUL)

dtype ids follow CTranslate2's DataType enum: float32, int8, int16, int32, float16, bfloat16. A quantised
linear weight (int8 or int16) comes with a float32 `<layer>/weight_scale` per output row, and the weight is
`quantised / scale` (`dequantise`). Whisper's variable names are those of `specs/whisper_spec.py`
(`WhisperSpec`: a conv front end and a transformer encoder, a transformer decoder); the converter
(`converters/transformers.py`, `WhisperLoader`) fuses the query, key and value projections of self-attention
into `linear_0` (the key projection has no bias, so its third of the fused bias is zero) and the key and value
projections of cross-attention into `linear_1`. `whisper_state_dict` undoes both.
"""

from __future__ import annotations

import re
import struct
from typing import Iterable

import numpy as np

DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")  # CTranslate2's DataType enum, in order
SUPPORTED_VERSIONS = (5, 6)  # binary versions with a revision field (CTranslate2 >= 2.x)


class CT2FormatError(ValueError):
    """The bytes are not a CTranslate2 model this reader understands; the message says where."""


def read_model(data: bytes | memoryview) -> tuple[str, dict[str, np.ndarray], dict[str, str]]:
    """(spec name, {variable: array}, {alias: variable}) of a CTranslate2 model.bin given as bytes.

    Arrays are views into `data` where the dtype allows (bfloat16 is widened to float32)."""
    view = memoryview(data)
    pos = 0

    def unpack(fmt: str):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(view):
            raise CT2FormatError(f"model.bin ends at byte {len(view)} inside a header (wanted {size} bytes at {pos})")
        value = struct.unpack_from(fmt, view, pos)[0]
        pos += size
        return value

    def string() -> str:
        nonlocal pos
        length = unpack("<H")
        raw = bytes(view[pos:pos + length])
        pos += length
        return raw[:-1].decode("utf-8")

    version = unpack("<I")
    if version not in SUPPORTED_VERSIONS:
        raise CT2FormatError(f"model.bin has binary version {version}; this reader knows {SUPPORTED_VERSIONS}")
    spec = string()
    unpack("<I")  # the spec's revision
    variables: dict[str, np.ndarray] = {}
    for _ in range(unpack("<I")):
        name = string()
        shape = tuple(unpack("<I") for _ in range(unpack("<B")))
        type_id = unpack("<B")
        num_bytes = unpack("<I")
        if type_id >= len(DTYPES):
            raise CT2FormatError(f"variable {name!r} has unknown dtype id {type_id}")
        if pos + num_bytes > len(view):
            raise CT2FormatError(f"variable {name!r} runs past the end of model.bin ({pos + num_bytes} > {len(view)})")
        variables[name] = _array(view[pos:pos + num_bytes], DTYPES[type_id], shape, name)
        pos += num_bytes
    aliases = {}
    for _ in range(unpack("<I")):
        alias = string()
        aliases[alias] = string()
    return spec, variables, aliases


def _array(raw: memoryview, dtype: str, shape: tuple, name: str) -> np.ndarray:
    if dtype == "bfloat16":  # numpy has no bfloat16: its 16 bits are the top half of a float32
        array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        array = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
    expected = int(np.prod(shape)) if shape else 1
    if array.size != expected:
        raise CT2FormatError(f"variable {name!r}: {array.size} values for shape {shape}")
    return array.reshape(shape)


def dequantise(variables: dict[str, np.ndarray], name: str) -> np.ndarray:
    """Variable `name` as float32: a quantised weight divided by its per-row `weight_scale`."""
    value = variables[name]
    if value.dtype in (np.int8, np.int16):
        scale_name = name.rsplit("/", 1)[0] + "/weight_scale"
        if scale_name not in variables:
            raise CT2FormatError(f"{name} is {value.dtype} but model.bin has no {scale_name} to dequantise it")
        scale = variables[scale_name].astype(np.float32)
        return value.astype(np.float32) / scale.reshape(-1, *([1] * (value.ndim - 1)))
    return value.astype(np.float32)


def count_layers(variables: Iterable[str], prefix: str) -> int:
    """How many `<prefix>/layer_<i>/...` blocks the variable names hold."""
    pattern = re.compile(re.escape(prefix) + r"/layer_(\d+)/")
    found = {int(m.group(1)) for m in map(pattern.match, variables) if m}
    if found != set(range(len(found))):
        raise CT2FormatError(f"{prefix} layers are not numbered 0..n-1: {sorted(found)}")
    return len(found)


def _scalar(variables: dict, name: str) -> int:
    if name not in variables:
        raise CT2FormatError(f"model.bin has no {name}")
    return int(variables[name].reshape(-1)[0])


def whisper_dims(variables: dict[str, np.ndarray]) -> dict:
    """The WhisperConfig sizes a Whisper spec's variables imply."""
    embed = variables["decoder/embeddings/weight"]
    return {
        "vocab_size": embed.shape[0],
        "d_model": embed.shape[1],
        "num_mel_bins": variables["encoder/conv1/weight"].shape[1],
        "encoder_layers": count_layers(variables, "encoder"),
        "decoder_layers": count_layers(variables, "decoder"),
        "encoder_attention_heads": _scalar(variables, "encoder/num_heads"),
        "decoder_attention_heads": _scalar(variables, "decoder/num_heads"),
        "encoder_ffn_dim": variables["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        "decoder_ffn_dim": variables["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        "max_source_positions": variables["encoder/position_encodings/encodings"].shape[0],
        "max_target_positions": variables["decoder/position_encodings/encodings"].shape[0],
    }


def whisper_state_dict(variables: dict[str, np.ndarray], aliases: dict[str, str]) -> dict[str, np.ndarray]:
    """transformers `WhisperForConditionalGeneration` parameter name -> float32 array."""
    if variables.get("decoder/scale_embeddings") is not None and bool(variables["decoder/scale_embeddings"].item()):
        raise CT2FormatError("decoder/scale_embeddings is set: not a Whisper conversion (Whisper does not scale them)")
    get = lambda name: dequantise(variables, aliases.get(name, name))
    d = whisper_dims(variables)["d_model"]
    out: dict[str, np.ndarray] = {}

    def linear(hf: str, ct: str):
        out[f"{hf}.weight"] = get(f"{ct}/weight")
        out[f"{hf}.bias"] = get(f"{ct}/bias")

    def norm(hf: str, ct: str):
        out[f"{hf}.weight"] = get(f"{ct}/gamma")
        out[f"{hf}.bias"] = get(f"{ct}/beta")

    def self_attention(hf: str, ct: str):
        weight, bias = get(f"{ct}/linear_0/weight"), get(f"{ct}/linear_0/bias")  # rows: q | k | v
        for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            out[f"{hf}.{proj}.weight"] = weight[i * d:(i + 1) * d]
            if proj != "k_proj":  # Whisper's key projection has no bias (its third of the fused bias is zero)
                out[f"{hf}.{proj}.bias"] = bias[i * d:(i + 1) * d]
        linear(f"{hf}.out_proj", f"{ct}/linear_1")

    def cross_attention(hf: str, ct: str):
        linear(f"{hf}.q_proj", f"{ct}/linear_0")
        weight, bias = get(f"{ct}/linear_1/weight"), get(f"{ct}/linear_1/bias")  # rows: k | v
        out[f"{hf}.k_proj.weight"], out[f"{hf}.v_proj.weight"] = weight[:d], weight[d:]
        out[f"{hf}.v_proj.bias"] = bias[d:]
        linear(f"{hf}.out_proj", f"{ct}/linear_2")

    for side in ("encoder", "decoder"):
        hf = f"model.{side}"
        out[f"{hf}.embed_positions.weight"] = get(f"{side}/position_encodings/encodings")
        norm(f"{hf}.layer_norm", f"{side}/layer_norm")
        for i in range(count_layers(variables, side)):
            layer, ct = f"{hf}.layers.{i}", f"{side}/layer_{i}"
            self_attention(f"{layer}.self_attn", f"{ct}/self_attention")
            norm(f"{layer}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
            if side == "decoder":
                cross_attention(f"{layer}.encoder_attn", f"{ct}/attention")
                norm(f"{layer}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
            linear(f"{layer}.fc1", f"{ct}/ffn/linear_0")
            linear(f"{layer}.fc2", f"{ct}/ffn/linear_1")
            norm(f"{layer}.final_layer_norm", f"{ct}/ffn/layer_norm")
    for conv in ("conv1", "conv2"):
        linear(f"model.encoder.{conv}", f"encoder/{conv}")
    out["model.decoder.embed_tokens.weight"] = get("decoder/embeddings/weight")
    out["proj_out.weight"] = get("decoder/projection/weight")
    return out
