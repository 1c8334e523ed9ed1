"""Service-scoped users: register/update by the service's own id, read and delete by platform id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.models import UserIn, UserOut, errors
from notee.api.user_ref import UserDep
from notee.domain import users
from notee.domain.users import KEEP

router = APIRouter(prefix="/v1/users", tags=["users"])

ServiceUserIdPath = Annotated[str, Path(min_length=1, max_length=191, description="The service's own user id")]


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
    sent as null is cleared (locale, timezone, quiet_hours)."""
    given = body.model_fields_set
    user = users.upsert_user(
        db,
        lambda: runtime.statements,
        service,
        service_user_id,
        name=body.name if "name" in given else KEEP,
        locale=body.locale if "locale" in given else KEEP,
        timezone=body.timezone if "timezone" in given else KEEP,
        quiet_hours=(body.quiet_hours.model_dump() if body.quiet_hours else None) if "quiet_hours" in given else KEEP,
    )
    db.commit()
    response.status_code = 201 if user.created else 200
    return user


@router.get("/{user_id}", response_model=UserOut, responses=errors(404))
def get_user(user_id: UserDep, service: ServiceDep, db: DbDep) -> users.User:
    """One user by Notee's user_id."""
    return users.get_user(db, service, user_id)


@router.delete("/{user_id}", status_code=204, response_class=Response, responses=errors(404))
def delete_user(user_id: UserDep, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> None:
    """Delete the user, its devices and its subscriptions."""
    users.delete_user(db, runtime.statements, service, user_id)
    db.commit()
