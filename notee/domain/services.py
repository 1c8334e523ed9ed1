"""Services (the tenants) and their API keys, delivery mode and quiet hours (provider credentials:
``notee/domain/credentials.py``; users and devices: ``notee/domain/users.py``; templates:
``notee/domain/templates.py``; input rules: ``notee/domain/rules.py``). Each function takes the
caller's Session, checks its input with the rules, and writes in the caller's transaction: the
caller commits (docs/ARCHITECTURE.md, "Unit of work").

Tenant isolation: every query is scoped by ``service``; another tenant's object is NotFound.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from notee.core import crypto
from notee.core.clock import aware_utc, stored_now
from notee.core.errors import Conflict, NotFound, Unauthorized
from notee.core.vocabulary import DELIVERY_MODES
from notee.domain.rules import DEFAULT_TIMEZONE, check_choice, check_service_id, check_text, check_timezone
from notee.domain.schedule import quiet_window
from notee.store import services_sql as store
from notee.store.mysql import AnyRow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Service:
    service: str
    display_name: str
    timezone: str
    created_at: datetime
    delivery_mode: str = "live"
    quiet_hours: tuple[int, int] | None = None  # (start, end) minutes of the day, local to timezone


@dataclass(frozen=True)
class ApiKeyInfo:
    key_id: str
    label: str
    created_at: datetime
    revoked_at: datetime | None
    kind: str = "server"  # server | client (a client key may only post receipts: docs/ENGAGEMENT.md)


@dataclass(frozen=True)
class CreatedApiKey:
    info: ApiKeyInfo
    api_key: str = field(repr=False)  # shown once to the admin, never stored


def _service(row: AnyRow) -> Service:
    return Service(
        row.service,
        row.display_name,
        row.timezone,
        aware_utc(row.created_at),
        row.delivery_mode,
        quiet_window(row.quiet_start, row.quiet_end),
    )


def _key(row: AnyRow) -> ApiKeyInfo:
    return ApiKeyInfo(
        row.key_id,
        row.label,
        aware_utc(row.created_at),
        None if row.revoked_at is None else aware_utc(row.revoked_at),
        row.kind,
    )


# --- services (admin) --------------------------------------------------------------------------


def create_service(
    session: Session, *, service: str, display_name: str, timezone: str | None = None, delivery_mode: str = "live"
) -> Service:
    check_service_id(service)
    check_text("display_name", display_name, min_len=1, max_len=200)
    tz = check_timezone(timezone if timezone is not None else DEFAULT_TIMEZONE)
    check_choice("delivery_mode", delivery_mode, DELIVERY_MODES)
    try:
        with session.begin_nested():  # a SAVEPOINT: the duplicate is refused, the caller's transaction goes on
            store.insert_service(
                session,
                service=service,
                display_name=display_name,
                timezone=tz,
                now=stored_now(),
                delivery_mode=delivery_mode,
            )
    except IntegrityError:
        raise Conflict(f"service {service} already exists") from None
    log.info("service created: %s", service)
    return get_service(session, service)


def list_services(session: Session) -> list[Service]:
    return [_service(row) for row in store.list_services(session)]


def services_page(session: Session, *, prefix: str = "", after: str | None = None, limit: int = 50) -> list[Service]:
    """One page of services in id order: those whose id starts with ``prefix``, after ``after``."""
    return [_service(row) for row in store.services_page(session, prefix=prefix, after=after, limit=limit)]


def get_service(session: Session, service: str) -> Service:
    row = store.get_service(session, service)
    if row is None:
        raise NotFound("service not found")
    return _service(row)


def set_delivery_mode(session: Session, service: str, delivery_mode: str) -> Service:
    """``live`` or ``dry_run`` (admin), when the caller commits. Jobs already made keep the mode they
    were made in."""
    check_choice("delivery_mode", delivery_mode, DELIVERY_MODES)
    if not store.set_delivery_mode(session, service, delivery_mode):
        raise NotFound("service not found")
    log.warning(
        "service %s: delivery mode set to %s%s",
        service,
        delivery_mode,
        " (pushes are recorded by the log provider, not sent)" if delivery_mode == "dry_run" else "",
    )
    return get_service(session, service)


def set_quiet_hours(session: Session, service: str, window: tuple[int, int] | None) -> Service:
    """A service's quiet hours (None: none; ``schedule.check_quiet_hours`` reads a request's), when
    the caller commits."""
    if not store.set_service_quiet(session, service, window):
        raise NotFound("service not found")
    return get_service(session, service)


# --- API keys (admin) ----------------------------------------------------------------------------


def create_api_key(session: Session, service: str, *, label: str = "", kind: str = "server") -> CreatedApiKey:
    """A new key of ``kind``: ``server`` (``nk_``, everything a service may do) or ``client``
    (``nck_``, safe to ship in an app: it may only post receipts)."""
    check_text("label", label, max_len=100)
    check_choice("kind", kind, crypto.KEY_KINDS)
    get_service(session, service)
    new = crypto.generate_api_key(kind)
    now = stored_now()
    store.insert_api_key(
        session, key_id=new.key_id, service=service, key_hash=new.key_hash, label=label, now=now, kind=kind
    )
    log.info("api key created: service=%s key_id=%s kind=%s", service, new.key_id, kind)
    return CreatedApiKey(ApiKeyInfo(new.key_id, label, aware_utc(now), None, kind), new.api_key)


def list_api_keys(session: Session, service: str) -> list[ApiKeyInfo]:
    get_service(session, service)
    return [_key(r) for r in store.list_api_keys(session, service)]


def api_keys_by_service(session: Session, services: list[str]) -> dict[str, list[ApiKeyInfo]]:
    """Every key (revoked ones too, never a secret) of each of ``services``, in one query."""
    out: dict[str, list[ApiKeyInfo]] = {s: [] for s in services}
    for row in store.api_keys_of(session, services):
        out[row.service].append(_key(row))
    return out


def revoke_api_key(session: Session, service: str, key_id: str) -> None:
    if not store.revoke_api_key(session, service=service, key_id=key_id, now=stored_now()):
        raise NotFound("api key not found")
    log.info("api key revoked: service=%s key_id=%s", service, key_id)


def authenticate(session: Session, raw_key: str | None) -> str:
    """The service an API key belongs to; Unauthorized when missing, malformed, unknown or revoked,
    or sent with the other kind's prefix (a client key's secret behind ``nk_`` is no server key)."""
    parsed = crypto.parse_api_key(raw_key or "")
    if parsed is None:
        raise Unauthorized("missing or malformed API key")
    key_id, secret = parsed
    row = store.get_api_key(session, key_id)
    ok = crypto.secret_matches(secret, row.key_hash if row is not None else None)
    if not ok or row is None or row.revoked_at is not None or row.kind != crypto.key_kind(raw_key or ""):
        raise Unauthorized("unknown or revoked API key")
    service: str = row.service
    return service
