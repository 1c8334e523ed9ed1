"""Slot rows carry their recipient's zone (CQL 0004, docs/FANOUT.md "Local-time publishes"): a part of a
local-time job reads only the rows of its zones. What must stay true for that:

* every writer of a topic slot row stores the user's zone ('' = the service's): subscribe, bulk
  subscribe, a device's copy, a token rotation;
* a zone change (PUT /v1/users) rewrites the zone of every row of the user, under the user's row
  lock, so a subscribe or device copy racing with it never leaves a row with the old zone;
* rows written before the column (zone NULL) are still delivered: their service is not marked
  (``service.slot_zones`` = 0) and its jobs walk every row, until ``notee backfill-zones`` has
  written their zone; then the zone-sliced jobs reach everyone once.

All against the real MariaDB and Cassandra, the API in process and the emulator."""

from __future__ import annotations

import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from notee.usecases import jobs, planning, publish, zone_backfill
from notee.usecases.job_requests import TopicPublish
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import random_token

AT = datetime(2026, 10, 31, 20, 0)  # simulated publish instant (UTC): every 09:00 after it is past now


pytestmark = pytest.mark.tenant(credentials=True, timezone="Asia/Seoul")


@pytest.fixture()
def tenant(tenant):
    """The family's tenant with a TOPIC template ``news``."""
    r = tenant.client.put(
        "/v1/templates/TOPIC/news", json={"title": "Good morning", "body": "b"}, headers=tenant.headers
    )
    assert r.status_code == 201, r.text
    return tenant


def _user(client, headers, zone: str | None, devices: int = 1, topic: str | None = "all") -> tuple[str, list[str]]:
    body = {"name": "x"} | ({"timezone": zone} if zone else {})
    r = client.put(f"/v1/users/u-{secrets.token_hex(5)}", json=body, headers=headers)
    assert r.status_code == 201, r.text
    user = r.json()["user_id"]
    tokens = [random_token("z") for _ in range(devices)]
    for token in tokens:
        r = client.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS"}, headers=headers)
        assert r.status_code == 201, r.text
    if topic is not None:
        assert client.put(f"/v1/users/{user}/subscriptions/topic/news/{topic}", headers=headers).status_code == 201
    return user, tokens


def _key(client, headers) -> str:
    return str(client.get("/v1/templates/TOPIC/news", headers=headers).json()["notification_key"])


def _zones(runtime, key: str, topic: str = "all") -> dict[str, str | None]:
    """device_token -> the zone its slot row stores (slot 0: these tests have few subscribers)."""
    rows = runtime.cql.execute(
        f"SELECT device_token, zone FROM {runtime.keyspaces.notification}.topic_notification"
        " WHERE slot = 0 AND notification_key = %s AND topic = %s",
        (key, topic),
    )
    return {r.device_token: r.zone for r in rows}


def _publish(runtime, service: str, topic: str = "all") -> jobs.JobRow:
    with runtime.sessions.begin() as s:  # the caller owns the commit
        return publish.publish_topic(
            runtime, s, TopicPublish(service=service, type_="news", topic=topic, local_time="09:00", at=AT)
        )


def _sent_by_zone(runtime, job: jobs.JobRow) -> dict[str | None, int]:
    """sent per stored zone the job's task sets read (None: a set that walks every row)."""
    with runtime.sessions() as s:
        tasks = s.execute(text("SELECT task_no, sent FROM fanout_task WHERE job_id = :j"), {"j": job.job_id}).all()
    out: dict[str | None, int] = {}
    for task_no, sent in tasks:
        zone = planning.task_unit(job.target, task_no)[1]
        out[zone] = out.get(zone, 0) + sent
    return {z: n for z, n in out.items() if n}


def test_every_writer_stores_the_users_zone_and_a_zone_change_rewrites_it(client, runtime, tenant):
    _service, headers = tenant
    key = _key(client, headers)
    berlin, (b1,) = _user(client, headers, "Europe/Berlin")
    default, (d1,) = _user(client, headers, None)
    # A second device registered later gets the subscription copied, with the zone.
    b2 = random_token("z")
    r = client.post(f"/v1/users/{berlin}/devices", json={"token": b2, "os": "AOS"}, headers=headers)
    assert r.status_code == 201, r.text
    # Bulk subscribe stores each user's zone too.
    bulk, _ = _user(client, headers, "Asia/Kolkata", topic=None)
    r = client.post("/v1/topics/news/all/subscribers", json={"user_ids": [bulk]}, headers=headers)
    assert r.status_code in (200, 207), r.text
    kolkata = [t for t, z in _zones(runtime, key).items() if z == "Asia/Kolkata"]
    assert len(kolkata) == 1
    assert _zones(runtime, key) == {b1: "Europe/Berlin", b2: "Europe/Berlin", d1: "", kolkata[0]: "Asia/Kolkata"}

    # A rotated token's new row keeps the user's zone.
    b3 = random_token("z")
    r = client.post("/v1/devices/rotate", json={"old_token": b2, "new_token": b3}, headers=headers)
    assert r.status_code == 200, r.text
    assert _zones(runtime, key)[b3] == "Europe/Berlin" and b2 not in _zones(runtime, key)

    # Zone changes: every row of the user follows, a clear goes back to '' (the service's).
    assert_ok(
        client.put(f"/v1/users/{_sid(client, headers, berlin)}", json={"timezone": "Asia/Tokyo"}, headers=headers)
    )
    assert_ok(client.put(f"/v1/users/{_sid(client, headers, default)}", json={"timezone": "UTC"}, headers=headers))
    zones = _zones(runtime, key)
    assert (zones[b1], zones[b3], zones[d1]) == ("Asia/Tokyo", "Asia/Tokyo", "UTC")
    assert_ok(client.put(f"/v1/users/{_sid(client, headers, default)}", json={"timezone": None}, headers=headers))
    assert _zones(runtime, key)[d1] == ""


def assert_ok(r) -> None:
    assert r.status_code == 200, r.text


_SIDS: dict[str, str] = {}


def _sid(client, headers, user_id: str) -> str:
    """The service's own id of a user (PUT /v1/users/{service_user_id} addresses users by it)."""
    if user_id not in _SIDS:
        _SIDS[user_id] = client.get(f"/v1/users/{user_id}", headers=headers).json()["service_user_id"]
    return _SIDS[user_id]


def test_a_zone_change_then_a_publish_reaches_the_user_once_in_its_new_zones_part(
    client, runtime, tenant, emulator, emu_runtime
):
    service, headers = tenant
    moved, moved_tokens = _user(client, headers, "Europe/Berlin", devices=2)
    _stays, (stays_token,) = _user(client, headers, "Europe/Berlin")
    _default, (default_token,) = _user(client, headers, None)
    _explicit, (explicit_token,) = _user(client, headers, "Asia/Seoul")  # the service's zone, named
    assert_ok(
        client.put(f"/v1/users/{_sid(client, headers, moved)}", json={"timezone": "America/New_York"}, headers=headers)
    )
    job = _publish(runtime, service)
    groups = {(g["zone"], g["lookup"]) for g in job.target["groups"]}
    assert groups == {("Europe/Berlin", False), ("America/New_York", False), ("", False), ("Asia/Seoul", False)}
    run_worker_until_idle(emu_runtime, [service])
    tokens = [*moved_tokens, stays_token, default_token, explicit_token]
    assert deliveries_per_token(emulator, tokens) == {t: 1 for t in tokens}
    # Each recipient was read by its own zone's tasks only: the moved user's two devices by New York's.
    assert _sent_by_zone(runtime, job) == {"America/New_York": 2, "Europe/Berlin": 1, "": 1, "Asia/Seoul": 1}
    # The default zone's users and the named Asia/Seoul user are released in the same part.
    parts = {g["zone"]: g["part"] for g in job.target["groups"]}
    assert parts[""] == parts["Asia/Seoul"] != parts["Europe/Berlin"]
    status = client.get(f"/v1/jobs/{job.job_id}", headers=headers).json()
    assert (status["state"], status["targeted"], status["sent"]) == ("done", 5, 5), status


def test_zone_changes_racing_with_subscribes_and_device_copies_leave_every_row_with_the_final_zone(
    client, runtime, tenant
):
    """The zone change holds the user's row exclusively while it rewrites the rows; subscribe and a
    device's copy hold it shared while they read the zone and write. Without that, a subscribe that
    read the old zone writes its rows after the change rewrote the others."""
    _service, headers = tenant
    key = _key(client, headers)
    user, _ = _user(client, headers, "Europe/Berlin", topic=None)
    sid = _sid(client, headers, user)
    zones = ["Asia/Tokyo", "America/Chicago", "Europe/Paris", "Australia/Perth", "UTC", "Asia/Dubai"] * 3
    topics = [f"t{i}" for i in range(12)]
    barrier = threading.Barrier(3)

    def change_zones() -> list[int]:
        barrier.wait()
        return [client.put(f"/v1/users/{sid}", json={"timezone": z}, headers=headers).status_code for z in zones]

    def subscribe() -> list[int]:
        barrier.wait()
        return [
            client.put(f"/v1/users/{user}/subscriptions/topic/news/{t}", headers=headers).status_code for t in topics
        ]

    def add_devices() -> list[int]:
        barrier.wait()
        return [
            client.post(
                f"/v1/users/{user}/devices", json={"token": random_token("r"), "os": "AOS"}, headers=headers
            ).status_code
            for _ in range(6)
        ]

    with ThreadPoolExecutor(3) as pool:
        results = [f.result() for f in [pool.submit(change_zones), pool.submit(subscribe), pool.submit(add_devices)]]
    assert set(results[0]) == {200} and set(results[1]) == {201} and set(results[2]) == {201}, results
    final = client.get(f"/v1/users/{user}", headers=headers).json()["timezone"]
    assert final == zones[-1]
    devices = client.get(f"/v1/users/{user}/devices", headers=headers).json()["items"]
    for t in topics:
        stored = _zones(runtime, key, t)
        assert set(stored) == {d["token"] for d in devices}, t  # every device has its row
        assert set(stored.values()) == {final}, (t, stored)


def test_rows_without_a_stored_zone_are_delivered_then_backfilled(client, runtime, tenant, emulator, emu_runtime):
    """A service whose rows were written before slot rows carried a zone (zone NULL, service not
    marked): its local-time jobs walk every row (the MySQL zone of each page's users decides); after
    ``notee backfill-zones`` the rows carry their zones, the service is marked, and the zone-sliced
    job reaches everyone once."""
    service, headers = tenant
    key = _key(client, headers)
    users = {z: _user(client, headers, z) for z in ("Europe/Berlin", "Asia/Kolkata", None)}
    tokens = [t for _, ts in users.values() for t in ts]
    # What an older version left: no zone on the rows, and the service not marked.
    table = f"{runtime.keyspaces.notification}.topic_notification"
    for row in runtime.cql.execute(
        f"SELECT no, device_token FROM {table} WHERE slot = 0 AND notification_key = %s AND topic = 'all'", (key,)
    ):
        runtime.cql.execute(
            f"DELETE zone FROM {table} WHERE slot = 0 AND notification_key = %s AND topic = 'all' AND no = %s"
            " AND device_token = %s",
            (key, row.no, row.device_token),
        )
    with runtime.sessions.begin() as s:
        s.execute(text("UPDATE service SET slot_zones = 0 WHERE service = :s"), {"s": service})
    assert set(_zones(runtime, key).values()) == {None}

    job = _publish(runtime, service)
    assert "groups" not in job.target  # every part walks every row
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, tokens) == {t: 1 for t in tokens}

    report = zone_backfill.backfill_zones(runtime, service=service)
    assert report == {"services": 1, "users": 3, "rows": 3}
    assert _zones(runtime, key) == {
        users["Europe/Berlin"][1][0]: "Europe/Berlin",
        users["Asia/Kolkata"][1][0]: "Asia/Kolkata",
        users[None][1][0]: "",
    }
    with runtime.sessions() as s:
        assert s.execute(text("SELECT slot_zones FROM service WHERE service = :s"), {"s": service}).scalar() == 1
    assert zone_backfill.backfill_zones(runtime, service=service)["services"] == 0  # marked: nothing to do

    second = _publish(runtime, service)
    assert {g["zone"] for g in second.target["groups"]} == {"Europe/Berlin", "Asia/Kolkata", ""}
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, tokens) == {t: 2 for t in tokens}
    assert _sent_by_zone(runtime, second) == {"Europe/Berlin": 1, "Asia/Kolkata": 1, "": 1}


def test_a_zone_with_users_of_their_own_quiet_hours_reads_their_clocks_others_do_not(
    client, runtime, tenant, emulator, emu_runtime
):
    """Quiet hours: a zone whose users all have the service's window is decided once per task (no
    MySQL query per page); a zone where some user has its own window is read by one task set per part
    its users land in, each keeping its part's recipients by their clocks."""
    service, headers = tenant
    _, (plain,) = _user(client, headers, "Europe/Berlin")
    sleeper, (asleep,) = _user(client, headers, "Asia/Tokyo")
    _, (awake,) = _user(client, headers, "Asia/Tokyo")
    r = client.put(
        f"/v1/users/{_sid(client, headers, sleeper)}",
        json={"quiet_hours": {"start": "08:30", "end": "10:00"}},  # 09:00 Tokyo is inside: held to 10:00
        headers=headers,
    )
    assert r.status_code == 200, r.text
    job = _publish(runtime, service)
    by_zone: dict[str, list[tuple[int, bool]]] = {}
    for g in job.target["groups"]:
        by_zone.setdefault(g["zone"], []).append((g["part"], g["lookup"]))
    assert [lookup for _, lookup in by_zone["Europe/Berlin"]] == [False]
    assert len(by_zone["Asia/Tokyo"]) == 2 and all(lookup for _, lookup in by_zone["Asia/Tokyo"])
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, [plain, asleep, awake]) == {plain: 1, asleep: 1, awake: 1}
    parts = [datetime.fromisoformat(p["at"]) for p in job.target["parts"]]
    tokyo_0900 = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)
    assert tokyo_0900 in parts and datetime(2026, 11, 1, 1, 0, tzinfo=UTC) in parts  # 09:00 and 10:00 JST


def test_a_local_time_job_reads_each_row_once_and_no_clock_per_page(
    client, runtime, tenant, emulator, emu_runtime, monkeypatch
):
    """The structural point of the stored zone (the CPU figure is ``local_time_cpu_ratio`` in
    docs/BENCHMARKS.md): over 7 parts, the zone-sliced job has Cassandra hand the worker each
    subscriber's row once and runs no MySQL clock query; the same job on rows without a stored zone
    (the fallback) reads every row once per part and queries the clocks for every page."""
    from notee.worker import reader as worker_reader

    service, headers = tenant
    zones = ["Europe/Berlin", "Asia/Kolkata", "America/New_York", "Australia/Sydney", "UTC", "Asia/Dubai", None]
    tokens = [t for z in zones for _ in range(3) for t in _user(client, headers, z)[1]]
    rows_read: list[int] = []
    clock_queries: list[int] = []
    original_stream, original_clocks = worker_reader.stream_recipients, worker_reader.user_clocks

    def counted_stream(*args, **kwargs):
        for page, state in original_stream(*args, **kwargs):
            rows_read.append(len(page))
            yield page, state

    def counted_clocks(*args, **kwargs):
        clock_queries.append(1)
        return original_clocks(*args, **kwargs)

    monkeypatch.setattr(worker_reader, "stream_recipients", counted_stream)
    monkeypatch.setattr(worker_reader, "user_clocks", counted_clocks)

    job = _publish(runtime, service)
    parts = len(job.target["parts"])
    assert parts == 7
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, tokens) == {t: 1 for t in tokens}
    assert (sum(rows_read), len(clock_queries)) == (len(tokens), 0)

    rows_read.clear()
    with runtime.sessions.begin() as s:  # the fallback: as if the rows carried no zone
        s.execute(text("UPDATE service SET slot_zones = 0 WHERE service = :s"), {"s": service})
    old = _publish(runtime, service)
    assert "groups" not in old.target
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, tokens) == {t: 2 for t in tokens}
    pages = len([n for n in rows_read if n])
    assert sum(rows_read) == parts * len(tokens)  # every part walks every row
    assert len(clock_queries) == pages  # and reads the clocks of every page's users
