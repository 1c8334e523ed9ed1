"""The lock order of a job's rows (docs/SCHEMA.md "Lock order"): its task rows in task_no order, then
its job row. A worker's claim and completion take their one task row and then the job row; a cancel
(POST /v1/jobs/{id}/cancel), a requeue (notee jobs requeue) and a job's failure used to take the job
row first and then the task rows, and a cancel meeting a completing worker was answered 503 (MariaDB
1213). The deterministic tests hold the job row in a transaction of their own until the operator's
transaction and the worker's both wait (``information_schema.PROCESSLIST``: the same MySQL user),
so the order the two ask for their locks is the one that deadlocked; the race test runs them many
times against each other."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from notee.core import metrics
from notee.core.vocabulary import PageCounts
from notee.store import task_leases
from notee.usecases import jobs
from tests.support.fanout import topic_job, topic_template
from tests.support.lock_waits import in_thread, running
from tests.support.waiting import wait_for

_LOCK_JOB = "SELECT job_id FROM fanout_job WHERE job_id = :j FOR UPDATE"
_WRITES = ("claim", "checkpoint", "complete", "fail_job")
RACE_ROUNDS = 30


def _deadlocks() -> float:
    """Deadlocks the task-lease writes met in this process (each run again by ``mysql.retried``)."""
    return sum(
        metrics.MYSQL_TRANSACTION_RETRIES.labels(name, "deadlock", outcome)._value.get()
        for name in _WRITES
        for outcome in ("retried", "gave_up")
    )


def _job_with_tasks(runtime, service, tasks: int, key: str | None = None):
    """A job of ``tasks`` tasks; ``key``: the template of a service made already (another job of it)."""
    if key is None:
        key = topic_template(runtime, service)
        runtime.statements.allocate_numbers(service, "TOPIC", "news", 30_000 * tasks - 1)
    job = topic_job(runtime, service, key, "all")
    assert job.task_count == tasks
    return job


def _claim(runtime, service):
    claim = task_leases.claim(runtime.sessions, owner="test", lease_s=60.0, services=[service])
    assert claim is not None
    return claim


def _cancel(runtime, service: str, job_id: str) -> None:
    """What the cancel route does: the use case in a request's session, then the commit."""
    with runtime.sessions() as session:
        jobs.cancel_job(session, service, job_id)
        session.commit()


def _requeue(runtime, job_id: str) -> None:
    """What the admin requeue route does."""
    with runtime.sessions() as session:
        jobs.requeue_job(session, job_id)
        session.commit()


def _operator_then_worker(
    runtime, job_id: str, operator: Callable[[], Any], operator_sql: str, worker: Callable[[], Any]
):
    """Hold the job row; start ``operator`` and wait until its ``operator_sql`` waits for the job row;
    start ``worker`` and wait until it waits too (for the job row, or for a task row the operator
    holds); let go. InnoDB grants the job row to the operator first: with the operator's job-then-tasks
    order it then asks for the worker's task row, and the cycle closes. Returns both threads' errors."""
    with runtime.sessions() as holder:
        holder.execute(text(_LOCK_JOB), {"j": job_id})
        op_thread, op_errors = in_thread(operator)
        wait_for(
            lambda: not op_thread.is_alive() or running(runtime, operator_sql, f"%{job_id}%") == 1,
            timeout=60,
            what="the operator's transaction to wait for the job row",
        )
        assert op_thread.is_alive(), op_errors
        worker_thread, worker_errors = in_thread(worker)
        wait_for(
            lambda: not worker_thread.is_alive() or running(runtime, "%", f"%{job_id}%") == 2,
            timeout=60,
            what="the worker's transaction to wait",
        )
        holder.rollback()
    for thread in (op_thread, worker_thread):
        thread.join(60)
        assert not thread.is_alive()
    return op_errors, worker_errors


def _states(runtime, job_id: str) -> tuple[str, dict[int, tuple[str, int]]]:
    with runtime.sessions() as s:
        job = s.execute(text("SELECT state FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar_one()
        rows = s.execute(text("SELECT task_no, state, sent FROM fanout_task WHERE job_id = :j"), {"j": job_id}).all()
    return str(job), {int(r.task_no): (str(r.state), int(r.sent)) for r in rows}


def test_a_cancel_meeting_a_completing_worker_waits_for_it_instead_of_deadlocking(runtime, service_id):
    job = _job_with_tasks(runtime, service_id, 4)
    claim = _claim(runtime, service_id)
    before = _deadlocks()
    op_errors, worker_errors = _operator_then_worker(
        runtime,
        job.job_id,
        lambda: _cancel(runtime, service_id, job.job_id),
        "UPDATE fanout_job SET state = 'cancelled'%",
        lambda: task_leases.complete(runtime.sessions, claim, counts=PageCounts(targeted=5, sent=5)),
    )
    # Before the one lock order: the cancel lost (OperationalError 1213, the route's 503) or the worker did.
    assert op_errors == [] and worker_errors == []
    assert _deadlocks() == before
    state, tasks = _states(runtime, job.job_id)
    assert state == "cancelled"
    assert tasks[claim.task_no] == ("done", 5)
    assert [tasks[n][0] for n in sorted(tasks) if n != claim.task_no] == ["cancelled"] * 3
    status, progress = jobs.job_status(runtime.sessions(), service_id, job.job_id)
    assert status.state == "cancelled" and progress.sent == 5


def test_a_cancel_meeting_a_claim_waits_for_it_or_the_claim_skips_the_job(runtime, service_id):
    job = _job_with_tasks(runtime, service_id, 3)
    claimed: list[task_leases.Claim | None] = []
    before = _deadlocks()
    op_errors, worker_errors = _operator_then_worker(
        runtime,
        job.job_id,
        lambda: _cancel(runtime, service_id, job.job_id),
        "UPDATE fanout_job SET state = 'cancelled'%",
        lambda: claimed.append(task_leases.claim(runtime.sessions, owner="test", lease_s=60.0, services=[service_id])),
    )
    assert op_errors == [] and worker_errors == []
    assert _deadlocks() == before
    state, tasks = _states(runtime, job.job_id)
    assert state == "cancelled"
    # The claim either skipped the job's tasks (the cancel held them) or took one before the cancel did.
    assert sum(s == "running" for s, _ in tasks.values()) == (0 if claimed == [None] else 1)


def test_a_requeue_meeting_a_lane_failing_the_job_waits_for_it_instead_of_deadlocking(runtime, service_id):
    job = _job_with_tasks(runtime, service_id, 4)
    lane_a, lane_b = _claim(runtime, service_id), _claim(runtime, service_id)
    task_leases.fail_job(runtime.sessions, lane_a, error="provider configuration: A", counts=PageCounts(2, 2))
    before = _deadlocks()
    op_errors, worker_errors = _operator_then_worker(
        runtime,
        job.job_id,
        lambda: _requeue(runtime, job.job_id),
        "SELECT %state FROM fanout_job WHERE job_id = %FOR UPDATE",
        lambda: task_leases.fail_job(
            runtime.sessions, lane_b, error="provider configuration: B", counts=PageCounts(3, 3)
        ),
    )
    assert op_errors == []
    # Lane B came after the requeue: its task is queued again without a lease (its page is sent again
    # from the checkpoint), so its write is fenced off.
    assert len(worker_errors) <= 1 and all(isinstance(e, task_leases.LeaseLost) for e in worker_errors)
    assert _deadlocks() == before
    state, tasks = _states(runtime, job.job_id)
    assert state == "running"
    assert {s for s, _ in tasks.values()} == {"queued"}


def test_two_lanes_failing_one_job_wait_for_each_other_and_the_job_fails_once(runtime, service_id):
    """The deadlock seen in a run: two lanes failing one job (undecryptable credentials) each took its
    own task row, then the job row, then every task row. Now each takes the task rows first."""
    job = _job_with_tasks(runtime, service_id, 4)
    lane_a, lane_b = _claim(runtime, service_id), _claim(runtime, service_id)
    before = _deadlocks()
    a_errors, b_errors = _operator_then_worker(
        runtime,
        job.job_id,
        lambda: task_leases.fail_job(
            runtime.sessions, lane_a, error="provider configuration: A", counts=PageCounts(3, 3)
        ),
        _LOCK_JOB.replace(":j", "%"),
        lambda: task_leases.fail_job(
            runtime.sessions, lane_b, error="provider configuration: B", counts=PageCounts(2, 2)
        ),
    )
    assert a_errors == [] and b_errors == []
    assert _deadlocks() == before
    state, tasks = _states(runtime, job.job_id)
    assert state == "failed"
    assert (tasks[lane_a.task_no], tasks[lane_b.task_no]) == (("failed", 3), ("failed", 2))  # B's page counted
    with runtime.sessions() as s:
        error = s.execute(text("SELECT error FROM fanout_job WHERE job_id = :j"), {"j": job.job_id}).scalar_one()
    assert error == "provider configuration: A"  # failed once, by the first


def _race_round(runtime, service_id: str, key: str, requeue: bool, rng: random.Random) -> str:
    """One job: three lanes hold a task each; an operator's cancel (or, once a lane failed the job, its
    requeue) runs at once with the lanes' writes and a claim. Returns the job's final state."""
    job = _job_with_tasks(runtime, service_id, 4, key)
    lanes = [_claim(runtime, service_id) for _ in range(3)]
    sessions = runtime.sessions
    if requeue:
        task_leases.fail_job(sessions, lanes[2], error="provider configuration", counts=PageCounts(1, 1))
        steps = [
            lambda: _requeue(runtime, job.job_id),
            lambda: task_leases.fail_job(sessions, lanes[0], error="again", counts=PageCounts(1, 1)),
            lambda: task_leases.fail_job(sessions, lanes[1], error="again", counts=PageCounts(1, 1)),
        ]
    else:
        steps = [
            lambda: _cancel(runtime, service_id, job.job_id),
            lambda: task_leases.complete(sessions, lanes[0], counts=PageCounts(1, 1)),
            lambda: task_leases.checkpoint(
                sessions,
                lanes[1],
                current_slot=lanes[1].current_slot,
                paging_state=b"p",
                counts=PageCounts(1, 1),
                lease_s=60,
            ),
            lambda: task_leases.complete(sessions, lanes[2], counts=PageCounts(1, 1)),
            lambda: task_leases.claim(sessions, owner="racer", lease_s=60.0, services=[service_id]),
        ]
    rng.shuffle(steps)
    go = threading.Barrier(len(steps))
    started = [in_thread(lambda step=step: (go.wait(30), step())) for step in steps]
    for thread, _ in started:
        thread.join(60)
        assert not thread.is_alive()
    errors = [e for _, errs in started for e in errs]
    # A lane that comes after the cancel or the requeue is told so; nothing else goes wrong.
    assert all(isinstance(e, (task_leases.JobCancelled, task_leases.LeaseLost)) for e in errors), errors
    state = _states(runtime, job.job_id)[0]
    _cancel(runtime, service_id, job.job_id)  # a requeued job's tasks must not be the next round's claims
    return state


def test_cancels_and_requeues_raced_against_workers_never_deadlock(runtime, service_id):
    """Many rounds; the cancelled job stays cancelled, the requeued one runs again."""
    rng = random.Random(7)
    key = topic_template(runtime, service_id)
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", 30_000 * 4 - 1)
    before = _deadlocks()
    for round_no in range(RACE_ROUNDS):
        requeue = round_no % 2 == 1
        assert _race_round(runtime, service_id, key, requeue, rng) == ("running" if requeue else "cancelled"), round_no
    assert _deadlocks() == before
