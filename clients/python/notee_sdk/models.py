"""Typed answers of the Notee API.

Fields the server adds later are ignored (``extra="ignore"``), so an older client keeps working
against a newer server; fields it removes would fail loudly at parse time.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Method = Literal["TOPIC", "CYCLE", "SINGLE"]
Os = Literal["IOS", "AOS", "WEB"]
Priority = Literal["high", "normal"]
JobState = Literal["queued", "running", "done", "failed", "cancelled", "expired", "scheduled"]
SubscriptionMethod = Literal["TOPIC", "CYCLE"]  # a SINGLE template has no subscribers
DeliveryMode = Literal["live", "dry_run"]
QuietHoursMode = Literal["hold", "drop"]
SubscribeStatus = Literal["subscribed", "already_subscribed"]
BulkStatus = Literal["subscribed", "already_subscribed", "not_found"]
RateClass = Literal["publish", "send", "write", "read", "receipt"]
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
WebhookDeliveryState = Literal["pending", "delivered", "failed"]
# The server's enums, field by field: tests/integration/test_sdk_literals.py holds them to the
# OpenAPI document. A value a newer server adds fails to parse here: upgrade the client.
#: States after which a job's counts no longer change.
FINAL_JOB_STATES = frozenset({"done", "failed", "cancelled", "expired"})


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Alive(Model):
    status: str
    version: str


class Health(Model):
    status: str
    version: str
    mysql: str
    cassandra: str
    emulator_url: str | None = None  # set when every push goes to an emulator instead of FCM/APNs


class Service(Model):
    service: str
    display_name: str
    timezone: str
    delivery_mode: DeliveryMode = "live"  # "dry_run": pushes are recorded, never sent
    created_at: datetime


class Process(Model):
    kind: str  # api | worker | scheduler | webhooks
    process_id: str  # host:pid:random, unique per process start
    version: str
    started_at: datetime
    beat_at: datetime
    age_s: float  # seconds since its last heartbeat, by the database clock
    stale: bool  # missed 3 beats and 5 s: killed, hung or cut off from MySQL
    breakers: dict[str, str] | None = None  # a worker's breaker per provider: closed | open | half_open


class ApiKey(Model):
    key_id: str
    kind: str = "server"  # or "client": safe inside an app, may only post receipts
    label: str
    created_at: datetime
    revoked_at: datetime | None


class ApiKeyCreated(ApiKey):
    api_key: str = Field(description="`nk_<key_id>_<secret>` (a client key `nck_...`): shown once")


class CredentialsStatus(Model):
    fcm: bool
    apns: bool
    webpush: bool = False


class VapidKey(Model):
    """A service's VAPID public key (Web Push): the ``applicationServerKey`` of ``pushManager.subscribe``."""

    public_key: str
    subject: str
    generated: bool = False


class User(Model):
    user_id: str
    service_user_id: str
    name: str
    created_at: datetime
    updated_at: datetime
    locale: str | None = None
    timezone: str | None = None
    quiet_hours: dict[str, str] | None = None


class UserPage(Model):
    items: list[User]
    next_cursor: str | None = None


class ServiceQuietHours(Model):
    quiet_hours: dict[str, str] | None = None


class Device(Model):
    token: str
    os: Os
    region: str
    created_at: datetime
    updated_at: datetime
    locale: str | None = None
    app_version: str | None = None


class UserTags(Model):
    """A user's tags, key: value (a str, a number, a bool, or ``{"timestamp": "..."}``)."""

    user_id: str
    tags: dict[str, Any]


class Rotated(Model):
    rotated: int


class Template(Model):
    method: Method
    type: str
    title: str
    body: str
    data: dict[str, str] | None
    ttl_seconds: int | None
    priority: Priority
    notification_key: str
    version: int
    created_at: datetime
    updated_at: datetime
    variants: dict[str, dict[str, Any]] | None = None
    quiet_hours: QuietHoursMode = "hold"
    payload: dict[str, Any] | None = None  # the rich fields (docs/PAYLOADS.md)


class Subscribed(Model):
    status: SubscribeStatus
    devices: int
    schedule: str | None = None


class Schedule(Model):
    days: list[str]
    hour: int
    minute: int
    timezone: str
    canonical: str


class Subscription(Model):
    method: SubscriptionMethod
    type: str
    topic: str | None = None
    schedule: Schedule | None = None
    registered_at: datetime
    devices: int


class BulkResult(Model):
    user_id: str
    status: BulkStatus


class BulkSubscribed(Model):
    results: list[BulkResult]
    subscribed: int
    already_subscribed: int
    not_found: int


class PublishAccepted(Model):
    job_id: str
    state: JobState = "queued"  # "scheduled" when send_at is in the future
    send_at: datetime | None = None


class GeneralPublishAccepted(PublishAccepted):
    unknown_users: int | None = None  # a user list: how many of its ids name no user (skipped)


class Job(Model):
    job_id: str
    state: JobState
    send_at: datetime | None = None  # a scheduled job is sent then
    dry_run: bool = False  # the service was in dry_run mode: nothing was sent
    notification_type: str
    target: dict[str, Any]
    targeted: int
    sent: int
    failed: int
    no_credentials: int = 0  # devices of a platform the service has no credentials for (counted in failed)
    pruned: int
    retried: int
    quiet_dropped: int = 0  # not sent: in quiet hours, and the template drops
    ttl_expired: int = 0  # not sent: a provider outage held the push past its ttl_seconds
    tasks: int
    tasks_done: int
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        """True once the job's counts are final (done, failed, cancelled or expired)."""
        return self.state in FINAL_JOB_STATES


class JobPage(Model):
    items: list[Job]
    next_cursor: str | None


class SendResult(Model):
    devices: int
    delivered: int
    pruned: int
    retried: int
    failed: int
    dry_run: bool = False
    quiet_dropped: int = 0
    send_id: str | None = None  # the id of this send's stats (get_job_stats)


class RateLimit(Model):
    rate_class: RateClass = Field(alias="class")
    rate: float
    burst: int
    custom: bool


class DeadLetter(Model):
    id: int
    job_id: str | None
    device_token: str
    device_os: str
    provider: str
    reason: str
    attempts: int
    payload: dict[str, Any]
    created_at: datetime


class DeadLetterPage(Model):
    items: list[DeadLetter]
    next_cursor: str | None = None
    next_before_id: int | None = None  # deprecated: next_cursor


class FailureCount(Model):
    reason: str
    platform: str
    count: int


class JobFailures(Model):
    job_id: str
    dead_lettered: int
    items: list[FailureCount]


class Replayed(Model):
    replayed: int
    delivered: int
    pruned: int
    failed: int


# --- insight: subscriber counts, the cycle calendar, the delivery summary ----------------------------


class TypeCount(Model):
    method: str
    type: str
    subscribers: int


class SubscriberCounts(Model):
    items: list[TypeCount]


class TopicCount(Model):
    type: str
    topic: str
    subscribers: int


class TopicPage(Model):
    items: list[TopicCount]
    next_cursor: str | None


class DueTemplate(Model):
    service: str
    notification_type: str
    notification_key: str
    timezone: str
    day: str
    hour: int
    minute: int
    subscriptions: int


class CalendarMinute(Model):
    minute: datetime
    subscriptions: int
    templates: list[DueTemplate]


class Calendar(Model):
    start: datetime
    end: datetime
    subscriptions: int
    truncated: bool
    minutes: list[CalendarMinute]


class DeliveryCounts(Model):
    jobs: int
    targeted: int
    sent: int
    failed: int
    pruned: int
    no_credentials: int
    retried: int
    dead_lettered: int
    ttl_expired: int = 0  # held by a provider outage past their push's TTL (servers before 0.1.0 leave it out)


class HourCounts(Model):
    hour: datetime
    counts: DeliveryCounts


class DeliverySummary(Model):
    service: str
    since: datetime
    until: datetime
    totals: DeliveryCounts
    jobs_by_state: dict[str, int]
    hours: list[HourCounts]


class DeliverySummaryPage(Model):
    items: list[DeliverySummary]
    next_cursor: str | None = None


class Webhook(Model):
    endpoint_id: str
    url: str
    events: list[WebhookEvent]
    description: str | None = None
    created_at: datetime


class WebhookCreated(Webhook):
    secret: str  # the signing secret: shown only in this answer


class WebhookDelivery(Model):
    delivery_id: int
    event_id: str
    event_type: WebhookEvent
    state: WebhookDeliveryState
    attempts: int
    last_status: int | None = None
    last_error: str | None = None
    next_attempt_at: datetime | None = None
    created_at: datetime
    resent_at: datetime | None = None
    finished_at: datetime | None = None
    event: dict[str, Any]


class WebhookDeliveryPage(Model):
    items: list[WebhookDelivery]
    next_cursor: str | None = None
    next_before_id: int | None = None  # deprecated: next_cursor


# --- audiences: segments and estimates (docs/AUDIENCES.md) ---------------------------------------


class Reach(Model):
    users: int
    devices: int
    devices_by_platform: dict[str, int]


class Segment(Model):
    name: str
    description: str
    filter: list[Any]  # groups (ORed) of predicates (ANDed): [{"tag"|"attribute": ..., "op": ..., "value": ...}]
    created_at: datetime
    updated_at: datetime
    reach: Reach | None = None  # what it matches now; None in a listing without counts


class SegmentPage(Model):
    items: list[Segment]
    next_cursor: str | None


class Estimate(Model):
    users: int | None  # topic, condition: subscribed users (a bound); None: unknown
    devices: int | None  # None: unknown (topic, condition)
    devices_by_platform: dict[str, int] | None
    exact: bool
    method: str
    unknown_users: int | None = None
    topics: dict[str, int] | None = None


class PreviewPlatform(Model):
    provider: str  # fcm or apns
    body: dict[str, Any]  # FCM: {"message": ...}; APNs: the payload
    headers: dict[str, str] | None = None  # APNs: the request headers but authorization and apns-id
    bytes: int  # as the provider counts them against its limit
    limit: int
    over_limit: bool


class PreviewVariant(Model):
    locale: str | None  # None: the template's own text
    title: str
    body: str
    data: dict[str, str]
    payload: dict[str, Any] | None = None  # the rich fields, rendered
    platforms: dict[str, PreviewPlatform]  # by platform: AOS, IOS


class PublishPreview(Model):
    dry_run: bool  # always True: nothing was written or sent
    variants: list[PreviewVariant]
    ttl_seconds: int | None = None
    priority: str
    reach: Estimate
    unknown_users: int | None = None
    warnings: list[str]
    sample_recipient: dict[str, Any] | None = None
# --- bulk import and export ---------------------------------------------------------------------------

class ImportCreated(Model):
    import_id: str


class Import(Model):
    import_id: str
    format: str
    state: str  # queued, running, done
    lines_total: int
    lines_done: int
    lines_failed: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state == "done"


class ImportPage(Model):
    items: list[Import]
    next_cursor: str | None = None


class LineError(Model):
    line: int
    reason: str


class LineErrorPage(Model):
    items: list[LineError]
    next_cursor: str | None = None


class Receipt(Model):
    """One event an app reports: ``notification_id`` is the push's ``notee_id``."""

    notification_id: str
    event: Literal["delivered", "opened", "clicked", "dismissed"]
    at: datetime
    action: str | None = None


class ReceiptRejection(Model):
    index: int
    notification_id: str
    reason: str


class ReceiptsResult(Model):
    accepted: int
    duplicates: int
    rejected: list[ReceiptRejection]


class EngagementCounts(Model):
    targeted: int
    sent: int
    delivered: int
    opened: int
    clicked: int
    dismissed: int
    delivery_rate: float | None
    open_rate: float | None
    click_rate: float | None


class JobStats(Model):
    job_id: str
    type: str
    counts: EngagementCounts


class StatsRow(Model):
    key: str
    counts: EngagementCounts


class Stats(Model):
    by: str
    from_: date = Field(alias="from")
    to: date
    jobs_truncated: bool
    items: list[StatsRow]


class ReceiptRecord(Model):
    notification_id: str
    event: str
    action: str | None
    at: datetime
    received: datetime


class ReceiptPage(Model):
    items: list[ReceiptRecord]
    next_cursor: str | None
