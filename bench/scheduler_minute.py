"""How long from a minute's start until the scheduler has created that minute's fan-out jobs, with
100,000 cycle subscriptions due in it (measured, not asserted; the result goes to docs/SCHEDULER.md).

Two shapes of the same 100,000 subscriptions, all due at one local bucket in Asia/Seoul:
  one_template    1 template x 100,000 devices    -> 1 job of 4 slot tasks
  many_templates  1,000 templates x 100 devices   -> 1,000 jobs (the per-job cost dominates)
plus the empty minute (nothing due anywhere in the bench keyspace's timezones).

"Minute start -> jobs created" is timed around ``Scheduler.run_minute`` (claim, due reads, job
rows, finish) called as the cron trigger calls it at second 0; APScheduler's own wake-up latency
is not included. Each repetition uses the bucket one week later (a new minute, so new jobs).
Rows are seeded directly with prepared CQL (bench/seed.py), into the bench stores (bench/env.py).

    .venv/bin/python -m bench.scheduler_minute [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import env
from bench.seed import cycle_rows, set_no_counter
from bench.tenant import make_template, make_tenant

TZ, DAY, HOUR, MINUTE = "Asia/Seoul", "WED", 4, 44
FIRST = datetime(2027, 1, 5, 19, 44, tzinfo=UTC)  # WED 04:44 KST


def insert_rows(runtime, rows: list[tuple], concurrency: int = 64) -> None:
    """Idempotent inserts, so a row that timed out on the busy shared machine is simply sent again."""
    from cassandra.concurrent import execute_concurrent_with_args

    stmt = runtime.statements.cycle_insert
    for attempt in range(10):
        results = execute_concurrent_with_args(
            runtime.cql, stmt, rows, concurrency=concurrency, raise_on_first_error=False
        )
        rows = [row for row, (ok, _) in zip(rows, results, strict=False) if not ok]
        if not rows:
            return
        time.sleep(1 + attempt)
    raise RuntimeError(f"{len(rows)} rows could not be written")


def seed(runtime, service: str, templates: int, per_template: int, keys: list[str]) -> None:

    st = runtime.statements
    for t in range(templates):
        type_ = f"remind{t}"
        key = make_template(runtime, service, "CYCLE", type_)
        keys.append(key)
        rows = list(cycle_rows(key, TZ, DAY, HOUR, MINUTE, per_template))
        for i in range(0, len(rows), 10_000):
            insert_rows(runtime, rows[i : i + 10_000])
        set_no_counter(runtime.cql, runtime.keyspaces.numbering, service, "CYCLE", type_, per_template)
        st.run(
            st.mark_due(
                service=service, type_=type_, notification_key=key, timezone=TZ, days=[DAY], hour=HOUR, minute=MINUTE
            )
        )


def cleanup(runtime, service: str, keys: list[str], per_template: int) -> None:
    from sqlalchemy import text

    from notee.core.vocabulary import slot_of

    st = runtime.statements
    ks = runtime.keyspaces.notification
    stamp = int(time.time() * 1_000_000) + 1
    for key in keys:
        st.delete_due(stamp, TZ, DAY, HOUR, MINUTE, key)
        for slot in range(slot_of(per_template) + 1):
            runtime.cql.execute(
                f"DELETE FROM {ks}.cycle_notification WHERE slot = %s AND notification_key = %s"
                " AND timezone = %s AND day = %s AND hour = %s AND minute = %s",
                (slot, key, TZ, DAY, HOUR, MINUTE),
            )
    with runtime.sessions.begin() as s:  # cascades to templates, jobs and tasks
        s.execute(text("DELETE FROM service WHERE service = :s"), {"s": service})


def measure(runtime, templates: int, per_template: int, reps: int) -> dict:
    from notee.scheduler.runner import Scheduler

    service = make_tenant(runtime).service
    sched = Scheduler(runtime, namespace="bench-" + secrets.token_hex(4))
    times, jobs, keys = [], 0, []
    try:
        t0 = time.perf_counter()
        seed(runtime, service, templates, per_template, keys)
        seed_s = time.perf_counter() - t0
        for r in range(reps):
            minute = FIRST + timedelta(weeks=r)
            start = time.perf_counter()
            result = sched.run_minute(minute, now=minute)
            times.append(time.perf_counter() - start)
            jobs = result.jobs_created
            assert result.state == "done" and result.jobs_created >= templates, result
    finally:
        cleanup(runtime, service, keys, per_template)
    return {
        "templates": templates,
        "subscriptions": templates * per_template,
        "jobs_per_minute": jobs,
        "seconds": [round(t, 4) for t in times],
        "median_s": round(statistics.median(times), 4),
        "seed_s": round(seed_s, 1),
    }


def empty_minute(runtime, reps: int) -> dict:
    from notee.scheduler.runner import Scheduler
    from notee.store.cql.due import timezones_in_use

    sched = Scheduler(runtime, namespace="bench-" + secrets.token_hex(4))
    times = []
    for r in range(reps):
        minute = datetime(2027, 1, 6, 19, 13, tzinfo=UTC) + timedelta(weeks=r)
        start = time.perf_counter()
        result = sched.run_minute(minute, now=minute)
        times.append(time.perf_counter() - start)
        assert result.jobs_created == 0
    return {
        "timezones_in_use": len(timezones_in_use(runtime.statements)),
        "seconds": [round(t, 4) for t in times],
        "median_s": round(statistics.median(times), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    env.use_bench_stores()
    from notee.core.settings import Settings
    from notee.store.runtime import Runtime

    settings = Settings()
    env.migrate(settings)
    runtime = Runtime(settings)
    try:
        out = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "empty_minute": empty_minute(runtime, args.reps),
            "one_template": measure(runtime, 1, 100_000, args.reps),
            "many_templates": measure(runtime, 1_000, 100, args.reps),
        }
    finally:
        runtime.close()
    text = json.dumps(out, indent=2)
    print(text)
    path = Path(__file__).resolve().parent / "results" / "scheduler_minute.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text + "\n")


if __name__ == "__main__":
    main()
