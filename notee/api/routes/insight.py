"""What Notee is doing, over HTTP: subscriber counts per type and per topic, the cycle calendar and the
delivery summary of a service (``/v1/...``, its API key) or of any/every service (``/v1/admin/...``).
Thin wrappers of ``notee.domain.insight`` (the web console calls the same functions)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, cast

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from notee.api import cursors
from notee.api.auth import AdminDep, ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.models import Answer, errors
from notee.core.vocabulary import JobState
from notee.domain import insight, services
from notee.domain.rules import SERVICE_PATTERN, TYPE_PATTERN
from notee.store.runtime import Runtime

router = APIRouter(prefix="/v1", tags=["insight"])
admin_router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[AdminDep], responses=errors(403))


# ---------------------------------------------------------------------- models
class TypeCountOut(BaseModel):
    method: str = Field(description="TOPIC or CYCLE")
    type: str
    subscribers: int = Field(description="Users with at least one live subscription of this template.")


class SubscriberCounts(BaseModel):
    items: list[TypeCountOut]


class TopicCountOut(BaseModel):
    type: str
    topic: str
    subscribers: int = Field(description="Users subscribed to this topic (devices are not counted).")


class TopicList(BaseModel):
    items: list[TopicCountOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at the end.")


class DueTemplateOut(BaseModel):
    service: str
    notification_type: str
    notification_key: str
    timezone: str = Field(description="The schedule's IANA time zone.")
    day: str = Field(description="Local day of week, MON..SUN.")
    hour: int = Field(description="Local hour of the schedule.")
    minute: int = Field(description="Local minute of the schedule.")
    subscriptions: int = Field(description="Device subscriptions due: the recipients this minute's job will read.")


class CalendarMinuteOut(Answer):
    minute: datetime = Field(description="The UTC minute the scheduler creates the jobs.")
    subscriptions: int = Field(description="Sum over the minute's templates.")
    templates: list[DueTemplateOut]


class CalendarOut(Answer):
    start: datetime = Field(description="First minute looked at (the next tick).")
    end: datetime = Field(description="End of the window (exclusive).")
    subscriptions: int = Field(description="Sum over every listed minute.")
    truncated: bool = Field(description="More templates were due than one answer lists; the latest are left out.")
    minutes: list[CalendarMinuteOut] = Field(description="Only the minutes at which something is due.")


class DeliveryCounts(BaseModel):
    jobs: int = Field(description="Jobs created (topic publishes and cycle minutes).")
    targeted: int
    sent: int
    failed: int = Field(description="Recipients not delivered (dead-lettered or without credentials).")
    pruned: int = Field(description="Tokens the providers rejected as invalid (removed).")
    no_credentials: int
    retried: int
    dead_lettered: int = Field(description="Dead letters recorded (single sends' included) and not yet replayed.")
    ttl_expired: int = Field(
        description="Recipients held by a provider outage past their push's ttl_seconds: not sent, not dead-lettered,"
        " not in targeted."
    )


class HourOut(Answer):
    hour: datetime = Field(description="Start of the UTC hour.")
    counts: DeliveryCounts


class DeliverySummaryOut(Answer):
    service: str
    since: datetime = Field(description="Start of the first hour of the window.")
    until: datetime = Field(description="When it was read (database clock).")
    totals: DeliveryCounts
    jobs_by_state: dict[JobState, int] = Field(description="Jobs created in the window, by their state now.")
    hours: list[HourOut] = Field(description="Every hour of the window, oldest first.")


class DeliverySummaryList(BaseModel):
    items: list[DeliverySummaryOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page of services; null at the end.")


# ---------------------------------------------------------------------- conversions
def _counts(d: insight.Deliveries) -> DeliveryCounts:
    return DeliveryCounts(
        jobs=d.jobs,
        targeted=d.targeted,
        sent=d.sent,
        failed=d.failed,
        pruned=d.pruned,
        no_credentials=d.no_credentials,
        retried=d.retried,
        dead_lettered=d.dead_lettered,
        ttl_expired=d.ttl_expired,
    )


def summary_out(s: insight.DeliverySummary) -> DeliverySummaryOut:
    return DeliverySummaryOut(
        service=s.service,
        since=s.since,
        until=s.until,
        totals=_counts(s.totals),
        jobs_by_state=s.jobs_by_state,  # type: ignore[arg-type]  # the domain lists exactly the JobStates
        hours=[HourOut(hour=h.hour, counts=_counts(h.deliveries)) for h in s.hours],
    )


def calendar_out(cal: insight.Calendar) -> CalendarOut:
    minutes = []
    for m in cal.minutes:
        items = [
            DueTemplateOut(
                service=t.service,
                notification_type=t.type_,
                notification_key=t.notification_key,
                timezone=t.bucket.timezone,
                day=t.bucket.day,
                hour=t.bucket.hour,
                minute=t.bucket.minute,
                subscriptions=t.subscriptions,
            )
            for t in m.templates
        ]
        minutes.append(
            CalendarMinuteOut(minute=m.minute, subscriptions=sum(t.subscriptions for t in items), templates=items)
        )
    return CalendarOut(
        start=cal.start,
        end=cal.end,
        subscriptions=sum(m.subscriptions for m in minutes),
        truncated=cal.truncated,
        minutes=minutes,
    )


def _subscriber_counts(db: Session, runtime: Runtime, service: str) -> SubscriberCounts:
    counts = insight.subscriber_counts(db, runtime.statements, service)
    return SubscriberCounts(
        items=[TypeCountOut(method=c.method, type=c.type_, subscribers=c.subscribers) for c in counts]
    )


def _topics(
    db: Session, runtime: Runtime, service: str, type_: str | None, cursor: str | None, limit: int
) -> TopicList:
    page = insight.topic_counts(
        db,
        runtime.statements,
        service,
        type_=type_,
        after=cast(tuple[str, str], cursors.decode(cursor, 2)) if cursor else None,
        limit=limit,
    )
    return TopicList(
        items=[TopicCountOut(type=t.type_, topic=t.topic, subscribers=t.subscribers) for t in page.items],
        next_cursor=cursors.encode(*page.next_after) if page.next_after else None,
    )


# ---------------------------------------------------------------------- parameters
TypeQuery = Annotated[str | None, Query(pattern=TYPE_PATTERN, description="Only this TOPIC template's topics.")]
CursorQuery = Annotated[str | None, cursors.query(400, "next_cursor of the previous page.")]
TopicLimit = Annotated[int, Query(ge=1, le=insight.TOPICS_MAX_PAGE)]
CalendarHours = Annotated[
    int, Query(ge=1, le=insight.CALENDAR_MAX_HOURS, description="How far ahead to look, in hours.")
]
SummaryHours = Annotated[
    int, Query(ge=1, le=insight.SUMMARY_MAX_HOURS, description="The current UTC hour and this many - 1 before it.")
]
SummaryLimit = Annotated[int, Query(ge=1, le=insight.SUMMARY_MAX_PAGE, description="Services per page.")]
ServicePath = Annotated[str, Path(pattern=SERVICE_PATTERN, description="Tenant identifier")]


# ---------------------------------------------------------------------- tenant
@router.get("/subscriber-counts", response_model=SubscriberCounts)
def get_subscriber_counts(db: DbDep, runtime: RuntimeDep, service: ServiceDep) -> SubscriberCounts:
    """Subscribed users per TOPIC and CYCLE template (counters, repaired by `notee reconcile`)."""
    return _subscriber_counts(db, runtime, service)


@router.get("/topics", response_model=TopicList)
def list_topics(
    db: DbDep,
    runtime: RuntimeDep,
    service: ServiceDep,
    type: TypeQuery = None,
    cursor: CursorQuery = None,
    limit: TopicLimit = 100,
) -> TopicList:
    """The service's topics that have subscribers, with how many users each, by (type, topic)."""
    return _topics(db, runtime, service, type, cursor, limit)


@router.get("/calendar", response_model=CalendarOut)
def get_calendar(db: DbDep, runtime: RuntimeDep, service: ServiceDep, hours: CalendarHours = 24) -> CalendarOut:
    """The cycle calendar: each coming UTC minute at which cycle templates fall due (local time, DST
    included, as the scheduler computes it), with how many subscriptions each will reach. At most
    5,000 due templates are listed (`truncated` says when more were due)."""
    return calendar_out(insight.cycle_calendar(db, runtime.statements, service, hours=hours))


@router.get("/delivery-summary", response_model=DeliverySummaryOut)
def get_delivery_summary(db: DbDep, service: ServiceDep, hours: SummaryHours = 24) -> DeliverySummaryOut:
    """What the service's jobs did in the last hours (by the hour they were created) and the dead
    letters recorded, per UTC hour."""
    return summary_out(insight.delivery_summary(db, service, hours=hours))


# ---------------------------------------------------------------------- admin
@admin_router.get("/services/{service}/subscriber-counts", response_model=SubscriberCounts, responses=errors(404))
def admin_get_subscriber_counts(service: ServicePath, db: DbDep, runtime: RuntimeDep) -> SubscriberCounts:
    """Any service's subscribed users per TOPIC and CYCLE template."""
    services.get_service(db, service)
    return _subscriber_counts(db, runtime, service)


@admin_router.get("/services/{service}/topics", response_model=TopicList, responses=errors(404))
def admin_list_topics(
    service: ServicePath,
    db: DbDep,
    runtime: RuntimeDep,
    type: TypeQuery = None,
    cursor: CursorQuery = None,
    limit: TopicLimit = 100,
) -> TopicList:
    """Any service's topics that have subscribers."""
    services.get_service(db, service)
    return _topics(db, runtime, service, type, cursor, limit)


@admin_router.get("/calendar", response_model=CalendarOut, responses=errors(404))
def admin_get_calendar(
    db: DbDep,
    runtime: RuntimeDep,
    hours: CalendarHours = 24,
    service: Annotated[
        str | None, Query(pattern=SERVICE_PATTERN, description="Only this service (default: every service).")
    ] = None,
) -> CalendarOut:
    """The cycle calendar of every service (or one)."""
    if service is not None:
        services.get_service(db, service)
    return calendar_out(insight.cycle_calendar(db, runtime.statements, service, hours=hours))


@admin_router.get("/delivery-summary", response_model=DeliverySummaryList)
def admin_list_delivery_summaries(
    db: DbDep, hours: SummaryHours = 24, limit: SummaryLimit = insight.SUMMARY_PAGE, cursor: CursorQuery = None
) -> DeliverySummaryList:
    """The delivery summary of the services active in the window, a page of services at a time (in id
    order), one clock reading per page."""
    after = cursors.decode(cursor, 1)[0] if cursor else None
    page = insight.delivery_summaries(db, hours=hours, after=after, limit=limit)
    return DeliverySummaryList(
        items=[summary_out(s) for s in page.items],
        next_cursor=cursors.encode(page.next_after) if page.next_after else None,
    )
