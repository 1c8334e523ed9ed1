"""Services SQL: the ``service`` and ``api_key`` tables (the tenant, its delivery mode and quiet
hours; the hashes of its API keys).

SQLAlchemy Core over the tables of ``schema/mysql/0001_core.sql`` (the DDL lives there; these
``Table`` objects only describe columns for queries). Every function takes the caller's Session
and never commits: the domain function that owns the unit of work does.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    select,
    update,
)
from sqlalchemy.orm import Session

from notee.core.crypto import KEY_KINDS
from notee.store.mysql import AnyRow, affected

metadata = MetaData()

service_t = Table(
    "service",
    metadata,
    Column("service", String(32), primary_key=True),
    Column("display_name", String(200)),
    Column("timezone", String(64)),
    Column("quiet_start", Integer, nullable=True),
    Column("quiet_end", Integer, nullable=True),
    Column("slot_zones", Integer),  # 1: every topic slot row carries its recipient's zone (0024)
    Column("delivery_mode", String(7)),
    Column("created_at", DateTime),
)

api_key_t = Table(
    "api_key",
    metadata,
    Column("key_id", String(16), primary_key=True),
    Column("service", String(32)),
    Column("kind", String(6)),  # server | client (0032)
    Column("key_hash", LargeBinary(32)),
    Column("label", String(100)),
    Column("created_at", DateTime),
    Column("revoked_at", DateTime, nullable=True),
)

# --- services ---------------------------------------------------------------------------------


def insert_service(
    session: Session, *, service: str, display_name: str, timezone: str, now: datetime, delivery_mode: str = "live"
) -> None:
    """Raises IntegrityError when the service exists. A new service has no slot rows yet, and every
    writer stores the zone, so its rows all carry one (``slot_zones``)."""
    session.execute(
        service_t.insert().values(
            service=service,
            display_name=display_name,
            timezone=timezone,
            delivery_mode=delivery_mode,
            created_at=now,
            slot_zones=1,
        )
    )


def set_slot_zones(session: Session, service: str) -> None:
    """Record that every topic slot row of the service carries its zone (``notee backfill-zones``)."""
    session.execute(update(service_t).where(service_t.c.service == service).values(slot_zones=1))


def set_delivery_mode(session: Session, service: str, delivery_mode: str) -> bool:
    """False when the service does not exist."""
    found = session.execute(
        select(service_t.c.service).where(service_t.c.service == service).with_for_update()
    ).one_or_none()
    if found is None:
        return False
    session.execute(update(service_t).where(service_t.c.service == service).values(delivery_mode=delivery_mode))
    return True


def get_service(session: Session, service: str) -> AnyRow | None:
    return session.execute(select(service_t).where(service_t.c.service == service)).one_or_none()


def list_services(session: Session) -> list[AnyRow]:
    return list(session.execute(select(service_t).order_by(service_t.c.service)).all())


def services_page(session: Session, *, prefix: str, after: str | None, limit: int) -> list[AnyRow]:
    """Services whose id starts with ``prefix``, after ``after``, in id order (a primary-key range)."""
    query = select(service_t).where(service_t.c.service.startswith(prefix, autoescape=True))
    if after is not None:
        query = query.where(service_t.c.service > after)
    return list(session.execute(query.order_by(service_t.c.service).limit(limit)).all())


def set_service_quiet(session: Session, service: str, window: tuple[int, int] | None) -> bool:
    """Set (or clear, None) a service's quiet hours; False when no such service."""
    start, end = window if window is not None else (None, None)
    result = session.execute(
        update(service_t).where(service_t.c.service == service).values(quiet_start=start, quiet_end=end)
    )
    return affected(result) == 1 or get_service(session, service) is not None


# --- api keys ---------------------------------------------------------------------------------


def insert_api_key(
    session: Session, *, key_id: str, service: str, key_hash: bytes, label: str, now: datetime, kind: str = "server"
) -> None:
    if kind not in KEY_KINDS:  # the column has no CHECK (0032 is an instant ADD COLUMN): checked here
        raise ValueError(f"api key kind {kind!r}")
    session.execute(
        api_key_t.insert().values(
            key_id=key_id, service=service, kind=kind, key_hash=key_hash, label=label, created_at=now, revoked_at=None
        )
    )


def get_api_key(session: Session, key_id: str) -> AnyRow | None:
    return session.execute(
        select(api_key_t.c.service, api_key_t.c.kind, api_key_t.c.key_hash, api_key_t.c.revoked_at).where(
            api_key_t.c.key_id == key_id
        )
    ).one_or_none()


def list_api_keys(session: Session, service: str) -> list[AnyRow]:
    return list(
        session.execute(
            select(
                api_key_t.c.key_id, api_key_t.c.kind, api_key_t.c.label, api_key_t.c.created_at, api_key_t.c.revoked_at
            )
            .where(api_key_t.c.service == service)
            .order_by(api_key_t.c.created_at, api_key_t.c.key_id)
        )
    )


def api_keys_of(session: Session, services: list[str]) -> list[AnyRow]:
    """The keys of several services in one query (the console's services page)."""
    if not services:
        return []
    return list(
        session.execute(
            select(
                api_key_t.c.service,
                api_key_t.c.key_id,
                api_key_t.c.kind,
                api_key_t.c.label,
                api_key_t.c.created_at,
                api_key_t.c.revoked_at,
            )
            .where(api_key_t.c.service.in_(services))
            .order_by(api_key_t.c.service, api_key_t.c.created_at, api_key_t.c.key_id)
        )
    )


def revoke_api_key(session: Session, *, service: str, key_id: str, now: datetime) -> bool:
    """Revoke one key of ``service``; True if the key exists (revoking twice is fine)."""
    found = session.execute(
        select(api_key_t.c.revoked_at).where(and_(api_key_t.c.key_id == key_id, api_key_t.c.service == service))
    ).one_or_none()
    if found is None:
        return False
    if found.revoked_at is None:
        session.execute(update(api_key_t).where(api_key_t.c.key_id == key_id).values(revoked_at=now))
    return True
