"""Local-time publish (issue 18 item 2): ``local_time: "09:00"`` reaches each recipient when the clock
of its zone (the user's, else the service's) next shows 09:00, DST-correct, through one job whose
parts are released by the job queue at their minute (task ``lease_until``, the database clock) and
whose worker pages keep only the part's recipients. No per-user timer, no per-user row at publish.

The release rule is the cycle scheduler's (``clock.due_walls``): it is checked here against a brute
force walk of UTC minutes through every DST change used; the end-to-end tests publish on a simulated
date (``at``) around the 2026 fall-back in New York and check each device received one push, each in
the part of its own local 09:00.

The rules of this topic that need no server are in tests/unit/test_local_time.py."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from notee.core import clock
from notee.store.mysql import db_now
from notee.usecases import planning, publish
from notee.usecases.job_requests import TopicPublish
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import random_token
from tests.support.stores import changes, snapshot


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


ZONES = {  # zone of the user (None: the service's, Asia/Seoul) -> its 09:00 after 2026-10-31T20:00Z
    "America/New_York": utc(2026, 11, 1, 14, 0),  # EST: New York falls back inside the window
    "Europe/Berlin": utc(2026, 11, 1, 8, 0),  # CET
    "Asia/Kolkata": utc(2026, 11, 1, 3, 30),
    "Australia/Sydney": utc(2026, 10, 31, 22, 0),  # AEDT
    None: utc(2026, 11, 1, 0, 0),  # Asia/Seoul, the service's
}


pytestmark = pytest.mark.tenant(credentials=True, timezone="Asia/Seoul")


def _subscribers(client, headers, zones, per_zone=2):
    """per_zone users with one device each per zone, subscribed to news/all; token -> zone."""
    out = {}
    for zone in zones:
        for _ in range(per_zone):
            body = {"name": "x"} | ({"timezone": zone} if zone else {})
            r = client.put(f"/v1/users/u-{secrets.token_hex(5)}", json=body, headers=headers)
            assert r.status_code == 201 and r.json()["timezone"] == zone, r.text
            user, token = r.json()["user_id"], random_token("z")
            assert (
                client.post(
                    f"/v1/users/{user}/devices", json={"token": token, "os": "AOS"}, headers=headers
                ).status_code
                == 201
            )
            assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (
                200,
                201,
            )
            out[token] = zone
    return out


def _tasks(runtime, job_id):
    with runtime.sessions() as s:
        return s.execute(
            text(
                "SELECT task_no, lease_until, state, targeted, sent FROM fanout_task WHERE job_id = :j ORDER BY task_no"
            ),
            {"j": job_id},
        ).all()


def test_each_recipient_gets_one_push_in_the_part_of_its_local_0900_across_a_dst_change(
    client, runtime, tenant, emulator, emu_runtime
):
    service, headers = tenant
    assert (
        client.put("/v1/templates/TOPIC/news", json={"title": "Good morning", "body": "b"}, headers=headers).status_code
        == 201
    )
    tokens = _subscribers(client, headers, ZONES)
    before = snapshot(runtime, service)
    with runtime.sessions.begin() as s:  # published on a simulated date: 2026-10-31 20:00Z
        job = publish.publish_topic(
            runtime,
            s,
            TopicPublish(
                service=service,
                type_="news",
                topic="all",
                local_time="09:00",
                at=utc(2026, 10, 31, 20, 0).replace(tzinfo=None),
            ),
        )
    written = changes(before, snapshot(runtime, service))
    assert set(written) == {"mysql.fanout_job", "mysql.fanout_task"}  # the job and its tasks: no row per user
    assert len(written["mysql.fanout_job"]["new"]) == 1
    parts = job.target["parts"]
    assert [datetime.fromisoformat(p["at"]) for p in parts] == sorted(ZONES.values())
    tasks = _tasks(runtime, job.job_id)
    per_part = job.target["tasks_per_part"]
    # One task set per stored zone (the four named ones and '' for the service's), each reading only
    # that zone's slot rows, in the part of its zone's release (planning.zone_groups).
    assert sorted(g["zone"] for g in job.target["groups"]) == sorted(z or "" for z in ZONES)
    assert len(tasks) == per_part * len(ZONES)
    for t in tasks:  # each part's tasks are held until its minute (database clock)
        part = planning.task_unit(job.target, t.task_no)[0]
        assert t.lease_until.replace(tzinfo=UTC) == datetime.fromisoformat(parts[part]["at"])
    run_worker_until_idle(emu_runtime, [service])  # the simulated minutes are all past: every part runs
    assert deliveries_per_token(emulator, list(tokens)) == {t: 1 for t in tokens}
    by_part: dict[int, int] = {}
    for t in _tasks(runtime, job.job_id):
        part = planning.task_unit(job.target, t.task_no)[0]
        by_part[part] = by_part.get(part, 0) + t.sent
    release = sorted(ZONES.values())
    assert by_part == {release.index(at): 2 for at in ZONES.values()}  # each zone's two users in its own part
    status = client.get(f"/v1/jobs/{job.job_id}", headers=headers).json()
    assert (status["state"], status["targeted"], status["sent"]) == ("done", len(tokens), len(tokens)), status


def test_a_part_is_not_sent_before_its_minute(client, runtime, tenant, emulator, emu_runtime):
    service, headers = tenant
    assert client.put("/v1/templates/TOPIC/news", json={"title": "Hi", "body": "b"}, headers=headers).status_code == 201
    tokens = _subscribers(client, headers, ["UTC", "Asia/Kolkata"], per_zone=1)
    with runtime.sessions() as s:
        now = db_now(s)
    r = client.post("/v1/topics/news/all/publish", json={"local_time": f"{now:%H:%M}"}, headers=headers)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    utc_token, kolkata_token = sorted(tokens, key=lambda t: tokens[t] != "UTC")
    assert deliveries_per_token(emulator, [utc_token, kolkata_token]) == {utc_token: 1, kolkata_token: 0}
    later = [t for t in _tasks(runtime, job_id) if t.state == "queued"]
    expected = {  # Kolkata's part, and the service zone's (Seoul, empty here): both still ahead
        clock.local_release(now, now.hour, now.minute, z).replace(tzinfo=None) for z in ("Asia/Kolkata", "Asia/Seoul")
    }
    assert {t.lease_until.replace(microsecond=0) for t in later} == expected
    assert client.get(f"/v1/jobs/{job_id}", headers=headers).json()["state"] in ("queued", "running")
    # The clock reaching Kolkata's minute, simulated: its tasks' release moves to now.
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) WHERE job_id = :j AND state = 'queued'"),
            {"j": job_id},
        )
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, [utc_token, kolkata_token]) == {utc_token: 1, kolkata_token: 1}
    assert client.get(f"/v1/jobs/{job_id}", headers=headers).json()["state"] == "done"


def test_the_same_idempotency_key_returns_the_same_local_time_job(client, tenant):
    _, headers = tenant
    assert client.put("/v1/templates/TOPIC/news", json={"title": "Hi", "body": "b"}, headers=headers).status_code == 201
    h = headers | {"Idempotency-Key": "morning-1"}
    first = client.post("/v1/topics/news/all/publish", json={"local_time": "09:00"}, headers=h)
    again = client.post("/v1/topics/news/all/publish", json={"local_time": "09:00"}, headers=h)
    assert first.status_code == again.status_code == 202 and first.json() == again.json()
    other = client.post("/v1/topics/news/all/publish", json={"local_time": "10:00"}, headers=h)
    assert other.status_code == 422, other.text


@pytest.mark.parametrize("value", ["9:00", "24:00", "09:60", "0900", 900, "09:00:00", ""])
def test_a_bad_local_time_is_422_and_nothing_is_written(client, runtime, tenant, value):
    service, headers = tenant
    assert client.put("/v1/templates/TOPIC/news", json={"title": "Hi", "body": "b"}, headers=headers).status_code == 201
    before = snapshot(runtime, service)
    r = client.post("/v1/topics/news/all/publish", json={"local_time": value}, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"][0]["loc"][-1] == "local_time"
    assert snapshot(runtime, service) == before


def test_user_time_zone_is_validated_kept_and_cleared(client, runtime, tenant):
    service, headers = tenant
    r = client.put("/v1/users/tz-1", json={"timezone": "Europe/Berlin"}, headers=headers)
    assert r.status_code == 201 and r.json()["timezone"] == "Europe/Berlin"
    assert client.put("/v1/users/tz-1", json={"name": "n"}, headers=headers).json()["timezone"] == "Europe/Berlin"
    assert client.put("/v1/users/tz-1", json={"timezone": None}, headers=headers).json()["timezone"] is None
    before = snapshot(runtime, service)
    for bad in ("Mars/Olympus", "localtime", "posix/UTC", "", 9):
        r = client.put("/v1/users/tz-2", json={"timezone": bad}, headers=headers)
        assert r.status_code == 422, (bad, r.text)
    assert snapshot(runtime, service) == before
