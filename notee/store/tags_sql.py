"""Tags SQL: the ``user_tag`` table (schema/mysql/0026_audiences.sql), one typed value per (user, key).

Every statement names the service (its primary key begins with it), so no query reads across
tenants. Writes are multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` (one statement per call,
however many keys) and ``DELETE`` by primary key. Functions take the caller's Session and never
commit. A tag's user must exist (foreign key): callers lock the user row first (``users_sql.get_user``
with ``for_update``), so a deletion of the user in progress cannot interleave (its tags cascade).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Column, DateTime, Float, MetaData, String, Table, and_, delete, func, select
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.orm import Session

from notee.core.clock import stored_now
from notee.store.mysql import affected

metadata = MetaData()

user_tag_t = Table(
    "user_tag",
    metadata,
    Column("service", String(32), primary_key=True),
    Column("user_id", String(36), primary_key=True),
    Column("tag_key", String(64), primary_key=True),
    Column("kind", String(1)),
    Column("value_str", String(255), nullable=True),
    Column("value_num", Float(precision=53), nullable=True),
    Column("updated_at", DateTime),
)


class TagValue(NamedTuple):
    """A stored value: ``kind`` (s, n, b, t) and the column that holds it (the other NULL)."""

    kind: str
    value_str: str | None = None
    value_num: float | None = None


class TagRow(NamedTuple):
    """One tag of one user, for :func:`upsert_many`."""

    user_id: str
    tag_key: str
    kind: str
    value_str: str | None = None
    value_num: float | None = None


def read(session: Session, service: str, user_id: str) -> dict[str, TagValue]:
    """A user's tags, key -> value, in key order (the primary key)."""
    rows = session.execute(
        select(user_tag_t.c.tag_key, user_tag_t.c.kind, user_tag_t.c.value_str, user_tag_t.c.value_num)
        .where(and_(user_tag_t.c.service == service, user_tag_t.c.user_id == user_id))
        .order_by(user_tag_t.c.tag_key)
    )
    return {r[0]: TagValue(r[1], r[2], None if r[3] is None else float(r[3])) for r in rows}


def keys(session: Session, service: str, user_id: str) -> list[str]:
    """The keys a user holds (the primary key alone)."""
    return [
        r[0]
        for r in session.execute(
            select(user_tag_t.c.tag_key).where(and_(user_tag_t.c.service == service, user_tag_t.c.user_id == user_id))
        )
    ]


def count(session: Session, service: str, user_id: str) -> int:
    """How many keys a user holds."""
    return int(
        session.execute(
            select(func.count()).where(and_(user_tag_t.c.service == service, user_tag_t.c.user_id == user_id))
        ).scalar_one()
    )


def upsert_many(session: Session, service: str, rows: Sequence[TagRow], *, now: datetime | None = None) -> None:
    """Set tags of any number of users of one service in one statement: a row per (user, key),
    inserted or its value replaced. Rows are written in (user_id, tag_key) order, so two callers
    writing overlapping users take their row locks in the same order. Every user must exist (the
    foreign key refuses an unknown one: the caller checks, and locks the users it must keep)."""
    if not rows:
        return
    at = now or stored_now()
    stmt = mysql_insert(user_tag_t).values(
        [
            {
                "service": service,
                "user_id": r.user_id,
                "tag_key": r.tag_key,
                "kind": r.kind,
                "value_str": r.value_str,
                "value_num": r.value_num,
                "updated_at": at,
            }
            for r in sorted(rows, key=lambda r: (r.user_id, r.tag_key))
        ]
    )
    stmt = stmt.on_duplicate_key_update(
        kind=stmt.inserted.kind,
        value_str=stmt.inserted.value_str,
        value_num=stmt.inserted.value_num,
        updated_at=stmt.inserted.updated_at,
    )
    session.execute(stmt)


def upsert(
    session: Session, service: str, user_id: str, tags: Mapping[str, TagValue], *, now: datetime | None = None
) -> None:
    """Set these tags of one user (inserted, or their values replaced); the user's other tags stay."""
    upsert_many(session, service, [TagRow(user_id, key, *value) for key, value in tags.items()], now=now)


def delete_keys(session: Session, service: str, user_id: str, tag_keys: Collection[str]) -> int:
    """Remove these keys of one user (those it holds); returns how many went."""
    if not tag_keys:
        return 0
    return affected(
        session.execute(
            delete(user_tag_t).where(
                and_(
                    user_tag_t.c.service == service,
                    user_tag_t.c.user_id == user_id,
                    user_tag_t.c.tag_key.in_(sorted(tag_keys)),
                )
            )
        )
    )


def replace(
    session: Session, service: str, user_id: str, tags: Mapping[str, TagValue], *, now: datetime | None = None
) -> None:
    """Make ``tags`` the user's whole set: every other key removed, these set."""
    q = delete(user_tag_t).where(and_(user_tag_t.c.service == service, user_tag_t.c.user_id == user_id))
    if tags:
        q = q.where(user_tag_t.c.tag_key.not_in(sorted(tags)))
    session.execute(q)
    upsert(session, service, user_id, tags, now=now)
