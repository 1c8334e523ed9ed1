"""Console pages of a service's jobs and dead letters: the jobs list (live), a job's page (live
progress, when it sends, the message as sent, the failure breakdown by reason and platform, its dead
letters and their replay, cancel) and the dead letters (all, or one job's) with replay."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, get_args
from urllib.parse import urlencode
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.responses import Response

from notee.api.console import charts, engagement_pages, web, when
from notee.api.console.service_pages import _open
from notee.api.console.web import PostedForm, SessionDep
from notee.api.deps import DbDep, RuntimeDep, SenderDep
from notee.api.routes.deadletters import MAX_REPLAY, LetterPage, list_letters
from notee.api.routes.publish import status_of
from notee.core import clock
from notee.core.errors import NotFound
from notee.core.vocabulary import JobFilter, JobState
from notee.domain import insight, job_activity, services, templates
from notee.domain.console import ConsoleSession
from notee.domain.rules import TYPE_PATTERN
from notee.usecases import jobs
from notee.usecases.replay import job_failures

router = APIRouter(prefix=web.PREFIX + "/s/{service}", include_in_schema=False)

JOB_STATES: tuple[str, ...] = get_args(JobState)
LIST_LIMIT = 50


def _job_id(job_id: str) -> str:
    try:
        return str(UUID(job_id))
    except ValueError:
        raise NotFound("no such job") from None


def _page(
    request: Request, name: str, who: ConsoleSession, service: str, status_code: int = 200, **ctx: Any
) -> Response:
    return web.render(request, name, who, status_code, service=service, base=f"{web.PREFIX}/s/{service}", **ctx)


def target_text(target: dict[str, Any]) -> str:
    """A job's target in a few words (the list's column, the job page's fact), as
    ``vocabulary.encode_target`` stores it."""
    platforms = f" ({', '.join(target['platforms'])} only)" if target.get("platforms") else ""
    if target.get("topic") is not None:
        text = f"topic {target['topic']}"
    elif target.get("condition") is not None:
        text = f"condition {target['condition']}"
    elif target.get("segments"):
        seg = target["segments"]
        names = [s if isinstance(s, str) else str(s.get("name", "?")) for s in seg.get("include") or []]
        text = "segments " + ", ".join(names)
    elif target.get("users") is not None:
        users = target["users"]
        text = f"{users.get('count', '?')} listed users" if isinstance(users, dict) else "listed users"
    elif target.get("filter") is not None:
        text = "a filter"
    elif target.get("user_id") is not None:
        text = f"user {target['user_id']}"
    elif target.get("timezone") is not None:
        text = f"cycle {target.get('day')} {int(target.get('hour', 0)):02d}:{int(target.get('minute', 0)):02d} {target['timezone']}"
    else:
        text = "audience"
    return text + platforms


def _item(job: Any, progress: Any, zone_name: str, now: datetime) -> dict[str, Any]:
    """One job as the pages and their JSON show it: the API's JobStatus plus what the console adds
    (its target in words, when it sends in the service's zone and UTC, a progress figure)."""
    item = status_of(job, progress).model_dump(mode="json")
    timed = when.timing(job.send_at, job.target, zone_name, now)
    item["target_text"] = target_text(job.target)
    item["when"] = _when_json(timed)
    item["time_text"] = _time_text(timed, job.created_at)
    item["progress_text"] = f"{item['sent']} / {item['targeted']} sent · {item['tasks_done']}/{item['tasks']} tasks"
    return item


def _when_json(timed: when.Timing) -> dict[str, Any]:
    def m(moment: when.Moment | None) -> dict[str, Any] | None:
        return None if moment is None else {"utc": moment.utc, "local": moment.local, "epoch_s": moment.epoch_s}

    return {
        "send_at": m(timed.send_at),
        "left": timed.left,
        "local_time": timed.local_time,
        "window": [m(timed.window[0]), m(timed.window[1])] if timed.window else None,
    }


def _time_text(timed: when.Timing, created_at: datetime) -> str:
    if timed.send_at is not None:
        return f"sends {timed.send_at.local} · {timed.send_at.utc}" + (f" · {timed.left}" if timed.left else "")
    if timed.local_time:
        return f"at {timed.local_time} local time · made {clock.aware_utc(created_at):%Y-%m-%d %H:%M} UTC"
    return f"made {clock.aware_utc(created_at):%Y-%m-%d %H:%M:%S} UTC"


def job_filters(state: str | None, method: str | None, type_: str | None) -> dict[str, str | None]:
    """The filters the jobs page offers; an unknown value is no filter (the select cannot send one)."""
    return {
        "state": state if state in JOB_STATES else None,
        "method": method if method in ("TOPIC", "CYCLE", "SINGLE") else None,
        "type": type_ if type_ and re.fullmatch(TYPE_PATTERN, type_) else None,
    }


def _job_items(db: DbDep, found: services.Service, filters: dict[str, str | None]) -> list[dict[str, Any]]:
    job_filter = JobFilter(state=filters["state"], method=filters["method"], type_=filters["type"], limit=LIST_LIMIT)
    now = clock.now_utc()
    return [
        _item(job, progress, found.timezone, now) for job, progress in jobs.list_jobs(db, found.service, job_filter)
    ]


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
    found = _open(db, who, service)
    filters = job_filters(state, method, type)
    types = sorted({t.type for t in templates.list_templates(db, runtime.statements, service) if t.method != "SINGLE"})
    query = urlencode({k: v for k, v in filters.items() if v})
    summary = insight.delivery_summary(db, service, hours=24)
    return _page(
        request,
        "jobs.html",
        who,
        service,
        summary=summary,
        items=_job_items(db, found, filters),
        filters=filters,
        states=JOB_STATES,
        types=types,
        zone=found.timezone,
        poll_url=f"{web.PREFIX}/s/{service}/jobs.json" + (f"?{query}" if query else ""),
        chart=charts.hourly_bars(summary),
        minute_chart=charts.minute_bars(
            "Pushes sent per minute, last hour (UTC)", job_activity.service_minutes(db, service, now=clock.now_utc())
        ),
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
    found = _open(db, who, service)
    return web.json_answer({"items": _job_items(db, found, job_filters(state, method, type))})


def _job_view(db: DbDep, found: services.Service, job_id: str) -> dict[str, Any]:
    job, progress = jobs.job_status(db, found.service, _job_id(job_id))
    item = _item(job, progress, found.timezone, clock.now_utc())
    since = clock.naive_utc(job.created_at)
    failures = job_failures(db, found.service, job.job_id, since)
    item["failures"] = [{"reason": r, "platform": p, "count": n} for r, p, n in failures]
    item["dead_lettered"] = sum(n for _, _, n in failures)
    return item


# Before "/jobs/{job_id}", which would take "<id>.json" as the id.
@router.get("/jobs/{job_id}.json")
def job_json(service: str, job_id: str, who: SessionDep, db: DbDep) -> Response:
    found = _open(db, who, service)
    return web.json_answer(_job_view(db, found, job_id))


@router.get("/jobs/{job_id}")
def job_page(request: Request, service: str, job_id: str, who: SessionDep, db: DbDep, runtime: RuntimeDep) -> Response:
    found = _open(db, who, service)
    job = _job_view(db, found, job_id)
    row, _ = jobs.job_status(db, service, job["job_id"])
    engagement = engagement_pages.job_block(runtime, service, job["job_id"])
    events, events_total = job_activity.task_events(db, service, row.job_id)
    return _page(
        request,
        "job.html",
        who,
        service,
        job=job,
        message=message_of(row.payload),
        timeline=timeline(job),
        events=events,
        events_total=events_total,
        minute_chart=charts.minute_bars(
            "This job's pushes sent per minute (UTC)", job_activity.job_minutes(db, service, row.job_id)
        ),
        zone=found.timezone,
        chart=charts.failure_bars([(f["reason"], f["platform"], f["count"]) for f in job["failures"]]),
        poll_url=f"{web.PREFIX}/s/{service}/jobs/{job['job_id']}.json",
        engagement=engagement,
    )


def message_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The message as the job sends it (rendered once when the job was made): the default text and
    each locale variant's, the data and the rich fields."""
    default = payload.get("default") if isinstance(payload.get("default"), dict) else payload
    variants = payload.get("variants") if isinstance(payload.get("variants"), dict) else {}
    return {
        "title": (default or {}).get("title", ""),
        "body": (default or {}).get("body", ""),
        "data": (default or {}).get("data") or {},
        "variants": variants,
        "rich": payload.get("rich"),
        "ttl_seconds": payload.get("ttl_seconds"),
        "priority": payload.get("priority"),
    }


def timeline(job: dict[str, Any]) -> list[tuple[str, str]]:
    """What happened to the job so far, in order (each step's UTC time)."""
    steps = [("made (queued)", job["created_at"])]
    if job["when"]["send_at"]:
        steps.append(("scheduled for", job["when"]["send_at"]["utc"]))
    if job["started_at"]:
        steps.append(("started", job["started_at"]))
    if job["finished_at"]:
        steps.append((job["state"], job["finished_at"]))
    return [(what, str(at)[:19].replace("T", " ")) for what, at in steps]


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
    job: str | None = None,
) -> Response:
    """The service's dead letters, or (``?job=``) one job's: the same listing as GET /v1/dead-letters;
    after a replay, its counts (``?replayed=&delivered=&pruned=&failed=``, as the replay redirects)."""
    _open(db, who, service)
    job_id = _job_id(job) if job else None
    letters = list_letters(db, service, LetterPage(job_id=UUID(job_id) if job_id else None))
    outcome = replay_outcome(request.query_params)
    return _page(request, "dead_letters.html", who, service, letters=letters.items, outcome=outcome, job=job_id)


def replay_outcome(query: Mapping[str, str]) -> dict[str, int] | None:
    """A replay's counts from the page's query (None: no replay to report, or counts not whole numbers)."""
    names = ("replayed", "delivered", "pruned", "failed")
    if not all(query.get(n, "").isdigit() for n in names):
        return None
    return {n: int(query[n]) for n in names}


@router.post("/dead-letters/replay")
async def replay(service: str, who: SessionDep, form: PostedForm, runtime: RuntimeDep, sender: SenderDep) -> Response:
    """Send again: one letter (``id``), one job's (``job``, up to 1,000) or the oldest ones (up to
    1,000), as POST /v1/dead-letters/replay."""

    def check() -> None:
        with runtime.sessions() as db:
            _open(db, who, service)

    await asyncio.to_thread(check)
    letter = form.get("id", "")
    job_id = _job_id(form["job"]) if form.get("job") else None
    ids = [int(letter)] if letter.isdigit() and int(letter) > 0 else None
    result = await sender.replay(service, ids=ids, job_id=job_id, limit=MAX_REPLAY)
    counts = {
        "replayed": result.replayed,
        "delivered": result.delivered,
        "pruned": result.pruned,
        "failed": result.failed,
    }
    if job_id:
        counts["job"] = job_id  # type: ignore[assignment]
    return web.redirect(f"{web.PREFIX}/s/{service}/dead-letters?{urlencode(counts)}")
