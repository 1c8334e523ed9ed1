"""The engagement tables (schema/cql/0007_engagement.cql, docs/ENGAGEMENT.md): the receipts apps post,
one row per (notification, event), and their counters per job and per (type | topic | day).

Receipts are written idempotently (the row's key is the notification and the event) and counted
only when the row was not there before this batch read it: a retried batch counts once. Counter
increments run with ``COUNTER_PROFILE`` and are never retried (not idempotent); a count that
drifted (a counter write that failed after its rows landed) is repaired by ``recount``."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from cassandra import ConsistencyLevel
from cassandra.cluster import ResponseFuture, Session
from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement

from notee.core.clock import stored_now
from notee.store.cassandra import COUNTER_PROFILE, Keyspaces
from notee.store.cql.rows import TUPLE_ROWS

BUCKETS = 32  # partitions per job: a viral job's receipts spread over them (0007_engagement.cql)
# Partitions one request reads or writes at most: a batch of 100 receipts of one job touches ~30 of
# its buckets, and one request each cost the API most of its CPU (docs/ENGAGEMENT.md "Measured");
# Cassandra warns of an unlogged batch over 10 partitions (unlogged_batch_across_partitions_warn_threshold).
PARTITIONS_PER_REQUEST = 10
# Rows one write request carries at most: Cassandra warns of a batch over batch_size_warn_threshold
# (5 KiB; a receipt row is ~175 bytes in a batch), and a batch over it measured ~45 ms instead of
# ~3-5 ms (100 receipts in 10-partition batches of ~33 rows, 5-6 KiB; docs/ENGAGEMENT.md "Measured").
ROWS_PER_WRITE = 20
# A read asks each of its partitions for every device of the request (bucket IN ? AND device IN ?):
# more lookups for Cassandra than a read per partition, yet measured faster at 10 partitions a read
# than at 4 or 1 (docs/ENGAGEMENT.md "Measured").
READ_PARTITIONS = 10
COUNTERS_PER_REQUEST = 32  # counter increments per counter batch (a batch of one job's receipts: ~16)
SCOPES = ("type", "topic", "day", "sent")


def bucket_of(device: str) -> int:
    return zlib.crc32(device.encode("ascii")) % BUCKETS


@dataclass(frozen=True, slots=True)
class ReceiptRow:
    """One event of one notification, as stored."""

    source: str
    device: str
    event: str
    action: str | None
    at: datetime  # naive UTC: when the app says it happened
    received: datetime


@dataclass(frozen=True, slots=True)
class ScopeKeys:
    """Where a source's events are counted besides its own partition: its template type, its topic
    ("<type> <topic>", None: not a topic job) and its day (YYYY-MM-DD, the service's time zone)."""

    type_: str
    topic: str | None
    day: str


class Engagement:
    """notification.receipt, receipt_source, engagement_job and engagement_scope."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        p = session.prepare
        key = "WHERE service = ? AND source = ? AND bucket = ?"
        self.receipt_insert = p(
            f"INSERT INTO {n}.receipt (service, source, bucket, device, event, action, at, received)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
        )
        self.receipt_known = p(
            f"SELECT bucket, device, event FROM {n}.receipt"
            " WHERE service = ? AND source = ? AND bucket IN ? AND device IN ?"
        )
        self.receipt_page = p(f"SELECT device, event, action, at, received FROM {n}.receipt {key} LIMIT ?")
        self.receipt_page_after = p(
            f"SELECT device, event, action, at, received FROM {n}.receipt {key} AND (device, event) > (?, ?) LIMIT ?"
        )
        self.receipt_events = p(f"SELECT event FROM {n}.receipt {key}")
        self.receipt_events_received = p(f"SELECT event, received FROM {n}.receipt {key}")
        self.source_insert = p(
            f"INSERT INTO {n}.receipt_source (service, source, notification_type, day, targeted, sent, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?"
        )
        self.source_select = p(
            f"SELECT notification_type, day, targeted, sent, created_at FROM {n}.receipt_source"
            " WHERE service = ? AND source = ?"
        )
        # Execute the counter_add_* statements with COUNTER_PROFILE (never retried).
        self.counter_add_engagement_job = p(
            f"UPDATE {n}.engagement_job SET n = n + ? WHERE service = ? AND source = ? AND event = ?"
        )
        self.counter_add_engagement_scope = p(
            f"UPDATE {n}.engagement_scope SET n = n + ?"
            " WHERE service = ? AND scope = ? AND month = ? AND item = ? AND event = ?"
        )
        self.engagement_job_counts = p(f"SELECT event, n FROM {n}.engagement_job WHERE service = ? AND source = ?")
        self.engagement_scope_counts = p(
            f"SELECT item, event, n FROM {n}.engagement_scope WHERE service = ? AND scope = ? AND month = ?"
        )
        self.engagement_job_delete = p(f"DELETE FROM {n}.engagement_job WHERE service = ? AND source = ?")
        self.engagement_scope_delete = p(
            f"DELETE FROM {n}.engagement_scope WHERE service = ? AND scope = ? AND month = ?"
        )

    # ------------------------------------------------------------------ writes
    def store_receipts(self, service: str, rows: Sequence[ReceiptRow], ttl_s: int) -> list[bool]:
        """Write ``rows`` (idempotent) and say, per row, whether it is new: not stored before this call
        and not a repeat of an earlier row of ``rows``. Raises the first store error after every
        request finished (a failed batch wrote nothing the client will not write again on retry).
        The partitions a batch touches are read READ_PARTITIONS at a time, then written at most
        PARTITIONS_PER_REQUEST partitions and ROWS_PER_WRITE rows at a time: a few requests per
        batch instead of two per partition."""
        groups: dict[tuple[str, int], list[int]] = {}
        for i, r in enumerate(rows):
            groups.setdefault((r.source, bucket_of(r.device)), []).append(i)
        reads = [
            (
                source,
                self.session.execute_async(
                    self.receipt_known,
                    (
                        service,
                        source,
                        [b for _, b in chunk],
                        sorted({rows[i].device for g in chunk for i in groups[g]}),
                    ),
                    execution_profile=TUPLE_ROWS,
                ),
            )
            for source, chunk in _partition_chunks(groups, READ_PARTITIONS)
        ]
        known: set[tuple[str, str, str]] = set()
        for source, future in reads:
            known.update((source, device, event) for _, device, event in future.result())
        new = [False] * len(rows)
        writes: list[ResponseFuture] = []
        # Unlogged: no batch log; each partition's rows are one mutation at its replicas, and the
        # request answers once every partition met the consistency level.
        batch, parts = BatchStatement(batch_type=BatchType.UNLOGGED), 0
        for (source, bucket), members in groups.items():
            fresh = []
            for i in members:
                ident = (rows[i].source, rows[i].device, rows[i].event)
                if ident not in known:
                    known.add(ident)
                    new[i] = True
                    fresh.append(rows[i])
            if not fresh:
                continue
            if len(batch) and (parts == PARTITIONS_PER_REQUEST or len(batch) + len(fresh) > ROWS_PER_WRITE):
                writes.append(self.session.execute_async(batch))
                batch, parts = BatchStatement(batch_type=BatchType.UNLOGGED), 0
            for r in fresh:
                batch.add(
                    self.receipt_insert, (service, source, bucket, r.device, r.event, r.action, r.at, r.received, ttl_s)
                )
            parts += 1
        if len(batch):
            writes.append(self.session.execute_async(batch))
        _wait(writes)
        return new

    def count(self, service: str, counts: dict[tuple[str, ScopeKeys, str], int]) -> None:
        """Add ``counts`` ((source, its scope keys, event) -> new events) to the job's counters and
        to its type's, topic's and day's, in counter batches (a batch of receipts of one job: one
        request; its partitions are the job's and a few of its month's). Never retried: a failure
        raises after every request finished, and ``recount`` repairs the job's counts."""
        per_scope: Counter[tuple[str, str, str, str]] = Counter()
        increments: list[tuple[PreparedStatement, tuple[object, ...]]] = []
        for (source, keys, event), delta in counts.items():
            if not source.startswith("s"):  # a single send's few events are counted from its rows (raw_counts)
                increments.append((self.counter_add_engagement_job, (delta, service, source, event)))
            per_scope[("type", keys.day[:7], keys.type_, event)] += delta
            per_scope[("day", keys.day[:7], keys.day, event)] += delta
            if keys.topic is not None:
                per_scope[("topic", keys.day[:7], keys.topic, event)] += delta
        for (scope, month, key, event), delta in per_scope.items():
            increments.append((self.counter_add_engagement_scope, (delta, service, scope, month, key, event)))
        futures = []
        for k in range(0, len(increments), COUNTERS_PER_REQUEST):
            batch = BatchStatement(batch_type=BatchType.COUNTER)
            for statement, values in increments[k : k + COUNTERS_PER_REQUEST]:
                batch.add(statement, values)
            futures.append(self.session.execute_async(batch, execution_profile=COUNTER_PROFILE))
        _wait(futures)

    def add_scope(self, service: str, scope: str, month: str, key: str, event: str, delta: int) -> ResponseFuture:
        return self.session.execute_async(
            self.counter_add_engagement_scope,
            (delta, service, scope, month, key, event),
            execution_profile=COUNTER_PROFILE,
        )

    def add_source(self, service: str, source: str, keys: ScopeKeys, sent: tuple[int, int], ttl_s: int) -> None:
        """A single send's source row (``sent``: targeted, sent) and its day's sent counters."""
        self.session.execute(
            self.source_insert, (service, source, keys.type_, keys.day, sent[0], sent[1], stored_now(), ttl_s)
        )
        key = f"{keys.day} {keys.type_}"
        _wait(
            self.add_scope(service, "sent", keys.day[:7], key, event, n)
            for event, n in (("targeted", sent[0]), ("sent", sent[1]))
            if n
        )

    # ------------------------------------------------------------------ reads
    def source_row(self, service: str, source: str) -> tuple[str, str, int, int] | None:
        """(type, day, targeted, sent) of a single send's source, None when unknown (or expired)."""
        row = self.session.execute(self.source_select, (service, source), execution_profile=TUPLE_ROWS).one()
        return None if row is None else (row[0], row[1], int(row[2] or 0), int(row[3] or 0))

    def forget_jobs(self, jobs: Iterable[tuple[str, str]]) -> None:
        """Delete the counters of ``jobs`` ((service, source)): their job rows are being pruned."""
        _wait(self.session.execute_async(self.engagement_job_delete, job) for job in jobs)

    def forget_months(self, services: Iterable[str], months: Sequence[str]) -> int:
        """Delete every scope partition of ``services`` for ``months``; how many partitions."""
        keys = [(svc, scope, month) for svc in services for scope in SCOPES for month in months]
        _wait(self.session.execute_async(self.engagement_scope_delete, k) for k in keys)
        return len(keys)

    def job_counts(self, service: str, source: str, *, everywhere: bool = False) -> dict[str, int]:
        """A job's counters; ``everywhere``: read at ``ALL`` (module doc of usecases/receipt_repair.py)."""
        level = ConsistencyLevel.ALL if everywhere else None  # None: the profile's
        statement = BoundStatement(self.engagement_job_counts, consistency_level=level).bind((service, source))
        rows = self.session.execute(statement, execution_profile=TUPLE_ROWS)
        return {event: int(n) for event, n in rows}

    def scope_counts(self, service: str, scope: str, months: Iterable[str]) -> dict[tuple[str, str], int]:
        """(key, event) -> count of ``scope`` over ``months`` (YYYY-MM): one partition read each."""
        futures = [
            self.session.execute_async(
                self.engagement_scope_counts, (service, scope, month), execution_profile=TUPLE_ROWS
            )
            for month in months
        ]
        out: dict[tuple[str, str], int] = {}
        for f in futures:
            for key, event, n in f.result():
                out[(key, event)] = out.get((key, event), 0) + int(n)
        return out

    def receipts_page(
        self, service: str, source: str, bucket: int, after: tuple[str, str] | None, limit: int
    ) -> list[tuple[str, str, str | None, datetime, datetime]]:
        """Up to ``limit`` raw events of one bucket of a source, after (device, event)."""
        if after is None:
            rs = self.session.execute(self.receipt_page, (service, source, bucket, limit), execution_profile=TUPLE_ROWS)
        else:
            rs = self.session.execute(
                self.receipt_page_after, (service, source, bucket, *after, limit), execution_profile=TUPLE_ROWS
            )
        return [tuple(r) for r in rs]

    def raw_counts(self, service: str, source: str) -> dict[str, int]:
        """Events per kind of a source, counted from its rows (its 32 partitions, read at once): a
        single send's figures (a user's few devices), and the truth ``recount`` repairs a job's with."""
        futures = [
            self.session.execute_async(self.receipt_events, (service, source, bucket), execution_profile=TUPLE_ROWS)
            for bucket in range(BUCKETS)
        ]
        truth: Counter[str] = Counter()
        for f in futures:
            for (event,) in f.result():
                truth[event] += 1
        return dict(truth)

    def raw_tally(self, service: str, source: str) -> tuple[dict[str, int], datetime | None]:
        """Events per kind of a source counted from its rows, and the newest row's ``received`` (None:
        no row), read at ``ALL``: the automatic repair recounts a job only once it has been quiet, and
        only with every replica answering (usecases/receipt_repair.py)."""
        futures = [
            self.session.execute_async(
                BoundStatement(self.receipt_events_received, consistency_level=ConsistencyLevel.ALL).bind(
                    (service, source, bucket)
                ),
                execution_profile=TUPLE_ROWS,
            )
            for bucket in range(BUCKETS)
        ]
        truth: Counter[str] = Counter()
        newest: datetime | None = None
        for f in futures:
            for event, received in f.result():
                truth[event] += 1
                if received is not None and (newest is None or received > newest):
                    newest = received
        return dict(truth), newest

    def recount(self, service: str, source: str) -> dict[str, int]:
        """Count the raw events of a job and set its counters to them (adding the difference): the
        repair of a drifted count. Returns the counts. Not for a job receiving receipts right now
        (an event counted between the read and the add would be counted twice)."""
        truth = self.raw_counts(service, source)
        held = self.job_counts(service, source)
        futures = [
            self.session.execute_async(
                self.counter_add_engagement_job,
                (truth.get(event, 0) - held.get(event, 0), service, source, event),
                execution_profile=COUNTER_PROFILE,
            )
            for event in set(truth) | set(held)
            if truth.get(event, 0) != held.get(event, 0)
        ]
        _wait(futures)
        return truth


def _partition_chunks(groups: dict[tuple[str, int], list[int]], size: int) -> list[tuple[str, list[tuple[str, int]]]]:
    """The (source, bucket) partitions of ``groups``, per source, ``size`` at a time."""
    per_source: dict[str, list[tuple[str, int]]] = {}
    for g in groups:
        per_source.setdefault(g[0], []).append(g)
    return [(source, parts[k : k + size]) for source, parts in per_source.items() for k in range(0, len(parts), size)]


def _wait(futures: Iterable[ResponseFuture]) -> None:
    """Wait for every future; raise the first error after all have finished."""
    first: BaseException | None = None
    for f in list(futures):
        try:
            f.result()
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first
