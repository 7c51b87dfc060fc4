"""The `generate` API endpoint: a run's events as they are produced, then the CLI's `--json` summary.

    from gradio_client import Client
    job = Client("http://127.0.0.1:7860").submit("smollm2-135m", "sample", "Why is the sky blue?", 64, 0,
                                                 '{"top_p": 0.9}', True, api_name="/generate")
    for output in job:            # event dicts: {"kind": "start" | "token" | "beams" | "finish", ...}
        ...
    job.result()                  # {"model", "strategy", "params", "prompt", "text", "token_ids", "stats"}

Every output but the last is one event (`Event.to_dict()`); the last has no "kind": it is
`decoding.__main__.summary(trace)`, exactly what `python -m decoding run --json` prints.
`job.cancel()` (`POST /cancel`) answers once the run has stopped, within one model call
(`ui.common.model_event`).
"""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

import gradio as gr

from decoding.__main__ import summary
from decoding.errors import short_repr
from decoding.events import Event, Trace
from decoding.models import DEFAULT_MODEL
from decoding.run import validate_request
from ui.common import (MODEL_CONCURRENCY_ID, USER_ERRORS, check_model, model_concurrency, model_event, run_work,
                       stream_in_thread, user_error)


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
        raise user_error(err) from None
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
        raise user_error(err) from None
    yield summary(trace)


def register_api() -> None:
    """Add the hidden-from-the-UI, client-callable `/generate` endpoint to the current Blocks."""
    gr.api(model_event(api_generate), api_name="generate", concurrency_id=MODEL_CONCURRENCY_ID,
           concurrency_limit=model_concurrency())
