"""Quiet hours (issue 18 item 3): a service and a user may set a daily local-time window in which
TOPIC pushes are held until it ends (or dropped, as the template says); cycle pushes are not
affected; a single send opts in. The window follows the recipient's clock: tested across midnight
and across DST changes (pure), and end to end on a simulated date and on the database clock.

The rules of this topic that need no server are in tests/unit/test_quiet_hours.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from notee.store.mysql import db_now
from notee.usecases import planning, publish
from notee.usecases.job_requests import TopicPublish
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import new_service, random_token
from tests.support.stores import snapshot


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


pytestmark = pytest.mark.tenant(credentials=True, timezone="Asia/Seoul")


def _user(client, headers, *, quiet=None, timezone=None, topic="all"):
    body = {"name": "q"} | ({"quiet_hours": quiet} if quiet else {}) | ({"timezone": timezone} if timezone else {})
    r = client.put(f"/v1/users/q-{random_token()[-10:]}", json=body, headers=headers)
    assert r.status_code == 201, r.text
    user, token = r.json()["user_id"], random_token("q")
    assert r.json()["quiet_hours"] == quiet
    assert (
        client.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS"}, headers=headers).status_code == 201
    )
    if topic:
        assert client.put(f"/v1/users/{user}/subscriptions/topic/news/{topic}", headers=headers).status_code in (
            200,
            201,
        )
    return user, token


def _tasks(runtime, job_id):
    with runtime.sessions() as s:
        return s.execute(
            text(
                "SELECT task_no, lease_until, state, targeted, sent, quiet_dropped FROM fanout_task WHERE job_id = :j"
            ),
            {"j": job_id},
        ).all()


def _publish(runtime, service, at):
    with runtime.sessions.begin() as s:
        return publish.publish_topic(
            runtime,
            s,
            TopicPublish(
                service=service,
                type_="news",
                topic="all",
                at=at.replace(tzinfo=None),
            ),
        )


@pytest.mark.parametrize("mode", ["hold", "drop"])
def test_a_topic_push_in_quiet_hours_is_held_until_they_end_or_dropped(
    client, runtime, tenant, emulator, emu_runtime, mode
):
    service, headers = tenant
    r = client.put(
        "/v1/templates/TOPIC/news", json={"title": "News", "body": "b", "quiet_hours": mode}, headers=headers
    )
    assert r.status_code == 201 and r.json()["quiet_hours"] == mode, r.text
    _, awake = _user(client, headers)  # no window: the service has none either
    _, asleep = _user(client, headers, quiet={"start": "22:00", "end": "07:00"})  # Seoul night
    _, berlin = _user(client, headers, quiet={"start": "22:00", "end": "07:00"}, timezone="Europe/Berlin")
    at = utc(2026, 11, 29, 14, 30)  # simulated, in the past: 23:30 in Seoul, 15:30 in Berlin
    job = _publish(runtime, service, at)
    held = {t.lease_until for t in _tasks(runtime, job.job_id) if planning.task_unit(job.target, t.task_no)[0] >= 1}
    run_worker_until_idle(emu_runtime, [service])  # every part's minute is past: all of them run
    got = deliveries_per_token(emulator, [awake, asleep, berlin])
    status = client.get(f"/v1/jobs/{job.job_id}", headers=headers).json()
    assert status["state"] == "done", status
    if mode == "hold":
        assert [p["at"] for p in job.target["parts"]] == [at.isoformat(), utc(2026, 11, 29, 22, 0).isoformat()]
        assert got == {awake: 1, asleep: 1, berlin: 1}
        second = [t for t in _tasks(runtime, job.job_id) if planning.task_unit(job.target, t.task_no)[0] == 1]
        assert sum(t.sent for t in second) == 1  # the sleeper, in the part released at 07:00 KST
        assert held == {datetime(2026, 11, 29, 22, 0)}  # released at 07:00 KST
        assert (status["targeted"], status["sent"], status["quiet_dropped"]) == (3, 3, 0)
    else:
        assert got == {awake: 1, asleep: 0, berlin: 1}
        assert (status["targeted"], status["sent"], status["quiet_dropped"]) == (2, 2, 1)


def test_the_service_window_applies_to_users_without_one_and_waits_for_its_minute(
    client, runtime, tenant, emulator, emu_runtime
):
    service, headers = tenant
    assert (
        client.put("/v1/templates/TOPIC/news", json={"title": "News", "body": "b"}, headers=headers).status_code == 201
    )
    with runtime.sessions() as s:
        now = db_now(s)
    seoul = (now + timedelta(hours=9)).replace(second=0, microsecond=0)
    window = {"start": f"{(seoul - timedelta(hours=1)):%H:%M}", "end": f"{(seoul + timedelta(hours=2)):%H:%M}"}
    r = client.put("/v1/service/quiet-hours", json={"quiet_hours": window}, headers=headers)
    assert r.status_code == 200 and r.json() == {"quiet_hours": window}, r.text
    assert client.get("/v1/service/quiet-hours", headers=headers).json() == {"quiet_hours": window}
    _, quiet_user = _user(client, headers)  # the service's window, in Seoul
    later = {"start": f"{now + timedelta(hours=3):%H:%M}", "end": f"{now + timedelta(hours=4):%H:%M}"}
    _, own = _user(client, headers, quiet=later, timezone="UTC")  # its own window (not now) replaces the service's
    r = client.post("/v1/topics/news/all/publish", headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, [quiet_user, own]) == {quiet_user: 0, own: 1}
    held = [t for t in _tasks(runtime, r.json()["job_id"]) if t.state == "queued"]
    assert held and {t.lease_until for t in held} == {
        (seoul + timedelta(hours=2) - timedelta(hours=9)).replace(tzinfo=None)
    }
    assert client.put("/v1/service/quiet-hours", json={"quiet_hours": None}, headers=headers).json() == {
        "quiet_hours": None
    }


def test_a_service_sets_only_its_own_quiet_hours(client, settings, tenant):
    _, headers = tenant
    other = new_service(client, settings, "O" + random_token()[-10:].upper().replace("-", "X"))
    window = {"quiet_hours": {"start": "22:00", "end": "07:00"}}
    assert client.put("/v1/service/quiet-hours", json=window, headers=headers).json() == window
    assert client.get("/v1/service/quiet-hours", headers=other).json() == {"quiet_hours": None}
    assert client.get("/v1/service/quiet-hours", headers=headers).json() == window


def test_cycle_pushes_are_not_affected(client, runtime, tenant, emulator, emu_runtime):
    from tests.support.scheduler import scheduler

    service, headers = tenant
    body = {"title": "Remind", "body": "b", "quiet_hours": "drop"}
    assert client.put("/v1/templates/CYCLE/remind", json=body, headers=headers).status_code == 201
    user, token = _user(client, headers, quiet={"start": "22:00", "end": "07:00"}, topic=None)
    r = client.put(
        f"/v1/users/{user}/subscriptions/cycle/remind",
        json={"days": ["MON"], "hour": 23, "minute": 30, "timezone": "Asia/Seoul"},
        headers=headers,
    )
    assert r.status_code in (200, 201), r.text
    minute = utc(2031, 3, 3, 14, 30)  # Monday 23:30 in Seoul: inside the user's night
    scheduler(runtime).run_minute(minute, now=minute)
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, [token]) == {token: 1}


def test_a_single_send_opts_in(client, runtime, tenant, emulator):
    _, headers = tenant
    with runtime.sessions() as s:
        now = db_now(s)
    window = {"start": f"{(now - timedelta(hours=1)):%H:%M}", "end": f"{(now + timedelta(hours=1)):%H:%M}"}
    user, token = _user(client, headers, quiet=window, timezone="UTC", topic=None)
    for mode in ("hold", "drop"):
        assert client.put(
            "/v1/templates/SINGLE/s", json={"title": "t", "body": "b", "quiet_hours": mode}, headers=headers
        ).status_code in (200, 201)
        r = client.post(f"/v1/users/{user}/send", json={"type": "s", "quiet_hours": True}, headers=headers)
        if mode == "hold":  # held: a scheduled single send at the end of the window
            assert r.status_code == 202 and r.json()["state"] == "scheduled", r.text
            assert r.json()["send_at"].startswith(f"{now + timedelta(hours=1):%Y-%m-%dT%H:%M}")
        else:
            assert r.status_code == 200 and r.json()["quiet_dropped"] == 1 and r.json()["delivered"] == 0, r.text
    assert emulator.deliveries(token)["attempts"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"quiet_hours": {"start": "22:00", "end": "22:00"}},
        {"quiet_hours": {"start": "25:00", "end": "07:00"}},
        {"quiet_hours": {"start": "22:00"}},
        {"quiet_hours": {"start": "22:00", "end": "07:00", "tz": "UTC"}},
        {"quiet_hours": "22:00-07:00"},
    ],
)
def test_bad_quiet_hours_are_422_and_nothing_is_written(client, runtime, tenant, body):
    service, headers = tenant
    before = snapshot(runtime, service)
    assert client.put("/v1/users/bad-q", json=body, headers=headers).status_code == 422
    assert client.put("/v1/service/quiet-hours", json=body, headers=headers).status_code == 422
    r = client.put("/v1/templates/TOPIC/x", json={"title": "t", "body": "b", "quiet_hours": "later"}, headers=headers)
    assert r.status_code == 422
    assert snapshot(runtime, service) == before
