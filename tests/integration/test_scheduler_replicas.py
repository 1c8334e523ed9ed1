"""Several scheduler replicas at once: each (template, bucket, minute) becomes exactly one job, and
the `notee scheduler` process ticks on start-up and stops cleanly on SIGTERM."""

from __future__ import annotations

import secrets
import signal
import threading
from collections import Counter
from datetime import timedelta

from sqlalchemy import text

from notee.core import clock
from notee.core.vocabulary import CycleTarget
from tests.support.processes import subprocess_env
from tests.support.registry import make_service
from tests.support.scheduler import job_ids_of, jobs_of, own_jobs, scheduler, tick_states, utc
from tests.support.waiting import wait_for

SEOUL = "Asia/Seoul"


def test_two_schedulers_over_a_simulated_hour_make_one_job_per_template_and_minute(runtime, service_id, due):
    tenant = make_service(runtime, service_id)
    start = utc(2026, 6, 19, 21, 0)  # SAT 06:00 KST
    every5 = due.template(tenant, "every5", [CycleTarget(SEOUL, "SAT", 6, m) for m in range(0, 60, 5)])
    half = due.template(tenant, "half", [CycleTarget(SEOUL, "SAT", 6, 30)])
    edges = due.template(tenant, "edges", [CycleTarget(SEOUL, "SAT", 6, 0), CycleTarget(SEOUL, "SAT", 6, 59)])
    first = scheduler(runtime)
    replicas = [first, scheduler(runtime, namespace=first.namespace)]
    minutes = list(clock.minutes(start, start + timedelta(hours=1)))
    barrier = threading.Barrier(len(replicas))
    errors: list[BaseException] = []
    won: Counter[str] = Counter()

    def replica(sched):
        try:
            for m in minutes:
                barrier.wait(timeout=60)  # both replicas race for the same minute
                for r in sched.tick(now=m + timedelta(seconds=1)).minutes:
                    if r.state != "taken":
                        won[sched.owner] += 1
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=replica, args=(s,)) for s in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    keys = Counter(idem for _, _, idem in jobs_of(runtime, tenant))
    assert all(n == 1 for n in keys.values())
    expected = {f"cycle:{every5}:{SEOUL}:SAT06{m:02d}:2026-06-19T21:{m:02d}Z" for m in range(0, 60, 5)}
    expected |= {f"cycle:{half}:{SEOUL}:SAT0630:2026-06-19T21:30Z"}
    expected |= {f"cycle:{edges}:{SEOUL}:SAT06{m:02d}:2026-06-19T21:{m:02d}Z" for m in (0, 59)}
    assert set(keys) == expected
    # Each minute was run by exactly one replica, on time.
    states = tick_states(runtime, first.namespace)
    assert states == {m: "done" for m in minutes}
    assert sum(won.values()) == 60
    with runtime.sessions() as s:
        jobs_recorded = s.execute(
            text("SELECT SUM(jobs) FROM cycle_tick WHERE namespace = :n"), {"n": first.namespace}
        ).scalar()
    assert jobs_recorded >= len(expected)  # other tenants' templates due in these buckets count too


def test_scheduler_process_ticks_at_start_and_stops_on_sigterm(runtime, processes):
    namespace = "test-proc-" + secrets.token_hex(4)
    proc = processes.start("scheduler", ["scheduler"], subprocess_env(NOTEE_SCHEDULER_NAMESPACE=namespace))
    # a liveness bound for a slow shared machine, not a timing assertion
    wait_for(
        lambda: tick_states(runtime, namespace) or not proc.alive(),
        timeout=90,
        interval=0.5,
        what="the scheduler's first tick",
    )
    assert proc.alive(), proc.output()
    assert set(tick_states(runtime, namespace).values()) <= {"running", "done"}
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0, proc.output()
    assert "stopped" in proc.output()
    assert set(tick_states(runtime, namespace).values()) <= {"done", "late"}


def test_racing_double_runs_of_a_minute_still_make_one_job(runtime, service_id, due):
    # Two schedulers that both run the same minutes (separate ledgers, as after a lease takeover):
    # the job's idempotency key alone keeps it to one job, even when both insert at the same moment.
    tenant = make_service(runtime, service_id)
    start = utc(2026, 6, 20, 22, 0)  # SUN 07:00 KST
    key = due.template(tenant, "race", [CycleTarget(SEOUL, "SUN", 7, m) for m in range(5)])
    replicas = [scheduler(runtime), scheduler(runtime)]
    barrier = threading.Barrier(2)
    results: dict[str, list] = {r.namespace: [] for r in replicas}
    errors: list[BaseException] = []

    def replica(sched):
        try:
            for m in clock.minutes(start, start + timedelta(minutes=5)):
                barrier.wait(timeout=60)
                results[sched.namespace].append(sched.run_minute(m, now=m))
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=replica, args=(s,)) for s in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    keys = Counter(idem for _, _, idem in jobs_of(runtime, tenant))
    assert set(keys) == {f"cycle:{key}:{SEOUL}:SUN070{m}:2026-06-20T22:0{m}Z" for m in range(5)}
    assert set(keys.values()) == {1}
    mine = job_ids_of(runtime, tenant)  # other templates may be due in these buckets: count this tenant's
    for rs in results.values():  # each replica saw every minute's job, made by it or by the other
        assert [r.state for r in rs] == ["done"] * 5
        assert [len(own_jobs(r, mine)) for r in rs] == [1] * 5
