"""The per-page recipient reads of a template rendered per recipient (docs/TEMPLATES.md): each
recipient's profile (locale, time zone, name, id) and tags, one query each per fan-out page, never
per device. SQLAlchemy Core over ``user``, ``device``, ``service`` (schema/mysql/0001_core.sql) and
``user_tag`` (0026_audiences.sql); every function takes the caller's Session and never commits.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from notee.store.services_sql import service_t
from notee.store.tags_sql import user_tag_t
from notee.store.users_sql import device_t, user_t


def recipient_profiles(
    session: Session, service: str, user_ids: Collection[str]
) -> dict[tuple[str, str], tuple[str | None, str | None, str, str]]:
    """(user_id, device_token) -> (locale: the device's, else its user's; time zone: the user's, else
    the service's; the user's name; its service user id) of every device of these users: one query
    per fan-out page of a template that depends on the recipient (uq_user_user_id, the device and
    service primary keys)."""
    if not user_ids:
        return {}
    rows = session.execute(
        select(
            device_t.c.user_id,
            device_t.c.device_token,
            func.coalesce(device_t.c.locale, user_t.c.locale),
            func.coalesce(user_t.c.timezone, service_t.c.timezone),
            user_t.c.service_user_name,
            user_t.c.service_user_id,
        )
        .join(user_t, and_(user_t.c.service == device_t.c.service, user_t.c.user_id == device_t.c.user_id))
        .join(service_t, service_t.c.service == device_t.c.service)
        .where(and_(device_t.c.service == service, device_t.c.user_id.in_(list(user_ids))))
    )
    return {(r[0], r[1]): (r[2], r[3], r[4] or "", r[5]) for r in rows}


def recipient_tags(session: Session, service: str, user_ids: Collection[str]) -> dict[str, dict[str, Any]]:
    """user_id -> {tag key: value} of these users' tags (``user_tag``, schema 0026: a string, a number,
    a boolean, or a timestamp as seconds since the epoch): one query per fan-out page of a template
    that reads ``recipient.tags`` (the primary key)."""
    if not user_ids:
        return {}
    rows = session.execute(
        select(
            user_tag_t.c.user_id,
            user_tag_t.c.tag_key,
            user_tag_t.c.kind,
            user_tag_t.c.value_str,
            user_tag_t.c.value_num,
        ).where(and_(user_tag_t.c.service == service, user_tag_t.c.user_id.in_(list(user_ids))))
    )
    out: dict[str, dict[str, Any]] = {}
    for user_id, key, kind, text_, number in rows:
        value: Any = text_ if kind == "s" else bool(number) if kind == "b" else number
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        out.setdefault(user_id, {})[key] = value
    return out
