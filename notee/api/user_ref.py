"""The user a path names, by either id: Notee's ``user_id`` (a UUID) or the service's own id
written ``ext:<service_user_id>`` (as OneSignal's external id and Novu's subscriber id), on every
``/v1/users/{user_id}/...`` route. The UUID form is taken as it is (no lookup: the busiest routes
pay nothing); the ``ext:`` form is looked up in MySQL once per request (a NotFound, 404, when the
service has no such user: another tenant's ids are as unknown as missing ones).

The service's id travels in one path segment: ``/`` in it cannot be sent (``%2F`` is decoded before
routing); such ids use the UUID form (docs/API.md "Users by your own id")."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from anyio import to_thread
from fastapi import Depends, Path

from notee.api.auth import ServiceDep
from notee.api.deps import DbDep
from notee.domain import users

EXT = "ext:"
USER_REF_PATTERN = r"^(?:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}|ext:[^\x00-\x1f\x7f-\x9f/]{1,191})$"

UserRefPath = Annotated[
    str,
    Path(
        pattern=USER_REF_PATTERN,
        description="The user: Notee's user_id (UUID), or `ext:` and the service's own id (`ext:alice`).",
        examples=["3f2b9c1e-8d4a-4c6b-9e2f-1a7d5b0c4e88", "ext:alice"],
    ),
]


async def resolve_user(user_id: UserRefPath, service: ServiceDep, db: DbDep) -> str:
    """The platform user_id the path names (canonical lowercase UUID)."""
    if not user_id.startswith(EXT):
        return str(UUID(user_id))
    return await to_thread.run_sync(users.user_id_of, db, service, user_id[len(EXT) :])


UserDep = Annotated[str, Depends(resolve_user)]
