"""cycle_minute_s: seconds from a minute's tick until every cycle push due in it is acknowledged.

``devices`` cycle subscriptions of one CYCLE template are seeded into the bucket (Asia/Seoul local
day/hour/minute) that is due at the current UTC minute, with their due-index rows; a ``notee worker``
is started and idle. The clock starts when ``Scheduler.run_minute`` is called for that minute (in a
fresh scheduler namespace, so the minute is always unclaimed) and stops when the emulator has
acknowledged every device. Not a ratio: the value is the numerator (seconds); the denominator is the
number of pushes it covered.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from bench.fanout import WorkerProcess, publish_and_wait
from bench.report import Measure, figure
from bench.seed import cycle_rows, insert_cycle_rows, set_no_counter
from bench.tenant import make_template, make_tenant

TYPE = "bench_cycle"
TZ = "Asia/Seoul"


def run(runtime, emulator, *, devices: int, lanes: int = 2, timeout: float = 900.0) -> dict[str, Any]:
    from notee.core import clock
    from notee.scheduler.runner import Scheduler

    st = runtime.statements
    tenant = make_tenant(runtime)
    key = make_template(runtime, tenant.service, "CYCLE", TYPE)
    minute = clock.floor_minute(datetime.now(UTC))
    bucket = clock.due_buckets(minute, TZ)[0]
    insert_cycle_rows(
        runtime.cql,
        runtime.keyspaces.notification,
        cycle_rows(key, TZ, bucket.day, bucket.hour, bucket.minute, devices),
    )
    set_no_counter(runtime.cql, runtime.keyspaces.numbering, tenant.service, "CYCLE", TYPE, devices)
    st.run(
        st.mark_due(
            service=tenant.service,
            type_=TYPE,
            notification_key=key,
            timezone=TZ,
            days=[bucket.day],
            hour=bucket.hour,
            minute=bucket.minute,
        )
    )
    scheduler = Scheduler(runtime, namespace="bench-" + uuid.uuid4().hex[:12])
    results: dict[str, Any] = {}

    def tick() -> list[str]:
        r = scheduler.run_minute(minute, now=minute)
        results["minute"] = r
        # Other tenants' templates due in the same minute (a shared keyspace) get jobs too; only
        # this tenant's are waited for (its worker claims nothing else).
        with runtime.engine.connect() as conn:
            mine = [
                j
                for j in r.job_ids
                if conn.execute(text("SELECT service FROM fanout_job WHERE job_id = :j"), {"j": j}).scalar()
                == tenant.service
            ]
        results["foreign_jobs"] = len(r.job_ids) - len(mine)
        return mine

    worker = WorkerProcess(tenant.service, lanes)
    try:
        worker.wait_ready()
        r = publish_and_wait(runtime, emulator, worker, start=tick, expect=devices, timeout=timeout)
    finally:
        worker.stop()
        st.delete_due(time.time_ns() // 1000, TZ, bucket.day, bucket.hour, bucket.minute, key)
    m = results["minute"]
    return figure(
        "cycle_minute_s",
        Measure("tick to last push acknowledged", r["elapsed_s"], "s"),
        Measure("cycle pushes due", r["delivered"], "pushes"),
        {
            "subscriptions_due": devices,
            "templates": 1,
            "slots": devices // 30_000 + 1,
            "worker_processes": 1,
            "lanes": lanes,
        },
        value=r["elapsed_s"],
        extra={
            "pushes_per_s": r["delivered"] / r["elapsed_s"],
            "tick_s": r["create_s"],
            "jobs": len(m.job_ids) - results["foreign_jobs"],
            "other_tenants_jobs": results["foreign_jobs"],
            "job_state": ",".join(r["states"]),
        },
    )
