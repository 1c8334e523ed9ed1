"""Admin API on the real MariaDB: services, API keys, provider credentials (secrets never leak)."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from notee.api.app import create_app
from notee.core import crypto
from notee.core.errors import ProviderConfigError
from notee.core.settings import Settings
from notee.domain import credentials
from notee.store import credentials_sql, services_sql
from tests.support.registry import (
    admin_headers,
    apns_credentials,
    bearer,
    fcm_service_account,
    new_api_key,
    new_service,
)


def test_create_and_read_service(client, settings, service_id):
    r = client.post(
        "/v1/admin/services", json={"service": service_id, "display_name": "Smeem"}, headers=admin_headers(settings)
    )
    assert r.status_code == 201, r.text
    assert r.json()["timezone"] == "Asia/Seoul"
    got = client.get(f"/v1/admin/services/{service_id}", headers=admin_headers(settings))
    assert got.status_code == 200
    assert got.json() == r.json()


def test_service_with_own_timezone_and_duplicate(client, settings, service_id):
    body = {"service": service_id, "display_name": "NY", "timezone": "America/New_York"}
    assert (
        client.post("/v1/admin/services", json=body, headers=admin_headers(settings)).json()["timezone"]
        == "America/New_York"
    )
    again = client.post("/v1/admin/services", json=body | {"display_name": "other"}, headers=admin_headers(settings))
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    assert (
        client.get(f"/v1/admin/services/{service_id}", headers=admin_headers(settings)).json()["display_name"] == "NY"
    )


def test_unknown_service_is_404(client, settings, service_id):
    for method, path in [
        ("GET", ""),
        ("POST", "/api-keys"),
        ("GET", "/api-keys"),
        ("GET", "/credentials"),
        ("DELETE", "/credentials/fcm"),
        ("DELETE", "/api-keys/0123456789abcdef"),
    ]:
        r = client.request(method, f"/v1/admin/services/{service_id}{path}", headers=admin_headers(settings))
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"]["code"] == "not_found"


def test_api_key_lifecycle_and_immediate_revocation(client, settings, runtime, service_id):
    headers = new_service(client, settings, service_id)
    assert client.get("/v1/templates", headers=headers).status_code == 200
    second = new_api_key(client, settings, service_id, label="ci")
    listed = client.get(f"/v1/admin/services/{service_id}/api-keys", headers=admin_headers(settings)).json()["items"]
    assert {k["label"] for k in listed} == {"test", "ci"}
    assert all("api_key" not in k and "key_hash" not in k for k in listed)
    assert second["api_key"] not in str(listed)
    # only the SHA-256 of the secret is stored
    with runtime.sessions() as s:
        stored = s.execute(
            select(services_sql.api_key_t.c.key_hash).where(services_sql.api_key_t.c.key_id == second["key_id"])
        ).one()
    assert stored.key_hash == crypto.hash_secret(second["api_key"].split("_", 2)[2])

    r = client.delete(f"/v1/admin/services/{service_id}/api-keys/{second['key_id']}", headers=admin_headers(settings))
    assert r.status_code == 204
    assert client.get("/v1/templates", headers=bearer(second["api_key"])).status_code == 401
    assert client.get("/v1/templates", headers=headers).status_code == 200  # the other key still works
    listed = client.get(f"/v1/admin/services/{service_id}/api-keys", headers=admin_headers(settings)).json()["items"]
    assert [k["revoked_at"] is not None for k in listed if k["key_id"] == second["key_id"]] == [True]
    # revoking again is fine; another service's key id is 404
    assert (
        client.delete(
            f"/v1/admin/services/{service_id}/api-keys/{second['key_id']}", headers=admin_headers(settings)
        ).status_code
        == 204
    )


def test_key_of_one_service_cannot_be_revoked_through_another(client, settings, service_id):
    new_service(client, settings, service_id)
    key = new_api_key(client, settings, service_id)
    other = service_id + "X"
    new_service(client, settings, other)
    r = client.delete(f"/v1/admin/services/{other}/api-keys/{key['key_id']}", headers=admin_headers(settings))
    assert r.status_code == 404
    assert client.get("/v1/templates", headers=bearer(key["api_key"])).status_code == 200


@pytest.mark.parametrize("auth", [None, "Bearer wrong", "Basic abc", "Bearer "])
def test_admin_needs_the_admin_token(client, settings, service_id, auth):
    headers = {"Authorization": auth} if auth else {}
    r = client.post("/v1/admin/services", json={"service": service_id, "display_name": "x"}, headers=headers)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"
    assert client.get(f"/v1/admin/services/{service_id}", headers=admin_headers(settings)).status_code == 404


def test_admin_refuses_service_keys(client, settings, service_id):
    headers = new_service(client, settings, service_id)
    assert client.get(f"/v1/admin/services/{service_id}", headers=headers).status_code == 401
    assert client.post(f"/v1/admin/services/{service_id}/api-keys", headers=headers).status_code == 401


def test_admin_api_off_without_admin_token(settings, runtime, service_id):
    off = create_app(Settings(admin_token=None), runtime=runtime)
    with TestClient(off) as c:
        r = c.post(
            "/v1/admin/services", json={"service": service_id, "display_name": "x"}, headers=admin_headers(settings)
        )
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "forbidden"
    with runtime.sessions() as s:
        assert services_sql.get_service(s, service_id) is None


def test_credentials_are_encrypted_never_returned_never_logged(client, settings, runtime, service_id, caplog):
    caplog.set_level(logging.DEBUG)
    new_service(client, settings, service_id)
    fcm, apns = fcm_service_account(), apns_credentials()
    admin = admin_headers(settings)
    base = f"/v1/admin/services/{service_id}/credentials"
    assert client.get(base, headers=admin).json() == {"fcm": False, "apns": False, "webpush": False}
    responses = [
        client.put(f"{base}/fcm", json={"service_account": fcm}, headers=admin),
        client.put(f"{base}/apns", json=apns, headers=admin),
        client.get(base, headers=admin),
    ]
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert responses[-1].json() == {"fcm": True, "apns": True, "webpush": False}

    secret_bits = [fcm["private_key"].splitlines()[1], apns["private_key"].splitlines()[1], fcm["private_key_id"]]
    for r in responses:
        for bit in secret_bits:
            assert bit not in r.text
    with runtime.sessions() as s:
        row = credentials_sql.get_credentials(s, service_id)
        for bit in secret_bits:
            assert bit.encode() not in row.fcm_encrypted and bit.encode() not in row.apns_encrypted
        loaded = credentials.load_credentials(
            s, crypto.SecretsBox(settings.credentials_key.get_secret_value()), service_id
        )
    assert loaded.fcm.service_account == fcm and loaded.fcm.project_id == "notee-test"
    assert (loaded.apns.key_id, loaded.apns.team_id, loaded.apns.bundle_id, loaded.apns.sandbox) == (
        apns["key_id"],
        apns["team_id"],
        apns["bundle_id"],
        True,
    )
    assert loaded.apns.private_key == apns["private_key"]
    logging.getLogger("test").info("loaded %r", loaded)  # even a careless log line shows no secret
    for bit in secret_bits:
        assert bit not in caplog.text

    assert client.delete(f"{base}/apns", headers=admin).status_code == 204
    assert client.get(base, headers=admin).json() == {"fcm": True, "apns": False, "webpush": False}
    assert client.delete(f"{base}/apns", headers=admin).status_code == 404
    with runtime.sessions() as s:
        loaded = credentials.load_credentials(
            s, crypto.SecretsBox(settings.credentials_key.get_secret_value()), service_id
        )
    assert loaded.apns is None and loaded.fcm is not None


def test_load_credentials_none_and_wrong_key(client, settings, runtime, service_id):
    new_service(client, settings, service_id)
    box = crypto.SecretsBox(settings.credentials_key.get_secret_value())
    with runtime.sessions() as s:
        assert credentials.load_credentials(s, box, service_id) is None
    client.put(
        f"/v1/admin/services/{service_id}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    from cryptography.fernet import Fernet

    with runtime.sessions() as s, pytest.raises(ProviderConfigError):
        credentials.load_credentials(s, crypto.SecretsBox(Fernet.generate_key().decode()), service_id)


def test_api_key_never_logged(client, settings, service_id, caplog):
    caplog.set_level(logging.DEBUG)
    new_service(client, settings, service_id)
    key = new_api_key(client, settings, service_id)
    client.get("/v1/templates", headers=bearer(key["api_key"]))
    secret = key["api_key"].split("_", 2)[2]
    assert secret not in caplog.text
    assert settings.admin_token.get_secret_value() not in caplog.text
