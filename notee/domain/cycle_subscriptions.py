"""Cycle subscriptions: a user's recurring schedule of a CYCLE template (one per type; a new one
replaces the previous), and unsubscribe. A cycle subscribe holds the user's row shared, the
unsubscribe exclusively (notee/domain/subscriptions.py, "deletion wins")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from notee.core.errors import NotFound
from notee.domain.schedule import make_schedule
from notee.domain.subscription_rows import (
    SubscribeResult,
    TemplateKey,
    first_of_type,
    live_user_level,
    lock_user,
    materialise,
    now_ms,
    remove_rows,
    template,
    unsubscribe,
    user_devices,
)
from notee.domain.withdrawals import settle_users, write_or_withdraw
from notee.store import services_sql, users_sql
from notee.store.cql.rows import IndexRow, SubscriptionRef
from notee.store.cql.statements import Statements


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    """A schedule as a subscribe asks for it, not yet validated (``make_schedule`` does): local days,
    hour and minute in ``timezone`` (None: the service's)."""

    days: list[str]
    hour: int
    minute: int
    timezone: str | None = None


def subscribe_cycle(
    session: Session, st: Statements, service: str, user_id: str, type_: str, wanted: ScheduleRequest
) -> SubscribeResult:
    """Subscribe (or re-subscribe: the new schedule replaces the previous one of this type).

    Latest wins without a read-modify-write: every schedule is its own index row; after writing ours
    we re-read the type and delete every schedule that is not the maximum (registered_at, target).
    Racing re-subscribes all compute the same maximum from what they see, so they converge on one
    schedule and no slot row is left without its index row."""
    locked = lock_user(session, service, user_id)  # first: deletion wins (notee/domain/subscriptions.py)
    timezone = wanted.timezone
    if timezone is None:
        svc = services_sql.get_service(session, service)
        timezone = svc.timezone if svc is not None else "Asia/Seoul"
    schedule = make_schedule(wanted.days, wanted.hour, wanted.minute, timezone)
    tpl = template(session, service, "CYCLE", type_)
    devices = user_devices(session, service, user_id, locked=locked is not None)
    target = schedule.canonical
    before = st.user_type_rows(user_id, service, "CYCLE", type_)
    live = live_user_level(before, tpl.key)
    had_type = bool(live)
    winner = max(live, key=lambda r: (int(r.data.get("at", 0)), r.target)) if live else None
    mine = [r for r in before if r.target == target and r.data.get("key") == tpl.key]
    have = {r.device_token for r in mine if not r.is_user_level}
    missing = [(t, o) for t, o in devices if t not in have]
    losers = [r for r in before if r.target != target or r.data.get("key") != tpl.key]
    if winner is not None and winner.target == target and not missing and not losers:
        return {"status": "already_subscribed", "schedule": target, "devices": len(have)}
    at = max(now_ms(), int(winner.data.get("at", 0)) + 1 if winner is not None else 0)
    if winner is not None and winner.target == target:
        at = int(winner.data["at"])  # same schedule: keep its place
    sub = SubscriptionRef(service, user_id, type_, tpl.key, target, at)
    # Cycle rows carry no zone (their bucket has its own).
    new = materialise(st, sub, missing, schedule=schedule, zone=locked or "", written_at=st.write_timestamp())
    write_or_withdraw(st, service, new)
    st.run([st.write_user_level(user_id, service, "CYCLE", type_, target, tpl.key, at)])
    # The due index is written after the subscription rows (reconcile relies on that order).
    st.run(
        st.mark_due(
            service=service,
            type_=type_,
            notification_key=tpl.key,
            timezone=schedule.timezone,
            days=schedule.days,
            hour=schedule.hour,
            minute=schedule.minute,
        )
    )
    after = st.user_type_rows(user_id, service, "CYCLE", type_)
    _keep_latest_schedule(st, service, user_id, tpl, after)
    if not had_type and first_of_type(after, tpl.key, target, at):
        st.add_count(service, "CYCLE", type_, +1)
    return {"status": "subscribed", "schedule": target, "devices": len(have) + len(missing)}


def _keep_latest_schedule(
    st: Statements, service: str, user_id: str, tpl: TemplateKey, rows: Sequence[IndexRow]
) -> None:
    # The latest schedule is chosen among *all* rows of the template, device rows included: a racing
    # request writes its device rows before its user-level row, and judging by user-level rows only
    # would delete the device rows of the schedule that wins a moment later.
    live = [r for r in rows if r.data.get("key") == tpl.key]
    if not live:
        return
    keep = max(live, key=lambda r: (int(r.data.get("at", 0)), r.target)).target
    losers = [r for r in rows if r.target != keep or r.data.get("key") != tpl.key]
    if losers:
        remove_rows(st, service, user_id, losers)


def unsubscribe_cycle(session: Session, st: Statements, service: str, user_id: str, type_: str) -> bool:
    """Remove the user's schedule of this type (every device's rows); True when one was removed.

    The user's row is locked exclusively, first (deletion wins: notee/domain/subscriptions.py). A
    deletion waits for this removal (and finds the rows gone, so the user leaves ``count`` once), or
    this one finds no user. Exclusive (as the topic unsubscribe): a cycle subscribe or a device's copy
    holds the row shared, and one caught between writing its device rows and its user-level row would
    otherwise leave a schedule listed and counted whose device rows this removal deleted."""
    if users_sql.get_user(session, service, user_id, for_update=True) is None:
        raise NotFound("user not found")
    tpl = template(session, service, "CYCLE", type_)
    settle_users(session, st, service, [user_id], exclusive=True)
    return unsubscribe(st, service, user_id, tpl, lambda r: True)
