"""All of Notee's CQL, prepared once per process.

``Statements(session, keyspaces)`` prepares every statement when it is built; a process builds it
once (``runtime.statements``, kept on the Runtime) and passes it to the functions that read or
write Cassandra. Nothing here opens a connection or holds one in a module global.

Tables (schema/cql/0001_subscriptions.cql, decisions in docs/SCHEMA.md):
  topic_notification / cycle_notification  slot rows, one partition per slot of a (template, topic)
                                           or (template, tz, day, hour, minute) bucket
  notification_per_user                    the per-user reverse index
  cycle_due / cycle_timezone               the scheduler's due index
  numbering.notification                   counters version / count / no

Execution: counter updates use the ``COUNTER_PROFILE`` (no retry: counters are not idempotent, a
timed-out increment is never resent; the caller sees the error). Writes of one subscription row
plus its index row go in one LOGGED batch: the atomicity across the two tables is the point
(an index row without its slot row, or the reverse, would be an orphan nobody can find).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cassandra.cluster import ResponseFuture, Session
from cassandra.protocol import ProtocolException
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from notee.core.vocabulary import BLOCK_SIZE, CycleTarget, RecipientRow, TopicTarget, block_of, slot_of
from notee.store.cassandra import COUNTER_PROFILE, PAGE_PROFILE, Keyspaces, pages, rows

# Reads whose rows are unpacked by position: plain tuples. The driver's default row factory builds
# a namedtuple *class* per result, which cost ~8 % of the API's CPU on the subscribe path.
TUPLE_ROWS = PAGE_PROFILE

USER_LEVEL = ""  # device_token of the per-user index row that records the subscription itself


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One row of notification_per_user. ``device_token == USER_LEVEL`` is the subscription itself
    (it exists even when the user has no device); other rows point at one device's slot rows."""

    method: str
    type_: str
    target: str
    device_token: str
    data: dict[str, Any]

    @property
    def is_user_level(self) -> bool:
        return self.device_token == USER_LEVEL


@dataclass(frozen=True, slots=True)
class SlotRef:
    """Where one device's slot rows of one subscription live."""

    notification_key: str
    slot: int
    no: int


@dataclass(slots=True)
class _NumberRange:
    """Numbers of one ``no`` counter this process reserved and has not handed out: ``next..last``."""

    lock: threading.Lock
    next: int = 1
    last: int = 0


class RowBinder:
    """Adds rows of prepared statements to a batch for a fraction of the driver's CPU.

    ``BatchStatement.add`` binds through ``PreparedStatement.bind``, which builds a named tuple per
    value to ask a column-encryption policy (Notee sets none) before it serializes: ~14 µs for a
    9-column row, against ~3 µs for the column types' serializers alone (docs/BENCHMARKS.md, "Bulk
    subscribe: the driver's binding"). The first row of a batch still goes through
    ``BatchStatement.add``, which gives the batch its routing key; the others are appended as the
    driver appends them, (True, query id, serialized values), to its ``_statements_and_parameters``
    list: a private attribute of the locked driver version, pinned by
    ``tests/integration/test_cql_statements.py::test_rows_bound_by_the_binder_equal_the_drivers``."""

    def __init__(self, protocol_version: int) -> None:
        self._version = protocol_version
        self._serializers: dict[int, tuple[bytes, list[Any]]] = {}  # id(statement) -> (query id, serializers)

    def add(self, batch: BatchStatement, stmt: PreparedStatement, params: Sequence[Any]) -> None:
        if not batch._statements_and_parameters:
            batch.add(stmt, params)
            return
        known = self._serializers.get(id(stmt))
        if known is None:
            known = self._serializers[id(stmt)] = (
                stmt.query_id,
                [column.type.serialize for column in stmt.column_metadata],
            )
        query_id, serializers = known
        if len(params) != len(serializers):  # the driver's own checks and errors
            batch.add(stmt, params)
            return
        version = self._version
        values = [None if v is None else ser(v, version) for ser, v in zip(serializers, params, strict=True)]
        batch._statements_and_parameters.append((True, query_id, values))


class Statements:
    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        self._binder = RowBinder(session.cluster.protocol_version)
        self._ranges: dict[tuple[str, str, str], _NumberRange] = {}  # (service, method, type) -> take_numbers'
        self._ranges_lock = threading.Lock()
        n, c = keyspaces.notification, keyspaces.numbering
        p = session.prepare

        # --- slot rows -------------------------------------------------------------------------
        # ``zone``: the recipient's time zone ('' = the service's; CQL 0004, docs/FANOUT.md).
        self.topic_insert = p(
            f"INSERT INTO {n}.topic_notification (slot, notification_key, topic, no, device_token, device_os,"
            " user_id, registered_at, zone) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        # A rotated row: same key as a fresh one plus the device's first token (issue 14.6).
        self.topic_insert_moved = p(
            f"INSERT INTO {n}.topic_notification (slot, notification_key, topic, no, device_token, device_os,"
            " user_id, registered_at, zone, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        # A user's zone changed: rewrite it on one of its rows (under the user's exclusive row lock).
        self.topic_set_zone = p(
            f"UPDATE {n}.topic_notification SET zone = ? WHERE slot = ? AND notification_key = ? AND topic = ?"
            " AND no = ? AND device_token = ?"
        )
        self.topic_delete = p(
            f"DELETE FROM {n}.topic_notification WHERE slot = ? AND notification_key = ? AND topic = ?"
            " AND no = ? AND device_token = ?"
        )
        # Columns in Recipient's field order (a RecipientRow). The *_after variants resume a slot after a row's
        # clustering key (no, device_token) when the server rejects a checkpointed paging state.
        self.topic_page = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.topic_notification"
            " WHERE slot = ? AND notification_key = ? AND topic = ?"
        )
        self.topic_page_after = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.topic_notification"
            " WHERE slot = ? AND notification_key = ? AND topic = ? AND (no, device_token) > (?, ?)"
        )
        # One zone's rows of a slot (a part of a local-time job): the server scans the one partition
        # and ships only the matching rows (a filter on a regular column, hence ALLOW FILTERING).
        self.topic_page_zone = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.topic_notification"
            " WHERE slot = ? AND notification_key = ? AND topic = ? AND zone = ? ALLOW FILTERING"
        )
        self.topic_page_zone_after = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.topic_notification"
            " WHERE slot = ? AND notification_key = ? AND topic = ? AND (no, device_token) > (?, ?) AND zone = ?"
            " ALLOW FILTERING"
        )
        self.topic_users = p(
            f"SELECT user_id FROM {n}.topic_notification WHERE slot = ? AND notification_key = ? AND topic = ?"
        )
        self.cycle_insert = p(
            f"INSERT INTO {n}.cycle_notification (slot, notification_key, timezone, day, hour, minute, no,"
            " device_token, device_os, user_id, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self.cycle_insert_moved = p(
            f"INSERT INTO {n}.cycle_notification (slot, notification_key, timezone, day, hour, minute, no,"
            " device_token, device_os, user_id, registered_at, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self.cycle_delete = p(
            f"DELETE FROM {n}.cycle_notification WHERE slot = ? AND notification_key = ? AND timezone = ?"
            " AND day = ? AND hour = ? AND minute = ? AND no = ? AND device_token = ?"
        )
        # Does a cycle bucket still have a row in this slot (reconcile's check of a cycle_due row)?
        self.cycle_any = p(
            f"SELECT no FROM {n}.cycle_notification WHERE slot = ? AND notification_key = ? AND timezone = ?"
            " AND day = ? AND hour = ? AND minute = ? LIMIT 1"
        )
        self.cycle_page = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.cycle_notification WHERE slot = ?"
            " AND notification_key = ? AND timezone = ? AND day = ? AND hour = ? AND minute = ?"
        )
        self.cycle_page_after = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.cycle_notification WHERE slot = ?"
            " AND notification_key = ? AND timezone = ? AND day = ? AND hour = ? AND minute = ?"
            " AND (no, device_token) > (?, ?)"
        )

        # --- per-user index ----------------------------------------------------------------------
        self.index_insert = p(
            f"INSERT INTO {n}.notification_per_user (user_id, service, notification_method, notification_type,"
            " target, device_token, data) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        self.index_delete = p(
            f"DELETE FROM {n}.notification_per_user WHERE user_id = ? AND service = ? AND notification_method = ?"
            " AND notification_type = ? AND target = ? AND device_token = ?"
        )
        self.index_delete_user = p(f"DELETE FROM {n}.notification_per_user WHERE user_id = ? AND service = ?")
        self.index_user = p(
            f"SELECT notification_method, notification_type, target, device_token, data"
            f" FROM {n}.notification_per_user WHERE user_id = ? AND service = ?"
        )
        self.index_user_type = p(
            f"SELECT notification_method, notification_type, target, device_token, data"
            f" FROM {n}.notification_per_user WHERE user_id = ? AND service = ? AND notification_method = ?"
            " AND notification_type = ?"
        )
        # Many users' rows of one type in one request (the bulk subscribe): IN over the partition key.
        self.index_users_type = p(
            f"SELECT user_id, notification_method, notification_type, target, device_token, data"
            f" FROM {n}.notification_per_user WHERE user_id IN ? AND service = ? AND notification_method = ?"
            " AND notification_type = ?"
        )
        # Maintenance only (notee reconcile): a full token-range scan, paged.
        self.index_scan = p(
            f"SELECT user_id, service, notification_method, notification_type, target, device_token, data"
            f" FROM {n}.notification_per_user"
        )

        # Maintenance (the scheduled reconcile batch): the index walked from a partition token on.
        self.index_scan_from = p(
            f"SELECT token(user_id, service) AS t, user_id, service, notification_method, notification_type,"
            f" target, device_token, data FROM {n}.notification_per_user WHERE token(user_id, service) > ?"
        )
        self.cursor_select = p(f"SELECT last_token FROM {n}.reconcile_cursor WHERE name = ?")
        self.cursor_update = p(
            f"INSERT INTO {n}.reconcile_cursor (name, last_token, updated_at) VALUES (?, ?, toTimestamp(now()))"
        )

        # --- token index: who may hold rows of a device token (schema/cql/0003) -------------------
        self.token_insert = p(
            f"INSERT INTO {n}.notification_per_token (service, device_token, user_id) VALUES (?, ?, ?)"
        )
        self.token_delete = p(
            f"DELETE FROM {n}.notification_per_token WHERE service = ? AND device_token = ? AND user_id = ?"
        )
        self.token_users = p(f"SELECT user_id FROM {n}.notification_per_token WHERE service = ? AND device_token = ?")

        # --- scheduler's due index -----------------------------------------------------------------
        self.due_insert = p(
            f"INSERT INTO {n}.cycle_due (timezone, day, hour, minute, notification_key, service,"
            " notification_type) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        self.due_select = p(
            f"SELECT service, notification_key, notification_type FROM {n}.cycle_due"
            " WHERE timezone = ? AND day = ? AND hour = ? AND minute = ?"
        )
        self.due_scan = p(f"SELECT timezone, day, hour, minute, notification_key, service FROM {n}.cycle_due")
        self.due_delete = p(
            f"DELETE FROM {n}.cycle_due USING TIMESTAMP ? WHERE timezone = ? AND day = ? AND hour = ?"
            " AND minute = ? AND notification_key = ?"
        )
        self.tz_insert = p(f"INSERT INTO {n}.cycle_timezone (shard, timezone) VALUES (0, ?)")
        self.tz_select = p(f"SELECT timezone FROM {n}.cycle_timezone WHERE shard = 0")
        self.tz_delete = p(f"DELETE FROM {n}.cycle_timezone USING TIMESTAMP ? WHERE shard = 0 AND timezone = ?")

        # --- occupancy: which (slot, block) of a target hold rows (schema/cql/0005) -------------------
        self.occupancy_insert = p(
            f"INSERT INTO {n}.target_slots (notification_key, target, slot, block, noted) VALUES (?, ?, ?, ?, true)"
        )
        self.occupancy_select = p(f"SELECT slot, block FROM {n}.target_slots WHERE notification_key = ? AND target = ?")
        self.occupancy_scan_from = p(
            f"SELECT token(notification_key, target) AS t, notification_key, target, slot, block, writetime(noted)"
            f" AS w FROM {n}.target_slots WHERE token(notification_key, target) > ?"
        )
        self.occupancy_delete = p(
            f"DELETE FROM {n}.target_slots USING TIMESTAMP ? WHERE notification_key = ? AND target = ? AND slot = ?"
            " AND block = ?"
        )
        self.occupancy_delete_target = p(
            f"DELETE FROM {n}.target_slots USING TIMESTAMP ? WHERE notification_key = ? AND target = ?"
        )
        self.known_insert = p(
            f"INSERT INTO {n}.target_slots_known (notification_key, source, since) VALUES (?, ?, toTimestamp(now()))"
        )
        self.known_select = p(f"SELECT source FROM {n}.target_slots_known WHERE notification_key = ?")
        self.known_scan = p(f"SELECT notification_key FROM {n}.target_slots_known")
        self.known_delete = p(f"DELETE FROM {n}.target_slots_known WHERE notification_key = ?")
        # Does a slot partition still hold a row in a block's numbers (reconcile's check of a block)?
        self.topic_any_in = p(
            f"SELECT no FROM {n}.topic_notification WHERE slot = ? AND notification_key = ? AND topic = ?"
            " AND no >= ? AND no < ? LIMIT 1"
        )
        self.cycle_any_in = p(
            f"SELECT no FROM {n}.cycle_notification WHERE slot = ? AND notification_key = ? AND timezone = ?"
            " AND day = ? AND hour = ? AND minute = ? AND no >= ? AND no < ? LIMIT 1"
        )

        # --- counters (execute with COUNTER_PROFILE) ---------------------------------------------------
        key = "WHERE service = ? AND notification_method = ? AND notification_type = ?"
        self.counter_add_no = p(f"UPDATE {c}.notification SET no = no + ? {key}")
        self.counter_add_count = p(f"UPDATE {c}.notification SET count = count + ? {key}")
        self.counter_add_version = p(f"UPDATE {c}.notification SET version = version + ? {key}")
        self.counter_select = p(f"SELECT version, count, no FROM {c}.notification {key}")
        self.counter_scan = p(f"SELECT service, notification_method, notification_type, count FROM {c}.notification")
        self.counter_versions = p(
            f"SELECT notification_method, notification_type, version FROM {c}.notification WHERE service = ?"
        )
        self.counter_counts = p(
            f"SELECT notification_method, notification_type, count FROM {c}.notification WHERE service = ?"
        )

        # --- per-topic subscriber counters (numbering.topic_subscribers, docs/SCHEMA.md decision 3) ----
        topic_key = "WHERE service = ? AND notification_type = ? AND topic = ?"
        self.counter_add_topic = p(f"UPDATE {c}.topic_subscribers SET subscribers = subscribers + ? {topic_key}")
        topic_cols = f"SELECT notification_type, topic, subscribers FROM {c}.topic_subscribers WHERE service = ?"
        self.topic_counts = p(topic_cols)
        self.topic_counts_after = p(f"{topic_cols} AND (notification_type, topic) > (?, ?)")
        self.topic_counts_of_type = p(f"{topic_cols} AND notification_type = ?")
        self.topic_counts_of_type_after = p(f"{topic_cols} AND notification_type = ? AND topic > ?")
        self.topic_counts_scan = p(f"SELECT service, notification_type, topic, subscribers FROM {c}.topic_subscribers")

        # --- the cycle calendar: how many slot rows one bucket of a template has in one slot -----------
        self.cycle_count = p(
            f"SELECT COUNT(*) FROM {n}.cycle_notification WHERE slot = ? AND notification_key = ? AND timezone = ?"
            " AND day = ? AND hour = ? AND minute = ?"
        )

        # Everything but a counter increment can be resent safely: marking it idempotent lets the
        # driver retry it on another replica when a node dies mid-request (RELIABILITY.md, node loss).
        for name, stmt in vars(self).items():
            if isinstance(stmt, PreparedStatement) and not name.startswith("counter_add"):
                stmt.is_idempotent = True

    # ------------------------------------------------------------------ execution helpers
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

    # ------------------------------------------------------------------ counters
    def allocate_numbers(self, service: str, method: str, type_: str, n: int) -> int:
        """Add ``n`` to the ``no`` counter, then read it; return the value read (the caller uses
        ``value - n + 1 .. value``). Concurrent callers may read overlapping values: harmless, because
        device_token is part of the slot rows' clustering key. Never retried on timeout. Retires this
        process's range of the counter (``take_numbers``), so every number handed out here after
        this call comes after it."""
        last = self._add_no(service, method, type_, n)
        with self._ranges_lock:
            held = self._ranges.get((service, method, type_))
        if held is not None:
            with held.lock:
                held.next, held.last = 1, 0
        return last

    def _add_no(self, service: str, method: str, type_: str, n: int) -> int:
        self.session.execute(self.counter_add_no, (n, service, method, type_), execution_profile=COUNTER_PROFILE)
        return self.counters(service, method, type_)[2]

    def take_numbers(self, service: str, method: str, type_: str, n: int) -> list[int]:
        """``n`` numbers of the ``no`` counter for new slot rows, from a range this process reserves
        (``NUMBER_RANGE`` numbers, one increment and its read) and hands out to its threads: two
        counter round trips per range instead of per request (docs/SCHEMA.md, "Counters"). A request
        for more than the range holds takes what is left and reserves the rest in one increment. A
        range another process reads overlapping is as harmless as overlapping reads of
        ``allocate_numbers``; numbers a process never hands out are a gap (fewer rows in a slot)."""
        key = (service, method, type_)
        with self._ranges_lock:
            held = self._ranges.get(key)
            if held is None:
                held = self._ranges[key] = _NumberRange(threading.Lock())
        out: list[int] = []
        with held.lock:  # a thread that finds the range spent reserves the next while the others wait
            while len(out) < n:
                if held.next > held.last:
                    want = max(NUMBER_RANGE, n - len(out))
                    held.last = self._add_no(service, method, type_, want)
                    held.next = held.last - want + 1
                take = min(n - len(out), held.last - held.next + 1)
                out.extend(range(held.next, held.next + take))
                held.next += take
        return out

    def add_count(self, service: str, method: str, type_: str, delta: int) -> None:
        if delta:
            self.session.execute(
                self.counter_add_count, (delta, service, method, type_), execution_profile=COUNTER_PROFILE
            )

    def add_subscriber_counts(
        self, service: str, method: str, type_: str, topics: dict[str, int], count_delta: int
    ) -> None:
        """Per-topic subscriber counters (``topics``: topic -> delta; TOPIC only) and the type's
        ``count``, in one counter batch: one round trip, never retried (a counter batch is not
        idempotent either). Zero deltas are left out; nothing to add, nothing sent."""
        batch = BatchStatement(batch_type=BatchType.COUNTER)
        for topic, delta in topics.items():
            if delta:
                batch.add(self.counter_add_topic, (delta, service, type_, topic))
        if count_delta:
            batch.add(self.counter_add_count, (count_delta, service, method, type_))
        if len(batch):
            self.session.execute(batch, execution_profile=COUNTER_PROFILE)

    def add_version(self, service: str, method: str, type_: str, delta: int = 1) -> None:
        self.session.execute(
            self.counter_add_version, (delta, service, method, type_), execution_profile=COUNTER_PROFILE
        )

    def counters(self, service: str, method: str, type_: str) -> tuple[int, int, int]:
        """(version, count, no); zeros when the row does not exist yet."""
        row = self.session.execute(self.counter_select, (service, method, type_), execution_profile=TUPLE_ROWS).one()
        if row is None:
            return 0, 0, 0
        version, count, no = row
        return int(version or 0), int(count or 0), int(no or 0)

    def versions(self, service: str) -> dict[tuple[str, str], int]:
        """Every (method, type) -> template cache version of one service: one partition read."""
        rows = self.session.execute(self.counter_versions, (service,))
        return {(r.notification_method, r.notification_type): int(r.version or 0) for r in rows}

    def counts(self, service: str) -> dict[tuple[str, str], int]:
        """Every (method, type) -> ``count`` (subscribed users) of one service: one partition read."""
        rows = self.session.execute(self.counter_counts, (service,))
        return {(r.notification_method, r.notification_type): int(r.count or 0) for r in rows}

    # Per-topic subscriber counters. Increments are never retried (COUNTER_PROFILE); drift is
    # repaired by `notee reconcile`.
    def add_topic_subscribers_async(self, service: str, type_: str, topic: str, delta: int) -> ResponseFuture:
        return self.session.execute_async(
            self.counter_add_topic, (delta, service, type_, topic), execution_profile=COUNTER_PROFILE
        )

    def topic_subscribers(
        self, service: str, type_: str | None = None, after: tuple[str, str] | None = None, fetch_size: int = 500
    ) -> Iterator[tuple[str, str, int]]:
        """(type, topic, subscribers) of one service in (type, topic) order, paged by the driver;
        ``after`` resumes after a (type, topic) key; with ``type_``, only that type's topics."""
        if type_ is None:
            stmt = self.topic_counts_after.bind((service, *after)) if after else self.topic_counts.bind((service,))
        elif after is not None and after[0] == type_:
            stmt = self.topic_counts_of_type_after.bind((service, type_, after[1]))
        else:
            stmt = self.topic_counts_of_type.bind((service, type_))
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield r.notification_type, r.topic, int(r.subscribers or 0)

    def scan_topic_subscribers(self, fetch_size: int = 1000) -> Iterator[tuple[str, str, str, int]]:
        """(service, type, topic, subscribers) of every service (reconcile)."""
        stmt = self.topic_counts_scan.bind(())
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield r.service, r.notification_type, r.topic, int(r.subscribers or 0)

    def cycle_rows_async(self, notification_key: str, bucket: CycleTarget, slot: int) -> ResponseFuture:
        """Start counting one slot's rows of a (template, local bucket): ``count_of`` reads the answer."""
        return self.session.execute_async(
            self.cycle_count, (slot, notification_key, bucket.timezone, bucket.day, bucket.hour, bucket.minute)
        )

    @staticmethod
    def count_of(future: ResponseFuture) -> int:
        row = future.result().one()
        return int(row[0]) if row is not None else 0

    def scan_counts(self, fetch_size: int = 1000) -> Iterator[tuple[str, str, str, int]]:
        stmt = self.counter_scan.bind(())
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield r.service, r.notification_method, r.notification_type, int(r.count or 0)

    # ------------------------------------------------------------------ per-user index
    @staticmethod
    def _index_rows(result: Iterable[tuple[str, str, str, str, str | None]]) -> list[IndexRow]:
        """IndexRows from tuple rows (index_user / index_user_type column order)."""
        return [
            IndexRow(method, type_, target, token, json.loads(data) if data else {})
            for method, type_, target, token, data in result
        ]

    def user_rows(self, user_id: str, service: str) -> list[IndexRow]:
        """Every index row of one user (one partition; a user's subscriptions x devices)."""
        return self._index_rows(self.session.execute(self.index_user, (user_id, service), execution_profile=TUPLE_ROWS))

    def user_rows_async(self, user_id: str, service: str) -> ResponseFuture:
        return self.session.execute_async(self.index_user, (user_id, service), execution_profile=TUPLE_ROWS)

    def user_type_rows(self, user_id: str, service: str, method: str, type_: str) -> list[IndexRow]:
        return self.index_rows_of(self.user_type_rows_async(user_id, service, method, type_))

    def user_type_rows_async(self, user_id: str, service: str, method: str, type_: str) -> ResponseFuture:
        return self.session.execute_async(
            self.index_user_type, (user_id, service, method, type_), execution_profile=TUPLE_ROWS
        )

    def index_rows_of(self, future: ResponseFuture) -> list[IndexRow]:
        return self._index_rows(future.result())

    def users_type_rows_async(
        self, user_ids: Sequence[str], service: str, method: str, type_: str
    ) -> list[ResponseFuture]:
        """Start reading many users' index rows of one type, ``IN_USERS`` partitions per request (one
        request per user cost ~20x more on a single node: each is queued and dispatched on its own)."""
        return [
            self.session.execute_async(
                self.index_users_type,
                (list(user_ids[i : i + IN_USERS]), service, method, type_),
                execution_profile=TUPLE_ROWS,
            )
            for i in range(0, len(user_ids), IN_USERS)
        ]

    @staticmethod
    def users_rows_of(futures: Sequence[ResponseFuture]) -> dict[str, list[IndexRow]]:
        """user_id -> IndexRows of ``users_type_rows_async`` (users without rows are absent)."""
        out: dict[str, list[IndexRow]] = {}
        for f in futures:
            for user_id, method, type_, target, token, data in f.result():
                out.setdefault(user_id, []).append(
                    IndexRow(method, type_, target, token, json.loads(data) if data else {})
                )
        return out

    def scan_index(self, fetch_size: int = 1000) -> Iterator[tuple[str, str, IndexRow]]:
        """(user_id, service, row) over the whole index, in token order: a partition's rows are
        contiguous. For `notee reconcile` only."""
        stmt = self.index_scan.bind(())
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield (
                r.user_id,
                r.service,
                IndexRow(
                    r.notification_method,
                    r.notification_type,
                    r.target,
                    r.device_token,
                    json.loads(r.data) if r.data else {},
                ),
            )

    def write_user_level(
        self,
        user_id: str,
        service: str,
        method: str,
        type_: str,
        target: str,
        notification_key: str,
        registered_at: int,
    ) -> ResponseFuture:
        data = json.dumps({"key": notification_key, "at": registered_at})
        return self.session.execute_async(
            self.index_insert, (user_id, service, method, type_, target, USER_LEVEL, data)
        )

    def delete_index_row(self, user_id: str, service: str, row: IndexRow) -> ResponseFuture:
        return self.session.execute_async(
            self.index_delete, (user_id, service, row.method, row.type_, row.target, row.device_token)
        )

    def delete_user_index(self, user_id: str, service: str) -> None:
        self.session.execute(self.index_delete_user, (user_id, service))

    # ------------------------------------------------------------------ slot rows (+ index row), batched
    def topic_subscription_rows(
        self,
        *,
        user_id: str,
        service: str,
        type_: str,
        topic: str,
        notification_key: str,
        devices: Sequence[tuple[int, str, str]],
        registered_at: int,
        with_user_level: bool,
        zone: str,
    ) -> list[Row]:
        """The rows of one user's topic subscription: per device ``(no, token, os)`` its slot row, its
        target_slots row, index row and token index row (``ROWS_PER_DEVICE``), then
        (``with_user_level``) the user-level row. ``zone``: the user's time zone ('' = the service's),
        stored on the slot rows. ``write_together`` writes them."""
        rows: list[Row] = []
        for no, token, os_ in devices:
            slot = slot_of(no)
            rows.append(
                (self.topic_insert, (slot, notification_key, topic, no, token, os_, user_id, registered_at, zone))
            )
            rows.append((self.occupancy_insert, (notification_key, topic, slot, block_of(no))))
            data = _device_data(notification_key, slot, no, os_, registered_at)
            rows.append((self.index_insert, (user_id, service, "TOPIC", type_, topic, token, data)))
            rows.append((self.token_insert, (service, token, user_id)))  # the token index (issue 14.5)
        if with_user_level:
            data = json.dumps({"key": notification_key, "at": registered_at})
            rows.append((self.index_insert, (user_id, service, "TOPIC", type_, topic, USER_LEVEL, data)))
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
        seen: set[tuple[int, tuple[Any, ...]]] = set()  # rows already in this batch (shared target_slots rows)
        for unit in units:
            unit_size = sum(_row_bytes(r) for r in unit)
            if unit_size > MAX_UNIT_BYTES:
                futures += self._write_big_unit(unit)
                continue
            if batch is None or size + unit_size > BATCH_BYTES:
                if batch is not None:
                    futures.append(self.session.execute_async(batch))
                batch = _logged_batch()
                size = 0
                seen = set()
            for stmt, params in unit:
                if (id(stmt), params) in seen:
                    continue  # the same fixed row twice in one batch (users of one block): write it once
                seen.add((id(stmt), params))
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
            batch = _logged_batch()
            for stmt, params in body[i : i + per_batch]:
                self._binder.add(batch, stmt, params)
            futures.append(self.session.execute_async(batch))
        if not user_level:
            return futures
        self.run(futures)  # the user-level row is written after (never before) its device rows
        stmt, params = user_level[0]
        return [self.session.execute_async(stmt, params)]

    def add_topic_device(
        self,
        *,
        user_id: str,
        service: str,
        type_: str,
        topic: str,
        notification_key: str,
        no: int,
        device_token: str,
        device_os: str,
        registered_at: int,
        zone: str,
        origin: str | None = None,
    ) -> ResponseFuture:
        """Slot row + target_slots row + device index row + token index row in one logged batch.
        ``zone``: the user's time zone ('' = the service's). ``origin``: the row is a rotated device's
        (it keeps the old row's ``no``; docs/SCHEMA.md, races)."""
        slot = slot_of(no)
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        batch.is_idempotent = True  # inserts/deletes of fixed rows only
        row = (slot, notification_key, topic, no, device_token, device_os, user_id, registered_at, zone)
        if origin is None:
            batch.add(self.topic_insert, row)
        else:
            batch.add(self.topic_insert_moved, (*row, origin))
        batch.add(self.occupancy_insert, (notification_key, topic, slot, block_of(no)))
        batch.add(self.token_insert, (service, device_token, user_id))
        batch.add(
            self.index_insert,
            (
                user_id,
                service,
                "TOPIC",
                type_,
                topic,
                device_token,
                _device_data(notification_key, slot, no, device_os, registered_at, origin),
            ),
        )
        return self.session.execute_async(batch)

    def add_cycle_device(
        self,
        *,
        user_id: str,
        service: str,
        type_: str,
        target: str,
        notification_key: str,
        timezone: str,
        days: Sequence[str],
        hour: int,
        minute: int,
        no: int,
        device_token: str,
        device_os: str,
        registered_at: int,
        origin: str | None = None,
    ) -> ResponseFuture:
        """Slot rows and target_slots rows (one per day) + device index row + token index row in one
        logged batch."""
        slot = slot_of(no)
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        batch.is_idempotent = True  # inserts/deletes of fixed rows only
        for day in days:
            row = (slot, notification_key, timezone, day, hour, minute, no, device_token, device_os, user_id)
            if origin is None:
                batch.add(self.cycle_insert, (*row, registered_at))
            else:
                batch.add(self.cycle_insert_moved, (*row, registered_at, origin))
            bucket = target_name(CycleTarget(timezone, day, hour, minute))
            batch.add(self.occupancy_insert, (notification_key, bucket, slot, block_of(no)))
        batch.add(
            self.index_insert,
            (
                user_id,
                service,
                "CYCLE",
                type_,
                target,
                device_token,
                _device_data(notification_key, slot, no, device_os, registered_at, origin),
            ),
        )
        batch.add(self.token_insert, (service, device_token, user_id))
        return self.session.execute_async(batch)

    def remove_device_rows(
        self,
        user_id: str,
        service: str,
        row: IndexRow,
        schedule_parts: tuple[str, Sequence[str], int, int] | None,
        *,
        slot_rows: bool = True,
        index_row: bool = True,
    ) -> ResponseFuture:
        """Delete one device's slot rows of one subscription and its index row, in one logged batch.
        ``schedule_parts`` = (timezone, days, hour, minute) for CYCLE rows, None for TOPIC. A slot row
        another user of a shared device still refers to is kept (``slot_rows=False``); it is deleted
        alone (``index_row=False``) once nobody refers to it."""
        ref = slot_ref(row)
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        batch.is_idempotent = True  # inserts/deletes of fixed rows only
        if ref is not None and slot_rows:
            if row.method == "TOPIC":
                batch.add(self.topic_delete, (ref.slot, ref.notification_key, row.target, ref.no, row.device_token))
            elif schedule_parts is not None:
                tz, days, hour, minute = schedule_parts
                for day in days:
                    batch.add(
                        self.cycle_delete,
                        (ref.slot, ref.notification_key, tz, day, hour, minute, ref.no, row.device_token),
                    )
        if index_row:
            batch.add(self.index_delete, (user_id, service, row.method, row.type_, row.target, row.device_token))
        return self.session.execute_async(batch)

    def set_zone(self, row: IndexRow, zone: str) -> ResponseFuture | None:
        """Rewrite the zone of the topic slot row a device index row points at (None: no slot row)."""
        ref = slot_ref(row)
        if ref is None or row.method != "TOPIC":
            return None
        return self.session.execute_async(
            self.topic_set_zone, (zone, ref.slot, ref.notification_key, row.target, ref.no, row.device_token)
        )

    # ------------------------------------------------------------------ token index
    def token_holders_async(self, service: str, device_token: str) -> ResponseFuture:
        return self.session.execute_async(self.token_users, (service, device_token))

    @staticmethod
    def holders_of(future: ResponseFuture) -> list[str]:
        return [r.user_id for r in future.result()]

    def token_holders(self, service: str, device_token: str) -> list[str]:
        """Users that may hold rows of ``device_token`` (the token index; a superset)."""
        return self.holders_of(self.token_holders_async(service, device_token))

    def forget_token_holder(self, service: str, device_token: str, user_id: str) -> ResponseFuture:
        return self.session.execute_async(self.token_delete, (service, device_token, user_id))

    def note_token_holder(self, service: str, device_token: str, user_id: str) -> ResponseFuture:
        return self.session.execute_async(self.token_insert, (service, device_token, user_id))

    # ------------------------------------------------------------------ occupancy (target_slots)
    def mark_occupancy_known(self, notification_key: str, source: str) -> None:
        """Record that every slot row of this template has its target_slots row (``source``: "created"
        for a new template, "backfill" once ``notee backfill-occupancy`` recorded an older one's)."""
        self.session.execute(self.known_insert, (notification_key, source))

    def occupancy_known_keys(self) -> set[str]:
        return {r.notification_key for r in self.session.execute(self.known_scan)}

    def forget_occupancy_known(self, notification_key: str) -> None:
        self.session.execute(self.known_delete, (notification_key,))

    def occupancy(self, notification_key: str, target: TopicTarget | CycleTarget) -> dict[int, int] | None:
        """slot -> number of occupied blocks of one target, or None when the template's occupancy is not
        known (created before target_slots and not backfilled: the caller walks every slot). Two
        reads, in flight together: the template's marker and the target's partition."""
        known = self.session.execute_async(self.known_select, (notification_key,), execution_profile=TUPLE_ROWS)
        stmt = self.occupancy_select.bind((notification_key, target_name(target)))
        stmt.fetch_size = 5000  # a dense target of 10 M numbers has 10,000 rows: two pages
        rows = self.session.execute_async(stmt, execution_profile=TUPLE_ROWS)
        blocks: dict[int, int] = {}
        for slot, _block in rows.result():
            blocks[slot] = blocks.get(slot, 0) + 1
        return blocks if known.result().one() is not None else None

    def note_occupancy(self, notification_key: str, target: TopicTarget | CycleTarget, no: int) -> ResponseFuture:
        """Record (idempotently) that ``no``'s slot and block of a target hold a row (the backfill)."""
        return self.session.execute_async(
            self.occupancy_insert, (notification_key, target_name(target), slot_of(no), block_of(no))
        )

    def scan_occupancy_from(self, after_token: int, fetch_size: int) -> Iterator[tuple[int, str, str, int, int, int]]:
        """(partition token, notification_key, target, slot, block, writetime µs) after ``after_token``,
        in token order."""
        stmt = self.occupancy_scan_from.bind((after_token,))
        stmt.fetch_size = fetch_size
        for r in self.session.execute(stmt):
            yield int(r.t), r.notification_key, r.target, int(r.slot), int(r.block), int(r.w or 0)

    def block_has_rows_async(
        self, notification_key: str, method: str, target: str, slot: int, block: int
    ) -> ResponseFuture:
        """Start reading whether a target's slot partition holds a row numbered in ``block`` (LIMIT 1);
        ``method``: its template's (how ``target`` is spelled)."""
        low, high = block * BLOCK_SIZE, (block + 1) * BLOCK_SIZE
        parsed = parse_target_name(target, method)
        if isinstance(parsed, TopicTarget):
            return self.session.execute_async(self.topic_any_in, (slot, notification_key, parsed.topic, low, high))
        b = parsed
        return self.session.execute_async(
            self.cycle_any_in, (slot, notification_key, b.timezone, b.day, b.hour, b.minute, low, high)
        )

    def delete_occupancy(self, timestamp_us: int, notification_key: str, target: str, slot: int, block: int) -> None:
        self.session.execute(self.occupancy_delete, (timestamp_us, notification_key, target, slot, block))

    def delete_occupancy_target(self, timestamp_us: int, notification_key: str, target: str) -> None:
        self.session.execute(self.occupancy_delete_target, (timestamp_us, notification_key, target))

    # ------------------------------------------------------------------ reconcile walk
    def scan_index_from(self, after_token: int, fetch_size: int) -> Iterator[tuple[int, str, str, IndexRow]]:
        """(partition token, user_id, service, row) of the index after ``after_token``, in token order."""
        stmt = self.index_scan_from.bind((after_token,))
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield (
                int(r.t),
                r.user_id,
                r.service,
                IndexRow(
                    r.notification_method,
                    r.notification_type,
                    r.target,
                    r.device_token,
                    json.loads(r.data) if r.data else {},
                ),
            )

    def reconcile_cursor(self, name: str) -> int | None:
        row = self.session.execute(self.cursor_select, (name,)).one()
        return None if row is None or row.last_token is None else int(row.last_token)

    def set_reconcile_cursor(self, name: str, last_token: int | None) -> None:
        self.session.execute(self.cursor_update, (name, last_token))

    def cycle_bucket_has_rows(
        self, notification_key: str, timezone: str, day: str, hour: int, minute: int, slots: Iterable[int]
    ) -> bool:
        """Whether any of ``slots`` of a cycle bucket holds a live row (one LIMIT 1 read per slot)."""
        futures = [
            self.session.execute_async(self.cycle_any, (slot, notification_key, timezone, day, hour, minute))
            for slot in slots
        ]
        return any(f.result().one() is not None for f in futures)

    # ------------------------------------------------------------------ scheduler's due index
    def mark_due(
        self,
        *,
        service: str,
        type_: str,
        notification_key: str,
        timezone: str,
        days: Sequence[str],
        hour: int,
        minute: int,
    ) -> list[ResponseFuture]:
        futures = [
            self.session.execute_async(self.due_insert, (timezone, d, hour, minute, notification_key, service, type_))
            for d in days
        ]
        futures.append(self.session.execute_async(self.tz_insert, (timezone,)))
        return futures

    def due_templates_async(self, bucket: CycleTarget) -> ResponseFuture:
        """Start reading one bucket's ``cycle_due`` partition; ``due_rows_of`` turns it into rows.
        The scheduler starts the reads of every due bucket of a minute before waiting for any."""
        return self.session.execute_async(self.due_select, (bucket.timezone, bucket.day, bucket.hour, bucket.minute))

    @staticmethod
    def due_rows_of(future: ResponseFuture) -> list[tuple[str, str, str]]:
        """(service, notification_key, notification_type) rows of a ``due_templates_async`` read."""
        return [(r.service, r.notification_key, r.notification_type) for r in future.result()]

    def scan_due(self, fetch_size: int = 1000) -> Iterator[tuple[str, str, int, int, str, str]]:
        """(timezone, day, hour, minute, notification_key, service) of every due bucket (reconcile)."""
        stmt = self.due_scan.bind(())
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield r.timezone, r.day, r.hour, r.minute, r.notification_key, r.service

    def delete_due(self, timestamp_us: int, timezone: str, day: str, hour: int, minute: int, key: str) -> None:
        self.session.execute(self.due_delete, (timestamp_us, timezone, day, hour, minute, key))

    def delete_timezone(self, timestamp_us: int, timezone: str) -> None:
        self.session.execute(self.tz_delete, (timestamp_us, timezone))


# (statement, bound values) of one row to write in a batch.
Row = tuple[PreparedStatement, tuple[Any, ...]]
IN_USERS = 50  # partitions per IN read
# Numbers a process reserves at a time for single subscribes (``take_numbers``): at most this many are
# left unused per (type, process) when the process stops.
NUMBER_RANGE = 100
ROWS_PER_DEVICE = 4  # topic_subscription_rows: slot row, target_slots row, index row, token index row
# Cassandra warns about logged batches over 5 KiB (batch_size_warn_threshold) and refuses them over
# 50 KiB: units share a batch up to the first, a unit over MAX_UNIT_BYTES is split.
BATCH_BYTES = 4096
MAX_UNIT_BYTES = 40_960


def target_name(target: TopicTarget | CycleTarget) -> str:
    """A target's key in target_slots: the topic, or the cycle bucket "<timezone> <DAY> <HH:MM>"."""
    if isinstance(target, TopicTarget):
        return target.topic
    return f"{target.timezone} {target.day} {target.hour:02d}:{target.minute:02d}"


def parse_target_name(name: str, method: str) -> TopicTarget | CycleTarget:
    """Inverse of ``target_name`` for a template of ``method`` (a topic may contain spaces)."""
    if method != "CYCLE":
        return TopicTarget(name)
    zone, day, at = name.rsplit(" ", 2)
    hour, minute = at.split(":")
    return CycleTarget(zone, day, int(hour), int(minute))


def _row_bytes(row: Row) -> int:
    """About what a row weighs in a batch: its values as text, plus the per-row overhead. A plain
    loop: a generator per row cost ~5 % of a bulk subscribe's CPU."""
    size = 32
    for v in row[1]:
        size += len(v) if isinstance(v, str) else 8
    return size


def _logged_batch() -> BatchStatement:
    batch = BatchStatement(batch_type=BatchType.LOGGED)
    batch.is_idempotent = True  # inserts of fixed rows only
    return batch


def _device_data(
    notification_key: str, slot: int, no: int, device_os: str, registered_at: int, origin: str | None = None
) -> str:
    data: dict[str, Any] = {"key": notification_key, "slot": slot, "no": no, "os": device_os, "at": registered_at}
    if origin is not None:
        data["origin"] = origin  # the device's first token: a later rotation carries it on
    return json.dumps(data)


def slot_zone(timezone: str | None) -> str:
    """The ``zone`` a topic slot row stores for a user of ``timezone``: '' for none (the service's,
    whatever it is when a job runs, so a service's zone change rewrites no row)."""
    return timezone or ""


def slot_ref(row: IndexRow) -> SlotRef | None:
    d = row.data
    if row.is_user_level or "slot" not in d:
        return None
    return SlotRef(d["key"], int(d["slot"]), int(d["no"]))


# ---------------------------------------------------------------------- interfaces for fan-out / scheduler
class PagingStateRejected(Exception):
    """The server refused a paging state (a protocol error: e.g. written by another server version).
    Resume the slot from the last checkpointed key instead (``after=``)."""


def stream_recipients(
    cql_statements: Statements,
    notification_key: str,
    target: TopicTarget | CycleTarget,
    slot: int,
    fetch_size: int,
    paging_state: bytes | None = None,
    *,
    after: tuple[int, str] | None = None,
    zone: str | None = None,
) -> Iterator[tuple[list[RecipientRow], bytes | None]]:
    """Yield the recipients of one slot of (template, topic) or (template, cycle bucket), one page of at
    most ``fetch_size`` rows at a time (``RecipientRow``s: the driver's tuples, read by position),
    with the paging state *after* that page (None once the slot is exhausted). Resume from a checkpoint by passing the paging state back, or, when the server
    rejected it (``PagingStateRejected``), by passing ``after=(no, device_token)`` of the last row
    already sent. Reads Cassandra only and never holds more than one page. A page may be empty
    (tombstones, or rows of other zones) while the state is not None. ``zone`` (a topic): only the
    rows that carry that zone (CQL 0004; '' = the service's)."""
    st = cql_statements
    if isinstance(target, TopicTarget) and zone is not None:
        key: tuple[Any, ...] = (slot, notification_key, target.topic)
        stmt = st.topic_page_zone_after.bind((*key, *after, zone)) if after else st.topic_page_zone.bind((*key, zone))
    elif isinstance(target, TopicTarget):
        key = (slot, notification_key, target.topic)
        stmt = st.topic_page_after.bind(key + after) if after else st.topic_page.bind(key)
    else:
        key = (slot, notification_key, target.timezone, target.day, target.hour, target.minute)
        stmt = st.cycle_page_after.bind(key + after) if after else st.cycle_page.bind(key)
    stmt.fetch_size = fetch_size
    # One request per page, each with its own timeout (``pages``): never ``fetch_next_page``, which
    # can wait for a frozen coordinator for as long as it stays frozen.
    results = pages(st.session, stmt, paging_state, PAGE_PROFILE)
    while True:
        try:
            result = next(results, None)
        except ProtocolException as exc:
            if "paging state" in str(exc):
                raise PagingStateRejected(str(exc)) from exc
            raise
        if result is None:
            return
        # The driver's own rows, handed on as they are: an object built per row (a ``Recipient``)
        # cost ~0.5 µs per row, most of it in the garbage collector (docs/BENCHMARKS.md, slot walk).
        yield result.current_rows, result.paging_state


def max_slot(cql_statements: Statements, service: str, method: str, type_: str) -> int:
    """The highest slot any subscription of (service, method, type) can be in: ``slot_of(no)``."""
    _, _, no = cql_statements.counters(service, method, type_)
    return slot_of(no)


def due_templates(
    cql_statements: Statements, timezone: str, day: str, hour: int, minute: int
) -> list[tuple[str, str, str]]:
    """(service, notification_key, notification_type) of the cycle templates with subscribers at a local
    bucket. May include a deleted template's key until `notee reconcile`: resolve it in MySQL and skip
    it when gone."""
    return cql_statements.due_rows_of(cql_statements.due_templates_async(CycleTarget(timezone, day, hour, minute)))


def timezones_in_use(cql_statements: Statements) -> list[str]:
    return [r.timezone for r in cql_statements.session.execute(cql_statements.tz_select)]
