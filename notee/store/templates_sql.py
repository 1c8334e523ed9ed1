"""Templates SQL: the ``notification_template`` table (a service's templates by method and type,
and the notification_key fan-out jobs and the scheduler find them by).

SQLAlchemy Core over the table of ``schema/mysql/0001_core.sql`` (the DDL lives there; this
``Table`` object only describes columns for queries). Every function takes the caller's Session
and never commits: the domain function that owns the unit of work does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, ColumnElement, DateTime, Integer, MetaData, String, Table, and_, delete, select
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.orm import Session

from notee.store.mysql import AnyRow, affected

metadata = MetaData()

template_t = Table(
    "notification_template",
    metadata,
    Column("service", String(32), primary_key=True),
    Column("notification_method", String(6), primary_key=True),
    Column("notification_type", String(64), primary_key=True),
    Column("title", String(200)),
    Column("body", String(2000)),
    Column("data", JSON, nullable=True),
    Column("defaults", JSON, nullable=True),
    Column("variants", JSON, nullable=True),
    Column("payload", JSON, nullable=True),
    Column("ttl_seconds", Integer, nullable=True),
    Column("priority", String(6)),
    Column("quiet_hours", String(4)),
    Column("notification_key", String(36)),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)


def _template_key(service: str, method: str, type_: str) -> ColumnElement[bool]:
    return and_(
        template_t.c.service == service,
        template_t.c.notification_method == method,
        template_t.c.notification_type == type_,
    )


@dataclass(frozen=True, slots=True)
class TemplateRow:
    """The columns a template write sets: its key (service, method, type) and its content. The
    notification_key and the timestamps are the write's own (``upsert_template``)."""

    service: str
    method: str
    type_: str
    title: str
    body: str
    data: dict[str, str] | None = None
    defaults: dict[str, str] | None = None
    variants: dict[str, Any] | None = None
    ttl_seconds: int | None = None
    priority: str = "high"
    quiet_hours: str = "hold"
    payload: dict[str, Any] | None = None  # the rich fields (notee/domain/payloads.py)


def upsert_template(session: Session, row: TemplateRow, *, new_key: str, now: datetime) -> AnyRow:
    """Create or update; notification_key (``new_key``) is only written on creation, so it stays stable."""
    stmt = mysql_insert(template_t).values(
        service=row.service,
        notification_method=row.method,
        notification_type=row.type_,
        title=row.title,
        body=row.body,
        data=row.data,
        defaults=row.defaults,
        variants=row.variants,
        payload=row.payload,
        ttl_seconds=row.ttl_seconds,
        priority=row.priority,
        quiet_hours=row.quiet_hours,
        notification_key=new_key,
        created_at=now,
        updated_at=now,
    )
    stmt = stmt.on_duplicate_key_update(
        title=stmt.inserted.title,
        body=stmt.inserted.body,
        data=stmt.inserted.data,
        defaults=stmt.inserted.defaults,
        variants=stmt.inserted.variants,
        payload=stmt.inserted.payload,
        quiet_hours=stmt.inserted.quiet_hours,
        ttl_seconds=stmt.inserted.ttl_seconds,
        priority=stmt.inserted.priority,
        updated_at=stmt.inserted.updated_at,
    )
    session.execute(stmt)
    return session.execute(select(template_t).where(_template_key(row.service, row.method, row.type_))).one()


def get_template(session: Session, service: str, method: str, type_: str) -> AnyRow | None:
    return session.execute(select(template_t).where(_template_key(service, method, type_))).one_or_none()


def get_template_by_key(session: Session, notification_key: str) -> AnyRow | None:
    """For fan-out jobs and the scheduler (uq_template_key)."""
    return session.execute(select(template_t).where(template_t.c.notification_key == notification_key)).one_or_none()


def methods_of_keys(session: Session, notification_keys: Sequence[str]) -> dict[str, str]:
    """notification_key -> its template's method, for the keys that still have a template (one
    uq_template_key range read for the batch; a key of a deleted template is absent)."""
    if not notification_keys:
        return {}
    rows = session.execute(
        select(template_t.c.notification_key, template_t.c.notification_method).where(
            template_t.c.notification_key.in_(list(notification_keys))
        )
    )
    return {str(r.notification_key): str(r.notification_method) for r in rows}


def list_templates(session: Session, service: str) -> list[AnyRow]:
    return list(
        session.execute(
            select(template_t)
            .where(template_t.c.service == service)
            .order_by(template_t.c.notification_method, template_t.c.notification_type)
        )
    )


def delete_template(session: Session, service: str, method: str, type_: str) -> int:
    return affected(session.execute(delete(template_t).where(_template_key(service, method, type_))))
