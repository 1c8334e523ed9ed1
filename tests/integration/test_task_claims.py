"""The fan-out task claim (``task_leases.claim``, in the order of ``claim_order.next_claimable``) on the
real MariaDB, when its fair candidates are taken. A locking read locks each row it reads for as long
as InnoDB evaluates it; a claim meeting such a row skips it (SKIP LOCKED does not wait), and one that
skipped its last candidate came back empty with tasks queued: its lane idled a poll. The claim's
fallback (when the 8 fair candidates were all taken, and on every idle poll) was such a locking read,
in ``ix_task_claim (state, lease_until)`` order through every tenant's claimable tasks, even for a
worker serving some tenants. Now a plain read ranks the candidates and only the task taken is
locked, by its key, as the import chunk claim does (tests/integration/test_import_claims.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import text

from notee.store import claim_order, jobs_sql, task_leases
from notee.store.mysql import make_engine, make_sessionmaker
from notee.store.services_sql import insert_service
from notee.usecases import migrate
from tests.support.fanout import topic_job_row
from tests.support.lock_waits import race_claims
from tests.support.registry import make_service
from tests.support.tenants import new_service_id

_MADE: list[str] = []


@pytest.fixture(autouse=True)
def _forget_jobs(runtime) -> Iterator[None]:
    """The jobs a test made go with it: no claim of another test is to take what is left."""
    yield
    with runtime.sessions.begin() as session:
        while _MADE:
            session.execute(text("DELETE FROM fanout_job WHERE job_id = :j"), {"j": _MADE.pop()})


def _job(runtime: Any, service: str, tasks: int, *, older_s: int = 0, done: int = 0) -> str:
    """A queued topic job of ``tasks`` one-slot tasks; ``older_s``: claimable that long already (its
    tasks come first in ``ix_task_claim`` order); ``done``: its last tasks are done already."""
    job = topic_job_row(
        service,
        [(n, n) for n in range(tasks)],
        {"title": "Hi", "body": "claims", "data": {}, "ttl_seconds": None, "priority": "high"},
    )
    job_id = job.job_id
    _MADE.append(job_id)
    with runtime.sessions.begin() as session:
        jobs_sql.insert_job(session, job)
        if older_s:
            session.execute(
                text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) - INTERVAL :s SECOND WHERE job_id = :j"),
                {"s": older_s, "j": job_id},
            )
        if done:
            session.execute(
                text("UPDATE fanout_task SET state = 'done' WHERE job_id = :j AND task_no >= :n"),
                {"j": job_id, "n": tasks - done},
            )
    return job_id


OWN = 60  # tasks of S's open job
OTHERS = 1000  # claimable tasks of another tenant, older


def _rows_read(session) -> int:
    """The rows this connection's statements have read so far (its handler counters)."""
    rows = session.execute(text("SHOW SESSION STATUS LIKE 'Handler_read%'")).all()
    return sum(int(value) for name, value in rows if name != "Handler_read_key")


def _hold_fair_candidates(holder, service: str) -> list[tuple[str, int]]:
    """Lock (as claims in progress do) every task the fair claim of ``service`` would try first."""
    keys = claim_order._fair_candidates(holder, [service])
    for job_id, task_no in keys:
        holder.execute(
            text("SELECT 1 FROM fanout_task WHERE job_id = :j AND task_no = :n FOR UPDATE"), {"j": job_id, "n": task_no}
        )
    return keys


def test_a_claim_past_its_taken_candidates_reads_none_of_another_tenants_tasks(runtime, settings):
    """S's 8 fair candidates are held by claims in progress; S's claim takes its 9th task and reads
    (and so, for a locking read, locks for a moment) none of another tenant's 1,000 claimable tasks,
    older ones (first in ``ix_task_claim`` order). Before: the fallback read them all, locking each."""
    other, s = new_service_id(), new_service_id()
    for service in (other, s):
        make_service(runtime, service)
    _job(runtime, other, OTHERS, older_s=3600)
    # S's job has done tasks too: the old fallback then read in ix_task_claim order (the plan the
    # optimizer picked for its LIMIT 1), through the other tenant's tasks.
    s_job = _job(runtime, s, OWN, done=OWN - claim_order.FAIR_CANDIDATES - 2)
    one = make_engine(settings, pool_size=1)  # one connection: the claim's counters are read on it
    try:
        sessions = make_sessionmaker(one)
        with runtime.sessions() as holder:
            held = _hold_fair_candidates(holder, s)
            assert len(held) == claim_order.FAIR_CANDIDATES
            with sessions() as probe:
                before = _rows_read(probe)
            claim = task_leases.claim(sessions, owner="lane-s", lease_s=60, services=[s])
            with sessions() as probe:
                read = _rows_read(probe) - before - 1  # the first probe's own row
            holder.rollback()
    finally:
        one.dispose()
    assert claim is not None and claim.job_id == s_job and (s_job, claim.task_no) not in held
    # S's own tasks (all of its open job's, for each read), live leases, the claim's own rows; the
    # other tenant's: none
    assert read < 3 * OWN, read


def test_an_idle_claim_reads_none_of_another_tenants_tasks(runtime, settings):
    """Every task of S's open job is held by a claim in progress: S's claim comes back empty (nothing
    else is claimable for it) having read none of another tenant's 1,000 claimable tasks. Before: every
    such idle poll ran the fallback's locking read through them."""
    other, s = new_service_id(), new_service_id()
    for service in (other, s):
        make_service(runtime, service)
    _job(runtime, other, OTHERS, older_s=3600)
    _job(runtime, s, OWN, done=OWN - 2)
    one = make_engine(settings, pool_size=1)
    try:
        sessions = make_sessionmaker(one)
        with runtime.sessions() as holder:
            assert len(_hold_fair_candidates(holder, s)) == 2
            with sessions() as probe:
                before = _rows_read(probe)
            claim = task_leases.claim(sessions, owner="lane-s", lease_s=60, services=[s])
            with sessions() as probe:
                read = _rows_read(probe) - before - 1
            holder.rollback()
    finally:
        one.dispose()
    assert claim is None
    assert read < 3 * OWN, read


LANES = 3  # per tenant
TASKS = 40  # per tenant


def test_claims_racing_in_many_lanes_of_two_tenants_take_every_task_and_none_comes_back_empty_early(runtime):
    """Three lanes of each of two tenants claim at once until their queue is empty: each task is taken
    exactly once, and no lane is told "nothing" while tasks nobody is taking are queued for it."""
    services = [new_service_id(), new_service_id()]
    jobs = {}
    for service in services:
        make_service(runtime, service)
        jobs[service] = _job(runtime, service, TASKS)

    def claim(service: str) -> tuple[str, int] | None:
        taken = task_leases.claim(runtime.sessions, owner="racer", lease_s=600, services=[service])
        return None if taken is None else (taken.job_id, taken.task_no)

    def queued(service: str) -> int:
        with runtime.sessions() as session:
            return int(
                session.execute(
                    text("SELECT COUNT(*) FROM fanout_task WHERE job_id = :j AND state = 'queued'"),
                    {"j": jobs[service]},
                ).scalar_one()
            )

    claimed, early = race_claims(services, LANES, claim, queued)
    assert sorted(claimed) == sorted((jobs[service], n) for service in services for n in range(TASKS))
    # A lane is told "nothing" only when every task of its tenant still queued is one its other lanes
    # are claiming (one each): never while tasks wait for nobody.
    assert all(queued < LANES for counts in early.values() for queued in counts), early


def test_a_claim_serving_every_tenant_takes_open_work_and_closes_a_dead_workers_task_of_a_cancelled_job(
    fresh_stores,
):
    """A worker serving every tenant (no ``--service``), in a database of this test's own (it would
    take other tests' tasks): its claim takes the open job's tasks in the fair order, then closes the
    task a dead worker left running in a job cancelled since (the fair order reads open jobs only;
    the closing read is the one that reaches it), and then finds nothing."""
    migrate.migrate_mysql(engine := make_engine(fresh_stores, pool_size=2))
    try:
        own = SimpleNamespace(sessions=make_sessionmaker(engine))
        with own.sessions.begin() as session:
            insert_service(session, service="SOLO", display_name="Solo", timezone="UTC", now=datetime.now(UTC))
        cancelled, open_job = _job(own, "SOLO", 1, older_s=60), _job(own, "SOLO", 2)
        dead = task_leases.claim(own.sessions, owner="dead-worker", lease_s=60)
        assert dead is not None and dead.job_id == cancelled  # the older job first
        with own.sessions.begin() as session:
            assert jobs_sql.cancel_job(session, "SOLO", cancelled)
            session.execute(  # the worker died: its lease ran out
                text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE job_id = :j"),
                {"j": cancelled},
            )
        taken = [task_leases.claim(own.sessions, owner="lane", lease_s=60) for _ in range(3)]
        assert [(c.job_id, c.task_no) for c in taken if c is not None] == [(open_job, 0), (open_job, 1)]
        assert taken[2] is None
        with own.sessions() as session:
            assert [t.state for t in jobs_sql.tasks(session, cancelled)] == ["cancelled"]
    finally:
        engine.dispose()
