"""local_time_cpu_ratio: the CPU a local-time publish costs per push, against a plain publish of the
same topic (issue 18: "a local-time publish to 100,000 subscribers spread over 24 zones — worker and
scheduler CPU per push at most 1.2 × a plain publish of the same size").

One tenant, one TOPIC template, ``devices`` subscribers seeded straight into ``topic_notification``
(each row with its user's zone, as subscribe stores it: CQL 0004), each with a MySQL user row whose
time zone is one of 24 zones of 24 different UTC offsets (user i gets zone i mod 24). One real
``notee worker --lanes 2`` process, idle between jobs. Then:

* plain: ``publish_topic`` (what the API calls), until the job is done;
* local: ``publish_topic(local_time="09:00")`` made on a simulated instant two days back, so all of
  its 24 parts are already released (the figure is CPU, not the 24 hours a real one takes), until
  the job is done.

CPU is the worker process's user + system time (psutil) from the publish to the job's end, divided
by the pushes the job sent. The scheduler does no work for either (a local-time job's parts are
released by the job queue's ``lease_until``), so there is no scheduler CPU to add; the publish
call's own CPU (in this process: zones, parts, task rows) is reported in ``extra``, and so is the
local Cassandra node's CPU over each publish (each part filters its zone's rows server-side; on a
shared machine that figure includes other clients' load).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from bench.fanout import WorkerProcess, emulator_cpu_since, emulator_us, tree_cpu_s
from bench.report import Measure, figure, missing
from bench.seed import insert_topic_rows, set_no_counter, topic_rows
from bench.tenant import make_template, make_tenant

TYPE = "bench_local"
# 24 zones whose clocks show 09:00 at 24 different UTC minutes (-10 .. +13:45; not both -11 and +13,
# whose 09:00 are the same instant a day apart).
ZONES = (
    "Pacific/Chatham",
    "Pacific/Honolulu",
    "America/Anchorage",
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Halifax",
    "America/Sao_Paulo",
    "Atlantic/South_Georgia",
    "Atlantic/Cape_Verde",
    "UTC",
    "Europe/Berlin",
    "Europe/Athens",
    "Europe/Moscow",
    "Asia/Dubai",
    "Asia/Karachi",
    "Asia/Dhaka",
    "Asia/Bangkok",
    "Asia/Shanghai",
    "Asia/Seoul",
    "Australia/Brisbane",
    "Pacific/Noumea",
    "Pacific/Auckland",
)


def _seed_users(runtime, service: str, user_ids: list[str]) -> None:
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = [
        {"s": service, "su": f"b{i}", "u": u, "tz": ZONES[i % len(ZONES)], "t": now} for i, u in enumerate(user_ids)
    ]
    with runtime.sessions.begin() as session:  # the caller owns the commit
        for i in range(0, len(rows), 5000):
            session.execute(
                text(
                    "INSERT INTO `user` (service, service_user_id, service_user_name, user_id, timezone,"
                    " created_at, updated_at) VALUES (:s, :su, '', :u, :tz, :t, :t)"
                ),
                rows[i : i + 5000],
            )


def _job(runtime, job_id: str) -> tuple[str, int]:
    with runtime.engine.connect() as conn:
        state = conn.execute(text("SELECT state FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar()
        sent = conn.execute(
            text("SELECT COALESCE(SUM(sent), 0) FROM fanout_task WHERE job_id = :j"), {"j": job_id}
        ).scalar()
    return str(state), int(sent)


def _cpu(pid: int | None) -> float:
    import psutil

    if pid is None:
        return float("nan")
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _cassandra_pid(port: int = 9042) -> int | None:
    """The local Cassandra node's pid (the process listening on the CQL port), to report its CPU: a
    local-time part reads its zone's rows with a server-side filter, which the worker's CPU does not
    show. None when it is not a local process we can see."""
    import psutil

    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid:
                return int(c.pid)
    except psutil.AccessDenied:
        return None
    return None


def _one(
    runtime,
    worker: WorkerProcess,
    service: str,
    topic: str,
    local_time: str | None,
    timeout: float,
    emulator_pid: int | None = None,
):
    from notee.usecases.job_requests import TopicPublish
    from notee.usecases.publish import publish_topic

    cassandra = _cassandra_pid()
    cpu0, wall0, own0 = _cpu(worker.pid), time.perf_counter(), time.process_time()
    emu0 = tree_cpu_s(emulator_pid)
    cass0 = _cpu(cassandra)
    at = (datetime.now(UTC) - timedelta(days=2)).replace(tzinfo=None) if local_time else None
    with runtime.sessions.begin() as session:  # the caller owns the commit
        job = publish_topic(
            runtime, session, TopicPublish(service=service, type_=TYPE, topic=topic, local_time=local_time, at=at)
        )
    publish_cpu = time.process_time() - own0
    deadline = wall0 + timeout
    while True:
        state, sent = _job(runtime, job.job_id)
        if state in ("done", "failed", "expired", "cancelled"):
            break
        if time.perf_counter() > deadline:
            raise TimeoutError(f"job {job.job_id} still {state} after {timeout:.0f} s ({sent} sent)")
        if worker.proc.poll() is not None:
            raise RuntimeError(f"worker died: {worker.tail()}")
        time.sleep(0.1)
    return {
        "state": state,
        "sent": sent,
        "worker_cpu_s": _cpu(worker.pid) - cpu0,
        "emulator_cpu_s": emulator_cpu_since(emulator_pid, emu0),
        "cassandra_cpu_s": _cpu(cassandra) - cass0,
        "wall_s": time.perf_counter() - wall0,
        "publish_cpu_s": publish_cpu,
        "tasks": job.task_count,
        "parts": len(job.target.get("parts") or []),
        "task_sets": len(job.target.get("groups") or job.target.get("parts") or [None]),
    }


def run(runtime, emulator, *, devices: int, lanes: int = 2, timeout: float = 1800.0) -> dict[str, Any]:
    tenant = make_tenant(runtime)
    key = make_template(runtime, tenant.service, "TOPIC", TYPE)
    topic = "bench-local-" + uuid.uuid4().hex[:8]
    rows = list(topic_rows(key, topic, devices, zone_of=lambda i: ZONES[i % len(ZONES)]))
    insert_topic_rows(runtime.cql, runtime.keyspaces.notification, rows)
    set_no_counter(runtime.cql, runtime.keyspaces.numbering, tenant.service, "TOPIC", TYPE, devices)
    _seed_users(runtime, tenant.service, [r[6] for r in rows])
    worker = WorkerProcess(tenant.service, lanes)
    try:
        worker.wait_ready()
        plain = _one(runtime, worker, tenant.service, topic, None, timeout, emulator.pid)
        local = _one(runtime, worker, tenant.service, topic, "09:00", timeout, emulator.pid)
    finally:
        worker.stop()
    for name, r in (("plain", plain), ("local", local)):
        if r["state"] != "done" or r["sent"] != devices:
            return missing(f"{name} publish ended {r['state']} with {r['sent']} of {devices} sent")
    per_push = {name: r["worker_cpu_s"] / r["sent"] * 1e6 for name, r in (("plain", plain), ("local", local))}
    return figure(
        "local_time_cpu_ratio",
        Measure("local-time publish, worker CPU per push", per_push["local"], "µs"),
        Measure("plain publish, worker CPU per push", per_push["plain"], "µs"),
        {"devices": devices, "zones": len(ZONES), "parts": local["parts"], "lanes": lanes, "worker_processes": 1},
        extra={
            "local_wall_s": local["wall_s"],
            "plain_wall_s": plain["wall_s"],
            "local_tasks": local["tasks"],
            "local_task_sets": local["task_sets"],
            "plain_tasks": plain["tasks"],
            "local_publish_cpu_ms": local["publish_cpu_s"] * 1e3,
            "plain_publish_cpu_ms": plain["publish_cpu_s"] * 1e3,
            # The Cassandra node's CPU over each publish, per push: it includes whatever else uses
            # the node meanwhile (other suites on a shared machine), so it is an upper bound.
            "local_cassandra_cpu_us_per_push": local["cassandra_cpu_s"] / local["sent"] * 1e6,
            "plain_cassandra_cpu_us_per_push": plain["cassandra_cpu_s"] / plain["sent"] * 1e6,
            "scheduler_cpu_s": "none: parts are released by the job queue (task lease_until), not the scheduler",
            # the emulator's own CPU per request beside the worker's (issue 35); None: not measured
            "emulator_cpu_us_per_request": emulator_us(local, "sent"),
            "plain_emulator_cpu_us_per_request": emulator_us(plain, "sent"),
        },
    )
