"""The worker in-process on the real stores and the emulator: a multi-slot task resumes from its
checkpoint, small slots go out together, the fan-out path makes no query per device, the lease
keeper keeps a slow task's lease."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import event

from notee.core.vocabulary import SLOT_SIZE, PageCounts
from notee.store import jobs_sql, task_leases
from notee.worker.lanes import Worker, WorkerOptions
from notee.worker.task import TaskRun
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import (
    emulator_runtime,
    job_progress,
    lease_until,
    run_worker_until_idle,
    seed_topic,
    topic_job,
    topic_template,
    wait_lease_expired,
)
from tests.support.waiting import until


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


def first_page_then_stop(rt, service_id, *, fetch_size):
    """A one-lane worker with the production sender, stopped (as by SIGTERM) while its first page is
    being sent; the sizes of the pages it sent."""
    from notee.usecases.sender import DeliverySender

    sent: list[int] = []

    async def go():
        sender = DeliverySender(rt)
        worker = Worker(rt, sender, WorkerOptions(lanes=1, services=[service_id], fetch_size=fetch_size))

        async def send_then_stop(service, job_id, messages, dry_run):
            sent.append(len(messages))
            worker.stop.set()
            return await sender(service, job_id, messages, dry_run)

        worker.send_page = send_then_stop
        await worker.run()
        await sender.close()

    asyncio.run(go())
    return sent


def test_a_multi_slot_task_resumes_from_its_checkpoint(runtime, service_id, emulator, monkeypatch):
    """A task covering slots 0..1, interrupted after its first page: the next claim sends the rest
    and nothing twice (the checkpoint carries slot + paging state)."""
    from notee.usecases import planning

    key = topic_template(runtime, service_id)
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", 29_900)  # numbers nobody holds
    tokens = seed_topic(runtime, service_id, "news", key, "r", 300)  # numbers 29,901..30,200: slots 0 and 1
    monkeypatch.setattr(planning, "SLOTS_PER_TASK", 2)
    job = topic_job(runtime, service_id, key, "r")
    assert job.task_count == 1
    rt = emulator_runtime()
    try:
        first_page_then_stop(rt, service_id, fetch_size=60)
        with rt.sessions() as s:
            (task,) = jobs_sql.tasks(s, job.job_id)
        assert task.state == "queued" and task.sent == 60 and task.current_slot == 0
        run_worker_until_idle(rt, [service_id], lanes=1, fetch_size=60)
    finally:
        rt.close()
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done" and progress.sent == 300
    assert set(deliveries_per_token(emulator, tokens).values()) == {1}


def test_small_slots_go_out_together_within_a_page_and_resume_exactly(runtime, service_id, emulator, monkeypatch):
    """Slots 0..3 with 25 rows each and pages of 60: the reader hands slots 0 and 1 over as one page
    (50 rows), then 2 and 3: two sends and two checkpoints, not four. Stopped after the first, the
    next claim resumes at slot 2 and sends nothing twice."""
    from notee.usecases import planning

    key = topic_template(runtime, service_id)
    tokens: list[str] = []
    counter = 0
    for slot in range(4):  # 25 subscribers at the start of each slot
        if slot * SLOT_SIZE > counter:
            counter = runtime.statements.allocate_numbers(service_id, "TOPIC", "news", slot * SLOT_SIZE - counter)
        tokens += seed_topic(runtime, service_id, "news", key, "r", 25, prefix=f"{service_id}-s{slot}-")
        counter += 25
    monkeypatch.setattr(planning, "SLOTS_PER_TASK", 4)
    job = topic_job(runtime, service_id, key, "r")
    assert job.task_count == 1
    rt = emulator_runtime()
    try:
        pages_sent = first_page_then_stop(rt, service_id, fetch_size=60)
        with rt.sessions() as s:
            (task,) = jobs_sql.tasks(s, job.job_id)
        assert pages_sent == [50]
        assert (task.state, task.sent, task.current_slot, task.pages) == ("queued", 50, 2, 1)
        run_worker_until_idle(rt, [service_id], lanes=1, fetch_size=60)
        with rt.sessions() as s:
            (task,) = jobs_sql.tasks(s, job.job_id)
    finally:
        rt.close()
    assert (task.state, task.pages) == ("done", 2)
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done" and progress.sent == 100
    assert set(deliveries_per_token(emulator, tokens).values()) == {1}


def test_idle_lanes_take_turns_and_a_claim_wakes_them(runtime, monkeypatch):
    """Three idle lanes (2 + the spare) asking at once are given turns IDLE_POLL_S / 3 apart, not one
    each IDLE_POLL_S in step; a lane asking later queues after the last turn; a claim by another
    lane ends every idle lane's pause."""
    from notee.worker import lanes as worker_module

    monkeypatch.setattr(worker_module, "IDLE_POLL_S", 30.0)

    async def go():
        w = Worker(runtime, None, WorkerOptions(lanes=2, spare_lane=True))  # type: ignore[arg-type]
        assert [w._next_idle_turn(100.0) for _ in range(3)] == [110.0, 120.0, 130.0]
        assert w._next_idle_turn(125.0) == 140.0  # after the turns already given
        assert w._next_idle_turn(200.0) == 210.0  # idle long enough: from now
        waits = [asyncio.create_task(w._idle_wait()) for _ in range(3)]
        done, _ = await asyncio.wait(waits, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
        assert not done  # none ends within 50 ms: each waits for its turn (10 s and more away)
        w._claimed.set()
        await asyncio.wait_for(asyncio.gather(*waits), 5)

    asyncio.run(go())


def test_the_lease_keeper_renews_a_slow_tasks_lease(runtime, service_id):
    key = topic_template(runtime, service_id)
    topic_job(runtime, service_id, key, "k")
    lease_s = 0.6
    claim = task_leases.claim(runtime.sessions, owner="slow", lease_s=lease_s, services=[service_id])
    first_until = lease_until(runtime, claim)
    worker = Worker(runtime, send_page=None, options=WorkerOptions(lease_s=lease_s))

    async def hold():
        task = TaskRun(worker, claim)
        keeper = asyncio.create_task(task.keep_lease())
        # renewed until the lease ends more than 3 leases after the first one would have
        kept = timedelta(seconds=3 * lease_s)
        await until(
            lambda: task.lost.is_set() or lease_until(runtime, claim) > first_until + kept,
            timeout=60,
            what="the lease renewed past three lease lengths",
        )
        keeper.cancel()
        return task.lost.is_set()

    assert asyncio.run(hold()) is False  # kept for > 3 leases
    assert task_leases.claim(runtime.sessions, owner="other", lease_s=30, services=[service_id]) is None
    wait_lease_expired(runtime, claim)  # keeper gone: the lease runs out
    other = task_leases.claim(runtime.sessions, owner="other", lease_s=30, services=[service_id])
    assert other is not None and other.attempts == 2
    task_leases.complete(runtime.sessions, other, counts=PageCounts())
