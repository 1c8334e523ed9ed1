"""A user's subscriptions: the model, the locks, listing, and the device/user/template lifecycle hooks
the registry, the device route and delivery call. Subscribing is in ``topic_subscriptions`` and
``cycle_subscriptions``; what they and the hooks share (writing and removing a subscription's rows)
in ``subscription_rows``.

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
an exclusive one to change the user's devices or delete it (registry, ``prune_token``), to remove a
cycle schedule (``cycle_subscriptions.unsubscribe_cycle``) and for every topic subscribe, single or bulk (its read of the user's rows then decides alone whether the user is
new to the type). The lock is the first statement of the transaction, so the MySQL reads after it
(REPEATABLE READ snapshot) see every deletion committed before it; a deletion waits for a write in
progress, then finds its rows.

Numbers (``no``) come from the process's reserved range (``Statements.take_numbers``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import NotRequired, TypedDict

from cassandra.cluster import ResponseFuture
from sqlalchemy.orm import Session

from notee.core.errors import NotFound
from notee.domain.schedule import parse_canonical
from notee.domain.subscription_rows import NewRows, lock_user, materialise, remove_rows
from notee.domain.withdrawals import settle_users, write_or_withdraw
from notee.store import import_rows_sql, templates_sql, users_sql, webhooks_sql
from notee.store import subscription_sql as subsql
from notee.store.cql.rows import DeviceSlot, IndexRow, SubscriptionRef, slot_ref, slot_zone
from notee.store.cql.statements import Statements

log = logging.getLogger(__name__)


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


# ---------------------------------------------------------------------- listing
def list_subscriptions(session: Session, st: Statements, service: str, user_id: str) -> list[SubscriptionInfo]:
    """The user's subscriptions from the per-user index (one Cassandra partition). Rows of a deleted
    template (their key is no longer a template's) are not listed."""
    if users_sql.get_user(session, service, user_id) is None:
        raise NotFound("user not found")
    live = {t.notification_key for t in templates_sql.list_templates(session, service)}
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
    zone = lock_user(session, service, user_id)
    if zone is None or users_sql.get_device(session, service, user_id, device_token) is None:
        return
    rows = st.user_rows(user_id, service)
    if not any(r.is_user_level for r in rows):
        return
    live = {t.notification_key for t in templates_sql.list_templates(session, service)}
    _copy_to_device(st, service, user_id, rows, live, device_token, device_os, zone)


def on_devices_added(
    session: Session, st: Statements, service: str, devices: Mapping[str, Sequence[tuple[str, str]]]
) -> int:
    """``on_device_added`` for many users at once (bulk import): ``devices`` user_id -> (token, os)
    added. Under the users' shared locks (one statement), their index rows read concurrently, the
    templates once; users gone or devices removed meanwhile are skipped. Returns the devices copied to."""
    zones = subsql.lock_users_zones(session, service, list(devices))
    if not zones:
        return 0
    present = import_rows_sql.device_keys(session, service, zones)
    reads = {u: st.user_rows_async(u, service) for u in sorted(zones)}
    live = {t.notification_key for t in templates_sql.list_templates(session, service)}
    copied = 0
    for user_id, read in reads.items():
        rows = st.index_rows_of(read)
        if not any(r.is_user_level for r in rows):
            continue
        for token, os_ in devices[user_id]:
            if (user_id, token) in present:
                _copy_to_device(st, service, user_id, rows, live, token, os_, zones[user_id])
                copied += 1
    return copied


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
    new = NewRows(st.write_timestamp())
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
        device = [(device_token, device_os)]
        new.extend(materialise(st, sub, device, schedule=schedule, zone=zone, written_at=new.written_at))
    write_or_withdraw(st, service, new)


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
        users = set(users_sql.holders_of_token(session, service, old_token)) | set(
            users_sql.holders_of_token(session, service, new_token)
        )
    else:
        users = set(holders)
    settle_users(session, st, service, sorted(users), exclusive=True)
    live = {t.notification_key for t in templates_sql.list_templates(session, service)} if holders else set()
    zones = users_sql.user_zones(session, service, users)  # read under the callers' exclusive locks
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
    locked = users_sql.lock_users(session, service, user_ids, exclusive=False)
    zones = users_sql.user_zones(session, service, locked)
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
    """Remove every subscription of the user: slot rows, index rows, and the user from `count`. The
    caller holds the user's row exclusively (registry.delete_user)."""
    settle_users(session, st, service, [user_id], exclusive=True)
    rows = st.user_rows(user_id, service)
    if not rows:
        return
    live = {t.notification_key for t in templates_sql.list_templates(session, service)}
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
    known = users_sql.holders_of_token(session, service, device_token)
    locked = users_sql.lock_users(session, service, known, exclusive=True)
    settle_users(session, st, service, locked, exclusive=True)
    holders = sorted(set(locked) | set(st.token_holders(service, device_token)))
    for user_id in holders:
        rows = [r for r in st.user_rows(user_id, service) if r.device_token == device_token]
        remove_rows(st, service, user_id, rows, every_holder=True)
    st.run(st.forget_token_holder(service, device_token, u) for u in holders)
    for user_id in locked:
        users_sql.delete_device(session, service, user_id, device_token)
    # Committed with the device rows' deletion (the caller's transaction): the service hears of every
    # token Notee removed, so it can clean its own tables (the users whose device rows went).
    webhooks_sql.emit(
        session, service, "token.pruned", {"tokens": [device_token], "user_ids": locked, "reason": reason}
    )
    log.info("pruned device token %s… of service %s (%d user(s)): %s", device_token[:8], service, len(holders), reason)
