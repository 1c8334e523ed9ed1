"""What topic subscriptions, cycle subscriptions and the lifecycle hooks share: the template and user
lookups of a subscribe, writing a subscription's rows for devices and removing rows, and reading
which subscriptions of a user are live. The model, the locks and why (deletion wins) are in
notee/domain/subscriptions.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from cassandra.cluster import ResponseFuture
from sqlalchemy.orm import Session

from notee.core.errors import InvalidInput, NotFound
from notee.core.vocabulary import METHODS, CycleTarget, slot_of
from notee.domain.schedule import Schedule, parse_canonical
from notee.store import templates_sql, users_sql
from notee.store.cql.rows import DeviceSlot, IndexRow, SubscriptionRef, slot_ref, slot_zone
from notee.store.cql.statements import Statements

log = logging.getLogger(__name__)


class SubscribeResult(TypedDict):
    status: str  # "subscribed" | "already_subscribed"
    devices: int  # devices the subscription is materialised on
    schedule: NotRequired[str]  # CYCLE: the canonical schedule


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------- MySQL lookups (read-only)
@dataclass(frozen=True, slots=True)
class TemplateKey:
    """The template a subscription's rows belong to: its method and type, and the key its rows carry."""

    method: str
    type_: str
    key: str


def template(session: Session, service: str, method: str, type_: str) -> TemplateKey:
    row = templates_sql.get_template(session, service, method, type_)
    if row is None:
        other = [
            m for m in METHODS if m != method and templates_sql.get_template(session, service, m, type_) is not None
        ]
        if other:
            raise _wrong_method(type_, method, other[0])
        raise NotFound(f"no {method} template {type_!r}")
    return TemplateKey(method, type_, row.notification_key)


def template_of(keys: dict[str, str], service: str, method: str, type_: str) -> TemplateKey:
    """The template of (method, type) from ``subscribe_context``'s keys, with ``template``'s errors."""
    if method in keys:
        return TemplateKey(method, type_, keys[method])
    other = [m for m in METHODS if m in keys]
    if other:
        raise _wrong_method(type_, method, other[0])
    raise NotFound(f"no {method} template {type_!r}")


def _wrong_method(type_: str, method: str, actual: str) -> InvalidInput:
    return InvalidInput(
        f"template {type_!r} is a {actual} template, not {method}",
        details=[{"field": "type", "reason": "wrong_method", "method": actual}],
    )


def lock_user(session: Session, service: str, user_id: str) -> str | None:
    """Take the shared user-row lock of a writer that adds rows (notee/domain/subscriptions.py);
    returns the zone its topic slot rows carry (``slot_zone``: read under the lock, so a zone change
    waits for this writer and then rewrites what it wrote), None: no such user. Call it before any
    other read of the transaction."""
    row = users_sql.get_user(session, service, user_id, for_share=True)
    return None if row is None else slot_zone(row.timezone)


def user_devices(session: Session, service: str, user_id: str, *, locked: bool) -> list[tuple[str, str]]:
    """The devices of a user whose row ``lock_user`` locked (``locked``: it exists)."""
    if not locked:
        raise NotFound("user not found")
    return [(d.device_token, d.device_os) for d in users_sql.list_devices(session, service, user_id)]


# ---------------------------------------------------------------------- Cassandra building blocks
def buckets_of(row: IndexRow) -> tuple[CycleTarget, ...]:
    """The cycle buckets a CYCLE index row's slot rows are in (its schedule's days); () for TOPIC."""
    if row.method != "CYCLE":
        return ()
    return parse_canonical(row.target).buckets


@dataclass
class NewRows:
    """Rows a writer adds under fresh numbers: the index rows they write (``rows``: user id, row), so
    ``withdrawals.write_or_withdraw`` can take them back, what starts their logged batches
    (``starts``), and the one write timestamp (µs) of the request their slot and index rows carry
    (``written_at``: ``Statements.write_timestamp``)."""

    written_at: int
    rows: list[tuple[str, IndexRow]] = field(default_factory=list)
    starts: list[Callable[[], list[ResponseFuture]]] = field(default_factory=list)

    def extend(self, other: NewRows) -> None:
        """Add ``other``'s rows, written at this request's timestamp (``materialise(at=self)``)."""
        if other.written_at != self.written_at:
            raise ValueError("rows of one request carry one write timestamp")
        self.rows += other.rows
        self.starts += other.starts


def new_device_row(sub: SubscriptionRef, method: str, no: int, token: str) -> tuple[str, IndexRow]:
    """The index row a device's rows of ``sub`` at number ``no`` carry (as much as a removal reads)."""
    data = {"key": sub.notification_key, "slot": slot_of(no), "no": no}
    return sub.user_id, IndexRow(method, sub.type_, sub.target, token, data)


def materialise(
    st: Statements,
    sub: SubscriptionRef,
    devices: Sequence[tuple[str, str]],
    *,
    schedule: Schedule | None,
    zone: str,
    written_at: int,
) -> NewRows:
    """The logged batches writing slot rows + index rows of ``sub`` for ``devices`` (token, os), for
    ``withdrawals.write_or_withdraw``. ``schedule``: a cycle subscription's (None: ``sub.target`` is a
    topic). ``zone``: the user's, stored on topic slot rows (``slot_zone``). ``written_at``: the
    request's write timestamp (``NewRows``)."""
    if not devices:
        return NewRows(written_at)
    method = "TOPIC" if schedule is None else "CYCLE"
    numbers = st.take_numbers(sub.service, method, sub.type_, len(devices))
    slots = [DeviceSlot(no, token, os_) for no, (token, os_) in zip(numbers, devices, strict=True)]

    def start() -> list[ResponseFuture]:
        if schedule is None:
            return [st.add_topic_device(sub, d, zone, written_at) for d in slots]
        return [st.add_cycle_device(sub, d, schedule.buckets, written_at) for d in slots]

    return NewRows(written_at, [new_device_row(sub, method, d.no, d.device_token) for d in slots], [start])


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
    st.run(st.remove_device_rows(user_id, service, r, buckets_of(r)) for r in alone)
    if shared:
        st.run(st.remove_device_rows(user_id, service, r, buckets_of(r), slot_rows=False) for r in shared)
        unreferenced = [r for r in shared if not _referenced_by_others(st, service, r, others[r.device_token])]
        st.run(st.remove_device_rows(user_id, service, r, buckets_of(r), index_row=False) for r in unreferenced)
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


def live_user_level(rows: Sequence[IndexRow], key: str) -> list[IndexRow]:
    return [r for r in rows if r.is_user_level and r.data.get("key") == key]


def first_of_type(rows_after: Sequence[IndexRow], key: str, target: str, at: int) -> bool:
    """After writing (target, at), am I the one that should count this user? The earliest live
    subscription of the type does: two racing first subscriptions that both see each other agree on
    one winner, so `count` is incremented once (docs/SCHEMA.md, "Counters")."""
    live = live_user_level(rows_after, key)
    if not live:
        return False
    first = min(live, key=lambda r: (int(r.data.get("at", 0)), r.target))
    return first.target == target


def unsubscribe(
    st: Statements, service: str, user_id: str, tpl: TemplateKey, match: Callable[[IndexRow], bool]
) -> bool:
    """Remove the user's rows of ``tpl``'s type that ``match`` (and any left by a deleted template of
    the type); True when a live subscription went, and ``count`` loses the user when it was its last
    of the type."""
    rows = st.user_type_rows(user_id, service, tpl.method, tpl.type_)
    gone = [r for r in rows if match(r) or r.data.get("key") != tpl.key]
    if not gone:
        return False
    removed_live = bool(live_user_level([r for r in gone if match(r)], tpl.key))
    remove_rows(st, service, user_id, gone)
    if removed_live and not live_user_level(st.user_type_rows(user_id, service, tpl.method, tpl.type_), tpl.key):
        st.add_count(service, tpl.method, tpl.type_, -1)
    return removed_live
