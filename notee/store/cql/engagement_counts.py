"""The receipts' counters (docs/ENGAGEMENT.md "Storage, and counting once"): per job
(``engagement_job``, schema/cql/0007_engagement.cql) and per day (``engagement_day``,
schema/cql/0008_engagement_day.cql), whose figure cells sum to the figures per day, type and topic.

A job's share of its day, type and topic is a figure cell of its own, so each counter the repair
sets (``held``, ``add_differences``) is read back and set to the raw rows on its own: a counter
request Cassandra applied to some of its partitions and not to the others leaves no difference the
repair cannot see. A day's cells are spread over DAY_BUCKETS partitions by a hash of the source (a
partition stays inside DATA-RULES' bound for a service of millions of single sends a day, and no
partition takes every batch); the single sends of a type in one bucket share one figure cell (the
figures' reads stay small); each send has its own cell beside it, in the same partition, added to in
the same request (one mutation: applied together or not at all), so the send's own cell says what
its share holds.

Counter increments run with ``COUNTER_PROFILE`` and are never retried (not idempotent)."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from cassandra import ConsistencyLevel
from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement

from notee.store.cassandra import COUNTER_PROFILE, Keyspaces
from notee.store.cql.engagement import Engagement, ScopeKeys, wait_all
from notee.store.cql.engagement_months import run_bounded
from notee.store.cql.rows import TUPLE_ROWS

COUNTERS_PER_REQUEST = 32  # counter increments per counter batch (a batch of one job's receipts: ~8)
FIGURES, SENDS = "f", "s"  # engagement_day's kinds of cell: summed by the figures, or a send's own
SHARED = ""  # the source of the figure cell a day bucket's single sends of a (type) share
# Partitions per (service, day) of engagement_day, by a hash of the source: each holds 1/DAY_BUCKETS
# of the day's jobs and single sends, and its own shared figure cells (docs/ENGAGEMENT.md "Bounds").
DAY_BUCKETS = 64

ALL_BUCKETS = list(range(DAY_BUCKETS))

Increment = tuple[PreparedStatement, tuple[object, ...]]
DayItem = tuple[str, str, str]  # (day, template type, topic or '') of engagement_day
Cell = tuple[str, int, str, str, str, str]  # (day, bucket, kind, type, topic, source) of engagement_day


def is_single_send(source: str) -> bool:
    return source.startswith("s")  # notee/core/notification_id.py: a send id starts with "s"


def day_bucket(source: str) -> int:
    """The engagement_day partition of ``source``'s day that holds its cells (a stable hash)."""
    return zlib.crc32(source.encode("ascii")) % DAY_BUCKETS


def figure_cell(source: str, keys: ScopeKeys) -> Cell:
    """(day, bucket, kind, type, topic, source) of the engagement_day cell the figures count
    ``source``'s events in (the topic without the "<type> " ``keys.topic`` carries): a job's own, or
    the one the single sends of the type in the source's bucket of the day share."""
    topic = keys.topic[len(keys.type_) + 1 :] if keys.topic else ""
    return keys.day, day_bucket(source), FIGURES, keys.type_, topic, SHARED if is_single_send(source) else source


def send_cell(source: str, keys: ScopeKeys) -> Cell:
    """(day, bucket, kind, type, topic, source) of a single send's own cell, in the same partition
    (same bucket) as the figure cell it shares (one counter request adds to both: one mutation,
    applied together)."""
    return keys.day, day_bucket(source), SENDS, keys.type_, "", source


@dataclass(frozen=True, slots=True)
class Held:
    """A source's counters as read, per event: its own (``own``: a job's engagement_job row, a single
    send's own cell) and its figure cell (``figure``: a job's; empty for a single send, whose
    figure cell is shared)."""

    own: dict[str, int] = field(default_factory=dict)
    figure: dict[str, int] = field(default_factory=dict)


class EngagementCounts(Engagement):
    """engagement_job and engagement_day, on top of the receipt tables."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        super().__init__(session, keyspaces)
        n = keyspaces.notification
        p = session.prepare
        cell = (
            "WHERE service = ? AND day = ? AND bucket = ? AND kind = ? AND notification_type = ? AND topic = ?"
            " AND source = ?"
        )
        # Execute the counter_add_* statements with COUNTER_PROFILE (never retried).
        self.counter_add_engagement_job = p(
            f"UPDATE {n}.engagement_job SET n = n + ? WHERE service = ? AND source = ? AND event = ?"
        )
        self.counter_add_engagement_day = p(f"UPDATE {n}.engagement_day SET n = n + ? {cell} AND event = ?")
        self.engagement_job_counts = p(f"SELECT event, n FROM {n}.engagement_job WHERE service = ? AND source = ?")
        self.engagement_day_cell = p(f"SELECT event, n FROM {n}.engagement_day {cell}")
        self.engagement_day_counts = p(
            f"SELECT notification_type, topic, event, n FROM {n}.engagement_day"
            f" WHERE service = ? AND day = ? AND bucket IN ? AND kind = '{FIGURES}'"
        )
        self.engagement_job_delete = p(f"DELETE FROM {n}.engagement_job WHERE service = ? AND source = ?")
        self.engagement_day_buckets = p(
            f"SELECT bucket FROM {n}.engagement_day WHERE service = ? AND day = ? AND bucket IN ? PER PARTITION LIMIT 1"
        )
        self.engagement_day_delete = p(f"DELETE FROM {n}.engagement_day WHERE service = ? AND day = ? AND bucket IN ?")

    # ------------------------------------------------------------------ writes
    def count(self, service: str, counts: dict[tuple[str, ScopeKeys, str], int]) -> None:
        """Add ``counts`` ((source, its scope keys, event) -> new events) to each source's counters:
        a job's own and its figure cell, a single send's own cell and the figure cell it shares (a
        batch of receipts of one job: one request of ~8 increments). Never retried: a failure raises
        after every request finished, and the batch's sources are kept for the recount
        (notee/usecases/receipt_counting.py)."""
        cells: Counter[tuple[str, int, str, str, str, str, str]] = Counter()
        increments: list[Increment] = []
        for (source, keys, event), delta in counts.items():
            if is_single_send(source):
                cells[(*send_cell(source, keys), event)] += delta
            else:
                increments.append((self.counter_add_engagement_job, (delta, service, source, event)))
            cells[(*figure_cell(source, keys), event)] += delta
        increments += [(self.counter_add_engagement_day, (d, service, *cell)) for cell, d in cells.items()]
        self.add_counters(increments)

    def add_counters(self, increments: Sequence[Increment]) -> None:
        """Send ``increments`` in counter batches of about COUNTERS_PER_REQUEST, a partition's
        increments always in one request (one mutation at its replicas: a single send's own cell and
        its shared figure cell are applied together or not at all); raise the first error after every
        request finished."""
        per_partition: dict[tuple[object, ...], list[Increment]] = {}
        days: list[tuple[str, str]] = []  # (service, day) of engagement_day cells: listed for the prune
        for statement, values in increments:
            # the partition key: (service, source) of engagement_job, (service, day, bucket) of engagement_day
            width = 4 if statement is self.counter_add_engagement_day else 3
            if width == 4:
                days.append((str(values[1]), str(values[2])))
            per_partition.setdefault((statement.query_id, *values[1:width]), []).append((statement, values))
        futures, listed = self.listing(days)
        batch = BatchStatement(batch_type=BatchType.COUNTER)
        for group in per_partition.values():
            if len(batch) and len(batch) + len(group) > COUNTERS_PER_REQUEST:
                futures.append(self.session.execute_async(batch, execution_profile=COUNTER_PROFILE))
                batch = BatchStatement(batch_type=BatchType.COUNTER)
            for statement, values in group:
                batch.add(statement, values)
        if len(batch):
            futures.append(self.session.execute_async(batch, execution_profile=COUNTER_PROFILE))
        wait_all(futures)
        self.listed_now(listed)

    def add_differences(self, service: str, source: str, keys: ScopeKeys, truth: dict[str, int], held: Held) -> Held:
        """Set ``source``'s counters, read as ``held``, to ``truth`` (its raw rows): a job's own
        counters and its figure cell each by its own difference; a single send's own cell and its
        shared figure cell by the send's (they move together). Returns the differences added."""
        own = _difference(truth, held.own)
        mine: list[Increment]
        if is_single_send(source):
            figure, cell = own, send_cell(source, keys)
            mine = [(self.counter_add_engagement_day, (d, service, *cell, e)) for e, d in own.items()]
        else:
            figure = _difference(truth, held.figure)
            mine = [(self.counter_add_engagement_job, (d, service, source, e)) for e, d in own.items()]
        shared = figure_cell(source, keys)
        self.add_counters(
            mine + [(self.counter_add_engagement_day, (d, service, *shared, e)) for e, d in figure.items()]
        )
        return Held(own, figure)

    def forget_jobs(self, jobs: Iterable[tuple[str, str]]) -> None:
        """Delete the counters of ``jobs`` ((service, source)): their job rows are being pruned (their
        figure cells stay: the day, type and topic figures are kept 13 months)."""
        wait_all(self.session.execute_async(self.engagement_job_delete, job) for job in jobs)

    def forget_months(self, months: Sequence[str], services: Collection[str] | None = None) -> int:
        """Delete the day and scope partitions of ``months`` (YYYY-MM) of the services listed as holding
        counters in them (engagement_month; only ``services`` when given), then their listing; how many
        partitions: four scope partitions a listed service (absent ones too) and the day buckets that
        held cells (each listed day's 64 buckets are read first: a bucket without cells costs no
        tombstone). Requests run CONCURRENCY at a time."""
        deleted = 0
        for month in months:
            listed = self.month_listing(month, services)
            found = run_bounded(self.session, self.engagement_day_buckets, [(*d, ALL_BUCKETS) for d in listed])
            held = [(*d, [bucket for (bucket,) in rows]) for d, rows in zip(listed, found, strict=True)]
            run_bounded(self.session, self.engagement_day_delete, [key for key in held if key[2]])
            names = sorted({service for service, _ in listed})
            deleted += self.forget_scope_months(names, [month]) + sum(len(key[2]) for key in held)
            self.unlist(month, names)
        return deleted

    # ------------------------------------------------------------------ reads
    def job_counts(self, service: str, source: str, *, everywhere: bool = False) -> dict[str, int]:
        """A source's own counters; ``everywhere``: read at ``ALL`` (usecases/receipt_repair.py)."""
        return self._read(self.engagement_job_counts, (service, source), everywhere)

    def held(self, service: str, source: str, keys: ScopeKeys, *, everywhere: bool = False) -> Held:
        """``source``'s own counters and (a job's) figure cell (``everywhere``: read at ``ALL``)."""
        if is_single_send(source):
            return Held(self._read(self.engagement_day_cell, (service, *send_cell(source, keys)), everywhere))
        return Held(
            self._read(self.engagement_job_counts, (service, source), everywhere),
            self._read(self.engagement_day_cell, (service, *figure_cell(source, keys)), everywhere),
        )

    def day_counts(
        self, service: str, days: Iterable[str], *, everywhere: bool = False
    ) -> dict[DayItem, dict[str, int]]:
        """(day, type, topic) -> events of ``days`` (YYYY-MM-DD), summed over their sources and
        buckets: one request per day (its DAY_BUCKETS partitions' kind-`f` slices, read by the
        coordinator at once), every day at once (``everywhere``: at ``ALL``)."""
        level = ConsistencyLevel.ALL if everywhere else None  # None: the profile's
        futures = [
            (
                day,
                self.session.execute_async(
                    BoundStatement(self.engagement_day_counts, consistency_level=level).bind(
                        (service, day, ALL_BUCKETS)
                    ),
                    execution_profile=TUPLE_ROWS,
                ),
            )
            for day in days
        ]
        out: dict[DayItem, dict[str, int]] = {}
        for day, f in futures:
            for type_, topic, event, n in f.result():
                events = out.setdefault((day, type_, topic), {})
                events[event] = events.get(event, 0) + int(n)
        return out

    def recount(self, service: str, source: str, keys: ScopeKeys) -> dict[str, int]:
        """Count the raw events of a source and set its counters and its day cell to them: the
        repair of a drifted count (`notee recount-engagement`). Returns the counts. Not for a source
        receiving receipts right now (an event counted between the reads and the add would be
        counted twice: the scheduler's repair waits for a quiet source instead)."""
        held = self.held(service, source, keys)
        truth = self.raw_counts(service, source)
        self.add_differences(service, source, keys, truth, held)
        return truth

    def _read(self, statement: PreparedStatement, values: tuple[object, ...], everywhere: bool) -> dict[str, int]:
        level = ConsistencyLevel.ALL if everywhere else None  # None: the profile's
        rows = self.session.execute(
            BoundStatement(statement, consistency_level=level).bind(values), execution_profile=TUPLE_ROWS
        )
        return {event: int(n) for event, n in rows}


def _difference(truth: dict[str, int], held: dict[str, int]) -> dict[str, int]:
    diff = {e: truth.get(e, 0) - held.get(e, 0) for e in set(truth) | set(held)}
    return {e: d for e, d in diff.items() if d}
