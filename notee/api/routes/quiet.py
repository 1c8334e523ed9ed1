"""A service's own quiet hours (issue 18 item 3): the window, local to the service's time zone, in
which TOPIC pushes to its users without a window of their own are held (or dropped)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from notee.api.auth import ServiceDep
from notee.api.deps import DbDep
from notee.api.models import QuietHours, errors, quiet_out
from notee.domain import schedule, services

router = APIRouter(prefix="/v1/service", tags=["quiet hours"])


class ServiceQuietHours(BaseModel):
    model_config = ConfigDict(extra="forbid")

    quiet_hours: QuietHours | None = Field(
        description="The service's quiet hours, local to each recipient's time zone (the user's, else the "
        "service's); a user's own window replaces it. null: none."
    )


@router.get("/quiet-hours", response_model=ServiceQuietHours)
def get_quiet_hours(service: ServiceDep, db: DbDep) -> ServiceQuietHours:
    """The service's quiet hours (null: none)."""
    return ServiceQuietHours(quiet_hours=quiet_out(services.get_service(db, service).quiet_hours))


@router.put("/quiet-hours", response_model=ServiceQuietHours, responses=errors(422))
def put_quiet_hours(body: ServiceQuietHours, service: ServiceDep, db: DbDep) -> ServiceQuietHours:
    """Set (or, with null, clear) the service's quiet hours. TOPIC publishes made from now on hold (or
    drop, as their template says) pushes due inside the window; cycle pushes are never affected."""
    window = schedule.check_quiet_hours(body.quiet_hours.model_dump() if body.quiet_hours else None)
    updated = services.set_quiet_hours(db, service, window)
    db.commit()
    return ServiceQuietHours(quiet_hours=quiet_out(updated.quiet_hours))
