"""slot_walk_ratio: Notee's recipient stream (``notee.store.cql.recipients.stream_recipients``) against the raw
driver's paged SELECT of the same partitions, same columns, same fetch size, in the same process.

The columns are the ones the walk must read to keep its guarantees: device_token, device_os,
user_id, and ``no`` and ``origin`` (the row key to resume after a rejected paging state; the moved-row
filter of a token rotation). Until issue 19 the ceiling read only the first three while Notee read
all five; that older ceiling is still measured, as a side figure (``raw3_*``).

Runs are interleaved, in an order rotated each repetition (raw, raw3, notee; raw3, notee, raw; ...),
after one warm-up pass of each side so all see the same cache state; each side's figure is its
median rows/s over the repetitions (wall clock). Both sides hand every row of each page to the same
one-line Python loop, so neither is measured doing less with the rows than the other.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from bench.report import Measure, figure
from bench.seed import insert_topic_rows, topic_rows
from notee.core.vocabulary import SLOT_SIZE, TopicTarget


def seed(runtime, rows: int) -> tuple[str, str, int]:
    """The walk's rows, under a key derived from the size: seeded once per bench keyspace, reused
    by later runs (the rows are deterministic, so a re-seed after an interrupted one overwrites)."""
    key, topic = str(uuid.uuid5(uuid.NAMESPACE_URL, f"notee-bench-slot-walk-{rows}")), "bench-walk"
    ks = runtime.keyspaces.notification
    probe = runtime.cql.prepare(
        f"SELECT no FROM {ks}.topic_notification WHERE slot = ? AND notification_key = ? AND topic = ? AND no = ?"
    )
    present = all(
        runtime.cql.execute(probe, (no // SLOT_SIZE, key, topic, no)).one() is not None for no in (1, rows // 2, rows)
    )
    if not present:
        insert_topic_rows(runtime.cql, ks, topic_rows(key, topic, rows))
    return key, topic, rows // SLOT_SIZE  # last slot


COLUMNS = "device_token, device_os, user_id, no, origin"  # what stream_recipients reads (Recipient's fields)
COLUMNS_BEFORE_ISSUE_19 = "device_token, device_os, user_id"


def raw_walk(
    session, keyspace: str, key: str, topic: str, last_slot: int, fetch_size: int, columns: str = COLUMNS
) -> int:
    """The leanest driver read: prepared statement, plain tuple rows (no namedtuple class per row),
    the driver's own paging (``fetch_next_page``: no new request object, no timer per page), each
    page's rows touched once in a plain loop (iterating the ``ResultSet`` instead costs a Python
    method call per row)."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT
    from cassandra.query import tuple_factory

    stmt = session.prepare(
        f"SELECT {columns} FROM {keyspace}.topic_notification WHERE slot = ? AND notification_key = ? AND topic = ?"
    )
    profile = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory)
    n = 0
    for slot in range(last_slot + 1):
        bound = stmt.bind((slot, key, topic))
        bound.fetch_size = fetch_size
        result = session.execute(bound, execution_profile=profile)
        while True:
            for _row in result.current_rows:
                n += 1
            if not result.has_more_pages:
                break
            result.fetch_next_page()
    return n


def notee_walk(statements, key: str, topic: str, last_slot: int, fetch_size: int) -> int:
    """Every recipient of every slot, each row touched once, like ``raw_walk`` (the worker then builds
    a message from each)."""
    from notee.store.cql.recipients import stream_recipients

    target = TopicTarget(topic)
    n = 0
    for slot in range(last_slot + 1):
        for page, _state in stream_recipients(statements, key, target, slot, fetch_size):
            for _row in page:
                n += 1
    return n


def run(runtime, *, rows: int, fetch_size: int | None = None, repeats: int = 3) -> dict[str, Any]:

    fetch_size = fetch_size or runtime.settings.fanout_fetch_size
    key, topic, last_slot = seed(runtime, rows)
    session, ks = runtime.cql, runtime.keyspaces.notification
    statements = runtime.statements
    raw_walk(session, ks, key, topic, last_slot, fetch_size)  # warm-up, both sides
    notee_walk(statements, key, topic, last_slot, fetch_size)
    raw_rates, notee_rates, raw_cpu, notee_cpu, raw3_rates = [], [], [], [], []

    def raw() -> None:
        t, c = time.perf_counter(), time.process_time()
        n = raw_walk(session, ks, key, topic, last_slot, fetch_size)
        raw_rates.append(n / (time.perf_counter() - t))
        raw_cpu.append((time.process_time() - c) / max(n, 1))
        counts["raw"] = n

    def raw3() -> None:
        t = time.perf_counter()
        n = raw_walk(session, ks, key, topic, last_slot, fetch_size, COLUMNS_BEFORE_ISSUE_19)
        raw3_rates.append(n / (time.perf_counter() - t))
        counts["raw3"] = n

    def notee() -> None:
        t, c = time.perf_counter(), time.process_time()
        n = notee_walk(statements, key, topic, last_slot, fetch_size)
        notee_rates.append(n / (time.perf_counter() - t))
        notee_cpu.append((time.process_time() - c) / max(n, 1))
        counts["notee"] = n

    counts: dict[str, int] = {}
    sides = [raw, raw3, notee]
    for i in range(repeats):
        for side in sides[i % 3 :] + sides[: i % 3]:  # rotated: no side always runs after the same one
            side()
        if any(n != rows for n in counts.values()):
            raise AssertionError(f"walk read {counts} rows, seeded {rows}")
    notee_rate, raw_rate = statistics.median(notee_rates), statistics.median(raw_rates)
    return figure(
        "slot_walk_ratio",
        Measure("notee stream_recipients", notee_rate, "rows/s"),
        Measure("raw driver paged SELECT", raw_rate, "rows/s"),
        {"rows": rows, "slots": last_slot + 1, "fetch_size": fetch_size, "repeats": repeats},
        # CPU of this process (driver threads included) per row: steadier than wall time
        extra={
            "notee_cpu_us_per_row": statistics.median(notee_cpu) * 1e6,
            "raw_cpu_us_per_row": statistics.median(raw_cpu) * 1e6,
            # the same ratio in CPU per row: far steadier than wall time on a loaded machine
            "cpu_ratio": statistics.median(raw_cpu) / max(statistics.median(notee_cpu), 1e-12),
            # the ceiling of the first three columns only (before issue 19), and the ratio against it
            "raw3_rows_per_s": statistics.median(raw3_rates),
            "ratio_vs_raw3": notee_rate / statistics.median(raw3_rates),
        },
    )
