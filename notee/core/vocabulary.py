"""Notee's shared vocabulary: the small value types and constants every layer speaks.

It imports nothing from Notee, so the API, the domain, the fan-out engine, the scheduler, the stores
and the providers can all use it without importing each other (docs/ARCHITECTURE.md, layers):

- what a publish job addresses (``TopicTarget`` / ``CycleTarget`` / ``UserTarget``) and how a job row stores it;
- slot arithmetic (``SLOT_SIZE``, ``slot_of``);
- the notification methods, device OSes, delivery modes and the days of the week;
- ``RecipientRow`` / ``Recipient`` (one device, as the fan-out read yields it) and ``PageCounts`` (what sending some
  devices did: the one counts type of a page, a task and a job's progress); ``JobFilter`` (which jobs a listing shows);
- the decrypted provider credentials of a service (read by the domain, used by the providers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, NamedTuple, get_args

# --- notification methods, device OSes, priorities, days ------------------------------------------------------

Method = Literal["TOPIC", "CYCLE", "SINGLE"]
Os = Literal["IOS", "AOS", "WEB"]  # WEB: a browser push subscription (notee/core/webpush_token.py)
Priority = Literal["high", "normal"]
# scheduled: a publish or send with send_at, waiting in MySQL until then (a worker claims it no earlier).
JobState = Literal["scheduled", "queued", "running", "done", "failed", "expired", "cancelled"]
METHODS: tuple[Method, ...] = get_args(Method)
OSES: tuple[Os, ...] = get_args(Os)
PRIORITIES: tuple[Priority, ...] = get_args(Priority)
DAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")  # index = datetime.weekday()
# Per-tenant rate-limit classes (notee.domain.ratelimit): topic publishes, single sends, tenant
# writes (subscriptions and the rest), tenant reads.
RateClass = Literal["publish", "send", "write", "read", "receipt"]
RATE_CLASSES: tuple[RateClass, ...] = get_args(RateClass)
# A service's delivery mode: live sends through its providers; dry_run only records (log provider).
DeliveryMode = Literal["live", "dry_run"]
DELIVERY_MODES: tuple[DeliveryMode, ...] = get_args(DeliveryMode)
# Delivery webhook events (docs/WEBHOOKS.md), and the states of one event's delivery to one endpoint.
# The receipt.* events carry the apps' engagement receipts (docs/WEBHOOKS.md "Engagement events"): an
# endpoint gets them only when it names them (opt-in); the default is the four others.
WebhookEvent = Literal[
    "job.finished",
    "job.failed",
    "token.pruned",
    "dead_letter.created",
    "receipt.delivered",
    "receipt.opened",
    "receipt.clicked",
    "receipt.dismissed",
]
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = get_args(WebhookEvent)
RECEIPT_WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = tuple(e for e in WEBHOOK_EVENTS if e.startswith("receipt."))
DEFAULT_WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = tuple(e for e in WEBHOOK_EVENTS if e not in RECEIPT_WEBHOOK_EVENTS)
WebhookDeliveryState = Literal["pending", "delivered", "failed"]


# --- targets --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicTarget:
    """A topic of a TOPIC template; ``platforms``: only devices of these OSes (empty: every OS)."""

    topic: str
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CycleTarget:
    """One cycle bucket of a CYCLE template: local wall-clock day/hour/minute in one IANA timezone."""

    timezone: str  # IANA name, e.g. "Asia/Seoul"
    day: str  # MON..SUN, local to timezone
    hour: int  # 0-23, local
    minute: int  # 0-59, local


@dataclass(frozen=True, slots=True)
class UserTarget:
    """Every device of one user: a single send scheduled for later (``send_at``) runs as a job of one
    task whose worker reads the user's devices from MySQL when it runs."""

    user_id: str


@dataclass(frozen=True, slots=True)
class ConditionTarget:
    """The devices for which an FCM condition over topics holds (docs/AUDIENCES.md "Conditions"):
    ``condition`` as given (notee/domain/conditions.py parses it); ``platforms`` as in TopicTarget."""

    condition: str
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AudienceTarget:
    """The service's devices walked in MySQL (docs/AUDIENCES.md "Design"): ``spec`` is what the job
    row keeps of its filter, segments (their definitions, snapshotted) or user list (its users are in
    ``job_audience_user``; the spec keeps their count and digest); ``platforms`` as in TopicTarget."""

    spec: dict[str, Any]
    platforms: tuple[str, ...] = ()


Target = TopicTarget | CycleTarget | UserTarget | ConditionTarget | AudienceTarget


# What an AUD job's stored target keeps of its audience (the rest is the planning's: "slots" ...).
AUDIENCE_SPEC_KEYS = ("filter", "segments", "audience", "users")


def _with_platforms(value: dict[str, Any], platforms: tuple[str, ...]) -> dict[str, Any]:
    # only when given: the stored form (and request hash) of a publish without them is unchanged
    return value | {"platforms": list(platforms)} if platforms else value


def encode_target(target: Target) -> tuple[str, dict[str, Any]]:
    """(target_kind, JSON value) as a job row stores them."""
    if isinstance(target, TopicTarget):
        return "TOPIC", _with_platforms({"topic": target.topic}, target.platforms)
    if isinstance(target, ConditionTarget):
        return "COND", _with_platforms({"condition": target.condition}, target.platforms)
    if isinstance(target, AudienceTarget):
        return "AUD", _with_platforms(dict(target.spec), target.platforms)
    if isinstance(target, CycleTarget):
        return "CYCLE", asdict(target)
    if isinstance(target, UserTarget):
        return "USER", {"user_id": target.user_id}
    raise TypeError(f"not a fan-out target: {target!r}")


def decode_target(kind: str, value: dict[str, Any]) -> Target:
    """Inverse of ``encode_target``; ValueError for a kind it never writes."""
    platforms = tuple(value.get("platforms") or ())
    if kind == "TOPIC":
        return TopicTarget(value["topic"], platforms)
    if kind == "COND":
        return ConditionTarget(value["condition"], platforms)
    if kind == "AUD":
        return AudienceTarget({k: v for k, v in value.items() if k in AUDIENCE_SPEC_KEYS}, platforms)
    if kind == "CYCLE":
        return CycleTarget(value["timezone"], value["day"], int(value["hour"]), int(value["minute"]))
    if kind == "USER":
        return UserTarget(value["user_id"])
    raise ValueError(f"unknown target kind {kind!r}")


# --- slots ----------------------------------------------------------------------------------------

SLOT_SIZE = 30_000  # seed: ~300 B rows, ~10 MB partitions -> 30,000 rows per slot


def slot_of(no: int) -> int:
    """The slot of subscription number ``no`` (numbering counter)."""
    return no // SLOT_SIZE


BLOCK_SIZE = 1_000  # numbers per occupancy block (target_slots): a slot has SLOT_SIZE // BLOCK_SIZE = 30
BLOCKS_PER_SLOT = SLOT_SIZE // BLOCK_SIZE


def block_of(no: int) -> int:
    """The occupancy block of subscription number ``no`` (its slot is ``block // BLOCKS_PER_SLOT``)."""
    return no // BLOCK_SIZE


def pack_slots(blocks: dict[int, int], blocks_per_task: int = BLOCKS_PER_SLOT) -> list[tuple[int, int]]:
    """Task ranges over the occupied slots of a target (slot -> occupied blocks): consecutive occupied
    slots share a task while their blocks add up to at most ``blocks_per_task`` (a block holds at most
    BLOCK_SIZE rows, so a task holds at most what one full slot does); a full slot is a task of its
    own. Each range runs from its first to its last occupied slot; the slots between that are not
    occupied are skipped by the worker (the job's ``slots``). No occupied slot: one task on slot 0."""
    ranges: list[tuple[int, int]] = []
    first = last = -1
    held = 0
    for slot in sorted(blocks):
        n = max(1, blocks[slot])
        if first >= 0 and held + n > blocks_per_task:
            ranges.append((first, last))
            first = -1
        if first < 0:
            first, held = slot, 0
        last, held = slot, held + n
    if first >= 0:
        ranges.append((first, last))
    return ranges or [(0, 0)]


def slot_ranges(max_slot: int, slots_per_task: int = 1) -> list[tuple[int, int]]:
    """Split slots ``0..max_slot`` (inclusive) into task ranges of ``slots_per_task`` slots."""
    if max_slot < 0:
        max_slot = 0
    if slots_per_task < 1:
        raise ValueError("slots_per_task must be >= 1")
    return [(a, min(a + slots_per_task - 1, max_slot)) for a in range(0, max_slot + 1, slots_per_task)]


# --- recipients and counts ------------------------------------------------------------------------


class Recipient(NamedTuple):
    """One device to push to. The fan-out read yields the driver's own row tuples, columns in this
    order (``RecipientRow``, read by position: ``TOKEN`` ... ``ORIGIN``), no object built per row
    (docs/BENCHMARKS.md, slot walk); a Recipient is such a row with names, for the few built in
    Python (a user's devices from MySQL, tests)."""

    device_token: str
    device_os: str  # "IOS" | "AOS" | "WEB"
    user_id: str
    no: int = 0  # the slot row's number: with device_token, the row's key (resume after a rejected paging state)
    # The device's first token when this row was moved by a token rotation (it keeps its ``no``), else
    # None: a page meeting a device's old and new row at one ``no`` sends one (docs/SCHEMA.md, races).
    origin: str | None = None

    @property
    def device(self) -> str:
        """The device across rotations: its first token."""
        return self.origin or self.device_token


# A recipient as the fan-out read yields it: the driver's row (device_token, device_os, user_id, no,
# origin); a ``Recipient`` is one too. Read its columns by these positions.
RecipientRow = tuple[str, str, str, int, str | None]
TOKEN: Final = 0
OS: Final = 1
USER: Final = 2
NO: Final = 3
ORIGIN: Final = 4


def device_of(row: RecipientRow) -> str:
    """The device across rotations: its first token (``Recipient.device`` for a row)."""
    return row[ORIGIN] or row[TOKEN]


@dataclass(frozen=True, slots=True)
class PageCounts:
    """What sending some devices did, in device counts: ``targeted == sent + failed + pruned``;
    ``retried`` counts extra attempts. One page's result, a task's checkpoint increment, and
    (with ``tasks_done``, see ``Progress``) a job's rolled-up progress."""

    targeted: int = 0
    sent: int = 0
    failed: int = 0
    pruned: int = 0
    retried: int = 0
    no_credentials: int = 0  # of failed: no credentials for the recipient's platform (not sent, not pruned)
    quiet_dropped: int = 0  # not sent, not in targeted: in quiet hours, and the template drops (topic only)
    ttl_expired: int = 0  # not sent, not in targeted: held by a provider outage past the push's ttl_seconds


@dataclass(frozen=True, slots=True)
class Progress(PageCounts):
    """A job's progress: the counts of all its tasks, and how many tasks are finished."""

    tasks_done: int = 0


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which of a service's jobs a listing shows, newest first (the API's, the admin's and the console's
    listings and the store's query take this one bundle). None: no filter on that field. ``before``:
    the (created_at, job_id) of the previous page's last job (keyset paging: stable while new jobs arrive)."""

    state: str | None = None
    method: str | None = None
    type_: str | None = None
    created_from: datetime | None = None  # naive UTC, inclusive
    created_to: datetime | None = None  # naive UTC, exclusive
    before: tuple[datetime, str] | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class UserFilter:
    """Which of a service's users a listing shows, newest first. None: no filter on that field.
    ``before``: the (created_at, user_id) of the previous page's last user (keyset paging)."""

    created_since: datetime | None = None  # naive UTC, inclusive
    has_devices: bool | None = None
    platform: str | None = None  # a device of this OS (IOS, AOS, WEB)
    before: tuple[datetime, str] | None = None
    limit: int = 50


# --- provider credentials (decrypted) -------------------------------------------------------------

# Google's OAuth2 token endpoint: the only place a stored service account's signed assertion may go
# (checked when saved by domain/rules.py, again by providers/fcm.py before it signs anything).
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"


def allowed_token_uris(emulator_url: str | None) -> list[str]:
    """Token endpoints a stored service account may name: Google's, and the emulator's when one is
    configured (NOTEE_EMULATOR_URL)."""
    return [GOOGLE_TOKEN_URI] + ([emulator_url.rstrip("/") + "/token"] if emulator_url else [])


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
class WebPushCredentials:
    """A service's VAPID key pair (RFC 8292): the P-256 private key in PEM, the subject (``mailto:``
    or ``https:``) push services may use to contact the sender; the public key derives from the key."""

    private_key: str = field(repr=False)
    subject: str


@dataclass(frozen=True)
class ProviderCredentials:
    """Decrypted provider credentials of one service: in memory only, never logged (repr hides keys)."""

    fcm: FcmCredentials | None = None
    apns: ApnsCredentials | None = None
    webpush: WebPushCredentials | None = None
