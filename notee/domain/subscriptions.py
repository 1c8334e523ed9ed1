"""Topic and cycle subscriptions: subscribe, unsubscribe, list, bulk, and the device/user/template
lifecycle hooks the registry and the fan-out engine call.

Model (docs/SCHEMA.md): a subscription belongs to a *user* and is recorded by one per-user index row
with ``device_token = ''`` (the user-level row; it exists even when the user has no device). It is
materialised per *device*: each device gets a number from the ``no`` counter, its slot rows
(``slot = no // 30000``) and an index row pointing at them, written together in one logged batch.

Unit of work (docs/ARCHITECTURE.md): every function takes the caller's MySQL Session (read-only
here, except ``prune_token``'s device deletes, which the caller commits) and the process's
``Statements``; none opens a session of its own.

Every request validates everything (both stores are read-only until then), so bad input writes
nothing. Writes are idempotent per (user, method, type, target, device): a retried request, or two
requests racing, converge on the same rows.

Deletion wins (issue 14.5, docs/SCHEMA.md "Races"): whoever writes a user's rows holds a lock on the
user's MySQL row for the whole write: a shared one to add rows (cycle subscribe, a device's copy),
an exclusive one to change the user's devices or delete it (registry, ``prune_token``) and for every
topic subscribe, single or bulk (its read of the user's rows then decides alone whether the user is
new to the type). The lock is the first statement of the transaction, so the MySQL reads after it
(REPEATABLE READ snapshot) see every deletion committed before it; a deletion waits for a write in
progress, then finds its rows.

Numbers (``no``) come from the process's reserved range (``Statements.take_numbers``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from cassandra.cluster import ResponseFuture
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from notee.core.errors import InvalidInput, NotFound
from notee.core.vocabulary import METHODS, CycleTarget
from notee.domain.schedule import Schedule, make_schedule, parse_canonical, validate_topic
from notee.store import registry_sql as reg
from notee.store import subscription_sql as subsql
from notee.store import webhooks_sql
from notee.store.cql.rows import USER_LEVEL, DeviceSlot, IndexRow, SubscriptionRef, slot_ref, slot_zone
from notee.store.cql.statements import Statements

log = logging.getLogger(__name__)

BULK_MAX = 1000  # FCM's batch size: one bulk request = one multicast's worth of users


class SubscribeResult(TypedDict):
    status: str  # "subscribed" | "already_subscribed"
    devices: int  # devices the subscription is materialised on
    schedule: NotRequired[str]  # CYCLE: the canonical schedule


class BulkOutcome(TypedDict):
    user_id: str
    status: str  # "subscribed" | "already_subscribed" | "not_found"


class ScheduleInfo(TypedDict):
    days: list[str]
    hour: int
    minute: int
    timezone: str
    canonical: str


class SubscriptionInfo(TypedDict):
    method: str
    type: str
    registered_at: int  # ms since the epoch
    devices: int
    topic: NotRequired[str]  # TOPIC
    schedule: NotRequired[ScheduleInfo]  # CYCLE


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------- MySQL lookups (read-only)
@dataclass(frozen=True, slots=True)
class _Template:
    method: str
    type_: str
    key: str


def _template(session: Session, service: str, method: str, type_: str) -> _Template:
    row = reg.get_template(session, service, method, type_)
    if row is None:
        other = [m for m in METHODS if m != method and reg.get_template(session, service, m, type_) is not None]
        if other:
            raise InvalidInput(
                f"template {type_!r} is a {other[0]} template, not {method}",
                details=[{"field": "type", "reason": "wrong_method", "method": other[0]}],
            )
        raise NotFound(f"no {method} template {type_!r}")
    return _Template(method, type_, row.notification_key)


def _lock_user(session: Session, service: str, user_id: str) -> str | None:
    """Take the shared user-row lock of a writer that adds rows (module doc); returns the zone its
    topic slot rows carry (``slot_zone``: read under the lock, so a zone change waits for this
    writer and then rewrites what it wrote), None: no such user. Call it before any other read of
    the transaction."""
    row = reg.get_user(session, service, user_id, for_share=True)
    return None if row is None else slot_zone(row.timezone)


def _user_devices(session: Session, service: str, user_id: str, *, locked: bool) -> list[tuple[str, str]]:
    """The devices of a user whose row ``_lock_user`` locked (``locked``: it exists)."""
    if not locked:
        raise NotFound("user not found")
    return [(d.device_token, d.device_os) for d in reg.list_devices(session, service, user_id)]


# ---------------------------------------------------------------------- Cassandra building blocks
def _buckets_of(row: IndexRow) -> tuple[CycleTarget, ...]:
    """The cycle buckets a CYCLE index row's slot rows are in (its schedule's days); () for TOPIC."""
    if row.method != "CYCLE":
        return ()
    return parse_canonical(row.target).buckets


def _materialise(
    st: Statements, sub: SubscriptionRef, devices: Sequence[tuple[str, str]], *, schedule: Schedule | None, zone: str
) -> list[ResponseFuture]:
    """Start the logged batches writing slot rows + index rows of ``sub`` for ``devices`` (token, os);
    return the futures. ``schedule``: a cycle subscription's (None: ``sub.target`` is a topic).
    ``zone``: the user's, stored on topic slot rows (``slot_zone``)."""
    if not devices:
        return []
    numbers = st.take_numbers(sub.service, "TOPIC" if schedule is None else "CYCLE", sub.type_, len(devices))
    if schedule is None:
        return [
            st.add_topic_device(sub, DeviceSlot(no, token, os_), zone)
            for no, (token, os_) in zip(numbers, devices, strict=True)
        ]
    buckets = schedule.buckets
    return [
        st.add_cycle_device(sub, DeviceSlot(no, token, os_), buckets)
        for no, (token, os_) in zip(numbers, devices, strict=True)
    ]


def remove_rows(
    st: Statements, service: str, user_id: str, rows: Sequence[IndexRow], *, every_holder: bool = False
) -> None:
    """Delete slot rows and index rows: device rows first, user-level rows last, so a failure halfway
    leaves the subscription listed and a retry finishes the job.

    A shared device (its token has other users in the token index) may have one slot row that two
    users' index rows refer to: two racing subscribes read the same ``no`` (docs/SCHEMA.md, "A device
    shared by several users"). Such a slot row is deleted only by whoever drops the last reference:
    our index row goes first, then the others' are read, so of two racing removals at least one
    sees the other's gone and deletes the row. ``every_holder``: all holders' rows are going (a
    pruned token), no check needed."""
    device_rows = [r for r in rows if not r.is_user_level]
    others: dict[str, list[str]] = {}
    if device_rows and not every_holder:
        reads = {t: st.token_holders_async(service, t) for t in sorted({r.device_token for r in device_rows})}
        others = {t: [u for u in st.holders_of(f) if u != user_id] for t, f in reads.items()}
    alone = [r for r in device_rows if not others.get(r.device_token)]
    shared = [r for r in device_rows if others.get(r.device_token)]
    st.run(st.remove_device_rows(user_id, service, r, _buckets_of(r)) for r in alone)
    if shared:
        st.run(st.remove_device_rows(user_id, service, r, _buckets_of(r), slot_rows=False) for r in shared)
        unreferenced = [r for r in shared if not _referenced_by_others(st, service, r, others[r.device_token])]
        st.run(st.remove_device_rows(user_id, service, r, _buckets_of(r), index_row=False) for r in unreferenced)
    st.run(st.delete_index_row(user_id, service, r) for r in rows if r.is_user_level)


def _referenced_by_others(st: Statements, service: str, row: IndexRow, users: Sequence[str]) -> bool:
    """Does another user's index row point at the slot row(s) of ``row`` (same device, target, key,
    slot and no)?"""
    ref = slot_ref(row)
    if ref is None:
        return False
    reads = [st.user_type_rows_async(u, service, row.method, row.type_) for u in users]
    return any(
        r.device_token == row.device_token and r.target == row.target and slot_ref(r) == ref
        for f in reads
        for r in st.index_rows_of(f)
    )


def _live_user_level(rows: Sequence[IndexRow], key: str) -> list[IndexRow]:
    return [r for r in rows if r.is_user_level and r.data.get("key") == key]


def _first_of_type(rows_after: Sequence[IndexRow], key: str, target: str, at: int) -> bool:
    """After writing (target, at), am I the one that should count this user? The earliest live
    subscription of the type does: two racing first subscriptions that both see each other agree on
    one winner, so `count` is incremented once (docs/SCHEMA.md, "count")."""
    live = _live_user_level(rows_after, key)
    if not live:
        return False
    first = min(live, key=lambda r: (int(r.data.get("at", 0)), r.target))
    return first.target == target


def end_transaction(db: Connection) -> None:
    """End the transaction ``subscribe_topics`` ran in on a Core connection the caller keeps: the
    users' locks end (``subscription_sql.end_driver_transaction``)."""
    subsql.end_driver_transaction(db)


# ---------------------------------------------------------------------- topic
def subscribe_topic(
    db: Session | Connection, st: Statements, service: str, user_id: str, type_: str, topic: str
) -> SubscribeResult:
    """One topic subscription (``subscribe_topics`` of one pair): NotFound for an unknown user."""
    (result,) = subscribe_topics(db, st, service, type_, [(user_id, topic)])
    if result is None:
        raise NotFound("user not found")
    return result


def subscribe_topics(
    db: Session | Connection, st: Statements, service: str, type_: str, wanted: Sequence[tuple[str, str]]
) -> list[SubscribeResult | None]:
    """Topic subscriptions of one type: ``wanted`` (user_id, topic) pairs, one result each, in order
    (None: no such user). A pair asked twice, or a user with several topics, is answered as if the
    pairs ran one after the other. Round trips, however many pairs: MySQL's exclusive row locks of the
    users and one read (the type's templates, the users' devices), with the users' index rows of the
    type read from Cassandra meanwhile; the logged batches (each subscription's rows are one unit,
    written whole or not at all); one counter batch. Numbers come from the process's reserved range
    (``Statements.take_numbers``). ``db``: a session, or (the API's hot path) a Core connection; the
    caller ends its transaction. The API's single subscribe and the bulk endpoint both come here
    (notee.api.subscribe_groups gathers concurrent single subscribes of a type into one call)."""
    for _, topic in wanted:
        validate_topic(topic)
    # Deletion wins (issue 14.5, module doc): the users' row locks come first, and the index reads
    # start only once they are held, so they see whatever a racing deletion or rotation did (the
    # index reads still overlap the context read). The locks are exclusive: every other writer of
    # these users' rows has finished, so the read alone tells whether a user is new to the type
    # (``count``), with no re-read after the write.
    zones = subsql.lock_users_zones(db, service, [u for u, _ in wanted], exclusive=True)
    reads = st.users_type_rows_async(list(zones), service, "TOPIC", type_) if zones else []
    ctx = subsql.subscribe_context(db, service, type_, list(zones))
    tpl = _template_of(ctx.template_keys, service, "TOPIC", type_)
    before = st.users_rows_of(reads)
    # Each user's live rows of the type as the plan so far leaves them: a later pair of the same user
    # sees what an earlier one is about to write.
    live = {u: [r for r in before.get(u, []) if r.data.get("key") == tpl.key] for u in zones}
    now = _now_ms()
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
            planned = [IndexRow("TOPIC", type_, topic, t, {"key": tpl.key, "at": at}) for t, _ in missing]
            if level is None:
                topic_counts[topic] = topic_counts.get(topic, 0) + 1
                new_to_type += 0 if _live_user_level(live[user_id], tpl.key) else 1
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
    numbers = iter(st.take_numbers(service, "TOPIC", type_, sum(len(devices) for _, devices, _ in plans)))
    units = [
        st.topic_subscription_rows(
            sub,
            [(next(numbers), token, os_) for token, os_ in devices],
            with_user_level=with_user_level,
            zone=zones[sub.user_id],
        )
        for sub, devices, with_user_level in plans
    ]
    st.run(st.write_together(units))
    # Per-topic counts (issue 16; docs/SCHEMA.md decision 3) and, for users new to the type, ``count``:
    # one counter batch, only once the subscription rows exist.
    st.add_subscriber_counts(service, "TOPIC", type_, topic_counts, new_to_type)
    return results


def _template_of(keys: dict[str, str], service: str, method: str, type_: str) -> _Template:
    """The template of (method, type) from ``subscribe_context``'s keys, with ``_template``'s errors."""
    if method in keys:
        return _Template(method, type_, keys[method])
    other = [m for m in METHODS if m in keys]
    if other:
        raise InvalidInput(
            f"template {type_!r} is a {other[0]} template, not {method}",
            details=[{"field": "type", "reason": "wrong_method", "method": other[0]}],
        )
    raise NotFound(f"no {method} template {type_!r}")


def unsubscribe_topic(session: Session, st: Statements, service: str, user_id: str, type_: str, topic: str) -> bool:
    validate_topic(topic)
    # The shared user-row lock like subscribe: a zone change (exclusive) rewrites the zone of rows it
    # read from the index, and must not meet a row this removal deletes in between.
    if _lock_user(session, service, user_id) is None:
        raise NotFound("user not found")
    tpl = _template(session, service, "TOPIC", type_)
    removed = _unsubscribe(st, service, user_id, tpl, lambda r: r.target == topic)
    if removed:
        st.run([st.add_topic_subscribers_async(service, type_, topic, -1)])
    return removed


def _unsubscribe(st: Statements, service: str, user_id: str, tpl: _Template, match: Callable[[IndexRow], bool]) -> bool:
    rows = st.user_type_rows(user_id, service, tpl.method, tpl.type_)
    gone = [r for r in rows if match(r) or r.data.get("key") != tpl.key]
    if not gone:
        return False
    removed_live = bool(_live_user_level([r for r in gone if match(r)], tpl.key))
    remove_rows(st, service, user_id, gone)
    if removed_live and not _live_user_level(st.user_type_rows(user_id, service, tpl.method, tpl.type_), tpl.key):
        st.add_count(service, tpl.method, tpl.type_, -1)
    return removed_live


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


# ---------------------------------------------------------------------- cycle
def subscribe_cycle(
    session: Session,
    st: Statements,
    service: str,
    user_id: str,
    type_: str,
    days: list[str],
    hour: int,
    minute: int,
    timezone: str | None = None,
) -> SubscribeResult:
    """Subscribe (or re-subscribe: the new schedule replaces the previous one of this type).

    Latest wins without a read-modify-write: every schedule is its own index row; after writing ours
    we re-read the type and delete every schedule that is not the maximum (registered_at, target).
    Racing re-subscribes all compute the same maximum from what they see, so they converge on one
    schedule and no slot row is left without its index row."""
    locked = _lock_user(session, service, user_id)  # first: deletion wins (module doc)
    if timezone is None:
        svc = reg.get_service(session, service)
        timezone = svc.timezone if svc is not None else "Asia/Seoul"
    schedule = make_schedule(days, hour, minute, timezone)
    tpl = _template(session, service, "CYCLE", type_)
    devices = _user_devices(session, service, user_id, locked=locked is not None)
    target = schedule.canonical
    before = st.user_type_rows(user_id, service, "CYCLE", type_)
    live = _live_user_level(before, tpl.key)
    had_type = bool(live)
    winner = max(live, key=lambda r: (int(r.data.get("at", 0)), r.target)) if live else None
    mine = [r for r in before if r.target == target and r.data.get("key") == tpl.key]
    have = {r.device_token for r in mine if not r.is_user_level}
    missing = [(t, o) for t, o in devices if t not in have]
    losers = [r for r in before if r.target != target or r.data.get("key") != tpl.key]
    if winner is not None and winner.target == target and not missing and not losers:
        return {"status": "already_subscribed", "schedule": target, "devices": len(have)}
    at = max(_now_ms(), int(winner.data.get("at", 0)) + 1 if winner is not None else 0)
    if winner is not None and winner.target == target:
        at = int(winner.data["at"])  # same schedule: keep its place
    sub = SubscriptionRef(service, user_id, type_, tpl.key, target, at)
    # Cycle rows carry no zone (their bucket has its own).
    st.run(_materialise(st, sub, missing, schedule=schedule, zone=locked or ""))
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
    if not had_type and _first_of_type(after, tpl.key, target, at):
        st.add_count(service, "CYCLE", type_, +1)
    return {"status": "subscribed", "schedule": target, "devices": len(have) + len(missing)}


def _keep_latest_schedule(st: Statements, service: str, user_id: str, tpl: _Template, rows: Sequence[IndexRow]) -> None:
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
    tpl = _template(session, service, "CYCLE", type_)
    if reg.get_user(session, service, user_id) is None:
        raise NotFound("user not found")
    return _unsubscribe(st, service, user_id, tpl, lambda r: True)


# ---------------------------------------------------------------------- listing
def list_subscriptions(session: Session, st: Statements, service: str, user_id: str) -> list[SubscriptionInfo]:
    """The user's subscriptions from the per-user index (one Cassandra partition). Rows of a deleted
    template (their key is no longer a template's) are not listed."""
    if reg.get_user(session, service, user_id) is None:
        raise NotFound("user not found")
    live = {t.notification_key for t in reg.list_templates(session, service)}
    rows = st.user_rows(user_id, service)
    devices: dict[tuple[str, str, str], int] = {}
    for r in rows:
        if not r.is_user_level:
            devices[(r.method, r.type_, r.target)] = devices.get((r.method, r.type_, r.target), 0) + 1
    out: list[SubscriptionInfo] = []
    for r in rows:
        if not r.is_user_level or r.data.get("key") not in live:
            continue
        item: SubscriptionInfo = {
            "method": r.method,
            "type": r.type_,
            "registered_at": int(r.data.get("at", 0)),
            "devices": devices.get((r.method, r.type_, r.target), 0),
        }
        if r.method == "TOPIC":
            item["topic"] = r.target
        else:
            sch = parse_canonical(r.target)
            item["schedule"] = {
                "days": list(sch.days),
                "hour": sch.hour,
                "minute": sch.minute,
                "timezone": sch.timezone,
                "canonical": r.target,
            }
        out.append(item)
    return out


# ---------------------------------------------------------------------- lifecycle hooks (registry, delivery)
def on_device_added(
    session: Session, st: Statements, service: str, user_id: str, device_token: str, device_os: str
) -> None:
    """Copy the user's existing subscriptions to a newly registered device (idempotent). Runs after
    the device's commit, in a transaction of its own that the caller ends: it holds the user's shared
    lock (module doc) and copies nothing when the user or the device is gone by then."""
    zone = _lock_user(session, service, user_id)
    if zone is None or reg.get_device(session, service, user_id, device_token) is None:
        return
    rows = st.user_rows(user_id, service)
    if not any(r.is_user_level for r in rows):
        return
    live = {t.notification_key for t in reg.list_templates(session, service)}
    _copy_to_device(st, service, user_id, rows, live, device_token, device_os, zone)


def _copy_to_device(
    st: Statements,
    service: str,
    user_id: str,
    rows: Sequence[IndexRow],
    live: set[str] | None,
    device_token: str,
    device_os: str,
    zone: str,
) -> None:
    have = {(r.method, r.type_, r.target) for r in rows if r.device_token == device_token}
    futures = []
    for r in rows:
        key: str | None = r.data.get("key")  # every user-level row carries its template's key
        if (
            not r.is_user_level
            or key is None
            or (live is not None and key not in live)
            or (r.method, r.type_, r.target) in have
        ):
            continue
        sub = SubscriptionRef(service, user_id, r.type_, key, r.target, int(r.data.get("at", 0)))
        schedule = parse_canonical(r.target) if r.method == "CYCLE" else None
        futures += _materialise(st, sub, [(device_token, device_os)], schedule=schedule, zone=zone)
    st.run(futures)


def on_device_removed(st: Statements, service: str, user_id: str, device_token: str) -> None:
    """Remove one device's slot rows and index rows (all subscriptions of that user), then its token
    index row. The caller holds the user's row exclusively (registry.remove_device)."""
    rows = [r for r in st.user_rows(user_id, service) if r.device_token == device_token and device_token]
    remove_rows(st, service, user_id, rows)
    st.run([st.forget_token_holder(service, device_token, user_id)])


def on_token_rotated(
    session: Session,
    st: Statements,
    service: str,
    old_token: str,
    new_token: str,
    holders: Mapping[str, str] | None = None,
) -> None:
    """Move every subscription row of ``old_token`` to ``new_token`` for every user holding either
    (works whether the registry has already rewritten MySQL or not). The caller holds those users'
    rows exclusively (registry.rotate_token).

    A moved row keeps the old row's ``no`` (so its slot and its place in a fan-out's walk) and
    records the device's first token as ``origin``: a publish in progress meets the device once —
    before the move through the old row, after it through the new one, and a page read between the
    copy and the delete sees both at one ``no`` and sends one (issue 14.6; notee/worker/lanes.py).
    The new rows are written before the old ones are deleted, so a failure halfway loses nothing.

    ``holders``: user_id -> device_os of the users whose old device the registry is rewriting (read
    under their locks); each also gets every live subscription its new device still lacks (fresh
    numbers), e.g. when the rotation overtook a registration's copy (``on_device_added``)."""
    if holders is None:
        users = set(reg.holders_of_token(session, service, old_token)) | set(
            reg.holders_of_token(session, service, new_token)
        )
    else:
        users = set(holders)
    live = {t.notification_key for t in reg.list_templates(session, service)} if holders else set()
    zones = reg.user_zones(session, service, users)  # read under the callers' exclusive locks
    for user_id in sorted(users):
        zone = slot_zone(zones.get(user_id))
        rows = st.user_rows(user_id, service)
        old_rows = [r for r in rows if r.device_token == old_token]
        if holders is not None and user_id in holders and any(r.is_user_level for r in rows):
            moved = {(r.method, r.type_, r.target) for r in old_rows}
            _copy_to_device(
                st,
                service,
                user_id,
                [r for r in rows if (r.method, r.type_, r.target) not in moved or r.device_token == new_token],
                live,
                new_token,
                holders[user_id],
                zone,
            )
        if not old_rows:
            continue
        have_new = {(r.method, r.type_, r.target) for r in rows if r.device_token == new_token}
        futures = [
            _move_row(st, service, user_id, r, new_token, zone)
            for r in old_rows
            if (r.method, r.type_, r.target) not in have_new and slot_ref(r) is not None
        ]
        st.run(futures)
        remove_rows(st, service, user_id, old_rows)
        st.run([st.forget_token_holder(service, old_token, user_id)])


def _move_row(st: Statements, service: str, user_id: str, row: IndexRow, new_token: str, zone: str) -> ResponseFuture:
    """Write ``row``'s subscription for ``new_token`` at the same slot and ``no`` (topic rows with ``zone``)."""
    ref = slot_ref(row)
    assert ref is not None
    sub = SubscriptionRef(service, user_id, row.type_, ref.notification_key, row.target, int(row.data.get("at", 0)))
    origin = str(row.data.get("origin") or row.device_token)
    device = DeviceSlot(ref.no, new_token, str(row.data.get("os", "AOS")), origin)
    if row.method == "TOPIC":
        return st.add_topic_device(sub, device, zone)
    return st.add_cycle_device(sub, device, parse_canonical(row.target).buckets)


def on_user_zone_changed(session: Session, st: Statements, service: str, user_id: str, timezone: str | None) -> int:
    """Rewrite the zone of every topic slot row of the user (``slot_zone(timezone)``), so a local-time
    job's parts, which read rows by zone, find it in its new zone. The caller holds the user's row
    exclusively (``registry.upsert_user`` locks it before changing the zone) and commits after this:
    every writer of the user's rows waits for that lock and then reads the new zone, and every
    remover of them (unsubscribe, device removal, pruning, rotation, deletion) holds the lock too,
    so no row read here is deleted before it is rewritten. Returns the rows rewritten."""
    zone = slot_zone(timezone)
    live = subsql.live_template_keys(session, service)
    rows = [r for r in st.user_rows(user_id, service) if r.method == "TOPIC" and r.data.get("key") in live]
    futures = [f for f in (st.set_zone(r, zone) for r in rows) if f is not None]
    st.run(futures)
    return len(futures)


def backfill_zones(session: Session, st: Statements, service: str, user_ids: Sequence[str]) -> int:
    """Write each of these users' zone on its topic slot rows (rows written before slot rows carried
    one: CQL 0004), under their shared row locks, so a zone change (exclusive) waits for this and
    rewrites after it, and a subscribe writes the same zone. The caller commits (releasing the locks).
    Returns the rows written."""
    locked = reg.lock_users(session, service, user_ids, exclusive=False)
    zones = reg.user_zones(session, service, locked)
    live = subsql.live_template_keys(session, service)
    reads = {u: st.user_rows_async(u, service) for u in locked}
    futures = []
    for user_id, read in reads.items():
        zone = slot_zone(zones.get(user_id))
        for r in st.index_rows_of(read):
            if r.method == "TOPIC" and r.data.get("key") in live and (f := st.set_zone(r, zone)) is not None:
                futures.append(f)
    st.run(futures)
    return len(futures)


def on_user_deleted(session: Session, st: Statements, service: str, user_id: str) -> None:
    """Remove every subscription of the user: slot rows, index rows, and the user from `count`."""
    rows = st.user_rows(user_id, service)
    if not rows:
        return
    live = {t.notification_key for t in reg.list_templates(session, service)}
    types = {(r.method, r.type_) for r in rows if r.is_user_level and r.data.get("key") in live}
    device_rows = [r for r in rows if not r.is_user_level]
    remove_rows(st, service, user_id, device_rows)
    st.delete_user_index(user_id, service)
    st.run(st.forget_token_holder(service, t, user_id) for t in sorted({r.device_token for r in device_rows}))
    for method, type_ in sorted(types):
        st.add_count(service, method, type_, -1)
    topics = {
        (r.type_, r.target) for r in rows if r.is_user_level and r.method == "TOPIC" and r.data.get("key") in live
    }
    st.run(st.add_topic_subscribers_async(service, t, topic, -1) for t, topic in sorted(topics))


def on_template_deleted(st: Statements, service: str, method: str, type_: str, notification_key: str) -> None:
    """Disable (not delete) the template's subscriptions: nothing can address its notification_key any
    more (publish and the scheduler resolve templates in MySQL), listing hides rows of a dead key, a new
    template of the same type gets a new key and fresh subscriptions, and `count` restarts at 0.
    `notee reconcile` deletes the dead rows later (finding them needs a scan of the index)."""
    _, count, _ = st.counters(service, method, type_)
    st.add_count(service, method, type_, -count)
    if method == "TOPIC":  # every topic of the type restarts at 0 as well
        st.run(
            st.add_topic_subscribers_async(service, type_, topic, -n)
            for _, topic, n in st.topic_subscribers(service, type_)
            if n
        )
    log.info("template %s/%s of %s deleted: %d subscriber(s) disabled until reconcile", method, type_, service, count)


def prune_token(session: Session, st: Statements, service: str, device_token: str, reason: str) -> None:
    """The provider rejected ``device_token``: delete it from every subscription of every user of the
    service holding it, then (when the caller commits) from MySQL. Cassandra first, so a failure
    leaves MySQL able to find the rows again on the next attempt. Holders come from MySQL *and* the
    token index, so rows MySQL no longer knows a holder of (a failure halfway, an old race) go too.
    The MySQL holders' rows are locked exclusively first (deletion wins, module doc); a user who
    registers the token meanwhile keeps it (that registration comes after the prune)."""
    known = reg.holders_of_token(session, service, device_token)
    locked = reg.lock_users(session, service, known, exclusive=True)
    holders = sorted(set(locked) | set(st.token_holders(service, device_token)))
    for user_id in holders:
        rows = [r for r in st.user_rows(user_id, service) if r.device_token == device_token]
        remove_rows(st, service, user_id, rows, every_holder=True)
    st.run(st.forget_token_holder(service, device_token, u) for u in holders)
    for user_id in locked:
        reg.delete_device(session, service, user_id, device_token)
    # Committed with the device rows' deletion (the caller's transaction): the service hears of every
    # token Notee removed, so it can clean its own tables (the users whose device rows went).
    webhooks_sql.emit(
        session, service, "token.pruned", {"tokens": [device_token], "user_ids": locked, "reason": reason}
    )
    log.info("pruned device token %s… of service %s (%d user(s)): %s", device_token[:8], service, len(holders), reason)
