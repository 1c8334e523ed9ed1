"""Request and response models of the registry endpoints (admin, users, devices, templates).

Request models forbid unknown fields and use strict scalar types, so a wrong type is a 422 rather
than a silent coercion. Their length/pattern constraints document the limits in OpenAPI; the domain
(``notee.domain.rules.check_*``) checks the same rules again, so the CLI and other callers get them
too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from notee.api import documented
from notee.api.documented import (
    FCM_SERVICE_ACCOUNT,
    TAGS_PATCH,
    VARIANTS,
    DataMap,
    DefaultsMap,
    MultiLine,
    OneLine,
    PemKey,
)
from notee.api.errors import ErrorResponse
from notee.core.vocabulary import DeliveryMode, Method, Priority, RateClass
from notee.domain.rules import (
    APNS_ID_PATTERN,
    BUNDLE_PATTERN,
    LOCALE_PATTERN,
    MAX_PEM_LEN,
    MAX_TTL_SECONDS,
    SERVICE_PATTERN,
    control_free,
)
from notee.domain.schedule import LOCAL_TIME_PATTERN

_DELIVERY_MODE = (
    "live: pushes go to the service's providers (FCM/APNs, or the emulator when NOTEE_EMULATOR_URL "
    "is set); dry_run: every push is only recorded by the log provider, nothing is sent, and "
    "sends and jobs say dry_run: true"
)


def _one_line(value: str) -> str:
    if not control_free(value):
        raise ValueError("must not contain control characters")
    return value


def _multi_line(value: str) -> str:
    if not control_free(value, newlines=True):
        raise ValueError("must not contain control characters other than \\n")
    return value


def _rfc3339_text(value: Any) -> Any:
    """Only an RFC 3339 date-time string with its offset: pydantic would also take a number (epoch
    seconds) or a bare date, which a client may not mean."""
    if not isinstance(value, str) or len(value) > 40:
        raise ValueError("must be an RFC 3339 date-time string with its offset, e.g. 2026-11-30T09:00:00+09:00")
    try:
        moment = datetime.fromisoformat(value) if "T" in value.upper() else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ValueError("must be an RFC 3339 date-time with its offset (Z or ±hh:mm), e.g. 2026-11-30T09:00:00Z")
    return value


# An absolute instant given by a client (send_at): a string with an explicit offset, never a guess.
Rfc3339 = Annotated[AwareDatetime, BeforeValidator(_rfc3339_text)]


# A BCP 47 language tag (notee.domain.rules.LOCALE_PATTERN); stored in canonical case (pt-br -> pt-BR).
Locale = Annotated[
    StrictStr,
    Field(
        pattern=LOCALE_PATTERN,
        max_length=35,
        description="BCP 47 language tag: language[-Script][-REGION], e.g. de, pt-BR, zh-Hant-TW, es-419",
        examples=["pt-BR"],
    ),
]
LOCALE_FIELD = (
    "BCP 47 language tag (language[-Script][-REGION]) choosing a template's locale variant; "
    "null clears it; left out: unchanged."
)


class QuietHours(BaseModel):
    """A daily local-time window; start after end crosses midnight (22:00-07:00)."""

    model_config = ConfigDict(extra="forbid")

    start: StrictStr = Field(pattern=LOCAL_TIME_PATTERN, description="HH:MM, local", examples=["22:00"])
    end: StrictStr = Field(pattern=LOCAL_TIME_PATTERN, description="HH:MM, local (exclusive)", examples=["07:00"])


def quiet_out(window: tuple[int, int] | None) -> QuietHours | None:
    """(start, end) minutes of the day as the API shows them."""
    if window is None:
        return None
    return QuietHours(
        start=f"{window[0] // 60:02d}:{window[0] % 60:02d}", end=f"{window[1] // 60:02d}:{window[1] % 60:02d}"
    )


_QUIET_FIELD = (
    "Quiet hours in the user's time zone: TOPIC pushes due inside the window are held until it ends (or "
    "dropped, as the template says). Replaces the service's window; null: the service's; left out: unchanged."
)

# Text fields of per-send input follow the templates' rule (notee.domain.rules.check_text), checked here.
OneLineText = Annotated[OneLine, AfterValidator(_one_line)]
MultiLineText = Annotated[MultiLine, AfterValidator(_multi_line)]

_DESCRIPTIONS = {
    401: "Missing, unknown or revoked credentials",
    403: "Admin API disabled (NOTEE_ADMIN_TOKEN unset)",
    404: "Not found (also for another service's objects: their existence is not revealed)",
    409: "Already exists",
    413: "The request body is larger than its limit (refused before it is read)",
    429: "Rate limit of this class of requests used up; retry after Retry-After seconds",
    422: "Invalid input; nothing was written",
    424: "Provider configuration: credentials key not set, credentials unreadable or rejected by the provider, "
    "or none for the platform of any device",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the error statuses a route may answer."""
    return {c: {"model": ErrorResponse, "description": _DESCRIPTIONS[c]} for c in codes}


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Answer(BaseModel):
    """Base of every response model: each timestamp goes out as RFC 3339 with its offset. The stores
    keep naive UTC times, which pydantic would otherwise send without one."""

    @model_validator(mode="after")
    def _times_in_utc(self) -> Self:
        for name, value in self:
            if isinstance(value, datetime) and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))
        return self


class _Out(Answer):
    model_config = ConfigDict(from_attributes=True)


# --- admin ---------------------------------------------------------------------------------------


class ServiceIn(_In):
    service: StrictStr = Field(pattern=SERVICE_PATTERN, description="Tenant identifier, e.g. SMEEM", examples=["SMEEM"])
    display_name: OneLine = Field(min_length=1, max_length=200)
    timezone: StrictStr | None = Field(
        None, max_length=64, description="IANA name; default Asia/Seoul", examples=["Asia/Seoul"]
    )
    delivery_mode: DeliveryMode = Field("live", description=_DELIVERY_MODE)


class ServiceUpdate(_In):
    delivery_mode: DeliveryMode = Field(description=_DELIVERY_MODE)


class ServiceOut(_Out):
    service: str
    display_name: str
    timezone: str
    delivery_mode: DeliveryMode = Field(description=_DELIVERY_MODE)
    created_at: datetime


class ServiceList(BaseModel):
    items: list[ServiceOut]


class ApiKeyIn(_In):
    label: OneLine = Field("", max_length=100)
    kind: Literal["server", "client"] = Field(
        "server",
        description="`server` (`nk_`): everything a service may do, keep it on your servers. `client` (`nck_`): "
        "safe to ship inside an app, it may only post receipts (`POST /v1/receipts`; docs/ENGAGEMENT.md).",
    )


class ApiKeyOut(_Out):
    key_id: str
    kind: str = Field(description="`server` or `client`")
    label: str
    created_at: datetime
    revoked_at: datetime | None


class ApiKeyList(BaseModel):
    items: list[ApiKeyOut]


class ApiKeyCreated(ApiKeyOut):
    api_key: str = Field(
        description="`nk_<key_id>_<secret>` (a client key: `nck_...`): shown once, store it now (only its hash is kept)"
    )


class FcmCredentialsIn(_In):
    service_account: Annotated[dict[str, Any], FCM_SERVICE_ACCOUNT] = Field(
        description="The Firebase service-account JSON (type, project_id, client_email, private_key, ...)"
    )


class ApnsCredentialsIn(_In):
    key_id: StrictStr = Field(pattern=APNS_ID_PATTERN, description="APNs auth key id")
    team_id: StrictStr = Field(pattern=APNS_ID_PATTERN)
    bundle_id: StrictStr = Field(pattern=BUNDLE_PATTERN, description="App bundle id (the apns-topic)")
    private_key: PemKey = Field(max_length=MAX_PEM_LEN, description="Contents of the .p8 file (PEM, EC P-256)")
    sandbox: StrictBool = False


class RateLimitIn(_In):
    rate: StrictFloat = Field(gt=0, le=1_000_000, description="Requests per second (tokens added per second)")
    burst: StrictInt = Field(
        ge=1, le=10_000_000, description="Requests allowed at once after a quiet spell (the bucket's size)"
    )


class RateLimitOut(BaseModel):
    rate_class: RateClass = Field(serialization_alias="class")
    rate: float
    burst: int
    custom: bool = Field(description="Set for this service by an admin (false: the deployment default)")


class RateLimitList(BaseModel):
    items: list[RateLimitOut]


class CredentialsStatus(BaseModel):
    """Which providers are configured. Secrets are never returned."""

    fcm: bool
    apns: bool
    webpush: bool = Field(description="A VAPID key for Web Push (WEB devices)")


# --- users and devices -----------------------------------------------------------------------------


class UserIn(_In):
    name: OneLine = Field(
        "", max_length=191, description="The user's name in the service; left out: unchanged (a new user's: empty)."
    )
    locale: Locale | None = Field(None, description=LOCALE_FIELD + " A device's own locale wins over it.")
    timezone: StrictStr | None = Field(
        None,
        max_length=64,
        description="IANA time zone of the user (local-time publishes); null: the service's; left out: unchanged.",
        examples=["Europe/Berlin"],
    )
    quiet_hours: QuietHours | None = Field(None, description=_QUIET_FIELD)
    tags: Annotated[dict[str, Any], TAGS_PATCH] | None = Field(
        None,
        description="A JSON merge patch of the user's tags, as PATCH /v1/users/{user_id}/tags takes it (null "
        "removes a key); null removes them all; left out: unchanged. The answer does not show tags.",
        examples=[{"plan": "pro"}],
    )


class UserOut(_Out):
    user_id: str = Field(description="Platform user id (UUID), stable for a service_user_id")
    service_user_id: str
    name: str
    locale: str | None = Field(None, description="BCP 47 tag, canonical case; null: none")
    timezone: str | None = Field(None, description="IANA time zone; null: the service's")
    quiet_hours: QuietHours | None = Field(None, description="The user's own quiet hours; null: the service's")

    @model_validator(mode="before")
    @classmethod
    def _quiet(cls, value: Any) -> Any:
        window = getattr(value, "quiet_hours", None)
        if isinstance(window, tuple):  # the domain's (start, end) minutes
            return {f: getattr(value, f, None) for f in cls.model_fields} | {"quiet_hours": quiet_out(window)}
        return value

    created_at: datetime
    updated_at: datetime


# --- templates -------------------------------------------------------------------------------------


class VariantIn(_In):
    title: OneLine = Field(min_length=1, max_length=200)
    body: MultiLine = Field(min_length=1, max_length=2000, description="May contain \\n; no other control characters")
    data: DataMap | None = Field(None, description="Merged over the template's data")
    subtitle: OneLine | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="This locale's iOS subtitle (replaces payload.ios.subtitle for its recipients); takes "
        "placeholders like the title",
    )


class VariantOut(BaseModel):
    title: str
    body: str
    data: dict[str, str] | None = None
    subtitle: str | None = None


class TemplateIn(_In):
    title: OneLine = Field(
        max_length=200,
        description="1..200 characters; empty for a background or badge-only push",
        examples=["{{ n | plural: 'New message', '# new messages' }}"],
    )
    body: MultiLine = Field(
        max_length=2000,
        description="May contain \\n; no other control characters; empty as title. Title, body and data values "
        "are Liquid templates: conditionals, loops, filters, recipient.* (docs/TEMPLATES.md)",
        examples=["Hi {{ recipient.name | default: 'there' }}{% if vip %}, VIP{% endif %}: {{ at | datetime }}"],
    )
    data: DataMap | None = Field(None, description="Flat string map sent with the push")
    defaults: DefaultsMap | None = Field(
        None,
        description="Default values of placeholders ({{name}} or {{user.name}}) in title, body and data "
        "values, used when a send or publish gives no variable of that name. A CYCLE template needs one for every "
        "placeholder. A value holds no {{ or }}.",
        examples=[{"name": "there"}],
    )
    ttl_seconds: StrictInt | None = Field(None, ge=0, le=MAX_TTL_SECONDS)
    priority: Priority = "high"
    quiet_hours: Literal["hold", "drop"] = Field(
        "hold",
        description="A TOPIC push due in a recipient's quiet hours: hold (sent when they end) or drop (not "
        "sent, counted in the job's quiet_dropped). Also what an opted-in single send does.",
    )
    variants: Annotated[dict[Locale, VariantIn], VARIANTS] | None = Field(
        None,
        description="The text per locale (BCP 47 tag -> title, body, data merged over the template's): a "
        "recipient gets the variant of its locale's best match (language-Script-REGION, then shorter, "
        "then the template's own title and body). Placeholders and defaults as for the template.",
        examples=[{"de": {"title": "Hallo {{name}}", "body": "Etwas ist passiert"}}],
    )
    payload: documented.PayloadObject | None = documented.payload_field()


class TemplateOut(_Out):
    method: Method
    type: str
    title: str
    body: str
    data: dict[str, str] | None
    defaults: dict[str, str] | None
    variants: dict[str, VariantOut] | None = Field(None, description="Locale variants (canonical BCP 47 tags)")
    quiet_hours: Literal["hold", "drop"] = "hold"
    ttl_seconds: int | None
    priority: Priority
    payload: dict[str, Any] | None = Field(None, description="The rich push fields (docs/PAYLOADS.md)")
    notification_key: str = Field(description="UUID created with the template; stable across updates")
    version: int = Field(description="Cache version; bumped by every write")
    created_at: datetime
    updated_at: datetime


class TemplateList(BaseModel):
    items: list[TemplateOut]
