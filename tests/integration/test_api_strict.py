"""Strict at the edge (issue 15, item 7): the inputs a bad-input sweep found accepted (or answered 503)
are 422 in the error format, and nothing is written."""

from __future__ import annotations

import secrets

import pytest
from starlette.routing import compile_path

from notee.core.errors import InvalidInput
from notee.usecases import publish
from notee.usecases.job_requests import TopicPublish
from tests.support.registry import admin_headers, random_token
from tests.support.stores import snapshot


@pytest.fixture(scope="module")
def tenant(module_tenant):
    """The family's tenant of this module with a user, its device and a template of each method."""
    token = random_token("strict")
    user = module_tenant.user("strict-user", devices=[(token, "AOS")])
    module_tenant.template("TOPIC", "news")
    module_tenant.template("CYCLE", "remind")
    module_tenant.template("SINGLE", "hello")
    return module_tenant.service, module_tenant.headers, user, token


def _is_422(r) -> None:
    assert r.status_code == 422, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "invalid_input"


CYCLE_BAD = (
    [{"hour": v} for v in (True, "9", 2.0)]
    + [{"minute": v} for v in (True, "9", 2.0)]
    + [{"days": [1]}, {"timezone": 9}]
)


@pytest.mark.parametrize("bad", CYCLE_BAD, ids=repr)
def test_cycle_schedule_fields_are_strict(client, runtime, tenant, bad):
    service, headers, user, _ = tenant
    before = snapshot(runtime, service)
    body = {"days": ["MON"], "hour": 9, "minute": 0} | bad
    _is_422(client.put(f"/v1/users/{user}/subscriptions/cycle/remind", json=body, headers=headers))
    assert snapshot(runtime, service) == before


@pytest.mark.parametrize("tz", ["localtime", "Factory", "posixrules", "posix/Asia/Seoul", "right/UTC", "../UTC"])
def test_non_portable_time_zones_are_refused(client, runtime, settings, tenant, tz):
    service, headers, user, _ = tenant
    before = snapshot(runtime, service)
    body = {"days": ["MON"], "hour": 9, "minute": 0, "timezone": tz}
    _is_422(client.put(f"/v1/users/{user}/subscriptions/cycle/remind", json=body, headers=headers))
    assert snapshot(runtime, service) == before
    other = "TZ" + secrets.token_hex(4).upper()
    _is_422(
        client.post(
            "/v1/admin/services",
            json={"service": other, "display_name": "x", "timezone": tz},
            headers=admin_headers(settings),
        )
    )
    assert client.get(f"/v1/admin/services/{other}", headers=admin_headers(settings)).status_code == 404


def test_portable_time_zones_are_accepted(client, tenant):
    _, headers, user, _ = tenant
    for tz in ("Asia/Seoul", "UTC", "America/New_York"):
        r = client.put(
            f"/v1/users/{user}/subscriptions/cycle/remind",
            json={"days": ["MON"], "hour": 9, "minute": 0, "timezone": tz},
            headers=headers,
        )
        assert r.status_code == 201, r.text  # each zone is a new schedule
    assert client.delete(f"/v1/users/{user}/subscriptions/cycle/remind", headers=headers).status_code == 204


PUBLISH_BAD = [
    {"title": "bell\x07"},
    {"title": "two\nlines"},
    {"body": "nul\x00"},
    {"body": "c1\x85"},
    {"data": {"k": "esc\x1b"}},
    {"data": {"k\n": "v"}},
    {"data": {"k": "del\x7f"}},
    {"variables": {"name": "tab\there"}},
    {"variables": {"name": "\x00"}},
]


@pytest.mark.parametrize("bad", PUBLISH_BAD, ids=repr)
def test_publish_overrides_data_and_variables_refuse_control_characters(client, runtime, tenant, bad):
    service, headers, _, _ = tenant
    before = snapshot(runtime, service)
    _is_422(client.post("/v1/topics/news/sports/publish", json=bad, headers=headers))
    assert snapshot(runtime, service) == before


def test_publish_allows_newlines_where_a_body_may_hold_them(client, tenant):
    _, headers, _, _ = tenant
    r = client.post(
        "/v1/topics/news/sports/publish",
        headers=headers,
        json={"body": "two\nlines", "data": {"k": "v\nw"}, "variables": {"name": "a\nb"}},
    )
    assert r.status_code == 202, r.text


@pytest.mark.parametrize(
    "bad",
    [{"variables": {"name": "bell\x07"}}, {"data": {"k": "esc\x1b"}}, {"variables": {"bad\x00name": "x"}}],
    ids=repr,
)
def test_single_send_refuses_control_characters(client, runtime, tenant, bad):
    service, headers, user, _ = tenant
    before = snapshot(runtime, service)
    _is_422(client.post(f"/v1/users/{user}/send", json={"type": "hello"} | bad, headers=headers))
    assert snapshot(runtime, service) == before


def test_the_domain_checks_publish_input_too(runtime, tenant):
    """The CLI and other callers of the domain get the same rule as the HTTP edge."""
    service, _, _, _ = tenant
    with runtime.sessions() as session, pytest.raises(InvalidInput):
        publish.publish_topic(
            runtime, session, TopicPublish(service=service, type_="news", topic="t", variables={"name": "\x07"})
        )
    with runtime.sessions() as session, pytest.raises(InvalidInput):
        publish.publish_topic(
            runtime, session, TopicPublish(service=service, type_="news", topic="t", overrides={"data": {"k": "\x1b"}})
        )


@pytest.mark.parametrize(
    "path",
    [
        "/v1/users/%FF%FE",
        "/v1/users/caf%C3",
        "/v1/users/%C3%28",
    ],
)
def test_invalid_utf8_in_the_path_is_422_not_replaced(client, runtime, tenant, path):
    service, headers, _, _ = tenant
    before = snapshot(runtime, service)
    _is_422(client.put(path, json={"name": "x"}, headers=headers))
    assert snapshot(runtime, service) == before


def test_invalid_utf8_in_a_topic_is_422(client, runtime, tenant):
    service, headers, user, _ = tenant
    before = snapshot(runtime, service)
    _is_422(client.put(f"/v1/users/{user}/subscriptions/topic/news/sp%FFrts", headers=headers))
    _is_422(client.post("/v1/topics/news/sp%FFrts/publish", json={}, headers=headers))
    assert snapshot(runtime, service) == before


@pytest.mark.parametrize(
    "token", ["t%C3%A9st-token-123", "%E2%98%83%E2%98%83%E2%98%83%E2%98%83", "short", "has%20space%20inside"]
)
def test_bad_token_in_device_delete_path_is_422_not_503(client, runtime, tenant, token):
    service, headers, user, _ = tenant
    before = snapshot(runtime, service)
    _is_422(client.delete(f"/v1/users/{user}/devices/{token}", headers=headers))
    assert snapshot(runtime, service) == before


def test_a_405_names_every_method_its_path_is_served_with(app, client, settings, tenant) -> None:
    """RFC 9110 15.5.6: a 405's Allow lists the methods the resource supports (those of every route
    its URL matches: DELETE .../credentials/apns is served by .../credentials/{provider}). FastAPI keeps one
    route per (path, method), so Starlette's own 405 named only the first route of the path (a
    schemathesis run found 8 paths whose Allow left methods out). Every path of the API, asked with
    a method it is not served with, lists all of its methods."""
    _, headers, user, token = tenant
    by_path: dict[str, set[str]] = {}
    for path, item in app.openapi()["paths"].items():
        by_path[path] = {method.upper() for method in item}
    fill = {
        "{user_id}": user,
        "{token}": token,
        "{service}": "SVC",
        "{service_user_id}": "u1",
        "{key_id}": "k",
        "{provider}": "fcm",
        "{rate_class}": "read",
        "{method}": "TOPIC",
        "{type}": "news",
        "{topic}": "t",
        "{job_id}": user,
        "{endpoint_id}": user,
        "{import_id}": user,
        "{delivery_id}": "1",
        "{letter_id}": "1",
        "{key}": "plan",
        "{name}": "a-segment",
    }
    checked = 0
    for path, methods in sorted(by_path.items()):
        unused = [m for m in ("PATCH", "PUT", "POST", "DELETE") if m not in methods]
        if not unused:
            continue
        url = path
        for name, value in fill.items():
            url = url.replace(name, value)
        assert "{" not in url, f"no value for a parameter of {path}"
        r = client.request(unused[0], url, headers=admin_headers(settings) if path.startswith("/v1/admin") else headers)
        assert r.status_code == 405, (path, r.status_code, r.text)
        served = {m for other, ms in by_path.items() if compile_path(other)[0].match(url) for m in ms}
        assert set(r.headers["allow"].split(", ")) == served, (path, r.headers["allow"])
        assert r.json()["error"]["code"] == "method_not_allowed"
        checked += 1
    assert checked > 20
