"""The worker in-process on the real stores and the emulator: a multi-slot task resumes from its
checkpoint, the fan-out path makes no query per device, the lease keeper keeps a slow task's lease."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import event

from notee.fanout.worker import Worker
from notee.store import job_queue as store
from notee.vocabulary import PageCounts
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import (
    emulator_runtime,
    job_progress,
    run_worker_until_idle,
    seed_topic,
    topic_job,
    topic_template,
)


def test_no_query_per_device_one_page_read_and_one_checkpoint_per_page(runtime, service_id, emulator):
    n, fetch = 2_500, 250
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "q", n)
    job = topic_job(runtime, service_id, key, "q")
    rt = emulator_runtime()
    mysql_statements, cql_requests = [], []
    event.listen(rt.engine, "before_cursor_execute", lambda *a, **k: mysql_statements.append(a[2]))
    real_execute = rt.cql.execute
    rt.cql.execute = lambda *a, **k: (cql_requests.append(a[0]), real_execute(*a, **k))[1]
    try:
        run_worker_until_idle(rt, [service_id], lanes=1, fetch_size=fetch)
    finally:
        rt.cql.execute = real_execute
        rt.close()
    pages = n // fetch + 1  # the last page of a slot may be empty
    checkpoints = [s for s in mysql_statements if s.startswith("UPDATE fanout_task SET current_slot")]
    assert len(checkpoints) <= pages
    assert len(mysql_statements) < 12 * pages, f"{len(mysql_statements)} MySQL statements for {n} devices"
    assert len(cql_requests) <= pages + 2, f"{len(cql_requests)} Cassandra requests for {n} devices"
    assert set(deliveries_per_token(emulator, tokens).values()) == {1}
    assert job_progress(runtime, job.job_id)[1].sent == n


def test_a_multi_slot_task_resumes_from_its_checkpoint(runtime, service_id, emulator, monkeypatch):
    """A task covering slots 0..1, interrupted after its first page: the next claim sends the rest
    and nothing twice (the checkpoint carries slot + paging state)."""
    from notee.fanout import jobs

    key = topic_template(runtime, service_id)
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", 29_900)  # numbers nobody holds
    tokens = seed_topic(runtime, service_id, "news", key, "r", 300)  # numbers 29,901..30,200: slots 0 and 1
    monkeypatch.setattr(jobs, "SLOTS_PER_TASK", 2)
    job = topic_job(runtime, service_id, key, "r")
    assert job.task_count == 1
    rt = emulator_runtime()
    try:

        async def first_page_then_stop():
            from notee.delivery import DeliverySender

            sender = DeliverySender(rt)
            worker = Worker(rt, sender, lanes=1, services=[service_id], fetch_size=60)

            async def send_then_stop(service, job_id, messages, dry_run):
                worker.stop.set()  # SIGTERM arrives while the first page is being sent
                return await sender(service, job_id, messages, dry_run)

            worker.send_page = send_then_stop
            await worker.run()
            await sender.close()

        asyncio.run(first_page_then_stop())
        with rt.sessions() as s:
            (task,) = store.tasks(s, job.job_id)
        assert task.state == "queued" and task.sent == 60 and task.current_slot == 0
        run_worker_until_idle(rt, [service_id], lanes=1, fetch_size=60)
    finally:
        rt.close()
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done" and progress.sent == 300
    assert set(deliveries_per_token(emulator, tokens).values()) == {1}


def test_the_lease_keeper_renews_a_slow_tasks_lease(runtime, service_id):
    key = topic_template(runtime, service_id)
    topic_job(runtime, service_id, key, "k")
    lease_s = 0.6
    claim = store.claim(runtime.sessions, owner="slow", lease_s=lease_s, services=[service_id])
    worker = Worker(runtime, send_page=None, lease_s=lease_s)

    async def hold(seconds):
        lost = asyncio.Event()
        keeper = asyncio.create_task(worker._keep_lease(claim, lost))
        await asyncio.sleep(seconds)
        keeper.cancel()
        return lost.is_set()

    assert asyncio.run(hold(2.0)) is False  # kept for > 3 leases
    assert store.claim(runtime.sessions, owner="other", lease_s=30, services=[service_id]) is None
    time.sleep(lease_s + 0.3)  # keeper gone: the lease runs out
    other = store.claim(runtime.sessions, owner="other", lease_s=30, services=[service_id])
    assert other is not None and other.attempts == 2
    store.complete(runtime.sessions, other, counts=PageCounts())
