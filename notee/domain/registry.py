"""The registry's units of work: services and API keys, provider credentials, users, devices and
templates. Each function takes the Session (and the Runtime when Cassandra is involved), checks its
input with the pure ``check_*`` rules below, and commits its own unit of work.

Store ordering with the subscriptions (Cassandra): removals go to Cassandra first, then MySQL
commits (a failure leaves the MySQL row, so the caller's retry finds it again); additions commit
MySQL first, then Cassandra (a failure leaves a device without copied subscriptions, repaired by
re-registering, never a subscription row for a device that does not exist).

Tenant isolation: every query is scoped by ``service``; another tenant's object is NotFound.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from notee import secrets as keys
from notee.domain import schedule
from notee.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge, ProviderConfigError, Unauthorized
from notee.store import cql
from notee.store import registry as store

log = logging.getLogger(__name__)

# --- rules (pure) -------------------------------------------------------------------------------

SERVICE_RE = re.compile(r"^[A-Z][A-Z0-9_]{1,31}$")
TYPE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
TOKEN_RE = re.compile(r"^[\x21-\x7e]{8,512}$")  # printable ASCII, no space
REGION_RE = re.compile(r"^[A-Za-z0-9_-]{0,8}$")
APNS_ID_RE = re.compile(r"^[A-Z0-9]{10}$")  # Apple key id and team id: 10 characters
BUNDLE_RE = re.compile(r"^[A-Za-z0-9.-]{1,155}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_NEWLINE_RE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")

METHODS = ("TOPIC", "CYCLE", "SINGLE")
OSES = ("IOS", "AOS")
PRIORITIES = ("high", "normal")
DEFAULT_TIMEZONE = "Asia/Seoul"
MAX_TTL_SECONDS = 2_419_200  # 28 days: FCM's maximum android.ttl (APNs has no shorter cap)
MAX_DATA_KEYS = 32
MAX_DATA_KEY_LEN = 64
MAX_DATA_VALUE_LEN = 1024
# FCM and APNs both cap a payload at 4096 bytes; a template whose static parts already exceed
# 3584 bytes leaves no room for the provider envelope and rendered placeholders.
MAX_TEMPLATE_BYTES = 3584
MAX_CREDENTIALS_JSON = 32_768


def _bad(field_: str, msg: str, type_: str = "value_error") -> InvalidInput:
    return InvalidInput(f"{field_}: {msg}", details=[{"loc": [field_], "type": type_, "msg": msg}])


def check_text(field_: str, value: Any, *, max_len: int, min_len: int = 0, newlines: bool = False) -> str:
    """A user-facing string: bounded, valid Unicode (no lone surrogates), no control characters
    (``newlines`` allows ``\\n`` only, for notification bodies)."""
    if not isinstance(value, str):
        raise _bad(field_, "must be a string", "string_type")
    if not min_len <= len(value) <= max_len:
        raise _bad(field_, f"length must be {min_len}..{max_len}", "string_length")
    if (_CONTROL_BUT_NEWLINE_RE if newlines else _CONTROL_RE).search(value):
        raise _bad(field_, "must not contain control characters", "control_characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(field_, "must be valid Unicode", "unicode") from None
    return value


def control_free(value: str, *, newlines: bool = False) -> bool:
    """The control-character rule of every text field (``newlines`` allows ``\\n`` only)."""
    return not (_CONTROL_BUT_NEWLINE_RE if newlines else _CONTROL_RE).search(value)


def check_send_inputs(variables: Any, overrides: Any) -> None:
    """Template variables and per-send overrides (title, body, data) follow the templates' text rule:
    no control characters, ``\\n`` allowed only where a body may hold it (body, data and variable values)."""
    for name, value in (variables or {}).items():
        check_text("variables", name, min_len=1, max_len=64)
        check_text("variables", value, max_len=2000, newlines=True)
    overrides = overrides or {}
    if overrides.get("title") is not None:
        check_text("title", overrides["title"], min_len=1, max_len=200)
    if overrides.get("body") is not None:
        check_text("body", overrides["body"], min_len=1, max_len=2000, newlines=True)
    for key, value in (overrides.get("data") or {}).items():
        check_text("data", key, min_len=1, max_len=128)
        check_text("data", value, max_len=2000, newlines=True)


def check_pattern(field_: str, value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise _bad(field_, f"must be {what}", "pattern")
    return value


def check_choice(field_: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _bad(field_, f"must be one of {', '.join(choices)}", "enum")
    return value


def check_service_id(value: Any) -> str:
    return check_pattern("service", value, SERVICE_RE, "an upper-case identifier like SMEEM (2..32 of A-Z, 0-9, _)")


def check_timezone(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 64 or _CONTROL_RE.search(value) or ".." in value:
        raise _bad("timezone", "must be an IANA timezone name", "timezone")
    if not schedule.is_portable_timezone(value):
        raise _bad("timezone", "must be an IANA timezone name", "timezone")
    return value


def check_token(value: Any, field_: str = "token") -> str:
    return check_pattern(field_, value, TOKEN_RE, "8..512 printable ASCII characters without spaces")


def check_user_id(value: Any) -> str:
    """A platform user id is a UUID; returned in its canonical lower-case form."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise _bad("user_id", "must be a UUID", "uuid") from None


def check_data(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad("data", "must be an object of string values", "dict_type")
    if len(value) > MAX_DATA_KEYS:
        raise _bad("data", f"at most {MAX_DATA_KEYS} keys")
    for k, v in value.items():
        check_text("data", k, min_len=1, max_len=MAX_DATA_KEY_LEN)
        if not isinstance(v, str):
            raise _bad("data", "values must be strings (a flat object)", "string_type")
        check_text("data", v, max_len=MAX_DATA_VALUE_LEN, newlines=True)
    return dict(value)


def check_ttl(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TTL_SECONDS:
        raise _bad("ttl_seconds", f"must be an integer 0..{MAX_TTL_SECONDS}", "int_range")
    return value


def template_size(title: str, body: str, data: dict[str, str] | None) -> int:
    """Bytes the static parts of a template put into a push payload."""
    return len(title.encode()) + len(body.encode()) + (len(json.dumps(data, ensure_ascii=False).encode()) if data else 0)


# --- values returned to callers ----------------------------------------------------------------

def _utc(dt: datetime | None) -> datetime | None:
    return dt.replace(tzinfo=timezone.utc) if dt is not None and dt.tzinfo is None else dt


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class Service:
    service: str
    display_name: str
    timezone: str
    created_at: datetime


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


@dataclass(frozen=True)
class Device:
    token: str
    os: str
    region: str
    created_at: datetime
    updated_at: datetime
    created: bool = False


@dataclass(frozen=True)
class Template:
    method: str
    type: str
    title: str
    body: str
    data: dict[str, str] | None
    ttl_seconds: int | None
    priority: str
    notification_key: str
    version: int
    created_at: datetime
    updated_at: datetime
    created: bool = False


@dataclass(frozen=True)
class FcmCredentials:
    service_account: dict[str, Any] = field(repr=False)

    @property
    def project_id(self) -> str:
        return str(self.service_account.get("project_id", ""))


@dataclass(frozen=True)
class ApnsCredentials:
    key_id: str
    team_id: str
    bundle_id: str
    private_key: str = field(repr=False)
    sandbox: bool = False


@dataclass(frozen=True)
class ProviderCredentials:
    """Decrypted provider credentials of one service: in memory only, never logged (repr hides keys)."""

    fcm: FcmCredentials | None = None
    apns: ApnsCredentials | None = None


def _service(row) -> Service:
    return Service(row.service, row.display_name, row.timezone, _utc(row.created_at))


def _key(row) -> ApiKeyInfo:
    return ApiKeyInfo(row.key_id, row.label, _utc(row.created_at), _utc(row.revoked_at))


def _user(row, created: bool = False) -> User:
    return User(row.user_id, row.service_user_id, row.service_user_name, _utc(row.created_at),
                _utc(row.updated_at), created)


def _device(row, created: bool = False) -> Device:
    return Device(row.device_token, row.device_os, row.region, _utc(row.created_at), _utc(row.updated_at), created)


def _template(row, version: int, created: bool = False) -> Template:
    return Template(row.notification_method, row.notification_type, row.title, row.body, row.data,
                    row.ttl_seconds, row.priority, row.notification_key, version, _utc(row.created_at),
                    _utc(row.updated_at), created)


def _subscriptions() -> ModuleType | None:
    """The subscriptions domain (issue 4), imported lazily; None until it exists (wired when issue 4 lands)."""
    try:
        from notee.domain import subscriptions
    except ModuleNotFoundError as exc:
        if exc.name != "notee.domain.subscriptions":
            raise  # a broken dependency of that module must be loud, not skip the hooks
        return None
    return subscriptions


# --- services and API keys (admin) -------------------------------------------------------------

def create_service(session: Session, *, service: str, display_name: str, timezone: str | None = None) -> Service:
    check_service_id(service)
    check_text("display_name", display_name, min_len=1, max_len=200)
    tz = check_timezone(timezone if timezone is not None else DEFAULT_TIMEZONE)
    try:
        store.insert_service(session, service=service, display_name=display_name, timezone=tz, now=_now())
        session.commit()
    except IntegrityError:
        session.rollback()
        raise Conflict(f"service {service} already exists") from None
    log.info("service created: %s", service)
    return get_service(session, service)


def get_service(session: Session, service: str) -> Service:
    row = store.get_service(session, service)
    if row is None:
        raise NotFound("service not found")
    return _service(row)


def create_api_key(session: Session, service: str, *, label: str = "") -> CreatedApiKey:
    check_text("label", label, max_len=100)
    get_service(session, service)
    new = keys.generate_api_key()
    now = _now()
    store.insert_api_key(session, key_id=new.key_id, service=service, key_hash=new.key_hash, label=label, now=now)
    session.commit()
    log.info("api key created: service=%s key_id=%s", service, new.key_id)
    return CreatedApiKey(ApiKeyInfo(new.key_id, label, _utc(now), None), new.api_key)


def list_api_keys(session: Session, service: str) -> list[ApiKeyInfo]:
    get_service(session, service)
    return [_key(r) for r in store.list_api_keys(session, service)]


def revoke_api_key(session: Session, service: str, key_id: str) -> None:
    if not store.revoke_api_key(session, service=service, key_id=key_id, now=_now()):
        raise NotFound("api key not found")
    session.commit()
    log.info("api key revoked: service=%s key_id=%s", service, key_id)


def authenticate(session: Session, raw_key: str | None) -> str:
    """The service an API key belongs to; Unauthorized when missing, malformed, unknown or revoked."""
    parsed = keys.parse_api_key(raw_key or "")
    if parsed is None:
        raise Unauthorized("missing or malformed API key")
    key_id, secret = parsed
    row = store.get_api_key(session, key_id)
    ok = keys.secret_matches(secret, row.key_hash if row is not None else None)
    if not ok or row is None or row.revoked_at is not None:
        raise Unauthorized("unknown or revoked API key")
    return row.service


# --- provider credentials (admin) ---------------------------------------------------------------

_COLUMNS = {"fcm": "fcm_encrypted", "apns": "apns_encrypted"}


def _require_box(box: keys.SecretsBox | None) -> keys.SecretsBox:
    if box is None:
        raise ProviderConfigError("NOTEE_CREDENTIALS_KEY is not set: credentials cannot be stored or read")
    return box


def _check_pem(field_: str, pem: Any, *, ec_only: bool) -> str:
    check_text(field_, pem, min_len=1, max_len=8192, newlines=True)
    try:
        key = load_pem_private_key(pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        raise _bad(field_, "must be an unencrypted PEM private key", "pem") from None
    if ec_only and not isinstance(key, EllipticCurvePrivateKey):
        raise _bad(field_, "must be the EC (P-256) key of an APNs .p8 file", "pem")
    return pem


def check_fcm_service_account(sa: Any) -> dict[str, Any]:
    if not isinstance(sa, dict):
        raise _bad("service_account", "must be the service-account JSON object", "dict_type")
    if len(json.dumps(sa)) > MAX_CREDENTIALS_JSON:
        raise _bad("service_account", f"must be at most {MAX_CREDENTIALS_JSON} bytes")
    if sa.get("type") != "service_account":
        raise _bad("service_account", 'must have "type": "service_account"')
    for name in ("project_id", "client_email"):
        check_text(f"service_account.{name}", sa.get(name), min_len=1, max_len=320)
    _check_pem("service_account.private_key", sa.get("private_key"), ec_only=False)
    return sa


def set_fcm_credentials(session: Session, box: keys.SecretsBox | None, service: str,
                        service_account: dict[str, Any]) -> None:
    check_fcm_service_account(service_account)
    box = _require_box(box)
    get_service(session, service)
    blob = box.encrypt(json.dumps({"service_account": service_account}).encode())
    store.upsert_credential(session, service=service, column="fcm_encrypted", blob=blob, now=_now())
    session.commit()
    log.info("provider credentials set: service=%s provider=fcm", service)


def set_apns_credentials(session: Session, box: keys.SecretsBox | None, service: str, *, key_id: str,
                         team_id: str, bundle_id: str, private_key: str, sandbox: bool) -> None:
    check_pattern("key_id", key_id, APNS_ID_RE, "the 10-character APNs key id")
    check_pattern("team_id", team_id, APNS_ID_RE, "the 10-character Apple team id")
    check_pattern("bundle_id", bundle_id, BUNDLE_RE, "an app bundle id")
    _check_pem("private_key", private_key, ec_only=True)
    if not isinstance(sandbox, bool):
        raise _bad("sandbox", "must be a boolean", "bool_type")
    box = _require_box(box)
    get_service(session, service)
    blob = box.encrypt(json.dumps({"key_id": key_id, "team_id": team_id, "bundle_id": bundle_id,
                                   "private_key": private_key, "sandbox": sandbox}).encode())
    store.upsert_credential(session, service=service, column="apns_encrypted", blob=blob, now=_now())
    session.commit()
    log.info("provider credentials set: service=%s provider=apns", service)


def credentials_status(session: Session, service: str) -> dict[str, bool]:
    """Which providers are configured; never any secret."""
    get_service(session, service)
    row = store.get_credentials(session, service)
    return {"fcm": bool(row is not None and row.fcm_encrypted), "apns": bool(row is not None and row.apns_encrypted)}


def delete_credentials(session: Session, service: str, provider: str) -> None:
    check_choice("provider", provider, tuple(_COLUMNS))
    if not credentials_status(session, service)[provider]:
        raise NotFound(f"no {provider} credentials configured")
    store.upsert_credential(session, service=service, column=_COLUMNS[provider], blob=None, now=_now())
    session.commit()
    log.info("provider credentials deleted: service=%s provider=%s", service, provider)


def load_credentials(session: Session, secrets_box: keys.SecretsBox | None, service: str) -> ProviderCredentials | None:
    """Decrypted credentials of ``service`` for the delivery side (in memory only), or None when
    none are configured. ProviderConfigError when they cannot be decrypted (wrong key)."""
    row = store.get_credentials(session, service)
    if row is None or not (row.fcm_encrypted or row.apns_encrypted):
        return None
    box = _require_box(secrets_box)
    try:
        fcm = json.loads(box.decrypt(row.fcm_encrypted)) if row.fcm_encrypted else None
        apns = json.loads(box.decrypt(row.apns_encrypted)) if row.apns_encrypted else None
    except keys.InvalidToken:
        raise ProviderConfigError(f"credentials of {service} cannot be decrypted with NOTEE_CREDENTIALS_KEY") from None
    return ProviderCredentials(
        fcm=FcmCredentials(fcm["service_account"]) if fcm else None,
        apns=ApnsCredentials(**apns) if apns else None,
    )


# --- users -----------------------------------------------------------------------------------

def upsert_user(session: Session, service: str, service_user_id: str, *, name: str = "") -> User:
    """Create or rename; the same service_user_id always maps to the same platform user_id."""
    check_text("service_user_id", service_user_id, min_len=1, max_len=191)
    check_text("name", name, max_len=191)
    new_id = str(uuid.uuid4())
    row = store.upsert_user(session, service=service, service_user_id=service_user_id, name=name,
                            new_user_id=new_id, now=_now())
    session.commit()
    return _user(row, created=row.user_id == new_id)


def get_user(session: Session, service: str, user_id: str) -> User:
    row = store.get_user(session, service, check_user_id(user_id))
    if row is None:
        raise NotFound("user not found")
    return _user(row)


def delete_user(runtime, session: Session, service: str, user_id: str) -> None:
    """Removes the user, its devices (cascade) and its subscriptions (Cassandra first)."""
    user = get_user(session, service, user_id)
    subs = _subscriptions()
    if subs is not None:
        subs.on_user_deleted(runtime, service, user.user_id)
    store.delete_user(session, service, user.user_id)
    session.commit()
    log.info("user deleted: service=%s user_id=%s", service, user.user_id)


# --- devices -----------------------------------------------------------------------------------

def add_device(runtime, session: Session, service: str, user_id: str, *, token: str, os: str,
               region: str = "") -> Device:
    """Register (or update os/region of) a device; copies the user's subscriptions to it."""
    check_token(token)
    check_choice("os", os, OSES)
    check_pattern("region", region, REGION_RE, "up to 8 letters, digits, _ or -")
    user = store.get_user(session, service, check_user_id(user_id), for_update=True)
    if user is None:
        raise NotFound("user not found")
    # A plain read: the user row lock above already serialises this user's registrations, and a
    # locking read of a missing device row takes a gap lock that deadlocks concurrent inserts of
    # other users' devices (seen in the soak). The upsert below is correct either way.
    before = store.get_device(session, service, user.user_id, token)
    row = store.upsert_device(session, service=service, user_id=user.user_id, token=token, os=os, region=region,
                              now=_now())
    session.commit()
    # Every time, not only for a new device: the hook is idempotent (copies only what the device
    # lacks), so repeating a registration whose Cassandra step failed completes it.
    subs = _subscriptions()
    if subs is not None:
        subs.on_device_added(runtime, service, user.user_id, token, os)
    return _device(row, created=before is None)


def list_devices(session: Session, service: str, user_id: str) -> list[Device]:
    user = get_user(session, service, user_id)
    return [_device(r) for r in store.list_devices(session, service, user.user_id)]


def remove_device(runtime, session: Session, service: str, user_id: str, token: str) -> None:
    check_token(token)  # a non-ASCII token would reach MySQL's ascii column and fail there (503)
    user = get_user(session, service, user_id)
    if not isinstance(token, str) or store.get_device(session, service, user.user_id, token) is None:
        raise NotFound("device not found")
    subs = _subscriptions()
    if subs is not None:
        subs.on_device_removed(runtime, service, user.user_id, token)
    store.delete_device(session, service, user.user_id, token)
    session.commit()


def rotate_token(runtime, session: Session, service: str, *, old_token: str, new_token: str) -> int:
    """The provider replaced ``old_token`` by ``new_token``: every user of the service holding the old
    one now holds the new one, keeping the device's created_at and its subscriptions. Returns the
    number of users rotated. Cassandra first (the old rows are removed there); a retry after a MySQL
    failure finds the old token again and converges."""
    check_token(old_token, "old_token")
    check_token(new_token, "new_token")
    if old_token == new_token:
        raise _bad("new_token", "must differ from old_token")
    if not store.holders_of_token(session, service, old_token):
        raise NotFound("no device with this token")
    subs = _subscriptions()
    if subs is not None:
        subs.on_token_rotated(runtime, service, old_token, new_token)
    rotated = store.rotate_token(session, service=service, old=old_token, new=new_token, now=_now())
    session.commit()
    return rotated


# --- templates -----------------------------------------------------------------------------------

def _check_template_id(method: Any, type_: Any) -> None:
    check_choice("method", method, METHODS)
    check_pattern("type", type_, TYPE_RE, "1..64 of letters, digits, _ . -")


def put_template(runtime, session: Session, service: str, method: str, type_: str, *, title: str, body: str,
                 data: dict[str, str] | None = None, ttl_seconds: int | None = None,
                 priority: str = "high") -> Template:
    """Create or update. notification_key is created once and never changes; every write bumps the
    cache version counter (after the MySQL commit: a counter timeout is reported, not retried)."""
    _check_template_id(method, type_)
    check_text("title", title, min_len=1, max_len=200)
    check_text("body", body, min_len=1, max_len=2000, newlines=True)
    data = check_data(data)
    ttl_seconds = check_ttl(ttl_seconds)
    check_choice("priority", priority, PRIORITIES)
    size = template_size(title, body, data)
    if size > MAX_TEMPLATE_BYTES:
        raise PayloadTooLarge(f"title + body + data take {size} bytes; at most {MAX_TEMPLATE_BYTES}",
                              details=[{"loc": ["body"], "type": "payload_too_large", "msg": "template too large"}])
    new_key = str(uuid.uuid4())
    row = store.upsert_template(session, service=service, method=method, type_=type_, title=title, body=body,
                                data=data, ttl_seconds=ttl_seconds, priority=priority, new_key=new_key, now=_now())
    session.commit()
    statements = cql.for_runtime(runtime)
    statements.add_version(service, method, type_)  # counter: never retried on timeout
    version = statements.counters(service, method, type_)[0]
    return _template(row, version, created=row.notification_key == new_key)


def get_template(runtime, session: Session, service: str, method: str, type_: str) -> Template:
    _check_template_id(method, type_)
    row = store.get_template(session, service, method, type_)
    if row is None:
        raise NotFound("template not found")
    return _template(row, cql.for_runtime(runtime).counters(service, method, type_)[0])


def list_templates(runtime, session: Session, service: str) -> list[Template]:
    rows = store.list_templates(session, service)
    versions = cql.for_runtime(runtime).versions(service) if rows else {}
    return [_template(r, versions.get((r.notification_method, r.notification_type), 0)) for r in rows]


def delete_template(runtime, session: Session, service: str, method: str, type_: str) -> None:
    """Deletes the template and disables its subscriptions (Cassandra first: see
    ``subscriptions.on_template_deleted``). The counters stay (``no`` must never go backwards if the
    template is created again)."""
    _check_template_id(method, type_)
    row = store.get_template(session, service, method, type_)
    if row is None:
        raise NotFound("template not found")
    subs = _subscriptions()
    if subs is not None:
        subs.on_template_deleted(runtime, service, method, type_, row.notification_key)
    store.delete_template(session, service, method, type_)
    session.commit()
