"""The scheduler's clock, job deadlines and retention runs (issue 14, item 4).

* "Now" is the database server's clock: a replica whose own clock is two hours fast runs the
  database's current minute, sends nothing early and records no minute as skipped.
* A cycle job's deadline is its minute + grace: a task claimed after it is recorded ``expired``
  (with the count of what it did not send) instead of being sent late.
* Retention runs outside the minute tick, once per hour across replicas.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from notee.core import clock
from notee.core.vocabulary import CycleTarget, TopicTarget
from notee.scheduler.runner import retention_namespace
from notee.store import jobs_sql, ticks
from notee.usecases import publish
from notee.usecases.job_requests import JobRequest
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import emulator_runtime, run_worker_until_idle, seed_topic, topic_template
from tests.support.scheduler import job_ids_of, jobs_of, own_jobs, scheduler, tick_states, utc

SEOUL = "Asia/Seoul"
DAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


@pytest.fixture()
def tenant(store_tenant):
    """This module's name for the family's store-made tenant (tests/support/tenants.py)."""
    return store_tenant


def _bucket(minute_utc: datetime) -> CycleTarget:
    local = minute_utc.astimezone(ZoneInfo(SEOUL))
    return CycleTarget(SEOUL, DAYS[local.weekday()], local.hour, local.minute)


def test_a_replica_two_hours_fast_sends_nothing_early_and_suppresses_nothing(runtime, tenant, due, caplog):
    on_time = scheduler(runtime, grace_minutes=10)
    db_now = on_time.database_now()
    ahead = clock.floor_minute(db_now + timedelta(hours=2))
    # A reminder due two hours from now (database time), and one due at each of the next minutes.
    later = due.template(tenant, "later", [_bucket(ahead)])
    on_time.tick()  # the namespace's history: the on-time replica ran the current minute

    fast = scheduler(
        runtime,
        namespace=on_time.namespace,
        grace_minutes=10,
        host_clock=lambda: datetime.now(ahead.tzinfo) + timedelta(hours=2),
    )
    with caplog.at_level(logging.WARNING, logger="notee.scheduler.runner"):
        results = [fast.tick(), fast.tick()]
    assert any("this host's clock is +7200" in r.getMessage() for r in caplog.records), caplog.text

    after = fast.database_now()
    for result in results:
        assert result.skipped == 0
        for r in result.minutes:  # only minutes that have begun on the database clock
            assert r.minute_utc <= clock.floor_minute(after)
    states = tick_states(runtime, on_time.namespace)
    assert "skipped" not in states.values()
    assert max(states) <= clock.floor_minute(after)
    assert later not in {k for k, *_ in jobs_of(runtime, tenant)}  # nothing sent early

    # Nothing suppressed: when its minute comes, the on-time replica runs it.
    result = on_time.run_minute(ahead, now=ahead)
    # (Another test's cycle template may fall due in the same minute: count this tenant's jobs only.)
    assert result.state == "done" and result.jobs_created >= 1
    assert [k for k, *_ in jobs_of(runtime, tenant)] == [later]


def test_a_cycle_job_carries_its_minute_plus_grace_as_deadline(runtime, tenant, due):
    minute = utc(2026, 6, 22, 6, 30)
    key = due.template(tenant, "daily", [_bucket(minute)])
    sched = scheduler(runtime, grace_minutes=10)
    before = sched.database_now()
    result = sched.run_minute(minute, now=minute + timedelta(minutes=3))  # three minutes late
    after = sched.database_now()
    # This tenant's job: another template may be due in the same bucket (the due index is shared).
    [job_id] = own_jobs(result, job_ids_of(runtime, tenant))
    with runtime.sessions() as s:
        job = jobs_sql.get_job(s, job_id)
    assert job is not None and job.notification_key == key
    # deadline = minute + grace, i.e. 7 minutes after "now", on the database clock
    assert job.deadline is not None
    lo, hi = (before + timedelta(minutes=7)).replace(tzinfo=None), (after + timedelta(minutes=7)).replace(tzinfo=None)
    assert lo - timedelta(seconds=1) <= job.deadline <= hi + timedelta(seconds=1)


def test_a_job_claimed_after_its_deadline_expires_and_sends_nothing(runtime, service_id, emulator):
    """Two jobs to the same 50 devices, one past its deadline: the worker sends the timely one only
    (the emulator counts one delivery per device) and records the other expired."""
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "all", 50)
    with runtime.sessions.begin() as session:  # the caller owns the commit
        overdue = publish.create_job(
            runtime,
            session,
            JobRequest(
                service=service_id,
                notification_key=key,
                method="TOPIC",
                type_="news",
                target=TopicTarget("all"),
                idempotency_key=None,
                variables={"name": "late"},
                deadline_in_s=-60,
            ),
        )
        timely = publish.create_job(
            runtime,
            session,
            JobRequest(
                service=service_id,
                notification_key=key,
                method="TOPIC",
                type_="news",
                target=TopicTarget("all"),
                idempotency_key=None,
                variables={"name": "on time"},
                deadline_in_s=600,
            ),
        )
    rt = emulator_runtime()
    try:
        worker = run_worker_until_idle(rt, [service_id])
    finally:
        rt.close()
    assert worker.tasks_done == timely.task_count  # only the timely job's tasks ran
    assert set(deliveries_per_token(emulator, tokens, api="fcm").values()) == {1}
    with runtime.sessions() as s:
        late_job, late_progress = jobs_sql.get_job(s, overdue.job_id), jobs_sql.progress(s, overdue.job_id)
        ok_job, ok_progress = jobs_sql.get_job(s, timely.job_id), jobs_sql.progress(s, timely.job_id)
        late_tasks = jobs_sql.tasks(s, overdue.job_id)
    assert ok_job.state == "done" and ok_progress.sent == len(tokens)
    assert late_job.state == "expired" and late_job.started_at is None
    assert late_job.error.startswith(
        f"{overdue.task_count} of {overdue.task_count} task(s) expired: not finished by its deadline"
    )
    assert {t.state for t in late_tasks} == {"expired"}
    assert (late_progress.sent, late_progress.targeted, late_progress.tasks_done) == (0, 0, overdue.task_count)


def test_the_minute_tick_does_not_prune(runtime):
    sched = scheduler(runtime)
    top_of_hour = utc(2026, 6, 23, 0, 0)
    old = top_of_hour - timedelta(days=runtime.settings.retention_days, minutes=5)
    with runtime.sessions.begin() as s:
        ticks.record_skipped(s, namespace=sched.namespace, minutes=[old], owner="t", before=top_of_hour)
    sched.tick(now=top_of_hour)
    assert old in tick_states(runtime, sched.namespace)


def test_retention_runs_once_per_hour_across_replicas(runtime):
    first = scheduler(runtime)
    second = scheduler(runtime, namespace=first.namespace)
    now = utc(2026, 6, 24, 3, 7, 30)
    old = [clock.floor_minute(now) - timedelta(days=runtime.settings.retention_days, minutes=i) for i in range(1, 4)]
    with runtime.sessions.begin() as s:
        ticks.record_skipped(s, namespace=first.namespace, minutes=old, owner="t", before=now)
    counts = first.prune_hourly(now)
    assert counts is not None and counts["ticks"] >= 3
    assert second.prune_hourly(now + timedelta(minutes=1)) is None  # same hour: the other replica won it
    assert not set(old) & set(tick_states(runtime, first.namespace))
    with runtime.sessions() as s:
        row = ticks.get(s, namespace=retention_namespace(first.namespace), minute_utc=utc(2026, 6, 24, 3, 0))
    assert (row.state, row.owner, row.jobs) == ("done", first.owner, sum(counts.values()))
    assert second.prune_hourly(now + timedelta(hours=1)) is not None  # the next hour is claimed afresh


def test_skew_check_names_the_offset(runtime, caplog):
    sched = scheduler(runtime, host_clock=lambda: datetime.now(utc(2026, 1, 1).tzinfo) - timedelta(seconds=30))
    with caplog.at_level(logging.WARNING, logger="notee.scheduler.runner"):
        skew = sched.check_skew(sched.database_now())
    assert -35 < skew.total_seconds() < -25
    assert "clock is -3" in caplog.text
    with runtime.sessions() as s:  # and the database clock really is what the scheduler reads
        db = s.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    assert abs((sched.database_now().replace(tzinfo=None) - db).total_seconds()) < 5
