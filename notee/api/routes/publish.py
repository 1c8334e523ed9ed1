"""Topic publish and job progress: ``POST /v1/topics/{type}/{topic}/publish``, ``GET /v1/jobs/{job_id}``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, StringConstraints
from sqlalchemy.orm import Session

from notee.api import cursors
from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.documented import PayloadObject, TopicPath, payload_field
from notee.api.errors import ErrorResponse
from notee.api.models import Answer, MultiLineText, OneLineText, Rfc3339
from notee.api.query_params import query_instant
from notee.core.vocabulary import JobFilter, JobState, Os, Priority, Progress
from notee.domain import render
from notee.domain.rules import MAX_TTL_SECONDS, TYPE_PATTERN
from notee.domain.schedule import LOCAL_TIME_PATTERN
from notee.usecases import jobs
from notee.usecases.job_requests import TopicPublish
from notee.usecases.jobs import JobRow
from notee.usecases.publish import publish_topic

router = APIRouter(prefix="/v1", tags=["publish"])

SEND_AT_FIELD: Any = Field(
    None,
    description="Send then instead of now: an RFC 3339 date-time with its offset (an absolute instant, "
    "so a DST change does not move it). At most NOTEE_SCHEDULE_GRACE_S (60) seconds in the past (sent at "
    "once) and NOTEE_SCHEDULE_MAX_DAYS (30) days ahead, else 422. The job is `scheduled` until then and "
    "can be cancelled (POST /v1/jobs/{job_id}/cancel).",
)

TTL_FIELD: Any = Field(
    None,
    ge=0,
    le=MAX_TTL_SECONDS,
    description="Replaces the template's ttl_seconds for this push: how long FCM (android.ttl) and APNs "
    "(apns-expiration) keep it for an offline device; 0: deliver now or never.",
    examples=[3600],
)
PRIORITY_FIELD: Any = Field(
    None,
    description="Replaces the template's priority for this push: high (FCM android.priority HIGH, "
    "apns-priority 10) or normal (NORMAL, 5). A background push is always sent to APNs with 5.",
)

QUIET_HOURS_FIELD: Any = Field(
    None,
    description="honour (the default): recipients in their quiet hours get the push as the template says "
    "(held until the window ends, or dropped); override: sent now (or at send_at / local_time) whatever "
    'their quiet hours, for a push that cannot wait (docs/FANOUT.md "Local-time publishes (`local_time`) and quiet hours").',
    examples=["override"],
)

VarName = Annotated[StrictStr, StringConstraints(min_length=1, max_length=64, pattern=rf"^{render.NAME_PATTERN}$")]
DataKey = Annotated[OneLineText, StringConstraints(min_length=1, max_length=128)]
Value = Annotated[MultiLineText, StringConstraints(max_length=2000)]
# A template variable's value (docs/TEMPLATES.md): a text, or a list (at most 50) of texts or of
# small objects of texts, for the template's {% for %} loops. Numbers and dates are texts too
# ("3", "2026-12-05T09:30:00Z"): the number, plural and datetime filters read them.
ItemKey = Annotated[StrictStr, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
TemplateValue = (
    Value
    | Annotated[list[Value], Field(max_length=50)]
    | Annotated[list[Annotated[dict[ItemKey, Value], Field(max_length=20)]], Field(max_length=50)]
)


class PublishRequest(BaseModel):
    """Everything is optional: with no body the template is sent as it is."""

    model_config = ConfigDict(extra="forbid")

    variables: dict[VarName, TemplateValue] | None = Field(
        None,
        max_length=100,
        description="Values for the template's {{name}} placeholders (title, body, data "
        "values); a placeholder with neither a variable nor a template default is 422, listing every missing name. "
        "A value is a text, or a list of texts or of objects of texts for {% for %} loops (docs/TEMPLATES.md).",
        examples=[{"name": "Ann", "count": "3", "items": [{"name": "Tea", "price": "4.5"}]}],
    )
    data: dict[DataKey, Value] | None = Field(
        None, max_length=100, description="Key/value data merged over the template's data."
    )
    title: OneLineText | None = Field(None, min_length=1, max_length=200, description="Replaces the template's title.")
    body: MultiLineText | None = Field(
        None, min_length=1, max_length=2000, description="Replaces the template's body (may contain \\n)."
    )
    send_at: Rfc3339 | None = SEND_AT_FIELD
    local_time: StrictStr | None = Field(
        None,
        pattern=LOCAL_TIME_PATTERN,
        description="HH:MM: reach each recipient when the clock of its time zone (the user's, else the "
        "service's) next shows this time, counting the current minute (at most one local day ahead). A time "
        "skipped by a DST change is reached at the first minute after the gap; a repeated one at its first "
        "occurrence.",
        examples=["09:00"],
    )
    platforms: list[Os] | None = Field(
        None,
        min_length=1,
        max_length=2,
        description="Only devices of these platforms (IOS, AOS, WEB); absent: every platform.",
    )
    payload: PayloadObject | None = payload_field(merged=True)
    ttl_seconds: StrictInt | None = TTL_FIELD
    priority: Priority | None = PRIORITY_FIELD
    quiet_hours: Literal["honour", "override"] | None = QUIET_HOURS_FIELD


def platforms_of(request: PublishRequest) -> tuple[str, ...]:
    """The request's platforms, as the job keeps them (sorted, each once; empty: every platform)."""
    return tuple(sorted(set(request.platforms or ())))


def overrides_of(request: PublishRequest) -> dict[str, Any] | None:
    """The request's title, body, data, payload, ttl, priority and quiet-hours overrides (None: none)."""
    asked = (
        ("title", request.title),
        ("body", request.body),
        ("data", request.data),
        ("payload", request.payload),
        ("ttl_seconds", request.ttl_seconds),
        ("priority", request.priority),
        # honour is the default: asked or not, the same request (and the same Idempotency-Key fingerprint)
        ("quiet_hours", "override" if request.quiet_hours == "override" else None),
    )
    overrides = {k: v for k, v in asked if v is not None}
    return overrides or None


class PublishAccepted(Answer):
    job_id: str
    state: JobState = Field(description="scheduled (send_at in the future) or queued.")
    send_at: datetime | None = Field(None, description="When the job is sent (UTC); null: now.")


class JobStatus(Answer):
    job_id: str
    state: JobState
    send_at: datetime | None = Field(None, description="A scheduled job is sent then (UTC); null: sent at once.")
    dry_run: bool = Field(
        description="The service was in dry_run delivery mode when the job was made: the log "
        "provider recorded every push and nothing was sent."
    )
    notification_type: str
    target: dict[str, Any]
    targeted: int = Field(description="Recipients read so far (final once the job is done).")
    sent: int
    failed: int = Field(description="Recipients not delivered (dead-lettered), no_credentials included.")
    no_credentials: int = Field(
        description="Recipients not sent because the service has no credentials for "
        "their platform (not pruned). A job where every recipient is one fails."
    )
    pruned: int = Field(description="Recipients whose token the provider rejected as invalid (removed).")
    retried: int = Field(description="Extra send attempts after retryable provider answers.")
    quiet_dropped: int = Field(
        0,
        description="Recipients not sent because the push was due in their quiet hours and the template drops "
        "(not part of targeted).",
    )
    ttl_expired: int = Field(
        0,
        description="Recipients not sent because a provider outage held their push past its ttl_seconds "
        "(not part of targeted, not dead-lettered): an outage only delays a push while it is worth sending.",
    )
    tasks: int
    tasks_done: int
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


TypePath = Annotated[str, Path(pattern=TYPE_PATTERN, description="The TOPIC template's notification_type.")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        description="Repeating a request with the same key returns its first answer instead of sending again "
        "(a publish or scheduled send: its job; an immediate single send: its counts, for 24 hours).",
    ),
]


@router.post(
    "/topics/{type}/{topic}/publish",
    status_code=202,
    response_model=PublishAccepted,
    responses={404: {"model": ErrorResponse, "description": "No TOPIC template of this type"}},
)
def publish(
    type: TypePath,
    topic: TopicPath,
    runtime: RuntimeDep,
    db: DbDep,
    service: ServiceDep,
    request: PublishRequest | None = None,
    idempotency_key: IdempotencyKey = None,
) -> PublishAccepted:
    """Send a TOPIC template to every device subscribed to the topic. Returns at once (202) with the
    job id; workers fan out in the background (with ``send_at``: from then on; the job is
    ``scheduled`` until then). Progress: ``GET /v1/jobs/{job_id}``."""
    request = request or PublishRequest()
    asked = TopicPublish(
        service=service,
        type_=type,
        topic=topic,
        idempotency_key=idempotency_key,
        variables=request.variables,
        overrides=overrides_of(request),
        send_at=request.send_at,
        local_time=request.local_time,
        platforms=platforms_of(request),
    )
    job = publish_topic(runtime, db, asked)
    db.commit()  # the route owns the unit of work; on an error the request's session rolls back
    return PublishAccepted(job_id=job.job_id, state=job.state, send_at=job.send_at)


@router.get(
    "/jobs/{job_id}",
    response_model=JobStatus,
    responses={404: {"model": ErrorResponse, "description": "No such job for this service"}},
)
def job_status(
    job_id: Annotated[UUID, Path(description="The id the publish returned")], db: DbDep, service: ServiceDep
) -> JobStatus:
    """A publish job's state and counts; they update while workers run it."""
    return status_of(*jobs.job_status(db, service, str(job_id)))


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobStatus,
    responses={404: {"model": ErrorResponse, "description": "No such job for this service"}},
)
def cancel_job(
    job_id: Annotated[UUID, Path(description="The id the publish returned")], db: DbDep, service: ServiceDep
) -> JobStatus:
    """Cancel a queued or running job: it is `cancelled` at once and sends nothing more after the page
    each worker is sending (whose counts are kept). A finished job is answered as it is."""
    status = status_of(*jobs.cancel_job(db, service, str(job_id)))
    db.commit()  # the route owns the unit of work
    return status


class JobList(BaseModel):
    items: list[JobStatus]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null at the end.")


StateQuery = Annotated[JobState | None, Query(description="Only jobs in this state.")]
MethodQuery = Annotated[
    Literal["TOPIC", "CYCLE", "SINGLE"] | None,
    Query(description="TOPIC: publishes; CYCLE: the scheduler's recurring minutes; SINGLE: scheduled single sends."),
]
JobTypeQuery = Annotated[str | None, Query(pattern=TYPE_PATTERN, description="Only this notification type.")]
CreatedFromQuery = Annotated[
    str | None,
    Query(max_length=40, json_schema_extra={"format": "date-time"}, description="Created at or after (RFC 3339)."),
]
CreatedToQuery = Annotated[
    str | None,
    Query(max_length=40, json_schema_extra={"format": "date-time"}, description="Created before (RFC 3339)."),
]
JobCursorQuery = Annotated[str | None, cursors.query(200)]
JobLimitQuery = Annotated[int, Query(ge=1, le=200)]


@dataclass(frozen=True, slots=True)
class JobQuery:
    """The query parameters of a job listing (``GET /v1/jobs`` and the admin's), as sent: checked
    by ``filter`` in the route's body, after the route's own checks (the admin's 404 comes first)."""

    state: JobState | None
    method: str | None
    type_: str | None
    created_from: str | None
    created_to: str | None
    cursor: str | None
    limit: int

    def filter(self) -> JobFilter:
        """The listing's filter; InvalidInput (422) for a time without its offset or a cursor this API
        did not return."""
        return JobFilter(
            state=self.state,
            method=self.method,
            type_=self.type_,
            created_from=query_instant(self.created_from, "created_from"),
            created_to=query_instant(self.created_to, "created_to"),
            before=cursors.decode_position(self.cursor) if self.cursor else None,
            limit=self.limit,
        )


def job_query(
    state: StateQuery = None,
    method: MethodQuery = None,
    type: JobTypeQuery = None,
    created_from: CreatedFromQuery = None,
    created_to: CreatedToQuery = None,
    cursor: JobCursorQuery = None,
    limit: JobLimitQuery = 50,
) -> JobQuery:
    """The listing's query parameters, one dependency for both routes (the OpenAPI document lists
    them as the routes' own)."""
    return JobQuery(state, method, type, created_from, created_to, cursor, limit)


JobQueryDep = Annotated[JobQuery, Depends(job_query)]


def job_page(db: Session, service: str, query: JobQuery) -> JobList:
    """One page of a service's jobs (the tenant's listing and the admin's)."""
    job_filter = query.filter()
    rows = jobs.list_jobs(db, service, job_filter)
    items = [status_of(job, progress) for job, progress in rows]
    return JobList(
        items=items,
        next_cursor=cursors.encode_position(rows[-1][0].created_at, rows[-1][0].job_id)
        if len(rows) == job_filter.limit
        else None,
    )


@router.get("/jobs", response_model=JobList)
def list_jobs(db: DbDep, service: ServiceDep, query: JobQueryDep) -> JobList:
    """This service's jobs, newest first: topic publishes, cycle minutes and scheduled single sends,
    with their counts (``state=scheduled``: the ones waiting for their send_at)."""
    return job_page(db, service, query)


def status_of(job: JobRow, progress: Progress) -> JobStatus:
    return JobStatus(
        job_id=job.job_id,
        state=job.state,
        send_at=job.send_at,
        dry_run=job.dry_run,
        notification_type=job.type_,
        target=job.target,
        targeted=progress.targeted,
        sent=progress.sent,
        failed=progress.failed,
        no_credentials=progress.no_credentials,
        pruned=progress.pruned,
        retried=progress.retried,
        quiet_dropped=progress.quiet_dropped,
        ttl_expired=progress.ttl_expired,
        tasks=job.task_count,
        tasks_done=progress.tasks_done,
        error=job.error,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )
