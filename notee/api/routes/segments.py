"""Audiences (docs/AUDIENCES.md): a service's saved segments (``/v1/segments``) and the estimate of
what a publish's target reaches now (``POST /v1/audience/estimate``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr, StringConstraints

from notee.api import cursors
from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.models import Answer, errors
from notee.core.errors import InvalidInput
from notee.core.vocabulary import Os
from notee.domain import segments
from notee.domain.segments import MAX_DESCRIPTION, MAX_NAMED, NAME_PATTERN, Segment, SegmentInput
from notee.usecases.estimate import MAX_USERS, Estimate, EstimateTarget, estimate

router = APIRouter(prefix="/v1/segments", tags=["audiences"])
estimate_router = APIRouter(prefix="/v1/audience", tags=["audiences"])

SegmentName = Annotated[StrictStr, StringConstraints(pattern=NAME_PATTERN)]
NamePath = Annotated[str, Path(pattern=NAME_PATTERN, description="The segment's name.")]
FILTER_DESCRIPTION = (
    'Groups of predicates (docs/AUDIENCES.md "Filters"): the groups are ORed, the predicates of a group ANDed; '
    'each `{"tag"|"attribute": name, "op": op, "value": ...}`. A bad part is 422 naming it.'
)
FilterJson = Annotated[list[Any], Field(min_length=1, max_length=10, description=FILTER_DESCRIPTION)]


class SegmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: SegmentName = Field(description="1-64 of A-Z a-z 0-9 _ . -; unique in the service.")
    description: StrictStr | None = Field(None, max_length=MAX_DESCRIPTION)
    filter: FilterJson


class SegmentReplace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: StrictStr | None = Field(None, max_length=MAX_DESCRIPTION)
    filter: FilterJson


class ReachOut(Answer):
    users: int = Field(description="Users with at least one device the filter matches.")
    devices: int
    devices_by_platform: dict[str, int]


class SegmentOut(Answer):
    name: str
    description: str
    filter: list[Any]
    created_at: datetime
    updated_at: datetime
    reach: ReachOut | None = Field(
        description="What it matches now (exact MySQL counts); null in a listing without counts=true."
    )


class SegmentList(Answer):
    items: list[SegmentOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at the end.")


def _reach(s: Segment) -> ReachOut | None:
    reach = s.reach
    if reach is None:
        return None
    return ReachOut(users=reach.users, devices=reach.devices, devices_by_platform=reach.devices_by_platform)


def _out(s: Segment) -> SegmentOut:
    return SegmentOut(
        name=s.name,
        description=s.description,
        filter=s.filter,
        created_at=s.created_at,
        updated_at=s.updated_at,
        reach=_reach(s),
    )


@router.post("", status_code=201, response_model=SegmentOut, responses=errors(409, 422))
def create_segment(body: SegmentIn, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> SegmentOut:
    """Save a filter under a name (409 when the name is taken, or the service has
    NOTEE_SEGMENTS_PER_SERVICE_MAX segments). The answer carries no count (GET one for it)."""
    given = SegmentInput(body.name, body.description, body.filter)
    made = segments.create_segment(db, service, given, runtime.settings.segments_per_service_max)
    db.commit()
    return _out(made)


MAX_COUNTED = 20  # segments a page counts with counts=true: each count reads the service's devices


@router.get("", response_model=SegmentList, responses=errors(422))
def list_segments(
    service: ServiceDep,
    db: DbDep,
    counts: Annotated[
        bool, Query(description=f"Count what each segment reaches now (one count each: limit at most {MAX_COUNTED}).")
    ] = False,
    cursor: Annotated[str | None, cursors.query(200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> SegmentList:
    """The service's segments in name order, a page at a time (``next_cursor``); without counts
    unless ``counts=true``."""
    if counts and limit > MAX_COUNTED:
        msg = f"with counts=true, at most {MAX_COUNTED} segments a page"
        raise InvalidInput(msg, details=[{"loc": ["query", "limit"], "type": "less_than_equal", "msg": msg}])
    after = cursors.decode(cursor, 1)[0] if cursor else None
    found = segments.list_segments(db, service, after, limit, counted=counts)
    return SegmentList(
        items=[_out(s) for s in found],
        next_cursor=cursors.encode(found[-1].name) if len(found) == limit else None,
    )


@router.get("/{name}", response_model=SegmentOut, responses=errors(404))
def get_segment(name: NamePath, service: ServiceDep, db: DbDep) -> SegmentOut:
    """One segment and what it reaches now (an exact count)."""
    return _out(segments.get_segment(db, service, name))


@router.put(
    "/{name}",
    response_model=SegmentOut,
    responses={201: {"model": SegmentOut, "description": "Created"}, **errors(409, 422)},
)
def put_segment(
    name: NamePath, body: SegmentReplace, service: ServiceDep, db: DbDep, runtime: RuntimeDep, response: Response
) -> SegmentOut:
    """Replace the segment's filter and description, or create it (201) when there is none of that
    name. Jobs already made keep the definition they snapshotted."""
    given = SegmentInput(name, body.description, body.filter, name_loc=("path", "name"))
    put = segments.put_segment(db, service, given, runtime.settings.segments_per_service_max)
    db.commit()
    response.status_code = 201 if put.created else 200
    return _out(put)


@router.delete("/{name}", status_code=204, response_class=Response, responses=errors(404))
def delete_segment(name: NamePath, service: ServiceDep, db: DbDep) -> None:
    """Delete the segment. Jobs already made keep the definition they snapshotted."""
    segments.delete_segment(db, service, name)
    db.commit()


# ------------------------------------------------------------------------------------- estimate
class SegmentsChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include: list[StrictStr] = Field(min_length=1, max_length=MAX_NAMED)
    exclude: list[StrictStr] = Field(default_factory=list, max_length=MAX_NAMED)


ServiceUserId = Annotated[StrictStr, StringConstraints(min_length=1, max_length=191)]


class EstimateIn(BaseModel):
    """Exactly one target, as a publish names it."""

    model_config = ConfigDict(extra="forbid")

    filter: FilterJson | None = None
    segments: SegmentsChoice | None = Field(None, description="Users in any included segment and no excluded one.")
    users: list[ServiceUserId] | None = Field(None, min_length=1, max_length=MAX_USERS, description="Service user ids.")
    topic: StrictStr | None = Field(None, min_length=1, max_length=50, description="With `type`.")
    condition: StrictStr | None = Field(None, min_length=1, max_length=1000, description="With `type`.")
    type: StrictStr | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="The TOPIC template's type.")
    platforms: list[Os] | None = Field(None, min_length=1, max_length=2, description="Narrow to these platforms.")


class EstimateOut(Answer):
    users: int | None = Field(description="Users reached (for a topic or condition: subscribed users, a bound).")
    devices: int | None = Field(description="Devices reached; null when unknown (topic, condition).")
    devices_by_platform: dict[str, int] | None
    exact: bool = Field(description="true: counted in MySQL now; false: from Cassandra's counters (may drift).")
    method: str = Field(description="mysql_count, topic_counter or topic_counters_upper_bound.")
    unknown_users: int | None = Field(None, description="Ids of a `users` list that name no user (skipped).")
    topics: dict[str, int] | None = Field(None, description="Each topic's subscribed users (topic, condition).")


@estimate_router.post("/estimate", response_model=EstimateOut, responses=errors(422))
def estimate_audience(body: EstimateIn, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> EstimateOut:
    """How many users and devices a publish's target would reach now: exact for a filter, segments
    and a user list; from the subscriber counters for a topic or a condition (an upper bound)."""
    target = EstimateTarget(
        filter=body.filter,
        segments=body.segments.model_dump() if body.segments else None,
        users=body.users,
        topic=body.topic,
        condition=body.condition,
        type=body.type,
        platforms=tuple(dict.fromkeys(body.platforms)) if body.platforms else None,
    )
    found: Estimate = estimate(db, runtime.statements, service, target)
    db.rollback()  # read only
    return EstimateOut(
        users=found.users,
        devices=found.devices,
        devices_by_platform=found.devices_by_platform,
        exact=found.exact,
        method=found.method,
        unknown_users=found.unknown_users,
        topics=found.topics or None,
    )
