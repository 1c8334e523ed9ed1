"""The engagement tables (schema/cql/0007_engagement.cql, docs/ENGAGEMENT.md): the receipts apps post,
one row per (notification, event), single sends' source rows and their sent per day
(``engagement_scope``'s `sent`); the counters are notee/store/cql/engagement_counts.py.

Receipts are claimed: each row is written ``IF NOT EXISTS`` and counted only by the request told it
applied it, so a retried batch, or two copies of one at once, counts once."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from cassandra import ConsistencyLevel
from cassandra.cluster import ResponseFuture, Session
from cassandra.query import BatchStatement, BatchType, BoundStatement

from notee.core.clock import stored_now
from notee.store.cassandra import COUNTER_PROFILE, Keyspaces
from notee.store.cql.rows import TUPLE_ROWS

BUCKETS = 32  # partitions per job: a viral job's receipts spread over them (0007_engagement.cql)
# The rows of a batch are written one conditional request per partition (``claim_receipts``: a
# lightweight transaction cannot span partitions); a batch of 100 receipts of one job touches ~30 of
# its 32 buckets. Measured against the unlogged multi-partition writes it replaced in
# docs/ENGAGEMENT.md "Measured".
# A read asks each of its partitions for every device of the request (bucket IN ? AND device IN ?):
# more lookups for Cassandra than a read per partition, yet measured faster at 10 partitions a read
# than at 4 or 1 (docs/ENGAGEMENT.md "Measured").
READ_PARTITIONS = 10
SCOPES = ("type", "topic", "day", "sent")  # engagement_scope's (only `sent` is still written)


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
        # Conditional: never marked idempotent (statements.py): a resent claim that the first attempt
        # applied answers "not applied", and the event would go uncounted.
        self.claim_receipt = p(
            f"INSERT INTO {n}.receipt (service, source, bucket, device, event, action, at, received)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?"
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
        # Execute with COUNTER_PROFILE (never retried).
        self.counter_add_engagement_scope = p(
            f"UPDATE {n}.engagement_scope SET n = n + ?"
            " WHERE service = ? AND scope = ? AND month = ? AND item = ? AND event = ?"
        )
        self.engagement_scope_counts = p(
            f"SELECT item, event, n FROM {n}.engagement_scope WHERE service = ? AND scope = ? AND month = ?"
        )
        self.engagement_scope_delete = p(
            f"DELETE FROM {n}.engagement_scope WHERE service = ? AND scope = ? AND month = ?"
        )

    # ------------------------------------------------------------------ writes
    def store_receipts(self, service: str, rows: Sequence[ReceiptRow], ttl_s: int) -> list[bool]:
        """Write ``rows`` (idempotent) and say, per row, whether this call stored it first: not stored
        before, not a repeat of an earlier row of ``rows``, and not stored meanwhile by another request
        (two copies of a batch at once: the claim below). Raises the first store error after every
        request finished (a failed batch wrote nothing the client will not write again on retry)."""
        return self.claim_receipts(service, rows, self.known_receipts(service, rows), ttl_s)

    def known_receipts(self, service: str, rows: Sequence[ReceiptRow]) -> set[tuple[str, str, str]]:
        """(source, device, event) of ``rows`` already stored: the partitions ``rows`` touch, read
        READ_PARTITIONS at a time (a few requests per batch instead of one per partition)."""
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
            for groups in [_groups(rows)]
            for source, chunk in _partition_chunks(groups, READ_PARTITIONS)
        ]
        known: set[tuple[str, str, str]] = set()
        for source, future in reads:
            known.update((source, device, event) for _, device, event in future.result())
        return known

    def claim_receipts(
        self, service: str, rows: Sequence[ReceiptRow], known: set[tuple[str, str, str]], ttl_s: int
    ) -> list[bool]:
        """Write the rows of ``rows`` not in ``known``, each ``IF NOT EXISTS`` (a lightweight
        transaction: of two requests writing one row at once, exactly one is told it applied it), one
        conditional batch per partition; per row, True when this call wrote it. A partition's batch
        that did not apply (a row of it written meanwhile: a concurrent copy) is claimed row by row.
        A timeout raises (applied or not: unknown; the batch's jobs are kept for the recount)."""
        known = set(known)
        new = [False] * len(rows)
        claims: list[tuple[list[int], ResponseFuture]] = []
        for (_, bucket), members in _groups(rows).items():
            fresh = []
            for i in members:
                ident = (rows[i].source, rows[i].device, rows[i].event)
                if ident not in known:
                    known.add(ident)
                    fresh.append(i)
            if fresh:
                claims.append((fresh, self._claim(service, [(rows[i], bucket) for i in fresh], ttl_s)))
        first: BaseException | None = None
        retry: list[tuple[int, ResponseFuture]] = []
        for members, future in claims:
            try:
                if future.result().was_applied:
                    for i in members:
                        new[i] = True
                else:
                    retry += [(i, self._claim(service, [(rows[i], bucket_of(rows[i].device))], ttl_s)) for i in members]
            except BaseException as exc:
                first = first or exc
        for i, future in retry:
            try:
                new[i] = bool(future.result().was_applied)
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first
        return new

    def _claim(self, service: str, part: list[tuple[ReceiptRow, int]], ttl_s: int) -> ResponseFuture:
        """One conditional request for rows of one partition (applied all or none)."""
        values = [(service, r.source, b, r.device, r.event, r.action, r.at, r.received, ttl_s) for r, b in part]
        if len(values) == 1:
            return self.session.execute_async(self.claim_receipt, values[0], execution_profile=TUPLE_ROWS)
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for v in values:
            batch.add(self.claim_receipt, v)
        return self.session.execute_async(batch, execution_profile=TUPLE_ROWS)

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
        wait_all(
            self.add_scope(service, "sent", keys.day[:7], key, event, n)
            for event, n in (("targeted", sent[0]), ("sent", sent[1]))
            if n
        )

    # ------------------------------------------------------------------ reads
    def source_row(self, service: str, source: str) -> tuple[str, str, int, int] | None:
        """(type, day, targeted, sent) of a single send's source, None when unknown (or expired)."""
        row = self.session.execute(self.source_select, (service, source), execution_profile=TUPLE_ROWS).one()
        return None if row is None else (row[0], row[1], int(row[2] or 0), int(row[3] or 0))

    def forget_scope_months(self, services: Iterable[str], months: Sequence[str]) -> int:
        """Delete every scope partition of ``services`` for ``months``; how many partitions."""
        keys = [(svc, scope, month) for svc in services for scope in SCOPES for month in months]
        wait_all(self.session.execute_async(self.engagement_scope_delete, k) for k in keys)
        return len(keys)

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


def _groups(rows: Sequence[ReceiptRow]) -> dict[tuple[str, int], list[int]]:
    """Indexes of ``rows`` per (source, bucket) partition."""
    groups: dict[tuple[str, int], list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r.source, bucket_of(r.device)), []).append(i)
    return groups


def _partition_chunks(groups: dict[tuple[str, int], list[int]], size: int) -> list[tuple[str, list[tuple[str, int]]]]:
    """The (source, bucket) partitions of ``groups``, per source, ``size`` at a time."""
    per_source: dict[str, list[tuple[str, int]]] = {}
    for g in groups:
        per_source.setdefault(g[0], []).append(g)
    return [(source, parts[k : k + size]) for source, parts in per_source.items() for k in range(0, len(parts), size)]


def wait_all(futures: Iterable[ResponseFuture]) -> None:
    """Wait for every future; raise the first error after all have finished."""
    first: BaseException | None = None
    for f in list(futures):
        try:
            f.result()
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first
