"""Subscriptions through the HTTP API: happy paths, bad input writing nothing, tenant isolation,
bulk, and real concurrent requests.

The rules of this topic that need no server are in tests/unit/test_subscriptions_api.py."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import pytest
from fastapi import Request

from notee.api.deps import get_subscribe_groups
from notee.core.vocabulary import CycleTarget, Recipient, TopicTarget
from notee.store import templates_sql, users_sql
from notee.store.cql.counters import max_slot
from notee.store.cql.due import due_templates
from notee.store.cql.recipients import stream_recipients
from notee.usecases import reconcile
from tests.support.pins import SHORTCUT
from tests.support.registry import make_device, make_user, new_service, new_template, new_user, random_token


def recipients(st, key, target, service, method, type_):
    out = []
    for slot in range(max_slot(st, service, method, type_) + 1):
        for page, _ in stream_recipients(st, key, target, slot, 50):
            out += map(Recipient._make, page)
    return out


def test_topic_and_cycle_roundtrip(client, st, tenant):
    svc, h = tenant
    tok = random_token()
    u = new_user(client, h, devices=[(tok, "IOS")])
    news = new_template(client, h, "TOPIC", "news")
    new_template(client, h, "CYCLE", "remind")

    r = client.put(f"/v1/users/{u}/subscriptions/topic/news/{quote('스포츠 news')}", headers=h)
    assert r.status_code == 201 and r.json()["status"] == "subscribed" and r.json()["devices"] == 1
    r = client.put(f"/v1/users/{u}/subscriptions/topic/news/{quote('스포츠 news')}", headers=h)
    assert r.status_code == 200 and r.json()["status"] == "already_subscribed"
    r = client.put(
        f"/v1/users/{u}/subscriptions/cycle/remind", json={"days": ["mon", "FRI"], "hour": 9, "minute": 5}, headers=h
    )
    assert r.status_code == 201 and r.json()["schedule"] == "MON,FRI 09:05 Asia/Seoul"

    items = client.get(f"/v1/users/{u}/subscriptions", headers=h).json()["items"]
    assert {(i["method"], i["type"], i["topic"]) for i in items} == {
        ("TOPIC", "news", "스포츠 news"),
        ("CYCLE", "remind", None),
    }
    cyc = next(i for i in items if i["method"] == "CYCLE")
    assert cyc["schedule"] == {
        "days": ["MON", "FRI"],
        "hour": 9,
        "minute": 5,
        "timezone": "Asia/Seoul",
        "canonical": "MON,FRI 09:05 Asia/Seoul",
    }
    got = recipients(st, news["notification_key"], TopicTarget("스포츠 news"), svc, "TOPIC", "news")
    assert [(x.device_token, x.device_os, x.user_id) for x in got] == [(tok, "IOS", u)]

    assert client.delete(f"/v1/users/{u}/subscriptions/topic/news/{quote('스포츠 news')}", headers=h).status_code == 204
    assert client.delete(f"/v1/users/{u}/subscriptions/cycle/remind", headers=h).status_code == 204
    assert client.get(f"/v1/users/{u}/subscriptions", headers=h).json()["items"] == []
    assert st.user_rows(u, svc) == []


def test_registry_lifecycle_reflected(client, st, tenant):
    """Devices added/removed/rotated and users deleted through the registry API reach every table."""
    svc, h = tenant
    news = new_template(client, h, "TOPIC", "news")
    u = new_user(client, h)
    assert client.put(f"/v1/users/{u}/subscriptions/topic/news/t", headers=h).json()["devices"] == 0

    def toks():
        return sorted(
            x.device_token for x in recipients(st, news["notification_key"], TopicTarget("t"), svc, "TOPIC", "news")
        )

    a, b, c = random_token("a"), random_token("b"), random_token("c")
    for t in (a, b):
        assert client.post(f"/v1/users/{u}/devices", json={"token": t, "os": "AOS"}, headers=h).status_code in (
            200,
            201,
        )
    assert toks() == sorted([a, b])
    assert client.delete(f"/v1/users/{u}/devices/{a}", headers=h).status_code == 204
    assert toks() == [b]
    r = client.post("/v1/devices/rotate", json={"old_token": b, "new_token": c}, headers=h)
    assert r.status_code == 200, r.text
    assert toks() == [c]
    assert client.delete(f"/v1/users/{u}", headers=h).status_code == 204
    assert toks() == [] and st.user_rows(u, svc) == []
    assert st.counters(svc, "TOPIC", "news")[1] == 0


def _snapshot(runtime, st, svc, u):
    with runtime.sessions() as s:
        mysql = (len(users_sql.list_devices(s, svc, u)), len(templates_sql.list_templates(s, svc)))
    return (
        st.user_rows(u, svc),
        st.counters(svc, "TOPIC", "news"),
        st.counters(svc, "CYCLE", "remind"),
        due_templates(st, "Asia/Seoul", "MON", 0, 0),
        mysql,
    )


BAD = [
    ("topic too long", "put", "/topic/news/" + "x" * 51, None, 422),
    ("topic control char", "put", "/topic/news/a%07b", None, 422),
    ("hour 24", "put", "/cycle/remind", {"days": ["MON"], "hour": 24, "minute": 0}, 422),
    ("minute 60", "put", "/cycle/remind", {"days": ["MON"], "hour": 0, "minute": 60}, 422),
    ("unknown day", "put", "/cycle/remind", {"days": ["MON", "FUN"], "hour": 0, "minute": 0}, 422),
    ("unknown timezone", "put", "/cycle/remind", {"days": ["MON"], "hour": 0, "minute": 0, "timezone": "Mars/X"}, 422),
    ("extra field", "put", "/cycle/remind", {"days": ["MON"], "hour": 0, "minute": 0, "tz": "UTC"}, 422),
    ("no days", "put", "/cycle/remind", {"days": [], "hour": 0, "minute": 0}, 422),
    ("topic on cycle template", "put", "/topic/remind/t", None, 422),
    ("cycle on topic template", "put", "/cycle/news", {"days": ["MON"], "hour": 0, "minute": 0}, 422),
    ("unknown template", "put", "/topic/nope/t", None, 404),
    ("bad type", "put", "/topic/bad%20type/t", None, 422),
]


@pytest.mark.parametrize("name,verb,path,body,status", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_4xx_and_writes_nothing(client, runtime, st, tenant, name, verb, path, body, status):
    svc, h = tenant
    u = new_user(client, h, devices=[(random_token(), "AOS")])
    new_template(client, h, "TOPIC", "news")
    new_template(client, h, "CYCLE", "remind")
    before = _snapshot(runtime, st, svc, u)
    r = getattr(client, verb)(f"/v1/users/{u}/subscriptions{path}", headers=h, **({"json": body} if body else {}))
    assert r.status_code == status, r.text
    assert set(r.json()["error"]) == {"code", "message", "details"}
    assert _snapshot(runtime, st, svc, u) == before


def test_unknown_user_and_bad_bulk(client, runtime, st, tenant):
    svc, h = tenant
    new_template(client, h, "TOPIC", "news")
    ghost = str(uuid.uuid4())
    r = client.put(f"/v1/users/{ghost}/subscriptions/topic/news/t", headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.put("/v1/users/not-a-uuid/subscriptions/topic/news/t", headers=h).status_code == 422
    assert st.user_rows(ghost, svc) == []
    too_many = {"user_ids": [str(uuid.uuid4()) for _ in range(1001)]}
    assert client.post("/v1/topics/news/t/subscribers", json=too_many, headers=h).status_code == 422
    for bad in ([], ["not-a-uuid"], ["é" * 36], None):
        assert client.post("/v1/topics/news/t/subscribers", json={"user_ids": bad}, headers=h).status_code == 422
    assert (
        client.post("/v1/topics/news/" + "x" * 51 + "/subscribers", json={"user_ids": [ghost]}, headers=h).status_code
        == 422
    )
    assert st.counters(svc, "TOPIC", "news") == (st.counters(svc, "TOPIC", "news")[0], 0, 0)


def test_tenant_isolation(client, settings, st, tenant):
    _svc_a, ha = tenant
    svc_b = "T" + uuid.uuid4().hex[:12].upper()
    hb = new_service(client, settings, svc_b)
    ua = new_user(client, ha, devices=[(random_token(), "AOS")])
    new_template(client, ha, "TOPIC", "news")
    new_template(client, hb, "TOPIC", "news")
    assert client.put(f"/v1/users/{ua}/subscriptions/topic/news/t", headers=ha).status_code == 201
    # B cannot see, subscribe, unsubscribe or bulk-subscribe A's user
    assert client.get(f"/v1/users/{ua}/subscriptions", headers=hb).status_code == 404
    assert client.put(f"/v1/users/{ua}/subscriptions/topic/news/t", headers=hb).status_code == 404
    assert client.delete(f"/v1/users/{ua}/subscriptions/topic/news/t", headers=hb).status_code == 404
    r = client.post("/v1/topics/news/t/subscribers", json={"user_ids": [ua]}, headers=hb)
    assert r.json()["results"] == [{"user_id": ua, "status": "not_found"}]
    assert (
        st.user_rows(ua, svc_b) == []
        and len(client.get(f"/v1/users/{ua}/subscriptions", headers=ha).json()["items"]) == 1
    )
    assert client.get(f"/v1/users/{ua}/subscriptions").status_code == 401


def test_bulk_1000_users(client, runtime, st, tenant):
    svc, h = tenant
    news = new_template(client, h, "TOPIC", "news")
    users = [make_user(runtime, svc) for _ in range(999)]
    for u in users[:500]:
        make_device(runtime, svc, u, random_token("bulk"))
    ghost = str(uuid.uuid4())
    r = client.post("/v1/topics/news/big/subscribers", json={"user_ids": [*users, ghost]}, headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["subscribed"], body["already_subscribed"], body["not_found"]) == (999, 0, 1)
    assert [x["user_id"] for x in body["results"]] == [*users, ghost]
    assert len(recipients(st, news["notification_key"], TopicTarget("big"), svc, "TOPIC", "news")) == 500
    assert st.counters(svc, "TOPIC", "news")[1:] == (999, 500)
    again = client.post("/v1/topics/news/big/subscribers", json={"user_ids": users[:10]}, headers=h).json()
    assert again["already_subscribed"] == 10


def test_concurrent_topic_subscribes_of_one_user_all_land(client, runtime, st, tenant):
    svc, h = tenant
    news = new_template(client, h, "TOPIC", "news")
    tok = random_token()
    u = new_user(client, h, devices=[(tok, "AOS")])
    topics = [f"topic-{i}" for i in range(8)]
    barrier = threading.Barrier(len(topics))

    def go(topic):
        barrier.wait()
        return client.put(f"/v1/users/{u}/subscriptions/topic/news/{topic}", headers=h).status_code

    with ThreadPoolExecutor(len(topics)) as pool:
        assert list(pool.map(go, topics)) == [201] * len(topics)  # each topic is a new subscription
    listed = client.get(f"/v1/users/{u}/subscriptions", headers=h).json()["items"]
    assert sorted(i["topic"] for i in listed) == topics
    for t in topics:
        assert [
            x.device_token for x in recipients(st, news["notification_key"], TopicTarget(t), svc, "TOPIC", "news")
        ] == [tok]
    # The user's exclusive row lock serialises them: the first one written counts the user, once.
    assert st.counters(svc, "TOPIC", "news")[1] == 1
    assert {t: n for _, t, n in st.topic_subscribers(svc, "news")} == dict.fromkeys(topics, 1)
    reconcile.reconcile(runtime, service=svc)  # and reconcile finds nothing to repair
    assert st.counters(svc, "TOPIC", "news")[1] == 1


def test_identical_topic_subscribes_racing_count_the_user_once(client, runtime, st, tenant):
    """Eight identical first subscribes of one user at once: one 201, seven 200, every counter +1 once."""
    svc, h = tenant
    new_template(client, h, "TOPIC", "news")
    users = [new_user(client, h, devices=[(random_token(), "AOS")]) for _ in range(3)]
    for u in users:
        barrier = threading.Barrier(8)

        def go(_: int, u: str = u, barrier: threading.Barrier = barrier) -> int:
            barrier.wait()
            return client.put(f"/v1/users/{u}/subscriptions/topic/news/same", headers=h).status_code

        with ThreadPoolExecutor(8) as pool:
            assert sorted(pool.map(go, range(8))) == [200] * 7 + [201]
    assert st.counters(svc, "TOPIC", "news")[1] == len(users)
    assert {t: n for _, t, n in st.topic_subscribers(svc, "news")} == {"same": len(users)}
    assert all(len(st.user_rows(u, svc)) == 2 for u in users)  # the device row and the user-level row


def test_concurrent_cycle_resubscribes_converge_on_one_schedule(client, runtime, st, tenant):
    svc, h = tenant
    remind = new_template(client, h, "CYCLE", "remind")
    tok = random_token()
    u = new_user(client, h, devices=[(tok, "AOS")])
    hours = list(range(6))
    barrier = threading.Barrier(len(hours))

    def go(hour):
        barrier.wait()
        return client.put(
            f"/v1/users/{u}/subscriptions/cycle/remind",
            json={"days": ["TUE"], "hour": hour, "minute": 0, "timezone": "UTC"},
            headers=h,
        ).status_code

    with ThreadPoolExecutor(len(hours)) as pool:
        assert set(pool.map(go, hours)) <= {200, 201}  # each replaces (201) or meets (200) a racing schedule
    listed = client.get(f"/v1/users/{u}/subscriptions", headers=h).json()["items"]
    assert len(listed) == 1
    winner = listed[0]["schedule"]["hour"]
    for hour in hours:  # no orphan slot rows: only the winning schedule's bucket has the device
        got = [
            x.device_token
            for x in recipients(
                st, remind["notification_key"], CycleTarget("UTC", "TUE", hour, 0), svc, "CYCLE", "remind"
            )
        ]
        assert got == ([tok] if hour == winner else [])
    assert len(st.user_rows(u, svc)) == 2


def test_the_topic_subscribe_shortcut_answers_as_the_route(app, client, tenant):
    """``TopicSubscribeShortcut`` answers a subscribe whose path is canonical (a lowercase UUID)
    without FastAPI; the same request with the UUID in capitals goes through the route (FastAPI's
    UUID conversion gives the same user). Each pair of answers is the same: status, headers (but the
    request id) and body, for a new subscription, a repeat, an unknown user, a bad topic, a template
    of the other method and an unknown type. The shortcut is a performance detour past FastAPI
    (docs/BENCHMARKS.md, "Performance detours"; FastAPI and Starlette pinned: tests/unit/test_shortcut_pins.py):
    a difference fails naming it and the versions."""
    _, h = tenant
    new_template(client, h, "TOPIC", "news")
    new_template(client, h, "CYCLE", "remind")
    routed = []

    async def counting(request: Request):  # the route's own dependency: called only on FastAPI's path
        routed.append(request.url.path)
        return await get_subscribe_groups(request)

    app.dependency_overrides[get_subscribe_groups] = counting

    def answer(user_id: str, type_: str, topic: str) -> tuple[int, list[tuple[str, str]], bytes]:
        r = client.put(f"/v1/users/{user_id}/subscriptions/topic/{type_}/{topic}", headers=h)
        headers = sorted((k, v) for k, v in r.headers.multi_items() if k != "x-request-id")
        return r.status_code, headers, r.content

    try:
        shortcut_user = new_user(client, h, devices=[(random_token(), "AOS")])
        route_user = new_user(client, h, devices=[(random_token(), "IOS")])
        cases = [("news", "t"), ("news", "t"), ("news", "bad%01topic"), ("remind", "t"), ("nothing", "t")]
        for type_, topic in cases:
            before = len(routed)
            fast = answer(shortcut_user, type_, topic)
            assert len(routed) == before, f"{type_}/{topic} went through FastAPI"
            slow = answer(route_user.upper(), type_, topic)
            assert len(routed) == before + 1, f"{type_}/{topic} in capitals did not go through FastAPI"
            assert fast == slow, SHORTCUT.loud(f"{type_}/{topic}: the shortcut answered {fast}, the route {slow}")
        unknown = str(uuid.uuid4())
        fast, slow = answer(unknown, "news", "t"), answer(unknown.upper(), "news", "t")
        assert fast == slow, SHORTCUT.loud(f"an unknown user: the shortcut answered {fast}, the route {slow}")
        assert answer(unknown, "news", "t")[0] == 404 and answer(shortcut_user, "news", "t")[0] == 200
        assert len(routed) == len(cases) + 1  # the capitals of the unknown user
    finally:
        app.dependency_overrides.clear()
