"""``GET /v1/admin/processes`` (admin token): every Notee process's last heartbeat and, for a worker,
its circuit breaker per provider (``notee.usecases.heartbeats``; the console's health page shows the
same). Admin only: process ids name hosts, which no tenant is told (a tenant's console health page
shows kinds, counts, ages and breaker states)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import Field

from notee.api.auth import AdminDep
from notee.api.deps import DbDep
from notee.api.models import Answer, errors
from notee.usecases import heartbeats

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[AdminDep], responses=errors(403))


class ProcessOut(Answer):
    kind: str = Field(description="api | worker | scheduler | webhooks")
    process_id: str = Field(description="host:pid:random, unique per process start (a worker's lease owner)")
    version: str = Field(description="The process's Notee version")
    started_at: datetime
    beat_at: datetime = Field(description="Its last heartbeat (it beats every NOTEE_PROCESS_HEARTBEAT_S)")
    age_s: float = Field(description="Seconds since its last heartbeat, by the database clock")
    stale: bool = Field(description="It missed 3 beats and 5 s: killed, hung or cut off from MySQL")
    breakers: dict[str, str] | None = Field(
        description="A worker's circuit breaker per provider (fcm, apns, webpush): closed | open | half_open; "
        "null for the other kinds"
    )


class ProcessList(Answer):
    items: list[ProcessOut]


@router.get("/processes", response_model=ProcessList)
def list_processes(db: DbDep) -> ProcessList:
    """Every process that beat in the last hour (a graceful stop removes its row; a killed one stays,
    `stale`, until the hourly retention run), by kind, the latest beat first."""
    found = heartbeats.process_health(db)
    return ProcessList(
        items=[
            ProcessOut(
                kind=p.kind,
                process_id=p.process_id,
                version=p.version,
                started_at=p.started_at,
                beat_at=p.beat_at,
                age_s=round(p.age_s, 3),
                stale=p.stale,
                breakers=p.breakers,
            )
            for p in found
        ]
    )
