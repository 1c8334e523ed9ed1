"""Dead letters: deliveries that still failed after the bounded retries. All their SQL lives here.

Sessions are opened by the caller; these functions never commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, DateTime, Integer, MetaData, String, Table, delete, insert, select
from sqlalchemy.orm import Session

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
    rows = [{**letter.__dict__, "reason": letter.reason[:255], "created_at": now} for letter in letters]
    if rows:
        session.execute(insert(dead_letter), rows)
    return len(rows)


def list_for_service(session: Session, service: str, *, limit: int = 100) -> list[Any]:
    return list(
        session.execute(
            select(dead_letter)
            .where(dead_letter.c.service == service)
            .order_by(dead_letter.c.created_at.desc(), dead_letter.c.id.desc())
            .limit(limit)
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
