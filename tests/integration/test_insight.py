"""The operator views of notee.domain.insight, at the domain level against the real MariaDB and
Cassandra: subscriber counts per type and per topic (kept right through subscribe, bulk, unsubscribe,
user and template deletion, repaired by reconcile), the cycle calendar (DST-correct, counted from
the slot partitions) and the per-service delivery summary."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from notee.core.errors import InvalidInput
from notee.core.vocabulary import CycleTarget
from notee.domain import cycle_subscriptions, insight, templates, topic_subscriptions, users
from notee.domain.cycle_subscriptions import ScheduleRequest
from notee.store import deadletter, jobs_sql
from notee.usecases import reconcile
from tests.support.fanout import topic_job, topic_template
from tests.support.registry import make_device, make_service, make_template, make_user, random_token


def call(runtime, fn, *args, **kwargs):
    """A subscriptions/insight function in a unit of work the caller commits, as its callers run it."""
    with runtime.sessions.begin() as session:
        return fn(session, runtime.statements, *args, **kwargs)


@pytest.fixture()
def svc(store_tenant):
    """This module's name for the family's store-made tenant (tests/support/tenants.py)."""
    return store_tenant


def topics(runtime, svc, **kw) -> list[tuple[str, str, int]]:
    page = call(runtime, insight.topic_counts, svc, **kw)
    return [(t.type_, t.topic, t.subscribers) for t in page.items]


def raw_topic_counts(runtime, svc) -> dict[tuple[str, str], int]:
    return {(t, topic): n for t, topic, n in runtime.statements.topic_subscribers(svc)}


def user_with_device(runtime, svc, os_="AOS") -> str:
    u = make_user(runtime, svc)
    make_device(runtime, svc, u, random_token(), os_)
    return u


# ---------------------------------------------------------------------- subscriber counts
def test_topic_counts_follow_subscribe_bulk_unsubscribe_and_user_deletion(runtime, svc):
    make_template(runtime, svc, "TOPIC", "news")
    u1, u2 = user_with_device(runtime, svc), user_with_device(runtime, svc, "IOS")
    make_device(runtime, svc, u1, random_token())  # u1 has two devices: still one subscriber
    u3 = make_user(runtime, svc)  # no device yet: a subscriber all the same
    for u, topic in ((u1, "a"), (u1, "b"), (u2, "a"), (u3, "a")):
        assert call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", topic)["status"] == "subscribed"
    assert topics(runtime, svc) == [("news", "a", 3), ("news", "b", 1)]

    # A retried subscribe (idempotent) counts nothing twice.
    for _ in range(3):
        assert (
            call(runtime, topic_subscriptions.subscribe_topic, svc, u1, "news", "a")["status"] == "already_subscribed"
        )
    assert topics(runtime, svc) == [("news", "a", 3), ("news", "b", 1)]

    # Bulk: one counter statement for the request, already subscribed users not counted again.
    u4 = make_user(runtime, svc)
    out = call(runtime, topic_subscriptions.bulk_subscribe_topic, svc, "news", "c", [u1, u2, u4, u1])
    assert [o["status"] for o in out] == ["subscribed"] * 3
    out = call(runtime, topic_subscriptions.bulk_subscribe_topic, svc, "news", "c", [u1, u2, u4])
    assert [o["status"] for o in out] == ["already_subscribed"] * 3
    assert topics(runtime, svc) == [("news", "a", 3), ("news", "b", 1), ("news", "c", 3)]

    assert call(runtime, topic_subscriptions.unsubscribe_topic, svc, u2, "news", "a") is True
    assert call(runtime, topic_subscriptions.unsubscribe_topic, svc, u2, "news", "a") is False  # twice: nothing more
    assert topics(runtime, svc) == [("news", "a", 2), ("news", "b", 1), ("news", "c", 3)]

    with runtime.sessions.begin() as s:
        users.delete_user(s, runtime.statements, svc, u1)
    # b is down to 0 and no longer listed; its counter row stays (counters are never deleted).
    assert topics(runtime, svc) == [("news", "a", 1), ("news", "c", 2)]
    assert raw_topic_counts(runtime, svc)[("news", "b")] == 0

    # Per type: the seed's `count` (users with any live subscription of the type).
    counts = call(runtime, insight.subscriber_counts, svc)
    assert [(c.method, c.type_, c.subscribers) for c in counts] == [("TOPIC", "news", 3)]  # u2, u3, u4


def test_deleting_a_topic_template_resets_its_topics_and_other_types_stay(runtime, svc):
    make_template(runtime, svc, "TOPIC", "news")
    make_template(runtime, svc, "TOPIC", "deals")
    make_template(runtime, svc, "CYCLE", "remind")
    make_template(runtime, svc, "SINGLE", "otp")
    users = [user_with_device(runtime, svc) for _ in range(2)]
    for u in users:
        call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", "x")
        call(runtime, topic_subscriptions.subscribe_topic, svc, u, "deals", "x")
    call(
        runtime,
        cycle_subscriptions.subscribe_cycle,
        svc,
        users[0],
        "remind",
        ScheduleRequest(["MON"], 9, 0, "Europe/Berlin"),
    )
    counts = call(runtime, insight.subscriber_counts, svc)
    assert [(c.method, c.type_, c.subscribers) for c in counts] == [
        ("CYCLE", "remind", 1),
        ("TOPIC", "deals", 2),
        ("TOPIC", "news", 2),
    ]  # SINGLE templates have no subscriptions and are not listed

    with runtime.sessions.begin() as s:
        templates.delete_template(s, runtime.statements, svc, "TOPIC", "news")
    assert raw_topic_counts(runtime, svc)[("news", "x")] == 0
    assert topics(runtime, svc) == [("deals", "x", 2)]
    # A new template of the type starts from zero, and counts its own subscribers.
    make_template(runtime, svc, "TOPIC", "news")
    call(runtime, topic_subscriptions.subscribe_topic, svc, users[0], "news", "x")
    assert topics(runtime, svc) == [("deals", "x", 2), ("news", "x", 1)]
    assert topics(runtime, svc, type_="news") == [("news", "x", 1)]
    assert topics(runtime, svc, type_="nosuch") == []


def test_topic_pages_follow_the_cursor(runtime, svc):
    make_template(runtime, svc, "TOPIC", "news")
    u = user_with_device(runtime, svc)
    names = [f"t{i}" for i in range(5)]
    for name in names:
        call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", name)
    call(runtime, topic_subscriptions.unsubscribe_topic, svc, u, "news", "t2")  # a zero is skipped, not a short page
    seen, after = [], None
    while True:
        page = call(runtime, insight.topic_counts, svc, limit=2, after=after)
        assert len(page.items) <= 2
        seen += [t.topic for t in page.items]
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == ["t0", "t1", "t3", "t4"]
    page = call(runtime, insight.topic_counts, svc, type_="news", limit=1, after=("news", "t1"))
    assert [t.topic for t in page.items] == ["t3"] and page.next_after == ("news", "t3")
    with pytest.raises(InvalidInput):
        call(runtime, insight.topic_counts, svc, limit=0)


def test_reconcile_repairs_topic_counts_that_drifted(runtime, svc):
    st = runtime.statements
    key = make_template(runtime, svc, "TOPIC", "news")
    u1, u2 = user_with_device(runtime, svc), user_with_device(runtime, svc)
    for u in (u1, u2):
        call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", "a")
    call(runtime, topic_subscriptions.subscribe_topic, svc, u1, "news", "b")
    # Drift on purpose: an increment that timed out but landed, a lost decrement, a topic that was
    # never subscribed, and a subscription whose increment never happened (no counter row at all).
    st.run([st.add_topic_subscribers_async(svc, "news", "a", 5)])
    st.run([st.add_topic_subscribers_async(svc, "news", "b", -1)])
    st.run([st.add_topic_subscribers_async(svc, "news", "ghost", 3)])
    st.run([st.write_user_level(u2, svc, "TOPIC", "news", "z", key, int(time.time() * 1000))])
    assert raw_topic_counts(runtime, svc) == {("news", "a"): 7, ("news", "b"): 0, ("news", "ghost"): 3}

    report = reconcile.reconcile(runtime, service=svc)
    assert report["topic_counts_fixed"] == 4
    assert raw_topic_counts(runtime, svc) == {
        ("news", "a"): 2,
        ("news", "b"): 1,
        ("news", "ghost"): 0,
        ("news", "z"): 1,
    }
    assert reconcile.reconcile(runtime, service=svc)["topic_counts_fixed"] == 0  # a second run: nothing


# ---------------------------------------------------------------------- cycle calendar
@pytest.fixture()
def cycle_users(runtime, svc):
    """Subscribe users to cycle schedules; delete them at the end (their due rows stay until
    reconcile, so remove those too: the scheduler tests share the due index)."""
    made: list[tuple[str, str]] = []

    def subscribe(type_: str, days: list[str], hour: int, minute: int, tz: str, devices: int = 1) -> str:
        u = make_user(runtime, svc)
        for _ in range(devices):
            make_device(runtime, svc, u, random_token())
        call(runtime, cycle_subscriptions.subscribe_cycle, svc, u, type_, ScheduleRequest(days, hour, minute, tz))
        made.append((u, type_))
        return u

    yield subscribe
    for u, _ in made:  # every row of the user, deleted templates' too
        with runtime.sessions.begin() as s:
            users.delete_user(s, runtime.statements, svc, u)
    st = runtime.statements
    stamp = time.time_ns() // 1000 + 1
    for tz, day, hour, minute, key, service in list(st.scan_due()):
        if service == svc:
            st.delete_due(stamp, tz, day, hour, minute, key)


def _entries(cal: insight.Calendar) -> list[tuple[str, str, str, int]]:
    return [
        (
            m.minute.strftime("%Y-%m-%dT%H:%MZ"),
            t.type_,
            f"{t.bucket.day} {t.bucket.hour:02d}:{t.bucket.minute:02d} {t.bucket.timezone}",
            t.subscriptions,
        )
        for m in cal.minutes
        for t in m.templates
    ]


def test_the_calendar_follows_a_spring_forward_gap(runtime, svc, cycle_users):
    make_template(runtime, svc, "CYCLE", "remind")
    ny = "America/New_York"  # 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z)
    cycle_users("remind", ["SUN"], 1, 45, ny)
    cycle_users("remind", ["SUN"], 2, 30, ny, devices=2)  # in the gap: fires with 03:00, once
    cycle_users("remind", ["SUN", "MON"], 2, 30, ny)
    cycle_users("remind", ["SUN"], 3, 0, ny)
    cycle_users("remind", ["SAT"], 2, 30, ny)  # another day: not in the window
    now = datetime(2026, 3, 8, 6, 30, 20, tzinfo=UTC)  # 01:30 EST
    cal = call(runtime, insight.cycle_calendar, svc, hours=1, now=now)
    assert cal.start == datetime(2026, 3, 8, 6, 31, tzinfo=UTC) and cal.end == cal.start + timedelta(hours=1)
    assert _entries(cal) == [
        ("2026-03-08T06:45Z", "remind", f"SUN 01:45 {ny}", 1),
        ("2026-03-08T07:00Z", "remind", f"SUN 02:30 {ny}", 3),  # two users, three devices
        ("2026-03-08T07:00Z", "remind", f"SUN 03:00 {ny}", 1),
    ]
    assert not cal.truncated


def test_the_calendar_fires_a_repeated_hour_once_and_bounds_itself(runtime, svc, cycle_users):
    make_template(runtime, svc, "CYCLE", "remind")
    make_template(runtime, svc, "CYCLE", "water")
    ny = "America/New_York"  # 2026-11-01 02:00 EDT -> 01:00 EST: 01:xx happens twice
    cycle_users("remind", ["SUN"], 1, 30, ny)
    cycle_users("water", ["SUN"], 1, 30, ny)
    cycle_users("water", ["SUN"], 9, 0, "Asia/Seoul")  # 00:00Z
    now = datetime(2026, 11, 1, 4, 59, tzinfo=UTC)  # 00:59 EDT
    cal = call(runtime, insight.cycle_calendar, svc, hours=2, now=now)
    assert _entries(cal) == [
        ("2026-11-01T05:30Z", "remind", f"SUN 01:30 {ny}", 1),  # the first 01:30 (EDT) only
        ("2026-11-01T05:30Z", "water", f"SUN 01:30 {ny}", 1),
    ]
    # Seoul's 09:00 SUN is 2026-11-01T00:00Z: in a 24-hour window starting the evening before.
    cal = call(runtime, insight.cycle_calendar, svc, hours=24, now=datetime(2026, 10, 31, 12, 0, tzinfo=UTC))
    assert ("2026-11-01T00:00Z", "water", "SUN 09:00 Asia/Seoul", 1) in _entries(cal)
    bounded = call(runtime, insight.cycle_calendar, svc, hours=2, now=now, max_entries=1)
    assert bounded.truncated and len(_entries(bounded)) == 1
    with pytest.raises(InvalidInput):
        call(runtime, insight.cycle_calendar, svc, hours=0, now=now)
    with pytest.raises(InvalidInput):
        call(runtime, insight.cycle_calendar, svc, hours=24 * 7 + 1, now=now)


def test_the_calendar_shows_one_service_only_and_skips_deleted_templates(runtime, svc, cycle_users, service_id):
    other = make_service(runtime, "O" + service_id[1:])
    make_template(runtime, svc, "CYCLE", "remind")
    make_template(runtime, svc, "CYCLE", "gone")
    key_other = make_template(runtime, other, "CYCLE", "remind")
    cycle_users("remind", ["TUE"], 10, 0, "UTC")
    cycle_users("gone", ["TUE"], 10, 0, "UTC")
    st = runtime.statements
    target = CycleTarget("UTC", "TUE", 10, 0)
    st.run(
        st.mark_due(
            service=other, type_="remind", notification_key=key_other, timezone="UTC", days=["TUE"], hour=10, minute=0
        )
    )
    try:
        with runtime.sessions.begin() as s:
            templates.delete_template(s, st, svc, "CYCLE", "gone")
        now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)  # a Tuesday
        cal = call(runtime, insight.cycle_calendar, svc, hours=2, now=now)
        assert _entries(cal) == [("2026-12-01T10:00Z", "remind", "TUE 10:00 UTC", 1)]
        everyone = call(runtime, insight.cycle_calendar, None, hours=2, now=now)
        mine = {(t.service, t.type_) for m in everyone.minutes for t in m.templates if t.bucket == target}
        assert {(svc, "remind"), (other, "remind")} <= mine and (svc, "gone") not in mine
    finally:
        st.delete_due(time.time_ns() // 1000 + 1, "UTC", "TUE", 10, 0, key_other)


# ---------------------------------------------------------------------- delivery summary
def _finish(runtime, job_id: str, state: str, **counts: int) -> None:
    sets = ", ".join(f"{k} = {int(v)}" for k, v in counts.items())
    with runtime.sessions.begin() as s:
        s.execute(text(f"UPDATE fanout_task SET state = :st, {sets} WHERE job_id = :j"), {"st": state, "j": job_id})
        s.execute(text("UPDATE fanout_job SET state = :st WHERE job_id = :j"), {"st": state, "j": job_id})


def test_the_delivery_summary_counts_jobs_by_state_and_hour_with_dead_letters(runtime, service_id):
    svc = service_id
    key = topic_template(runtime, svc)
    done = topic_job(runtime, svc, key, "a")
    failed = topic_job(runtime, svc, key, "b")
    queued = topic_job(runtime, svc, key, "c")
    old = topic_job(runtime, svc, key, "d")
    cancelled = topic_job(runtime, svc, key, "e")
    _finish(runtime, done.job_id, "done", targeted=10, sent=7, failed=1, pruned=2, retried=4, ttl_expired=3)
    _finish(runtime, failed.job_id, "failed", targeted=5, sent=1, failed=4, no_credentials=4)
    _finish(runtime, old.job_id, "done", targeted=100, sent=100)
    with runtime.sessions.begin() as s:
        jobs_sql.cancel_job(s, svc, cancelled.job_id)
        now = s.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one().replace(tzinfo=UTC)
        hour = now.replace(minute=0, second=0, microsecond=0)
        for job, created in (
            (done, hour),
            (failed, hour),
            (queued, hour),
            (cancelled, hour),
            (old, now - timedelta(hours=30)),
        ):
            # every job in this hour (however close to its end the test runs), one from yesterday outside
            s.execute(
                text("UPDATE fanout_job SET created_at = :t WHERE job_id = :j"),
                {"t": created.replace(tzinfo=None), "j": job.job_id},
            )
        letter = deadletter.DeadLetter(
            service=svc,
            job_id=done.job_id,
            device_token=random_token(),
            device_os="AOS",
            provider="fcm",
            reason="UNAVAILABLE",
            attempts=5,
            payload={"title": "t"},
        )
        deadletter.record(s, [letter, letter], now=now.replace(tzinfo=None))
        deadletter.record(s, [letter], now=(now - timedelta(hours=2)).replace(tzinfo=None))
        deadletter.record(s, [letter], now=(now - timedelta(hours=25)).replace(tzinfo=None))  # outside

    with runtime.sessions() as s:
        summary = insight.delivery_summary(s, svc, now=now)
    assert summary.service == svc and summary.until == now
    assert summary.since == now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    assert summary.jobs_by_state == {
        "scheduled": 0,
        "queued": 1,
        "running": 0,
        "done": 1,
        "failed": 1,
        "expired": 0,
        "cancelled": 1,
    }
    t = summary.totals
    assert (t.jobs, t.targeted, t.sent, t.failed, t.pruned, t.no_credentials, t.retried, t.dead_lettered) == (
        4,
        15,
        8,
        5,
        2,
        4,
        4,
        3,
    )
    assert t.ttl_expired == 3  # held past their push's TTL: not in targeted
    assert len(summary.hours) == 24 and summary.hours[-1].hour == now.replace(minute=0, second=0, microsecond=0)
    assert [h.hour for h in summary.hours] == sorted(h.hour for h in summary.hours)
    by_hour = {h.hour: h.deliveries for h in summary.hours}
    this_hour = by_hour[summary.hours[-1].hour]
    assert (this_hour.jobs, this_hour.sent, this_hour.dead_lettered) == (4, 8, 2)
    assert by_hour[summary.hours[-3].hour].dead_lettered == 1
    assert queued.job_id  # queued: counted by state, nothing sent yet

    # The admin variant: every service, this one among them with the same numbers.
    with runtime.sessions() as s:  # a page starting just before this service
        page = insight.delivery_summaries(s, hours=24, now=now, after=svc[:-1], limit=200)
    assert next(x for x in page.items if x.service == svc) == summary
    with runtime.sessions() as s:
        assert insight.summaries_of(s, [svc], hours=24)[svc].totals == summary.totals
    with runtime.sessions() as s, pytest.raises(InvalidInput):
        insight.delivery_summary(s, svc, hours=0)
