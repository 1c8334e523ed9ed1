"""Fan-out test helpers: topic subscribers seeded at scale straight into Cassandra, TOPIC publish
jobs, in-process workers, the job's rows and progress, and a task's lease on the database clock."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from cassandra.concurrent import execute_concurrent
from cassandra.query import BatchStatement, BatchType
from sqlalchemy import text

from notee.core.settings import Settings
from notee.core.vocabulary import BLOCK_SIZE, SLOT_SIZE, Progress, TopicTarget
from notee.store import jobs_sql, task_leases
from notee.store.runtime import Runtime
from notee.usecases import jobs, publish
from notee.usecases.job_requests import JobRequest
from notee.usecases.sender import DeliverySender
from notee.worker.lanes import Worker, WorkerOptions
from tests.support import registry
from tests.support.processes import NoteeProcess
from tests.support.waiting import wait_for


def seed_topic(
    runtime: Runtime,
    service: str,
    type_: str,
    key: str,
    topic: str,
    n: int,
    *,
    os: str = "AOS",
    prefix: str | None = None,
) -> list[str]:
    """``n`` subscribers of (template key, topic): numbers come from the (service, TOPIC, type) ``no``
    counter exactly as subscribe allocates them; rows land in slots no // 30000."""
    st = runtime.statements
    top = st.allocate_numbers(service, "TOPIC", type_, n)
    first = top - n + 1
    prefix = prefix or f"{service}-{topic}-"
    tokens = [f"{prefix}{i:07d}" for i in range(n)]
    now = int(time.time() * 1000)
    rows = [  # zone '': users without one, as subscribe stores them (these users have no MySQL row)
        ((first + i) // SLOT_SIZE, key, topic, first + i, tok, os, f"user-{i}", now, "") for i, tok in enumerate(tokens)
    ]
    # Single-partition UNLOGGED batches of 100 prepared inserts (one mutation each server-side):
    # rows arrive in number order, so a batch never spans two slots.
    batches = []
    for i in range(0, len(rows), 100):
        chunk = rows[i : i + 100]
        for slot in sorted({r[0] for r in chunk}):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for r in chunk:
                if r[0] == slot:
                    batch.add(st.topic_insert, r)
            batches.append((batch, ()))
    # Their target_slots rows, as subscribe writes them (a job of a template created through the
    # registry walks only the occupied slots).
    occupied = sorted({(r[0], r[3] // BLOCK_SIZE) for r in rows})
    batches += [(st.occupancy_insert, (key, topic, slot, block)) for slot, block in occupied]
    for ok, result in execute_concurrent(runtime.cql, batches, concurrency=32, raise_on_first_error=False):
        assert ok, result
    return tokens


def topic_template(runtime: Runtime, service: str, type_: str = "news", title: str = "Hi {{name}}") -> str:
    """The service (with FCM credentials, so its jobs can send) and a TOPIC template; its key."""
    registry.make_service(runtime, service, fcm=True)
    return registry.make_template(runtime, service, "TOPIC", type_, title=title)


def topic_job(
    runtime: Runtime,
    service: str,
    key: str,
    topic: str,
    *,
    type_: str = "news",
    idempotency_key: str | None = None,
    variables: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    send_at: datetime | None = None,
) -> jobs_sql.JobRow:
    with runtime.sessions.begin() as session:  # the caller owns the commit
        return publish.create_job(
            runtime,
            session,
            JobRequest(
                service=service,
                notification_key=key,
                method="TOPIC",
                type_=type_,
                target=TopicTarget(topic),
                idempotency_key=idempotency_key,
                variables=variables if variables is not None else {"name": "there"},
                overrides=overrides,
                send_at=send_at,
            ),
        )


def count_rows(runtime: Runtime, service: str) -> tuple[int, int]:
    """(jobs, tasks) of a tenant."""
    with runtime.engine.connect() as conn:
        jobs_n = conn.execute(text("SELECT COUNT(*) FROM fanout_job WHERE service = :s"), {"s": service}).scalar()
        tasks_n = conn.execute(
            text("SELECT COUNT(*) FROM fanout_task t JOIN fanout_job j USING (job_id) WHERE j.service = :s"),
            {"s": service},
        ).scalar()
    return int(jobs_n or 0), int(tasks_n or 0)


def run_worker_until_idle(
    runtime: Runtime, services: list[str], *, lanes: int = 2, fetch_size: int | None = None
) -> Worker:
    """Run an in-process worker with the production sender until the services' tasks are all done."""

    async def go() -> Worker:
        sender = DeliverySender(runtime)
        worker = Worker(runtime, sender, WorkerOptions(lanes=lanes, services=services, fetch_size=fetch_size))
        try:
            await worker.run(until_idle=True)
        finally:
            await sender.close()
        return worker

    return asyncio.run(go())


def emulator_runtime() -> Runtime:
    """A Runtime whose settings point at the emulator (the emulator fixture exported its URL/CA)."""
    return Runtime(Settings())


def job_progress(runtime: Runtime, job_id: str) -> tuple[jobs_sql.JobRow, Progress]:
    with runtime.sessions() as s:
        job = jobs_sql.get_job(s, job_id)
        assert job is not None, f"job {job_id} not found"
        return job, jobs_sql.progress(s, job_id)


def wait_job(
    runtime: Runtime,
    service: str,
    job_id: str,
    timeout: float,
    workers: list[NoteeProcess] | None = None,
) -> tuple[jobs_sql.JobRow, Progress]:
    """Poll the job until it is done or failed; returns (job, progress). Fails on timeout or when
    every worker died."""
    deadline = time.monotonic() + timeout
    while True:
        with runtime.sessions() as session:
            job, progress = jobs.job_status(session, service, job_id)
        if job.state in ("done", "failed"):
            return job, progress
        if workers and not any(w.alive() for w in workers):
            raise AssertionError("every worker exited:\n" + "\n".join(w.tail() for w in workers))
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {job.state} after {timeout} s: {progress}")
        time.sleep(0.1)


def lease_left(runtime: Runtime, claim: task_leases.Claim) -> timedelta:
    """How long the task's lease still runs, on the database clock (negative once expired)."""
    with runtime.sessions() as s:
        until, now = s.execute(
            text("SELECT lease_until, UTC_TIMESTAMP(6) FROM fanout_task WHERE job_id = :j AND task_no = :n"),
            {"j": claim.job_id, "n": claim.task_no},
        ).one()
    return until - now  # type: ignore[no-any-return]


def lease_until(runtime: Runtime, claim: task_leases.Claim) -> datetime:
    with runtime.sessions() as s:
        return s.execute(  # type: ignore[no-any-return]
            text("SELECT lease_until FROM fanout_task WHERE job_id = :j AND task_no = :n"),
            {"j": claim.job_id, "n": claim.task_no},
        ).scalar_one()


def wait_lease_expired(runtime: Runtime, claim: task_leases.Claim, timeout: float = 60) -> None:
    """Until the task's lease has run out on the database clock (the clock the claim reads)."""
    wait_for(lambda: lease_left(runtime, claim) <= timedelta(0), timeout=timeout, what="the lease to run out")


def topic_job_row(
    service: str,
    slots: list[tuple[int, int]],
    payload: dict[str, Any],
    *,
    topic: str = "t",
    type_: str = "news",
    key: str | None = None,
) -> jobs_sql.NewJob:
    """A topic job's row with exactly these slot-range tasks (as create_job writes them), for tests
    that write jobs straight to MySQL; a new job id and notification key (``key``: this one)."""
    return jobs_sql.NewJob(
        job_id=str(uuid.uuid4()),
        service=service,
        notification_key=key or str(uuid.uuid4()),
        method="TOPIC",
        type_=type_,
        target_kind="TOPIC",
        target={"topic": topic},
        idempotency_key=None,
        request_hash="0" * 64,
        variables=None,
        overrides=None,
        payload=payload,
        slot_ranges=slots,
    )


def finished_topic_job(runtime: Runtime, service: str, devices: int, type_: str = "news", topic: str = "all") -> str:
    """A topic job already done with ``devices`` targeted and sent (its rows written straight to
    MySQL: no push is sent), for tests of what comes after a push (receipts, figures); its id."""
    job = topic_job_row(service, [(0, 0)], {"title": "t", "body": "b"}, topic=topic, type_=type_)
    job_id = job.job_id
    with runtime.sessions.begin() as session:
        jobs_sql.insert_job(session, job)
        session.execute(
            text("UPDATE fanout_task SET state = 'done', targeted = :n, sent = :n WHERE job_id = :j"),
            {"n": devices, "j": job_id},
        )
        session.execute(
            text("UPDATE fanout_job SET state = 'done', finished_at = UTC_TIMESTAMP(6) WHERE job_id = :j"),
            {"j": job_id},
        )
    return job_id
