"""Topic subscriptions: subscribe one user or many (the API's single subscribe, gathered, and the bulk
endpoint both go through ``subscribe_topics``), and unsubscribe. Every topic subscribe holds its
users' rows exclusively (notee/domain/subscriptions.py, "deletion wins"), so its read of the users'
rows alone decides whether a user is new to the type."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TypedDict

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from notee.core.errors import InvalidInput, NotFound
from notee.domain.schedule import validate_topic
from notee.domain.subscription_rows import (
    NewRows,
    SubscribeResult,
    live_user_level,
    new_device_row,
    now_ms,
    remove_rows,
    template,
    template_of,
    unsubscribe,
)
from notee.domain.withdrawals import settle_locked, settle_users, write_or_withdraw
from notee.store import subscription_sql as subsql
from notee.store import users_sql
from notee.store.cql.rows import USER_LEVEL, IndexRow, SubscriptionRef
from notee.store.cql.statements import Statements

BULK_MAX = 1000  # FCM's batch size: one bulk request = one multicast's worth of users


class BulkOutcome(TypedDict):
    user_id: str
    status: str  # "subscribed" | "already_subscribed" | "not_found"


def end_transaction(db: Connection) -> None:
    """End the transaction ``subscribe_topics`` ran in on a Core connection the caller keeps: the
    users' locks end (``subscription_sql.end_driver_transaction``)."""
    subsql.end_driver_transaction(db)


def subscribe_topic(
    db: Session | Connection, st: Statements, service: str, user_id: str, type_: str, topic: str
) -> SubscribeResult:
    """One topic subscription (``subscribe_topics`` of one pair): NotFound for an unknown user."""
    (result,) = subscribe_topics(db, st, service, type_, [(user_id, topic)])
    if result is None:
        raise NotFound("user not found")
    return result


def subscribe_topics(
    db: Session | Connection,
    st: Statements,
    service: str,
    type_: str,
    wanted: Sequence[tuple[str, str]],
    *,
    topics_checked: bool = False,
) -> list[SubscribeResult | None]:
    """Topic subscriptions of one type: ``wanted`` (user_id, topic) pairs, one result each, in order
    (None: no such user). A pair asked twice, or a user with several topics, is answered as if the
    pairs ran one after the other. Round trips, however many pairs: MySQL's exclusive row locks of the
    users and one read (the type's templates, the users' devices, which users have kept withdrawals:
    those are applied first and the index rows read again, ``withdrawals.settle_locked``), with the
    users' index rows of the type read from Cassandra meanwhile; the logged batches (each
    subscription's rows are one unit, written whole or not at all); one counter batch. Numbers come
    from the process's reserved range (``Statements.take_numbers``). ``db``: a session, or (the API's
    hot path) a Core connection; the caller ends its transaction. The API's single subscribe and the
    bulk endpoint both come here (notee.api.subscribe_groups gathers concurrent single subscribes of a
    type into one call), and an import's lines (``topics_checked``: each topic passed ``validate_topic``)."""
    for _, topic in () if topics_checked else wanted:
        validate_topic(topic)
    # Deletion wins (issue 14.5, notee/domain/subscriptions.py): the users' row locks come first, and
    # the index reads start only once they are held, so they see whatever a racing deletion or
    # rotation did (the index reads still overlap the context read). The locks are exclusive: every
    # other writer of these users' rows has finished, so the read alone tells whether a user is new to
    # the type (``count``), with no re-read after the write.
    zones = subsql.lock_users_zones(db, service, [u for u, _ in wanted], exclusive=True)
    reads = st.users_type_rows_async(list(zones), service, "TOPIC", type_) if zones else []
    ctx = subsql.subscribe_context(db, service, type_, list(zones))
    if ctx.kept:  # a failed write's rows may still land (the batchlog): shadow them first, then read again
        settle_locked(st, service, sorted(ctx.kept))
        reads = st.users_type_rows_async(list(zones), service, "TOPIC", type_)
    tpl = template_of(ctx.template_keys, service, "TOPIC", type_)
    before = st.users_rows_of(reads)
    # Each user's live rows of the type as the plan so far leaves them: a later pair of the same user
    # sees what an earlier one is about to write (kept only for users asked for again, ``again``: a
    # bulk subscribe or an import chunk names each user once, and needs no IndexRow per planned row).
    live = {u: [r for r in before.get(u, []) if r.data.get("key") == tpl.key] for u in zones}
    again = {u for u, n in Counter(u for u, _ in wanted).items() if n > 1}
    now = now_ms()
    results: list[SubscribeResult | None] = []
    plans: list[tuple[SubscriptionRef, list[tuple[str, str]], bool]] = []  # subscription, devices, user-level row
    topic_counts: dict[str, int] = {}
    new_to_type = 0
    for user_id, topic in wanted:
        if user_id not in zones or user_id not in ctx.devices:
            results.append(None)
            continue
        mine = [r for r in live[user_id] if r.target == topic]
        have = {r.device_token for r in mine if not r.is_user_level}
        level = next((r for r in mine if r.is_user_level), None)
        missing = [(t, o) for t, o in ctx.devices[user_id] if t not in have]
        if level is None or missing:
            at = int(level.data.get("at") or now) if level is not None else now
            plans.append((SubscriptionRef(service, user_id, type_, tpl.key, topic, at), missing, level is None))
            if level is None:
                topic_counts[topic] = topic_counts.get(topic, 0) + 1
                new_to_type += 0 if live_user_level(live[user_id], tpl.key) else 1
            if user_id in again:
                planned = [IndexRow("TOPIC", type_, topic, t, {"key": tpl.key, "at": at}) for t, _ in missing]
                if level is None:
                    planned.append(IndexRow("TOPIC", type_, topic, USER_LEVEL, {"key": tpl.key, "at": at}))
                live[user_id] = live[user_id] + planned
        status = "already_subscribed" if level is not None else "subscribed"
        results.append({"status": status, "devices": len(have) + len(missing)})
    if not plans:
        return results
    for user_id in sorted({sub.user_id for sub, _, _ in plans}):  # rows left by a deleted template of this type
        stale = [r for r in before.get(user_id, []) if r.data.get("key") != tpl.key]
        if stale:
            remove_rows(st, service, user_id, stale)
    _write_plans(st, service, type_, plans, zones)
    # Per-topic counts (issue 16; docs/SCHEMA.md decision 3) and, for users new to the type, ``count``:
    # one counter batch, only once the subscription rows exist.
    st.add_subscriber_counts(service, "TOPIC", type_, topic_counts, new_to_type)
    return results


def _write_plans(
    st: Statements,
    service: str,
    type_: str,
    plans: list[tuple[SubscriptionRef, list[tuple[str, str]], bool]],
    zones: dict[str, str],
) -> None:
    """Number the planned devices and write every subscription's rows (a unit each), withdrawn on a
    failure (``write_or_withdraw``)."""
    numbers = iter(st.take_numbers(service, "TOPIC", type_, sum(len(devices) for _, devices, _ in plans)))
    numbered = [(sub, [(next(numbers), t, o) for t, o in devices], level) for sub, devices, level in plans]
    written_at = st.write_timestamp()
    units = [
        st.topic_subscription_rows(sub, devices, with_user_level=level, zone=zones[sub.user_id], written_at=written_at)
        for sub, devices, level in numbered
    ]
    written = [new_device_row(sub, "TOPIC", no, token) for sub, devices, _ in numbered for no, token, _ in devices]
    written += [(sub.user_id, IndexRow("TOPIC", type_, sub.target, USER_LEVEL, {})) for sub, _, lvl in numbered if lvl]
    write_or_withdraw(st, service, NewRows(written_at, written, [lambda: st.write_together(units)]))


def unsubscribe_topic(session: Session, st: Statements, service: str, user_id: str, type_: str, topic: str) -> bool:
    validate_topic(topic)
    # The user's row exclusively, first (a zone change, exclusive too, must not meet a row this removal
    # deletes). Exclusive, not shared: no writer of the user can then still wait on its batch, so every
    # kept withdrawal is applied before the rows are read, also the ``unanswered`` one of a subscribe
    # whose process died with its batch in a batchlog: replayed after this 204, it would otherwise bring
    # the subscription back until reconcile (issue 31, chaos seed 3131, docs/RELIABILITY.md).
    if users_sql.get_user(session, service, user_id, for_update=True) is None:
        raise NotFound("user not found")
    tpl = template(session, service, "TOPIC", type_)
    settle_users(session, st, service, [user_id], exclusive=True)
    removed = unsubscribe(st, service, user_id, tpl, lambda r: r.target == topic)
    if removed:
        st.run([st.add_topic_subscribers_async(service, type_, topic, -1)])
    return removed


def bulk_subscribe_topic(
    db: Session | Connection, st: Statements, service: str, type_: str, topic: str, user_ids: Sequence[str]
) -> list[BulkOutcome]:
    """Subscribe up to BULK_MAX users (``subscribe_topics``); one result per distinct user id, in
    request order: ``subscribed`` | ``already_subscribed`` | ``not_found``. Unknown users are reported,
    not fatal."""
    validate_topic(topic)
    if not user_ids:
        raise InvalidInput("user_ids must not be empty", details=[{"field": "user_ids", "reason": "empty"}])
    if len(user_ids) > BULK_MAX:
        raise InvalidInput(
            f"at most {BULK_MAX} user_ids per request",
            details=[{"field": "user_ids", "reason": "too_many", "max": BULK_MAX}],
        )
    ordered = list(dict.fromkeys(user_ids))
    results = subscribe_topics(db, st, service, type_, [(u, topic) for u in ordered])
    return [
        {"user_id": u, "status": "not_found" if r is None else r["status"]}
        for u, r in zip(ordered, results, strict=True)
    ]
