"""What Notee is doing, for operators and the console: subscriber counts (per type and per topic),
the cycle calendar (what the scheduler will send in the next hours) and a delivery summary (what a
service's jobs did in the last hours).

Read-only. Each function takes the caller's MySQL Session (and the process's ``Statements`` when it
reads Cassandra) and reads one service's data, or every service's for the admin variants; the web
console calls these functions directly, the HTTP API (``notee/api/routes/insight.py``) wraps them.

* Per-type counts are the seed's ``count`` counters (users with a live subscription of the type);
  per-topic counts are ``numbering.topic_subscribers`` (docs/SCHEMA.md, decision 3). Both may drift
  until ``notee reconcile`` repairs them, and say so in their name: they are counters, not a scan.
* The calendar uses the scheduler's own structures and rules: the timezones in ``cycle_timezone``,
  the local buckets ``notee.core.clock.due_buckets`` makes due at each UTC minute (DST gaps and
  repeats included), the templates ``cycle_due`` lists per bucket, resolved against MySQL as the
  scheduler resolves them, and the rows of each bucket's slot partitions (what the minute's job will
  read). "Now" is the database clock, as for the scheduler.
* The summary counts jobs *created* in the window (by state) and what their tasks did so far, and
  the dead letters recorded in the window. Single sends (``POST /v1/users/{id}/send``) are not jobs:
  only their dead letters are counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import get_args

from sqlalchemy.orm import Session

from notee.core.clock import aware_utc, due_buckets, floor_minute, zone
from notee.core.errors import InvalidInput
from notee.core.vocabulary import DAYS, CycleTarget, JobState
from notee.store import activity_sql, templates_sql
from notee.store import subscription_sql as subsql
from notee.store.cql.counters import max_slot
from notee.store.cql.due import timezones_in_use
from notee.store.cql.statements import Statements
from notee.store.mysql import db_now

log = logging.getLogger(__name__)

CALENDAR_MAX_HOURS = 24 * 7
CALENDAR_MAX_ENTRIES = 5000  # a response stays bounded however busy the week is
SUMMARY_MAX_HOURS = 24 * 14  # finished jobs are kept at least retention_days (14 by default)
TOPICS_MAX_PAGE = 1000
SUMMARY_PAGE = 50  # services per page of the admin's delivery summaries
SUMMARY_MAX_PAGE = 200
_COUNT_IN_FLIGHT = 256  # concurrent COUNT reads of slot partitions
JOB_STATES: tuple[JobState, ...] = get_args(JobState)


# ---------------------------------------------------------------------- subscriber counts
@dataclass(frozen=True, slots=True)
class TypeCount:
    method: str
    type_: str
    subscribers: int  # users with at least one live subscription of (method, type)


@dataclass(frozen=True, slots=True)
class TopicCount:
    type_: str
    topic: str
    subscribers: int  # users subscribed to (type, topic)


@dataclass(frozen=True, slots=True)
class TopicPage:
    items: list[TopicCount]
    next_after: tuple[str, str] | None  # (type, topic) to resume after; None at the end


def subscriber_counts(session: Session, st: Statements, service: str) -> list[TypeCount]:
    """Subscribed users per TOPIC and CYCLE template of the service (SINGLE templates have no
    subscriptions), in (method, type) order; a template nobody subscribed to is listed with 0."""
    counts = st.counts(service)
    return [
        TypeCount(
            t.notification_method, t.notification_type, counts.get((t.notification_method, t.notification_type), 0)
        )
        for t in templates_sql.list_templates(session, service)
        if t.notification_method in ("TOPIC", "CYCLE")
    ]


def topic_counts(
    session: Session,
    st: Statements,
    service: str,
    *,
    type_: str | None = None,
    after: tuple[str, str] | None = None,
    limit: int = 100,
) -> TopicPage:
    """The service's topics with at least one subscriber, in (type, topic) order, ``limit`` at a time.
    Only types that still have a TOPIC template are listed (a deleted template's counts were reset)."""
    if not 1 <= limit <= TOPICS_MAX_PAGE:
        raise InvalidInput(
            f"limit must be 1..{TOPICS_MAX_PAGE}",
            details=[{"field": "limit", "reason": "out_of_range", "min": 1, "max": TOPICS_MAX_PAGE}],
        )
    live = {
        t.notification_type for t in templates_sql.list_templates(session, service) if t.notification_method == "TOPIC"
    }
    if type_ is not None and type_ not in live:
        return TopicPage([], None)
    items: list[TopicCount] = []
    for t, topic, n in st.topic_subscribers(service, type_, after, fetch_size=min(limit * 2, 1000)):
        if t not in live or n == 0:
            continue
        items.append(TopicCount(t, topic, n))
        if len(items) == limit:
            return TopicPage(items, (t, topic))
    return TopicPage(items, None)


# ---------------------------------------------------------------------- cycle calendar
@dataclass(frozen=True, slots=True)
class DueTemplate:
    service: str
    type_: str
    notification_key: str
    bucket: CycleTarget  # the local (timezone, day, hour, minute) that falls due
    subscriptions: int  # slot rows of the bucket: the devices the minute's job will read


@dataclass(frozen=True, slots=True)
class CalendarMinute:
    minute: datetime  # UTC, aware
    templates: list[DueTemplate]


@dataclass(frozen=True, slots=True)
class Calendar:
    start: datetime  # the first UTC minute looked at (the next tick)
    end: datetime  # exclusive
    minutes: list[CalendarMinute] = field(default_factory=list)
    truncated: bool = False  # more than CALENDAR_MAX_ENTRIES due templates: the rest are left out


def _check_hours(hours: int, maximum: int) -> None:
    _check_range("hours", hours, maximum)


def _check_limit(limit: int, maximum: int) -> None:
    _check_range("limit", limit, maximum)


def _check_range(field: str, value: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidInput(
            f"{field} must be 1..{maximum}",
            details=[{"field": field, "reason": "out_of_range", "min": 1, "max": maximum}],
        )


def cycle_calendar(
    session: Session,
    st: Statements,
    service: str | None,
    *,
    hours: int = 24,
    now: datetime | None = None,
    max_entries: int = CALENDAR_MAX_ENTRIES,
) -> Calendar:
    """Every UTC minute of the next ``hours`` hours at which cycle templates fall due (of one
    service, or every service's with ``service=None``), each with its due templates and how many
    subscriptions each will target. Minutes with nothing due are left out. ``now`` defaults to the
    database clock; the calendar starts at the minute after it (the next one the scheduler ticks).
    At most ``max_entries`` due templates, the earliest (``truncated`` says when more were due)."""
    _check_hours(hours, CALENDAR_MAX_HOURS)
    start = floor_minute(now or aware_utc(db_now(session))) + timedelta(minutes=1)
    end = start + timedelta(hours=hours)
    templates = subsql.live_cycle_templates(session, service)
    # bucket -> due template keys, from the scheduler's due index, in the zones the scheduler evaluates
    zones = set(timezones_in_use(st))
    keys_at: dict[CycleTarget, list[str]] = {}
    for tz, day, hour, minute, key, svc in st.scan_due():
        if key in templates and (service is None or svc == service) and tz in zones:
            keys_at.setdefault(CycleTarget(tz, day, hour, minute), []).append(key)
    due: list[tuple[datetime, tuple[str, str], CycleTarget, str]] = []
    for bucket, keys in keys_at.items():
        for moment in _fires(bucket, start, end):
            due += [(moment, templates[k], bucket, k) for k in keys]
    due.sort(key=lambda d: (d[0], d[1], d[2].timezone, d[2].hour, d[2].minute, d[3]))  # minute, (service, type)
    truncated = len(due) > max_entries
    due = due[:max_entries]
    counts = _count_subscriptions(st, [(owner, k, b) for _, owner, b, k in due])
    by_minute: dict[datetime, list[DueTemplate]] = {}
    for (m, (svc, type_), bucket, key), n in zip(due, counts, strict=True):
        by_minute.setdefault(m, []).append(DueTemplate(svc, type_, key, bucket, n))
    return Calendar(start, end, [CalendarMinute(m, items) for m, items in by_minute.items()], truncated)


def _fires(bucket: CycleTarget, start: datetime, end: datetime) -> list[datetime]:
    """The UTC minutes in [start, end) at which the scheduler makes ``bucket`` due.

    The scheduler's own rule decides (``clock.due_buckets``); it is asked only around each local date
    of the bucket's weekday in the window: at the wall time's two readings (fold 0 and 1), and every
    minute between them, where a DST gap or repeat puts the firing minute."""
    try:
        tz = zone(bucket.timezone)
    except ValueError:  # a zone this host does not know: the scheduler skips it too (and logs)
        return []
    first_day = start.astimezone(tz).date() - timedelta(days=1)
    last_day = end.astimezone(tz).date() + timedelta(days=1)
    found: list[datetime] = []
    day = first_day
    while day <= last_day:
        if DAYS[day.weekday()] == bucket.day:
            wall = datetime(day.year, day.month, day.day, bucket.hour, bucket.minute)
            readings = [floor_minute(wall.replace(tzinfo=tz, fold=f).astimezone(UTC)) for f in (0, 1)]
            moment, last = min(readings), max(readings)
            while moment <= last:
                if start <= moment < end and moment not in found and bucket in due_buckets(moment, bucket.timezone):
                    found.append(moment)
                moment += timedelta(minutes=1)
        day += timedelta(days=1)
    return found


def _count_subscriptions(st: Statements, due: Sequence[tuple[tuple[str, str], str, CycleTarget]]) -> list[int]:
    """Rows of each (template, bucket) over the slots it occupies (``target_slots``) or, when its
    template's occupancy is not known, over its slots 0..max_slot; read ``_COUNT_IN_FLIGHT`` at a time."""
    top: dict[tuple[str, str], int] = {}
    reads: list[tuple[int, str, CycleTarget, int]] = []  # (index in due, key, bucket, slot)
    for i, ((svc, type_), key, bucket) in enumerate(due):
        occupied = st.occupancy(key, bucket)
        if occupied is not None:
            reads += [(i, key, bucket, slot) for slot in sorted(occupied)]
            continue
        if (svc, type_) not in top:
            top[(svc, type_)] = max_slot(st, svc, "CYCLE", type_)
        reads += [(i, key, bucket, slot) for slot in range(top[(svc, type_)] + 1)]
    totals = [0] * len(due)
    for chunk in range(0, len(reads), _COUNT_IN_FLIGHT):
        batch = reads[chunk : chunk + _COUNT_IN_FLIGHT]
        futures = [(i, st.cycle_rows_async(key, bucket, slot)) for i, key, bucket, slot in batch]
        for i, future in futures:
            totals[i] += st.count_of(future)
    return totals


# ---------------------------------------------------------------------- delivery summary
@dataclass(frozen=True, slots=True)
class Deliveries:
    """What jobs did (their tasks' counts) and how many dead letters were recorded."""

    jobs: int = 0
    targeted: int = 0
    sent: int = 0
    failed: int = 0
    pruned: int = 0
    no_credentials: int = 0
    retried: int = 0
    dead_lettered: int = 0
    ttl_expired: int = 0  # held by a provider outage past their push's TTL: not sent, not in targeted


@dataclass(frozen=True, slots=True)
class HourSummary:
    hour: datetime  # UTC, aware, the start of the hour
    deliveries: Deliveries


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    service: str
    since: datetime  # UTC, aware: the start of the first hour
    until: datetime  # the database clock when it was read
    totals: Deliveries
    jobs_by_state: dict[str, int]  # every state, 0 included
    hours: list[HourSummary]  # every hour of the window, oldest first, empty hours included


def _add(a: Deliveries, b: Deliveries) -> Deliveries:
    return Deliveries(*(x + y for x, y in zip(_values(a), _values(b), strict=True)))


def _values(d: Deliveries) -> tuple[int, ...]:
    return (d.jobs, d.targeted, d.sent, d.failed, d.pruned, d.no_credentials, d.retried, d.dead_lettered, d.ttl_expired)


@dataclass(frozen=True, slots=True)
class _Window:
    first: datetime  # UTC, aware: the start of the first hour
    until: datetime  # the database clock when it was read
    hours: int


def _window(session: Session, hours: int, now: datetime | None) -> _Window:
    _check_hours(hours, SUMMARY_MAX_HOURS)
    until = aware_utc(now or aware_utc(db_now(session)))
    return _Window(floor_minute(until).replace(minute=0) - timedelta(hours=hours - 1), until, hours)


def _summaries(session: Session, services: list[str], window: _Window) -> dict[str, DeliverySummary]:
    """The summaries of ``services`` (each present, activity or not) in ``window``: two queries
    whatever their number."""
    first, naive_first = window.first, window.first.replace(tzinfo=None)
    per_hour = {svc: {first + timedelta(hours=h): Deliveries() for h in range(window.hours)} for svc in services}
    by_state: dict[str, dict[str, int]] = {svc: {state: 0 for state in JOB_STATES} for svc in services}
    for row in activity_sql.job_activity(session, services, naive_first):
        buckets, hour = per_hour[row.service], row.hour.replace(tzinfo=UTC)
        by_state[row.service][row.state] = by_state[row.service].get(row.state, 0) + row.jobs
        done = Deliveries(
            row.jobs,
            row.targeted,
            row.sent,
            row.failed,
            row.pruned,
            row.no_credentials,
            row.retried,
            0,
            row.ttl_expired,
        )
        buckets[hour] = _add(buckets.get(hour, Deliveries()), done)
    for (svc, naive_hour), n in activity_sql.dead_letters_per_hour(session, services, naive_first).items():
        buckets, hour = per_hour[svc], naive_hour.replace(tzinfo=UTC)
        buckets[hour] = _add(buckets.get(hour, Deliveries()), Deliveries(dead_lettered=n))
    out = {}
    for svc, buckets in sorted(per_hour.items()):
        totals = Deliveries()
        for d in buckets.values():
            totals = _add(totals, d)
        hours_out = [HourSummary(h, d) for h, d in sorted(buckets.items())]
        out[svc] = DeliverySummary(svc, first, window.until, totals, by_state[svc], hours_out)
    return out


def delivery_summary(
    session: Session, service: str, *, hours: int = 24, now: datetime | None = None
) -> DeliverySummary:
    """The service's jobs created in the current UTC hour and the ``hours - 1`` before it (by state,
    and what their tasks did so far), and its dead letters recorded in that window, per hour."""
    return _summaries(session, [service], _window(session, hours, now))[service]


@dataclass(frozen=True, slots=True)
class SummaryPage:
    """Services' summaries from one clock reading (``DeliverySummary``), in id order."""

    items: list[DeliverySummary]
    next_after: str | None  # the last service of a full page: pass as ``after`` for the next one


def delivery_summaries(
    session: Session,
    *,
    hours: int = 24,
    now: datetime | None = None,
    after: str | None = None,
    limit: int = SUMMARY_PAGE,
) -> SummaryPage:
    """``delivery_summary`` of up to ``limit`` services that had a job or a dead letter in the window
    (admin), in id order after ``after``; a service without activity is left out. Three queries a
    page: a response stays bounded (``limit`` x ``hours``) however many services were active."""
    _check_limit(limit, SUMMARY_MAX_PAGE)
    window = _window(session, hours, now)
    page = activity_sql.active_services(session, window.first.replace(tzinfo=None), after, limit + 1)
    summaries = _summaries(session, page[:limit], window)
    return SummaryPage(list(summaries.values()), page[limit - 1] if len(page) > limit else None)


def summaries_of(session: Session, services: list[str], *, hours: int = 24) -> dict[str, DeliverySummary]:
    """``delivery_summary`` of each of ``services`` (the console's page of services), one clock reading."""
    return _summaries(session, services, _window(session, hours, None))
