"""Templates on the real MariaDB and the Cassandra version counter: stable notification_key,
version bumps, list/get/delete."""

from __future__ import annotations

from notee.store import templates_sql
from tests.support.registry import new_service, new_template


def test_create_update_keeps_key_and_bumps_version(client, settings, runtime, service_id):
    h = new_service(client, settings, service_id)
    created = client.put("/v1/templates/TOPIC/news", json={"title": "Hi {{name}}", "body": "line 1\nline 2"}, headers=h)
    assert created.status_code == 201, created.text
    t1 = created.json()
    assert (t1["method"], t1["type"], t1["priority"], t1["data"], t1["ttl_seconds"]) == (
        "TOPIC",
        "news",
        "high",
        None,
        None,
    )
    assert t1["body"] == "line 1\nline 2"
    updated = client.put(
        "/v1/templates/TOPIC/news",
        json={"title": "New", "body": "b", "data": {"deep": "app://x"}, "ttl_seconds": 3600, "priority": "normal"},
        headers=h,
    )
    assert updated.status_code == 200
    t2 = updated.json()
    assert t2["notification_key"] == t1["notification_key"]
    assert t2["version"] == t1["version"] + 1
    assert (t2["title"], t2["data"], t2["ttl_seconds"], t2["priority"]) == ("New", {"deep": "app://x"}, 3600, "normal")
    assert t2["created_at"] == t1["created_at"]
    got = client.get("/v1/templates/TOPIC/news", headers=h).json()
    assert got == t2
    assert runtime.statements.counters(service_id, "TOPIC", "news")[0] == t2["version"]


def test_same_type_under_two_methods_and_list(client, settings, service_id):
    h = new_service(client, settings, service_id)
    a = new_template(client, h, "TOPIC", "daily")
    b = new_template(client, h, "CYCLE", "daily")
    c = new_template(client, h, "SINGLE", "otp.code-1")
    assert len({a["notification_key"], b["notification_key"], c["notification_key"]}) == 3
    items = client.get("/v1/templates", headers=h).json()["items"]
    assert [(t["method"], t["type"]) for t in items] == [
        ("CYCLE", "daily"),
        ("SINGLE", "otp.code-1"),
        ("TOPIC", "daily"),
    ]
    assert all(t["version"] >= 1 for t in items)


def test_empty_list(client, settings, service_id):
    h = new_service(client, settings, service_id)
    assert client.get("/v1/templates", headers=h).json() == {"items": []}


def test_delete_template(client, settings, runtime, service_id):
    h = new_service(client, settings, service_id)
    t = new_template(client, h, "CYCLE", "reminder")
    assert client.delete("/v1/templates/CYCLE/reminder", headers=h).status_code == 204
    assert client.get("/v1/templates/CYCLE/reminder", headers=h).status_code == 404
    assert client.delete("/v1/templates/CYCLE/reminder", headers=h).status_code == 404
    with runtime.sessions() as s:
        assert templates_sql.get_template_by_key(s, t["notification_key"]) is None
    # created again: a new key; the counter row is kept, so the version keeps growing
    again = new_template(client, h, "CYCLE", "reminder")
    assert again["notification_key"] != t["notification_key"]
    assert again["version"] > t["version"]


def test_unknown_template_is_404(client, settings, service_id):
    h = new_service(client, settings, service_id)
    r = client.get("/v1/templates/TOPIC/nothing", headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_template_by_key_for_fanout(client, settings, runtime, service_id):
    h = new_service(client, settings, service_id)
    t = new_template(client, h, "SINGLE", "welcome", title="Welcome")
    with runtime.sessions() as s:
        row = templates_sql.get_template_by_key(s, t["notification_key"])
    assert (row.service, row.notification_method, row.notification_type, row.title) == (
        service_id,
        "SINGLE",
        "welcome",
        "Welcome",
    )
