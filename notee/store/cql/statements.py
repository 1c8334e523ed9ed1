"""``Statements``: every prepared statement of the process in one object (``runtime.statements``),
and the writes that span its tables: a subscription's slot rows with their occupancy, index and
token index rows, in logged batches."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from cassandra.cluster import ResponseFuture, Session
from cassandra.query import BatchStatement, PreparedStatement
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from notee.core.vocabulary import CycleTarget, block_of, slot_of
from notee.store.cassandra import Keyspaces
from notee.store.cql.binder import BATCH_BYTES, MAX_UNIT_BYTES, ROWS_PER_DEVICE, RowBinder, logged_batch
from notee.store.cql.counters import Counters
from notee.store.cql.cursors import WalkCursors
from notee.store.cql.due import DueIndex
from notee.store.cql.engagement_counts import EngagementCounts
from notee.store.cql.index import TokenIndex, UserIndex
from notee.store.cql.occupancy import Occupancy
from notee.store.cql.rows import (
    USER_LEVEL,
    DeviceSlot,
    IndexRow,
    Row,
    SubscriptionRef,
    device_data,
    slot_ref,
    target_name,
    user_level_data,
)
from notee.store.cql.slots import CycleSlots, TopicSlots


class Statements(
    TopicSlots, CycleSlots, UserIndex, TokenIndex, DueIndex, Occupancy, Counters, WalkCursors, EngagementCounts
):
    """Every table family's statements and reads, prepared once when the process builds this
    (``runtime.statements``). One object, so a caller holds one thing whatever tables it touches;
    each family (the base classes, one module each) prepares its own statements."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        TopicSlots.__init__(self, session, keyspaces)
        CycleSlots.__init__(self, session, keyspaces)
        UserIndex.__init__(self, session, keyspaces)
        TokenIndex.__init__(self, session, keyspaces)
        DueIndex.__init__(self, session, keyspaces)
        Occupancy.__init__(self, session, keyspaces)
        Counters.__init__(self, session, keyspaces)
        WalkCursors.__init__(self, session, keyspaces)
        EngagementCounts.__init__(self, session, keyspaces)
        self._binder = RowBinder(session.cluster.protocol_version)
        # Where a failed write's withdrawal is kept when it cannot be written (notee/domain/withdrawals.py):
        # the process's MySQL sessions, set by its Runtime; None: not kept (logged).
        self.journal_sessions: sessionmaker[OrmSession] | None = None
        # Everything but a counter increment can be resent safely: marking it idempotent lets the
        # driver retry it on another replica when a node dies mid-request (RELIABILITY.md, node loss).
        for name, stmt in vars(self).items():
            if isinstance(stmt, PreparedStatement) and not name.startswith("counter_add"):
                stmt.is_idempotent = True

    # ------------------------------------------------------------------ execution helpers
    def write_timestamp(self) -> int:
        """A write timestamp (µs) from the driver's own generator, for ``USING TIMESTAMP``: one per
        request that adds rows under fresh numbers (notee/domain/withdrawals.py)."""
        return int(self.session.cluster.timestamp_generator())

    def run(self, futures: Iterable[ResponseFuture]) -> None:
        """Wait for every future; raise the first error after all have finished (none is abandoned)."""
        first: BaseException | None = None
        for f in list(futures):
            try:
                f.result()
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first

    # ------------------------------------------------------------------ slot rows (+ index row), batched
    def topic_subscription_rows(
        self,
        sub: SubscriptionRef,
        devices: Sequence[tuple[int, str, str]],
        *,
        with_user_level: bool,
        zone: str,
        written_at: int | None = None,
    ) -> list[Row]:
        """The rows of one user's topic subscription (``sub.target``: the topic): per device
        ``(no, token, os)`` its slot row, its target_slots row, index row and token index row
        (``ROWS_PER_DEVICE``), then (``with_user_level``) the user-level row. ``zone``: the user's
        time zone ('' = the service's), stored on the slot rows. ``written_at``: the write timestamp
        (µs) of the slot and index rows (``USING TIMESTAMP``), None: the driver's. ``write_together``
        writes them."""
        user_id, service, type_, topic = sub.user_id, sub.service, sub.type_, sub.target
        notification_key, registered_at = sub.notification_key, sub.registered_at
        slot_insert, index_insert = self.topic_insert, self.index_insert
        at: tuple[int, ...] = ()
        if written_at is not None:
            slot_insert, index_insert, at = self.topic_insert_at, self.index_insert_at, (written_at,)
        rows: list[Row] = []
        for no, token, os_ in devices:
            slot = slot_of(no)
            rows.append(
                (slot_insert, (slot, notification_key, topic, no, token, os_, user_id, registered_at, zone, *at))
            )
            rows.append((self.occupancy_insert, (notification_key, topic, slot, block_of(no))))
            data = device_data(notification_key, slot, no, os_, registered_at)
            rows.append((index_insert, (user_id, service, "TOPIC", type_, topic, token, data, *at)))
            rows.append((self.token_insert, (service, token, user_id)))  # the token index (issue 14.5)
        if with_user_level:
            data = user_level_data(notification_key, registered_at)
            rows.append((index_insert, (user_id, service, "TOPIC", type_, topic, USER_LEVEL, data, *at)))
        return rows

    def write_together(self, units: Iterable[list[Row]]) -> list[ResponseFuture]:
        """Start logged batches writing ``units`` (each unit: one subscription's rows). A unit is never
        split, so each is all-or-nothing; small units share a batch up to ``BATCH_BYTES`` (one batch
        per unit cost the server ~4x more per user in the bulk subscribe). A unit bigger than
        ``MAX_UNIT_BYTES`` (a user with dozens of devices) goes in batches of its own rows, the last
        row (the user-level one, when present) after the others."""
        futures: list[ResponseFuture] = []
        batch: BatchStatement | None = None
        size = 0
        bind = self._binder.add
        # Rows another unit of the batch may hold too: the target_slots rows (users of one block). Only
        # they are looked up, by their values: hashing every row's cost ~2 µs a subscription.
        shared = self.occupancy_insert
        seen: set[tuple[Any, ...]] = set()
        for unit in units:
            unit_size = 0
            for _, params in unit:  # binder.row_bytes inlined: a call per row was ~15 % of this loop
                unit_size += 32
                for v in params:
                    unit_size += len(v) if isinstance(v, str) else 8
            if unit_size > MAX_UNIT_BYTES:
                futures += self._write_big_unit(unit)
                continue
            if batch is None or size + unit_size > BATCH_BYTES:
                if batch is not None:
                    futures.append(self.session.execute_async(batch))
                batch = logged_batch()
                size = 0
                seen = set()
            for stmt, params in unit:
                if stmt is shared:
                    if params in seen:
                        continue  # the same fixed row twice in one batch: write it once
                    seen.add(params)
                bind(batch, stmt, params)
            size += unit_size
        if batch is not None:
            futures.append(self.session.execute_async(batch))
        return futures

    def _write_big_unit(self, unit: list[Row]) -> list[ResponseFuture]:
        # topic_subscription_rows' shape: ROWS_PER_DEVICE rows per device, then maybe the user-level row.
        user_level = unit[-1:] if len(unit) % ROWS_PER_DEVICE else []
        body = unit[: len(unit) - len(user_level)]
        per_batch = 8 * ROWS_PER_DEVICE  # rows: 8 devices
        futures = []
        for i in range(0, len(body), per_batch):
            batch = logged_batch()
            for stmt, params in body[i : i + per_batch]:
                self._binder.add(batch, stmt, params)
            futures.append(self.session.execute_async(batch))
        if not user_level:
            return futures
        self.run(futures)  # the user-level row is written after (never before) its device rows
        stmt, params = user_level[0]
        return [self.session.execute_async(stmt, params)]

    def add_topic_device(
        self, sub: SubscriptionRef, device: DeviceSlot, zone: str, written_at: int | None = None
    ) -> ResponseFuture:
        """Slot row + target_slots row + device index row + token index row of one device of a topic
        subscription (``sub.target``: the topic), in one logged batch. ``zone``: the user's time zone
        ('' = the service's). A ``device.origin``: the row is a rotated device's (it keeps the old
        row's ``no``; docs/SCHEMA.md, races). ``written_at``: as in ``topic_subscription_rows`` (a
        fresh row's only)."""
        key, topic, no, origin = sub.notification_key, sub.target, device.no, device.origin
        slot = slot_of(no)
        batch = logged_batch()
        row = (slot, key, topic, no, device.device_token, device.device_os, sub.user_id, sub.registered_at, zone)
        index_insert, at = self._index_insert_at(written_at)
        if origin is not None:
            batch.add(self.topic_insert_moved, (*row, origin))
        elif written_at is not None:
            batch.add(self.topic_insert_at, (*row, written_at))
        else:
            batch.add(self.topic_insert, row)
        batch.add(self.occupancy_insert, (key, topic, slot, block_of(no)))
        batch.add(self.token_insert, (sub.service, device.device_token, sub.user_id))
        data = device_data(key, slot, no, device.device_os, sub.registered_at, origin)
        batch.add(index_insert, (sub.user_id, sub.service, "TOPIC", sub.type_, topic, device.device_token, data, *at))
        return self.session.execute_async(batch)

    def _index_insert_at(self, written_at: int | None) -> tuple[PreparedStatement, tuple[int, ...]]:
        if written_at is None:
            return self.index_insert, ()
        return self.index_insert_at, (written_at,)

    def add_cycle_device(
        self, sub: SubscriptionRef, device: DeviceSlot, buckets: Sequence[CycleTarget], written_at: int | None = None
    ) -> ResponseFuture:
        """Slot rows and target_slots rows (one per bucket: a day of the schedule ``sub.target``) +
        device index row + token index row of one device of a cycle subscription, in one logged batch.
        ``written_at``: as in ``topic_subscription_rows`` (a fresh row's only)."""
        key, no, token, origin = sub.notification_key, device.no, device.device_token, device.origin
        slot = slot_of(no)
        batch = logged_batch()
        index_insert, at = self._index_insert_at(written_at)
        for b in buckets:
            row = (slot, key, b.timezone, b.day, b.hour, b.minute, no, token, device.device_os, sub.user_id)
            if origin is not None:
                batch.add(self.cycle_insert_moved, (*row, sub.registered_at, origin))
            elif written_at is not None:
                batch.add(self.cycle_insert_at, (*row, sub.registered_at, written_at))
            else:
                batch.add(self.cycle_insert, (*row, sub.registered_at))
            batch.add(self.occupancy_insert, (key, target_name(b), slot, block_of(no)))
        data = device_data(key, slot, no, device.device_os, sub.registered_at, origin)
        batch.add(index_insert, (sub.user_id, sub.service, "CYCLE", sub.type_, sub.target, token, data, *at))
        batch.add(self.token_insert, (sub.service, token, sub.user_id))
        return self.session.execute_async(batch)

    def remove_device_rows(
        self,
        user_id: str,
        service: str,
        row: IndexRow,
        buckets: Sequence[CycleTarget],
        *,
        slot_rows: bool = True,
        index_row: bool = True,
    ) -> ResponseFuture:
        """Delete one device's slot rows of one subscription and its index row, in one logged batch.
        ``buckets``: a CYCLE row's (one per day of its schedule), () for TOPIC. A slot row another
        user of a shared device still refers to is kept (``slot_rows=False``); it is deleted alone
        (``index_row=False``) once nobody refers to it."""
        ref = slot_ref(row)
        batch = logged_batch()
        if ref is not None and slot_rows:
            if row.method == "TOPIC":
                batch.add(self.topic_delete, (ref.slot, ref.notification_key, row.target, ref.no, row.device_token))
            else:
                for b in buckets:
                    batch.add(
                        self.cycle_delete,
                        (ref.slot, ref.notification_key, b.timezone, b.day, b.hour, b.minute, ref.no, row.device_token),
                    )
        if index_row:
            batch.add(self.index_delete, (user_id, service, row.method, row.type_, row.target, row.device_token))
        return self.session.execute_async(batch)

    def withdraw_rows(
        self, user_id: str, service: str, row: IndexRow, buckets: Sequence[CycleTarget], at: int
    ) -> ResponseFuture:
        """Delete one index row and (a device's) the slot rows it names, ``USING TIMESTAMP at``, in one
        logged batch: a withdrawal of rows a failed write wrote at ``at - 1`` (notee/domain/withdrawals.py).
        ``buckets``: as in ``remove_device_rows``."""
        ref = slot_ref(row)
        batch = logged_batch()
        if ref is not None:
            if row.method == "TOPIC":
                params = (at, ref.slot, ref.notification_key, row.target, ref.no, row.device_token)
                batch.add(self.topic_delete_at, params)
            for b in buckets if row.method == "CYCLE" else ():
                key = (ref.slot, ref.notification_key, b.timezone, b.day, b.hour, b.minute, ref.no, row.device_token)
                batch.add(self.cycle_delete_at, (at, *key))
        batch.add(self.index_delete_at, (at, user_id, service, row.method, row.type_, row.target, row.device_token))
        return self.session.execute_async(batch)
