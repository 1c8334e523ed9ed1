"""Service-scoped users: register/update by the service's own id, read and delete by platform id."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, Field

from notee.api import cursors
from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.models import UserIn, UserOut, errors
from notee.api.query_params import query_instant
from notee.api.user_ref import UserDep
from notee.core import clock
from notee.core.vocabulary import Os, UserFilter
from notee.domain import user_tags, users
from notee.domain.users import KEEP

router = APIRouter(prefix="/v1/users", tags=["users"])

# The domain checks its text rule (the document states it); "/" cannot travel in one path segment.
ServiceUserIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=191,
        description="The service's own user id",
        json_schema_extra={"pattern": r"^[^\x00-\x1f\x7f-\x9f/]+$"},
    ),
]


@router.put("/{service_user_id}", response_model=UserOut, responses={201: {"model": UserOut, "description": "Created"}})
def put_user(
    service_user_id: ServiceUserIdPath,
    body: UserIn,
    service: ServiceDep,
    db: DbDep,
    runtime: RuntimeDep,
    response: Response,
) -> users.User:
    """Create or update a user; the same service_user_id always returns the same user_id (201 when
    created). A field left out of the body stays as it is (a new user's name is empty); a field
    sent as null is cleared (locale, timezone, quiet_hours; tags: all of them). ``tags`` is a merge
    patch of the user's tags, as PATCH /v1/users/{user_id}/tags takes it; the answer leaves them out."""
    given = body.model_fields_set
    profile: dict[str, Any] = {
        "name": body.name if "name" in given else KEEP,
        "locale": body.locale if "locale" in given else KEEP,
        "timezone": body.timezone if "timezone" in given else KEEP,
        "quiet_hours": (body.quiet_hours.model_dump() if body.quiet_hours else None)
        if "quiet_hours" in given
        else KEEP,
    }
    user = user_tags.upsert_user(
        db,
        lambda: runtime.statements,
        service,
        service_user_id,
        profile,
        tags_body=body.tags if "tags" in given else KEEP,
        limit=runtime.settings.tags_per_user_max,
    )
    db.commit()
    response.status_code = 201 if user.created else 200
    return user


class UserList(BaseModel):
    items: list[UserOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null at the end.")


@router.get("", response_model=UserList, responses=errors(422))
def list_users(
    service: ServiceDep,
    db: DbDep,
    created_since: Annotated[
        str | None,
        Query(max_length=40, json_schema_extra={"format": "date-time"}, description="Created at or after (RFC 3339)."),
    ] = None,
    has_devices: Annotated[
        bool | None, Query(description="true: only users with a device; false: only without.")
    ] = None,
    platform: Annotated[Os | None, Query(description="Only users with a device of this platform.")] = None,
    cursor: Annotated[str | None, cursors.query(200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> UserList:
    """The service's users, newest first, a page at a time (pass ``next_cursor`` back as ``cursor``:
    stable while users are added), filtered by creation time, by having devices and by platform."""
    wanted = UserFilter(
        created_since=query_instant(created_since, "created_since"),
        has_devices=has_devices,
        platform=platform,
        before=_position(cursor) if cursor else None,
        limit=limit,
    )
    found = users.list_users(db, service, wanted)
    last = found[-1] if len(found) == limit else None
    return UserList(
        items=[UserOut.model_validate(u) for u in found],
        next_cursor=cursors.encode_position(last.created_at, last.user_id) if last else None,
    )


def _position(cursor: str) -> tuple[datetime, str]:
    at, user_id = cursors.decode_position(cursor)
    return clock.naive_utc(at), user_id  # the column holds naive UTC; the answer shows it aware


@router.get("/{user_id}", response_model=UserOut, responses=errors(404))
def get_user(user_id: UserDep, service: ServiceDep, db: DbDep) -> users.User:
    """One user by Notee's user_id."""
    return users.get_user(db, service, user_id)


@router.delete("/{user_id}", status_code=204, response_class=Response, responses=errors(404))
def delete_user(user_id: UserDep, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> None:
    """Delete the user, its devices and its subscriptions."""
    users.delete_user(db, runtime.statements, service, user_id)
    db.commit()
