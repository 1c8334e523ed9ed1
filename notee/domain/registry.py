"""The registry: services and API keys, users, devices and templates (provider credentials:
``notee/domain/credentials.py``; input rules: ``notee/domain/rules.py``). Each function takes the
caller's Session (and the process's ``Statements`` when Cassandra is involved), checks its input
with the rules, and writes in the caller's transaction: the caller commits (docs/ARCHITECTURE.md,
"Unit of work").

Store ordering with the subscriptions (Cassandra): removals go to Cassandra first, then the caller
commits MySQL (a failure leaves the MySQL row, so a retry finds it again); additions commit MySQL
first, then Cassandra: the caller of ``add_device`` commits, then calls
``subscriptions.on_device_added`` (a failure leaves a device without copied subscriptions, repaired
by re-registering, never a subscription row for a device that does not exist).

Tenant isolation: every query is scoped by ``service``; another tenant's object is NotFound.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from notee.core import crypto
from notee.core.clock import aware_utc, stored_now
from notee.core.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge, Unauthorized
from notee.core.vocabulary import DELIVERY_MODES, METHODS, OSES, PRIORITIES
from notee.domain import render, subscriptions
from notee.domain.rules import (
    DEFAULT_TIMEZONE,
    MAX_TEMPLATE_BYTES,
    MAX_VARIANTS,
    REGION_RE,
    TYPE_RE,
    bad,
    check_choice,
    check_data,
    check_locale,
    check_pattern,
    check_service_id,
    check_text,
    check_timezone,
    check_token,
    check_ttl,
    check_user_id,
    template_size,
)
from notee.domain.schedule import parse_local_time
from notee.store import deadletter
from notee.store import registry_sql as store
from notee.store.cql.statements import Statements
from notee.store.mysql import AnyRow, read_committed

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


@dataclass(frozen=True)
class CreatedApiKey:
    info: ApiKeyInfo
    api_key: str = field(repr=False)  # shown once to the admin, never stored


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


@dataclass(frozen=True)
class Template:
    method: str
    type: str
    title: str
    body: str
    data: dict[str, str] | None
    defaults: dict[str, str] | None
    ttl_seconds: int | None
    priority: str
    notification_key: str
    version: int
    created_at: datetime
    updated_at: datetime
    created: bool = False
    variants: dict[str, dict[str, Any]] | None = None
    quiet_hours: str = "hold"

    def content(self) -> render.TemplateContent:
        """What the renderer needs of this template."""
        return render.TemplateContent(
            self.title,
            self.body,
            self.data,
            self.defaults,
            self.ttl_seconds,
            self.priority,
            render.variants_from_json(self.variants),
        )


def _service(row: AnyRow) -> Service:
    return Service(
        row.service,
        row.display_name,
        row.timezone,
        aware_utc(row.created_at),
        row.delivery_mode,
        _window(row.quiet_start, row.quiet_end),
    )


def _window(start: int | None, end: int | None) -> tuple[int, int] | None:
    return None if start is None or end is None else (int(start), int(end))


def check_quiet_hours(value: Any, field_: str = "quiet_hours") -> tuple[int, int] | None:
    """``{"start": "HH:MM", "end": "HH:MM"}`` (or None) as (start, end) minutes of the day; a start
    after the end crosses midnight (22:00-07:00); equal start and end are refused."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"start", "end"}:
        raise bad(field_, 'must be {"start": "HH:MM", "end": "HH:MM"} or null', "dict_type")
    try:
        (sh, sm), (eh, em) = parse_local_time(value["start"]), parse_local_time(value["end"])
    except InvalidInput:
        raise bad(field_, "start and end must be HH:MM, 00:00..23:59", "local_time") from None
    if (sh, sm) == (eh, em):
        raise bad(field_, "start and end must differ", "value_error")
    return sh * 60 + sm, eh * 60 + em


def set_quiet_hours(session: Session, service: str, window: tuple[int, int] | None) -> Service:
    """A service's quiet hours (None: none), when the caller commits."""
    if not store.set_service_quiet(session, service, window):
        raise NotFound("service not found")
    return get_service(session, service)


def _key(row: AnyRow) -> ApiKeyInfo:
    return ApiKeyInfo(
        row.key_id, row.label, aware_utc(row.created_at), None if row.revoked_at is None else aware_utc(row.revoked_at)
    )


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
        _window(row.quiet_start, row.quiet_end),
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
    )


def _template(row: AnyRow, version: int, created: bool = False) -> Template:
    return Template(
        row.notification_method,
        row.notification_type,
        row.title,
        row.body,
        row.data,
        row.defaults,
        row.ttl_seconds,
        row.priority,
        row.notification_key,
        version,
        aware_utc(row.created_at),
        aware_utc(row.updated_at),
        created,
        row.variants,
        row.quiet_hours,
    )


# --- services and API keys (admin) -------------------------------------------------------------


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


def create_api_key(session: Session, service: str, *, label: str = "") -> CreatedApiKey:
    check_text("label", label, max_len=100)
    get_service(session, service)
    new = crypto.generate_api_key()
    now = stored_now()
    store.insert_api_key(session, key_id=new.key_id, service=service, key_hash=new.key_hash, label=label, now=now)
    log.info("api key created: service=%s key_id=%s", service, new.key_id)
    return CreatedApiKey(ApiKeyInfo(new.key_id, label, aware_utc(now), None), new.api_key)


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
    """The service an API key belongs to; Unauthorized when missing, malformed, unknown or revoked."""
    parsed = crypto.parse_api_key(raw_key or "")
    if parsed is None:
        raise Unauthorized("missing or malformed API key")
    key_id, secret = parsed
    row = store.get_api_key(session, key_id)
    ok = crypto.secret_matches(secret, row.key_hash if row is not None else None)
    if not ok or row is None or row.revoked_at is not None:
        raise Unauthorized("unknown or revoked API key")
    service: str = row.service
    return service


# --- users -----------------------------------------------------------------------------------


# A profile field left out of a request keeps its stored value; None clears it.
KEEP: Any = object()


def upsert_user(
    session: Session,
    statements: Callable[[], Statements],
    service: str,
    service_user_id: str,
    *,
    name: str = "",
    locale: str | None = KEEP,
    timezone: str | None = KEEP,
    quiet_hours: dict[str, str] | None = KEEP,
) -> User:
    """Create or rename; the same service_user_id always maps to the same platform user_id.
    ``locale`` (BCP 47, canonicalised) and ``timezone`` (IANA; None: the service's): set, cleared
    with None, kept when left out. A changed ``timezone`` is written to the user's topic slot rows
    too (``subscriptions.on_user_zone_changed``), under the user's row lock, before the caller
    commits: a local-time job's parts read rows by zone. ``statements`` is called only then (a
    PUT that changes no zone needs no Cassandra)."""
    check_text("service_user_id", service_user_id, min_len=1, max_len=191)
    check_text("name", name, max_len=191)
    profile: dict[str, Any] = {}
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
    new_id = str(uuid.uuid4())
    row = store.upsert_user(
        session,
        service=service,
        service_user_id=service_user_id,
        name=name,
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
) -> Device:
    """Register (or update os/region/locale of) a device, in MySQL. ``locale`` (BCP 47): the
    device's own, which wins over its user's; set, cleared with None, kept when left out. The caller commits, then copies the
    user's subscriptions to it with ``subscriptions.on_device_added`` every time, not only for a new
    device: that step is idempotent (it copies only what the device lacks), so repeating a
    registration whose Cassandra step failed completes it."""
    check_token(token)
    check_choice("os", os, OSES)
    check_pattern("region", region, REGION_RE, "up to 8 letters, digits, _ or -")
    profile: dict[str, Any] = {}
    if locale is not KEEP:
        profile["locale"] = None if locale is None else check_locale(locale)
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
    subscriptions.on_token_rotated(session, st, service, old_token, new_token, holders=current)
    return store.rotate_token(
        session, service=service, old=old_token, new=new_token, now=stored_now(), users=sorted(current)
    )


# --- templates -----------------------------------------------------------------------------------


def _check_template_id(method: Any, type_: Any) -> None:
    check_choice("method", method, METHODS)
    check_pattern("type", type_, TYPE_RE, "1..64 of letters, digits, _ . -")


def put_template(
    session: Session,
    st: Statements,
    service: str,
    method: str,
    type_: str,
    *,
    title: str,
    body: str,
    data: dict[str, str] | None = None,
    ttl_seconds: int | None = None,
    priority: str = "high",
    defaults: dict[str, str] | None = None,
    variants: dict[str, dict[str, Any]] | None = None,
    quiet_hours: str = "hold",
) -> Template:
    """Create or update. notification_key is created once and never changes; every write bumps the
    cache version counter before the caller commits: a counter timeout is reported (never retried)
    and the write is not committed, so no template changes without its version; a commit that
    fails after the bump costs one needless cache reload. Placeholders and defaults follow
    notee/domain/render.py (a CYCLE template needs a default for each placeholder). ``variants``:
    {BCP 47 tag: {title, body, data?}}, the text per locale (tags canonicalised)."""
    _check_template_id(method, type_)
    check_text("title", title, min_len=1, max_len=200)
    check_text("body", body, min_len=1, max_len=2000, newlines=True)
    data = check_data(data)
    ttl_seconds = check_ttl(ttl_seconds)
    check_choice("priority", priority, PRIORITIES)
    checked = _check_variants(variants)
    check_choice("quiet_hours", quiet_hours, ("hold", "drop"))
    render.check_template(
        method,
        render.TemplateContent(title, body, data, defaults, ttl_seconds, priority, render.variants_from_json(checked)),
    )
    for where, (t, b, d) in [("", (title, body, data))] + [
        (f"variants.{tag}: ", (v["title"], v["body"], {**(data or {}), **(v.get("data") or {})}))
        for tag, v in (checked or {}).items()
    ]:
        size = template_size(t, b, d)
        if size > MAX_TEMPLATE_BYTES:
            raise PayloadTooLarge(
                f"{where}title + body + data take {size} bytes; at most {MAX_TEMPLATE_BYTES}",
                details=[{"loc": ["body"], "type": "payload_too_large", "msg": "template too large"}],
            )
    new_key = str(uuid.uuid4())
    row = store.upsert_template(
        session,
        service=service,
        method=method,
        type_=type_,
        title=title,
        body=body,
        data=data,
        defaults=dict(defaults) if defaults else None,
        variants=checked,
        quiet_hours=quiet_hours,
        ttl_seconds=ttl_seconds,
        priority=priority,
        new_key=new_key,
        now=stored_now(),
    )
    if row.notification_key == new_key:
        # A new template: every slot row it will ever have is written with its target_slots row, so
        # its jobs may walk only the occupied slots (docs/FANOUT.md "Occupancy"). Before the commit:
        # no subscription can exist yet; a failed commit leaves a marker no template has (harmless).
        st.mark_occupancy_known(new_key, "created")
    st.add_version(service, method, type_)  # counter: never retried on timeout
    version = st.counters(service, method, type_)[0]
    return _template(row, version, created=row.notification_key == new_key)


def _check_variants(variants: Any) -> dict[str, dict[str, Any]] | None:
    """A template's locale variants: at most MAX_VARIANTS, BCP 47 keys (canonicalised, distinct),
    each {title, body, data?} under the template's own text rules. None or {}: no variants."""
    if variants is None or variants == {}:
        return None
    if not isinstance(variants, dict):
        raise bad("variants", "must be an object of locale -> {title, body, data}", "dict_type")
    if len(variants) > MAX_VARIANTS:
        raise bad("variants", f"at most {MAX_VARIANTS} locales")
    out: dict[str, dict[str, Any]] = {}
    for tag, v in variants.items():
        key = check_locale(tag, f"variants.{str(tag)[:40]}")
        if key in out:
            raise bad(
                f"variants.{str(tag)[:40]}",
                f"the same locale as another key ({key}; tags are case-insensitive)",
                "duplicate",
            )
        if not isinstance(v, dict) or set(v) - {"title", "body", "data"}:
            raise bad(f"variants.{key}", "must be an object with title, body and optional data", "dict_type")
        check_text(f"variants.{key}.title", v.get("title"), min_len=1, max_len=200)
        check_text(f"variants.{key}.body", v.get("body"), min_len=1, max_len=2000, newlines=True)
        vdata = check_data(v.get("data"))
        out[key] = {"title": v["title"], "body": v["body"], **({"data": vdata} if vdata else {})}
    return out


def get_template(session: Session, st: Statements, service: str, method: str, type_: str) -> Template:
    _check_template_id(method, type_)
    row = store.get_template(session, service, method, type_)
    if row is None:
        raise NotFound("template not found")
    return _template(row, st.counters(service, method, type_)[0])


def list_templates(session: Session, st: Statements, service: str) -> list[Template]:
    rows = store.list_templates(session, service)
    versions = st.versions(service) if rows else {}
    return [_template(r, versions.get((r.notification_method, r.notification_type), 0)) for r in rows]


def delete_template(session: Session, st: Statements, service: str, method: str, type_: str) -> None:
    """Deletes the template (when the caller commits) and disables its subscriptions (Cassandra
    first: see ``subscriptions.on_template_deleted``). The counters stay (``no`` must never go
    backwards if the template is created again)."""
    _check_template_id(method, type_)
    row = store.get_template(session, service, method, type_)
    if row is None:
        raise NotFound("template not found")
    subscriptions.on_template_deleted(st, service, method, type_, row.notification_key)
    store.delete_template(session, service, method, type_)
