"""Which services and days hold engagement counters in a month (``engagement_month``,
schema/cql/0009_engagement_month.cql), so the hourly prune of a month that fell out of the kept ones
reads and deletes what exists, not every service times every day (docs/ENGAGEMENT.md "Retention of
the counters").

A process lists a (service, day) the first time it adds a counter for it (``listing``, then
``listed_now`` once the write succeeded); a failed write is listed again by the next one. Reads and
deletes of a prune run ``CONCURRENCY`` requests at a time, whatever the number of services."""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from cassandra.cluster import ResponseFuture, Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import PreparedStatement

from notee.store.cassandra import Keyspaces
from notee.store.cql.rows import TUPLE_ROWS

MONTH_SHARDS = 64  # partitions per month of engagement_month, by crc32(service)
CONCURRENCY = 32  # requests in flight while a prune reads or deletes (never one per service at once)
ListedDay = tuple[str, str]  # (service, day YYYY-MM-DD) holding engagement counters
MAX_REMEMBERED = 100_000  # (service, day) pairs a process remembers as listed before it starts afresh


def month_shard(service: str) -> int:
    return zlib.crc32(service.encode()) % MONTH_SHARDS


def run_bounded(session: Session, statement: PreparedStatement, params: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Execute ``statement`` once per parameter tuple, ``CONCURRENCY`` at a time; the result sets in
    order (rows as tuples); raises the first error."""
    if not params:
        return []
    done = execute_concurrent_with_args(
        session, statement, params, concurrency=CONCURRENCY, execution_profile=TUPLE_ROWS
    )
    return [result for _, result in done]


class EngagementMonths:
    """engagement_month: the services and days of a month that hold counters."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        p = session.prepare
        self.month_insert = p(f"INSERT INTO {n}.engagement_month (month, shard, service, day) VALUES (?, ?, ?, ?)")
        self.month_days = p(f"SELECT service, day FROM {n}.engagement_month WHERE month = ? AND shard = ?")
        self.month_days_of = p(
            f"SELECT service, day FROM {n}.engagement_month WHERE month = ? AND shard = ? AND service = ?"
        )
        self.month_unlist = p(f"DELETE FROM {n}.engagement_month WHERE month = ? AND shard = ? AND service = ?")
        self._listed: set[ListedDay] = set()

    def listing(self, days: Iterable[ListedDay]) -> tuple[list[ResponseFuture], list[ListedDay]]:
        """The writes that list ``days`` not yet listed by this process, and those days: pass them to
        ``listed_now`` once the writes (and the counters beside them) succeeded."""
        new = [d for d in set(days) if d not in self._listed]
        futures = [
            self.session.execute_async(self.month_insert, (day[:7], month_shard(service), service, day))
            for service, day in new
        ]
        return futures, new

    def listed_now(self, days: Iterable[ListedDay]) -> None:
        if len(self._listed) > MAX_REMEMBERED:
            self._listed.clear()  # a few writes again, rather than a set that grows for ever
        self._listed.update(days)

    def month_listing(self, month: str, services: Collection[str] | None) -> list[ListedDay]:
        """Every (service, day) listed for ``month``; only ``services``' when given."""
        if services is None:
            params: list[tuple[Any, ...]] = [(month, shard) for shard in range(MONTH_SHARDS)]
            results = run_bounded(self.session, self.month_days, params)
        else:
            params = [(month, month_shard(svc), svc) for svc in services]
            results = run_bounded(self.session, self.month_days_of, params)
        return [(str(service), str(day)) for rows in results for service, day in rows]

    def unlist(self, month: str, services: Collection[str]) -> None:
        """Forget ``services``' listing of ``month`` (their partitions of it are deleted)."""
        run_bounded(self.session, self.month_unlist, [(month, month_shard(svc), svc) for svc in services])
