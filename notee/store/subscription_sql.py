"""The few MySQL reads the subscription domain needs beyond notee/store/registry_sql.py: bulk lookups
for the 1,000-user subscribe, every live template key for `notee reconcile`, the live CYCLE templates for
the cycle calendar. SQLAlchemy Core over
registry_sql.py's Table objects; the caller owns the Session."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from notee.store.registry_sql import device_t, template_t, user_t


def existing_users(session: Session, service: str, user_ids: Sequence[str]) -> set[str]:
    """Which of ``user_ids`` exist in ``service`` (uq_user_user_id)."""
    if not user_ids:
        return set()
    q = select(user_t.c.user_id).where(and_(user_t.c.service == service, user_t.c.user_id.in_(list(user_ids))))
    return {r.user_id for r in session.execute(q)}


def devices_of_users(session: Session, service: str, user_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """user_id -> [(device_token, device_os)] for many users in one query (device primary key prefix)."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    if not user_ids:
        return out
    q = select(device_t.c.user_id, device_t.c.device_token, device_t.c.device_os).where(
        and_(device_t.c.service == service, device_t.c.user_id.in_(list(user_ids)))
    )
    for r in session.execute(q):
        out[r.user_id].append((r.device_token, r.device_os))
    return out


def live_template_keys(session: Session, service: str | None = None) -> set[str]:
    """notification_key of every existing template (of one service, or all): a subscription row whose
    key is not here belongs to a deleted template."""
    q = select(template_t.c.notification_key)
    if service is not None:
        q = q.where(template_t.c.service == service)
    return {r.notification_key for r in session.execute(q)}


def live_cycle_templates(session: Session, service: str | None = None) -> dict[str, tuple[str, str]]:
    """notification_key -> (service, type) of every CYCLE template (of one service, or all): one query."""
    q = select(template_t.c.notification_key, template_t.c.service, template_t.c.notification_type).where(
        template_t.c.notification_method == "CYCLE"
    )
    if service is not None:
        q = q.where(template_t.c.service == service)
    return {r.notification_key: (r.service, r.notification_type) for r in session.execute(q)}
