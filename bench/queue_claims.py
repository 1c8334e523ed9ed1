"""How many tasks per second MySQL's job queue can hand out: claims, checkpoints and completions of
``notee.store.task_leases`` by N threads, with no Cassandra and no provider in the way (issue 19 item 5,
docs/SCALING.md). Run by hand, under the bench lock, against the bench stores::

    flock /tmp/notee-bench.lock .venv/bin/python -m bench.queue_claims --tasks 2000 --threads 1 2 4 8

One job with ``--tasks`` one-slot tasks per thread count; each thread loops: ``claim`` (SELECT … FOR
UPDATE SKIP LOCKED + lease), ``--pages`` fenced ``checkpoint``s, ``complete`` (which locks the job row
to close it when the last task ends), until the job is done. Every thread has its own pooled
connection, as a worker's lanes do. Prints claims/s (whole cycles), statements/s and the MySQL
server's CPU over the run (it is shared with the other work on this machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from typing import Any

from bench import env
from bench.fanout import CpuMeter, _listener_pid
from bench.tenant import make_template, make_tenant


def _job(runtime: Any, service: str, key: str, tasks: int) -> str:
    from notee.store import jobs_sql
    from notee.store.jobs_sql import NewJob

    job_id = str(uuid.uuid4())
    with runtime.sessions.begin() as session:  # the caller owns the commit
        jobs_sql.insert_job(
            session,
            NewJob(
                job_id=job_id,
                service=service,
                notification_key=key,
                method="TOPIC",
                type_="bench_queue",
                target_kind="topic",
                target={"topic": "queue"},
                idempotency_key=None,
                request_hash="0" * 64,
                variables=None,
                overrides=None,
                payload={"title": "t", "body": "b"},
                slot_ranges=[(i, i) for i in range(tasks)],
            ),
        )
    return job_id


def measure(runtime: Any, service: str, key: str, *, tasks: int, threads: int, pages: int) -> dict[str, Any]:
    from notee.core.vocabulary import PageCounts
    from notee.store import jobs_sql, task_leases

    job_id = _job(runtime, service, key, tasks)
    claims: list[float] = []  # seconds per claim call
    lock = threading.Lock()
    errors: list[str] = []

    def lane(n: int) -> None:
        owner = f"bench-queue-{n}"
        while True:
            t = time.perf_counter()
            try:
                claim = task_leases.claim(runtime.sessions, owner=owner, lease_s=60, services=[service])
            except Exception as exc:  # reported, never hidden
                errors.append(f"{type(exc).__name__}: {exc}")
                return
            took = time.perf_counter() - t
            if claim is None:
                return
            with lock:
                claims.append(took)
            for p in range(pages):
                task_leases.checkpoint(
                    runtime.sessions,
                    claim,
                    current_slot=claim.slot_from,
                    paging_state=b"x" * 40,
                    counts=PageCounts(targeted=1000, sent=1000),
                    lease_s=60,
                    resume_key=(p, "token"),
                )
            task_leases.complete(runtime.sessions, claim, counts=PageCounts(targeted=1000, sent=1000))

    meter = CpuMeter({"mariadb": _listener_pid(runtime.engine.url.port or 3306) or 0})
    meter.start()
    t0 = time.perf_counter()
    pool = [threading.Thread(target=lane, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    cores = meter.stop()
    with runtime.sessions() as session:
        job = jobs_sql.get_job(session, job_id)
    if errors or len(claims) != tasks or job is None or job.state != "done":
        raise RuntimeError(f"{len(claims)} of {tasks} claimed, job {job and job.state}, errors {errors[:3]}")
    statements = tasks * (1 + pages + 1)
    return {
        "threads": threads,
        "tasks": tasks,
        "pages_per_task": pages,
        "tasks_per_s": round(tasks / wall, 1),
        "transactions_per_s": round(statements / wall, 1),
        "claim_ms_p50": round(statistics.median(claims) * 1000, 2),
        "claim_ms_p99": round(sorted(claims)[int(len(claims) * 0.99) - 1] * 1000, 2),
        "cores": cores,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.queue_claims", description=__doc__)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--pages", type=int, default=1, help="checkpoints per task (a task of 30,000 devices: 30)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    env.use_bench_stores()
    from notee.core.settings import Settings
    from notee.store.runtime import Runtime

    env.migrate(Settings())
    runtime = Runtime(Settings())
    try:
        tenant = make_tenant(runtime)
        key = make_template(runtime, tenant.service, "TOPIC", "bench_queue")
        for threads in args.threads:
            print(
                json.dumps(measure(runtime, tenant.service, key, tasks=args.tasks, threads=threads, pages=args.pages))
            )
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
