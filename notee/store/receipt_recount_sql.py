"""The ``receipt_recount`` table (schema/mysql/0041_receipt_recount.sql): the notification sources
(jobs, single sends) whose receipt counters may have missed events of a batch that failed or whose
outcome was unknown (notee/usecases/receipt_counting.py), until the scheduler recounts them from their
raw rows (notee/usecases/receipt_repair.py).

``record`` and ``forget`` are each their own short transaction: the receipts' request has no MySQL
transaction of its own, and a record must be committed before its 503 is answered. ``due`` and
``delete`` take the caller's Session and never commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, bindparam, text
from sqlalchemy.orm import Session, sessionmaker

from notee.core.clock import naive_utc, now_utc
from notee.store.mysql import affected


@dataclass(frozen=True, slots=True)
class Kept:
    """One record: ``source`` of ``service`` may be miscounted by a batch of ``created_at`` or before."""

    recount_id: int
    service: str
    source: str
    created_at: datetime  # naive UTC


def record(sessions: sessionmaker[Session], service: str, sources: Iterable[str]) -> list[int]:
    """Keep ``sources`` of ``service`` for a recount; committed here. Returns the new records' ids."""
    now = naive_utc(now_utc())
    ids: list[int] = []
    with sessions.begin() as session:
        for source in sorted(set(sources)):
            result = session.execute(
                text("INSERT INTO receipt_recount (service, source, created_at) VALUES (:s, :src, :now)"),
                {"s": service, "src": source, "now": now},
            )
            ids.append(int(result.lastrowid))  # type: ignore[attr-defined]
    return ids


def forget(sessions: sessionmaker[Session], recount_ids: Sequence[int]) -> int:
    """Delete records ``record`` made (their batch was counted after all); committed here."""
    with sessions.begin() as session:
        return delete(session, recount_ids)


def due(session: Session, after_id: int, limit: int, before: datetime, service: str | None = None) -> list[Kept]:
    """Up to ``limit`` records after ``after_id`` (one service's, or every service's), made before
    ``before``, oldest first."""
    where = "recount_id > :a AND created_at < :b" + (" AND service = :s" if service is not None else "")
    rows = session.execute(
        text(
            f"SELECT recount_id, service, source, created_at FROM receipt_recount WHERE {where} ORDER BY recount_id LIMIT :n"
        ),
        {"a": after_id, "b": naive_utc(before), "n": limit, "s": service},
    )
    return [Kept(int(r.recount_id), r.service, r.source, r.created_at) for r in rows]


def delete(session: Session, recount_ids: Sequence[int]) -> int:
    if not recount_ids:
        return 0
    stmt = text("DELETE FROM receipt_recount WHERE recount_id IN :ids").bindparams(bindparam("ids", expanding=True))
    return affected(session.execute(stmt, {"ids": list(recount_ids)}))


@contextmanager
def repair_lock(engine: Engine, wait_s: int = 0) -> Iterator[bool]:
    """Hold this database's named lock of the receipt repair (``GET_LOCK``, waiting up to ``wait_s``)
    on a connection of its own; yields False when another process kept it. Two repairs of one job at
    once would both add the same difference (counted twice), so one runs at a time."""
    database = engine.url.database or ""
    name = f"notee_receipt_repair:{database}"
    if len(name) > 64:  # MySQL's limit on lock names
        name = "notee_receipt_repair:" + hashlib.sha256(database.encode()).hexdigest()[:40]
    with engine.connect() as conn:
        got = conn.execute(text("SELECT GET_LOCK(:name, :w)"), {"name": name, "w": wait_s}).scalar() == 1
        try:
            yield got
        finally:
            if got:
                conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": name})
