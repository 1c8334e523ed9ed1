"""The counters of the numbering keyspace: a (method, type)'s template cache ``version``, its
subscribed users (``count``) and its numbers (``no``), and the subscribers of each topic
(numbering.topic_subscribers, docs/SCHEMA.md decision 3). Increments run with the
``COUNTER_PROFILE`` and are never retried; drift is repaired by `notee reconcile`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

from cassandra.cluster import ResponseFuture, Session
from cassandra.query import BatchStatement, BatchType

from notee.core.vocabulary import slot_of
from notee.store.cassandra import COUNTER_PROFILE, Keyspaces, rows
from notee.store.cql.rows import TUPLE_ROWS

# Numbers a process reserves at a time for single subscribes (``take_numbers``): at most this many are
# left unused per (type, process) when the process stops.
NUMBER_RANGE = 100


@dataclass(slots=True)
class _NumberRange:
    """Numbers of one ``no`` counter this process reserved and has not handed out: ``next..last``."""

    lock: threading.Lock
    next: int = 1
    last: int = 0


class Counters:
    """numbering.notification (version / count / no per (service, method, type)) and
    numbering.topic_subscribers, with this process's reserved ranges of ``no``."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        self._ranges: dict[tuple[str, str, str], _NumberRange] = {}  # (service, method, type) -> take_numbers'
        self._ranges_lock = threading.Lock()
        c = keyspaces.numbering
        p = session.prepare
        # Execute the counter_add_* statements with COUNTER_PROFILE.
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
        # Per-topic subscriber counters.
        topic_key = "WHERE service = ? AND notification_type = ? AND topic = ?"
        self.counter_add_topic = p(f"UPDATE {c}.topic_subscribers SET subscribers = subscribers + ? {topic_key}")
        topic_cols = f"SELECT notification_type, topic, subscribers FROM {c}.topic_subscribers WHERE service = ?"
        self.topic_counts = p(topic_cols)
        self.topic_counts_after = p(f"{topic_cols} AND (notification_type, topic) > (?, ?)")
        self.topic_counts_of_type = p(f"{topic_cols} AND notification_type = ?")
        self.topic_counts_of_type_after = p(f"{topic_cols} AND notification_type = ? AND topic > ?")
        self.topic_counts_scan = p(f"SELECT service, notification_type, topic, subscribers FROM {c}.topic_subscribers")
        self.topic_count_one = p(f"SELECT subscribers FROM {c}.topic_subscribers {topic_key}")

    # ------------------------------------------------------------------ numbers (``no``)
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

    # ------------------------------------------------------------------ count, version
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

    def scan_counts(self, fetch_size: int = 1000) -> Iterator[tuple[str, str, str, int]]:
        stmt = self.counter_scan.bind(())
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield r.service, r.notification_method, r.notification_type, int(r.count or 0)

    # ------------------------------------------------------------------ per-topic subscribers
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

    def topic_subscriber_count(self, service: str, type_: str, topic: str) -> int:
        """One topic's subscribed users (the counter: may drift until `notee reconcile`); 0 when none."""
        row = self.session.execute(self.topic_count_one, (service, type_, topic), execution_profile=TUPLE_ROWS).one()
        return int(row[0] or 0) if row is not None else 0

    def scan_topic_subscribers(self, fetch_size: int = 1000) -> Iterator[tuple[str, str, str, int]]:
        """(service, type, topic, subscribers) of every service (reconcile)."""
        stmt = self.topic_counts_scan.bind(())
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield r.service, r.notification_type, r.topic, int(r.subscribers or 0)


def max_slot(counters: Counters, service: str, method: str, type_: str) -> int:
    """The highest slot any subscription of (service, method, type) can be in: ``slot_of(no)``."""
    _, _, no = counters.counters(service, method, type_)
    return slot_of(no)
