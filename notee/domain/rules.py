"""The registry's input rules, pure: one home for every pattern, limit and check.

The domain calls the ``check_*`` functions (so the CLI and every other caller get them); the API's
request models (``notee/api/models.py``) use the same ``*_PATTERN`` strings and limits for their
OpenAPI constraints, so the two can never disagree. A failed check raises ``InvalidInput`` with one
detail ``{"loc": [field], "type": ..., "msg": ...}``.
"""

from __future__ import annotations

import json
import re
import uuid
import zoneinfo
from functools import lru_cache
from typing import Any, TypeGuard

from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from notee.core.errors import InvalidInput
from notee.core.vocabulary import PRIORITIES, allowed_token_uris

SERVICE_PATTERN = r"^[A-Z][A-Z0-9_]{1,31}$"
TYPE_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
TOKEN_PATTERN = r"^[\x21-\x7e]{8,512}$"  # printable ASCII, no space
REGION_PATTERN = r"^[A-Za-z0-9_-]{0,8}$"
APNS_ID_PATTERN = r"^[A-Z0-9]{10}$"  # Apple key id and team id: 10 characters
BUNDLE_PATTERN = r"^[A-Za-z0-9.-]{1,155}$"
QUIET_OVERRIDES = ("honour", "override")  # a publish's quiet_hours: the template's way, or sent whatever the hours
SERVICE_RE = re.compile(SERVICE_PATTERN)
TYPE_RE = re.compile(TYPE_PATTERN)
TOKEN_RE = re.compile(TOKEN_PATTERN)
REGION_RE = re.compile(REGION_PATTERN)
APNS_ID_RE = re.compile(APNS_ID_PATTERN)
BUNDLE_RE = re.compile(BUNDLE_PATTERN)
# A Google Cloud project id: 6-30 lowercase letters, digits and hyphens, starting with a letter, not
# ending with a hyphen (https://cloud.google.com/resource-manager/docs/creating-managing-projects).
# It becomes a path segment of every FCM request, so nothing else may pass.
FCM_PROJECT_ID_PATTERN = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$"
FCM_PROJECT_ID_RE = re.compile(FCM_PROJECT_ID_PATTERN)
# The text rule's control characters (C0, DEL, C1); ``\n`` is allowed where a text may span lines.
_CONTROL = r"\x00-\x1f\x7f-\x9f"
_CONTROL_BUT_NEWLINE = r"\x00-\x09\x0b-\x1f\x7f-\x9f"
_CONTROL_RE = re.compile(f"[{_CONTROL}]")
_CONTROL_BUT_NEWLINE_RE = re.compile(f"[{_CONTROL_BUT_NEWLINE}]")
# The same rule as the OpenAPI document states it for the API's text fields. Lone surrogates, which
# ``check_text`` refuses too, have no pattern that every JSON Schema regex dialect reads alike.
ONE_LINE_PATTERN = f"^[^{_CONTROL}]*$"
MULTI_LINE_PATTERN = f"^[^{_CONTROL_BUT_NEWLINE}]*$"

DEFAULT_TIMEZONE = "Asia/Seoul"
MAX_TTL_SECONDS = 2_419_200  # 28 days: FCM's maximum android.ttl (APNs has no shorter cap)
MAX_DATA_KEYS = 32
MAX_DATA_KEY_LEN = 64
# FCM refuses a data key that is one of its reserved words or starts with its prefixes (Message.data
# in https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages): found here, not per device.
FCM_RESERVED_DATA_KEYS = frozenset({"from", "message_type"})
FCM_RESERVED_DATA_PREFIXES = ("google.", "gcm.notification.")
MAX_DATA_VALUE_LEN = 1024
# FCM and APNs both cap a payload at 4096 bytes; a template whose static parts already exceed
# 3584 bytes leaves no room for the provider envelope and rendered placeholders.
MAX_TEMPLATE_BYTES = 3584
MAX_CREDENTIALS_JSON = 32_768
MAX_PEM_LEN = 8192


# Names in the tz database that mean nothing portable: the host's own zone ("localtime"), the
# placeholder zone ("Factory"), the POSIX default rules file, and the posix/ and right/ copies.
_NOT_PORTABLE = frozenset({"localtime", "Factory", "posixrules", "posix", "right"})


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    return frozenset(
        z for z in zoneinfo.available_timezones() if z not in _NOT_PORTABLE and not z.startswith(("posix/", "right/"))
    )


def is_portable_timezone(name: object) -> TypeGuard[str]:
    """The one timezone rule: an IANA zone name that means the same on every host (a service's
    default timezone and every cycle schedule use it)."""
    return isinstance(name, str) and name in _zones()


def bad(field_: str, msg: str, type_: str = "value_error") -> InvalidInput:
    return InvalidInput(f"{field_}: {msg}", details=[{"loc": [field_], "type": type_, "msg": msg}])


def check_text(field_: str, value: Any, *, max_len: int, min_len: int = 0, newlines: bool = False) -> str:
    """A user-facing string: bounded, valid Unicode (no lone surrogates), no control characters
    (``newlines`` allows ``\\n`` only, for notification bodies)."""
    if not isinstance(value, str):
        raise bad(field_, "must be a string", "string_type")
    if not min_len <= len(value) <= max_len:
        raise bad(field_, f"length must be {min_len}..{max_len}", "string_length")
    if (_CONTROL_BUT_NEWLINE_RE if newlines else _CONTROL_RE).search(value):
        raise bad(field_, "must not contain control characters", "control_characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise bad(field_, "must be valid Unicode", "unicode") from None
    return value


def control_free(value: str, *, newlines: bool = False) -> bool:
    """The control-character rule of every text field (``newlines`` allows ``\\n`` only)."""
    return not (_CONTROL_BUT_NEWLINE_RE if newlines else _CONTROL_RE).search(value)


MAX_LIST_ITEMS = 50  # items of a list variable (a template's {% for %} loops)
MAX_ITEM_KEYS = 20  # keys of an object in a list variable


def check_send_inputs(variables: Any, overrides: Any) -> None:
    """Template variables and per-send overrides (title, body, data) follow the templates' text rule:
    no control characters, ``\\n`` allowed only where a body may hold it (body, data and variable values);
    a ``ttl_seconds`` or ``priority`` override follows the template's rule for it; ``quiet_hours`` is
    ``override`` (a publish sent whatever its recipients' quiet hours) or ``honour``."""
    for name, value in (variables or {}).items():
        check_text("variables", name, min_len=1, max_len=64)
        if name.split(".")[0] == "recipient":
            raise bad(
                f"variables.{name[:64]}", "recipient.* is the recipient's own (docs/TEMPLATES.md), not a variable"
            )
        _check_variable(value)
    overrides = overrides or {}
    if overrides.get("title") is not None:
        check_text("title", overrides["title"], min_len=1, max_len=200)
    if overrides.get("body") is not None:
        check_text("body", overrides["body"], min_len=1, max_len=2000, newlines=True)
    for key, value in (overrides.get("data") or {}).items():
        check_text("data", key, min_len=1, max_len=128)
        check_text("data", value, max_len=2000, newlines=True)
    if overrides.get("ttl_seconds") is not None:
        check_ttl(overrides["ttl_seconds"])
    if overrides.get("priority") is not None:
        check_choice("priority", overrides["priority"], PRIORITIES)
    if overrides.get("quiet_hours") is not None:
        check_choice("quiet_hours", overrides["quiet_hours"], QUIET_OVERRIDES)


def _check_variable(value: Any) -> None:
    """A variable's value: a text, or a list (at most MAX_LIST_ITEMS) of texts or of objects of at
    most MAX_ITEM_KEYS texts (the API's ``TemplateValue``)."""
    if not isinstance(value, list):
        check_text("variables", value, max_len=2000, newlines=True)
        return
    if len(value) > MAX_LIST_ITEMS:
        raise bad("variables", f"a list holds at most {MAX_LIST_ITEMS} items")
    for item in value:
        if isinstance(item, dict):
            if len(item) > MAX_ITEM_KEYS:
                raise bad("variables", f"a list item holds at most {MAX_ITEM_KEYS} keys")
            for key, text in item.items():
                check_text("variables", key, min_len=1, max_len=64)
                check_text("variables", text, max_len=2000, newlines=True)
        else:
            check_text("variables", item, max_len=2000, newlines=True)


def check_pattern(field_: str, value: Any, pattern: re.Pattern[str], what: str) -> str:
    # fullmatch: a ``$`` also matches before a final "\n", which would let "SMEEM\n" pass.
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise bad(field_, f"must be {what}", "pattern")
    return value


def check_choice(field_: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise bad(field_, f"must be one of {', '.join(choices)}", "enum")
    return value


def check_service_id(value: Any) -> str:
    return check_pattern("service", value, SERVICE_RE, "an upper-case identifier like SMEEM (2..32 of A-Z, 0-9, _)")


def check_timezone(value: Any) -> str:
    if not is_portable_timezone(value):
        raise bad("timezone", "must be an IANA timezone name", "timezone")
    return value


# A BCP 47 language tag of the shape Notee matches on (RFC 5646 langtag without variants, extensions
# or private use): language (2-3 letters), optional script (4 letters), optional region (2 letters
# or 3 digits), e.g. "de", "pt-BR", "zh-Hant-TW", "es-419".
LOCALE_PATTERN = r"^[A-Za-z]{2,3}(?:-[A-Za-z]{4})?(?:-(?:[A-Za-z]{2}|[0-9]{3}))?$"
LOCALE_RE = re.compile(LOCALE_PATTERN)
MAX_VARIANTS = 50


@lru_cache(maxsize=1024)  # an import checks the same few locales on thousands of lines
def canonical_locale(tag: str) -> str:
    """The BCP 47 case conventions (RFC 5646 2.1.1): ``pt-br`` -> ``pt-BR``, ``ZH-hant`` -> ``zh-Hant``."""
    parts = tag.split("-")
    out = [parts[0].lower()]
    for part in parts[1:]:
        out.append(part.title() if len(part) == 4 else part.upper())
    return "-".join(out)


def check_locale(value: Any, field_: str = "locale") -> str:
    """A BCP 47 tag (``LOCALE_PATTERN``), returned in canonical case."""
    if not isinstance(value, str) or not LOCALE_RE.fullmatch(value):
        raise bad(
            field_,
            "must be a BCP 47 language tag: language[-Script][-REGION], e.g. de, pt-BR, zh-Hant-TW, es-419",
            "locale",
        )
    return canonical_locale(value)


def check_token(value: Any, field_: str = "token") -> str:
    return check_pattern(field_, value, TOKEN_RE, "8..512 printable ASCII characters without spaces")


def check_user_id(value: Any) -> str:
    """A platform user id is a UUID; returned in its canonical lower-case form."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise bad("user_id", "must be a UUID", "uuid") from None


def check_data(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad("data", "must be an object of string values", "dict_type")
    if len(value) > MAX_DATA_KEYS:
        raise bad("data", f"at most {MAX_DATA_KEYS} keys")
    for k, v in value.items():
        check_text("data", k, min_len=1, max_len=MAX_DATA_KEY_LEN)
        if k in FCM_RESERVED_DATA_KEYS or k.startswith(FCM_RESERVED_DATA_PREFIXES):
            raise bad("data", f"{k!r} is reserved by FCM (from, message_type, google.*, gcm.notification.*)")
        if not isinstance(v, str):
            raise bad("data", "values must be strings (a flat object)", "string_type")
        check_text("data", v, max_len=MAX_DATA_VALUE_LEN, newlines=True)
    return dict(value)


def check_ttl(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TTL_SECONDS:
        raise bad("ttl_seconds", f"must be an integer 0..{MAX_TTL_SECONDS}", "int_range")
    return value


def template_size(title: str, body: str, data: dict[str, str] | None) -> int:
    """Bytes the static parts of a template put into a push payload."""
    return (
        len(title.encode()) + len(body.encode()) + (len(json.dumps(data, ensure_ascii=False).encode()) if data else 0)
    )


def check_pem(field_: str, value: Any, *, ec_only: bool) -> str:
    pem = check_text(field_, value, min_len=1, max_len=MAX_PEM_LEN, newlines=True)
    try:
        key = load_pem_private_key(pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        raise bad(field_, "must be an unencrypted PEM private key", "pem") from None
    if ec_only and not isinstance(key, EllipticCurvePrivateKey):
        raise bad(field_, "must be the EC (P-256) key of an APNs .p8 file", "pem")
    return pem


def check_fcm_service_account(sa: Any, *, emulator_url: str | None = None) -> dict[str, Any]:
    """A Firebase service account Notee can use. Its ``token_uri`` is where Notee posts the signed
    JWT assertion for an access token: only Google's endpoint (or the configured emulator's) is
    accepted, so a credential cannot make Notee sign and send assertions to another server."""
    if not isinstance(sa, dict):
        raise bad("service_account", "must be the service-account JSON object", "dict_type")
    if len(json.dumps(sa)) > MAX_CREDENTIALS_JSON:
        raise bad("service_account", f"must be at most {MAX_CREDENTIALS_JSON} bytes")
    if sa.get("type") != "service_account":
        raise bad("service_account", 'must have "type": "service_account"')
    check_pattern(
        "service_account.project_id",
        sa.get("project_id"),
        FCM_PROJECT_ID_RE,
        "a Google Cloud project id (6-30 of a-z, 0-9, -)",
    )
    check_text("service_account.client_email", sa.get("client_email"), min_len=1, max_len=320)
    allowed = allowed_token_uris(emulator_url)
    if sa.get("token_uri") not in allowed:
        raise bad("service_account.token_uri", "must be " + " or ".join(allowed), "token_uri")
    check_pem("service_account.private_key", sa.get("private_key"), ec_only=False)
    return sa
