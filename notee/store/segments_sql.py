"""Segments SQL: the ``segment`` table (a service's saved, named filters, docs/AUDIENCES.md
"Segments"; DDL in schema/mysql/0026_audiences.sql). Every query names the service; every function
takes the caller's Session and never commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    ColumnElement,
    DateTime,
    MetaData,
    String,
    Table,
    and_,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from notee.store.mysql import AnyRow, affected
from notee.store.services_sql import service_t

_meta = MetaData()
segment_t = Table(
    "segment",
    _meta,
    Column("service", String(32), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("description", String(500)),
    Column("filter", JSON),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)


def _key(service: str, name: str) -> ColumnElement[bool]:
    return and_(segment_t.c.service == service, segment_t.c.name == name)


def lock_service(session: Session, service: str) -> None:
    """Lock the service's row until the caller's commit: segment creations of one service take turns,
    so the per-service limit holds under concurrent creations."""
    session.execute(select(service_t.c.service).where(service_t.c.service == service).with_for_update())


def count_segments(session: Session, service: str) -> int:
    return int(session.execute(select(func.count()).where(segment_t.c.service == service)).scalar_one())


def insert_segment(session: Session, service: str, name: str, description: str, filter_: Any, now: datetime) -> bool:
    """Insert a segment; False when the service already has one of that name (nothing written)."""
    try:
        with session.begin_nested():
            session.execute(
                segment_t.insert().values(
                    service=service, name=name, description=description, filter=filter_, created_at=now, updated_at=now
                )
            )
    except IntegrityError:
        return False
    return True


def update_segment(session: Session, service: str, name: str, description: str, filter_: Any, now: datetime) -> bool:
    """Replace a segment's description and filter; False when there is none of that name."""
    stmt = update(segment_t).where(_key(service, name)).values(description=description, filter=filter_, updated_at=now)
    return affected(session.execute(stmt)) > 0


def get_segment(session: Session, service: str, name: str, *, for_update: bool = False) -> AnyRow | None:
    q = select(segment_t).where(_key(service, name))
    return session.execute(q.with_for_update() if for_update else q).one_or_none()


def get_segments(session: Session, service: str, names: Sequence[str]) -> dict[str, AnyRow]:
    """The named segments of a service that exist, by name (one read on the primary key)."""
    if not names:
        return {}
    q = select(segment_t).where(segment_t.c.service == service, segment_t.c.name.in_(set(names)))
    return {row.name: row for row in session.execute(q)}


def segments_page(session: Session, service: str, after: str | None, limit: int) -> list[AnyRow]:
    """A service's segments in name order, after the name ``after`` (keyset on the primary key)."""
    q = select(segment_t).where(segment_t.c.service == service)
    if after is not None:
        q = q.where(segment_t.c.name > after)
    return list(session.execute(q.order_by(segment_t.c.name).limit(limit)))


def delete_segment(session: Session, service: str, name: str) -> bool:
    return affected(session.execute(delete(segment_t).where(_key(service, name)))) > 0
