"""Fairness between tenants (docs/FANOUT.md, "Fairness between tenants"), on the real stores and with
real ``notee worker`` processes against the emulator.

* The claim: a tenant with fewer live leases goes before older work of a busier tenant; within a
  tenant, a task whose lease expired (its worker died) is resumed before queued work.
* A lane busy with a long task of one tenant gives it back at a checkpoint when another tenant
  waits: the small job is sent before the long task ends, nothing is sent twice, no attempt counted.

Every assertion is on order or counts (which task was claimed, which finished first, deliveries per
token), never on durations.
"""

from __future__ import annotations

import signal
import uuid
from typing import Any

from sqlalchemy import text

from notee.store import claim_order, jobs_sql, task_leases
from notee.store.runtime import Runtime
from tests.support import registry
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import job_progress, seed_topic, topic_job, topic_job_row, topic_template
from tests.support.processes import subprocess_env
from tests.support.waiting import wait_for

PAYLOAD = {"title": "Hi", "body": "fair", "data": {}, "ttl_seconds": None, "priority": "high"}
FETCH = 20
# Pages slow enough (emulator latency, few in flight) that a page boundary is never missed.
WORKER_ENV = {"NOTEE_FANOUT_FETCH_SIZE": str(FETCH), "NOTEE_FANOUT_LEASE_S": "5", "NOTEE_FANOUT_SEND_CONCURRENCY": "5"}


def _job(
    runtime: Runtime, service: str, slots: list[tuple[int, int]], *, key: str | None = None, topic: str = "t"
) -> str:
    """A topic job with exactly these slot-range tasks (written as create_job writes them), so the
    tests do not depend on how many tasks a publish makes for its target."""
    job = topic_job_row(service, slots, PAYLOAD, topic=topic, key=key)
    job_id = job.job_id
    with runtime.sessions.begin() as session:
        jobs_sql.insert_job(session, job)
    return job_id


def _claim(runtime: Runtime, services: list[str], lease_s: float = 30.0) -> task_leases.Claim:
    claim = task_leases.claim(runtime.sessions, owner="test", lease_s=lease_s, services=services)
    assert claim is not None
    return claim


def _task_times(runtime: Runtime, job_id: str) -> dict[int, Any]:
    with runtime.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT task_no, state, started_at, finished_at FROM fanout_task WHERE job_id = :j"), {"j": job_id}
        ).all()
    return {int(r.task_no): r for r in rows}


def _lease_expired(runtime: Runtime, job_id: str, task_no: int) -> bool:
    with runtime.engine.connect() as conn:
        return bool(
            conn.execute(
                text("SELECT lease_until <= UTC_TIMESTAMP(6) FROM fanout_task WHERE job_id = :j AND task_no = :n"),
                {"j": job_id, "n": task_no},
            ).scalar()
        )


def test_a_waiting_tenant_is_claimed_before_older_tasks_of_a_busy_tenant(runtime):
    a, b = (
        registry.make_service(runtime, "FA" + uuid.uuid4().hex[:8].upper()),
        registry.make_service(runtime, "FB" + uuid.uuid4().hex[:8].upper()),
    )
    big = _job(runtime, a, [(0, 0), (1, 1), (2, 2)])
    first = _claim(runtime, [a, b])
    assert (first.job_id, first.task_no) == (big, 0)  # A alone: its oldest task
    small = _job(runtime, b, [(0, 0)])  # created after every task of A
    second = _claim(runtime, [a, b])
    # B holds no lease, A holds one: B's task goes before A's older queued tasks 1 and 2.
    assert (second.job_id, second.task_no) == (small, 0)
    third = _claim(runtime, [a, b])
    assert (third.job_id, third.task_no) == (big, 1)
    later = _job(runtime, b, [(0, 0)])  # B holds one lease, A two: B's new task goes before A's task 2
    fourth = _claim(runtime, [a, b])
    assert (fourth.job_id, fourth.task_no) == (later, 0)
    fifth = _claim(runtime, [a, b])
    assert (fifth.job_id, fifth.task_no) == (big, 2)


def test_an_expired_lease_is_resumed_before_queued_tasks_of_the_same_tenant(runtime):
    a = registry.make_service(runtime, "FE" + uuid.uuid4().hex[:8].upper())
    job = _job(runtime, a, [(0, 0), (1, 1), (2, 2)])
    dead = _claim(runtime, [a], lease_s=0.2)  # a worker that claims task 0 and dies
    assert dead.task_no == 0
    wait_for(lambda: _lease_expired(runtime, job, 0), timeout=30, what="the lease to expire")
    resumed = _claim(runtime, [a])
    # Tasks 1 and 2 were due earlier (queued since the job was made), yet the crashed task comes first.
    assert (resumed.job_id, resumed.task_no, resumed.taken_over) == (job, 0, True)
    assert _claim(runtime, [a]).task_no == 1


def test_tenant_waiting_says_when_another_tenant_has_fewer_leases_and_due_work(runtime):
    a, b = (
        registry.make_service(runtime, "FW" + uuid.uuid4().hex[:8].upper()),
        registry.make_service(runtime, "FX" + uuid.uuid4().hex[:8].upper()),
    )
    _job(runtime, a, [(0, 0), (1, 1)])
    _claim(runtime, [a, b])
    assert not claim_order.tenant_waiting(runtime.sessions, a, [a, b])  # only A has work
    _job(runtime, b, [(0, 0), (1, 1)])
    assert claim_order.tenant_waiting(runtime.sessions, a, [a, b])  # B: due work and 0 leases < A's 1
    assert not claim_order.tenant_waiting(runtime.sessions, a, [a])  # outside this worker's scope
    _claim(runtime, [b])
    # B holds one lease as A does: no reason to give A's lane away, although B has a due task left.
    assert not claim_order.tenant_waiting(runtime.sessions, a, [a, b])
    assert claim_order.tenant_waiting(runtime.sessions, b, [a, b]) is False


def _one_lane_worker(processes, services: list[str], name: str, **env: str):
    """``notee worker --lanes 1`` for these tenants; without the spare lane unless ``env`` turns it on."""
    args = ["worker", "--lanes", "1", *[x for s in services for x in ("--service", s)]]
    return processes.start(name, args, subprocess_env(**(WORKER_ENV | {"NOTEE_FANOUT_SPARE_LANE": "false"} | env)))


def test_a_lane_busy_with_a_long_task_yields_to_another_tenant_at_a_checkpoint(runtime, emulator, processes):
    a, b = "FY" + uuid.uuid4().hex[:8].upper(), "FZ" + uuid.uuid4().hex[:8].upper()
    key_a, key_b = topic_template(runtime, a), topic_template(runtime, b)
    n = 600
    tokens_a = seed_topic(runtime, a, "news", key_a, "long", n)  # slot 0 only: one task of 30 pages
    (token_b,) = seed_topic(runtime, b, "news", key_b, "small", 1)
    long_job = _job(runtime, a, [(0, 0)], key=key_a, topic="long")
    emulator.latency(50)
    worker = _one_lane_worker(processes, [a, b], "fair-yield")  # one lane: A's task holds it
    wait_for(lambda: job_progress(runtime, long_job)[1].sent >= 2 * FETCH, timeout=60, what="A's first pages")
    small = topic_job(runtime, b, key_b, "small")
    assert job_progress(runtime, long_job)[1].sent < n, "A finished before B published; slow the emulator down"
    wait_for(lambda: job_progress(runtime, small.job_id)[0].state == "done", timeout=60, what="B's job")
    wait_for(lambda: job_progress(runtime, long_job)[0].state == "done", timeout=120, what="A's job")
    (a_task,), (b_task,) = _task_times(runtime, long_job).values(), _task_times(runtime, small.job_id).values()
    assert b_task.finished_at < a_task.finished_at  # B did not wait for A's only task to end
    assert "yielded its lane" in worker.output(), worker.tail()
    counts = deliveries_per_token(emulator, tokens_a)
    assert set(counts.values()) == {1}, "yielding at a checkpoint neither loses nor duplicates"
    assert deliveries_per_token(emulator, [token_b])[token_b] == 1
    with runtime.sessions() as s:
        (task,) = jobs_sql.tasks(s, long_job)
    # A yield is a graceful release: it gave its claim back (no attempt counted against the task).
    assert task.state == "done" and task.attempts <= 1 and task.sent == n


def test_a_killed_workers_task_is_resumed_before_queued_work_of_its_tenant(runtime, emulator, processes):
    a = "FK" + uuid.uuid4().hex[:8].upper()
    key = topic_template(runtime, a)
    runtime.statements.allocate_numbers(a, "TOPIC", "news", 29_699)  # the next 600 numbers straddle slots 0 and 1
    tokens = seed_topic(runtime, a, "news", key, "crash", 600)
    job = _job(runtime, a, [(0, 0), (1, 1)], key=key, topic="crash")
    emulator.latency(50)
    first = _one_lane_worker(processes, [a], "fair-crash-a")
    wait_for(lambda: _task_times(runtime, job)[0].state == "running", timeout=60, what="task 0 claimed")
    wait_for(lambda: job_progress(runtime, job)[1].sent >= 2 * FETCH, timeout=60, what="task 0's first pages")
    first.signal(signal.SIGKILL)
    first.wait(10)
    tasks = _task_times(runtime, job)
    assert tasks[0].state == "running" and tasks[1].state == "queued" and tasks[1].started_at is None
    wait_for(lambda: _lease_expired(runtime, job, 0), timeout=30, what="the dead worker's lease to expire")
    _one_lane_worker(processes, [a], "fair-crash-b")  # one lane: it runs one task at a time
    wait_for(lambda: job_progress(runtime, job)[0].state == "done", timeout=120, what="job done")
    tasks = _task_times(runtime, job)
    # Task 1 was queued (due) since the job was made, but the crashed task 0 was resumed first.
    assert tasks[1].started_at >= tasks[0].finished_at
    counts = deliveries_per_token(emulator, tokens)
    assert min(counts.values()) >= 1, "a device was missed"
    assert sum(c - 1 for c in counts.values()) <= FETCH, "more duplicates than the one page in flight"


def test_the_spare_lane_serves_a_tenant_no_lane_serves_without_any_yield(runtime, emulator, processes):
    a, b = "FS" + uuid.uuid4().hex[:8].upper(), "FT" + uuid.uuid4().hex[:8].upper()
    key_a, key_b = topic_template(runtime, a), topic_template(runtime, b)
    n = 600
    tokens_a = seed_topic(runtime, a, "news", key_a, "long", n)
    (token_b,) = seed_topic(runtime, b, "news", key_b, "small", 1)
    long_job = _job(runtime, a, [(0, 0)], key=key_a, topic="long")  # one task: one lane holds it to the end
    emulator.latency(50)
    # One regular lane plus the spare lane; no yielding (a slice of an hour), so only a free lane can send B.
    worker = _one_lane_worker(
        processes, [a, b], "fair-spare", NOTEE_FANOUT_SPARE_LANE="true", NOTEE_FANOUT_FAIR_SLICE_S="3600"
    )
    wait_for(lambda: job_progress(runtime, long_job)[1].sent >= 2 * FETCH, timeout=60, what="A's first pages")
    small = topic_job(runtime, b, key_b, "small")
    assert job_progress(runtime, long_job)[1].sent < n, "A finished before B published; slow the emulator down"
    wait_for(lambda: job_progress(runtime, small.job_id)[0].state == "done", timeout=60, what="B's job")
    wait_for(lambda: job_progress(runtime, long_job)[0].state == "done", timeout=120, what="A's job")
    (a_task,), (b_task,) = _task_times(runtime, long_job).values(), _task_times(runtime, small.job_id).values()
    assert b_task.finished_at < a_task.finished_at  # sent while A's only task still held the other lane
    assert "yielded its lane" not in worker.output()
    assert set(deliveries_per_token(emulator, tokens_a).values()) == {1}
    assert deliveries_per_token(emulator, [token_b])[token_b] == 1
