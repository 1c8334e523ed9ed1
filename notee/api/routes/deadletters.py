"""Dead letters: pushes that still failed after the bounded retries. A service lists its own and
sends them again (``/v1/dead-letters``); the admin API does the same for any service."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from notee.api import cursors
from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, SenderDep
from notee.api.models import errors
from notee.core import clock
from notee.usecases import jobs
from notee.usecases.replay import job_failures
from notee.usecases.replay import list_dead_letters as dead_letters_of
from notee.usecases.sender import DeliverySender

router = APIRouter(prefix="/v1", tags=["dead letters"])

MAX_REPLAY = 1000


class DeadLetterOut(BaseModel):
    id: int
    job_id: str | None = Field(description="The publish job it came from; null for a single send.")
    device_token: str
    device_os: str
    provider: str
    reason: str = Field(description="The provider's last answer, or why Notee gave up.")
    attempts: int
    payload: dict[str, Any] = Field(description="title, body and data as they were sent.")
    created_at: datetime


class DeadLetterList(BaseModel):
    items: list[DeadLetterOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null at the end.")
    next_before_id: int | None = Field(
        description="Deprecated (use next_cursor): pass as before_id for the next page.", deprecated=True
    )


class ReplayIn(BaseModel):
    """Which dead letters to send again; with neither field, the oldest ones (up to 1,000)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[int, Field(ge=1)]] | None = Field(None, min_length=1, max_length=MAX_REPLAY)
    job_id: UUID | None = Field(None, description="Only this job's dead letters.")


class ReplayOut(BaseModel):
    replayed: int = Field(description="Dead letters sent again and removed.")
    delivered: int
    pruned: int = Field(description="Devices removed because the provider now says their token is invalid.")
    failed: int = Field(description="Still failing: recorded again as new dead letters.")


LimitQuery = Annotated[int, Query(ge=1, le=500)]
CursorQuery = Annotated[str | None, cursors.query(200)]
BeforeQuery = Annotated[
    int | None, Query(ge=1, description="Deprecated (use cursor): only letters older than this id.", deprecated=True)
]
JobQuery = Annotated[UUID | None, Query(description="Only this job's dead letters.")]


def list_letters(db: Session, service: str, page: LetterPage) -> DeadLetterList:
    before = cursors.decode_id(page.cursor) if page.cursor else page.before_id
    job = str(page.job_id) if page.job_id else None
    rows = dead_letters_of(db, service, limit=page.limit, before_id=before, job_id=job)
    items = [DeadLetterOut.model_validate(r, from_attributes=True) for r in rows]
    last = items[-1].id if len(items) == page.limit else None
    return DeadLetterList(items=items, next_cursor=cursors.encode_id(last) if last else None, next_before_id=last)


@dataclass(frozen=True, slots=True)
class LetterPage:
    """A dead-letter listing's query (the tenant's and the admin's)."""

    limit: int = 100
    cursor: str | None = None
    before_id: int | None = None
    job_id: UUID | None = None


def letter_page(
    limit: LimitQuery = 100, cursor: CursorQuery = None, before_id: BeforeQuery = None, job_id: JobQuery = None
) -> LetterPage:
    return LetterPage(limit, cursor, before_id, job_id)


LetterPageDep = Annotated[LetterPage, Depends(letter_page)]


async def replay(sender: DeliverySender, service: str, body: ReplayIn | None) -> ReplayOut:
    body = body or ReplayIn()
    result = await sender.replay(
        service, ids=body.ids, job_id=str(body.job_id) if body.job_id else None, limit=MAX_REPLAY
    )
    return ReplayOut(replayed=result.replayed, delivered=result.delivered, pruned=result.pruned, failed=result.failed)


@router.get("/dead-letters", response_model=DeadLetterList)
def list_dead_letters(db: DbDep, service: ServiceDep, page: LetterPageDep) -> DeadLetterList:
    """This service's dead letters, newest first, a page at a time (``next_cursor``)."""
    return list_letters(db, service, page)


@router.post("/dead-letters/replay", response_model=ReplayOut)
async def replay_dead_letters(service: ServiceDep, sender: SenderDep, body: ReplayIn | None = None) -> ReplayOut:
    """Send dead letters again (given ids, a job's, or the oldest). Delivered and pruned ones are
    removed; what fails again is recorded as a new dead letter. Ids of other services are not found."""
    return await replay(sender, service, body)


class FailureCount(BaseModel):
    reason: str = Field(description="The provider's last answer, or why Notee gave up (as in a dead letter).")
    platform: str = Field(description="AOS or IOS.")
    count: int


class JobFailures(BaseModel):
    job_id: str
    dead_lettered: int = Field(description="The job's dead letters now (replayed ones are gone).")
    items: list[FailureCount] = Field(description="By reason and platform, most first.")


@router.get("/jobs/{job_id}/failures", response_model=JobFailures, responses=errors(404))
def failures_of_job(
    job_id: Annotated[UUID, Path(description="The id the publish returned")], db: DbDep, service: ServiceDep
) -> JobFailures:
    """A job's dead letters counted by reason and platform (the console's failure breakdown);
    another service's job is 404, as a missing one."""
    job, _ = jobs.job_status(db, service, str(job_id))
    since = clock.naive_utc(job.created_at)
    found = job_failures(db, service, job.job_id, since)
    return JobFailures(
        job_id=job.job_id,
        dead_lettered=sum(n for _, _, n in found),
        items=[FailureCount(reason=r, platform=p, count=n) for r, p, n in found],
    )
