"""The ``send_idempotency`` table (schema/mysql/0027_send_idempotency.sql): the Idempotency-Keys of
immediate single sends, each claimed before its send and holding the first answer after it.

Functions take the caller's Session and never commit, but ``claim``, which is its own short
transaction (the claim must be visible to a concurrent request before the send starts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from notee.store.mysql import affected, read_committed

SENDING = "sending"
DONE = "done"


@dataclass(frozen=True, slots=True)
class KeyRow:
    """A key another request holds: its request's hash and either its answer (``done``) or none yet."""

    request_hash: str
    state: str
    status_code: int | None
    answer: dict[str, Any] | None
    created_at: datetime


_COLUMNS = "request_hash, state, status_code, answer, created_at"


def _row(found: Any) -> KeyRow:
    answer = found.answer
    return KeyRow(
        found.request_hash,
        found.state,
        found.status_code,
        json.loads(answer) if isinstance(answer, str | bytes) else answer,
        found.created_at,
    )


@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """A request asking for a key: ``expired_before`` (a row created before it is replaced, as if
    absent: 24 hours); ``stale_before`` (a claim still ``sending`` since before it is taken over:
    its request died mid-send)."""

    service: str
    key: str
    request_hash: str
    now: datetime
    expired_before: datetime
    stale_before: datetime


def claim(sessions: sessionmaker[Session], ask: ClaimAsk) -> KeyRow | None:
    """Claim the key for this request (None: claimed, the caller sends), or the row of the request
    that holds it (the caller compares hashes, returns its answer or waits for it). Committed here."""
    with sessions.begin() as session:
        read_committed(session)  # a record lock on the key only, no gap lock for a missing one
        params = {"s": ask.service, "k": ask.key}
        found = session.execute(
            text(f"SELECT {_COLUMNS} FROM send_idempotency WHERE service = :s AND idempotency_key = :k FOR UPDATE"),
            params,
        ).one_or_none()
        if found is None:
            try:
                with session.begin_nested():  # a racing first request inserted it: read its row then
                    session.execute(
                        text(
                            "INSERT INTO send_idempotency (service, idempotency_key, request_hash, state, created_at) "
                            "VALUES (:s, :k, :h, 'sending', :now)"
                        ),
                        params | {"h": ask.request_hash, "now": ask.now},
                    )
                return None
            except IntegrityError:
                found = session.execute(
                    text(
                        f"SELECT {_COLUMNS} FROM send_idempotency WHERE service = :s AND idempotency_key = :k "
                        "FOR UPDATE"
                    ),
                    params,
                ).one()
        row = _row(found)
        if row.created_at < ask.expired_before or (row.state == SENDING and row.created_at < ask.stale_before):
            session.execute(
                text(
                    "UPDATE send_idempotency SET request_hash = :h, state = 'sending', status_code = NULL, "
                    "answer = NULL, created_at = :now, finished_at = NULL WHERE service = :s AND idempotency_key = :k"
                ),
                params | {"h": ask.request_hash, "now": ask.now},
            )
            return None
        return row


# A claim is named by its key and the instant it was made (``ClaimAsk.now``): a request whose stale
# claim was taken over finds no row of its own to finish or release.
_MINE = "service = :s AND idempotency_key = :k AND state = 'sending' AND created_at = :at"


def finish(session: Session, ask: ClaimAsk, *, status_code: int, answer: dict[str, Any], now: datetime) -> None:
    """Keep the answer of the request that claimed the key with ``ask``."""
    session.execute(
        text(
            f"UPDATE send_idempotency SET state = 'done', status_code = :c, answer = :a, finished_at = :now WHERE {_MINE}"
        ),
        {"s": ask.service, "k": ask.key, "at": ask.now, "c": status_code, "a": json.dumps(answer), "now": now},
    )


def release(session: Session, ask: ClaimAsk) -> None:
    """Give back the key ``ask`` claimed (its request failed): the next request with it is tried afresh."""
    session.execute(
        text(f"DELETE FROM send_idempotency WHERE {_MINE}"), {"s": ask.service, "k": ask.key, "at": ask.now}
    )


def prune(session: Session, *, older_than: datetime, batch: int) -> int:
    """Delete up to ``batch`` rows created before ``older_than`` (retention: 24 hours)."""
    return affected(
        session.execute(
            text("DELETE FROM send_idempotency WHERE created_at < :t ORDER BY created_at LIMIT :n"),
            {"t": older_than, "n": batch},
        )
    )
