"""Users and their devices: register, update and delete users; register, list and remove devices;
rotate a provider's token (services: ``notee/domain/services.py``; input rules:
``notee/domain/rules.py``). Each function takes the caller's Session (and the process's
``Statements`` when Cassandra is involved), checks its input with the rules, and writes in the
caller's transaction: the caller commits (docs/ARCHITECTURE.md, "Unit of work").

Store ordering with the subscriptions (Cassandra): removals go to Cassandra first, then the caller
commits MySQL (a failure leaves the MySQL row, so a retry finds it again); additions commit MySQL
first, then Cassandra: the caller of ``add_device`` commits, then calls
``subscriptions.on_device_added`` (a failure leaves a device without copied subscriptions, repaired
by re-registering, never a subscription row for a device that does not exist).

Tenant isolation: every query is scoped by ``service``; another tenant's object is NotFound.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from notee.core.clock import aware_utc, stored_now
from notee.core.errors import NotFound
from notee.core.user_ids import new_user_id
from notee.core.vocabulary import OSES, UserFilter
from notee.domain import subscriptions, versions, withdrawals
from notee.domain.rules import (
    REGION_RE,
    bad,
    check_choice,
    check_locale,
    check_pattern,
    check_text,
    check_timezone,
    check_token,
    check_user_id,
)
from notee.domain.schedule import check_quiet_hours, quiet_window
from notee.domain.web_devices import check_device_token
from notee.store import deadletter
from notee.store import users_sql as store
from notee.store.cql.statements import Statements
from notee.store.mysql import AnyRow, read_committed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class User:
    user_id: str
    service_user_id: str
    name: str
    created_at: datetime
    updated_at: datetime
    created: bool = False
    locale: str | None = None
    timezone: str | None = None
    quiet_hours: tuple[int, int] | None = None


@dataclass(frozen=True)
class Device:
    token: str
    os: str
    region: str
    created_at: datetime
    updated_at: datetime
    created: bool = False
    locale: str | None = None
    app_version: str | None = None


def _user(row: AnyRow, created: bool = False) -> User:
    return User(
        row.user_id,
        row.service_user_id,
        row.service_user_name,
        aware_utc(row.created_at),
        aware_utc(row.updated_at),
        created,
        row.locale,
        row.timezone,
        quiet_window(row.quiet_start, row.quiet_end),
    )


def _device(row: AnyRow, created: bool = False) -> Device:
    return Device(
        row.device_token,
        row.device_os,
        row.region,
        aware_utc(row.created_at),
        aware_utc(row.updated_at),
        created,
        row.locale,
        row.app_version,
    )


# --- users -----------------------------------------------------------------------------------


# A profile field left out of a request keeps its stored value; None clears it.
KEEP: Any = object()


def upsert_user(
    session: Session,
    statements: Callable[[], Statements],
    service: str,
    service_user_id: str,
    *,
    name: str = KEEP,
    locale: str | None = KEEP,
    timezone: str | None = KEEP,
    quiet_hours: dict[str, str] | None = KEEP,
) -> User:
    """Create or update; the same service_user_id always maps to the same platform user_id. Every
    field left out (``KEEP``) stays as it is: an update never wipes what it was not given.
    ``name``: set when given (a new user's is empty). ``locale`` (BCP 47, canonicalised) and ``timezone`` (IANA; None: the service's): set, cleared
    with None, kept when left out. A changed ``timezone`` is written to the user's topic slot rows
    too (``subscriptions.on_user_zone_changed``), under the user's row lock, before the caller
    commits: a local-time job's parts read rows by zone. ``statements`` is called only then (a
    PUT that changes no zone needs no Cassandra)."""
    check_text("service_user_id", service_user_id, min_len=1, max_len=191)
    profile: dict[str, Any] = {}
    if name is not KEEP:
        profile["service_user_name"] = check_text("name", name, max_len=191)
    if locale is not KEEP:
        profile["locale"] = None if locale is None else check_locale(locale)
    if timezone is not KEEP:
        profile["timezone"] = None if timezone is None else check_timezone(timezone)
    if quiet_hours is not KEEP:
        window = check_quiet_hours(quiet_hours)
        profile["quiet_start"], profile["quiet_end"] = window if window is not None else (None, None)
    before = None
    if "timezone" in profile and store.user_zone(session, service, service_user_id) is not None:
        # An existing user: lock its row first (a record lock: no gap lock a racing first PUT could
        # deadlock on) and read the zone its slot rows carry now; they change with it.
        before = store.user_zone_for_update(session, service, service_user_id)
    new_id = new_user_id()
    row = store.upsert_user(
        session,
        service=service,
        service_user_id=service_user_id,
        new_user_id=new_id,
        now=stored_now(),
        profile=profile,
    )
    created = row.user_id == new_id
    if "timezone" in profile and not created and (before is None or before[1] != row.timezone):
        # (before None: a racing request created the user after our first read; we hold its lock now)
        rewritten = subscriptions.on_user_zone_changed(session, statements(), service, row.user_id, row.timezone)
        log.info("user %s of %s: zone now %s on %d slot row(s)", row.user_id, service, row.timezone, rewritten)
    return _user(row, created=created)


def user_id_of(session: Session, service: str, service_user_id: str) -> str:
    """The platform user_id of the service's own id (NotFound, as for an unknown user_id)."""
    found = store.user_zone(session, service, check_text("service_user_id", service_user_id, min_len=1, max_len=191))
    if found is None:
        raise NotFound("user not found")
    return found[0]


def list_users(session: Session, service: str, wanted: UserFilter) -> list[User]:
    """A service's users, newest first (``UserFilter``: creation time, devices, platform, the page)."""
    if wanted.platform is not None and wanted.platform not in OSES:
        raise bad("platform", f"must be one of {', '.join(OSES)}", "enum")
    return [_user(row) for row in store.list_users(session, service, wanted)]


def get_user(session: Session, service: str, user_id: str) -> User:
    row = store.get_user(session, service, check_user_id(user_id))
    if row is None:
        raise NotFound("user not found")
    return _user(row)


def delete_user(session: Session, st: Statements, service: str, user_id: str) -> None:
    """Removes the user, its devices (cascade) and its subscriptions (Cassandra now, MySQL when the
    caller commits). The user's row is locked exclusively first, so a subscribe or device copy in
    progress finishes before its rows are read here, and one that comes later finds no user
    (deletion wins: notee/domain/subscriptions.py)."""
    row = store.get_user(session, service, check_user_id(user_id), for_update=True)
    if row is None:
        raise NotFound("user not found")
    user = _user(row)
    subscriptions.on_user_deleted(session, st, service, user.user_id)
    # Its dead letters go too (their payloads were addressed to it), except those of a token another
    # user of the service still holds (a shared device: the letter is that user's as well).
    tokens = [d.device_token for d in store.list_devices(session, service, user.user_id)]
    deadletter.delete_for_tokens(
        session, service, [t for t in tokens if set(store.holders_of_token(session, service, t)) <= {user.user_id}]
    )
    store.delete_user(session, service, user.user_id)
    log.info("user deleted: service=%s user_id=%s", service, user.user_id)


# --- devices -----------------------------------------------------------------------------------


def add_device(
    session: Session,
    service: str,
    user_id: str,
    *,
    token: str,
    os: str,
    region: str = "",
    locale: str | None = KEEP,
    app_version: str | None = KEEP,
) -> Device:
    """Register (or update os/region/locale of) a device, in MySQL. ``locale`` (BCP 47): the
    device's own, which wins over its user's; set, cleared with None, kept when left out.
    ``app_version`` (``versions.APP_VERSION_PATTERN``): the app's version, stored with its sortable
    key (``versions.version_key``); set, cleared with None, kept when left out. The caller commits, then copies the
    user's subscriptions to it with ``subscriptions.on_device_added`` every time, not only for a new
    device: that step is idempotent (it copies only what the device lacks), so repeating a
    registration whose Cassandra step failed completes it."""
    check_choice("os", os, OSES)
    check_device_token(os, token)
    check_pattern("region", region, REGION_RE, "up to 8 letters, digits, _ or -")
    profile: dict[str, Any] = {}
    if locale is not KEEP:
        profile["locale"] = None if locale is None else check_locale(locale)
    if app_version is not KEEP:
        if app_version is not None:
            check_pattern("app_version", app_version, versions.APP_VERSION_RE, "1-32 letters, digits, '.', '-' or '+'")
        profile["app_version"] = app_version
        profile["app_version_key"] = None if app_version is None else versions.version_key(app_version)
    user = store.get_user(session, service, check_user_id(user_id), for_update=True)
    if user is None:
        raise NotFound("user not found")
    # A plain read: the user row lock above already serialises this user's registrations, and a
    # locking read of a missing device row takes a gap lock that deadlocks concurrent inserts of
    # other users' devices (seen in the soak). The upsert below is correct either way.
    before = store.get_device(session, service, user.user_id, token)
    row = store.upsert_device(
        session,
        service=service,
        user_id=user.user_id,
        token=token,
        os=os,
        region=region,
        now=stored_now(),
        profile=profile,
    )
    return _device(row, created=before is None)


def list_devices(session: Session, service: str, user_id: str) -> list[Device]:
    user = get_user(session, service, user_id)
    return [_device(r) for r in store.list_devices(session, service, user.user_id)]


def remove_device(session: Session, st: Statements, service: str, user_id: str, token: str) -> None:
    """Cassandra rows now, the MySQL row when the caller commits; under the user's exclusive row lock
    (deletion wins: notee/domain/subscriptions.py)."""
    check_token(token)  # a non-ASCII token would reach MySQL's ascii column and fail there (503)
    row = store.get_user(session, service, check_user_id(user_id), for_update=True)
    if row is None:
        raise NotFound("user not found")
    user = _user(row)
    if not isinstance(token, str) or store.get_device(session, service, user.user_id, token) is None:
        raise NotFound("device not found")
    withdrawals.settle_users(session, st, service, [user.user_id], exclusive=True)
    subscriptions.on_device_removed(st, service, user.user_id, token)
    store.delete_device(session, service, user.user_id, token)


def rotate_token(session: Session, st: Statements, service: str, *, old_token: str, new_token: str) -> int:
    """The provider replaced ``old_token`` by ``new_token``: every user of the service holding the old
    one now holds the new one, keeping the device's created_at and its subscriptions. Returns the
    number of users rotated. Cassandra first (the old rows are removed there), MySQL when the caller
    commits; a retry after a MySQL failure finds the old token again and converges.

    The rows of every user holding either token are locked exclusively while their subscription
    rows move (deletion wins: a user deleted or a device removed meanwhile waits, then finds the
    moved rows; notee/domain/subscriptions.py). Only the locked users' devices are rewritten: a user
    who registers the old token meanwhile keeps it (that registration comes after the rotation)."""
    check_token(old_token, "old_token")
    check_token(new_token, "new_token")
    if old_token == new_token:
        raise bad("new_token", "must differ from old_token")
    # No gap locks on the device token index (concurrent rotations deadlocked on them, each inserting
    # its new token into a gap the other's locking read held), and reads that see the latest commits.
    read_committed(session)
    holders = store.holders_of_token(session, service, old_token)
    if not holders:
        raise NotFound("no device with this token")
    locked = set(
        store.lock_users(
            session, service, holders + store.holders_of_token(session, service, new_token), exclusive=True
        )
    )
    # Under the locks, a current read (the plain reads above saw the snapshot before them).
    current = {u: os_ for u, os_ in store.token_devices(session, service, old_token, for_update=True) if u in locked}
    if not current:  # every holder went away while we waited for the locks
        raise NotFound("no device with this token")
    if "WEB" in current.values():  # a browser's new subscription replaces its old one
        check_device_token("WEB", new_token, "new_token")
    subscriptions.on_token_rotated(session, st, service, old_token, new_token, holders=current)
    return store.rotate_token(
        session, service=service, old=old_token, new=new_token, now=stored_now(), users=sorted(current)
    )
