"""Registry SQL: services, API keys, provider credentials, users, devices, templates.

SQLAlchemy Core over the tables of ``schema/mysql/0001_core.sql`` (the DDL lives there; these
``Table`` objects only describe columns for queries). Every function takes the caller's Session
and never commits: the domain function that owns the unit of work does.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    ColumnElement,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.orm import Session

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
    Column("key_hash", LargeBinary(32)),
    Column("label", String(100)),
    Column("created_at", DateTime),
    Column("revoked_at", DateTime, nullable=True),
)

credentials_t = Table(
    "provider_credentials",
    metadata,
    Column("service", String(32), primary_key=True),
    Column("fcm_encrypted", LargeBinary, nullable=True),
    Column("apns_encrypted", LargeBinary, nullable=True),
    Column("updated_at", DateTime),
)

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
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)

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
    Column("ttl_seconds", Integer, nullable=True),
    Column("priority", String(6)),
    Column("quiet_hours", String(4)),
    Column("notification_key", String(36)),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
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


# --- api keys ---------------------------------------------------------------------------------


def insert_api_key(session: Session, *, key_id: str, service: str, key_hash: bytes, label: str, now: datetime) -> None:
    session.execute(
        api_key_t.insert().values(
            key_id=key_id, service=service, key_hash=key_hash, label=label, created_at=now, revoked_at=None
        )
    )


def get_api_key(session: Session, key_id: str) -> AnyRow | None:
    return session.execute(
        select(api_key_t.c.service, api_key_t.c.key_hash, api_key_t.c.revoked_at).where(api_key_t.c.key_id == key_id)
    ).one_or_none()


def list_api_keys(session: Session, service: str) -> list[AnyRow]:
    return list(
        session.execute(
            select(api_key_t.c.key_id, api_key_t.c.label, api_key_t.c.created_at, api_key_t.c.revoked_at)
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


# --- provider credentials -----------------------------------------------------------------------


def upsert_credential(session: Session, *, service: str, column: str, blob: bytes | None, now: datetime) -> None:
    """Set (or clear, with None) one provider's encrypted blob; ``column`` is fcm_encrypted|apns_encrypted."""
    if column not in ("fcm_encrypted", "apns_encrypted"):
        raise ValueError(column)
    stmt = mysql_insert(credentials_t).values(service=service, updated_at=now, **{column: blob})
    stmt = stmt.on_duplicate_key_update({column: stmt.inserted[column], "updated_at": stmt.inserted.updated_at})
    session.execute(stmt)


def get_credentials(session: Session, service: str) -> AnyRow | None:
    return session.execute(select(credentials_t).where(credentials_t.c.service == service)).one_or_none()


def lock_all_credentials(session: Session) -> list[AnyRow]:
    """Every credentials row, locked until the caller's transaction ends (key rotation)."""
    return list(session.execute(select(credentials_t).order_by(credentials_t.c.service).with_for_update()).all())


def replace_credential_blobs(
    session: Session, *, service: str, fcm: bytes | None, apns: bytes | None, now: datetime
) -> None:
    session.execute(
        credentials_t.update()
        .where(credentials_t.c.service == service)
        .values(fcm_encrypted=fcm, apns_encrypted=apns, updated_at=now)
    )


# --- users ------------------------------------------------------------------------------------


def upsert_user(
    session: Session,
    *,
    service: str,
    service_user_id: str,
    name: str,
    new_user_id: str,
    now: datetime,
    profile: dict[str, Any] | None = None,
) -> AnyRow:
    """Create or rename the user; the platform user_id is only set on creation. Race-free: two
    concurrent first calls both end with the one row the database kept. ``profile``: the user
    columns the request set (``locale``; absent keys are left as they are)."""
    profile = profile or {}
    stmt = mysql_insert(user_t).values(
        service=service,
        service_user_id=service_user_id,
        service_user_name=name,
        user_id=new_user_id,
        created_at=now,
        updated_at=now,
        **profile,
    )
    stmt = stmt.on_duplicate_key_update(
        service_user_name=stmt.inserted.service_user_name,
        updated_at=stmt.inserted.updated_at,
        **{k: getattr(stmt.inserted, k) for k in profile},
    )
    session.execute(stmt)
    return session.execute(
        select(user_t).where(and_(user_t.c.service == service, user_t.c.service_user_id == service_user_id))
    ).one()


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
    """``profile``: the device columns the request set (``locale``; absent keys are left as they are)."""
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


def set_service_quiet(session: Session, service: str, window: tuple[int, int] | None) -> bool:
    """Set (or clear, None) a service's quiet hours; False when no such service."""
    start, end = window if window is not None else (None, None)
    result = session.execute(
        update(service_t).where(service_t.c.service == service).values(quiet_start=start, quiet_end=end)
    )
    return affected(result) == 1 or get_service(session, service) is not None


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


# --- templates --------------------------------------------------------------------------------


def _template_key(service: str, method: str, type_: str) -> ColumnElement[bool]:
    return and_(
        template_t.c.service == service,
        template_t.c.notification_method == method,
        template_t.c.notification_type == type_,
    )


def upsert_template(
    session: Session,
    *,
    service: str,
    method: str,
    type_: str,
    title: str,
    body: str,
    data: dict[str, str] | None,
    defaults: dict[str, str] | None,
    ttl_seconds: int | None,
    priority: str,
    new_key: str,
    now: datetime,
    variants: dict[str, Any] | None = None,
    quiet_hours: str = "hold",
) -> AnyRow:
    """Create or update; notification_key is only written on creation, so it stays stable."""
    stmt = mysql_insert(template_t).values(
        service=service,
        notification_method=method,
        notification_type=type_,
        title=title,
        body=body,
        data=data,
        defaults=defaults,
        variants=variants,
        ttl_seconds=ttl_seconds,
        priority=priority,
        quiet_hours=quiet_hours,
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
        quiet_hours=stmt.inserted.quiet_hours,
        ttl_seconds=stmt.inserted.ttl_seconds,
        priority=stmt.inserted.priority,
        updated_at=stmt.inserted.updated_at,
    )
    session.execute(stmt)
    return session.execute(select(template_t).where(_template_key(service, method, type_))).one()


def get_template(session: Session, service: str, method: str, type_: str) -> AnyRow | None:
    return session.execute(select(template_t).where(_template_key(service, method, type_))).one_or_none()


def get_template_by_key(session: Session, notification_key: str) -> AnyRow | None:
    """For fan-out jobs and the scheduler (uq_template_key)."""
    return session.execute(select(template_t).where(template_t.c.notification_key == notification_key)).one_or_none()


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


def count_rows(session: Session, service: str) -> dict[str, Any]:
    """Rows a service owns per table (tests: "nothing was written")."""
    out: dict[str, Any] = {}
    for t in (api_key_t, credentials_t, user_t, device_t, template_t):
        out[t.name] = session.execute(select(func.count()).select_from(t).where(t.c.service == service)).scalar_one()
    return out
