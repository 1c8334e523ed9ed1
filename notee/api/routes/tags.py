"""A user's tags (docs/AUDIENCES.md "Tags"): read, merge-patch (RFC 7396), replace, delete one key."""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Body, Depends, Path, Response
from pydantic import Field

from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.documented import TAGS, TAGS_PATCH
from notee.api.models import Answer, errors
from notee.api.user_ref import UserDep, UserRefPath, resolve_user
from notee.domain import user_tags
from notee.domain.tags import TAG_KEY_PATTERN

router = APIRouter(prefix="/v1/users", tags=["users"])

_EXAMPLE = {"plan": "pro", "age": 31, "beta": True, "renews": {"timestamp": "2026-12-31T00:00:00Z"}}
_LIMIT = "At most NOTEE_TAGS_PER_USER_MAX (100) keys per user: a write that would leave more is 422 and writes nothing."

# The body stays plain JSON for pydantic; notee.domain.tags checks it (its 422 names the key).
TagsBody = Annotated[
    dict[str, Any],
    TAGS,
    Body(
        description="Every tag the user is to hold, key: value (string, number, boolean or "
        '{"timestamp": RFC 3339}). ' + _LIMIT,
        examples=[_EXAMPLE],
    ),
]
PatchBody = Annotated[
    dict[str, Any],
    TAGS_PATCH,
    Body(
        description="A JSON merge patch (RFC 7396): each key given is set, a key given null is removed, the "
        "others stay. " + _LIMIT,
        examples=[{"plan": "pro", "trial": None}],
    ),
]
KeyPath = Annotated[str, Path(pattern=TAG_KEY_PATTERN, description="The tag's key")]


class TagsOut(Answer):
    user_id: str = Field(description="Platform user id (UUID)")
    tags: Annotated[dict[str, Any], TAGS] = Field(description="key: value, keys in order")


async def _locked_user(user_id: UserRefPath, service: ServiceDep, db: DbDep) -> str:
    """The user a write names: its transaction at READ COMMITTED before its first statement (the
    ``ext:`` lookup), so the reads after the user's row lock see what the last writer committed."""
    await to_thread.run_sync(user_tags.begin_write, db)
    return await resolve_user(user_id, service, db)


WriteUserDep = Annotated[str, Depends(_locked_user)]


@router.get("/{user_id}/tags", response_model=TagsOut, responses=errors(404))
def get_tags(user_id: UserDep, service: ServiceDep, db: DbDep) -> TagsOut:
    """The user's tags."""
    return TagsOut(user_id=user_id, tags=user_tags.get_tags(db, service, user_id))


@router.patch("/{user_id}/tags", response_model=TagsOut, responses=errors(404, 422))
def patch_tags(user_id: WriteUserDep, body: PatchBody, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> TagsOut:
    """Set and remove tags (a JSON merge patch: null removes a key); answers every tag the user holds then."""
    found = user_tags.patch_tags(db, service, user_id, body, limit=runtime.settings.tags_per_user_max)
    db.commit()
    return TagsOut(user_id=user_id, tags=found)


@router.put("/{user_id}/tags", response_model=TagsOut, responses=errors(404, 422))
def replace_tags(user_id: WriteUserDep, body: TagsBody, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> TagsOut:
    """Replace all of the user's tags with these (``{}`` removes them all)."""
    found = user_tags.replace_tags(db, service, user_id, body, limit=runtime.settings.tags_per_user_max)
    db.commit()
    return TagsOut(user_id=user_id, tags=found)


@router.delete("/{user_id}/tags/{key}", status_code=204, response_class=Response, responses=errors(404))
def delete_tag(user_id: WriteUserDep, key: KeyPath, service: ServiceDep, db: DbDep) -> None:
    """Remove one tag (404 when the user does not hold it)."""
    user_tags.delete_tag(db, service, user_id, key)
    db.commit()
