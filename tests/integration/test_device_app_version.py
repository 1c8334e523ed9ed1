"""A device's app_version (docs/AUDIENCES.md "Built-in attributes"): stored as registered with its
sortable key, kept by a registration without it, cleared by null, shown in the device listing; a
malformed one is 422 with nothing written."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from notee.domain.versions import version_key
from tests.support.registry import random_token
from tests.support.stores import changes, snapshot


def _stored(runtime, service: str, token: str) -> tuple[str | None, str | None]:
    with runtime.engine.connect() as conn:
        row = conn.execute(
            text("SELECT app_version, app_version_key FROM device WHERE service = :s AND device_token = :t"),
            {"s": service, "t": token},
        ).one()
    return row[0], row[1]


def _listed(client, headers, user: str, token: str) -> str | None:
    items = client.get(f"/v1/users/{user}/devices", headers=headers).json()["items"]
    (device,) = [d for d in items if d["token"] == token]
    return device["app_version"]  # type: ignore[no-any-return]


def test_app_version_is_stored_with_its_key_and_kept(client, runtime, tenant):
    service, h = tenant
    user = tenant.user()
    token = random_token("av")
    r = client.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS", "app_version": "5.10.1"}, headers=h)
    assert r.status_code == 201 and r.json()["app_version"] == "5.10.1"
    assert _stored(runtime, service, token) == ("5.10.1", "00005.00010.00001")
    assert _listed(client, h, user, token) == "5.10.1"
    # a re-registration without it keeps it
    assert client.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS"}, headers=h).status_code == 200
    assert _stored(runtime, service, token) == ("5.10.1", "00005.00010.00001")
    body = {"token": token, "os": "AOS", "app_version": "5.11.0-beta.2"}
    assert client.post(f"/v1/users/{user}/devices", json=body, headers=h).json()["app_version"] == "5.11.0-beta.2"
    assert _stored(runtime, service, token) == ("5.11.0-beta.2", version_key("5.11.0-beta.2"))
    # null clears it, as it clears a device's locale
    body = {"token": token, "os": "AOS", "app_version": None}
    assert client.post(f"/v1/users/{user}/devices", json=body, headers=h).json()["app_version"] is None
    assert _stored(runtime, service, token) == (None, None)


def test_a_device_without_app_version_shows_null(client, tenant):
    _, h = tenant
    token = random_token("av")
    user = tenant.user(devices=[(token, "IOS")])
    assert _listed(client, h, user, token) is None


@pytest.mark.parametrize("bad", ["", "x" * 33, "5.2 beta", "5.2_1", "é", 5.2])
def test_a_malformed_app_version_is_422_and_writes_nothing(client, runtime, tenant, bad):
    service, h = tenant
    user = tenant.user()
    before = snapshot(runtime, service)
    body = {"token": random_token("av"), "os": "AOS", "app_version": bad}
    r = client.post(f"/v1/users/{user}/devices", json=body, headers=h)
    assert r.status_code == 422, r.text
    assert ["body", "app_version"] in [d["loc"] for d in r.json()["error"]["details"]]
    assert changes(before, snapshot(runtime, service)) == {}
