"""The scheduler's due index: cycle_due (which templates have subscribers at a local bucket) and
cycle_timezone (the time zones any cycle subscription uses)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from cassandra.cluster import ResponseFuture, Session

from notee.core.vocabulary import CycleTarget
from notee.store.cassandra import Keyspaces, rows


class DueIndex:
    """cycle_due, one partition per (timezone, day, hour, minute), and cycle_timezone (one partition)."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        p = session.prepare
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


def due_templates(due: DueIndex, timezone: str, day: str, hour: int, minute: int) -> list[tuple[str, str, str]]:
    """(service, notification_key, notification_type) of the cycle templates with subscribers at a local
    bucket. May include a deleted template's key until `notee reconcile`: resolve it in MySQL and skip
    it when gone."""
    return due.due_rows_of(due.due_templates_async(CycleTarget(timezone, day, hour, minute)))


def timezones_in_use(due: DueIndex) -> list[str]:
    return [r.timezone for r in due.session.execute(due.tz_select)]
