"""The `generate` API endpoint: a run's events as they are produced, then the CLI's `--json` summary.

    from gradio_client import Client
    job = Client("http://127.0.0.1:7860").submit("smollm2-135m", "sample", "Why is the sky blue?", 64, 0,
                                                 '{"top_p": 0.9}', True, api_name="/generate")
    for output in job:            # event dicts: {"kind": "start" | "token" | "beams" | "finish", ...}
        ...
    job.result()                  # {"model", "strategy", "params", "prompt", "text", "token_ids", "stats"}

Every output but the last is one event (`Event.to_dict()`); the last has no "kind": it is
`decoding.__main__.summary(trace)`, exactly what `python -m decoding run --json` prints.

The `compare` endpoint runs 2-4 settings side by side (Compare mode, `decoding/compare.py`):

    job = Client(url).submit("smollm2-135m", "Once upon a time",
                             '[{"strategy": "greedy"}, {"strategy": "sample", "params": {"top_p": 0.9}}]',
                             64, 0, False, api_name="/compare")
    for output in job:            # {"run": i, "kind": ...event}, or {"run": i, "kind": "score", ...}
        ...
    job.result()                  # {"runs": [summary per run], "table": [one row per run]}
The `transcribe` endpoint streams an audio file through a streaming policy (the Streaming speech tab's runs,
`decoding/speech/policies.py`):

    from gradio_client import handle_file
    job = Client(url).submit(handle_file("clip.wav"), "local-agreement", 1.0, '{"max_new_tokens": 96}',
                             "what was said", api_name="/transcribe")
    for output in job:            # {"kind": "speech_start" | "speech_chunk" | "speech_finish", ...}
        ...
    job.result()                  # the speech_finish event: {"text", "committed", "stats", ...}

Its outputs are exactly the lines of `python -m decoding transcribe --json`. The audio is a file uploaded with the
request (`handle_file`), or the server path of one uploaded earlier (`Client.upload_files`); no other path on the
server is read.

`job.cancel()` (`POST /cancel`) answers once the run has stopped, within one model call
(`ui.worker.model_event`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Iterator

import gradio as gr
from gradio.data_classes import FileData

from decoding.__main__ import summary
from decoding.compare import RunScore, parse_settings, table_rows, validate_settings
from decoding.errors import short_repr
from decoding.events import Event, Trace
from decoding.models import DEFAULT_MODEL
from decoding.remote.source import is_remote
from decoding.run import validate_request
from ui.widgets import USER_ERRORS
from ui.worker import (MODEL_CONCURRENCY_ID, LimitReached, check_model, model_event, run_work, runs_at_once,
                       stream_in_thread)
from ui.compare_callbacks import compare_work


def api_error(err: BaseException) -> gr.Error:
    """The engine's message for an API client, as plain text: API errors are never drawn as HTML, so
    unlike the tabs' toasts they carry no HTML entities (`>=`, not `&gt;=`)."""
    return gr.Error(str(err), title="Cannot run this", print_exception=False)


def parse_params(params) -> dict:
    """A strategy's parameters from a JSON object (or its text); "" and None mean none."""
    if params is None or (isinstance(params, str) and not params.strip()):
        return {}
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except json.JSONDecodeError as err:
            raise ValueError(f"`params` must be a JSON object such as {{\"top_p\": 0.9}}, got {params[:80]!r} "
                             f"({err})") from None
        except RecursionError:
            raise ValueError("`params` is nested too deeply: it must be a JSON object of parameter values "
                             "such as {\"top_p\": 0.9}") from None
    if not isinstance(params, dict):
        raise ValueError(f"`params` must be a JSON object such as {{\"top_p\": 0.9}}, got {short_repr(params, 80)}")
    return params


def api_generate(model: str = DEFAULT_MODEL, strategy: str = "greedy", prompt: str = "", max_new_tokens: int = 64,
                 seed: int = 0, params: str = "{}", chat: bool = True) -> Iterator[dict]:
    """Stream a run's events as dicts, then yield the run's summary (as `python -m decoding run --json`).

    Args:
        model: registry name (smollm2-135m, gemma3-270m) or a Hugging Face hub id.
        strategy: any registered strategy (`python -m decoding list`): token strategies, speculative,
            the scaling methods, diffusion.
        prompt: the user's text.
        max_new_tokens: how many tokens to generate at most.
        seed: random seed (sampling strategies).
        params: the strategy's parameters as a JSON object, e.g. {"top_p": 0.9, "temperature": 0.7}.
        chat: apply the model's chat template (when it has one).
    """
    try:
        params = parse_params(params)
        validate_request(prompt, strategy, params, max_new_tokens, seed)
        check_model(model)
    except USER_ERRORS as err:
        raise api_error(err) from None
    trace = Trace()
    work = run_work(model, prompt, strategy=strategy, params=params, max_new_tokens=max_new_tokens, seed=seed,
                    chat=chat)
    try:
        with contextlib.closing(stream_in_thread(work)) as pump:  # on cancel: the worker is waited for
            for batch in pump:
                for item in batch:
                    if isinstance(item, Event):
                        trace.append(item)
                        yield item.to_dict()
    except USER_ERRORS as err:
        raise api_error(err) from None
    yield summary(trace)


def api_compare(model: str = DEFAULT_MODEL, prompt: str = "", settings: str = "[]", max_new_tokens: int = 64,
                seed: int = 0, chat: bool = True) -> Iterator[dict]:
    """Run 2-4 settings side by side on one prompt (interleaved, same seed); stream every run's events,
    then yield {"runs": [each run's `--json` summary], "table": [the comparison table's rows]}.

    Args:
        model: registry name (smollm2-135m, gemma3-270m) or a Hugging Face hub id (a local model).
        prompt: the user's text.
        settings: a JSON list of 2-4 {"strategy": name, "params": {...}, "label": optional text}.
        max_new_tokens: how many tokens each run generates at most.
        seed: the random seed every run starts from.
        chat: apply the model's chat template (when it has one).
    """
    try:
        chosen = parse_settings(settings)
        if is_remote(model):
            raise ValueError("compare runs on a local model: it scores every run's text with the model")
        validate_settings(prompt, chosen, max_new_tokens, seed)
        check_model(model)
    except USER_ERRORS as err:
        raise api_error(err) from None
    traces, scores = [Trace() for _ in chosen], [None] * len(chosen)
    work = compare_work(model, prompt, chosen, "auto", max_new_tokens=max_new_tokens, seed=seed, chat=chat)
    try:
        with contextlib.closing(stream_in_thread(work)) as pump:
            for batch in pump:
                for item in batch:
                    if not isinstance(item, tuple):
                        continue
                    index, what = item
                    if isinstance(what, RunScore):
                        scores[index] = what
                        yield {"run": index, "kind": "score"} | dataclasses.asdict(what)
                    else:
                        traces[index].append(what)
                        yield {"run": index} | what.to_dict()
    except USER_ERRORS as err:
        raise api_error(err) from None
    yield {"runs": [summary(t) for t in traces], "table": table_rows(chosen, traces, scores)}


def uploaded_path(audio) -> Path:
    """The file an API client sent: an uploaded file's FileData (`handle_file`), or the path of a file uploaded
    to this server before; ValueError naming what was given for anything else (no other server path is read)."""
    from gradio.utils import get_upload_folder

    path = audio.get("path") if isinstance(audio, dict) else audio
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"`audio` must be an audio file sent with the request (gradio_client.handle_file(path)), "
                         f"got {short_repr(audio, 80)}")
    resolved, uploads = Path(path).resolve(), Path(get_upload_folder()).resolve()
    if not resolved.is_relative_to(uploads):
        raise ValueError(f"`audio` must be a file sent with the request (gradio_client.handle_file(path)) or one "
                         f"uploaded to this server; the server reads no other path, got {short_repr(path, 80)}")
    if not resolved.is_file():
        raise ValueError(f"`audio` {resolved.name} is not on the server (an upload expires after a while): send "
                         "it again")
    return resolved


def api_transcribe(audio: FileData | str, policy: str = "local-agreement", chunk_s: float = 1.0, params: str = "{}",
                   reference: str = "") -> Iterator[dict]:
    """Stream an audio file through a streaming policy: every event as a dict, the last one the finish, which
    holds "text" (the final transcript) and "committed" (each committed word; its latency is null, since an
    uploaded file has no word times), as `python -m decoding transcribe --json` prints; a run that the app's time limit
    (DECODING_LAB_RUN_LIMIT_S) stopped ends "cancelled" with "time_limit_s" on its finish.

    Args:
        audio: the audio file (WAV, FLAC, OGG; converted to 16 kHz mono by sox), sent with `handle_file`.
        policy: local-agreement or redecode (`python -m decoding list`).
        chunk_s: seconds of audio that arrive at once (0.5-2).
        params: the other parameters as a JSON object, e.g. {"max_new_tokens": 96, "local-agreement.agree": 3}.
        reference: what was said, for the word error rate (optional).
    """
    from decoding.speech.events import SpeechFinished
    from decoding.speech.policies import stream_params, transcribe
    from decoding.speech.whisper import load_whisper
    from ui.speech_callbacks import read_audio_file

    try:
        values = parse_params(params)
        given = sorted({"policy", "chunk_s"} & set(values))
        if given:
            raise ValueError(f"`params` must not hold {', '.join(f'`{k}`' for k in given)}: give it as its own "
                             "argument")
        config = stream_params({**values, "policy": policy, "chunk_s": chunk_s})
        path = uploaded_path(audio)
        samples = read_audio_file(path)
    except USER_ERRORS as err:
        raise api_error(err) from None
    reference = (reference or "").strip()

    def work(emit, should_stop):
        asr = load_whisper()
        for event in transcribe(asr, samples, params=config, reference=reference, source=f"upload: {path.name}",
                                should_stop=should_stop):
            emit(event)

    finish = None  # held back until the worker has ended: the app's time limit is said on it
    try:
        with contextlib.closing(stream_in_thread(work)) as pump:  # on cancel: the worker is waited for
            for batch in pump:
                for item in batch:
                    if isinstance(item, SpeechFinished):
                        finish = item.to_dict()
                    elif isinstance(item, LimitReached) and finish is not None:
                        finish["time_limit_s"] = item.limit_s
                    elif isinstance(item, Event):
                        yield item.to_dict()
    except USER_ERRORS as err:
        raise api_error(err) from None
    if finish is not None:
        yield finish


def register_api() -> None:
    """Add the hidden-from-the-UI, client-callable `/generate`, `/compare` and `/transcribe` endpoints to the
    current Blocks."""
    gr.api(model_event(api_generate), api_name="generate", concurrency_id=MODEL_CONCURRENCY_ID,
           concurrency_limit=runs_at_once())
    gr.api(model_event(api_compare), api_name="compare", concurrency_id=MODEL_CONCURRENCY_ID,
           concurrency_limit=runs_at_once())
    gr.api(model_event(api_transcribe), api_name="transcribe", concurrency_id=MODEL_CONCURRENCY_ID,
           concurrency_limit=runs_at_once())
