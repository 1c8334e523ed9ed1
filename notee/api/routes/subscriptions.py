"""Topic and cycle subscriptions of a user, listing, and the bulk topic subscribe.

Thin: parse, one call into the domain (notee.domain.topic_subscriptions, cycle_subscriptions,
subscriptions), respond. Every route is scoped to the calling service (API key); another service's
users and templates answer 404.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator
from starlette.types import ASGIApp, Receive, Scope, Send

from notee.api.access import ROUTE_LABEL
from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep, SubscribeGroupsDep
from notee.api.documented import TopicPath
from notee.api.errors import known_error_response
from notee.api.models import Answer, errors
from notee.api.subscribe_groups import SubscribeGroups
from notee.api.user_ref import UserDep
from notee.domain import cycle_subscriptions, subscriptions, topic_subscriptions
from notee.domain.cycle_subscriptions import ScheduleRequest
from notee.domain.rules import TYPE_PATTERN
from notee.domain.schedule import validate_topic
from notee.domain.subscription_rows import SubscribeResult

router = APIRouter(prefix="/v1", tags=["subscriptions"])

TypePath = Annotated[str, Path(pattern=TYPE_PATTERN, description="The template's notification_type")]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CycleIn(_In):
    days: list[StrictStr] = Field(..., min_length=1, max_length=7, description="MON..SUN", examples=[["MON", "WED"]])
    hour: StrictInt = Field(..., description="0-23, local to timezone", json_schema_extra={"minimum": 0, "maximum": 23})
    minute: StrictInt = Field(
        ..., description="0-59, local to timezone", json_schema_extra={"minimum": 0, "maximum": 59}
    )
    timezone: StrictStr | None = Field(
        None, max_length=64, description="IANA timezone; default: the service's timezone"
    )


class BulkIn(_In):
    user_ids: list[UUID] = Field(
        ...,
        min_length=1,
        max_length=topic_subscriptions.BULK_MAX,
        description=f"Platform user ids, at most {topic_subscriptions.BULK_MAX}",
    )


class SubscribeOut(BaseModel):
    status: Literal["subscribed", "already_subscribed"]
    devices: int = Field(description="Devices of the user that carry this subscription")
    schedule: str | None = Field(None, description="Canonical schedule (cycle only), e.g. 'MON,WED 22:00 Asia/Seoul'")


class ScheduleOut(BaseModel):
    days: list[str]
    hour: int
    minute: int
    timezone: str
    canonical: str


class SubscriptionOut(Answer):
    method: Literal["TOPIC", "CYCLE"]
    type: str
    topic: str | None = None
    schedule: ScheduleOut | None = None
    registered_at: datetime = Field(description="When the subscription was made (RFC 3339)")
    devices: int

    @field_validator("registered_at", mode="before")
    @classmethod
    def _from_epoch_ms(cls, value: object) -> object:
        """The subscription rows keep epoch milliseconds."""
        return datetime.fromtimestamp(value / 1000, UTC) if isinstance(value, int) else value


class SubscriptionList(BaseModel):
    items: list[SubscriptionOut]


class BulkResult(BaseModel):
    user_id: str
    status: Literal["subscribed", "already_subscribed", "not_found"]


class BulkOut(BaseModel):
    results: list[BulkResult]
    subscribed: int
    already_subscribed: int
    not_found: int


@router.put(
    "/users/{user_id}/subscriptions/topic/{type}/{topic}",
    response_model=SubscribeOut,
    responses={201: {"model": SubscribeOut, "description": "Created"}, **errors(404, 422)},
)
async def subscribe_topic(
    user_id: UserDep,
    type: TypePath,
    topic: TopicPath,
    service: ServiceDep,
    groups: SubscribeGroupsDep,
) -> Response:
    """Subscribe the user (every device it has, and any it registers later) to a topic of a TOPIC
    template: 201 when the subscription is new, 200 when it existed (nothing changes)."""
    status, body = await _subscribe_topic_answer(groups, service, user_id, type, topic)
    return Response(body, status_code=status, media_type="application/json")


async def _subscribe_topic_answer(
    groups: SubscribeGroups, service: str, user_id: str, type_: str, topic: str
) -> tuple[int, bytes]:
    """The topic subscribe's status and JSON body, for the route and for ``TopicSubscribeShortcut``."""
    # The hottest write of the API: concurrent subscribes of a type are answered by one store call
    # (notee.api.subscribe_groups). The topic is checked first: a bad one is this request's 422 alone.
    validate_topic(topic)
    result = await groups.subscribe(service, user_id, type_, topic)
    # SubscribeOut's JSON written directly: validating and serialising the response model cost more
    # than building it (tests/{unit,integration}/test_subscriptions_api.py checks it against the model).
    return 201 if result["status"] == "subscribed" else 200, subscribe_out_json(result)


def subscribe_out_json(result: SubscribeResult) -> bytes:
    """``SubscribeOut`` of a topic subscription, as FastAPI would serialise it."""
    return b'{"status":"%s","devices":%d,"schedule":null}' % (result["status"].encode("ascii"), result["devices"])


# The route's path with the parameters it accepts unchanged: a lowercase hyphenated UUID (the form
# ``str(UUID)`` gives back), a type its pattern allows, any topic segment. Anything else goes the
# route's way, whose validation answers it.
_SUBSCRIBE_PATH = re.compile(
    r"/v1/users/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/subscriptions/topic/"
    rf"({TYPE_PATTERN.removeprefix('^').removesuffix('$')})/([^/]+)"
)
_JSON_HEADERS = (b"content-type", b"application/json")
SUBSCRIBE_TEMPLATE = f"{router.prefix}/users/{{user_id}}/subscriptions/topic/{{type}}/{{topic}}"


class TopicSubscribeShortcut:
    """ASGI middleware inside the edge (limits, credentials and rate limits already applied): a
    topic subscribe whose path parameters are valid as they stand is answered here, as the route
    would answer it, without FastAPI's routing, dependency resolution and exception middleware: about
    a fifth of the API process's CPU per subscription (docs/BENCHMARKS.md, "Fifth round: the HTTP
    stack skipped"). Every other request, and any subscribe whose parameters need the route's
    validation or conversion (an uppercase UUID, a bad type), goes on to FastAPI. The route stays
    the documented definition (OpenAPI); tests/{unit,integration}/test_subscriptions_api.py holds the two to the same
    answers. A performance detour (docs/BENCHMARKS.md, "Performance detours"): FastAPI and Starlette
    are pinned exactly, and tests/unit/test_shortcut_pins.py checks what it reproduces of theirs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = None
        if scope["type"] == "http" and scope["method"] == "PUT" and not scope.get("root_path"):
            match = _SUBSCRIBE_PATH.fullmatch(scope["path"])
        service = scope.get("state", {}).get("service") if match is not None else None
        if match is None or not isinstance(service, str):
            await self.app(scope, receive, send)
            return
        user_id, type_, topic = match.groups()
        scope[ROUTE_LABEL] = SUBSCRIBE_TEMPLATE  # the access log's and metrics' route label
        try:
            status, body = await _subscribe_topic_answer(
                scope["app"].state.subscribe_groups, service, user_id, type_, topic
            )
        except Exception as exc:  # what the app's exception handlers answer (notee.api.errors)
            response = known_error_response(exc)
            if response is None:
                raise  # a bug: Starlette's outermost middleware answers 500 and logs it
            await response(scope, receive, send)
            return
        headers = [(b"content-length", b"%d" % len(body)), _JSON_HEADERS]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _upserted(response: Response, result: SubscribeResult) -> SubscribeResult:
    """201 for a new subscription, 200 for one that existed, like the other upserts."""
    response.status_code = 201 if result["status"] == "subscribed" else 200
    return result


@router.delete(
    "/users/{user_id}/subscriptions/topic/{type}/{topic}",
    status_code=204,
    response_class=Response,
    responses=errors(404, 422),
)
def unsubscribe_topic(
    user_id: UserDep, type: TypePath, topic: TopicPath, service: ServiceDep, db: DbDep, runtime: RuntimeDep
) -> None:
    """Remove exactly this user's rows of this topic (no-op when not subscribed)."""
    topic_subscriptions.unsubscribe_topic(db, runtime.statements, service, user_id, type, topic)


@router.put(
    "/users/{user_id}/subscriptions/cycle/{type}",
    response_model=SubscribeOut,
    responses={201: {"model": SubscribeOut, "description": "Created or replaced"}, **errors(404, 422)},
)
def subscribe_cycle(
    user_id: UserDep,
    type: TypePath,
    body: CycleIn,
    service: ServiceDep,
    db: DbDep,
    runtime: RuntimeDep,
    response: Response,
) -> SubscribeResult:
    """Subscribe the user to a CYCLE template at local days/hour/minute in a timezone. A new schedule
    replaces the previous one of this type (201); the same schedule again changes nothing (200)."""
    return _upserted(
        response,
        cycle_subscriptions.subscribe_cycle(
            db,
            runtime.statements,
            service,
            user_id,
            type,
            ScheduleRequest(body.days, body.hour, body.minute, body.timezone),
        ),
    )


@router.delete(
    "/users/{user_id}/subscriptions/cycle/{type}", status_code=204, response_class=Response, responses=errors(404)
)
def unsubscribe_cycle(user_id: UserDep, type: TypePath, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> None:
    """Remove the user's recurring schedule for this type (every device)."""
    cycle_subscriptions.unsubscribe_cycle(db, runtime.statements, service, user_id, type)


@router.get("/users/{user_id}/subscriptions", response_model=SubscriptionList, responses=errors(404))
def list_subscriptions(user_id: UserDep, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> SubscriptionList:
    """The user's subscriptions, from the per-user index."""
    return SubscriptionList.model_validate(
        {"items": subscriptions.list_subscriptions(db, runtime.statements, service, user_id)}
    )


@router.post("/topics/{type}/{topic}/subscribers", response_model=BulkOut, responses=errors(404, 422))
def bulk_subscribe(
    type: TypePath, topic: TopicPath, body: BulkIn, service: ServiceDep, db: DbDep, runtime: RuntimeDep
) -> BulkOut:
    """Subscribe up to 1,000 users to a topic; one result per distinct user id (unknown ids are
    reported as not_found, the others are still subscribed)."""
    results = topic_subscriptions.bulk_subscribe_topic(
        db, runtime.statements, service, type, topic, [str(u) for u in body.user_ids]
    )
    tally = {s: sum(1 for r in results if r["status"] == s) for s in ("subscribed", "already_subscribed", "not_found")}
    return BulkOut.model_validate({"results": results, **tally})
