"""A class on one server: N students behind one address open the app within a second, each runs a strategy.

Starts `python app.py` (a process of its own, offline, on a free loopback port, the default model preloaded)
once per column, and sends `--students` visitors from one address (127.0.0.1, as a school's NAT) within one
second, each its own session, over real HTTP: the `/generate` endpoint through plain HTTP streaming
(`POST /gradio_api/call/generate`, then its server-sent events), `--tokens` tokens each, a mix of strategies
(greedy, sampling with top-p, min-p, typical, top-k, mirostat). Before the class, the same server runs a few
lone runs one after another (the median is "one lone run"). Per column it prints:

    refused            visitors whose request the server refused (HTTP 429 / 503) or ended with an error
    first_token_p50_s  time from a visitor's request to its first token event, median (and p95) over the class
    class_over_lone    the whole class's time (first request to last run done) / one lone run's time

Columns: the app with its batch engine on (`DECODING_LAB_BATCH=1`; off by default while it is new) and one run at a
time (`DECODING_LAB_BATCH=0`, today's default); a build whose worker does not read the switch
(`ui.batch_switch.ENGINE_HONOURS_SWITCH` false) serves both one at a time, and the JSON says so. The library
column is transformers' continuous batching (`generate_batch`,
in this process, no HTTP, greedy for every row: its per-request sampling is not the app's strategies), timed
the same way from its requests' own timestamps, with `--library` only: on this CPU its paged path took 42 s for
4 requests of 32 tokens of tiny-ar (the app: under a second) and 30 requests of SmolLM2 did not end within 5
minutes, so by default the column says so instead of holding the benchmark up.

    python bench/bench_classroom.py [--students 30] [--tokens 32] [--model smollm2-135m] [--library]
                                    [--quick] [--json]

`--quick`: 3 students, 4 tokens, tiny-ar (a smoke test, tests/test_bench_smoke.py).
Wall-clock figures on a shared machine: read the ratios, and rerun before comparing two builds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decoding.models import DEFAULT_MODEL  # noqa: E402 (after the path)
from decoding.processes import free_port, stop  # noqa: E402
from decoding.serving import TEXT_PROMPTS, percentile  # noqa: E402
from ui.batch_switch import ENGINE_HONOURS_SWITCH  # noqa: E402

START_S = 300  # python app.py until its default model is ready, on a loaded 2-core machine
VISIT_S = 600  # one visitor's request, queue included
MIX = [("greedy", {}), ("sample", {"top_p": 0.9}), ("sample", {"min_p": 0.1}), ("mirostat", {"tau": 3.0}),
       ("sample", {"temperature": 0.7, "top_k": 40}), ("sample", {"typical_p": 0.9})]
QUESTIONS = ["Why is the sky blue?", "What is a prime number?", "Name a fruit that is red.", "How do birds fly?",
             "What is the capital of France?", "Why do we sleep?", "What is rain made of?", "How far is the Moon?"]
COLUMNS = {"batched": "1", "one_at_a_time": "0"}  # DECODING_LAB_BATCH
LIBRARY_SKIPPED = ("not run (--library runs it): transformers 5.23's continuous batching on CPU took 42 s for 4 "
                   "requests of 32 tokens of tiny-ar, and 30 of SmolLM2 did not end within 5 minutes")


def visit(url: str, model: str, strategy: str, params: dict, prompt: str, tokens: int, seed: int, chat: bool,
          headers: dict | None = None) -> dict:
    """One visitor's run through `/generate` over plain HTTP (a session of its own), timed from its request:
    {"status", "refused", "first_token_s", "done_s", "token_ids", "error"}."""
    import httpx

    out = {"status": None, "refused": False, "first_token_s": None, "done_s": None, "token_ids": None, "error": None}
    start = time.monotonic()
    with httpx.Client(timeout=VISIT_S, headers=headers or {}) as http:
        joined = http.post(url + "gradio_api/call/generate",
                           json={"data": [model, strategy, prompt, tokens, seed, json.dumps(params), chat]})
        out["status"], out["joined_s"] = joined.status_code, time.monotonic() - start
        if joined.status_code != 200:
            out["refused"], out["error"] = True, joined.text[:300]
            return out
        event = None
        with http.stream("GET", url + f"gradio_api/call/generate/{joined.json()['event_id']}") as stream:
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    data = line.split(":", 1)[1].strip()
                    if event == "error":
                        out["refused"], out["error"] = True, data[:300]
                        return out
                    value = (json.loads(data) or [None])[0] if data and data != "null" else None
                    if (isinstance(value, dict) and value.get("kind") == "token" and out["first_token_s"] is None):
                        out["first_token_s"] = time.monotonic() - start
                    if event == "complete":
                        out["done_s"] = time.monotonic() - start
                        out["token_ids"] = value.get("token_ids") if isinstance(value, dict) else None
                        return out
    out["refused"], out["error"] = True, "the stream ended without a result"
    return out


def plan(students: int, model: str, tokens: int) -> list[dict]:
    """Each student's request: a strategy of the mix, a prompt, a seed of its own."""
    chat = model == DEFAULT_MODEL or "smollm" in model
    prompts = QUESTIONS if chat else TEXT_PROMPTS
    return [{"model": model, "strategy": MIX[i % len(MIX)][0], "params": MIX[i % len(MIX)][1],
             "prompt": prompts[i % len(prompts)], "tokens": tokens, "seed": i, "chat": chat} for i in range(students)]


def start_app(folder: Path, model: str, batch: str, env: dict | None = None, tries: int = 3):
    """`python app.py` on a free loopback port; (process, url, log) once it answers and `model` is warm. Gradio
    exits at launch when its own first request to the page takes over 3 s (a loaded machine): tried again."""
    for attempt in range(tries):
        try:
            return _start_app(folder, model, batch, env)
        except RuntimeError:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def _start_app(folder: Path, model: str, batch: str, env: dict | None = None):
    import urllib.request

    port = free_port()
    full = os.environ | {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
                         "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1",
                         "DECODING_LAB_EXPORT_DIR": str(folder / "exports"), "GRADIO_TEMP_DIR": str(folder / "gradio"),
                         "DECODING_LAB_BATCH": batch, "DECODING_LAB_SHOW_TEST_MODELS": "1",
                         "DECODING_LAB_PRELOAD": "1" if model == DEFAULT_MODEL else "0"} | (env or {})
    log = folder / f"server-{port}.log"
    url = f"http://127.0.0.1:{port}/"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=full, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_S
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise RuntimeError(f"app.py did not start in {START_S} s (exit {process.poll()}):\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200 and (full["DECODING_LAB_PRELOAD"] == "0"
                                               or f"{DEFAULT_MODEL} ready" in log.read_text(errors="replace")):
                    return process, url, log
        except OSError:
            pass
        time.sleep(0.5)


def lone_runs(url: str, requests: list[dict], rounds: int = 3) -> list[float]:
    """The first `rounds` requests of the class, each alone, one after another: their times (s)."""
    times = []
    for request in requests[:rounds]:
        result = visit(url, **request)
        if result["refused"]:
            raise RuntimeError(f"a lone run failed: {result['error']}")
        times.append(result["done_s"])
    return times


def run_class(url: str, requests: list[dict]) -> tuple[list[dict], float]:
    """Every request from its own thread, the i-th sent i/N of a second after the first: (results, class time)."""
    results: list[dict | None] = [None] * len(requests)
    start = time.monotonic()

    def student(i: int) -> None:
        time.sleep(max(0.0, start + i / len(requests) - time.monotonic()))
        sent = time.monotonic()
        try:
            results[i] = visit(url, **requests[i]) | {"sent_s": sent - start}
        except Exception as err:  # noqa: BLE001 - a visitor that got no answer counts as refused
            results[i] = {"refused": True, "error": f"{type(err).__name__}: {err}", "sent_s": sent - start}

    threads = [threading.Thread(target=student, args=(i,), daemon=True) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(VISIT_S + 5)
    done = [r["sent_s"] + r["done_s"] for r in results if r and not r["refused"] and r.get("done_s") is not None]
    return [r or {"refused": True, "error": "no answer in time"} for r in results], (max(done) if done else float("nan"))


def summarise(results: list[dict], class_s: float, lone: list[float]) -> dict:
    firsts = sorted(r["first_token_s"] for r in results if not r["refused"] and r.get("first_token_s") is not None)
    lone_s = statistics.median(lone)
    errors = sorted({r["error"][:120] for r in results if r["refused"] and r.get("error")})
    joined = [r["sent_s"] + r["joined_s"] for r in results if r.get("joined_s") is not None]
    return {"refused": sum(r["refused"] for r in results),
            "all_joined_by_s": round(max(joined), 2) if joined else None,  # the last request's answer to its POST
            "first_token_p50_s": round(percentile(firsts, 50), 2), "first_token_p95_s": round(percentile(firsts, 95), 2),
            "class_over_lone": round(class_s / lone_s, 2), "class_s": round(class_s, 2), "lone_s": round(lone_s, 2),
            "refusals": errors[:3]}


def app_column(folder: Path, requests: list[dict], batch: str, env: dict | None = None) -> dict:
    process, url, _ = start_app(folder, requests[0]["model"], batch, env)
    try:
        visit(url, **requests[0])  # warm-up: the model loaded (tiny ones load on first use), kernels set up
        lone = lone_runs(url, requests)
        results, class_s = run_class(url, requests)
        return summarise(results, class_s, lone)
    finally:
        stop(process)


def library_column(requests: list[dict]) -> dict:
    """transformers' continuous batching of the same prompts (greedy), in this process: first token and class time
    from the library's own per-request timestamps."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    from decoding.models import load_model

    loaded = load_model(requests[0]["model"], dtype="float32", progress=None)
    # the app's CPU attention for grouped-query heads (decoding/attention.py) is not one the library batches with
    loaded.model.set_attn_implementation("sdpa")
    tok = loaded.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], add_generation_prompt=True)
               if r["chat"] else tok(r["prompt"])["input_ids"] for r in requests]
    prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
    config = GenerationConfig(max_new_tokens=requests[0]["tokens"], do_sample=False,
                              eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id or tok.eos_token_id)
    # the cache bounded explicitly: left to itself the library sizes it from free memory (40% of this machine's)
    cache = dict(page_size=256, num_blocks=2 * len(prompts) + 4, max_batch_tokens=4096)

    def batch(inputs: list[list[int]]) -> tuple[list[float], float]:
        start = time.perf_counter()
        out = loaded.model.generate_batch(inputs, generation_config=config, record_timestamps=True, progress_bar=False,
                                          warmup=False, continuous_batching_config=ContinuousBatchingConfig(**cache))
        wall = time.perf_counter() - start
        firsts = sorted(o.timestamps[0] - o.created_time for o in out.values() if o.timestamps)
        return firsts, wall

    batch(prompts[:1])  # warm-up
    lone = [batch([p])[1] for p in prompts[:3]]
    firsts, class_s = batch(prompts)
    return {"refused": 0, "first_token_p50_s": round(percentile(firsts, 50), 2),
            "first_token_p95_s": round(percentile(firsts, 95), 2),
            "class_over_lone": round(class_s / statistics.median(lone), 2), "class_s": round(class_s, 2),
            "lone_s": round(statistics.median(lone), 2),
            "note": "in-process, no HTTP, greedy rows; all requests added at once (not spread over a second)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--library", action="store_true", help="add transformers' continuous batching (slow on CPU)")
    parser.add_argument("--quick", action="store_true", help="3 students, 4 tokens, tiny-ar")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.quick:
        args.students, args.tokens, args.model = 3, 4, "tiny-ar"
    requests = plan(args.students, args.model, args.tokens)
    columns: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, batch in COLUMNS.items():
            columns[name] = app_column(Path(tmp), requests, batch)
            if not args.json:
                print(json.dumps({name: columns[name]}), flush=True)
    if not args.library:
        columns["transformers_generate_batch"] = {"unavailable": LIBRARY_SKIPPED}
    else:
        try:
            columns["transformers_generate_batch"] = library_column(requests)
        except Exception as err:  # noqa: BLE001 - the library's CPU path is young: say why the column is missing
            columns["transformers_generate_batch"] = {"unavailable": f"{type(err).__name__}: {str(err)[:200]}"}
    keys = ("refused", "first_token_p50_s", "first_token_p95_s", "class_over_lone")
    summary = {key: columns["batched"][key] for key in keys} | {
        "students": args.students, "tokens": args.tokens, "model": args.model, "columns": columns,
        "batch_engine": ("DECODING_LAB_BATCH switches the app's batch engine" if ENGINE_HONOURS_SWITCH else
                         "the app has no batch engine yet: both app columns are the one-at-a-time server")}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
