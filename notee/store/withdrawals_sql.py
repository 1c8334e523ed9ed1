"""The ``subscription_withdrawal`` table (schema/mysql/0038_subscription_withdrawals.sql): the
Cassandra rows a subscription write may have left behind, per user, with the write timestamp their
withdrawal must be newer than (notee/domain/withdrawals.py).

``record``, ``forget``, ``pending_kept`` and ``forget_ids`` are each their own short transaction: the writer's request transaction ends
in a rollback when its write failed, and the record must outlive it. The other functions take the
caller's Session and never commit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session, sessionmaker

from notee.core.clock import naive_utc, now_utc
from notee.store.mysql import affected

# One index row as kept: (method, type, target, device_token, data).
KeptRow = tuple[str, str, str, str, dict[str, Any]]
UNANSWERED = "unanswered"  # kept while its writer still waits on the batch
FAILED = "failed"  # the batch failed and its withdrawal could not be written
STATES = (UNANSWERED, FAILED)


@dataclass(frozen=True, slots=True)
class Pending:
    """One user's rows of one write, to withdraw with a timestamp newer than ``written_at`` (µs)."""

    withdrawal_id: int
    service: str
    user_id: str
    written_at: int
    rows: list[KeptRow]


@dataclass(frozen=True, slots=True)
class Write:
    """One request's rows to keep: ``rows`` user_id -> its index rows, written at ``written_at`` (µs)."""

    service: str
    written_at: int
    rows: Mapping[str, Sequence[KeptRow]]


def record(sessions: sessionmaker[Session], write: Write, state: str) -> int:
    """Keep ``write``'s rows in ``state`` (one of ``STATES``); committed here. Returns the rows
    inserted (one per user)."""
    if state not in STATES:
        raise ValueError(f"unknown withdrawal state {state!r}")
    now = naive_utc(now_utc())
    params = [
        {"s": write.service, "u": u, "w": write.written_at, "st": state, "r": json.dumps([list(r) for r in kept])}
        | {"now": now}
        for u, kept in write.rows.items()
        if kept
    ]
    if not params:
        return 0
    with sessions.begin() as session:
        session.execute(
            text(
                "INSERT INTO subscription_withdrawal (service, user_id, written_at, state, index_rows, created_at) "
                "VALUES (:s, :u, :w, :st, :r, :now)"
            ),
            params,
        )
    return len(params)


def mark_failed(sessions: sessionmaker[Session], service: str, written_at: int, user_ids: Sequence[str]) -> int:
    """The kept rows of the write at ``written_at`` are now ``failed`` (its writer is done); committed."""
    stmt = text(
        "UPDATE subscription_withdrawal SET state = 'failed' WHERE service = :s AND user_id IN :u AND written_at = :w"
    ).bindparams(bindparam("u", expanding=True))
    with sessions.begin() as session:
        return affected(session.execute(stmt, {"s": service, "u": list(user_ids), "w": written_at}))


def forget(sessions: sessionmaker[Session], service: str, written_at: int, user_ids: Sequence[str]) -> int:
    """Delete what ``record`` kept of the write at ``written_at`` (it succeeded, or was withdrawn);
    committed here. Returns the rows deleted."""
    with sessions.begin() as session:
        return delete_write(session, service, written_at, user_ids)


def delete_write(session: Session, service: str, written_at: int, user_ids: Sequence[str]) -> int:
    if not user_ids:
        return 0
    stmt = text(
        "DELETE FROM subscription_withdrawal WHERE service = :s AND user_id IN :u AND written_at = :w"
    ).bindparams(bindparam("u", expanding=True))
    return affected(session.execute(stmt, {"s": service, "u": list(user_ids), "w": written_at}))


def _pending(found: Any) -> Pending:
    kept = [(m, t, g, d, data) for m, t, g, d, data in json.loads(found.index_rows)]
    return Pending(found.withdrawal_id, found.service, found.user_id, int(found.written_at), kept)


_COLUMNS = "withdrawal_id, service, user_id, written_at, index_rows"


def pending_of_users(
    session: Session, service: str, user_ids: Sequence[str], unanswered_before: datetime | None
) -> list[Pending]:
    """The pending withdrawals of these users, oldest first: every ``failed`` one and the
    ``unanswered`` ones created before ``unanswered_before`` (None: all of them, the caller holds the
    users' rows exclusively, so none of their writers still waits)."""
    if not user_ids:
        return []
    stmt = text(
        f"SELECT {_COLUMNS} FROM subscription_withdrawal WHERE service = :s AND user_id IN :u "
        "AND (state = 'failed' OR created_at < :b) ORDER BY withdrawal_id"
    ).bindparams(bindparam("u", expanding=True))
    before = datetime.max if unanswered_before is None else naive_utc(unanswered_before)
    return [_pending(r) for r in session.execute(stmt, {"s": service, "u": list(user_ids), "b": before})]


def pending_kept(sessions: sessionmaker[Session], service: str, user_ids: Sequence[str]) -> list[Pending]:
    """Every pending withdrawal of these users (``pending_of_users`` with no age bar: the caller holds
    them exclusively), read in a short transaction of its own."""
    with sessions() as session:
        return pending_of_users(session, service, user_ids, None)


def forget_ids(sessions: sessionmaker[Session], withdrawal_ids: Sequence[int]) -> int:
    """Delete these records (applied); committed here. Returns the rows deleted."""
    if not withdrawal_ids:
        return 0
    with sessions.begin() as session:
        return delete(session, withdrawal_ids)


def pending_after(
    session: Session, after_id: int, limit: int, unanswered_before: datetime, service: str | None = None
) -> list[Pending]:
    """Up to ``limit`` pending withdrawals after ``after_id`` (one service's, or every service's):
    ``failed`` ones and ``unanswered`` ones created before ``unanswered_before``."""
    where = "withdrawal_id > :a AND (state = 'failed' OR created_at < :b)"
    where += " AND service = :s" if service is not None else ""
    rows = session.execute(
        text(f"SELECT {_COLUMNS} FROM subscription_withdrawal WHERE {where} ORDER BY withdrawal_id LIMIT :n"),
        {"a": after_id, "n": limit, "s": service, "b": naive_utc(unanswered_before)},
    )
    return [_pending(r) for r in rows]


def delete(session: Session, withdrawal_ids: Sequence[int]) -> int:
    if not withdrawal_ids:
        return 0
    stmt = text("DELETE FROM subscription_withdrawal WHERE withdrawal_id IN :ids").bindparams(
        bindparam("ids", expanding=True)
    )
    return affected(session.execute(stmt, {"ids": list(withdrawal_ids)}))
