"""Downloads that are written only when the user asks, into one folder that cleans itself.

A run writes no file. An export button writes its file when clicked (`download`) and the browser
downloads it at once (`wire_download`). Every export goes into its own subfolder of the app's export
folder, and each write first sweeps that folder (`sweep`): exports older than the age limit go, then
the oldest until the folder is under the size limit. The app sweeps once at start-up too.

Glossary
    export folder   DECODING_LAB_EXPORT_DIR; by default `decoding-lab-exports` inside Gradio's own cache
                    folder, so Gradio serves the file from there instead of keeping a second copy (and its
                    `delete_cache` ages it out as well)
    entry           one subfolder of the export folder: one export, its age is its modification time
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import gradio as gr
from gradio.utils import get_upload_folder

from decoding.env import env_int
from decoding.events import Trace
from visualizers import entropy_figure, figure_to_html, token_table
from visualizers.tokens import csv_safe

CACHE_SWEEP_S = 600  # how often Gradio looks for expired files in its cache (at most; see `gradio_cache_policy`)
NOTHING_YET = "Nothing to export yet: generate a run (or replay a trace) first."
NO_OTHER_RUN = "No comparison run to export: choose one under “Compare with” and Generate."
STILL_RUNNING = "This run is still going: export it when it has finished (or after Stop)."
HTML_NOTE = ("The chart (HTML) loads plotly.js from cdn.plot.ly when opened, so it is a few kB instead of 4.8 MB; "
             "offline, replay the trace (JSON) in the app.")


def export_dir() -> Path:
    """Where exports are written (DECODING_LAB_EXPORT_DIR, default: inside Gradio's cache folder)."""
    raw = os.environ.get("DECODING_LAB_EXPORT_DIR", "").strip()
    return Path(raw) if raw else Path(get_upload_folder()) / "decoding-lab-exports"


def export_max_age_s() -> int:
    """How long an export is kept, in seconds (DECODING_LAB_EXPORT_MAX_AGE_S, default one hour)."""
    return env_int("DECODING_LAB_EXPORT_MAX_AGE_S", 3600)


def export_max_bytes() -> int:
    """The most the export folder may hold (DECODING_LAB_EXPORT_MAX_MB, in MiB, default 200)."""
    return env_int("DECODING_LAB_EXPORT_MAX_MB", 200) * 2**20


def gradio_cache_policy() -> tuple[int, int]:
    """Gradio's `delete_cache` (how often to look, maximum age): its copies of uploads and of exports
    written outside its cache live as long as exports do."""
    age = export_max_age_s()
    return min(age, CACHE_SWEEP_S), age


def _size(path: Path) -> int:
    """Bytes under `path` (0 for what another sweep removed meanwhile)."""
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    except FileNotFoundError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return float("-inf")


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)  # another request's sweep may be removing it too
    else:
        path.unlink(missing_ok=True)


def sweep(folder: Path | None = None, *, max_age_s: float | None = None, max_bytes: int | None = None,
          now: float | None = None, exclude: set[Path] = frozenset()) -> list[Path]:
    """Delete the entries of the export folder older than `max_age_s`, then the oldest until the rest
    holds at most `max_bytes`; returns what was deleted (defaults: the environment's limits). Entries
    whose resolved path is in `exclude` are neither counted nor deleted (the upload cache's sweep leaves
    the export folder inside it alone)."""
    folder = export_dir() if folder is None else folder
    max_age_s = export_max_age_s() if max_age_s is None else max_age_s
    max_bytes = export_max_bytes() if max_bytes is None else max_bytes
    now = time.time() if now is None else now
    if not folder.is_dir():
        return []
    entries = sorted((e for e in folder.iterdir() if e.resolve() not in exclude), key=_mtime)  # oldest first
    deleted = [e for e in entries if now - _mtime(e) > max_age_s]
    kept = [e for e in entries if e not in deleted]
    total = sum(_size(e) for e in kept)
    for entry in kept:
        if total <= max_bytes:
            break
        total -= _size(entry)
        deleted.append(entry)
    for entry in deleted:
        _remove(entry)
    return deleted


def _file_name(trace: Trace, what: str, suffix: str) -> str:
    """<model>-<strategy><suffix>-<what> (the extension comes with the writer), in characters every file
    system accepts."""
    first = trace.events[0]  # RunStarted, or a family's own start (a speech run names its policy)
    run = getattr(first, "strategy", None) or getattr(first, "policy", first.kind)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{getattr(first, 'model', 'run')}-{run}{suffix}")
    return f"{stem}-{what}"


def _write_tokens(trace: Trace, path: Path) -> None:
    # a token "=HYPERLINK(...)" stays text; CRLF rows (RFC 4180) quote a cell holding a lone "\r" too, so a token
    # cannot end its row early and start the next one with a formula
    token_table(trace).map(csv_safe).to_csv(path, index=False, lineterminator="\r\n")


def _write_entropy(trace: Trace, path: Path) -> None:
    path.write_text(figure_to_html(entropy_figure(trace), include_plotlyjs="cdn"), encoding="utf-8")


WRITERS: dict[str, tuple[str, Callable[[Trace, Path], None]]] = {
    "trace": (".json", Trace.save),  # replays in the app
    "tokens": (".csv", _write_tokens),  # one row per token step
    "entropy": (".html", _write_entropy),  # the entropy chart; plotly.js from its CDN (HTML_NOTE)
}


def export_file(trace: Trace, what: str = "trace", suffix: str = "") -> str:
    """Write `trace` as `what` (one of WRITERS) into a fresh entry of the export folder, after a sweep;
    returns the file's path."""
    ext, write = WRITERS[what]
    sweep()
    folder = export_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=folder)) / (
        _file_name(trace, what, suffix) + ext)
    write(trace, path)
    return str(path)


def download(trace: Trace | None, what: str = "trace", missing: str = NOTHING_YET, suffix: str = "") -> str | None:
    """An export button's callback: the file to download, or None with a warning saying why there is
    none (`missing` when there is no run, or the run is still going)."""
    if trace is None or not trace.events or not trace.events[0].opens_run:
        gr.Warning(missing)
        return None
    if trace.finish is None and not trace.ended:
        gr.Warning(STILL_RUNNING)
        return None
    return export_file(trace, what, suffix)


def wire_download(button: gr.Button, export: Callable[..., str | None], inputs: list) -> gr.DownloadButton:
    """Clicking `button` runs `export(*inputs)` (a file path, or None) and then downloads that file.

    Gradio's DownloadButton downloads the file it already holds when clicked, before its own click
    event could write one; so the visible button is a plain one, the file goes to a hidden
    DownloadButton, and a browser-side step clicks that once the file is there."""
    target = f"{button.elem_id}-file"
    file = gr.DownloadButton(visible="hidden", elem_id=target)
    button.click(export, inputs, file, show_progress="hidden", api_visibility="undocumented").success(
        None, js=f"() => document.getElementById({target!r})?.click()")
    return file


__all__ = ["HTML_NOTE", "NOTHING_YET", "NO_OTHER_RUN", "download", "export_dir", "export_file", "export_max_age_s",
           "export_max_bytes", "gradio_cache_policy", "sweep", "wire_download"]
