"""Console pages of one service (``/console/s/{service}/...``): templates, topics and their
subscriber counts, publish, jobs with live progress, a job with cancel, dead letters with replay,
and the cycle calendar. A service's session may open only its own service (any other answers 404,
as for a service that does not exist); the admin may open every service."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, get_args
from urllib.parse import urlencode
from uuid import UUID

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from notee.api.console import web
from notee.api.console.web import PostedForm, SessionDep
from notee.api.deps import DbDep, RuntimeDep, SenderDep
from notee.api.routes.deadletters import MAX_REPLAY, LetterPage, list_letters
from notee.api.routes.publish import status_of
from notee.core.errors import InvalidInput, NoteeError, NotFound
from notee.core.vocabulary import JobFilter, JobState
from notee.domain import insight, services, templates
from notee.domain.console import ConsoleSession
from notee.domain.rules import TYPE_PATTERN
from notee.domain.templates import TemplateInput
from notee.usecases import jobs
from notee.usecases.job_requests import TopicPublish
from notee.usecases.publish import publish_topic

router = APIRouter(prefix=web.PREFIX + "/s/{service}", include_in_schema=False)

METHODS = ("TOPIC", "CYCLE", "SINGLE")
JOB_STATES: tuple[str, ...] = get_args(JobState)
LIST_LIMIT = 50
TOPICS_PAGE = 100


def _open(db: DbDep, who: ConsoleSession, service: str) -> services.Service:
    """The service, if this session may see it (404 otherwise, whichever the reason)."""
    who.principal.check_service(service)
    return services.get_service(db, service)


def _job_id(job_id: str) -> str:
    try:
        return str(UUID(job_id))
    except ValueError:
        raise NotFound("no such job") from None


def _page(
    request: Request, name: str, who: ConsoleSession, service: str, status_code: int = 200, **ctx: Any
) -> Response:
    return web.render(request, name, who, status_code, service=service, base=f"{web.PREFIX}/s/{service}", **ctx)


# --- templates -------------------------------------------------------------------------------------


def _templates_page(
    request: Request,
    who: ConsoleSession,
    service: str,
    db: DbDep,
    runtime: RuntimeDep,
    status_code: int = 200,
    **ctx: Any,
) -> Response:
    listed = templates.list_templates(db, runtime.statements, service)
    ctx.setdefault("error", None)
    ctx.setdefault("saved", None)
    ctx.setdefault("form", {})
    return _page(request, "templates.html", who, service, status_code, templates=listed, methods=METHODS, **ctx)


@router.get("/templates")
def show_templates(
    request: Request, service: str, who: SessionDep, db: DbDep, runtime: RuntimeDep, saved: str | None = None
) -> Response:
    _open(db, who, service)
    return _templates_page(request, who, service, db, runtime, saved=saved)


def _pairs(text: str, what: str) -> dict[str, str] | None:
    """``name=value`` lines of a textarea as a map (None when empty); a line without ``=`` is 422."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise InvalidInput(f"{what}: each line is name=value", details=[{"loc": [what], "type": "format"}])
        out[name.strip()] = value.strip()
    return out or None


def _json_object(text: str, what: str) -> Any:
    """A textarea's JSON (None when empty); text that is not JSON is 422 (the domain checks the rest)."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise InvalidInput(f"{what}: not JSON", details=[{"loc": [what], "type": "json_invalid"}]) from None


@router.post("/templates")
def save_template(
    request: Request, service: str, who: SessionDep, form: PostedForm, db: DbDep, runtime: RuntimeDep
) -> Response:
    _open(db, who, service)
    method, type_ = form.get("method", ""), form.get("type", "").strip()
    try:
        ttl = form.get("ttl_seconds", "").strip()
        if ttl and not ttl.isdigit():  # not dropped silently: the template would keep no TTL
            raise InvalidInput("ttl_seconds: a whole number of seconds", details=[{"loc": ["ttl_seconds"]}])
        payload = _json_object(form.get("payload", ""), "payload")
        if form.get("kind") == "background":  # a silent push: the payload's kind, no title or body
            payload = (
                {**payload, "kind": "background"} if isinstance(payload, dict) else payload or {"kind": "background"}
            )
        given = TemplateInput(
            title=form.get("title", ""),
            body=form.get("body", "").replace("\r\n", "\n"),
            data=_pairs(form.get("data", ""), "data"),
            defaults=_pairs(form.get("defaults", ""), "defaults"),
            ttl_seconds=int(ttl) if ttl else None,
            priority=form.get("priority", "high"),
            payload=payload,
        )
        templates.put_template(db, runtime.statements, service, method, type_, given)
        db.commit()
    except NoteeError as exc:
        db.rollback()
        return _templates_page(request, who, service, db, runtime, exc.status, error=exc.message, form=form)
    return web.redirect(f"{web.PREFIX}/s/{service}/templates?{urlencode({'saved': f'{method} {type_}'})}")


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


# --- publish ---------------------------------------------------------------------------------------


def _publish_page(
    request: Request,
    who: ConsoleSession,
    service: str,
    db: DbDep,
    runtime: RuntimeDep,
    status_code: int = 200,
    **ctx: Any,
) -> Response:
    types = [t.type for t in templates.list_templates(db, runtime.statements, service) if t.method == "TOPIC"]
    ctx.setdefault("error", None)
    ctx.setdefault("form", {})
    return _page(request, "publish.html", who, service, status_code, types=types, **ctx)


@router.get("/publish")
def publish_form(
    request: Request,
    service: str,
    who: SessionDep,
    db: DbDep,
    runtime: RuntimeDep,
    type: str | None = None,
    topic: str | None = None,
) -> Response:
    _open(db, who, service)
    return _publish_page(request, who, service, db, runtime, form={"type": type or "", "topic": topic or ""})


@router.post("/publish")
def publish(
    request: Request, service: str, who: SessionDep, form: PostedForm, db: DbDep, runtime: RuntimeDep
) -> Response:
    """The same domain call as POST /v1/topics/{type}/{topic}/publish; then the job's live page."""
    _open(db, who, service)
    try:
        asked = TopicPublish(
            service=service,
            type_=form.get("type", ""),
            topic=form.get("topic", "").strip(),
            variables=_pairs(form.get("variables", ""), "variables"),
        )
        job = publish_topic(runtime, db, asked)
        db.commit()
    except NoteeError as exc:
        db.rollback()
        return _publish_page(request, who, service, db, runtime, exc.status, error=exc.message, form=form)
    return web.redirect(f"{web.PREFIX}/s/{service}/jobs/{job.job_id}")


# --- jobs ------------------------------------------------------------------------------------------


def _job_filters(state: str | None, method: str | None, type_: str | None) -> dict[str, str | None]:
    """The filters the jobs page offers; an unknown value is no filter (the select cannot send one)."""
    return {
        "state": state if state in JOB_STATES else None,
        "method": method if method in ("TOPIC", "CYCLE") else None,
        "type": type_ if type_ and re.fullmatch(TYPE_PATTERN, type_) else None,
    }


def _job_items(db: DbDep, service: str, filters: dict[str, str | None]) -> list[dict[str, Any]]:
    job_filter = JobFilter(state=filters["state"], method=filters["method"], type_=filters["type"], limit=LIST_LIMIT)
    rows = jobs.list_jobs(db, service, job_filter)
    return [status_of(job, progress).model_dump(mode="json") for job, progress in rows]


@router.get("/jobs")
def jobs_page(
    request: Request,
    service: str,
    who: SessionDep,
    db: DbDep,
    runtime: RuntimeDep,
    state: str | None = None,
    method: str | None = None,
    type: str | None = None,
) -> Response:
    _open(db, who, service)
    filters = _job_filters(state, method, type)
    types = sorted({t.type for t in templates.list_templates(db, runtime.statements, service) if t.method != "SINGLE"})
    query = urlencode({k: v for k, v in filters.items() if v})
    return _page(
        request,
        "jobs.html",
        who,
        service,
        summary=insight.delivery_summary(db, service, hours=24),
        items=_job_items(db, service, filters),
        filters=filters,
        states=JOB_STATES,
        types=types,
        poll_url=f"{web.PREFIX}/s/{service}/jobs.json" + (f"?{query}" if query else ""),
    )


@router.get("/jobs.json")
def jobs_json(
    service: str,
    who: SessionDep,
    db: DbDep,
    state: str | None = None,
    method: str | None = None,
    type: str | None = None,
) -> Response:
    """What the jobs page polls every second (console.js) to update its rows without a reload."""
    _open(db, who, service)
    return web.json_answer({"items": _job_items(db, service, _job_filters(state, method, type))})


# Before "/jobs/{job_id}", which would take "<id>.json" as the id.
@router.get("/jobs/{job_id}.json")
def job_json(service: str, job_id: str, who: SessionDep, db: DbDep) -> Response:
    _open(db, who, service)
    return web.json_answer(status_of(*jobs.job_status(db, service, _job_id(job_id))).model_dump(mode="json"))


@router.get("/jobs/{job_id}")
def job_page(request: Request, service: str, job_id: str, who: SessionDep, db: DbDep) -> Response:
    _open(db, who, service)
    job = status_of(*jobs.job_status(db, service, _job_id(job_id))).model_dump(mode="json")
    return _page(
        request, "job.html", who, service, job=job, poll_url=f"{web.PREFIX}/s/{service}/jobs/{job['job_id']}.json"
    )


@router.post("/jobs/{job_id}/cancel")
def cancel_job(service: str, job_id: str, who: SessionDep, form: PostedForm, db: DbDep) -> Response:
    """The same domain call as POST /v1/jobs/{job_id}/cancel."""
    _open(db, who, service)
    job, _ = jobs.cancel_job(db, service, _job_id(job_id))
    db.commit()
    return web.redirect(f"{web.PREFIX}/s/{service}/jobs/{job.job_id}")


# --- dead letters ----------------------------------------------------------------------------------


@router.get("/dead-letters")
def dead_letters(
    request: Request,
    service: str,
    who: SessionDep,
    db: DbDep,
    replayed: int | None = Query(None, ge=0),
    delivered: int | None = Query(None, ge=0),
    pruned: int | None = Query(None, ge=0),
    failed: int | None = Query(None, ge=0),
) -> Response:
    _open(db, who, service)
    letters = list_letters(db, service, LetterPage())
    outcome = (
        {"replayed": replayed, "delivered": delivered, "pruned": pruned, "failed": failed}
        if replayed is not None
        else None
    )
    return _page(request, "dead_letters.html", who, service, letters=letters.items, outcome=outcome)


@router.post("/dead-letters/replay")
async def replay(service: str, who: SessionDep, form: PostedForm, runtime: RuntimeDep, sender: SenderDep) -> Response:
    """Send again: one letter (``id``) or the oldest ones (up to 1,000), as POST /v1/dead-letters/replay."""

    def check() -> None:
        with runtime.sessions() as db:
            _open(db, who, service)

    await asyncio.to_thread(check)
    letter = form.get("id", "")
    ids = [int(letter)] if letter.isdigit() and int(letter) > 0 else None
    result = await sender.replay(service, ids=ids, job_id=None, limit=MAX_REPLAY)
    counts = {
        "replayed": result.replayed,
        "delivered": result.delivered,
        "pruned": result.pruned,
        "failed": result.failed,
    }
    return web.redirect(f"{web.PREFIX}/s/{service}/dead-letters?{urlencode(counts)}")


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
    return _page(request, "calendar.html", who, service, calendar=due, hours=hours, peak=peak)
