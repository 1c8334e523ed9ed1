"""Pushes per minute (a service's last hour, a job's whole run) and a job's per-page timeline, read
from ``push_minute`` (each fan-out page's counts, added by the worker when it checkpoints the page)
and the job's task rows.

Per page, the stores keep the page's counts summed per task and minute (not one row per page: a
10-million-device job has 20,000 pages), with the first and last page's time of that minute: the
timeline shows each task's claim, its pages minute by minute with their counts, and its end.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from notee.core.clock import naive_utc
from notee.store import push_minutes_sql

MinuteRow = push_minutes_sql.MinuteRow  # a minute's pages and counts (the pages above use it by this name)

SERVICE_MINUTES = 60  # the service's chart: the last hour
JOB_MINUTES = 180  # a job's chart: its first 3 hours of sending (a longer job: the timeline has the rest)
TIMELINE_EVENTS = 300  # a job's timeline shows this many events at most (it says when there were more)


def _minute(moment: datetime) -> datetime:
    return naive_utc(moment).replace(second=0, microsecond=0)


def _filled(rows: list[MinuteRow], first: datetime, count: int) -> list[MinuteRow]:
    """``count`` minutes from ``first``, a zero row for each minute without pushes."""
    by_minute: dict[datetime, MinuteRow] = {}
    for r in rows:
        old = by_minute.get(r.minute_utc)
        by_minute[r.minute_utc] = (
            r
            if old is None
            else MinuteRow(
                r.minute_utc,
                old.pages + r.pages,
                old.targeted + r.targeted,
                old.sent + r.sent,
                old.failed + r.failed,
                old.pruned + r.pruned,
            )
        )
    minutes = (first + timedelta(minutes=i) for i in range(count))
    return [by_minute.get(m) or MinuteRow(m, 0, 0, 0, 0, 0) for m in minutes]


def service_minutes(session: Session, service: str, *, now: datetime) -> list[MinuteRow]:
    """The service's pushes per minute over the last hour (``SERVICE_MINUTES`` rows, the current minute last)."""
    first = _minute(now) - timedelta(minutes=SERVICE_MINUTES - 1)
    return _filled(push_minutes_sql.service_minutes(session, service, since=first), first, SERVICE_MINUTES)


def job_minutes(session: Session, service: str, job_id: str) -> list[MinuteRow]:
    """A job's pushes per minute from its first page to its last (zero-filled; at most ``JOB_MINUTES``)."""
    rows = push_minutes_sql.job_minutes(session, service, job_id)
    if not rows:
        return []
    first, last = rows[0].minute_utc, rows[-1].minute_utc
    count = min(JOB_MINUTES, int((last - first).total_seconds() // 60) + 1)
    return _filled(rows, first, count)


@dataclass(frozen=True, slots=True)
class Event:
    """One line of a job's timeline: when (naive UTC), what, and the counts it carries (or "")."""

    at: datetime
    what: str
    counts: str


def _counts(pages: int, sent: int, failed: int, pruned: int) -> str:
    return f"{pages} page{'s' if pages != 1 else ''}: {sent} sent, {failed} failed, {pruned} pruned"


def task_events(session: Session, service: str, job_id: str) -> tuple[list[Event], int]:
    """Each task's claim, its pages per minute (the first and last page of the minute, their counts)
    and its end, in time order; at most ``TIMELINE_EVENTS`` of them, and how many there were. The
    caller has checked the job is ``service``'s (the minute rows are read by service too)."""
    events: list[Event] = []
    tasks = push_minutes_sql.task_times(session, job_id)
    several = len(tasks) > 1
    for t in tasks:
        name = f"task {t.task_no}" if several else "task"
        if t.started_at is not None:
            events.append(Event(t.started_at, f"{name} claimed by a worker", ""))
        if t.finished_at is not None and t.state != "queued":
            events.append(
                Event(
                    t.finished_at, f"{name} {t.state}", _counts(int(t.pages), int(t.sent), int(t.failed), int(t.pruned))
                )
            )
    for r in push_minutes_sql.job_minutes(session, service, job_id):
        name = f"task {r.task_no}" if several else "pages"
        first = r.first_at or r.minute_utc
        last = r.last_at or first
        span = f"{first:%H:%M:%S}" + (f"–{last:%H:%M:%S}" if last != first else "")
        events.append(Event(first, f"{name} sent pages at {span}", _counts(r.pages, r.sent, r.failed, r.pruned)))
    events.sort(key=lambda e: e.at)
    return events[:TIMELINE_EVENTS], len(events)
