"""Seeding benchmark data straight into the subscription tables with the raw driver (fast, no API):
the rows are shaped exactly as Notee's subscribe path writes them (schema/cql/0001_subscriptions.cql)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

from cassandra.concurrent import execute_concurrent_with_args

from notee.fanout.targets import SLOT_SIZE


def fcm_like_token(i: int) -> str:
    """A 163-character token shaped like an FCM registration token (unique per i)."""
    return f"b{i:010d}:" + secrets.token_urlsafe(114)[:152]


def topic_rows(key: str, topic: str, n: int, *, start_no: int = 1, ios_every: int = 0) -> Iterator[tuple]:
    """(slot, notification_key, topic, no, device_token, device_os, user_id, registered_at) rows."""
    for i in range(n):
        no = start_no + i
        os_ = "IOS" if ios_every and i % ios_every == 0 else "AOS"
        yield (no // SLOT_SIZE, key, topic, no, fcm_like_token(no), os_, str(uuid.uuid4()), 1_700_000_000_000 + i)


def insert_topic_rows(session, keyspace: str, rows, concurrency: int = 150) -> int:
    stmt = session.prepare(
        f"INSERT INTO {keyspace}.topic_notification (slot, notification_key, topic, no, device_token, device_os,"
        " user_id, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
    rows = list(rows)
    for i in range(0, len(rows), 20_000):
        results = execute_concurrent_with_args(session, stmt, rows[i:i + 20_000], concurrency=concurrency,
                                               raise_on_first_error=True)
        del results
    return len(rows)


def cycle_rows(key: str, timezone: str, day: str, hour: int, minute: int, n: int, *, start_no: int = 1):
    for i in range(n):
        no = start_no + i
        yield (no // SLOT_SIZE, key, timezone, day, hour, minute, no, fcm_like_token(no), "AOS", str(uuid.uuid4()),
               1_700_000_000_000 + i)


def insert_cycle_rows(session, keyspace: str, rows, concurrency: int = 150) -> int:
    stmt = session.prepare(
        f"INSERT INTO {keyspace}.cycle_notification (slot, notification_key, timezone, day, hour, minute, no,"
        " device_token, device_os, user_id, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    rows = list(rows)
    for i in range(0, len(rows), 20_000):
        execute_concurrent_with_args(session, stmt, rows[i:i + 20_000], concurrency=concurrency,
                                     raise_on_first_error=True)
    return len(rows)


def set_no_counter(session, keyspace: str, service: str, method: str, type_: str, value: int) -> None:
    """Bring the ``no`` counter of (service, method, type) to ``value`` (it only ever grows)."""
    row = session.execute(f"SELECT no FROM {keyspace}.notification WHERE service = %s AND notification_method = %s"
                          " AND notification_type = %s", (service, method, type_)).one()
    current = int(row.no or 0) if row else 0
    if value > current:
        session.execute(f"UPDATE {keyspace}.notification SET no = no + %s WHERE service = %s"
                        " AND notification_method = %s AND notification_type = %s",
                        (value - current, service, method, type_))
