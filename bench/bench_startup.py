"""`python app.py` until the default model is ready: converting the GGUF at every start (what the app did
before issue 33, DECODING_LAB_CONVERTED_COPY=0) against reading the converted copy a first start keeps.

Each round starts the app twice, once per way, in alternating order, as a user does (a process of its own,
offline, the default model preloaded) and times from launch to the page being served (HTTP 200) and to the
server's log saying "smollm2-135m ready" (it prints the same line the page shows). A first start on a fresh
cache (the GGUF present, as after its download, nothing converted) is timed once, before the rounds. Wall
clock: start-up is what a user waits for; the ratio of medians is what to read.

    python bench/bench_startup.py [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decoding import embedded  # noqa: E402 (after the path)
from decoding.models import DEFAULT_MODEL  # noqa: E402
from decoding.processes import free_port, stop  # noqa: E402

WAYS = {"convert every start": "0", "converted copy": "1"}  # DECODING_LAB_CONVERTED_COPY
LIMIT_S = 300


def fresh_cache(folder: Path) -> Path:
    """A cache holding the default model's GGUF (as after its first download) and nothing converted from it."""
    source = Path(embedded.ensure_gguf(embedded.SMOLLM2_135M, lambda m: None))
    target = folder / f"{embedded.SMOLLM2_135M.package}-{embedded.SMOLLM2_135M.version}" / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copyfile(source, target)
    return folder


def start_app(folder: Path, cache: Path, env: dict | None = None, on_served=None) -> dict:
    """Start `python app.py` and time it: {"served_s", "ready_s"} after launch. `on_served(url)` runs once
    the page answers (a browser test looks at the page while the model loads). The app is stopped after."""
    port = free_port()
    full = os.environ | {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
                         "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1",
                         "DECODING_LAB_EXPORT_DIR": str(folder / "exports"), "DECODING_LAB_CACHE": str(cache)}
    full.pop("DECODING_LAB_PRELOAD", None)
    full |= env or {}
    log = folder / f"server-{port}.log"
    url = f"http://127.0.0.1:{port}/"
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=full, stdout=out, stderr=subprocess.STDOUT)
    out: dict = {}
    try:
        while "served_s" not in out or "ready_s" not in out:
            if process.poll() is not None or time.monotonic() - started > LIMIT_S:
                raise RuntimeError(f"app.py did not get ready in {LIMIT_S} s (exit {process.poll()}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            if "served_s" not in out:
                try:
                    with urllib.request.urlopen(url, timeout=5) as response:
                        if response.status == 200:
                            out["served_s"] = time.monotonic() - started
                            if on_served is not None:
                                on_served(url)
                except OSError:
                    pass
            if "ready_s" not in out and f"{DEFAULT_MODEL} ready" in log.read_text(errors="replace"):
                out["ready_s"] = time.monotonic() - started
            time.sleep(0.1)
        return out
    finally:
        stop(process)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print only the summary, as one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cache = fresh_cache(folder / "cache")
        first = start_app(folder, cache)  # converts, and keeps the copy for the rounds
        if not args.json:
            print(json.dumps({"first start on a fresh cache": first}), flush=True)
        runs: dict[str, list[dict]] = {way: [] for way in WAYS}
        for r in range(args.rounds):
            for way in WAYS if r % 2 == 0 else list(WAYS)[::-1]:
                runs[way].append(start_app(folder, cache, {"DECODING_LAB_CONVERTED_COPY": WAYS[way]}))
            if not args.json:
                print(json.dumps({"round": r} | {way: runs[way][-1] for way in WAYS}), flush=True)
    median = {way: {key: round(statistics.median(x[key] for x in runs[way]), 1) for key in ("served_s", "ready_s")}
              for way in WAYS}
    summary = {"model": DEFAULT_MODEL, "rounds": args.rounds,
               "first_start_fresh_cache": {k: round(v, 1) for k, v in first.items()},
               "median": median,
               "ready_range_s": {way: [round(min(x["ready_s"] for x in runs[way]), 1),
                                       round(max(x["ready_s"] for x in runs[way]), 1)] for way in WAYS},
               "ready_ratio": round(median["convert every start"]["ready_s"] / median["converted copy"]["ready_s"], 2)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
