"""All SQL of delivery webhooks: the endpoints and the outbox (``webhook_delivery``, 0019).

The outbox write (``emit``) runs in the caller's transaction, the one that changes what the event is
about (a job's final state, a pruned token, dead letters), so an event exists exactly when its
change committed. The dispatcher claims due rows with ``FOR UPDATE SKIP LOCKED`` and a lease like
fan-out tasks: ``next_attempt_at`` moves to the end of the lease and ``claim_token`` fences the
write of the attempt's outcome (a dispatcher whose lease ran out cannot overwrite a newer attempt).
Functions take the caller's Session and never commit, except ``claim`` (its own transaction).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from notee.core.metrics import OutboxLevels
from notee.core.vocabulary import DEFAULT_WEBHOOK_EVENTS, RECEIPT_WEBHOOK_EVENTS, WebhookEvent
from notee.store import receipt_outbox_sql
from notee.store.mysql import affected


@dataclass(frozen=True, slots=True)
class Endpoint:
    endpoint_id: str
    service: str
    url: str
    events: list[str]
    description: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Delivery:
    delivery_id: int
    event_id: str
    endpoint_id: str
    service: str
    event_type: str
    payload: dict[str, Any]
    state: str
    attempts: int
    next_attempt_at: datetime
    last_status: int | None
    last_error: str | None
    created_at: datetime
    resent_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A delivery leased to one dispatcher: the endpoint's URL and encrypted secret travel with it."""

    delivery: Delivery
    url: str
    secret: bytes
    claim_token: str
    body: bytes  # the event exactly as stored: the raw body that is signed and sent


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _endpoint(row: Any) -> Endpoint:
    return Endpoint(row.endpoint_id, row.service, row.url, list(_json(row.events)), row.description, row.created_at)


_DELIVERY_COLUMNS = (
    "d.delivery_id, d.event_id, d.endpoint_id, d.service, d.event_type, d.payload, d.state, d.attempts,"
    " d.next_attempt_at, d.last_status, d.last_error, d.created_at, d.resent_at, d.finished_at"
)


def _delivery(row: Any) -> Delivery:
    return Delivery(
        int(row.delivery_id),
        row.event_id,
        row.endpoint_id,
        row.service,
        row.event_type,
        _json(row.payload),
        row.state,
        int(row.attempts),
        row.next_attempt_at,
        row.last_status,
        row.last_error,
        row.created_at,
        row.resent_at,
        row.finished_at,
    )


# --- endpoints ------------------------------------------------------------------------------------


def insert_endpoint(
    session: Session, *, service: str, url: str, events: list[str], description: str | None, secret: bytes
) -> Endpoint:
    endpoint_id = str(uuid.uuid4())
    session.execute(
        text(
            "INSERT INTO webhook_endpoint (endpoint_id, service, url, events, description, secret, created_at)"
            " VALUES (:e, :s, :u, :ev, :d, :sec, UTC_TIMESTAMP(6))"
        ),
        {"e": endpoint_id, "s": service, "u": url, "ev": json.dumps(events), "d": description, "sec": secret},
    )
    found = get_endpoint(session, service, endpoint_id)
    assert found is not None
    return found


def get_endpoint(session: Session, service: str, endpoint_id: str) -> Endpoint | None:
    row = session.execute(
        text(
            "SELECT endpoint_id, service, url, events, description, created_at FROM webhook_endpoint"
            " WHERE endpoint_id = :e AND service = :s"
        ),
        {"e": endpoint_id, "s": service},
    ).one_or_none()
    return _endpoint(row) if row else None


def list_endpoints(session: Session, service: str) -> list[Endpoint]:
    rows = session.execute(
        text(
            "SELECT endpoint_id, service, url, events, description, created_at FROM webhook_endpoint"
            " WHERE service = :s ORDER BY created_at, endpoint_id"
        ),
        {"s": service},
    ).all()
    return [_endpoint(r) for r in rows]


def count_endpoints(session: Session, service: str) -> int:
    return int(
        session.execute(text("SELECT COUNT(*) FROM webhook_endpoint WHERE service = :s"), {"s": service}).scalar_one()
    )


def delete_endpoint(session: Session, service: str, endpoint_id: str) -> bool:
    """Its deliveries go with it (ON DELETE CASCADE)."""
    return bool(
        affected(
            session.execute(
                text("DELETE FROM webhook_endpoint WHERE endpoint_id = :e AND service = :s"),
                {"e": endpoint_id, "s": service},
            )
        )
    )


def all_secrets(session: Session) -> list[tuple[str, bytes]]:
    """(endpoint_id, encrypted secret) of every endpoint, locked: ``notee credentials rotate-key``."""
    rows = session.execute(text("SELECT endpoint_id, secret FROM webhook_endpoint FOR UPDATE")).all()
    return [(r.endpoint_id, bytes(r.secret)) for r in rows]


def set_secret(session: Session, endpoint_id: str, secret: bytes) -> None:
    session.execute(
        text("UPDATE webhook_endpoint SET secret = :sec WHERE endpoint_id = :e"), {"e": endpoint_id, "sec": secret}
    )


# --- the outbox -----------------------------------------------------------------------------------


def emit(session: Session, service: str, event_type: WebhookEvent, data: Mapping[str, Any]) -> int:
    """Write one event for every endpoint of ``service`` that receives ``event_type``, in the caller's
    transaction; returns how many rows (0 when no endpoint wants it: one indexed read, no write).
    The body is fixed here (id, type, created_at, service, data); the dispatcher only signs it.
    The event types are checked here, not by the table (0037): receipt.* events go through
    ``receipt_outbox_sql.emit_receipts``."""
    if event_type not in DEFAULT_WEBHOOK_EVENTS:
        raise ValueError(f"not a webhook event emit writes: {event_type!r}")
    endpoints = session.execute(
        text("SELECT endpoint_id, events FROM webhook_endpoint WHERE service = :s"), {"s": service}
    ).all()
    wanted = [r.endpoint_id for r in endpoints if event_type in _json(r.events)]
    if not wanted:
        return 0
    now: datetime = session.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    event_id = str(uuid.uuid4())
    payload = json.dumps(
        {
            "id": event_id,
            "type": event_type,
            "created_at": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "service": service,
            "data": dict(data),
        },
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    session.execute(
        text(
            "INSERT INTO webhook_delivery (event_id, endpoint_id, service, event_type, payload, next_attempt_at,"
            " created_at) VALUES (:ev, :e, :s, :t, :p, :now, :now)"
        ),
        [{"ev": event_id, "e": e, "s": service, "t": event_type, "p": payload, "now": now} for e in wanted],
    )
    return len(wanted)


def claim(sessions: sessionmaker[Session], *, limit: int, lease_s: float, receipt_batch: int = 100) -> list[Claimed]:
    """Lease up to ``limit`` due deliveries (pending, next_attempt_at <= the database clock) in one
    transaction: their next_attempt_at moves to the end of the lease (a dispatcher that dies leaves
    them due again then) and each gets a claim token that fences the outcome's write. A receipt.*
    delivery never attempted first takes in the due ones of its endpoint and kind (up to
    ``receipt_batch`` events: ``receipt_outbox_sql.coalesce``)."""
    with sessions.begin() as session:
        session.connection(execution_options={"isolation_level": "READ COMMITTED"})
        rows = session.execute(
            text(
                f"SELECT {_DELIVERY_COLUMNS} FROM webhook_delivery d"
                " WHERE d.state = 'pending' AND d.next_attempt_at <= UTC_TIMESTAMP(6)"
                " ORDER BY d.next_attempt_at LIMIT :n FOR UPDATE SKIP LOCKED"
            ),
            {"n": limit},
        ).all()
        if not rows:
            return []
        out = []
        merged: set[int] = set()
        for row in rows:
            if int(row.delivery_id) in merged:  # its events went into an earlier row of this claim
                continue
            payload = row.payload
            if row.event_type in RECEIPT_WEBHOOK_EVENTS and row.attempts == 0 and row.resent_at is None:
                joined = receipt_outbox_sql.coalesce(session, row, batch=receipt_batch)
                if joined is not None:
                    payload = joined[0]
                    merged.update(joined[1])
            token = secrets.token_hex(16)
            session.execute(
                text(
                    "UPDATE webhook_delivery SET claim_token = :tok,"
                    " next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND WHERE delivery_id = :d"
                ),
                {"tok": token, "ms": int(lease_s * 1000), "d": row.delivery_id},
            )
            endpoint = session.execute(
                text("SELECT url, secret FROM webhook_endpoint WHERE endpoint_id = :e"), {"e": row.endpoint_id}
            ).one()
            raw = payload if isinstance(payload, (str, bytes)) else json.dumps(payload)
            body = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
            delivery = dataclasses.replace(_delivery(row), payload=_json(raw))
            out.append(Claimed(delivery, endpoint.url, bytes(endpoint.secret), token, body))
        return out


def outbox_levels(session: Session) -> OutboxLevels:
    """The outbox now, for the metrics: pending deliveries, those a dispatcher may claim now, and how
    long the oldest of those has been due. One range read of ix_webhook_delivery_due (index only)."""
    row = session.execute(
        text(
            "SELECT COUNT(*) AS pending, COALESCE(SUM(next_attempt_at <= UTC_TIMESTAMP(6)), 0) AS due,"
            " TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN next_attempt_at <= UTC_TIMESTAMP(6) THEN next_attempt_at END),"
            " UTC_TIMESTAMP(6)) AS oldest_us"
            " FROM webhook_delivery WHERE state = 'pending'"
        )
    ).one()
    return OutboxLevels(int(row.pending), int(row.due), max(0.0, (row.oldest_us or 0) / 1e6))


def record_attempt(
    session: Session,
    claimed: Claimed,
    *,
    delivered: bool,
    status: int | None,
    error: str | None,
    retry_in_s: float,
    retry_hours: int,
) -> str | None:
    """The outcome of one attempt, fenced by the claim token: delivered, or pending again in
    ``retry_in_s`` seconds, or failed once ``retry_hours`` have passed since the event was created.
    Returns the new state, or None when the claim was lost (another dispatcher owns the row now)."""
    params = {
        "d": claimed.delivery.delivery_id,
        "tok": claimed.claim_token,
        "st": status,
        "err": error[:500] if error else None,
        "ms": int(retry_in_s * 1000),
        "h": retry_hours,
    }
    if delivered:
        sql = (
            "UPDATE webhook_delivery SET state = 'delivered', attempts = attempts + 1, last_status = :st,"
            " last_error = NULL, claim_token = NULL, finished_at = UTC_TIMESTAMP(6)"
        )
    else:
        sql = (
            "UPDATE webhook_delivery SET attempts = attempts + 1, last_status = :st, last_error = :err,"
            " claim_token = NULL,"
            " state = IF(COALESCE(resent_at, created_at) + INTERVAL :h HOUR <= UTC_TIMESTAMP(6)"
            "            + INTERVAL :ms * 1000 MICROSECOND, 'failed', 'pending'),"
            " finished_at = IF(state = 'failed', UTC_TIMESTAMP(6), NULL),"
            " next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND"
        )
    changed = affected(
        session.execute(
            text(sql + " WHERE delivery_id = :d AND claim_token = :tok AND state = 'pending'"),
            params,
        )
    )
    if not changed:
        return None
    state: str = session.execute(
        text("SELECT state FROM webhook_delivery WHERE delivery_id = :d"), {"d": claimed.delivery.delivery_id}
    ).scalar_one()
    return state


def list_deliveries(
    session: Session,
    service: str,
    endpoint_id: str,
    *,
    state: str | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[Delivery]:
    """An endpoint's deliveries, newest first (``before_id``: the last id of the previous page)."""
    where = ["d.endpoint_id = :e", "d.service = :s"]
    params: dict[str, Any] = {"e": endpoint_id, "s": service, "n": limit}
    if state is not None:
        where.append("d.state = :st")
        params["st"] = state
    if before_id is not None:
        where.append("d.delivery_id < :b")
        params["b"] = before_id
    rows = session.execute(
        text(
            f"SELECT {_DELIVERY_COLUMNS} FROM webhook_delivery d WHERE {' AND '.join(where)}"
            " ORDER BY d.delivery_id DESC LIMIT :n"
        ),
        params,
    ).all()
    return [_delivery(r) for r in rows]


def get_delivery(session: Session, service: str, endpoint_id: str, delivery_id: int) -> Delivery | None:
    row = session.execute(
        text(
            f"SELECT {_DELIVERY_COLUMNS} FROM webhook_delivery d"
            " WHERE d.delivery_id = :d AND d.endpoint_id = :e AND d.service = :s"
        ),
        {"d": delivery_id, "e": endpoint_id, "s": service},
    ).one_or_none()
    return _delivery(row) if row else None


def resend(session: Session, service: str, endpoint_id: str, delivery_id: int) -> bool:
    """Make a delivery due again now: the same event id and body, a fresh retry window counted from
    ``resent_at``. False: not found."""
    return bool(
        affected(
            session.execute(
                text(
                    "UPDATE webhook_delivery SET state = 'pending', next_attempt_at = UTC_TIMESTAMP(6),"
                    " claim_token = NULL, finished_at = NULL, resent_at = UTC_TIMESTAMP(6)"
                    " WHERE delivery_id = :d AND endpoint_id = :e AND service = :s"
                ),
                {"d": delivery_id, "e": endpoint_id, "s": service},
            )
        )
    )


def prune_finished(session: Session, *, older_than_days: int, batch: int = 1000) -> int:
    """Delete up to ``batch`` delivered or failed rows finished more than ``older_than_days`` ago."""
    return affected(
        session.execute(
            text(
                "DELETE FROM webhook_delivery WHERE finished_at < UTC_TIMESTAMP(6) - INTERVAL :d DAY"
                " AND state IN ('delivered', 'failed') LIMIT :b"
            ),
            {"d": older_than_days, "b": batch},
        )
    )
