"""How much memory a model needs and how much the app may give models: the figures the model cache
(`decoding.model_cache`) checks before it loads anything.

A model's need is estimated before any weights are downloaded: from the hub's safetensors metadata
(its parameter count), else from the sizes of its weight files (`.bin`, `.pt`, `.safetensors`, on
the hub or in a local folder) and the dtype they are stored in (the config's `torch_dtype` or `dtype`). Either
way the need is the parameters times the bytes per parameter of the dtype the model will run in,
plus OVERHEAD for buffers and activations. Unknown (no metadata, hub unreachable): None, and the
size measured after loading decides.

Glossary
    need      estimated bytes a model takes once loaded, in the dtype it will run in
    budget    bytes all cached models may take together (DECODING_LAB_MODEL_CACHE_MB)
    free      memory the device has available now (MemAvailable, or the GPUs' free memory)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from decoding.env import hub_offline_forced

CACHE_MB_ENV = "DECODING_LAB_MODEL_CACHE_MB"  # bytes all loaded models may take together, in MB
DEFAULT_SHARE = 0.6  # the default budget: this share of the machine's memory (the GPUs' on CUDA)
OVERHEAD = 1.15  # weights plus ~15% for buffers and activations
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
STORED_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1}  # config torch_dtype
QUANTIZED_BYTES = {"8bit": 1.0, "4bit": 0.5}


def total_memory_bytes() -> int:
    """The machine's memory (MemTotal), or the GPUs' total on CUDA; 0 when unknown."""
    if torch.cuda.is_available():
        return sum(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
    return _meminfo("MemTotal")


def available_memory_bytes(device: torch.device) -> int:
    """Memory free for a model now (MemAvailable, or the GPUs' free memory); 0 when unknown."""
    if device.type == "cuda":
        return sum(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count()))
    return _meminfo("MemAvailable")


def _meminfo(field: str) -> int:
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info[field].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 0


def budget_bytes() -> int:
    """What all cached models may take together: DECODING_LAB_MODEL_CACHE_MB, else DEFAULT_SHARE of the
    machine's memory (8 GiB where that is unknown)."""
    raw = os.environ.get(CACHE_MB_ENV, "").strip()
    if not raw:
        return int(DEFAULT_SHARE * total_memory_bytes()) or 8 * 2**30
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"environment variable {CACHE_MB_ENV} must be a number of MB, got {raw[:40]!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"environment variable {CACHE_MB_ENV} must be a positive number of MB, got {raw[:40]!r}")
    return int(value * 1e6)


def bytes_per_parameter(dtype: torch.dtype, quantization: str = "none") -> float:
    return QUANTIZED_BYTES.get(quantization, torch.finfo(dtype).bits / 8 if dtype.is_floating_point else 4)


def measured_bytes(model: torch.nn.Module) -> int:
    """Bytes of a loaded model's parameters and buffers."""
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def estimate_hub_bytes(hub_id: str, dtype: torch.dtype, quantization: str = "none") -> int | None:
    """A hub model's need (see the module docstring); None when the hub cannot tell (offline)."""
    if hub_offline_forced():
        return None
    count = hub_parameter_count(hub_id)
    if count is None:
        files = hub_weight_bytes(hub_id)
        if files is None:
            return None
        count = files / STORED_BYTES.get(hub_stored_dtype(hub_id), 4)
    return int(count * bytes_per_parameter(dtype, quantization) * OVERHEAD)


def estimate_folder_bytes(folder: Path, dtype: torch.dtype) -> int | None:
    """A model folder's need, from its weight files and its config's dtype; None without weight files."""
    try:
        files = sum(p.stat().st_size for p in Path(folder).iterdir() if p.name.endswith(WEIGHT_SUFFIXES))
        stored = stored_dtype(json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        return None
    count = files / STORED_BYTES.get(str(stored), 4)
    return int(count * bytes_per_parameter(dtype) * OVERHEAD) if files else None


def stored_dtype(config: dict) -> str | None:
    """How a config says its weights are stored: `torch_dtype`, or `dtype` (newer transformers)."""
    value = config.get("torch_dtype") or config.get("dtype")
    return str(value) if value else None


def hub_parameter_count(hub_id: str) -> int | None:
    """Parameters of a hub model with safetensors weights (read from the files' headers), else None."""
    try:
        from huggingface_hub import get_safetensors_metadata

        return int(sum(get_safetensors_metadata(hub_id).parameter_count.values()))
    except Exception:  # noqa: BLE001 - no safetensors metadata: the weight files' sizes are next
        return None


def hub_weight_bytes(hub_id: str) -> int | None:
    """Total size of a hub model's weight files (`.bin` and the rest), else None. Where a repository ships
    one format twice (`.bin` and `.safetensors`), the larger set counts (the loader takes one)."""
    try:
        from huggingface_hub import HfApi

        siblings = HfApi().model_info(hub_id, files_metadata=True).siblings or []
    except Exception:  # noqa: BLE001 - unknown: the size measured after loading decides
        return None
    by_suffix: dict[str, int] = {}
    for s in siblings:
        suffix = next((x for x in WEIGHT_SUFFIXES if s.rfilename.endswith(x)), None)
        if suffix and s.size:
            by_suffix[suffix] = by_suffix.get(suffix, 0) + int(s.size)
    return max(by_suffix.values()) if by_suffix else None


def hub_stored_dtype(hub_id: str) -> str | None:
    """`torch_dtype` (or `dtype`) of a hub model's config (how its weight files store a parameter), else None."""
    try:
        from huggingface_hub import hf_hub_download

        with open(hf_hub_download(hub_id, "config.json"), encoding="utf-8") as f:
            return stored_dtype(json.load(f))
    except Exception:  # noqa: BLE001 - unknown: float32 (4 bytes) is assumed, the larger estimate
        return None
