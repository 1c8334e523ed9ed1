"""Users and devices on the real MariaDB: stable ids, idempotent devices, shared tokens, rotation,
deletion that leaves nothing personal, and the order of the subscription hooks."""

from __future__ import annotations

import urllib.parse

from sqlalchemy import select

from notee.api.routes import devices as devices_route
from notee.domain import templates, users
from notee.store import templates_sql, users_sql
from tests.support.registry import admin_headers, new_service, new_template, new_user, random_token


def _devices(client, headers, user_id):
    r = client.get(f"/v1/users/{user_id}/devices", headers=headers)
    assert r.status_code == 200, r.text
    return {d["token"]: d for d in r.json()["items"]}


def test_put_user_twice_returns_the_same_user_id(client, settings, service_id):
    h = new_service(client, settings, service_id)
    first = client.put("/v1/users/abc-user-id", json={"name": "daehwan"}, headers=h)
    second = client.put("/v1/users/abc-user-id", json={"name": "Daehwan K"}, headers=h)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["user_id"] == second.json()["user_id"]
    got = client.get(f"/v1/users/{first.json()['user_id']}", headers=h).json()
    assert got["name"] == "Daehwan K" and got["service_user_id"] == "abc-user-id"
    other = client.put("/v1/users/another", json={}, headers=h).json()
    assert other["user_id"] != got["user_id"] and other["name"] == ""


def test_put_user_without_a_field_leaves_it_as_it_was(client, settings, service_id):
    """PUT /v1/users/{id} is an upsert that never wipes what it was not given; a field sent as null
    is cleared."""
    h = new_service(client, settings, service_id)
    body = {
        "name": "Alice",
        "locale": "de-DE",
        "timezone": "Europe/Berlin",
        "quiet_hours": {"start": "22:00", "end": "07:00"},
    }
    user_id = client.put("/v1/users/alice", json=body, headers=h).json()["user_id"]
    assert client.put("/v1/users/alice", json={}, headers=h).status_code == 200
    got = client.get(f"/v1/users/{user_id}", headers=h).json()
    assert {k: got[k] for k in body} == body
    client.put("/v1/users/alice", json={"locale": None, "name": "Alice B"}, headers=h)
    got = client.get(f"/v1/users/{user_id}", headers=h).json()
    assert (got["name"], got["locale"], got["timezone"]) == ("Alice B", None, "Europe/Berlin")


def test_same_service_user_id_in_two_services_are_two_users(client, settings, service_id):
    a = new_service(client, settings, service_id)
    b = new_service(client, settings, service_id + "B")
    assert new_user(client, a, "same") != new_user(client, b, "same")


def test_unknown_user_is_404(client, settings, service_id):
    h = new_service(client, settings, service_id)
    missing = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
    assert client.get(f"/v1/users/{missing}", headers=h).status_code == 404
    assert client.delete(f"/v1/users/{missing}", headers=h).status_code == 404
    assert client.get(f"/v1/users/{missing}/devices", headers=h).status_code == 404
    r = client.post(f"/v1/users/{missing}/devices", json={"token": random_token(), "os": "IOS"}, headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_devices_register_idempotently_and_update(client, settings, runtime, service_id):
    h = new_service(client, settings, service_id)
    user_id = new_user(client, h)
    token = random_token()
    body = {"token": token, "os": "AOS", "region": "KR"}
    first = client.post(f"/v1/users/{user_id}/devices", json=body, headers=h)
    again = client.post(f"/v1/users/{user_id}/devices", json=body, headers=h)
    moved = client.post(f"/v1/users/{user_id}/devices", json=body | {"region": "JP"}, headers=h)
    assert (first.status_code, again.status_code, moved.status_code) == (201, 200, 200)
    devices = _devices(client, h, user_id)
    assert list(devices) == [token]
    assert devices[token]["region"] == "JP" and devices[token]["created_at"] == first.json()["created_at"]
    with runtime.sessions() as s:
        assert len(users_sql.list_devices(s, service_id, user_id)) == 1


def test_token_shared_by_two_users_and_delete_one(client, settings, service_id):
    h = new_service(client, settings, service_id)
    token = "fcm:APA91b/with+slash=" + random_token()
    a = new_user(client, h, devices=[(token, "AOS")])
    b = new_user(client, h, devices=[(token, "AOS"), (random_token(), "IOS")])
    assert token in _devices(client, h, a) and token in _devices(client, h, b)
    path = urllib.parse.quote(token, safe="")
    assert client.delete(f"/v1/users/{a}/devices/{path}", headers=h).status_code == 204
    assert client.delete(f"/v1/users/{a}/devices/{path}", headers=h).status_code == 404
    assert token not in _devices(client, h, a)
    assert token in _devices(client, h, b) and len(_devices(client, h, b)) == 2


def test_rotation_replaces_the_token_for_every_holder_keeping_its_place(client, settings, service_id):
    h = new_service(client, settings, service_id)
    old, new, other = random_token("old"), random_token("new"), random_token()
    a = new_user(client, h, devices=[(old, "IOS"), (other, "AOS")])
    b = new_user(client, h, devices=[(old, "IOS")])
    c = new_user(client, h, devices=[(old, "IOS"), (new, "IOS")])  # already holds the new token
    before = {u: _devices(client, h, u) for u in (a, b, c)}
    r = client.post("/v1/devices/rotate", json={"old_token": old, "new_token": new}, headers=h)
    assert r.status_code == 200, r.text
    assert r.json() == {"rotated": 3}
    for u in (a, b):
        after = _devices(client, h, u)
        assert old not in after and after[new]["created_at"] == before[u][old]["created_at"]
        assert after[new]["os"] == "IOS"
    assert set(_devices(client, h, a)) == {new, other}
    assert set(_devices(client, h, c)) == {new}
    # rotating again: the old token is gone
    again = client.post("/v1/devices/rotate", json={"old_token": old, "new_token": new}, headers=h)
    assert again.status_code == 404


def test_rotation_stays_inside_the_service(client, settings, service_id):
    a = new_service(client, settings, service_id)
    b = new_service(client, settings, service_id + "B")
    token, new = random_token(), random_token()
    ua = new_user(client, a, devices=[(token, "AOS")])
    assert client.post("/v1/devices/rotate", json={"old_token": token, "new_token": new}, headers=b).status_code == 404
    assert set(_devices(client, a, ua)) == {token}


def test_delete_user_leaves_nothing_personal(client, settings, runtime, service_id):
    h = new_service(client, settings, service_id)
    token = random_token()
    user_id = new_user(client, h, "personal-id", name="Kim", devices=[(token, "IOS"), (random_token(), "AOS")])
    keeper = new_user(client, h, devices=[(token, "IOS")])
    assert client.delete(f"/v1/users/{user_id}", headers=h).status_code == 204
    assert client.get(f"/v1/users/{user_id}", headers=h).status_code == 404
    with runtime.sessions() as s:
        assert (
            s.execute(
                select(users_sql.user_t).where(
                    users_sql.user_t.c.service_user_id == "personal-id", users_sql.user_t.c.service == service_id
                )
            ).first()
            is None
        )
        assert s.execute(select(users_sql.device_t).where(users_sql.device_t.c.user_id == user_id)).first() is None
        assert [
            r.user_id
            for r in s.execute(select(users_sql.device_t.c.user_id).where(users_sql.device_t.c.device_token == token))
        ] == [keeper]
    # the same service id registers again as a new user
    assert new_user(client, h, "personal-id") != user_id


class _Recorder:
    """Stands in for the subscriptions module to check *when* its hooks run: what
    MySQL holds, seen from another connection, at the moment of each call."""

    def __init__(self, runtime):
        self.runtime, self.calls = runtime, []

    def _seen(self, service, user_id, token=None):
        with self.runtime.sessions() as s:
            if token is None:
                return users_sql.get_user(s, service, user_id) is not None
            return users_sql.get_device(s, service, user_id, token) is not None

    def on_user_deleted(self, session, st, service, user_id):
        self.calls.append(("user_deleted", self._seen(service, user_id)))

    def on_device_added(self, session, st, service, user_id, token, os):
        self.calls.append(("device_added", self._seen(service, user_id, token), os))

    def on_device_removed(self, st, service, user_id, token):
        self.calls.append(("device_removed", self._seen(service, user_id, token)))

    def on_token_rotated(self, session, st, service, old, new, holders=None):
        with self.runtime.sessions() as s:
            self.calls.append(("token_rotated", bool(users_sql.holders_of_token(s, service, old))))

    def on_template_deleted(self, st, service, method, type_, key):
        with self.runtime.sessions() as s:
            self.calls.append(("template_deleted", templates_sql.get_template(s, service, method, type_) is not None))


def test_subscription_hooks_run_in_store_order(client, settings, runtime, service_id, monkeypatch):
    """Additions: MySQL committed before Cassandra (the hook sees the row). Removals: Cassandra
    first (the hook still sees the row), then MySQL."""
    recorder = _Recorder(runtime)
    monkeypatch.setattr(users, "subscriptions", recorder)  # users, devices, rotation
    monkeypatch.setattr(templates, "subscriptions", recorder)  # template deletion
    monkeypatch.setattr(devices_route, "subscriptions", recorder)  # registration: the route runs it after its commit
    h = new_service(client, settings, service_id)
    token, new = random_token(), random_token()
    user_id = new_user(client, h, devices=[(token, "IOS")])
    client.post(f"/v1/users/{user_id}/devices", json={"token": token, "os": "AOS"}, headers=h)  # again: hook again
    client.post("/v1/devices/rotate", json={"old_token": token, "new_token": new}, headers=h)
    client.delete(f"/v1/users/{user_id}/devices/{new}", headers=h)
    client.put("/v1/templates/TOPIC/news", json={"title": "t", "body": "b"}, headers=h)
    client.delete("/v1/templates/TOPIC/news", headers=h)
    client.delete(f"/v1/users/{user_id}", headers=h)
    assert recorder.calls == [
        ("device_added", True, "IOS"),
        ("device_added", True, "AOS"),
        ("token_rotated", True),
        ("device_removed", True),
        ("template_deleted", True),
        ("user_deleted", True),
    ]


def test_subscriptions_follow_devices_rotation_and_user_deletion(client, settings, runtime, service_id):
    """The registry drives the real subscriptions hooks: Cassandra follows every change."""
    from notee.domain import topic_subscriptions

    h = new_service(client, settings, service_id)
    key = new_template(client, h, "TOPIC", "news")["notification_key"]
    t1, t2, t3 = random_token("one"), random_token("two"), random_token("three")
    user_id = new_user(client, h, devices=[(t1, "IOS")])
    with runtime.sessions() as session:
        topic_subscriptions.subscribe_topic(session, runtime.statements, service_id, user_id, "news", "sports")
    ks = runtime.keyspaces.notification

    def slot_tokens() -> set[str]:
        rows = runtime.cql.execute(
            f"SELECT device_token FROM {ks}.topic_notification WHERE slot = 0 AND notification_key = %s AND topic = %s",
            (key, "sports"),
        )
        return {r.device_token for r in rows}

    def index_rows() -> list:
        return list(
            runtime.cql.execute(
                f"SELECT * FROM {ks}.notification_per_user WHERE user_id = %s AND service = %s", (user_id, service_id)
            )
        )

    assert slot_tokens() == {t1}
    client.post(f"/v1/users/{user_id}/devices", json={"token": t2, "os": "AOS"}, headers=h)
    assert slot_tokens() == {t1, t2}
    client.post("/v1/devices/rotate", json={"old_token": t1, "new_token": t3}, headers=h)
    assert slot_tokens() == {t2, t3}
    assert client.delete(f"/v1/users/{user_id}/devices/{t2}", headers=h).status_code == 204
    assert slot_tokens() == {t3}
    assert index_rows()
    assert client.delete(f"/v1/users/{user_id}", headers=h).status_code == 204
    assert slot_tokens() == set()
    assert index_rows() == []


def test_every_user_route_takes_the_services_own_id(client, settings, service_id):
    """``ext:<service_user_id>`` names the same user as its platform user_id on every
    /v1/users/{user_id}/... route: devices, subscriptions, the single send, reading and deleting."""
    h = new_service(client, settings, service_id)
    dry = client.patch(
        f"/v1/admin/services/{service_id}", json={"delivery_mode": "dry_run"}, headers=admin_headers(settings)
    )
    assert dry.status_code == 200, dry.text  # the single send is recorded, not sent
    new_template(client, h, "TOPIC", "news")
    new_template(client, h, "CYCLE", "digest")
    new_template(client, h, "SINGLE", "hello")
    token = random_token("ext")
    user_id = new_user(client, h, "alice@example.com", devices=[(token, "AOS")])
    ext = "/v1/users/ext:alice@example.com"
    assert client.get(ext, headers=h).json() == client.get(f"/v1/users/{user_id}", headers=h).json()
    devices = client.get(f"{ext}/devices", headers=h)
    assert devices.status_code == 200 and [d["token"] for d in devices.json()["items"]] == [token]
    second = random_token("ext2")
    assert client.post(f"{ext}/devices", json={"token": second, "os": "IOS"}, headers=h).status_code == 201
    assert client.put(f"{ext}/subscriptions/topic/news/sports", headers=h).status_code == 201
    cycle = {"days": ["MON"], "hour": 9, "minute": 0}
    assert client.put(f"{ext}/subscriptions/cycle/digest", json=cycle, headers=h).status_code == 201
    listed = client.get(f"/v1/users/{user_id}/subscriptions", headers=h).json()["items"]
    assert sorted(s["type"] for s in listed) == ["digest", "news"]
    assert client.get(f"{ext}/subscriptions", headers=h).json()["items"] == listed
    sent = client.post(f"{ext}/send", json={"type": "hello", "variables": {"name": "A"}}, headers=h)
    assert sent.status_code == 200 and (sent.json()["devices"], sent.json()["dry_run"]) == (2, True), sent.text
    assert client.delete(f"{ext}/subscriptions/topic/news/sports", headers=h).status_code == 204
    assert client.delete(f"{ext}/subscriptions/cycle/digest", headers=h).status_code == 204
    assert client.delete(f"{ext}/devices/{second}", headers=h).status_code == 204
    assert client.delete(ext, headers=h).status_code == 204
    assert client.get(f"/v1/users/{user_id}", headers=h).status_code == 404


def test_an_unknown_or_another_services_own_id_is_404_and_a_bad_one_422(client, settings, service_id):
    a = new_service(client, settings, service_id)
    b = new_service(client, settings, service_id + "B")
    new_user(client, b, "bob")
    for headers, ref in ((a, "ext:bob"), (a, "ext:nobody")):  # b's user is unknown to a, as a missing one
        r = client.get(f"/v1/users/{ref}/devices", headers=headers)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    for bad in ("ext:", "bob", "ext:" + "x" * 192, "ext:a%09b"):
        r = client.get(f"/v1/users/{bad}/subscriptions", headers=a)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", (bad, r.text)


def test_users_are_listed_newest_first_a_page_at_a_time_with_filters(client, settings, service_id):
    """GET /v1/users: newest first, keyset pages (a user added while paging does not shift them),
    filtered by creation time, by having devices and by platform; a foreign cursor is 422."""
    h = new_service(client, settings, service_id)
    ios, aos = random_token("ios"), random_token("aos")
    ids = [new_user(client, h, f"u{i}") for i in range(5)]
    client.post(f"/v1/users/{ids[1]}/devices", json={"token": ios, "os": "IOS"}, headers=h)
    client.post(f"/v1/users/{ids[3]}/devices", json={"token": aos, "os": "AOS"}, headers=h)

    def listed(**query) -> tuple[list[str], str | None]:
        r = client.get("/v1/users", params=query, headers=h)
        assert r.status_code == 200, r.text
        return [u["user_id"] for u in r.json()["items"]], r.json()["next_cursor"]

    first, cursor = listed(limit=2)
    assert first == ids[::-1][:2] and cursor is not None
    new_user(client, h, "late")  # newer than every listed user: the next pages do not see it
    second, cursor = listed(limit=2, cursor=cursor)
    third, end = listed(limit=2, cursor=cursor)
    assert second + third == ids[::-1][2:] and end is None
    assert listed(has_devices="true")[0] == [ids[3], ids[1]]
    assert set(listed(has_devices="false")[0]) == set(ids) - {ids[1], ids[3]} | {listed(limit=1)[0][0]}
    assert listed(platform="IOS")[0] == [ids[1]]
    since = client.get(f"/v1/users/{ids[3]}", headers=h).json()["created_at"]
    assert listed(created_since=since)[0][-2:] == [ids[4], ids[3]]
    for bad in ({"cursor": "bm90LW91cnM="}, {"platform": "WIN"}, {"created_since": "2026-01-01"}, {"limit": 0}):
        r = client.get("/v1/users", params=bad, headers=h)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", (bad, r.text)


def test_another_services_users_are_never_listed(client, settings, service_id):
    a = new_service(client, settings, service_id)
    b = new_service(client, settings, service_id + "B")
    mine = new_user(client, a, "mine")
    new_user(client, b, "theirs")
    assert [u["user_id"] for u in client.get("/v1/users", headers=a).json()["items"]] == [mine]
