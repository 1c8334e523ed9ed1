"""Web console sign-in and sessions (docs/CONSOLE.md).

Someone signs in by pasting the admin token (every service) or a service's API key (that service
only). The browser then holds an opaque random session id; the table keeps its SHA-256, who signed
in, and the session's CSRF token. A session ends at sign-out, at its expiry, when its API key is
revoked, or (admin) when NOTEE_ADMIN_TOKEN changes. Functions take the caller's session; the caller
commits.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy.orm import Session

from notee.core import crypto
from notee.core.errors import NotFound, Unauthorized
from notee.domain import services
from notee.store import console_sql as store
from notee.store import queue_overview as overview_sql
from notee.store import ticks
from notee.store.mysql import AnyRow
from notee.store.queue_overview import QueueOverview as QueueOverview  # re-exported for the console pages


@dataclass(frozen=True)
class Principal:
    """Who a console session acts for: the admin (``service`` None, every service) or one service."""

    service: str | None
    key_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.service is None

    def check_service(self, service: str) -> None:
        """NotFound (never "forbidden": no hint that another tenant exists) unless this principal may
        see ``service``."""
        if self.service is not None and self.service != service:
            raise NotFound("no such service")


@dataclass(frozen=True)
class ConsoleSession:
    principal: Principal
    csrf_token: str


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def admin_fingerprint(admin_token: str) -> str:
    """What an admin session remembers of the token it signed in with (a changed token ends it)."""
    return hashlib.sha256(b"notee-console-admin:" + admin_token.encode("utf-8")).hexdigest()


def identify(session: Session, secret: str, admin_token: str | None) -> Principal:
    """The admin when ``secret`` is the admin token, else the service of a live API key;
    Unauthorized for anything else (one message whatever was wrong)."""
    secret = secret.strip()
    if admin_token and crypto.tokens_equal(secret, admin_token):
        return Principal(None)
    parsed = crypto.parse_api_key(secret)
    try:
        service = services.authenticate(session, secret)
    except Unauthorized:
        raise Unauthorized("unknown admin token or API key") from None
    assert parsed is not None  # authenticate accepted it
    return Principal(service, parsed[0])


def open_session(
    session: Session, principal: Principal, *, admin_token: str | None, ttl_s: int
) -> tuple[str, ConsoleSession]:
    """A new session: (the id for the cookie, the session). The id is never stored, only its hash."""
    if principal.is_admin and not admin_token:
        raise Unauthorized("admin sign-in is disabled (NOTEE_ADMIN_TOKEN is not set)")
    session_id = secrets.token_urlsafe(32)
    csrf_token = secrets.token_urlsafe(32)
    store.insert_session(
        session,
        session_hash=_hash(session_id),
        service=principal.service,
        key_id=principal.key_id,
        admin_fingerprint=admin_fingerprint(admin_token) if principal.is_admin and admin_token else None,
        csrf_token=csrf_token,
        ttl_s=ttl_s,
    )
    return session_id, ConsoleSession(principal, csrf_token)


def current_session(session: Session, session_id: str | None, admin_token: str | None) -> ConsoleSession | None:
    """The live session of a cookie's id, or None (unknown, expired, key revoked, admin token changed)."""
    if not session_id or len(session_id) > 128:
        return None
    row = store.live_session(session, _hash(session_id))
    if row is None:
        return None
    if row.service is None:
        if not admin_token or not hmac.compare_digest(row.admin_fingerprint, admin_fingerprint(admin_token)):
            return None
    elif row.key_revoked_at is not None or row.key_service != row.service:
        return None
    return ConsoleSession(Principal(row.service, row.key_id), row.csrf_token)


def close_session(session: Session, session_id: str | None) -> None:
    if session_id and len(session_id) <= 128:
        store.delete_session(session, _hash(session_id))


def csrf_matches(console_session: ConsoleSession, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8"), console_session.csrf_token.encode("utf-8"))


def prune_expired(session: Session, *, batch: int) -> int:
    return store.prune_expired(session, batch=batch)


# --- what the health page shows that no API route does -------------------------------------------


def queue_overview(session: Session, principal: Principal) -> QueueOverview:
    """Open fan-out work and the workers leasing it: every service's for the admin, its own for a service."""
    return overview_sql.queue_overview(session, principal.service)


def recent_scheduler_minutes(session: Session, limit: int = 5) -> list[AnyRow]:
    """The scheduler's latest claimed minutes (no tenant data: minute, state, owner, jobs made)."""
    return ticks.recent_minutes(session, limit)
