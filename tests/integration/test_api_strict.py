"""Strict at the edge (issue 15, item 7): the inputs a bad-input sweep found accepted (or answered 503)
are 422 in the error format, and nothing is written."""

from __future__ import annotations

import secrets

import pytest

from notee.core.errors import InvalidInput
from notee.usecases import publish as jobs
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
        jobs.publish_topic(
            runtime,
            session,
            service=service,
            type_="news",
            topic="t",
            idempotency_key=None,
            variables={"name": "\x07"},
            overrides=None,
        )
    with runtime.sessions() as session, pytest.raises(InvalidInput):
        jobs.publish_topic(
            runtime,
            session,
            service=service,
            type_="news",
            topic="t",
            idempotency_key=None,
            variables=None,
            overrides={"data": {"k": "\x1b"}},
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
