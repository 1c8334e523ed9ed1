"""The engagement events of the webhook outbox (docs/WEBHOOKS.md "Engagement events"): the apps'
receipts, written to ``webhook_delivery`` as ``receipt.<event>`` deliveries that carry a batch of
events, and merged into fuller batches when the dispatcher claims them.

A receipts request writes, per receipt kind, one row per endpoint that opted in (``INSERT ...
SELECT`` from ``webhook_endpoint``: an endpoint deleted meanwhile gets nothing, a new one everything
from its commit on), due ``window_s`` later so the rows of the next requests can join it. The
dispatcher's claim (``webhooks_sql.claim``) merges never-attempted rows of the same endpoint and kind
into the first one, up to ``batch`` events and ``MAX_BODY_BYTES``, in its own transaction: the merged
rows are deleted as the carrier takes their events, so each event stays in exactly one delivery.
Functions take the caller's Session and never commit."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from notee.core.vocabulary import RECEIPT_WEBHOOK_EVENTS

MAX_BODY_BYTES = 64 * 1024  # one delivery's body, at most (a batch stops growing before it)
_ENVELOPE_BYTES = 300  # id, type, created_at, service and the JSON around the events


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def wanted_kinds(session: Session, service: str) -> frozenset[str]:
    """The receipt.* events at least one endpoint of ``service`` receives (one indexed read)."""
    rows = session.execute(text("SELECT events FROM webhook_endpoint WHERE service = :s"), {"s": service}).all()
    found: set[str] = set()
    for (events,) in rows:
        found.update(json.loads(events) if isinstance(events, (str, bytes)) else events)
    return frozenset(found & set(RECEIPT_WEBHOOK_EVENTS))


def chunks(events: Sequence[dict[str, Any]], batch: int) -> Iterator[list[dict[str, Any]]]:
    """``events`` cut into runs of at most ``batch`` events whose JSON stays under MAX_BODY_BYTES."""
    run: list[dict[str, Any]] = []
    size = _ENVELOPE_BYTES
    for e in events:
        n = len(_dumps(e).encode("utf-8")) + 1
        if run and (len(run) >= batch or size + n > MAX_BODY_BYTES):
            yield run
            run, size = [], _ENVELOPE_BYTES
        run.append(e)
        size += n
    if run:
        yield run


def emit_receipts(
    session: Session, service: str, event_type: str, events: Sequence[dict[str, Any]], *, batch: int, window_s: float
) -> int:
    """Write ``events`` (of ``event_type``, a receipt.* kind) for every endpoint of ``service`` that
    receives that kind, in batches of at most ``batch``; returns the rows written (0: none wants it)."""
    if event_type not in RECEIPT_WEBHOOK_EVENTS:
        raise ValueError(f"not an engagement webhook event: {event_type!r}")
    written = 0
    now = session.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    for run in chunks(events, batch):
        event_id = str(uuid.uuid4())
        payload = _dumps(
            {
                "id": event_id,
                "type": event_type,
                "created_at": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "service": service,
                "data": {"events": run},
            }
        )
        result = session.execute(
            text(
                "INSERT INTO webhook_delivery (event_id, endpoint_id, service, event_type, payload, next_attempt_at,"
                " created_at) SELECT :ev, endpoint_id, service, :t, :p,"
                " :now + INTERVAL :ms * 1000 MICROSECOND, :now FROM webhook_endpoint"
                " WHERE service = :s AND JSON_CONTAINS(events, JSON_QUOTE(:t))"
            ),
            {"ev": event_id, "t": event_type, "p": payload, "s": service, "now": now, "ms": int(window_s * 1000)},
        )
        written += int(getattr(result, "rowcount", 0) or 0)
    return written


def coalesce(session: Session, carrier: Any, *, batch: int) -> tuple[str, list[int]] | None:
    """Merge never-attempted, due deliveries of ``carrier``'s endpoint and kind (locked, skipping rows
    another dispatcher holds) into ``carrier`` (a row of the claim, itself never attempted), up to
    ``batch`` events and MAX_BODY_BYTES; deletes the merged rows. Returns the new payload and the
    merged rows' ids (rows of the same claim may be among them: the caller drops those), or None when
    nothing joined it. The due rows are read through ix_webhook_delivery_due (the outbox's backlog,
    not the endpoint's finished history)."""
    body = json.loads(carrier.payload) if isinstance(carrier.payload, (str, bytes)) else dict(carrier.payload)
    events: list[dict[str, Any]] = list(body["data"]["events"])
    if len(events) >= batch:
        return None
    size = len(_dumps(body).encode("utf-8"))
    rows = session.execute(
        text(
            "SELECT delivery_id, payload FROM webhook_delivery FORCE INDEX (ix_webhook_delivery_due)"
            " WHERE state = 'pending' AND next_attempt_at <= UTC_TIMESTAMP(6) AND endpoint_id = :e"
            " AND delivery_id <> :d AND event_type = :t AND attempts = 0 AND resent_at IS NULL"
            " ORDER BY next_attempt_at LIMIT :n FOR UPDATE SKIP LOCKED"
        ),
        {"e": carrier.endpoint_id, "d": carrier.delivery_id, "t": carrier.event_type, "n": batch},
    ).all()
    merged: list[int] = []
    for row in rows:
        more = json.loads(row.payload)["data"]["events"]
        extra = sum(len(_dumps(e).encode("utf-8")) + 1 for e in more)
        if len(events) + len(more) > batch or size + extra > MAX_BODY_BYTES:
            continue
        events.extend(more)
        size += extra
        merged.append(int(row.delivery_id))
    if not merged:
        return None
    body["data"]["events"] = events
    payload = _dumps(body)
    session.execute(
        text("UPDATE webhook_delivery SET payload = :p WHERE delivery_id = :d"),
        {"p": payload, "d": carrier.delivery_id},
    )
    session.execute(
        text("DELETE FROM webhook_delivery WHERE delivery_id IN :ids").bindparams(bindparam("ids", expanding=True)),
        {"ids": merged},
    )
    return payload, merged
