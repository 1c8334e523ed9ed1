"""The operator views over HTTP (issue 16.3): subscriber counts per type and topic, the cycle calendar
and the delivery summary, for a service's key and for the admin; bad input is a 4xx in the error
format; a key sees only its own service."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from tests.support.registry import admin_headers, new_template, new_user, random_token


@pytest.fixture(scope="module")
def two(client, runtime, make_module_tenant):
    """Tenants A and B, each with a TOPIC and a CYCLE template, users subscribed to topics, a cycle
    schedule due a few minutes from now (database clock), and one publish job."""
    out = {}
    with runtime.sessions() as s:
        soon = s.execute(text("SELECT UTC_TIMESTAMP()")).scalar_one().replace(tzinfo=UTC) + timedelta(minutes=7)
    for name in ("A", "B"):
        service, auth = make_module_tenant()
        new_template(client, auth, "TOPIC", "news")
        new_template(client, auth, "CYCLE", "remind")
        users = [new_user(client, auth, devices=[(random_token(), "AOS")]) for _ in range(3)]
        topic = f"{name.lower()}-topic"
        for u in users:
            assert client.put(f"/v1/users/{u}/subscriptions/topic/news/{topic}", headers=auth).status_code == 201
        assert client.put(f"/v1/users/{users[0]}/subscriptions/topic/news/extra", headers=auth).status_code == 201
        r = client.put(
            f"/v1/users/{users[0]}/subscriptions/cycle/remind",
            json={"days": [soon.strftime("%a").upper()], "hour": soon.hour, "minute": soon.minute, "timezone": "UTC"},
            headers=auth,
        )
        assert r.status_code == 201, r.text
        r = client.post(f"/v1/topics/news/{topic}/publish", json={"variables": {"name": "x"}}, headers=auth)
        assert r.status_code == 202, r.text
        out[name] = {"service": service, "auth": auth, "topic": topic, "job": r.json()["job_id"], "users": users}
    out["soon"] = soon.replace(second=0, microsecond=0)
    yield out
    st = runtime.statements  # the shared due index must not keep these tenants' buckets
    stamp = time.time_ns() // 1000 + 1
    services = {out["A"]["service"], out["B"]["service"]}
    for tz, day, hour, minute, key, service in list(st.scan_due()):
        if service in services:
            st.delete_due(stamp, tz, day, hour, minute, key)


def test_subscriber_counts_per_type_and_topic(client, two):
    a = two["A"]
    r = client.get("/v1/subscriber-counts", headers=a["auth"])
    assert r.status_code == 200, r.text
    assert r.json() == {
        "items": [
            {"method": "CYCLE", "type": "remind", "subscribers": 1},
            {"method": "TOPIC", "type": "news", "subscribers": 3},
        ]
    }
    r = client.get("/v1/topics", headers=a["auth"])
    assert r.status_code == 200, r.text
    assert r.json() == {
        "items": [
            {"type": "news", "topic": a["topic"], "subscribers": 3},
            {"type": "news", "topic": "extra", "subscribers": 1},
        ],
        "next_cursor": None,
    }
    first = client.get("/v1/topics", params={"limit": 1}, headers=a["auth"]).json()
    assert [t["topic"] for t in first["items"]] == [a["topic"]] and first["next_cursor"]
    second = client.get("/v1/topics", params={"limit": 1, "cursor": first["next_cursor"]}, headers=a["auth"]).json()
    assert [t["topic"] for t in second["items"]] == ["extra"]
    assert client.get("/v1/topics", params={"type": "other"}, headers=a["auth"]).json()["items"] == []


def test_the_calendar_lists_the_coming_minute_with_its_subscriptions(client, settings, two):
    a, b = two["A"], two["B"]
    r = client.get("/v1/calendar", params={"hours": 1}, headers=a["auth"])
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["minutes"]) == 1 and body["truncated"] is False and body["subscriptions"] == 1
    minute = body["minutes"][0]
    assert datetime.fromisoformat(minute["minute"]) == two["soon"]
    [entry] = minute["templates"]
    assert entry["service"] == a["service"] and entry["notification_type"] == "remind"
    assert (entry["timezone"], entry["hour"], entry["minute"], entry["subscriptions"]) == (
        "UTC",
        two["soon"].hour,
        two["soon"].minute,
        1,
    )
    # The admin sees both services' schedules, or one.
    every = client.get("/v1/admin/calendar", params={"hours": 1}, headers=admin_headers(settings)).json()
    services = {t["service"] for m in every["minutes"] for t in m["templates"]}
    assert {a["service"], b["service"]} <= services
    only_b = client.get(
        "/v1/admin/calendar", params={"hours": 1, "service": b["service"]}, headers=admin_headers(settings)
    ).json()
    assert {t["service"] for m in only_b["minutes"] for t in m["templates"]} == {b["service"]}


def test_the_delivery_summary_counts_the_services_jobs(client, settings, two):
    a, b = two["A"], two["B"]
    r = client.get("/v1/delivery-summary", headers=a["auth"])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["service"] == a["service"] and len(body["hours"]) == 24
    assert body["totals"]["jobs"] == 1 and sum(body["jobs_by_state"].values()) == 1
    assert set(body["jobs_by_state"]) == {"scheduled", "queued", "running", "done", "failed", "expired", "cancelled"}
    assert sum(h["counts"]["jobs"] for h in body["hours"]) == 1
    assert len(client.get("/v1/delivery-summary", params={"hours": 3}, headers=a["auth"]).json()["hours"]) == 3
    every = _every_summary(client, settings)
    mine = {s["service"]: s for s in every if s["service"] in (a["service"], b["service"])}
    assert mine[a["service"]]["totals"]["jobs"] == 1 and mine[b["service"]]["totals"]["jobs"] == 1
    # A page of one: the response stays bounded however many services were active (the test database
    # keeps every earlier run's services), and the pages follow each other in id order.
    first = client.get("/v1/admin/delivery-summary", params={"limit": 1}, headers=admin_headers(settings)).json()
    assert len(first["items"]) == 1 and first["next_cursor"]
    after = client.get(
        "/v1/admin/delivery-summary",
        params={"limit": 1, "cursor": first["next_cursor"]},
        headers=admin_headers(settings),
    ).json()
    assert after["items"][0]["service"] > first["items"][0]["service"]
    bad = client.get("/v1/admin/delivery-summary", params={"limit": 201}, headers=admin_headers(settings))
    assert bad.status_code == 422, bad.text


def _every_summary(client, settings) -> list[dict]:
    """Every page of the admin's delivery summaries (200 services a page)."""
    items, cursor = [], None
    while True:
        params = {"limit": 200} | ({"cursor": cursor} if cursor else {})
        r = client.get("/v1/admin/delivery-summary", params=params, headers=admin_headers(settings))
        assert r.status_code == 200, r.text
        items += r.json()["items"]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return items


def test_a_key_sees_only_its_own_service(client, settings, two):
    a, b = two["A"], two["B"]
    for path, params in (
        ("/v1/subscriber-counts", {}),
        ("/v1/topics", {}),
        ("/v1/calendar", {"hours": 24}),
        ("/v1/delivery-summary", {}),
    ):
        theirs = client.get(path, params=params, headers=b["auth"])
        mine = client.get(path, params=params, headers=a["auth"])
        assert theirs.status_code == mine.status_code == 200, (path, mine.text)
        assert b["topic"] not in mine.text and b["service"] not in mine.text, path
        assert a["topic"] not in theirs.text and a["service"] not in theirs.text, path
    assert b["topic"] in client.get("/v1/topics", headers=b["auth"]).text  # the check above can fail
    # Service keys cannot use the admin variants.
    for path in ("/v1/admin/calendar", "/v1/admin/delivery-summary", f"/v1/admin/services/{b['service']}/topics"):
        assert client.get(path, headers=a["auth"]).status_code == 401
    admin = admin_headers(settings)
    r = client.get(f"/v1/admin/services/{b['service']}/topics", headers=admin)
    assert r.status_code == 200 and [t["topic"] for t in r.json()["items"]] == [b["topic"], "extra"]
    r = client.get(f"/v1/admin/services/{b['service']}/subscriber-counts", headers=admin)
    assert r.status_code == 200 and {"method": "TOPIC", "type": "news", "subscribers": 3} in r.json()["items"]


@pytest.mark.parametrize(
    ("path", "params", "status", "loc"),
    [
        ("/v1/calendar", {"hours": 0}, 422, ["query", "hours"]),
        ("/v1/calendar", {"hours": 24 * 7 + 1}, 422, ["query", "hours"]),
        ("/v1/calendar", {"hours": "soon"}, 422, ["query", "hours"]),
        ("/v1/delivery-summary", {"hours": 0}, 422, ["query", "hours"]),
        ("/v1/delivery-summary", {"hours": 24 * 14 + 1}, 422, ["query", "hours"]),
        ("/v1/topics", {"limit": 0}, 422, ["query", "limit"]),
        ("/v1/topics", {"limit": 1001}, 422, ["query", "limit"]),
        ("/v1/topics", {"type": "bad type!"}, 422, ["query", "type"]),
        ("/v1/topics", {"cursor": "not-a-cursor"}, 422, ["query", "cursor"]),
        ("/v1/topics", {"cursor": "WzFd"}, 422, ["query", "cursor"]),  # base64 of [1]: not ours
    ],
)
def test_bad_input_is_a_4xx_in_the_error_format(client, two, path, params, status, loc):
    r = client.get(path, params=params, headers=two["A"]["auth"])
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_input" and error["message"]
    assert error["details"][0]["loc"] == loc, error


def test_admin_variants_answer_404_for_an_unknown_service(client, settings):
    admin = admin_headers(settings)
    for path, params in (
        ("/v1/admin/services/NOSUCH1/topics", {}),
        ("/v1/admin/services/NOSUCH1/subscriber-counts", {}),
        ("/v1/admin/calendar", {"service": "NOSUCH1"}),
    ):
        r = client.get(path, params=params, headers=admin)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (path, r.text)
    r = client.get("/v1/admin/calendar", params={"service": "bad service"}, headers=admin)
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["query", "service"]
