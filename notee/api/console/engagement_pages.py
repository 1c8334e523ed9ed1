"""Console engagement (docs/ENGAGEMENT.md, docs/CONSOLE.md "Engagement"): the service overview
(``/console/s/{service}/engagement``: the last 30 days' figures, a chart of delivered and opened per
day, the figures per day and per template type) and the engagement block of a job's page
(``job_block``). The same use-case calls as ``GET /v1/stats`` and ``GET /v1/stats/jobs/{id}``; the
charts are ``charts.bars`` (server-side SVG under the console's CSP)."""

from __future__ import annotations

import logging
from datetime import date, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from notee.api.console import charts, web
from notee.api.console.service_pages import _open, _page
from notee.api.console.web import SessionDep
from notee.api.deps import DbDep, RuntimeDep
from notee.store.outage import is_store_outage
from notee.store.runtime import Runtime
from notee.usecases import engagement_stats

log = logging.getLogger(__name__)

router = APIRouter(prefix=web.PREFIX + "/s/{service}", include_in_schema=False)

EVENTS = ("delivered", "opened", "clicked", "dismissed")


def figures(counts: engagement_stats.Counts) -> dict[str, Any]:
    """One row as the templates show it: the counts and the rates as percentages (None: nothing sent)."""
    row: dict[str, Any] = {"targeted": counts.targeted, "sent": counts.sent}
    for event in EVENTS:
        row[event] = counts.events.get(event, 0)
    for event, name in (("delivered", "delivery_rate"), ("opened", "open_rate"), ("clicked", "click_rate")):
        rate = counts.rate(event)
        row[name] = None if rate is None else f"{rate * 100:.1f} %"
    return row


def funnel_chart(title: str, row: dict[str, Any]) -> charts.Chart:
    """Sent, then each receipt kind, as bars."""
    items = [charts.Bar("sent", row["sent"], f"sent: {row['sent']}")]
    items += [charts.Bar(e, row[e], f"{e}: {row[e]}") for e in EVENTS]
    return charts.bars(title, items, colour="#1c7c54")


def job_block(runtime: Runtime, service: str, job_id: str) -> dict[str, Any] | None:
    """A job's engagement for its page; None when Cassandra cannot answer now (the page still shows)."""
    try:
        stats = engagement_stats.job_stats(runtime, service, job_id)
    except Exception as exc:
        if not is_store_outage(exc):
            raise
        log.warning("console: engagement of job %s unavailable (%s)", job_id, type(exc).__name__)
        return None
    row = figures(stats.counts)
    return {"row": row, "chart": funnel_chart("Sent and receipts of this job", row)}


def _dates(start: date, end: date) -> list[date]:
    return [start + timedelta(days=n) for n in range((end - start).days + 1)]


def _day_bar(index: int, day: str, row: dict[str, Any], event: str) -> charts.Bar:
    """One day's bar; a label every 7 days (30 labels would not fit), each bar's tip says its day."""
    return charts.Bar(
        day[5:] if index % 7 == 0 else "", row[event], f"{day}: {event} {row[event]} of {row['sent']} sent"
    )


@router.get("/engagement")
def overview(request: Request, service: str, who: SessionDep, db: DbDep, runtime: RuntimeDep) -> Response:
    """The service's last 30 days (its time zone): totals, delivered and opened per day, per type."""
    _open(db, who, service)
    days = engagement_stats.scope_stats(runtime, service, "day")
    types = engagement_stats.scope_stats(runtime, service, "type", *days.days)
    per_day = [(key, figures(c)) for key, c in sorted(days.rows.items())]
    total = engagement_stats.Counts()
    for c in days.rows.values():
        total.targeted += c.targeted
        total.sent += c.sent
        for event, n in c.events.items():
            total.events[event] = total.events.get(event, 0) + n
    # The charts are a timeline: every day of the range, the quiet ones too (the tables list the others).
    timeline = [
        (d.isoformat(), figures(days.rows.get(d.isoformat(), engagement_stats.Counts()))) for d in _dates(*days.days)
    ]
    opened = charts.bars("Opened per day", [_day_bar(i, day, row, "opened") for i, (day, row) in enumerate(timeline)])
    delivered = charts.bars(
        "Delivered per day",
        [_day_bar(i, day, row, "delivered") for i, (day, row) in enumerate(timeline)],
        colour="#1c7c54",
    )
    return _page(
        request,
        "engagement.html",
        who,
        service,
        days=days.days,
        total=figures(total),
        per_day=per_day,
        per_type=[(key, figures(c)) for key, c in sorted(types.rows.items())],
        truncated=days.jobs_truncated or types.jobs_truncated,
        opened_chart=opened,
        delivered_chart=delivered,
    )
