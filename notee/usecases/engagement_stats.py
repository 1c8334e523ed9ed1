"""Engagement aggregates (``GET /v1/stats...``, ``notee stats``, docs/ENGAGEMENT.md): targeted and
sent from what Notee handed to the providers (the job's tasks in MySQL, a single send's source row),
delivered / opened / clicked / dismissed from the receipts' counters in Cassandra, and the rates.

Per job (or single send), and per template type, per topic or per day over a range of days in the
service's time zone; a notification is counted under the day it was made (so a rate divides the
receipts of the pushes of that day by those pushes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from sqlalchemy.orm import Session

from notee.core import notification_id
from notee.core.clock import naive_utc, zone
from notee.core.errors import Conflict, InvalidInput, NotFound
from notee.core.vocabulary import JobFilter
from notee.domain import services
from notee.store import jobs_sql, receipt_recount_sql
from notee.store.cql.engagement import BUCKETS
from notee.store.runtime import Runtime
from notee.usecases.receipts import EVENTS, SourceCache, find_sources, scope_keys

MAX_DAYS = 92
EARLIEST, LATEST = date(2000, 1, 1), date(2999, 12, 31)  # days a range may name (no calendar overflow)
_JOB_PAGE = 1000
MAX_JOBS = 50_000  # jobs summed for one range's targeted and sent (more: the answer says so)


@dataclass(slots=True)
class Counts:
    """One row of figures. Rates are over ``sent`` (None when nothing was sent)."""

    targeted: int = 0
    sent: int = 0
    events: dict[str, int] = field(default_factory=dict)

    def rate(self, event: str) -> float | None:
        return round(self.events.get(event, 0) / self.sent, 4) if self.sent else None


@dataclass(frozen=True, slots=True)
class JobStats:
    job_id: str
    type_: str
    counts: Counts


@dataclass(frozen=True, slots=True)
class ScopeStats:
    by: str
    days: tuple[date, date]  # inclusive, in the service's time zone
    rows: dict[str, Counts]
    jobs_truncated: bool  # more than MAX_JOBS jobs in the range: targeted and sent cover the newest


def job_stats(runtime: Runtime, service: str, job_id: str) -> JobStats:
    """A job's (or a single send's: its id is the notification id's source) figures. NotFound for
    an unknown id or another service's."""
    source = notification_id.source_of_job(job_id)
    if notification_id.job_id_of(source) is None:  # a single send
        row = runtime.statements.source_row(service, source)
        if row is None:
            raise NotFound("job not found")
        counts = Counts(row[2], row[3], runtime.statements.raw_counts(service, source))
        return JobStats(job_id, row[0], counts)
    with runtime.sessions() as session:
        job = jobs_sql.get_job(session, job_id, service)
        if job is None:
            raise NotFound("job not found")
        progress = jobs_sql.progress(session, job_id)
    counts, type_ = Counts(progress.targeted, progress.sent), job.type_
    counts.events = {e: n for e, n in runtime.statements.job_counts(service, source).items() if e in EVENTS}
    return JobStats(job_id, type_, counts)


def check_range(days_from: date | None, days_to: date | None, today: date) -> tuple[date, date]:
    """The range asked (default: the last 30 days to today); InvalidInput naming the field when it
    is reversed or longer than MAX_DAYS."""
    for name, day in (("from", days_from), ("to", days_to)):
        if day is not None and not EARLIEST <= day <= LATEST:
            raise InvalidInput(
                f"{name} is out of range", details=[{"loc": ["query", name], "msg": f"between {EARLIEST} and {LATEST}"}]
            )
    end = days_to or today
    start = days_from or end - timedelta(days=29)
    if start > end:
        raise InvalidInput("from is after to", details=[{"loc": ["query", "from"], "msg": "must not be after to"}])
    if (end - start).days + 1 > MAX_DAYS:
        raise InvalidInput(
            f"at most {MAX_DAYS} days", details=[{"loc": ["query", "to"], "msg": f"at most {MAX_DAYS} days after from"}]
        )
    return start, end


def scope_stats(
    runtime: Runtime, service: str, by: str, days_from: date | None = None, days_to: date | None = None
) -> ScopeStats:
    """Figures per template type, topic or day (``by``) of the notifications made in the range."""
    with runtime.sessions() as session:
        timezone = services.get_service(session, service).timezone
        tz = zone(timezone)
        start, end = check_range(days_from, days_to, datetime.now(tz).date())
        created_from = naive_utc(datetime.combine(start, time(0), tz))
        created_to = naive_utc(datetime.combine(end + timedelta(days=1), time(0), tz))
        rows: dict[str, Counts] = {}
        truncated = _add_jobs(session, service, (created_from, created_to), timezone, by, rows)
    days = [(start + timedelta(days=d)).isoformat() for d in range((end - start).days + 1)]
    months = sorted({day[:7] for day in days})
    first, last = days[0], days[-1]
    if by != "topic":  # single sends: their targeted and sent per (day, type)
        for (key, event), n in runtime.statements.scope_counts(service, "sent", months).items():
            day, _, type_ = key.partition(" ")
            if first <= day <= last:
                counts = rows.setdefault(day if by == "day" else type_, Counts())
                if event == "targeted":
                    counts.targeted += n
                else:
                    counts.sent += n
    # The receipts of the range's days only, whatever the scope (engagement_day: a cell per day).
    for (day, type_, topic), events in runtime.statements.day_counts(service, days).items():
        item = {"day": day, "type": type_, "topic": f"{type_} {topic}" if topic else ""}[by]
        if not item:  # not a topic job's
            continue
        counts = rows.setdefault(item, Counts())
        for event, n in events.items():
            if event in EVENTS:
                counts.events[event] = counts.events.get(event, 0) + n
    return ScopeStats(by, (start, end), dict(sorted(rows.items())), truncated)


def _add_jobs(
    session: Session, service: str, window: tuple[datetime, datetime], timezone: str, by: str, rows: dict[str, Counts]
) -> bool:
    """Add the targeted and sent of the jobs made in ``window`` (naive UTC) to ``rows``, keyed as
    ``by`` says; True when more than MAX_JOBS jobs were there (the oldest are left out)."""
    before: tuple[datetime, str] | None = None
    seen = 0
    while seen < MAX_JOBS:
        page = jobs_sql.list_jobs(
            session,
            service,
            JobFilter(created_from=window[0], created_to=window[1], before=before, limit=_JOB_PAGE),
        )
        for job, progress in page:
            topic = job.target.get("topic") if job.target_kind == "TOPIC" else None
            keys = scope_keys(job.type_, topic, job.created_at, timezone)
            key = {"type": keys.type_, "topic": keys.topic, "day": keys.day}[by]
            if key is None:
                continue
            counts = rows.setdefault(key, Counts())
            counts.targeted += progress.targeted
            counts.sent += progress.sent
        seen += len(page)
        if len(page) < _JOB_PAGE:
            return False
        before = (page[-1][0].created_at, page[-1][0].job_id)
    return True


@dataclass(frozen=True, slots=True)
class ReceiptRecord:
    notification_id: str
    event: str
    action: str | None
    at: datetime
    received: datetime


Position = tuple[int, tuple[str, str] | None]  # (bucket, after (device, event)) of an export


def export_page(
    runtime: Runtime, service: str, job_id: str, position: Position, limit: int
) -> tuple[list[ReceiptRecord], Position | None]:
    """Up to ``limit`` raw events of a job (or single send) from ``position``, and the position
    after them (None: the end). NotFound for an unknown id or another service's."""
    job_stats(runtime, service, job_id)
    source = notification_id.source_of_job(job_id)
    bucket, after = position
    if not 0 <= bucket < BUCKETS:
        raise InvalidInput("cursor is not one this API returned", details=[{"loc": ["query", "cursor"], "msg": "bad"}])
    items: list[ReceiptRecord] = []
    while bucket < BUCKETS and len(items) < limit:
        rows = runtime.statements.receipts_page(service, source, bucket, after, limit - len(items))
        items += [ReceiptRecord(f"{source}.{r[0]}", r[1], r[2], r[3], r[4]) for r in rows]
        if len(items) < limit:
            bucket, after = bucket + 1, None
        else:
            after = (rows[-1][0], rows[-1][1])
    return items, ((bucket, after) if bucket < BUCKETS else None)


def recount_job(runtime: Runtime, service: str, job_id: str) -> dict[str, int]:
    """Set a job's (or a single send's) receipt counters and its day cell to its stored receipts
    (`notee recount-engagement`): the repair of a count that drifted (docs/ENGAGEMENT.md "Storage,
    and counting once"). NotFound for an unknown id. Holds the scheduler's recount lock (Conflict
    after 60 s): the two at once would add a job's difference twice."""
    job_stats(runtime, service, job_id)
    source = notification_id.source_of_job(job_id)
    found = find_sources(runtime, SourceCache(ttl_s=0), service, {source}).get(source)
    if found is None:
        raise NotFound("job not found")
    with receipt_recount_sql.repair_lock(runtime.engine, wait_s=60) as mine:
        if not mine:
            raise Conflict("the scheduler's receipt recount holds the lock: try again in a minute")
        return runtime.statements.recount(service, source, found.keys)
