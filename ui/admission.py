"""Who joins the app's queue, and in what order: fairness per browser session, bounds per client address.

A class of thirty behind one school address is one client to the server (the school's NAT): counted as
one visitor, its students were refused past 16 waiting runs. Here a visitor is a browser session, and
the address only bounds what one script can take:

- a session has at most DECODING_LAB_RUNS_PER_SESSION (default 3) model-bound runs in flight, computing
  or waiting: one computing and a couple waiting; one more gets HTTP 429;
- a client address has at most DECODING_LAB_QUEUED_PER_CLIENT requests waiting (default half the queue,
  64: a class of 40 with one run each, and room for second runs); one more gets HTTP 429;
- the queue holds DECODING_LAB_QUEUE_SIZE (default 128) waiting requests; one more gets Gradio's "Queue
  is full" (HTTP 503). So a script opening any number of sessions from one address holds at most half
  the queue, and a class behind another address still gets in.

Order: Gradio serves its queue first come, first served. `place` moves a request that joins to its
fair place instead: behind every waiting request of a lower round, where its round is (runs its session
has in flight, runs its client address has in flight) at the moment it joins. Every session's first
run goes before any session's second, and among first runs the addresses take turns: a lone visitor
is next, not behind a whole class, and a class behind a flood of another address's sessions goes one
for one with it instead of behind all of it. Requests of the same round keep their order. (A round is
fixed when a request joins; a stream of new addresses could keep passing an old request, as in any
fair queue without virtual time: each address is bounded, and each pass is one run.)

Glossary
    session     Gradio's `session_hash`: one browser tab, one gradio_client `Client`; a call to
                `/gradio_api/call/<name>` is a session of its own.
    client      the request's address (`client_of`: behind a Space's proxy, X-Forwarded-For; ui.guard uses it too).
    in flight   a request of the model group (`ui.worker.MODEL_CONCURRENCY_ID`) waiting in the queue or
                being processed.
    round       the (session, client) counts of runs in flight a request found when it joined.
"""

from __future__ import annotations

import os

from fastapi import HTTPException

from decoding.env import env_int


def trust_proxy() -> bool:
    raw = os.environ.get("DECODING_LAB_TRUST_PROXY", "").strip().lower()
    if raw:
        return raw in {"1", "true", "yes", "on"}
    return bool(os.environ.get("SPACE_ID"))  # a Hugging Face Space runs behind its proxy


def client_of(scope: dict) -> str:
    """The client address of an ASGI request (see the glossary)."""
    if trust_proxy():
        for name, value in scope.get("headers") or ():
            if name == b"x-forwarded-for":
                last = value.decode("latin-1").split(",")[-1].strip()
                if last:
                    return last[:64]
    client = scope.get("client")
    return str(client[0])[:64] if client else "unknown"

MODEL_GROUP = "model"  # ui.worker.MODEL_CONCURRENCY_ID (not imported: the worker imports the model stack)


def queue_size() -> int:
    """How many requests may wait in the queue (DECODING_LAB_QUEUE_SIZE, default 128: a class of 40 with a run or
    two each, and another visitor's half)."""
    return env_int("DECODING_LAB_QUEUE_SIZE", 128)


def queued_per_client() -> int:
    """Requests one client address may have waiting in the queue (DECODING_LAB_QUEUED_PER_CLIENT, default half the
    queue: one address never fills it, and a class behind one address still gets most of it)."""
    return env_int("DECODING_LAB_QUEUED_PER_CLIENT", max(1, queue_size() // 2))


def runs_per_session() -> int:
    """Model-bound runs one browser session may have in flight, computing or waiting (DECODING_LAB_RUNS_PER_SESSION,
    default 3: one computing and two waiting)."""
    return env_int("DECODING_LAB_RUNS_PER_SESSION", 3)


def _client(event) -> str:
    request = getattr(event, "request", None)
    return client_of(request.scope) if request is not None else "unknown"


def waiting(queue) -> list:
    """Every request waiting in `queue` (a Gradio `Queue`), all groups."""
    return [event for per_id in list(queue.event_queue_per_concurrency_id.values()) for event in list(per_id.queue)]


def in_flight(queue, group: str = MODEL_GROUP) -> list:
    """The requests of `group` being processed, then those waiting, in their order."""
    running = [event for job in list(queue.active_jobs) if job for event in job if event.concurrency_id == group]
    per_id = queue.event_queue_per_concurrency_id.get(group)
    return running + (list(per_id.queue) if per_id is not None else [])


def refusal(queue, session: str | None, client: str, group: str | None) -> str | None:
    """Why a request of `session` from `client` to `group` may not join `queue` now, or None."""
    if sum(1 for event in waiting(queue) if client_of(event.request.scope) == client) >= queued_per_client():
        return (f"This address has {queued_per_client()} requests waiting already (DECODING_LAB_QUEUED_PER_CLIENT): "
                "wait for one to finish.")
    if session and group == MODEL_GROUP:
        mine = sum(1 for event in in_flight(queue, group) if event.session_hash == session)
        if mine >= runs_per_session():
            return (f"This session has {mine} runs computing or waiting already (DECODING_LAB_RUNS_PER_SESSION): "
                    "wait for one to finish, or stop it.")
    return None


def round_of(queue, event) -> tuple[int, int]:
    """(runs of `event`'s session, runs of its client) in flight ahead of it."""
    ahead = [e for e in in_flight(queue, event.concurrency_id) if e is not event]
    client = _client(event)
    return (sum(1 for e in ahead if e.session_hash == event.session_hash),
            sum(1 for e in ahead if _client(e) == client))


def place(queue, event) -> None:
    """Move `event`, which has just joined the end of its group's line, to its fair place (module docstring)."""
    line = queue.event_queue_per_concurrency_id[event.concurrency_id].queue
    if not line or line[-1] is not event:
        return
    event.fair_round = round_of(queue, event)
    line.pop()
    at = next((i for i, other in enumerate(line) if getattr(other, "fair_round", (0, 0)) > event.fair_round), len(line))
    line.insert(at, event)


def _group_of(queue, body) -> str | None:
    from gradio import route_utils

    try:
        return route_utils.get_fn(queue.blocks, None, body).concurrency_id
    except Exception:  # noqa: BLE001 - an unknown function: Gradio's own push refuses it with its message
        return None


def install(queue) -> None:
    """Make a Gradio `Queue` admit and place requests by the rules above (idempotent)."""
    if getattr(queue, "fair_admission", False):
        return
    original = queue.push

    async def push(body, request, username):
        why = refusal(queue, body.session_hash, client_of(request.scope), _group_of(queue, body))
        if why is not None:
            raise HTTPException(status_code=429, detail=why)
        success, event_id, state = await original(body, request, username)
        if success:
            event = queue.event_ids_to_events.get(event_id)
            if event is not None:
                place(queue, event)
        return success, event_id, state

    queue.push = push
    queue.fair_admission = True


__all__ = ["in_flight", "install", "place", "queue_size", "queued_per_client", "refusal", "round_of",
           "runs_per_session", "waiting"]
