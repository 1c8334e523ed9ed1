"""An immediate single send with an ``Idempotency-Key`` is sent at most once (issue 30).

A client that retries after a timeout sends the same request again. The first request with a key
claims it (``send_idempotency``, committed before anything is sent), sends, and keeps its answer;
every later request with the key within 24 hours gets that answer (``Idempotent-Replayed: true``)
and sends nothing. A duplicate that arrives while the first is still sending waits for its answer
(up to ``WAIT_S``; then 409, try again). The same key with a different request is 422, as for
publishes. A request that fails (an error answer: 404, 422, 424, 503, ...) gives its key back, so a
retry is tried afresh; a request whose process died mid-send holds its key ``STALE_S``, after which
a retry sends (at most once more).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from notee.core.clock import stored_now
from notee.core.errors import Conflict
from notee.store import send_idempotency_sql as store
from notee.store.runtime import Runtime
from notee.usecases.job_requests import client_idempotency_key, key_reused
from notee.usecases.single_send import SingleSend

TTL = timedelta(hours=24)
# Longer than any single send takes (its retries included): a claim this old died with its process.
STALE_S = 300.0
WAIT_S = 30.0  # a duplicate waits this long for the first request's answer
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer to keep and give again: status and JSON body; ``replayed``: a kept one."""

    status_code: int
    body: dict[str, Any]
    replayed: bool = False


def fingerprint(send: SingleSend) -> str:
    """sha256 of what a single send asks (canonical JSON; an empty and a missing map are the same;
    payload, ttl_seconds and priority count when given)."""
    asked: dict[str, Any] = {
        "user_id": send.user_id,
        "type": send.type_,
        "variables": send.variables or None,
        "data": send.data or None,
        "quiet_hours": send.quiet_hours,
    }
    # added only when given, so the hash of a send without them is what it was before they existed
    extra = {"payload": send.payload or None, "ttl_seconds": send.ttl_seconds, "priority": send.priority}
    asked |= {k: v for k, v in extra.items() if v is not None}
    canonical = json.dumps(asked, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _claim(runtime: Runtime, send: SingleSend, key: str) -> tuple[store.ClaimAsk, store.KeyRow | None]:
    now = stored_now()
    ask = store.ClaimAsk(
        service=send.service,
        key=key,
        request_hash=fingerprint(send),
        now=now,
        expired_before=now - TTL,
        stale_before=now - timedelta(seconds=STALE_S),
    )
    return ask, store.claim(runtime.sessions, ask)


def _finish(runtime: Runtime, ask: store.ClaimAsk, answer: Answer) -> None:
    with runtime.sessions.begin() as session:
        store.finish(session, ask, status_code=answer.status_code, answer=answer.body, now=stored_now())


def _release(runtime: Runtime, ask: store.ClaimAsk) -> None:
    with runtime.sessions.begin() as session:
        store.release(session, ask)


def _kept(row: store.KeyRow, ask: store.ClaimAsk) -> Answer | None:
    """The answer a holder of the key kept (None: it is still sending); 422 when it asked otherwise."""
    if row.request_hash != ask.request_hash:
        raise key_reused()
    if row.state == store.DONE and row.answer is not None and row.status_code is not None:
        return Answer(row.status_code, row.answer, replayed=True)
    return None


async def send_once(
    runtime: Runtime, send: SingleSend, idempotency_key: str, do_send: Callable[[], Awaitable[Answer]]
) -> Answer:
    """``do_send``'s answer for the first request with ``idempotency_key`` (the client's header, as
    sent), the kept one for every later request with it."""
    key = client_idempotency_key(idempotency_key)
    assert key is not None
    deadline = time.monotonic() + WAIT_S
    ask, holder = await asyncio.to_thread(_claim, runtime, send, key)
    while holder is not None:
        kept = _kept(holder, ask)
        if kept is not None:
            return kept
        if time.monotonic() > deadline:
            raise Conflict(
                "a request with this Idempotency-Key is still being sent; try again later",
                details=[
                    {"loc": ["header", "Idempotency-Key"], "type": "idempotency_key_in_progress", "msg": "in use"}
                ],
            )
        await asyncio.sleep(_POLL_S)  # the first request is sending: wait for its answer
        # again: its answer, or the key is ours (it failed and gave it back, or its claim went stale)
        ask, holder = await asyncio.to_thread(_claim, runtime, send, key)
    try:
        answer = await do_send()
    except BaseException:
        await asyncio.shield(asyncio.to_thread(_release, runtime, ask))
        raise
    await asyncio.to_thread(_finish, runtime, ask, answer)
    return answer
