"""A user's tags, read and written (the rules: ``notee/domain/tags.py``; docs/AUDIENCES.md "Tags").

Every writer locks the user's row exclusively first, as every other writer of a user's rows does
(``notee/domain/users.py``): a deletion of the user in progress finishes first (its tags cascade) and
the write then answers 404; a deletion that comes later waits for the write and removes its tags
too. Two writers of one user's tags take turns, so the key limit is checked against what the other
committed: the transaction runs at READ COMMITTED (``begin_write``, before its first statement), so
the reads after the lock see the latest commits, without gap locks. The caller commits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from notee.core.errors import NotFound
from notee.domain import tags, users
from notee.domain.rules import check_text, check_user_id
from notee.store import tags_sql
from notee.store import users_sql as users_store
from notee.store.cql.statements import Statements
from notee.store.mysql import read_committed


def begin_write(session: Session) -> None:
    """Start a tag writer's transaction at READ COMMITTED (a no-op once it ran a statement: call it
    first, before the ``ext:`` lookup of the user)."""
    read_committed(session)


def _lock_user(session: Session, service: str, user_id: str) -> str:
    row = users_store.get_user(session, service, check_user_id(user_id), for_update=True)
    if row is None:
        raise NotFound("user not found")
    return str(row.user_id)


def _values(stored: dict[str, tags.StoredTag]) -> dict[str, tags_sql.TagValue]:
    return {key: tags_sql.TagValue(t.kind, t.value_str, t.value_num) for key, t in stored.items()}


def read_json(session: Session, service: str, user_id: str) -> dict[str, Any]:
    """The user's tags as the API shows them (its user must exist: the caller checked)."""
    rows = tags_sql.read(session, service, user_id)
    return tags.tags_json((key, tags.StoredTag(v.kind, v.value_str, v.value_num)) for key, v in rows.items())


def get_tags(session: Session, service: str, user_id: str) -> dict[str, Any]:
    """A user's tags (NotFound: no such user of this service)."""
    if users_store.get_user(session, service, check_user_id(user_id)) is None:
        raise NotFound("user not found")
    return read_json(session, service, user_id)


def apply_patch(session: Session, service: str, user_id: str, patch: tags.TagPatch, *, limit: int) -> None:
    """Apply a checked merge patch to a user whose row the caller holds locked: 422 (``too_many_tags``)
    and nothing written when the result would hold more than ``limit`` keys."""
    tags.check_count(tags_sql.keys(session, service, user_id), patch, limit=limit)
    tags_sql.delete_keys(session, service, user_id, patch.remove)
    tags_sql.upsert(session, service, user_id, _values(patch.set))


def patch_tags(session: Session, service: str, user_id: str, body: Any, *, limit: int) -> dict[str, Any]:
    """A JSON merge patch (RFC 7396) of a user's tags; returns them all as they are then."""
    patch = tags.check_patch(body, limit=limit)
    begin_write(session)
    user_id = _lock_user(session, service, user_id)
    apply_patch(session, service, user_id, patch, limit=limit)
    return read_json(session, service, user_id)


def replace_tags(session: Session, service: str, user_id: str, body: Any, *, limit: int) -> dict[str, Any]:
    """Make ``body`` the user's whole set of tags; returns them."""
    stored = tags.check_replacement(body, limit=limit)
    begin_write(session)
    user_id = _lock_user(session, service, user_id)
    tags_sql.replace(session, service, user_id, _values(stored))
    return read_json(session, service, user_id)


def delete_tag(session: Session, service: str, user_id: str, key: str) -> None:
    """Remove one key (NotFound: no such user, or it does not hold the key)."""
    if not tags.TAG_KEY_RE.fullmatch(key):
        raise NotFound("tag not found")  # (the route's pattern answers 422 first)
    begin_write(session)
    user_id = _lock_user(session, service, user_id)
    if not tags_sql.delete_keys(session, service, user_id, [key]):
        raise NotFound("tag not found")


def upsert_user(
    session: Session,
    statements: Callable[[], Statements],
    service: str,
    service_user_id: str,
    profile: dict[str, Any],
    *,
    tags_body: Any = users.KEEP,
    limit: int,
) -> users.User:
    """``users.upsert_user`` (``profile``: its keyword arguments) and the user's tags in one unit of
    work: ``tags_body`` a merge patch of them (422s name ``["body", "tags", key]``), None to remove
    them all, ``KEEP`` to leave them. Everything is checked before anything is written, Cassandra
    included (a zone change)."""
    if tags_body is users.KEEP:
        return users.upsert_user(session, statements, service, service_user_id, **profile)
    check_text("service_user_id", service_user_id, min_len=1, max_len=191)
    begin_write(session)
    loc = ("body", "tags")
    patch = tags.check_patch(tags_body, limit=limit, loc=loc) if tags_body is not None else None
    found = users_store.user_zone(session, service, service_user_id)
    if found is not None:  # an existing user: locked (a record lock), its keys counted first
        users_store.user_zone_for_update(session, service, service_user_id)
        if patch is not None:
            tags.check_count(tags_sql.keys(session, service, found[0]), patch, limit=limit, loc=loc)
    user = users.upsert_user(session, statements, service, service_user_id, **profile)
    if patch is None:
        tags_sql.replace(session, service, user.user_id, {})
    else:
        apply_patch(session, service, user.user_id, patch, limit=limit)
    return user
