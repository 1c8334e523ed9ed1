"""A user's tags through the API on the real MariaDB (docs/AUDIENCES.md "Tags"): read, merge patch,
replace, delete one key, the tags of PUT /v1/users/{id}; the key limit checked against the result;
bad input 422 naming the key with nothing written; another tenant's users 404 with nothing changed;
tags deleted with their user; two writers of one user taking turns."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import text

from tests.support.stores import changes, snapshot

MISSING = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
TYPED = {"plan": "pro", "age": 31, "score": 4.5, "beta": True, "renews": {"timestamp": "2026-12-31T00:00:00Z"}}


def _tags(client, headers, user: str) -> dict[str, Any]:
    r = client.get(f"/v1/users/{user}/tags", headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json()["tags"])


def _rows(runtime, service: str, user_id: str | None = None) -> list[tuple[Any, ...]]:
    query = "SELECT user_id, tag_key, kind, value_str, value_num FROM user_tag WHERE service = :s"
    params = {"s": service}
    if user_id is not None:
        query += " AND user_id = :u"
        params["u"] = user_id
    with runtime.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(query + " ORDER BY user_id, tag_key"), params)]


def test_a_patch_sets_typed_values_and_null_removes(client, runtime, tenant):
    service, h = tenant
    user = tenant.user("alice")
    assert client.get(f"/v1/users/{user}/tags", headers=h).json() == {"user_id": user, "tags": {}}
    r = client.patch(f"/v1/users/{user}/tags", json=TYPED, headers=h)
    assert r.status_code == 200, r.text
    assert r.json() == {"user_id": user, "tags": TYPED}
    assert list(r.json()["tags"]) == sorted(TYPED)  # keys in order
    assert _tags(client, h, user) == TYPED
    stored = {row[1]: row[2:] for row in _rows(runtime, service, user)}
    assert stored["plan"] == ("s", "pro", None)
    assert stored["age"] == ("n", None, 31.0)
    assert stored["beta"] == ("b", None, 1.0)
    assert stored["renews"] == ("t", None, 1798675200.0)
    # RFC 7396: given keys set, null removes, the others stay; the merge-patch media type is taken too
    r = client.patch(
        f"/v1/users/{user}/tags",
        content=b'{"plan": "free", "age": null, "absent": null}',
        headers=h | {"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["tags"] == {k: v for k, v in TYPED.items() if k != "age"} | {"plan": "free"}


def test_put_replaces_them_all_and_delete_removes_one(client, tenant):
    _, h = tenant
    user = tenant.user()
    client.patch(f"/v1/users/{user}/tags", json={"a": 1, "b": 2}, headers=h)
    r = client.put(f"/v1/users/{user}/tags", json={"b": "two", "c": False}, headers=h)
    assert r.status_code == 200 and r.json()["tags"] == {"b": "two", "c": False}
    assert client.delete(f"/v1/users/{user}/tags/b", headers=h).status_code == 204
    assert _tags(client, h, user) == {"c": False}
    again = client.delete(f"/v1/users/{user}/tags/b", headers=h)
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"
    assert client.put(f"/v1/users/{user}/tags", json={}, headers=h).json()["tags"] == {}


def test_the_service_user_id_names_the_user_too(client, tenant):
    _, h = tenant
    user = tenant.user("bob.42")
    assert client.patch("/v1/users/ext:bob.42/tags", json={"plan": "pro"}, headers=h).json()["user_id"] == user
    assert client.put("/v1/users/ext:bob.42/tags", json={"x": 1}, headers=h).status_code == 200
    assert client.delete("/v1/users/ext:bob.42/tags/x", headers=h).status_code == 204
    assert client.get("/v1/users/ext:bob.42/tags", headers=h).json() == {"user_id": user, "tags": {}}
    assert client.get("/v1/users/ext:nobody/tags", headers=h).status_code == 404
    assert client.patch("/v1/users/ext:nobody/tags", json={"a": 1}, headers=h).status_code == 404


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"ok": 1, "bad key": 1}, ["body", "bad key"]),
        ({"k" * 65: 1}, ["body", "k" * 65]),
        ({"s": "x" * 256}, ["body", "s"]),
        ({"s": "a\u0007b"}, ["body", "s"]),
        ({"list": [1]}, ["body", "list"]),
        ({"obj": {"a": 1}}, ["body", "obj"]),
        ({"t": {"timestamp": "2026-12-31"}}, ["body", "t"]),
        ({"t": {"timestamp": "2026-02-30T00:00:00Z"}}, ["body", "t"]),
        ([1, 2], ["body"]),
    ],
)
def test_bad_input_is_422_naming_the_key_and_writes_nothing(client, runtime, tenant, body, loc):
    service, h = tenant
    user = tenant.user()
    client.patch(f"/v1/users/{user}/tags", json={"keep": "me"}, headers=h)
    before = snapshot(runtime, service)
    for method in ("patch", "put"):
        r = client.request(method.upper(), f"/v1/users/{user}/tags", json=body, headers=h)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "invalid_input"
        assert loc in [d["loc"] for d in r.json()["error"]["details"]]
    r = client.put("/v1/users/" + "carol", json={"tags": body}, headers=h)
    assert r.status_code == 422
    assert changes(before, snapshot(runtime, service)) == {}


def test_not_a_number_is_refused(client, tenant):
    _, h = tenant
    user = tenant.user()
    for raw in (b'{"n": NaN}', b'{"n": Infinity}', b'{"n": 1e999}'):
        r = client.patch(f"/v1/users/{user}/tags", content=raw, headers=h | {"Content-Type": "application/json"})
        assert r.status_code == 422, (raw, r.text)
    assert _tags(client, h, user) == {}


def test_null_is_not_a_value_of_a_replacement(client, tenant):
    _, h = tenant
    user = tenant.user()
    r = client.put(f"/v1/users/{user}/tags", json={"a": None}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["body", "a"]


def test_a_bad_key_in_the_path_is_422(client, tenant):
    _, h = tenant
    user = tenant.user()
    assert client.delete(f"/v1/users/{user}/tags/a%20b", headers=h).status_code == 422


def test_the_key_limit_is_checked_against_the_result(client, runtime, tenant):
    service, h = tenant
    user = tenant.user()
    full = {f"k{i:03d}": i for i in range(100)}  # NOTEE_TAGS_PER_USER_MAX's default
    assert client.put(f"/v1/users/{user}/tags", json=full, headers=h).status_code == 200
    before = snapshot(runtime, service)
    r = client.patch(f"/v1/users/{user}/tags", json={"one": 1, "k000": "updated"}, headers=h)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"][0]["type"] == "too_many_tags"
    assert client.put(f"/v1/users/{user}/tags", json=full | {"one": 1}, headers=h).status_code == 422
    assert client.put(f"/v1/users/{_ext(client, h, user)}", json={"tags": {"one": 1}}, headers=h).status_code == 422
    assert changes(before, snapshot(runtime, service)) == {}
    # updating held keys, and one out for one in, fit
    r = client.patch(f"/v1/users/{user}/tags", json={"k000": "updated", "k001": None, "one": 1}, headers=h)
    assert r.status_code == 200 and len(r.json()["tags"]) == 100


def _ext(client, h, user: str) -> str:
    return str(client.get(f"/v1/users/{user}", headers=h).json()["service_user_id"])


def test_the_limit_is_the_setting(client, runtime, tenant, monkeypatch):
    _, h = tenant
    user = tenant.user()
    monkeypatch.setattr(runtime.settings, "tags_per_user_max", 2)
    assert client.patch(f"/v1/users/{user}/tags", json={"a": 1, "b": 2}, headers=h).status_code == 200
    r = client.patch(f"/v1/users/{user}/tags", json={"c": 3}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["details"][0]["ctx"] == {"limit": 2}


def test_put_user_takes_a_merge_patch_of_its_tags(client, runtime, tenant):
    service, h = tenant
    r = client.put("/v1/users/dave", json={"name": "Dave", "tags": {"plan": "pro", "age": 40}}, headers=h)
    assert r.status_code == 201, r.text
    user = r.json()["user_id"]
    assert "tags" not in r.json()  # the user's answers leave tags out: GET .../tags has them
    assert _tags(client, h, user) == {"plan": "pro", "age": 40}
    assert client.put("/v1/users/dave", json={"name": "D"}, headers=h).status_code == 200  # absent: unchanged
    assert _tags(client, h, user) == {"plan": "pro", "age": 40}
    client.put("/v1/users/dave", json={"tags": {"age": None, "x": True}}, headers=h)
    assert _tags(client, h, user) == {"plan": "pro", "x": True}
    r = client.put("/v1/users/dave", json={"tags": {"bad key": 1}}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["body", "tags", "bad key"]
    client.put("/v1/users/dave", json={"tags": None}, headers=h)  # null: all of them go
    assert _tags(client, h, user) == {}
    assert _rows(runtime, service, user) == []


def test_deleting_a_user_deletes_its_tags(client, runtime, tenant):
    service, h = tenant
    gone, kept = tenant.user(), tenant.user()
    for user in (gone, kept):
        client.patch(f"/v1/users/{user}/tags", json={"a": 1, "b": "x"}, headers=h)
    assert client.delete(f"/v1/users/{gone}", headers=h).status_code == 204
    assert {row[0] for row in _rows(runtime, service)} == {kept}
    assert client.get(f"/v1/users/{gone}/tags", headers=h).status_code == 404
    assert client.patch(f"/v1/users/{gone}/tags", json={"a": 2}, headers=h).status_code == 404
    assert {row[0] for row in _rows(runtime, service)} == {kept}


def test_another_tenants_user_is_404_and_nothing_changes(client, runtime, tenant, make_tenant):
    service, h = tenant
    user = tenant.user("shared-name")
    client.patch(f"/v1/users/{user}/tags", json={"secret": "mine"}, headers=h)
    other = make_tenant()
    other.user("someone-else")
    before = snapshot(runtime, service)
    for ref in (user, "ext:shared-name"):
        calls = [
            client.get(f"/v1/users/{ref}/tags", headers=other.headers),
            client.patch(f"/v1/users/{ref}/tags", json={"secret": "theirs"}, headers=other.headers),
            client.put(f"/v1/users/{ref}/tags", json={}, headers=other.headers),
            client.delete(f"/v1/users/{ref}/tags/secret", headers=other.headers),
        ]
        for r in calls:
            assert r.status_code == 404, r.text
            assert "mine" not in r.text and "secret" not in r.text
    assert changes(before, snapshot(runtime, service)) == {}
    assert _rows(runtime, other.service) == []
    assert client.get(f"/v1/users/{MISSING}/tags", headers=h).status_code == 404


def test_two_writers_of_one_user_take_turns_under_the_limit(client, runtime, tenant, monkeypatch):
    """Two PATCHes that each fit alone but not together: one wins, the other is 422 (the limit is
    checked against what the first committed), and the user never holds more than the limit. By
    the service's id: its lookup is the transaction's first read, before the user's row lock."""
    service, h = tenant
    monkeypatch.setattr(runtime.settings, "tags_per_user_max", 10)
    for attempt in range(5):
        ref = f"ext:racer-{attempt}"
        user = tenant.user(ref.removeprefix("ext:"))
        bodies = [{f"a{i}": i for i in range(6)}, {f"b{i}": i for i in range(6)}]
        statuses = sorted(
            _race([lambda b=b, ref=ref: client.patch(f"/v1/users/{ref}/tags", json=b, headers=h) for b in bodies])
        )
        assert statuses == [200, 422], (attempt, statuses)
        assert len(_rows(runtime, service, user)) == 6


def _race(calls: list[Callable[[], Any]]) -> list[int]:
    """Start every call at the same instant (a barrier); their HTTP statuses."""
    barrier = threading.Barrier(len(calls))

    def go(call: Callable[[], Any]) -> int:
        barrier.wait()
        return int(call().status_code)

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(go, calls))


def test_a_tag_write_racing_the_users_deletion_leaves_no_tag_and_no_error(client, runtime, tenant):
    """The write locks the user's row: it finishes first (its tags go with the user: 200) or finds
    the user gone (404); never a foreign-key failure (500), never a tag without its user."""
    service, h = tenant
    for _ in range(10):
        user = tenant.user()
        body = {f"k{i}": i for i in range(20)}
        deleted, patched = _race(
            [
                lambda user=user: client.delete(f"/v1/users/{user}", headers=h),
                lambda user=user, body=body: client.patch(f"/v1/users/{user}/tags", json=body, headers=h),
            ]
        )
        assert deleted == 204 and patched in (200, 404), (deleted, patched)
    assert _rows(runtime, service) == []
