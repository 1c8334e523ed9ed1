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

4. Rows of users and devices MySQL no longer has (issue 14.5) are deleted: a missing user's whole
   index partition with its slot rows, a missing device's rows. A device is judged under the user's
   exclusive row lock (re-read after taking it), so a rotation or registration in progress, which
   holds that lock while it writes Cassandra before its MySQL commit, is never mistaken for one.
   Token index rows (``notification_per_token``) of what is removed go too; those of live devices
   are written (a blind upsert), which fills the index for rows older than it.

5. ``target_slots`` rows of deleted templates and empty blocks are deleted (``notee.usecases.occupancy.prune``;
   the full run walks the whole table, the scheduled batch ``PRUNE_BATCH_ROWS`` rows from its cursor).

0. Withdrawals kept of failed subscription writes are applied first (``settle_withdrawals``; the
   full run and the scheduled batch both).

``reconcile_batch`` runs 0 and 2-5 as a bounded batch on a schedule (``notee scheduler``, one replica per
run, like retention): it walks ``notification_per_user`` from a cursor kept in
``reconcile_cursor`` (the last partition token done), ``RECONCILE_BATCH_ROWS`` index rows per run,
starting again at the first partition after the last; ``cycle_due`` rows are checked one by one
against their bucket's slot partitions (a bounded read each) and ``cycle_timezone`` zones against
``cycle_due``. The count fix needs a whole walk and stays with the full `notee reconcile`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from notee.core.vocabulary import CycleTarget
from notee.domain.schedule import parse_canonical
from notee.domain.subscription_rows import remove_rows
from notee.store import subscription_sql as subsql
from notee.store import templates_sql, users_sql
from notee.store.cql.counters import max_slot
from notee.store.cql.due import timezones_in_use
from notee.store.cql.rows import IndexRow
from notee.store.cql.statements import Statements
from notee.store.runtime import Runtime
from notee.usecases import occupancy, settle_withdrawals

log = logging.getLogger(__name__)

RECONCILE_BATCH_ROWS = 20_000  # index rows one scheduled run walks (then it stops at a partition end)
MYSQL_CHECK_USERS = 500  # users whose existence and devices are read in one MySQL query
WALK = "notification_per_user"  # the cursor's name
MIN_TOKEN = -(2**63)  # Murmur3: below every partition token

Partition = tuple[str, str, list[IndexRow]]  # (user_id, service, its index rows)


def _remove_missing(runtime: Runtime, parts: Sequence[Partition]) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """Delete the rows of users and devices MySQL no longer has, among ``parts``; note the token index
    rows of the live devices. Returns counts and the (user_id, service) partitions whose user is gone."""
    st = runtime.statements
    counts = {"users_removed": 0, "device_rows_removed": 0}
    gone_users: set[tuple[str, str]] = set()
    by_service: dict[str, list[Partition]] = {}
    for p in parts:
        by_service.setdefault(p[1], []).append(p)
    for svc, group in by_service.items():
        for i in range(0, len(group), MYSQL_CHECK_USERS):
            chunk = group[i : i + MYSQL_CHECK_USERS]
            with runtime.sessions() as s:
                devices = subsql.users_with_devices(s, svc, [u for u, _, _ in chunk])
            users = set(devices)
            suspects = []
            for user_id, _, rows in chunk:
                if user_id not in users:
                    # No user row: nothing can write for this user any more (writers hold its lock).
                    device_rows = [r for r in rows if not r.is_user_level]
                    remove_rows(st, svc, user_id, device_rows)
                    st.delete_user_index(user_id, svc)
                    st.run(
                        st.forget_token_holder(svc, t, user_id) for t in sorted({r.device_token for r in device_rows})
                    )
                    counts["users_removed"] += 1
                    gone_users.add((user_id, svc))
                    continue
                have = {t for t, _ in devices.get(user_id, [])}
                if any(not r.is_user_level and r.device_token not in have for r in rows):
                    suspects.append(user_id)
                st.run(
                    st.note_token_holder(svc, t, user_id)
                    for t in sorted({r.device_token for r in rows if not r.is_user_level} & have)
                )
            for user_id in suspects:
                counts["device_rows_removed"] += _remove_missing_devices(runtime, svc, user_id)
    return counts, gone_users


def _remove_missing_devices(runtime: Runtime, service: str, user_id: str) -> int:
    """Under the user's exclusive row lock, re-read its devices and its index rows and delete the rows
    of devices it no longer has (a rotation or registration holding the lock has committed by then)."""
    st = runtime.statements
    with runtime.sessions.begin() as s:
        if not users_sql.lock_users(s, service, [user_id], exclusive=True):
            return 0  # deleted meanwhile: the next walk removes the whole partition
        have = {d.device_token for d in users_sql.list_devices(s, service, user_id)}
        rows = [r for r in st.user_rows(user_id, service) if not r.is_user_level and r.device_token not in have]
        if rows:
            remove_rows(st, service, user_id, rows)
            st.run(st.forget_token_holder(service, t, user_id) for t in sorted({r.device_token for r in rows}))
            log.info(
                "reconcile: %d row(s) of %d removed device(s) of a user of %s",
                len(rows),
                len({r.device_token for r in rows}),
                service,
            )
    return len(rows)


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


class _FullWalk:
    """`notee reconcile`'s walk of the whole per-user index (one service's rows, or all): it removes
    the rows of deleted templates, users and devices on the way, and tallies what is live: users per
    (service, method, type) and per topic, and the due buckets and zones of live cycle subscriptions."""

    def __init__(self, runtime: Runtime, service: str | None) -> None:
        self.runtime = runtime
        self.service = service
        with runtime.sessions() as s:
            self.live = subsql.live_template_keys(s, service)
        self.gone: set[str] = set()
        self.actual: Counter[tuple[str, str, str]] = Counter()  # (service, method, type) -> users
        self.topic_actual: Counter[tuple[str, str, str]] = Counter()  # (service, type, topic) -> users
        self.buckets: set[tuple[str, str, int, int, str]] = set()  # (zone, day, hour, minute, key)
        self.zones: set[str] = set()
        self.dead = 0
        self.missing = {"users_removed": 0, "device_rows_removed": 0}

    def is_live(self, key: str | None) -> bool:
        # A key missing from the snapshot may belong to a template created since: confirm in MySQL.
        if key in self.live:
            return True
        if key is None or key in self.gone:
            return False
        with self.runtime.sessions() as s:
            found = templates_sql.get_template_by_key(s, key) is not None
        (self.live if found else self.gone).add(key)
        return found

    def walk(self, fetch_size: int) -> None:
        st = self.runtime.statements
        pending: list[Partition] = []
        for user_id, svc, rows in _partitions(st, fetch_size):
            if self.service is not None and svc != self.service:
                continue
            dead_rows = [r for r in rows if not self.is_live(r.data.get("key"))]
            if dead_rows:
                remove_rows(st, svc, user_id, dead_rows)
                self.dead += len(dead_rows)
                rows = [r for r in rows if r not in dead_rows]
            pending.append((user_id, svc, rows))
            if len(pending) >= MYSQL_CHECK_USERS:
                self._settle(pending)
                pending = []
        self._settle(pending)

    def _settle(self, parts: list[Partition]) -> None:
        """Remove the rows of missing users and devices among ``parts``, then tally the live rest."""
        counts, gone_users = _remove_missing(self.runtime, parts)
        for k, v in counts.items():
            self.missing[k] += v
        for user_id, svc, rows in parts:
            if (user_id, svc) in gone_users:
                continue
            types = set()
            for r in rows:
                if not r.is_user_level or r.data.get("key") not in self.live:
                    continue
                types.add((svc, r.method, r.type_))
                if r.method == "TOPIC":
                    self.topic_actual[(svc, r.type_, r.target)] += 1  # one user-level row per (user, type, topic)
                if r.method == "CYCLE":
                    sch = parse_canonical(r.target)
                    self.zones.add(sch.timezone)
                    self.buckets.update((sch.timezone, d, sch.hour, sch.minute, r.data["key"]) for d in sch.days)
            self.actual.update(types)


def reconcile(runtime: Runtime, service: str | None = None, fetch_size: int = 1000) -> dict[str, int]:
    """Fix counts, delete dead rows and stale due buckets, for one service or all; return a report."""
    st = runtime.statements
    started_us = time.time_ns() // 1000
    settled = settle_withdrawals.settle_pending(runtime, service)  # first: the walk then sees what they leave
    tally = _FullWalk(runtime, service)
    tally.walk(fetch_size)
    fixed = _fix_counts(st, tally.actual, service, fetch_size)
    topics_fixed = _fix_topic_counts(st, tally.topic_actual, service, fetch_size)
    due_removed = 0
    for tz, day, hour, minute, notification_key, svc in st.scan_due(fetch_size):
        if service is not None and svc != service:
            continue
        if (tz, day, hour, minute, notification_key) not in tally.buckets:
            st.delete_due(started_us, tz, day, hour, minute, notification_key)
            due_removed += 1
    zones_removed = 0
    if service is None:  # zones are shared by every service: only a full run may drop one
        for tz in timezones_in_use(st):
            if tz not in tally.zones:
                st.delete_timezone(started_us, tz)
                zones_removed += 1
    report = {
        **settled,
        "counts_fixed": fixed,
        "topic_counts_fixed": topics_fixed,
        "dead_rows_removed": tally.dead,
        **tally.missing,
        "due_buckets_removed": due_removed,
        "timezones_removed": zones_removed,
    }
    if service is None:  # target_slots of every service: the whole table, cursor untouched
        report |= occupancy.prune(runtime, max_rows=None, fetch_size=fetch_size)
    log.info("reconcile%s: %s", f" of {service}" if service else "", report)
    return report


def _fix_counts(st: Statements, actual: Counter[tuple[str, str, str]], service: str | None, fetch_size: int) -> int:
    """Apply ``actual - current`` to every (service, method, type) subscription count that differs."""
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
    return fixed


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


def reconcile_batch(
    runtime: Runtime, *, max_rows: int = RECONCILE_BATCH_ROWS, fetch_size: int = 1000
) -> dict[str, int]:
    """One bounded scheduled run (module doc): walk at most ``max_rows`` index rows from the cursor
    (finishing the partition it is in), remove dead-template rows and rows of missing users and
    devices, then check every ``cycle_due`` row and ``cycle_timezone`` zone. Returns a report."""
    st = runtime.statements
    started_us = time.time_ns() // 1000
    settled = settle_withdrawals.settle_pending(runtime)
    after = st.reconcile_cursor(WALK)
    start = MIN_TOKEN if after is None else after
    live: set[str] = set()
    gone: set[str] = set()

    def is_live(key: str | None) -> bool:
        if key is None or key in gone:
            return False
        if key in live:
            return True
        with runtime.sessions() as s:
            found = templates_sql.get_template_by_key(s, key) is not None
        (live if found else gone).add(key)
        return found

    parts: list[Partition] = []
    seen = 0
    last_token: int | None = None
    current: tuple[int, str, str] | None = None
    for token, user_id, svc, row in st.scan_index_from(start, fetch_size):
        if current is None or current[0] != token or current[1:] != (user_id, svc):
            if seen >= max_rows:
                break  # a partition boundary after the budget: resume here next run
            current = (token, user_id, svc)
            parts.append((user_id, svc, []))
            last_token = token
        parts[-1][2].append(row)
        seen += 1
    else:
        last_token = None  # the walk reached the end: the next run starts again from the first partition
    dead = 0
    for user_id, svc, rows in parts:
        dead_rows = [r for r in rows if not is_live(r.data.get("key"))]
        if dead_rows:
            remove_rows(st, svc, user_id, dead_rows)
            dead += len(dead_rows)
            rows[:] = [r for r in rows if r not in dead_rows]
    counts, _ = _remove_missing(runtime, parts)
    st.set_reconcile_cursor(WALK, last_token)
    due_removed, zones_removed = _clean_due_index(runtime, started_us, is_live)
    report = {
        **settled,
        "index_rows_walked": seen,
        "walk_done": int(last_token is None),
        "dead_rows_removed": dead,
        **counts,
        "due_buckets_removed": due_removed,
        "timezones_removed": zones_removed,
    }
    report |= occupancy.prune(runtime, fetch_size=fetch_size)  # its own bounded walk (notee/usecases/occupancy.py)
    log.info("reconcile batch: %s", report)
    return report


def _clean_due_index(runtime: Runtime, started_us: int, is_live: Callable[[str | None], bool]) -> tuple[int, int]:
    """Delete ``cycle_due`` rows whose bucket has no slot row left (or whose template is gone), then
    zones with no ``cycle_due`` row, each with ``USING TIMESTAMP <run start>``: a subscribe writes its
    slot rows, then its due row, so a due row written after the check started survives the delete."""
    st = runtime.statements
    due_removed = 0
    zones_used: set[str] = set()
    max_slots: dict[str, int | None] = {}  # notification_key -> its type's highest slot (None: template gone)
    for tz, day, hour, minute, key, svc in st.scan_due():
        if key not in max_slots:
            tpl = None
            if is_live(key):
                with runtime.sessions() as s:
                    tpl = templates_sql.get_template_by_key(s, key)
            max_slots[key] = None if tpl is None else max_slot(st, svc, "CYCLE", tpl.notification_type)
        top = max_slots[key]
        alive = False
        if top is not None:  # the slots the bucket occupies (target_slots), or all of them when not known
            occupied = st.occupancy(key, CycleTarget(tz, day, hour, minute))
            slots = range(top + 1) if occupied is None else sorted(occupied)
            alive = st.cycle_bucket_has_rows(key, tz, day, hour, minute, slots)
        if alive:
            zones_used.add(tz)
        else:
            st.delete_due(started_us, tz, day, hour, minute, key)
            due_removed += 1
    zones_removed = 0
    for tz in timezones_in_use(st):
        if tz not in zones_used:
            st.delete_timezone(started_us, tz)
            zones_removed += 1
    return due_removed, zones_removed
