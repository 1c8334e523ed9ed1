"""`notee reconcile`: recompute the subscription bookkeeping that may drift, from the per-user index.

1. ``count`` per (service, method, type) := the number of users with at least one live subscription
   (a user-level index row whose notification_key is still a template's). Fixed with a counter
   *delta* (actual - current), the only way to set a counter.
1b. ``subscribers`` per (service, type, topic) (numbering.topic_subscribers) := the number of users
   with a live user-level index row for that topic; fixed with a delta the same way.
2. Rows of deleted templates (their notification_key is gone from MySQL) are deleted: slot rows and
   index rows (templates are disabled on deletion and cleaned here, docs/SCHEMA.md).
3. ``cycle_due`` buckets and ``cycle_timezone`` zones with no live subscription are deleted, with
   ``USING TIMESTAMP <scan start>``: a subscribe that writes its due row after the scan started has
   a newer timestamp and survives the delete (subscribe writes the index before the due row).

The index is read with one paged token-range scan (fetch_size rows at a time); a partition's rows
are contiguous in that order, so the per-user work needs the memory of one user only. Run it
off-peak; it is safe to run at any time and any number of times. A subscribe racing with the count
fix can still leave an off-by-one that the next run corrects.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator

from notee.domain.schedule import parse_canonical
from notee.domain.subscriptions import remove_rows
from notee.runtime import Runtime
from notee.store import cql as cqlstore
from notee.store import registry_sql as reg
from notee.store import subscription_sql as subsql
from notee.store.cql import IndexRow, Statements

log = logging.getLogger(__name__)


def _partitions(st: Statements, fetch_size: int) -> Iterator[tuple[str, str, list[IndexRow]]]:
    current: tuple[str, str] | None = None
    rows: list[IndexRow] = []
    for user_id, service, row in st.scan_index(fetch_size):
        if (user_id, service) != current:
            if current is not None:
                yield current[0], current[1], rows
            current, rows = (user_id, service), []
        rows.append(row)
    if current is not None:
        yield current[0], current[1], rows


def reconcile(runtime: Runtime, service: str | None = None, fetch_size: int = 1000) -> dict[str, int]:
    """Fix counts, delete dead rows and stale due buckets, for one service or all; return a report."""
    st = runtime.statements
    started_us = time.time_ns() // 1000
    with runtime.sessions() as s:
        live = subsql.live_template_keys(s, service)
    actual: Counter[tuple[str, str, str]] = Counter()
    topic_actual: Counter[tuple[str, str, str]] = Counter()
    buckets: set[tuple[str, str, int, int, str]] = set()
    zones: set[str] = set()
    dead = 0
    gone: set[str] = set()

    def is_live(key: str | None) -> bool:
        # A key missing from the snapshot may belong to a template created since: confirm in MySQL.
        if key in live:
            return True
        if key is None or key in gone:
            return False
        with runtime.sessions() as s:
            found = reg.get_template_by_key(s, key) is not None
        (live if found else gone).add(key)
        return found

    for user_id, svc, rows in _partitions(st, fetch_size):
        if service is not None and svc != service:
            continue
        dead_rows = [r for r in rows if not is_live(r.data.get("key"))]
        if dead_rows:
            remove_rows(st, svc, user_id, dead_rows)
            dead += len(dead_rows)
        types = set()
        for r in rows:
            if not r.is_user_level or r.data.get("key") not in live:
                continue
            types.add((svc, r.method, r.type_))
            if r.method == "TOPIC":
                topic_actual[(svc, r.type_, r.target)] += 1  # one user-level row per (user, type, topic)
            if r.method == "CYCLE":
                sch = parse_canonical(r.target)
                zones.add(sch.timezone)
                buckets.update((sch.timezone, d, sch.hour, sch.minute, r.data["key"]) for d in sch.days)
        actual.update(types)

    fixed = 0
    seen = set()
    for svc, method, type_, count in st.scan_counts(fetch_size):
        if service is not None and svc != service:
            continue
        seen.add((svc, method, type_))
        delta = actual.get((svc, method, type_), 0) - count
        if delta:
            st.add_count(svc, method, type_, delta)
            log.info("reconcile: count of %s/%s/%s %d -> %d", svc, method, type_, count, count + delta)
            fixed += 1
    for key, n in actual.items():
        if key not in seen and n:
            st.add_count(*key, n)
            fixed += 1

    topics_fixed = _fix_topic_counts(st, topic_actual, service, fetch_size)

    due_removed = 0
    for tz, day, hour, minute, notification_key, svc in st.scan_due(fetch_size):
        if service is not None and svc != service:
            continue
        if (tz, day, hour, minute, notification_key) not in buckets:
            st.delete_due(started_us, tz, day, hour, minute, notification_key)
            due_removed += 1
    zones_removed = 0
    if service is None:  # zones are shared by every service: only a full run may drop one
        for tz in cqlstore.timezones_in_use(st):
            if tz not in zones:
                st.delete_timezone(started_us, tz)
                zones_removed += 1
    report = {
        "counts_fixed": fixed,
        "topic_counts_fixed": topics_fixed,
        "dead_rows_removed": dead,
        "due_buckets_removed": due_removed,
        "timezones_removed": zones_removed,
    }
    log.info("reconcile%s: %s", f" of {service}" if service else "", report)
    return report


def _fix_topic_counts(
    st: Statements, actual: Counter[tuple[str, str, str]], service: str | None, fetch_size: int
) -> int:
    """Apply ``actual - current`` to every per-topic counter that differs (one service, or all)."""
    if service is None:
        current = st.scan_topic_subscribers(fetch_size)
    else:
        current = ((service, t, topic, n) for t, topic, n in st.topic_subscribers(service, fetch_size=fetch_size))
    fixed = 0
    seen = set()
    for svc, type_, topic, count in current:
        seen.add((svc, type_, topic))
        delta = actual.get((svc, type_, topic), 0) - count
        if delta:
            st.run([st.add_topic_subscribers_async(svc, type_, topic, delta)])
            log.info("reconcile: subscribers of topic %s/%s/%r %d -> %d", svc, type_, topic, count, count + delta)
            fixed += 1
    for (svc, type_, topic), n in actual.items():
        if (svc, type_, topic) not in seen and n:
            st.run([st.add_topic_subscribers_async(svc, type_, topic, n)])
            fixed += 1
    return fixed
