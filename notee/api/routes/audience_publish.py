"""The general publish: ``POST /v1/publish/{type}`` to exactly one target, a topic, a condition over
topics, a filter, saved segments or a list of users (docs/AUDIENCES.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, StrictStr, StringConstraints

from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.errors import ErrorResponse
from notee.api.routes.publish import IdempotencyKey, PublishAccepted, PublishRequest, overrides_of, platforms_of
from notee.domain.rules import TYPE_PATTERN
from notee.domain.schedule import TOPIC_MAX
from notee.usecases.audience_publish import USERS_MAX, Publish, publish_to

router = APIRouter(prefix="/v1", tags=["publish"])

SegmentName = Annotated[StrictStr, StringConstraints(min_length=1, max_length=64)]
ServiceUserId = Annotated[StrictStr, StringConstraints(min_length=1, max_length=191)]


class Segments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include: list[SegmentName] = Field(min_length=1, max_length=20, description="Users in any of these segments…")
    exclude: list[SegmentName] = Field(
        default_factory=list, max_length=20, description="…and in none of these (their definitions as they are now)."
    )


class GeneralPublishRequest(PublishRequest):
    """A publish's fields (variables, overrides, send_at, local_time, platforms) and exactly one target."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["TOPIC", "SINGLE"] = Field(
        "TOPIC",
        description="The template's method: TOPIC (every target) or SINGLE (filter, segments and users only).",
    )
    topic: StrictStr | None = Field(
        None, min_length=1, max_length=TOPIC_MAX, description="Every subscriber of a topic."
    )
    condition: StrictStr | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="FCM's condition over at most 5 topics: `'a' in topics && !('b' in topics)`; `&&` binds "
        "tighter than `||`. A condition true for a device in none of its topics is 422.",
        examples=["'sports' in topics && !('news' in topics)"],
    )
    filter: list[list[dict[str, Any]]] | None = Field(
        None,
        min_length=1,
        max_length=10,
        description="Groups of predicates over tags and attributes: a group's predicates are ANDed, the groups "
        "ORed (docs/AUDIENCES.md, Filters).",
    )
    segments: Segments | None = Field(None, description="Saved segments: included and excluded, by name.")
    users: list[ServiceUserId] | None = Field(
        None,
        min_length=1,
        max_length=USERS_MAX,
        description="Up to 20,000 of the service's own user ids; unknown ids are counted (unknown_users) and skipped.",
    )


class GeneralPublishAccepted(PublishAccepted):
    unknown_users: int | None = Field(None, description="A user list: how many of its ids name no user (skipped).")


TypePath = Annotated[str, Path(pattern=TYPE_PATTERN, description="The template's notification_type.")]


@router.post(
    "/publish/{type}",
    status_code=202,
    response_model=GeneralPublishAccepted,
    responses={404: {"model": ErrorResponse, "description": "No template of this method and type"}},
)
def publish_general(
    type: TypePath,
    request: GeneralPublishRequest,
    runtime: RuntimeDep,
    db: DbDep,
    service: ServiceDep,
    idempotency_key: IdempotencyKey = None,
) -> GeneralPublishAccepted:
    """Send a template to exactly one target: `topic`, `condition`, `filter`, `segments` or `users`
    (none or two: 422), optionally narrowed by `platforms`. Like a topic publish it answers at once
    (202) with the job, which workers fan out (with `send_at`: from then on); each device gets it at
    most once. Progress: `GET /v1/jobs/{job_id}`."""
    asked = publish_of(type, request, service, idempotency_key)
    published = publish_to(runtime, db, asked)
    db.commit()  # the route owns the unit of work; on an error the request's session rolls back
    job = published.job
    return GeneralPublishAccepted(
        job_id=job.job_id, state=job.state, send_at=job.send_at, unknown_users=published.unknown_users
    )


def publish_of(type_: str, request: GeneralPublishRequest, service: str, idempotency_key: str | None) -> Publish:
    """The use case's ``Publish`` of a general publish request (the publish's and its preview's)."""
    return Publish(
        service=service,
        type_=type_,
        targets={
            "topic": request.topic,
            "condition": request.condition,
            "filter": request.filter,
            "segments": {"include": request.segments.include, "exclude": request.segments.exclude}
            if request.segments is not None
            else None,
            "users": request.users,
        },
        method=request.method,
        platforms=platforms_of(request),
        idempotency_key=idempotency_key,
        variables=request.variables,
        overrides=overrides_of(request),
        send_at=request.send_at,
        local_time=request.local_time,
    )
