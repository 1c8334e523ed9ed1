"""A transient MySQL error in a fan-out task's transaction (docs/RELIABILITY.md "A passing outage never
fails a job"): a real InnoDB deadlock (1213) between a worker's transaction and another one on the
same job runs the worker's transaction again, and a commit whose answer was lost (2013) is not run
twice. Deterministic: the other transaction takes the job row's lock, waits until the worker's
statement is seen waiting for it (``information_schema.PROCESSLIST``, the same MySQL user), then asks
for a row the worker holds: InnoDB rolls back the lighter of the two, the worker's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pymysql
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from notee.core import metrics
from notee.core.errors import ProviderConfigError
from notee.core.vocabulary import PageCounts
from notee.store import task_leases
from notee.worker.lanes import Worker, WorkerOptions
from notee.worker.outage import OutageBackoff
from tests.support.fanout import seed_topic, topic_job, topic_template
from tests.support.lock_waits import in_thread, running
from tests.support.waiting import until, wait_for

_LOCK_JOB = "SELECT job_id FROM fanout_job WHERE job_id = :j FOR UPDATE"


def _retries(transaction: str, kind: str, outcome: str) -> float:
    return metrics.MYSQL_TRANSACTION_RETRIES.labels(transaction, kind, outcome)._value.get()


def _job_with_tasks(runtime, service, tasks: int):
    key = topic_template(runtime, service)
    runtime.statements.allocate_numbers(service, "TOPIC", "news", 30_000 * tasks - 1)
    job = topic_job(runtime, service, key, "all")
    assert job.task_count == tasks
    return job


def _claim(runtime, service):
    claim = task_leases.claim(runtime.sessions, owner="test", lease_s=60.0, services=[service])
    assert claim is not None
    return claim


def _task(runtime, job_id, task_no):
    with runtime.sessions() as s:
        return s.execute(
            text("SELECT state, sent, targeted, lease_token FROM fanout_task WHERE job_id = :j AND task_no = :n"),
            {"j": job_id, "n": task_no},
        ).one()


# the job row's locking read, as PROCESSLIST shows it while it waits
_JOB_LOCK_LIKE = "SELECT job_id FROM fanout_job WHERE job_id = %FOR UPDATE"


def _deadlock_with(runtime, job, claim, worker_step: Callable[[], Any], *, heavier: str) -> list[BaseException]:
    """Run ``worker_step`` (a task_leases write of ``claim``) into a deadlock: this transaction first runs
    ``heavier`` (its weight makes InnoDB pick the worker as the victim) and locks the job row; once the
    worker waits for it, it asks for the worker's task row. Returns the worker's errors."""
    with runtime.sessions() as rival:
        me = int(rival.execute(text("SELECT CONNECTION_ID()")).scalar_one())
        # Rows named one by one, each by its whole primary key: a range, or an IN list the optimizer
        # reads by a scan (fresh tables' statistics: seen on a freshly migrated database), would lock
        # the worker's task row too (REPEATABLE READ), and the worker would wait for it, not the job row.
        for n in range(job.task_count):
            if n != claim.task_no:
                rival.execute(text(heavier), {"j": job.job_id, "n": n})
        rival.execute(text(_LOCK_JOB), {"j": job.job_id})
        thread, errors = in_thread(worker_step)
        wait_for(
            lambda: not thread.is_alive() or running(runtime, _JOB_LOCK_LIKE, f"%{job.job_id}%", besides=me) > 0,
            timeout=60,
            what="the worker to wait for the job row",
        )
        assert thread.is_alive(), errors
        # The cycle closes here: InnoDB rolls the worker's transaction back (1213) and this one goes on.
        rival.execute(
            text("UPDATE fanout_task SET error = error WHERE job_id = :j AND task_no = :n"),
            {"j": job.job_id, "n": claim.task_no},
        )
        rival.rollback()
    thread.join(60)
    assert not thread.is_alive()
    return errors


def test_a_completion_deadlocked_by_another_transaction_runs_again_and_counts_its_page_once(runtime, service_id):
    job = _job_with_tasks(runtime, service_id, 6)
    claim = _claim(runtime, service_id)
    before = _retries("complete", "deadlock", "retried")
    errors = _deadlock_with(
        runtime,
        job,
        claim,
        lambda: task_leases.complete(runtime.sessions, claim, counts=PageCounts(targeted=7, sent=7)),
        heavier="UPDATE fanout_task SET error = 'rival' WHERE job_id = :j AND task_no = :n",
    )
    assert errors == []  # without the retry: OperationalError 1213, and the page re-sent whole
    task = _task(runtime, job.job_id, claim.task_no)
    assert (task.state, task.targeted, task.sent) == ("done", 7, 7)
    assert _retries("complete", "deadlock", "retried") == before + 1
    with runtime.sessions() as s:
        assert (
            s.execute(text("SELECT SUM(sent) FROM push_minute WHERE job_id = :j"), {"j": job.job_id}).scalar_one() == 7
        )


class _LosingTheFirstCommitAnswer:
    """The process's sessionmaker, except that the first transaction's COMMIT lands and its answer is
    then lost (MariaDB 2013), as when the connection drops between the server's commit and its reply."""

    def __init__(self, sessions: Any) -> None:
        self.sessions, self.lost = sessions, False

    def __call__(self) -> Any:
        return self.sessions()

    @contextmanager
    def begin(self) -> Iterator[Any]:
        with self.sessions.begin() as session:
            yield session
        if not self.lost:
            self.lost = True
            cause = pymysql.err.OperationalError(2013, "Lost connection to server during query")
            raise OperationalError("COMMIT", {}, cause)


def test_a_checkpoint_whose_commit_answer_was_lost_is_not_run_twice(runtime, service_id):
    job = _job_with_tasks(runtime, service_id, 2)
    claim = _claim(runtime, service_id)
    losing = _LosingTheFirstCommitAnswer(runtime.sessions)
    before = _retries("checkpoint", "lost_connection", "already_applied")
    task_leases.checkpoint(
        losing, claim, current_slot=claim.current_slot, paging_state=b"\x01page", counts=PageCounts(4, 4), lease_s=60
    )
    assert losing.lost
    task = _task(runtime, job.job_id, claim.task_no)
    assert (task.state, task.targeted, task.sent) == ("running", 4, 4)  # run twice: 8 and 8
    assert _retries("checkpoint", "lost_connection", "already_applied") == before + 1
    # A lost answer of a commit that did not land is run again (here: the lease renewal, idempotent).
    task_leases.extend_lease(_LosingTheFirstCommitAnswer(runtime.sessions), claim, lease_s=60)


class _DownOnce:
    """The process's sessionmaker, refusing one transaction (MySQL unreachable, 2003) once ``down`` is set."""

    def __init__(self, sessions: Any) -> None:
        self.sessions, self.down = sessions, False

    def __call__(self) -> Any:
        return self.sessions()

    def begin(self) -> Any:
        if self.down:
            self.down = False
            raise OperationalError("BEGIN", {}, pymysql.err.OperationalError(2003, "Can't connect to MySQL server"))
        return self.sessions.begin()


class _Runtime:
    """The runtime, with ``sessions`` replaced."""

    def __init__(self, runtime: Any, sessions: Any) -> None:
        self._runtime, self.sessions = runtime, sessions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


def test_a_job_failure_mysql_cannot_record_is_released_as_an_outage_not_the_end_of_the_worker(runtime, service_id):
    """A provider configuration error fails the job; when MySQL cannot take that write, the lane used
    to end on the error (and the worker process with it). The task is released instead, and the next
    claim meets the same error and fails the job."""
    key = topic_template(runtime, service_id)
    seed_topic(runtime, service_id, "news", key, "all", 3)
    job = topic_job(runtime, service_id, key, "all")
    sessions = _DownOnce(runtime.sessions)
    calls = 0

    async def send_page(service: str, job_id: str, messages: Any, dry_run: bool) -> PageCounts:
        nonlocal calls
        calls += 1
        if calls == 1:
            sessions.down = True  # the job's failure, next, meets MySQL down
        raise ProviderConfigError("the service's FCM credentials cannot be decrypted")

    async def go() -> Worker:
        worker = Worker(_Runtime(runtime, sessions), send_page, WorkerOptions(lanes=1, services=[service_id]))
        worker.backoff = OutageBackoff(base_s=0.01, cap_s=0.05)
        run = asyncio.create_task(worker.run())
        try:
            await until(
                lambda: run.done() or _job_state(runtime, job.job_id) == "failed", timeout=60, what="the job failed"
            )
            assert not run.done(), "the worker ended"
        finally:
            worker.stop.set()
            await run  # raised the lane's error before the fix
        return worker

    worker = asyncio.run(go())
    assert calls == 2 and worker.releases["outage"] == 1
    with runtime.sessions() as s:
        assert s.execute(text("SELECT error FROM fanout_job WHERE job_id = :j"), {"j": job.job_id}).scalar_one() == (
            "provider configuration: the service's FCM credentials cannot be decrypted"
        )


def _job_state(runtime, job_id: str) -> str:
    with runtime.sessions() as s:
        return str(s.execute(text("SELECT state FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar_one())
