"""Console pages of one service (``/console/s/{service}/...``): topics and their subscriber counts
and the cycle calendar, and what every page of a service shares (``_open``, ``_page``). Templates:
``template_pages``; publish: ``compose_pages``; jobs and dead letters: ``job_pages``. A service's
session may open only its own service (any other answers 404, as for a service that does not
exist); the admin may open every service."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from notee.api.console import charts, web
from notee.api.console.web import SessionDep
from notee.api.deps import DbDep, RuntimeDep
from notee.domain import insight, services
from notee.domain.console import ConsoleSession

router = APIRouter(prefix=web.PREFIX + "/s/{service}", include_in_schema=False)

TOPICS_PAGE = 100


def _open(db: DbDep, who: ConsoleSession, service: str) -> services.Service:
    """The service, if this session may see it (404 otherwise, whichever the reason)."""
    who.principal.check_service(service)
    return services.get_service(db, service)


def _page(
    request: Request, name: str, who: ConsoleSession, service: str, status_code: int = 200, **ctx: Any
) -> Response:
    return web.render(request, name, who, status_code, service=service, base=f"{web.PREFIX}/s/{service}", **ctx)


# --- topics ----------------------------------------------------------------------------------------


@router.get("/topics")
def topics(
    request: Request,
    service: str,
    who: SessionDep,
    db: DbDep,
    runtime: RuntimeDep,
    after_type: str | None = None,
    after_topic: str | None = None,
) -> Response:
    """Subscribers per type and per topic: the same domain calls as GET /v1/subscriber-counts and /v1/topics."""
    _open(db, who, service)
    counts = insight.subscriber_counts(db, runtime.statements, service)
    after = (after_type, after_topic) if after_type is not None and after_topic is not None else None
    page = insight.topic_counts(db, runtime.statements, service, after=after, limit=TOPICS_PAGE)
    return _page(request, "topics.html", who, service, counts=counts, topics=page.items, next_after=page.next_after)


# --- cycle calendar --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalendarHour:
    start: datetime
    entries: list[tuple[datetime, insight.DueTemplate]]
    total: int  # subscriptions due in this hour


def calendar_hours(calendar: insight.Calendar) -> list[CalendarHour]:
    """The calendar as one block per UTC hour it touches (25 when it starts mid-hour), empty hours too."""
    first = calendar.start.replace(minute=0, second=0, microsecond=0)
    hours: dict[datetime, list[tuple[datetime, insight.DueTemplate]]] = {}
    moment = first
    while moment < calendar.end:
        hours[moment] = []
        moment += timedelta(hours=1)
    for minute in calendar.minutes:
        hour = minute.minute.replace(minute=0, second=0, microsecond=0)
        hours.setdefault(hour, []).extend((minute.minute, t) for t in minute.templates)
    return [CalendarHour(h, e, sum(t.subscriptions for _, t in e)) for h, e in sorted(hours.items())]


@router.get("/calendar")
def calendar(request: Request, service: str, who: SessionDep, db: DbDep, runtime: RuntimeDep) -> Response:
    """The next 24 hours of cycle minutes: the same domain call as GET /v1/calendar."""
    _open(db, who, service)
    due = insight.cycle_calendar(db, runtime.statements, service, hours=24)
    hours = calendar_hours(due)
    peak = max([h.total for h in hours] + [1])
    chart = charts.due_bars([(f"{h.start:%H}h", h.total) for h in hours])
    return _page(request, "calendar.html", who, service, calendar=due, hours=hours, peak=peak, chart=chart)
