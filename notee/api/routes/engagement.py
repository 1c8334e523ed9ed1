"""Engagement (docs/ENGAGEMENT.md): the receipts apps post (``POST /v1/receipts``, with a client key
or a server key) and the figures per job, template type, topic and day (``GET /v1/stats...``),
thin wrappers of ``notee.usecases.receipts`` and ``notee.usecases.engagement_stats``."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal

from anyio import to_thread
from fastapi import APIRouter, Path, Query, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictStr

from notee.api import cursors
from notee.api.auth import ServiceDep
from notee.api.deps import RuntimeDep
from notee.api.models import Answer, errors
from notee.core import notification_id
from notee.core.errors import InvalidInput
from notee.usecases import engagement_stats, receipts

router = APIRouter(prefix="/v1", tags=["engagement"])

JOB_ID_PATTERN = r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|s[0-9a-f]{31})$"
JobIdPath = Annotated[
    str, Path(pattern=JOB_ID_PATTERN, description="A job id, or a single send's `send_id`.", max_length=36)
]


# ---------------------------------------------------------------------- models
class ReceiptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    notification_id: StrictStr = Field(
        max_length=64,
        description=f"The `{notification_id.KEY}` of the push (FCM data / APNs custom key), as received.",
    )
    event: Literal["delivered", "opened", "clicked", "dismissed"]
    at: AwareDatetime = Field(description="When it happened on the device (RFC 3339 with an offset).")
    action: StrictStr | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="`clicked` only: the action button's identifier (none: the notification itself).",
    )


class ReceiptsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[ReceiptIn] = Field(min_length=1, description="At most NOTEE_RECEIPTS_MAX_EVENTS (500).")


class RejectedOut(BaseModel):
    index: int = Field(description="Position of the event in `events`.")
    notification_id: str
    reason: str = Field(
        description="`not_found` (unknown, malformed, expired or another service's id), `too_old` (before the "
        "retention window), `in_future`."
    )


class ReceiptsOut(BaseModel):
    accepted: int = Field(description="Events stored and counted now.")
    duplicates: int = Field(description="Events already stored (a retried batch): counted once, before.")
    rejected: list[RejectedOut] = Field(description="Events refused, one entry each; the rest were kept.")


class CountsOut(BaseModel):
    targeted: int = Field(description="Devices the notification was meant for.")
    sent: int = Field(description="Pushes the providers accepted.")
    delivered: int
    opened: int
    clicked: int
    dismissed: int
    delivery_rate: float | None = Field(description="delivered / sent (null: nothing sent).")
    open_rate: float | None = Field(description="opened / sent.")
    click_rate: float | None = Field(description="clicked / sent.")


class JobStatsOut(Answer):
    job_id: str
    type: str
    counts: CountsOut


class ScopeRowOut(BaseModel):
    key: str = Field(description="The type, the topic (`<type> <topic>`) or the day (YYYY-MM-DD).")
    counts: CountsOut


class ScopeStatsOut(BaseModel):
    by: str
    from_: date = Field(alias="from", description="First day, in the service's time zone.")
    to: date = Field(description="Last day (inclusive).")
    jobs_truncated: bool = Field(
        description=f"More than {engagement_stats.MAX_JOBS:,} jobs in the range: targeted and sent cover the newest."
    )
    items: list[ScopeRowOut]


class ReceiptRowOut(Answer):
    notification_id: str
    event: str
    action: str | None
    at: datetime
    received: datetime


class ReceiptPage(BaseModel):
    items: list[ReceiptRowOut]
    next_cursor: str | None


def _counts(c: engagement_stats.Counts) -> CountsOut:
    e = c.events
    return CountsOut(
        targeted=c.targeted,
        sent=c.sent,
        delivered=e.get("delivered", 0),
        opened=e.get("opened", 0),
        clicked=e.get("clicked", 0),
        dismissed=e.get("dismissed", 0),
        delivery_rate=c.rate("delivered"),
        open_rate=c.rate("opened"),
        click_rate=c.rate("clicked"),
    )


# ---------------------------------------------------------------------- routes
@router.post("/receipts", response_model=ReceiptsOut, responses=errors(413, 422))
async def post_receipts(body: ReceiptsIn, service: ServiceDep, request: Request, runtime: RuntimeDep) -> ReceiptsOut:
    """What happened to pushes on the devices, in a batch (a client key may call this, and nothing
    else). Idempotent per (notification id, event): a retried batch counts once. Each refused event
    is listed with its reason; the others are kept. 200 when the batch was handled, whatever it refused."""
    settings = request.app.state.settings
    if len(body.events) > settings.receipts_max_events:
        raise InvalidInput(
            f"at most {settings.receipts_max_events} events",
            details=[{"loc": ["body", "events"], "msg": f"at most {settings.receipts_max_events} events"}],
        )
    events = [receipts.ReceiptEvent(e.notification_id, e.event, e.at, e.action) for e in body.events]
    for i, e in enumerate(body.events):
        if e.action is not None and e.event != "clicked":
            raise InvalidInput(
                "action is for clicked events",
                details=[{"loc": ["body", "events", i, "action"], "msg": "clicked only"}],
            )
    result = await to_thread.run_sync(
        receipts.post_receipts, runtime, settings, request.app.state.receipt_caches, service, events
    )
    return ReceiptsOut(
        accepted=result.accepted,
        duplicates=result.duplicates,
        rejected=[
            RejectedOut(index=r.index, notification_id=r.notification_id, reason=r.reason) for r in result.rejected
        ],
    )


@router.get("/stats/jobs/{job_id}", response_model=JobStatsOut, responses=errors(404))
def job_stats(job_id: JobIdPath, service: ServiceDep, runtime: RuntimeDep) -> JobStatsOut:
    """A job's (or a single send's) targeted, sent, delivered, opened, clicked, dismissed and rates."""
    stats = engagement_stats.job_stats(runtime, service, job_id)
    return JobStatsOut(job_id=stats.job_id, type=stats.type_, counts=_counts(stats.counts))


@router.get("/stats", response_model=ScopeStatsOut, responses=errors(422))
def scope_stats(
    service: ServiceDep,
    runtime: RuntimeDep,
    by: Annotated[
        Literal["type", "topic", "day"],
        Query(
            description="Group by template type, topic or day. Every grouping counts the notifications "
            "made on the range's days (the service's time zone): their receipts and their targeted and "
            "sent, whatever day a receipt came."
        ),
    ],
    from_: Annotated[date | None, Query(alias="from", description="First day (default: 29 days before to).")] = None,
    to: Annotated[date | None, Query(description="Last day, inclusive (default: today, service's zone).")] = None,
) -> ScopeStatsOut:
    """The figures of the notifications made in a range of days (at most 92), per template type,
    topic or day of the service's time zone."""
    stats = engagement_stats.scope_stats(runtime, service, by, from_, to)
    return ScopeStatsOut.model_validate(
        {
            "by": stats.by,
            "from": stats.days[0],
            "to": stats.days[1],
            "jobs_truncated": stats.jobs_truncated,
            "items": [ScopeRowOut(key=k, counts=_counts(c)) for k, c in stats.rows.items()],
        }
    )


@router.get("/stats/jobs/{job_id}/receipts", response_model=ReceiptPage, responses=errors(404, 422))
def export_receipts(
    job_id: JobIdPath,
    service: ServiceDep,
    runtime: RuntimeDep,
    cursor: Annotated[str | None, cursors.query(200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> ReceiptPage:
    """The raw events of a job (or single send), a page at a time, for the receipts' retention."""
    position: engagement_stats.Position = (0, None)
    if cursor is not None:
        b, device, event = cursors.decode(cursor, 3)
        if not b.isdigit():
            raise InvalidInput(
                "cursor is not one this API returned", details=[{"loc": ["query", "cursor"], "msg": "bad"}]
            )
        position = (int(b), (device, event) if device else None)
    items, nxt = engagement_stats.export_page(runtime, service, job_id, position, limit)
    return ReceiptPage(
        items=[ReceiptRowOut.model_validate(r, from_attributes=True) for r in items],
        next_cursor=None if nxt is None else cursors.encode(str(nxt[0]), *(nxt[1] or ("", ""))),
    )
