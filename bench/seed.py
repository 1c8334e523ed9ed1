"""Seeding benchmark data straight into the subscription tables with the raw driver (fast, no API):
the rows are shaped exactly as Notee's subscribe path writes them (schema/cql/0001_subscriptions.cql)."""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterable, Iterator

from cassandra.concurrent import execute_concurrent
from cassandra.query import BatchStatement, BatchType

from notee.core.vocabulary import BLOCK_SIZE, SLOT_SIZE


def fcm_like_token(i: int) -> str:
    """A 163-character token shaped like an FCM registration token; the same for the same i."""
    filler = base64.urlsafe_b64encode(hashlib.sha512(str(i).encode()).digest() * 2).decode()
    return f"b{i:010d}:" + filler[:152]


BATCH_ROWS = 100  # rows per single-partition UNLOGGED batch: one mutation server-side, ~10x faster seeding


def insert_batched(session, stmt, rows: Iterable[tuple], partition_of, concurrency: int = 32) -> int:
    """Insert rows as single-partition UNLOGGED batches (rows must arrive grouped by partition)."""
    count = 0
    batches: list[BatchStatement] = []
    current, batch, in_batch = None, None, 0

    def flush_all() -> None:
        if batches:
            execute_concurrent(session, [(b, ()) for b in batches], concurrency=concurrency, raise_on_first_error=True)
            batches.clear()

    for row in rows:
        part = partition_of(row)
        if batch is None or part != current or in_batch >= BATCH_ROWS:
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            batches.append(batch)
            current, in_batch = part, 0
            if len(batches) >= 200:
                last = batches.pop()
                flush_all()
                batches.append(last)
        batch.add(stmt, row)
        in_batch += 1
        count += 1
    flush_all()
    return count


def apns_like_token(i: int) -> str:
    """A 64-hex-digit token shaped like an APNs device token; the same for the same i."""
    return f"{i:064x}"


def topic_rows(
    key: str,
    topic: str,
    n: int,
    *,
    start_no: int = 1,
    ios_every: int = 0,
    zone_of=lambda i: "",
    token_of=fcm_like_token,
) -> Iterator[tuple]:
    """(slot, notification_key, topic, no, device_token, device_os, user_id, registered_at, zone) rows;
    ``zone_of(i)``: the time zone subscribe would store for the i-th row's user ('' = none: the service's);
    ``token_of(no)``: the row's device token."""
    for i in range(n):
        no = start_no + i
        os_ = "IOS" if ios_every and i % ios_every == 0 else "AOS"
        yield (
            no // SLOT_SIZE,
            key,
            topic,
            no,
            token_of(no),
            os_,
            str(uuid.uuid4()),
            1_700_000_000_000 + i,
            zone_of(i),
        )


def _noting_occupancy(rows, occupied: set, target_of) -> Iterator[tuple]:
    """Pass ``rows`` through, noting each one's (notification_key, target, slot, block)."""
    for r in rows:
        occupied.add(target_of(r))
        yield r


def insert_occupancy(session, keyspace: str, occupied: set) -> None:
    """The target_slots rows subscribe writes with every slot row (docs/FANOUT.md "Occupancy")."""
    stmt = session.prepare(
        f"INSERT INTO {keyspace}.target_slots (notification_key, target, slot, block, noted) VALUES (?, ?, ?, ?, true)"
    )
    insert_batched(session, stmt, sorted(occupied), lambda r: r[0:2])


def insert_topic_rows(session, keyspace: str, rows) -> int:
    """Slot rows and their target_slots rows."""
    stmt = session.prepare(
        f"INSERT INTO {keyspace}.topic_notification (slot, notification_key, topic, no, device_token, device_os,"
        " user_id, registered_at, zone) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    occupied: set = set()
    n = insert_batched(
        session,
        stmt,
        _noting_occupancy(rows, occupied, lambda r: (r[1], r[2], r[0], r[3] // BLOCK_SIZE)),
        lambda r: r[0:3],
    )
    insert_occupancy(session, keyspace, occupied)
    return n


def cycle_rows(key: str, timezone: str, day: str, hour: int, minute: int, n: int, *, start_no: int = 1):
    for i in range(n):
        no = start_no + i
        yield (
            no // SLOT_SIZE,
            key,
            timezone,
            day,
            hour,
            minute,
            no,
            fcm_like_token(no),
            "AOS",
            str(uuid.uuid4()),
            1_700_000_000_000 + i,
        )


def insert_cycle_rows(session, keyspace: str, rows) -> int:
    stmt = session.prepare(
        f"INSERT INTO {keyspace}.cycle_notification (slot, notification_key, timezone, day, hour, minute, no,"
        " device_token, device_os, user_id, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    occupied: set = set()
    bucket = lambda r: f"{r[2]} {r[3]} {r[4]:02d}:{r[5]:02d}"  # noqa: E731 (cql.rows.target_name of the row's bucket)
    n = insert_batched(
        session,
        stmt,
        _noting_occupancy(rows, occupied, lambda r: (r[1], bucket(r), r[0], r[6] // BLOCK_SIZE)),
        lambda r: r[0:6],
    )
    insert_occupancy(session, keyspace, occupied)
    return n


def set_no_counter(session, keyspace: str, service: str, method: str, type_: str, value: int) -> None:
    """Bring the ``no`` counter of (service, method, type) to ``value`` (it only ever grows)."""
    row = session.execute(
        f"SELECT no FROM {keyspace}.notification WHERE service = %s AND notification_method = %s"
        " AND notification_type = %s",
        (service, method, type_),
    ).one()
    current = int(row.no or 0) if row else 0
    if value > current:
        session.execute(
            f"UPDATE {keyspace}.notification SET no = no + %s WHERE service = %s"
            " AND notification_method = %s AND notification_type = %s",
            (value - current, service, method, type_),
        )
