"""The scheduler against the real stores: a due bucket becomes exactly one fan-out job, at local
wall-clock time, across DST changes; missed minutes within grace run late once, older ones are
skipped; a restarted scheduler loses nothing. Minutes are chosen by the test (injected clock)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from notee.core import clock
from notee.core.vocabulary import CycleTarget
from notee.store import ticks
from notee.usecases import retention
from tests.support.scheduler import job_ids_of, jobs_of, own_jobs, scheduler, tick_states, utc

NY = "America/New_York"
SEOUL = "Asia/Seoul"


@pytest.fixture()
def tenant(store_tenant):
    """This module's name for the family's store-made tenant (tests/support/tenants.py)."""
    return store_tenant


def run(sched, start, end):
    return [sched.run_minute(m, now=m) for m in clock.minutes(start, end)]


def fired(runtime, service):
    """{(key, 'DAYHHMM', utc-minute-iso)} parsed from the idempotency keys of a tenant's jobs."""
    out = set()
    for key, target, idem in jobs_of(runtime, service):
        _, k, tz, bucket, minute = idem.split(":", 4)
        assert k == key and tz == target["timezone"]
        assert bucket == f"{target['day']}{target['hour']:02d}{target['minute']:02d}"
        out.add((key, bucket, minute))
    return out


def test_seoul_bucket_fires_once_at_its_local_time(runtime, tenant, due):
    key = due.template(tenant, "daily", [CycleTarget(SEOUL, "WED", 4, 17)])
    sched = scheduler(runtime)
    # WED 04:17 KST = TUE 19:17 UTC.
    results = run(sched, utc(2026, 6, 9, 19, 14), utc(2026, 6, 9, 19, 20))
    assert fired(runtime, tenant) == {(key, "WED0417", "2026-06-09T19:17Z")}
    mine = job_ids_of(runtime, tenant)  # the due index is shared: other templates may be due in these minutes
    assert [len(own_jobs(r, mine)) for r in results] == [0, 0, 0, 1, 0, 0]
    [(_, target, _)] = jobs_of(runtime, tenant)
    assert target == {"timezone": SEOUL, "day": "WED", "hour": 4, "minute": 17}
    # Every minute is recorded done, exactly once.
    assert set(tick_states(runtime, sched.namespace).values()) == {"done"}
    assert len(tick_states(runtime, sched.namespace)) == 6


def test_new_york_spring_forward(runtime, tenant, due):
    # 2026-03-08: 01:59 EST (06:59Z) is followed by 03:00 EDT (07:00Z); 02:xx does not exist.
    before = due.template(tenant, "before", [CycleTarget(NY, "SUN", 1, 30)])
    in_gap = due.template(tenant, "in_gap", [CycleTarget(NY, "SUN", 2, 0), CycleTarget(NY, "SUN", 2, 30)])
    after = due.template(tenant, "after", [CycleTarget(NY, "SUN", 3, 0), CycleTarget(NY, "SUN", 3, 1)])
    run(scheduler(runtime), utc(2026, 3, 8, 6, 0), utc(2026, 3, 8, 7, 30))
    assert fired(runtime, tenant) == {
        (before, "SUN0130", "2026-03-08T06:30Z"),
        (in_gap, "SUN0200", "2026-03-08T07:00Z"),  # the first valid minute after the gap
        (in_gap, "SUN0230", "2026-03-08T07:00Z"),
        (after, "SUN0300", "2026-03-08T07:00Z"),
        (after, "SUN0301", "2026-03-08T07:01Z"),
    }


def test_new_york_fall_back(runtime, tenant, due):
    # 2026-11-01: 01:00-01:59 happen in EDT (05:xxZ) and again in EST (06:xxZ).
    repeated = due.template(tenant, "repeated", [CycleTarget(NY, "SUN", 1, 30)])
    after = due.template(tenant, "after", [CycleTarget(NY, "SUN", 2, 0)])
    before = due.template(tenant, "before", [CycleTarget(NY, "SUN", 0, 59)])
    run(scheduler(runtime), utc(2026, 11, 1, 4, 50), utc(2026, 11, 1, 7, 5))
    assert fired(runtime, tenant) == {
        (before, "SUN0059", "2026-11-01T04:59Z"),
        (repeated, "SUN0130", "2026-11-01T05:30Z"),  # first occurrence only, not 06:30Z
        (after, "SUN0200", "2026-11-01T07:00Z"),
    }


def test_same_minute_twice_and_restart_create_nothing_new(runtime, tenant, due):
    key = due.template(tenant, "daily", [CycleTarget(SEOUL, "MON", 5, 41)])
    minute = utc(2026, 6, 14, 20, 41)  # MON 05:41 KST
    first = scheduler(runtime)
    made = first.run_minute(minute, now=minute)
    [job_id] = job_ids_of(runtime, tenant)
    assert own_jobs(made, {job_id}) == [job_id] and made.jobs_created >= 1
    assert first.run_minute(minute, now=minute).state == "taken"
    # A restart is a new process: a new Scheduler with no memory, same namespace.
    restarted = scheduler(runtime, namespace=first.namespace)
    assert restarted.run_minute(minute, now=minute).state == "taken"
    # Even a scheduler with its own ledger (another deployment on the same stores) finds the same job.
    # (Counted against the first run's figures, not as 0 and 1: other templates may share the bucket.)
    other = scheduler(runtime).run_minute(minute, now=minute)
    assert (other.jobs_created, other.jobs_existing) == (0, made.jobs_created + made.jobs_existing)
    assert own_jobs(other, {job_id}) == [job_id]
    assert len(jobs_of(runtime, tenant)) == 1
    assert fired(runtime, tenant) == {(key, "MON0541", "2026-06-14T20:41Z")}


def test_missed_minutes_within_grace_run_late_once(runtime, tenant, due):
    m0 = utc(2026, 6, 15, 1, 0)  # MON 10:00 KST
    key = due.template(tenant, "daily", [CycleTarget(SEOUL, "MON", 10, 3), CycleTarget(SEOUL, "MON", 10, 8)])
    sched = scheduler(runtime, grace_minutes=10)
    sched.tick(now=m0)  # the scheduler was up at m0 ...
    # ... then down until m0+8:20. The restarted process's first tick runs 10:01..10:07 late.
    restarted = scheduler(runtime, namespace=sched.namespace, grace_minutes=10)
    result = restarted.tick(now=m0 + timedelta(minutes=8, seconds=20))
    assert [(r.minute_utc, r.state) for r in result.minutes] == [(m0 + timedelta(minutes=8), "done")] + [
        (m0 + timedelta(minutes=i), "late") for i in range(1, 8)
    ]
    assert result.skipped == 0
    assert fired(runtime, tenant) == {(key, "MON1003", "2026-06-15T01:03Z"), (key, "MON1008", "2026-06-15T01:08Z")}
    # Another tick (or a second replica) does not run them again.
    again = scheduler(runtime, namespace=sched.namespace, grace_minutes=10).tick(
        now=m0 + timedelta(minutes=8, seconds=40)
    )
    assert [r.state for r in again.minutes] == ["taken"]
    assert len(jobs_of(runtime, tenant)) == 2
    states = tick_states(runtime, sched.namespace)
    assert states[m0 + timedelta(minutes=3)] == "late" and states[m0] == "done"


def test_minutes_missed_beyond_grace_are_skipped_and_never_sent(runtime, tenant, due):
    m0 = utc(2026, 6, 16, 2, 0)  # TUE 11:00 KST
    old = due.template(tenant, "old", [CycleTarget(SEOUL, "TUE", 11, 5)])
    recent = due.template(tenant, "recent", [CycleTarget(SEOUL, "TUE", 11, 25)])
    sched = scheduler(runtime, grace_minutes=10)
    sched.tick(now=m0)
    result = scheduler(runtime, namespace=sched.namespace, grace_minutes=10).tick(now=m0 + timedelta(minutes=30))
    assert result.skipped == 19  # 11:01 .. 11:19
    assert [r.minute_utc for r in result.minutes[1:]] == [m0 + timedelta(minutes=i) for i in range(20, 30)]
    assert fired(runtime, tenant) == {(recent, "TUE1125", "2026-06-16T02:25Z")}
    assert old not in {k for k, *_ in jobs_of(runtime, tenant)}
    states = tick_states(runtime, sched.namespace)
    assert [states[m0 + timedelta(minutes=i)] for i in range(1, 20)] == ["skipped"] * 19
    assert [states[m0 + timedelta(minutes=i)] for i in range(20, 30)] == ["late"] * 10
    # A skipped minute stays skipped: running it later is refused as taken.
    assert sched.run_minute(m0 + timedelta(minutes=5)).state == "taken"
    assert old not in {k for k, *_ in jobs_of(runtime, tenant)}


def test_first_tick_of_a_new_namespace_does_not_backfill(runtime, tenant, due):
    m0 = utc(2026, 6, 17, 3, 0)  # WED 12:00 KST
    due.template(tenant, "daily", [CycleTarget(SEOUL, "WED", 11, 55)])
    result = scheduler(runtime).tick(now=m0)
    assert [r.minute_utc for r in result.minutes] == [m0] and result.skipped == 0
    assert jobs_of(runtime, tenant) == []


def test_a_dead_owners_minute_is_taken_over_and_finished(runtime, tenant, due):
    m0 = utc(2026, 6, 18, 4, 0)  # THU 13:00 KST
    key = due.template(tenant, "daily", [CycleTarget(SEOUL, "THU", 13, 2)])
    sched = scheduler(runtime, grace_minutes=10)
    sched.tick(now=m0)
    sched.tick(now=m0 + timedelta(minutes=1))
    # A replica claims 13:02 and dies before creating its jobs.
    with runtime.sessions.begin() as s:
        assert ticks.claim(
            s, namespace=sched.namespace, minute_utc=m0 + timedelta(minutes=2), owner="dead", lease_s=120
        )
    # Under a live lease, nobody else runs it ...
    assert sched.tick(now=m0 + timedelta(minutes=3)).minutes[1:] == []
    assert jobs_of(runtime, tenant) == []
    # ... once the lease has expired, the next tick's catch-up takes it over and runs it late.
    survivor = scheduler(runtime, namespace=sched.namespace, grace_minutes=10, lease_s=0)
    result = survivor.tick(now=m0 + timedelta(minutes=4))
    assert [(r.minute_utc, r.state) for r in result.minutes[1:]] == [(m0 + timedelta(minutes=2), "late")]
    assert fired(runtime, tenant) == {(key, "THU1302", "2026-06-18T04:02Z")}
    with runtime.sessions() as s:
        row = ticks.get(s, namespace=sched.namespace, minute_utc=m0 + timedelta(minutes=2))
    assert (row.state, row.attempts, row.owner) == ("late", 2, survivor.owner)


def test_a_deleted_template_in_the_due_index_is_skipped(runtime, tenant, due):
    minute = utc(2026, 6, 19, 5, 7)  # FRI 14:07 KST
    bucket = CycleTarget(SEOUL, "FRI", 14, 7)
    gone = "00000000-0000-4000-8000-" + tenant[-12:].lower().rjust(12, "0")
    due.mark(tenant, "gone", gone, [bucket])  # no MySQL template row
    kept = due.template(tenant, "kept", [bucket])
    result = scheduler(runtime).run_minute(minute, now=minute)
    # At least: another test's (or an earlier run's) templates may be due in the same bucket.
    assert result.state == "done" and result.jobs_created >= 1 and result.templates_skipped >= 1
    assert {k for k, *_ in jobs_of(runtime, tenant)} == {kept}
    assert own_jobs(result, job_ids_of(runtime, tenant)) != []


def test_retention_prunes_old_tick_rows(runtime):
    sched = scheduler(runtime)
    now = utc(2026, 6, 20, 0, 0)
    old = [now - timedelta(days=runtime.settings.retention_days, minutes=i) for i in range(1, 4)]
    with runtime.sessions.begin() as s:
        ticks.record_skipped(s, namespace=sched.namespace, minutes=old, owner="t", before=now)
        ticks.record_skipped(s, namespace=sched.namespace, minutes=[now - timedelta(days=1)], owner="t", before=now)
    # The tick rule alone: the whole hourly run (every table, every tenant) is test_scheduler_time's.
    assert retention.prune_ticks(runtime, now=now) >= 3
    assert list(tick_states(runtime, sched.namespace)) == [now - timedelta(days=1)]
