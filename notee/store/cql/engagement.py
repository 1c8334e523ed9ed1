"""The engagement tables (schema/cql/0007_engagement.cql, docs/ENGAGEMENT.md): the receipts apps post,
one row per (notification, event), single sends' source rows and their sent per day
(``engagement_scope``'s `sent`); the counters are notee/store/cql/engagement_counts.py.

Counting once: a batch reads which of its rows exist and writes the others, each with the batch's
own random claim added to the row's ``claims`` set (an update adds to a set: two requests writing one
row both leave theirs), then reads the claims back. A row whose only claim is the batch's is the
batch's to count; a row holding another claim was written by another request at the same moment
(two copies of a batch: a client's retry racing its first attempt). Of two such requests at least
one reads the other's claim (each reads after its own write, both at QUORUM), so at most one counts
the row; the one that saw the other keeps the job for the scheduler's recount, which sets the
counters to the rows if neither counted. A retried batch (later) reads its rows as stored and
counts nothing. No lightweight transaction: one per partition took the receipts' rate from 6,218 to
2,208 events/s (docs/ENGAGEMENT.md "Measured")."""

from __future__ import annotations

import secrets
import zlib
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.cluster import ResponseFuture, Session
from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement

from notee.core.clock import stored_now
from notee.store.cassandra import COUNTER_PROFILE, Keyspaces
from notee.store.cql.engagement_months import EngagementMonths, run_bounded
from notee.store.cql.rows import TUPLE_ROWS

BUCKETS = 32  # partitions per job: a viral job's receipts spread over them (0007_engagement.cql)
# Partitions one request writes at most: a batch of 100 receipts of one job touches ~30 of its
# buckets, and one request each cost the API most of its CPU (docs/ENGAGEMENT.md "Measured");
# Cassandra warns of an unlogged batch over 10 partitions (unlogged_batch_across_partitions_warn_threshold).
PARTITIONS_PER_REQUEST = 10
# Rows one write request carries at most: Cassandra warns of a batch over batch_size_warn_threshold
# (5 KiB; a receipt row with its claim is ~190 bytes in a batch), and a batch over it measured ~45 ms
# instead of ~3-5 ms (100 receipts in 10-partition batches of ~33 rows, 5-6 KiB; docs/ENGAGEMENT.md
# "Measured").
ROWS_PER_WRITE = 20
# A read asks each of its partitions for every device of the request (bucket IN ? AND device IN ?):
# more lookups for Cassandra than a read per partition, yet measured faster at 10 partitions a read
# than at 4 or 1 (docs/ENGAGEMENT.md "Measured").
READ_PARTITIONS = 10
# The read-back of the claims finds every row it asks for (the rows were just written), so each
# (bucket, device) pair of the cross product costs Cassandra a lookup: at 10 partitions a request it
# doubled Cassandra's CPU per event; at 3 (a few more requests) it costs about a third of that
# (docs/ENGAGEMENT.md "Counting once, measured").
CLAIM_READ_PARTITIONS = 3
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
class Stored:
    """What ``store_receipts`` did: per row, whether this call stored it first (it counts it); the
    sources of rows another request wrote at the same moment (neither counted: kept for the
    recount)."""

    new: list[bool]
    contested: set[str]


@dataclass(frozen=True, slots=True)
class ScopeKeys:
    """Where a source's events are counted besides its own partition: its template type, its topic
    ("<type> <topic>", None: not a topic job) and its day (YYYY-MM-DD, the service's time zone)."""

    type_: str
    topic: str | None
    day: str


class Engagement(EngagementMonths):
    """notification.receipt, receipt_source and engagement_scope (the counters: engagement_counts.py)."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        super().__init__(session, keyspaces)
        n = keyspaces.notification
        p = session.prepare
        key = "WHERE service = ? AND source = ? AND bucket = ?"
        # An update, so that ``claims`` is added to (an insert would replace the set): two requests
        # writing one row both leave their claim. Idempotent (a set): resent safely.
        self.receipt_write = p(
            f"UPDATE {n}.receipt USING TTL ? SET action = ?, at = ?, received = ?, claims = claims + ? {key}"
            " AND device = ? AND event = ?"
        )
        self.receipt_known = p(
            f"SELECT device, event FROM {n}.receipt WHERE service = ? AND source = ? AND bucket IN ? AND device IN ?"
        )
        self.receipt_claims = p(
            f"SELECT device, event, claims FROM {n}.receipt"
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
    def store_receipts(self, service: str, rows: Sequence[ReceiptRow], ttl_s: int) -> Stored:
        """Write ``rows`` (idempotent) and say which this call stored first (module doc): read which
        exist, write the others with this call's claim, read their claims back. Raises the first
        store error after every request finished (a failed batch wrote nothing the client will not
        write again on retry)."""
        claim = secrets.token_urlsafe(6)
        written = self.write_claimed(service, rows, self.known_receipts(service, rows), claim, ttl_s)
        return self.read_claims(service, rows, written, claim)

    def known_receipts(self, service: str, rows: Sequence[ReceiptRow]) -> set[tuple[str, str, str]]:
        """(source, device, event) of ``rows`` already stored."""
        return {
            (source, device, event)
            for source, (device, event, *_) in self._read_rows(self.receipt_known, service, rows, range(len(rows)))
        }

    def write_claimed(
        self, service: str, rows: Sequence[ReceiptRow], known: set[tuple[str, str, str]], claim: str, ttl_s: int
    ) -> list[int]:
        """Write the rows of ``rows`` not in ``known`` (nor repeated earlier in ``rows``), adding
        ``claim`` to each one's ``claims``; their indexes. At most PARTITIONS_PER_REQUEST partitions
        and ROWS_PER_WRITE rows a request."""
        known = set(known)
        written: list[int] = []
        writes: list[ResponseFuture] = []
        # Unlogged: no batch log; each partition's rows are one mutation at its replicas, and the
        # request answers once every partition met the consistency level.
        batch, parts = BatchStatement(batch_type=BatchType.UNLOGGED), 0
        for (source, bucket), members in _groups(rows).items():
            fresh = []
            for i in members:
                ident = (rows[i].source, rows[i].device, rows[i].event)
                if ident not in known:
                    known.add(ident)
                    fresh.append(i)
            if not fresh:
                continue
            if len(batch) and (parts == PARTITIONS_PER_REQUEST or len(batch) + len(fresh) > ROWS_PER_WRITE):
                writes.append(self.session.execute_async(batch))
                batch, parts = BatchStatement(batch_type=BatchType.UNLOGGED), 0
            for i in fresh:
                r = rows[i]
                batch.add(
                    self.receipt_write,
                    (ttl_s, r.action, r.at, r.received, {claim}, service, source, bucket, r.device, r.event),
                )
            written += fresh
            parts += 1
        if len(batch):
            writes.append(self.session.execute_async(batch))
        wait_all(writes)
        return sorted(written)

    def read_claims(self, service: str, rows: Sequence[ReceiptRow], written: list[int], claim: str) -> Stored:
        """Read back the claims of the ``written`` rows: a row is new (this call counts it) when its
        only claim is ``claim``; one that holds another claim was written by another request too (two
        copies of a batch at once), and neither may be sure the other counted it: it is not counted
        here and its source is ``contested`` (kept for the recount)."""
        claims = {
            (source, device, event): set(held or ())
            for source, (device, event, held) in self._read_rows(
                self.receipt_claims, service, rows, written, CLAIM_READ_PARTITIONS
            )
        }
        new = [False] * len(rows)
        contested: set[str] = set()
        for i in written:
            r = rows[i]
            held = claims.get((r.source, r.device, r.event)) or set()
            if held == {claim}:
                new[i] = True
            else:  # another request's claim (or, read at QUORUM, not ours yet: cannot happen, kept anyway)
                contested.add(r.source)
        return Stored(new, contested)

    def _read_rows(
        self,
        statement: PreparedStatement,
        service: str,
        rows: Sequence[ReceiptRow],
        members: Iterable[int],
        per_request: int = READ_PARTITIONS,
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """(source, row) of the stored rows of the partitions ``rows[members]`` touch, as ``statement``
        (receipt_known, receipt_claims) reads them: READ_PARTITIONS partitions a request (a few
        requests per batch, not one per partition)."""
        chosen = [rows[i] for i in members]
        groups = _groups(chosen)
        reads = [
            (
                source,
                self.session.execute_async(
                    statement,
                    (
                        service,
                        source,
                        [b for _, b in chunk],
                        sorted({chosen[i].device for g in chunk for i in groups[g]}),
                    ),
                    execution_profile=TUPLE_ROWS,
                ),
            )
            for source, chunk in _partition_chunks(groups, per_request)
        ]
        return [(source, tuple(row)) for source, future in reads for row in future.result()]

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
        listing, days = self.listing([(service, keys.day)])
        wait_all(
            listing
            + [
                self.add_scope(service, "sent", keys.day[:7], key, event, n)
                for event, n in (("targeted", sent[0]), ("sent", sent[1]))
                if n
            ]
        )
        self.listed_now(days)

    # ------------------------------------------------------------------ reads
    def source_row(self, service: str, source: str) -> tuple[str, str, int, int] | None:
        """(type, day, targeted, sent) of a single send's source, None when unknown (or expired)."""
        row = self.session.execute(self.source_select, (service, source), execution_profile=TUPLE_ROWS).one()
        return None if row is None else (row[0], row[1], int(row[2] or 0), int(row[3] or 0))

    def forget_scope_months(self, services: Collection[str], months: Sequence[str]) -> int:
        """Delete every scope partition of ``services`` for ``months``; how many partitions."""
        keys = [(svc, scope, month) for svc in services for scope in SCOPES for month in months]
        run_bounded(self.session, self.engagement_scope_delete, keys)
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
