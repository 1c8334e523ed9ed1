"""Users SQL: the ``user`` and ``device`` tables (a service's users, their profile and quiet hours,
their devices and tokens), and the per-page recipient reads of fan-out (locales, clocks).

SQLAlchemy Core over the tables of ``schema/mysql/0001_core.sql`` (the DDL lives there; these
``Table`` objects only describe columns for queries). Every function takes the caller's Session
and never commits: the domain function that owns the unit of work does.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    and_,
    delete,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.orm import Session

from notee.core.vocabulary import OSES, UserFilter
from notee.store.mysql import AnyRow, affected

metadata = MetaData()

user_t = Table(
    "user",
    metadata,
    Column("service", String(32), primary_key=True),
    Column("service_user_id", String(191), primary_key=True),
    Column("service_user_name", String(191)),
    Column("locale", String(35), nullable=True),
    Column("timezone", String(64), nullable=True),
    Column("quiet_start", Integer, nullable=True),
    Column("quiet_end", Integer, nullable=True),
    Column("user_id", String(36)),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)

device_t = Table(
    "device",
    metadata,
    Column("service", String(32), primary_key=True),
    Column("user_id", String(36), primary_key=True),
    Column("device_token", String(512), primary_key=True),
    Column("device_os", String(3)),
    Column("region", String(8)),
    Column("locale", String(35), nullable=True),
    Column("app_version", String(32), nullable=True),  # 0026: as the app reported it
    Column("app_version_key", String(100), nullable=True),  # 0026: versions.version_key of it
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)

# --- users ------------------------------------------------------------------------------------


def upsert_user(
    session: Session,
    *,
    service: str,
    service_user_id: str,
    new_user_id: str,
    now: datetime,
    profile: dict[str, Any] | None = None,
) -> AnyRow:
    """Create or update the user; the platform user_id is only set on creation. Race-free: two
    concurrent first calls both end with the one row the database kept. ``profile``: the user
    columns the request set (``service_user_name``, ``locale``, ...); the others are left as they
    are (a new user: the name empty, the rest NULL)."""
    profile = profile or {}
    stmt = mysql_insert(user_t).values(
        service=service,
        service_user_id=service_user_id,
        user_id=new_user_id,
        created_at=now,
        updated_at=now,
        **({"service_user_name": ""} | profile),
    )
    stmt = stmt.on_duplicate_key_update(
        updated_at=stmt.inserted.updated_at,
        **{k: getattr(stmt.inserted, k) for k in profile},
    )
    session.execute(stmt)
    return session.execute(
        select(user_t).where(and_(user_t.c.service == service, user_t.c.service_user_id == service_user_id))
    ).one()


def list_users(session: Session, service: str, wanted: UserFilter) -> list[AnyRow]:
    """A service's users, newest first, a page at a time (ix_user_created: keyset on (created_at,
    user_id), stable while users are added). "Has devices" and the platform are EXISTS on device's
    primary key, which begins with (service, user_id)."""
    q = select(user_t).where(user_t.c.service == service)
    if wanted.created_since is not None:
        q = q.where(user_t.c.created_at >= wanted.created_since)
    if wanted.before is not None:
        at, user_id = wanted.before
        q = q.where(or_(user_t.c.created_at < at, and_(user_t.c.created_at == at, user_t.c.user_id < user_id)))
    devices = select(device_t.c.device_token).where(
        device_t.c.service == user_t.c.service, device_t.c.user_id == user_t.c.user_id
    )
    if wanted.platform is not None:
        q = q.where(exists(devices.where(device_t.c.device_os == wanted.platform)))
    if wanted.has_devices is not None:
        q = q.where(exists(devices) if wanted.has_devices else ~exists(devices))
    q = q.order_by(user_t.c.created_at.desc(), user_t.c.user_id.desc()).limit(wanted.limit)
    return list(session.execute(q).all())


def user_ids_page(session: Session, service: str, after: str | None, limit: int) -> list[str]:
    """A service's user ids in order, after ``after`` (keyset paging, uq_user_user_id)."""
    q = select(user_t.c.user_id).where(user_t.c.service == service)
    if after is not None:
        q = q.where(user_t.c.user_id > after)
    return [r[0] for r in session.execute(q.order_by(user_t.c.user_id).limit(limit))]


def user_zone(session: Session, service: str, service_user_id: str) -> tuple[str, str | None] | None:
    """(user_id, time zone) of a user by the service's id, without a lock (None: no such user)."""
    row = session.execute(
        select(user_t.c.user_id, user_t.c.timezone).where(
            and_(user_t.c.service == service, user_t.c.service_user_id == service_user_id)
        )
    ).one_or_none()
    return None if row is None else (row[0], row[1])


def user_zone_for_update(session: Session, service: str, service_user_id: str) -> tuple[str, str | None] | None:
    """(user_id, time zone) of a user by the service's id, its row locked exclusively until the caller's
    transaction ends (a zone change rewrites the zone of the user's slot rows under that lock)."""
    row = session.execute(
        select(user_t.c.user_id, user_t.c.timezone)
        .where(and_(user_t.c.service == service, user_t.c.service_user_id == service_user_id))
        .with_for_update()
    ).one_or_none()
    return None if row is None else (row[0], row[1])


def user_zones(session: Session, service: str, user_ids: Collection[str]) -> dict[str, str | None]:
    """user_id -> time zone (None: the service's) of those of ``user_ids`` that exist (uq_user_user_id)."""
    if not user_ids:
        return {}
    rows = session.execute(
        select(user_t.c.user_id, user_t.c.timezone).where(
            and_(user_t.c.service == service, user_t.c.user_id.in_(list(user_ids)))
        )
    )
    return {r[0]: r[1] for r in rows}


def get_user(
    session: Session, service: str, user_id: str, *, for_update: bool = False, for_share: bool = False
) -> AnyRow | None:
    """One user; ``for_update`` / ``for_share`` lock its row (exclusive / shared) until the caller's
    transaction ends: the user-row lock every writer of the user's subscription rows holds
    (docs/SCHEMA.md, "Deletion wins")."""
    q = select(user_t).where(and_(user_t.c.service == service, user_t.c.user_id == user_id))
    if for_update or for_share:
        q = q.with_for_update(read=not for_update)
    return session.execute(q).one_or_none()


def lock_users(session: Session, service: str, user_ids: Sequence[str], *, exclusive: bool) -> list[str]:
    """Lock the rows of those of ``user_ids`` that exist (one statement, in index order, so two
    callers lock overlapping sets in the same order); returns them, sorted."""
    if not user_ids:
        return []
    q = (
        select(user_t.c.user_id)
        .where(and_(user_t.c.service == service, user_t.c.user_id.in_(sorted(set(user_ids)))))
        .order_by(user_t.c.user_id)
        .with_for_update(read=not exclusive)
    )
    return [r.user_id for r in session.execute(q)]


def delete_user(session: Session, service: str, user_id: str) -> int:
    """Deletes the user; its devices go with it (ON DELETE CASCADE)."""
    return affected(
        session.execute(delete(user_t).where(and_(user_t.c.service == service, user_t.c.user_id == user_id)))
    )


# --- devices ----------------------------------------------------------------------------------


def _device_key(service: str, user_id: str, token: str) -> ColumnElement[bool]:
    return and_(device_t.c.service == service, device_t.c.user_id == user_id, device_t.c.device_token == token)


def get_device(session: Session, service: str, user_id: str, token: str, *, for_update: bool = False) -> AnyRow | None:
    q = select(device_t).where(_device_key(service, user_id, token))
    if for_update:
        q = q.with_for_update()
    return session.execute(q).one_or_none()


def upsert_device(
    session: Session,
    *,
    service: str,
    user_id: str,
    token: str,
    os: str,
    region: str,
    now: datetime,
    profile: dict[str, Any] | None = None,
) -> AnyRow:
    """``profile``: the device columns the request set (``locale``, ``app_version`` and
    ``app_version_key``; absent keys are left as they are). ValueError for a platform Notee does not
    know: the store checks it, the table does not (migration 0031)."""
    if os not in OSES:
        raise ValueError(f"unknown device platform {os!r}; one of {', '.join(OSES)}")
    profile = profile or {}
    stmt = mysql_insert(device_t).values(
        service=service,
        user_id=user_id,
        device_token=token,
        device_os=os,
        region=region,
        created_at=now,
        updated_at=now,
        **profile,
    )
    stmt = stmt.on_duplicate_key_update(
        device_os=stmt.inserted.device_os,
        region=stmt.inserted.region,
        updated_at=stmt.inserted.updated_at,
        **{k: getattr(stmt.inserted, k) for k in profile},
    )
    session.execute(stmt)
    return session.execute(select(device_t).where(_device_key(service, user_id, token))).one()


def list_devices(session: Session, service: str, user_id: str) -> list[AnyRow]:
    return list(
        session.execute(
            select(device_t)
            .where(and_(device_t.c.service == service, device_t.c.user_id == user_id))
            .order_by(device_t.c.created_at, device_t.c.device_token)
        )
    )


def recipient_locales(session: Session, service: str, user_ids: Collection[str]) -> dict[tuple[str, str], str]:
    """(user_id, device_token) -> locale (the device's, else its user's) of every device of these
    users that has one: one query per fan-out page (uq_user_user_id, the device primary key)."""
    if not user_ids:
        return {}
    locale = func.coalesce(device_t.c.locale, user_t.c.locale)
    rows = session.execute(
        select(device_t.c.user_id, device_t.c.device_token, locale)
        .join(user_t, and_(user_t.c.service == device_t.c.service, user_t.c.user_id == device_t.c.user_id))
        .where(and_(device_t.c.service == service, device_t.c.user_id.in_(list(user_ids)), locale.is_not(None)))
    )
    return {(r[0], r[1]): r[2] for r in rows}


# A user's time zone and quiet-hours window as a recipient filter reads them: (timezone or None,
# (start, end) minutes of the day or None). None for either: the service's.
UserClock = tuple[str | None, tuple[int, int] | None]


def user_clocks(session: Session, service: str, user_ids: Collection[str]) -> dict[str, UserClock]:
    """user_id -> (time zone, quiet window) of those of these users that carry either (the others
    use the service's): one query per page of a local-time or quiet-hours job (uq_user_user_id)."""
    if not user_ids:
        return {}
    rows = session.execute(
        select(user_t.c.user_id, user_t.c.timezone, user_t.c.quiet_start, user_t.c.quiet_end).where(
            and_(
                user_t.c.service == service,
                user_t.c.user_id.in_(list(user_ids)),
                (user_t.c.timezone.is_not(None)) | (user_t.c.quiet_start.is_not(None)),
            )
        )
    )
    return {r[0]: (r[1], (int(r[2]), int(r[3])) if r[2] is not None else None) for r in rows}


def quiet_in_use(session: Session, service: str) -> list[UserClock]:
    """The distinct (time zone, window) pairs of a service's users with quiet hours (ix_user_quiet)."""
    rows = session.execute(
        select(user_t.c.timezone, user_t.c.quiet_start, user_t.c.quiet_end)
        .where(and_(user_t.c.service == service, user_t.c.quiet_start.is_not(None)))
        .distinct()
    )
    return [(r[0], (int(r[1]), int(r[2]))) for r in rows]


def zones_in_use(session: Session, service: str) -> list[str | None]:
    """The distinct time zones of a service's users (None: users without one), ix_user_timezone."""
    return [r[0] for r in session.execute(select(user_t.c.timezone).where(user_t.c.service == service).distinct())]


def delete_device(session: Session, service: str, user_id: str, token: str) -> int:
    return affected(session.execute(delete(device_t).where(_device_key(service, user_id, token))))


def holders_of_token(session: Session, service: str, token: str, *, for_update: bool = False) -> list[str]:
    """user_ids of this service holding ``token`` (ix_device_token)."""
    q = select(device_t.c.user_id).where(and_(device_t.c.service == service, device_t.c.device_token == token))
    if for_update:
        q = q.with_for_update()
    return [r.user_id for r in session.execute(q)]


def token_devices(session: Session, service: str, token: str, *, for_update: bool = False) -> list[tuple[str, str]]:
    """(user_id, device_os) of every device of this service with ``token`` (ix_device_token)."""
    q = select(device_t.c.user_id, device_t.c.device_os).where(
        and_(device_t.c.service == service, device_t.c.device_token == token)
    )
    if for_update:
        q = q.with_for_update()
    return [(r.user_id, r.device_os) for r in session.execute(q)]


def rotate_token(
    session: Session, *, service: str, old: str, new: str, now: datetime, users: Sequence[str] | None = None
) -> int:
    """Replace ``old`` by ``new`` for every user of the service holding it (only among ``users``, the
    user rows the caller locked, when given), keeping created_at (the device's place). A user who
    already holds ``new`` just loses the old row. Returns users rotated."""
    holders = holders_of_token(session, service, old, for_update=True)
    if users is not None:
        holders = [u for u in holders if u in set(users)]
    if not holders:
        return 0
    already = set(holders_of_token(session, service, new, for_update=True))
    both = [u for u in holders if u in already]
    if both:
        session.execute(
            delete(device_t).where(
                and_(device_t.c.service == service, device_t.c.device_token == old, device_t.c.user_id.in_(both))
            )
        )
    session.execute(
        update(device_t)
        .where(and_(device_t.c.service == service, device_t.c.device_token == old, device_t.c.user_id.in_(holders)))
        .values(device_token=new, updated_at=now)
    )
    return len(holders)
