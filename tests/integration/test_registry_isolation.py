"""Tenant isolation and authentication on EVERY registry endpoint, driven by route tables that are
checked against the app's routers (a new route without a row here fails the coverage test).

Another service's user/device/template answers 404 (never 403); a missing, malformed, unknown or
revoked key (or the admin token) answers 401; and the victim's data is unchanged afterwards.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

import pytest

from notee.api.routes import admin, devices, templates, users
from tests.support.registry import (
    admin_headers,
    bearer,
    new_api_key,
    new_service,
    random_token,
)
from tests.support.stores import snapshot

# (method, path, body, cross-tenant outcome). "404": the victim's object is invisible. "own": the
# route acts on the caller's own tenant only (creates/lists there), never on the victim's.
SERVICE_ROUTES = [
    ("PUT", "/v1/users/{service_user_id}", {"name": "mallory"}, "own"),
    ("GET", "/v1/users", None, "own"),
    ("GET", "/v1/users/{user_id}", None, "404"),
    ("DELETE", "/v1/users/{user_id}", None, "404"),
    ("POST", "/v1/users/{user_id}/devices", {"token": "tok-attacker-0001", "os": "AOS"}, "404"),
    ("GET", "/v1/users/{user_id}/devices", None, "404"),
    ("DELETE", "/v1/users/{user_id}/devices/{token}", None, "404"),
    ("POST", "/v1/devices/rotate", {"old_token": "{token}", "new_token": "tok-attacker-0002"}, "404"),
    ("PUT", "/v1/templates/{method}/{type}", {"title": "pwned", "body": "pwned"}, "own"),
    ("GET", "/v1/templates", None, "own"),
    ("GET", "/v1/templates/{method}/{type}", None, "404"),
    ("DELETE", "/v1/templates/{method}/{type}", None, "404"),
]

ADMIN_ROUTES = [
    ("POST", "/v1/admin/services", {"service": "{service}", "display_name": "x"}),
    ("GET", "/v1/admin/services", None),
    ("GET", "/v1/admin/services/{service}", None),
    ("PATCH", "/v1/admin/services/{service}", {"delivery_mode": "dry_run"}),
    ("POST", "/v1/admin/services/{service}/api-keys", {"label": "x"}),
    ("GET", "/v1/admin/services/{service}/api-keys", None),
    ("DELETE", "/v1/admin/services/{service}/api-keys/{key_id}", None),
    ("PUT", "/v1/admin/services/{service}/credentials/fcm", {"service_account": {"type": "service_account"}}),
    ("PUT", "/v1/admin/services/{service}/credentials/apns", {"key_id": "ABC123DEFG"}),
    ("PUT", "/v1/admin/services/{service}/credentials/webpush", {"subject": "mailto:ops@example.com"}),
    ("GET", "/v1/admin/services/{service}/credentials/webpush", None),
    ("POST", "/v1/admin/services/{service}/credentials/webpush/generate", {"subject": "mailto:ops@example.com"}),
    ("GET", "/v1/admin/services/{service}/credentials", None),
    ("DELETE", "/v1/admin/services/{service}/credentials/{provider}", None),
    ("GET", "/v1/admin/services/{service}/rate-limits", None),
    ("PUT", "/v1/admin/services/{service}/rate-limits/{rate_class}", {"rate": 1.0, "burst": 1}),
    ("DELETE", "/v1/admin/services/{service}/rate-limits/{rate_class}", None),
    ("POST", "/v1/admin/jobs/{job_id}/requeue", None),
    ("GET", "/v1/admin/services/{service}/jobs", None),
    ("GET", "/v1/admin/services/{service}/dead-letters", None),
    ("POST", "/v1/admin/services/{service}/dead-letters/replay", {}),
]


def _declared(*routers) -> set[tuple[str, str]]:
    return {(m, r.path.replace(":path", "")) for router in routers for r in router.routes for m in r.methods}


def test_route_tables_cover_every_registry_route():
    assert {(m, p) for m, p, *_ in SERVICE_ROUTES} == _declared(users.router, devices.router, templates.router)
    assert {(m, p) for m, p, _ in ADMIN_ROUTES} == _declared(admin.router)


@dataclass
class Victim:
    service: str
    headers: dict[str, str]
    user_id: str
    service_user_id: str
    token: str
    template: dict

    def fill(self, text: str, key_id: str = "0123456789abcdef") -> str:
        return text.format(
            service=self.service,
            user_id=self.user_id,
            service_user_id=self.service_user_id,
            token=urllib.parse.quote(self.token, safe=""),
            method=self.template["method"],
            type=self.template["type"],
            key_id=key_id,
            provider="fcm",
            rate_class="publish",
            job_id="00000000-0000-4000-8000-000000000000",
        )

    def body(self, body):
        if body is None:
            return None
        return {
            k: (self.token if v == "{token}" else self.fill(v) if isinstance(v, str) else v) for k, v in body.items()
        }


@pytest.fixture()
def victim(tenant) -> Victim:
    token = "fcm:" + random_token()
    user_id = tenant.user("victim-1", devices=[(token, "IOS")])
    template = tenant.template("TOPIC", "news")
    return Victim(tenant.service, tenant.headers, user_id, "victim-1", token, template)


@pytest.mark.parametrize("method, path, body, outcome", SERVICE_ROUTES, ids=[f"{m} {p}" for m, p, *_ in SERVICE_ROUTES])
def test_another_service_sees_nothing(client, settings, runtime, victim, method, path, body, outcome):
    attacker = new_service(client, settings, victim.service + "Z")
    before = snapshot(runtime, victim.service)
    r = client.request(method, victim.fill(path), json=victim.body(body), headers=attacker)
    if outcome == "404":
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "not_found"
    else:
        assert r.status_code in (200, 201), r.text
        assert victim.user_id not in r.text and victim.template["notification_key"] not in r.text
    assert snapshot(runtime, victim.service) == before


def _revoked_key(client, settings, service):
    key = new_api_key(client, settings, service)
    client.delete(f"/v1/admin/services/{service}/api-keys/{key['key_id']}", headers=admin_headers(settings))
    return key["api_key"]


AUTH_CASES = ["missing", "malformed", "unknown", "revoked", "admin-token", "wrong-secret"]


def _auth(case, client, settings, victim) -> dict[str, str]:
    if case == "missing":
        return {}
    if case == "malformed":
        return bearer("not-a-key")
    if case == "unknown":
        return bearer("nk_0123456789abcdef_" + "A" * 43)
    if case == "revoked":
        return bearer(_revoked_key(client, settings, victim.service))
    if case == "admin-token":
        return admin_headers(settings)
    real = victim.headers["Authorization"].removeprefix("Bearer ")
    return bearer(real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB"))


@pytest.mark.parametrize("case", AUTH_CASES)
@pytest.mark.parametrize("method, path, body, outcome", SERVICE_ROUTES, ids=[f"{m} {p}" for m, p, *_ in SERVICE_ROUTES])
def test_service_routes_need_a_live_key(client, settings, runtime, victim, method, path, body, outcome, case):
    headers = _auth(case, client, settings, victim)
    before = snapshot(runtime, victim.service)
    r = client.request(method, victim.fill(path), json=victim.body(body), headers=headers)
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthorized"
    assert snapshot(runtime, victim.service) == before


@pytest.mark.parametrize("case", ["missing", "wrong", "service-key"])
@pytest.mark.parametrize("method, path, body", ADMIN_ROUTES, ids=[f"{m} {p}" for m, p, _ in ADMIN_ROUTES])
def test_admin_routes_need_the_admin_token(client, settings, runtime, victim, method, path, body, case):
    headers = {"missing": {}, "wrong": bearer("admin-guess"), "service-key": victim.headers}[case]
    key = client.get(f"/v1/admin/services/{victim.service}/api-keys", headers=admin_headers(settings)).json()["items"]
    before = snapshot(runtime, victim.service)
    r = client.request(method, victim.fill(path, key_id=key[0]["key_id"]), json=victim.body(body), headers=headers)
    assert r.status_code == 401, r.text
    assert snapshot(runtime, victim.service) == before
