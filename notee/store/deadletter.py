"""Dead letters: deliveries that still failed after the bounded retries. All their SQL lives here.

Sessions are opened by the caller; these functions never commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    delete,
    func,
    insert,
    select,
)
from sqlalchemy.orm import Session

from notee.store import webhooks_sql
from notee.store.mysql import affected

metadata = MetaData()
dead_letter = Table(
    "dead_letter",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("service", String(32), nullable=False),
    Column("job_id", String(64)),
    Column("device_token", String(512), nullable=False),
    Column("device_os", String(3), nullable=False),
    Column("provider", String(16), nullable=False),
    Column("reason", String(255), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("payload", JSON, nullable=False),
    Column("created_at", DateTime, nullable=False),
)


@dataclass(frozen=True)
class DeadLetter:
    service: str
    job_id: str | None
    device_token: str
    device_os: str
    provider: str
    reason: str
    attempts: int
    payload: dict[str, Any]


def record(session: Session, letters: Iterable[DeadLetter], *, now: datetime) -> int:
    """Insert the dead letters and, in the same transaction, one ``dead_letter.created`` webhook event
    per (service, job) among them (for the service's endpoints that receive it)."""
    rows = [{**letter.__dict__, "reason": letter.reason[:255], "created_at": now} for letter in letters]
    if rows:
        session.execute(insert(dead_letter), rows)
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["service"], row["job_id"]), []).append(row)
    for (service, job_id), group in groups.items():
        webhooks_sql.emit(
            session,
            service,
            "dead_letter.created",
            {
                "job_id": job_id,
                "count": len(group),
                "letters": [
                    {k: r[k] for k in ("device_token", "device_os", "provider", "reason", "attempts")} for r in group
                ],
            },
        )
    return len(rows)


def list_for_service(
    session: Session, service: str, *, limit: int = 100, job_id: str | None = None, before_id: int | None = None
) -> list[Any]:
    """The service's dead letters, newest first; ``before_id`` pages on (the last id of a page)."""
    query = select(dead_letter).where(dead_letter.c.service == service)
    if job_id is not None:
        query = query.where(dead_letter.c.job_id == job_id)
    if before_id is not None:
        query = query.where(dead_letter.c.id < before_id)
    return list(session.execute(query.order_by(dead_letter.c.id.desc()).limit(limit)))


def failures_of_job(session: Session, service: str, job_id: str, since: datetime) -> list[tuple[str, str, int]]:
    """A job's dead letters counted by (reason, device_os), most first. ``since`` (the job's
    creation) bounds the read to the service's letters from then on (``ix_dead_letter_service``),
    so the cost is the service's letters since the job, never its whole history."""
    count = func.count().label("n")
    query = (
        select(dead_letter.c.reason, dead_letter.c.device_os, count)
        .where(dead_letter.c.service == service, dead_letter.c.created_at >= since, dead_letter.c.job_id == job_id)
        .group_by(dead_letter.c.reason, dead_letter.c.device_os)
        .order_by(count.desc(), dead_letter.c.reason, dead_letter.c.device_os)
    )
    return [(str(r.reason), str(r.device_os), int(r.n)) for r in session.execute(query)]


def for_replay(
    session: Session, service: str, *, ids: Iterable[int] | None = None, job_id: str | None = None, limit: int = 1000
) -> list[Any]:
    """Dead letters of ``service`` to send again, oldest first: the given ids (others' ids are simply
    not found), or a job's, or any. Locked (``FOR UPDATE SKIP LOCKED``) so two replays running at
    once never send the same letter twice."""
    query = select(dead_letter).where(dead_letter.c.service == service)
    if ids is not None:
        query = query.where(dead_letter.c.id.in_(list(ids)))
    if job_id is not None:
        query = query.where(dead_letter.c.job_id == job_id)
    return list(session.execute(query.order_by(dead_letter.c.id).limit(limit).with_for_update(skip_locked=True)))


def delete_ids(session: Session, service: str, ids: Iterable[int]) -> int:
    ids = list(ids)
    if not ids:
        return 0
    return affected(
        session.execute(delete(dead_letter).where(dead_letter.c.service == service, dead_letter.c.id.in_(ids)))
    )


def delete_for_tokens(session: Session, service: str, tokens: Iterable[str]) -> int:
    """Delete the dead letters of these device tokens (their user is being deleted)."""
    tokens = list(tokens)
    if not tokens:
        return 0
    return affected(
        session.execute(
            delete(dead_letter).where(dead_letter.c.service == service, dead_letter.c.device_token.in_(tokens))
        )
    )


def prune(session: Session, *, older_than: datetime, batch: int = 5000) -> int:
    """Delete one batch of rows older than ``older_than``; call until it returns less than ``batch``."""
    ids = [
        r.id
        for r in session.execute(select(dead_letter.c.id).where(dead_letter.c.created_at < older_than).limit(batch))
    ]
    if ids:
        session.execute(delete(dead_letter).where(dead_letter.c.id.in_(ids)))
    return len(ids)
