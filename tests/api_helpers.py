"""Helpers for API tests: make a tenant and its API key through the admin API, users with devices,
templates, and valid-looking provider credentials.

    headers = new_service(client, settings, service_id)          # {"Authorization": "Bearer nk_..."}
    user_id = new_user(client, headers, devices=[("tok-aaaaaaaa", "AOS")])
    tmpl = new_template(client, headers, "TOPIC", "news")        # the TemplateOut JSON
"""

from __future__ import annotations

import functools
import secrets
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


def admin_headers(settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}


def bearer(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def new_service(client, settings, service: str, *, timezone: str | None = None,
                credentials: bool = False) -> dict[str, str]:
    """Create the service and one API key; return the key's auth headers. ``credentials``: also
    upload FCM credentials, which any test that sends needs (without them, no device has a route)."""
    body: dict[str, Any] = {"service": service, "display_name": f"Test {service}"}
    if timezone is not None:
        body["timezone"] = timezone
    r = client.post("/v1/admin/services", json=body, headers=admin_headers(settings))
    assert r.status_code == 201, r.text
    if credentials:
        r = client.put(f"/v1/admin/services/{service}/credentials/fcm",
                       json={"service_account": shared_service_account()}, headers=admin_headers(settings))
        assert r.status_code == 200, r.text
    return bearer(new_api_key(client, settings, service)["api_key"])


def new_api_key(client, settings, service: str, label: str = "test") -> dict[str, Any]:
    r = client.post(f"/v1/admin/services/{service}/api-keys", json={"label": label}, headers=admin_headers(settings))
    assert r.status_code == 201, r.text
    return r.json()


def random_token(prefix: str = "tok") -> str:
    return f"{prefix}-{secrets.token_hex(16)}"


def new_user(client, headers, service_user_id: str | None = None, *, name: str = "daehwan",
             devices: list[tuple[str, str]] = ()) -> str:
    """PUT the user, POST each (token, os) device; return the platform user_id."""
    r = client.put(f"/v1/users/{service_user_id or 'u-' + secrets.token_hex(6)}", json={"name": name},
                   headers=headers)
    assert r.status_code in (200, 201), r.text
    user_id = r.json()["user_id"]
    for token, os in devices:
        d = client.post(f"/v1/users/{user_id}/devices", json={"token": token, "os": os, "region": "KR"},
                        headers=headers)
        assert d.status_code in (200, 201), d.text
    return user_id


def new_template(client, headers, method: str = "TOPIC", type_: str | None = None, **fields: Any) -> dict[str, Any]:
    body = {"title": "Hello {{name}}", "body": "Something happened"} | fields
    if method == "CYCLE" and "title" not in fields and "defaults" not in fields:
        body["defaults"] = {"name": "there"}  # a CYCLE placeholder needs a default: no request fills it
    r = client.put(f"/v1/templates/{method}/{type_ or 't' + secrets.token_hex(4)}", json=body, headers=headers)
    assert r.status_code in (200, 201), r.text
    return r.json()


def fcm_service_account(project_id: str = "notee-test") -> dict[str, Any]:
    """A well-formed Firebase service account with a fresh RSA key (not valid at Google)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return {
        "type": "service_account",
        "project_id": project_id,
        "private_key_id": secrets.token_hex(20),
        "private_key": pem,
        "client_email": f"notee@{project_id}.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


@functools.cache
def shared_service_account() -> dict[str, Any]:
    """One service account for every sending test of the session (an RSA key takes ~0.1 s to make)."""
    return fcm_service_account()


def apns_credentials(sandbox: bool = True) -> dict[str, Any]:
    """Well-formed APNs token-auth credentials with a fresh P-256 key (a .p8 look-alike)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return {"key_id": "ABC123DEFG", "team_id": "TEAM123456", "bundle_id": "com.example.notee",
            "private_key": pem, "sandbox": sandbox}


def snapshot(runtime, service: str) -> dict[str, list]:
    """Every registry row of one service, plus its Cassandra counters: compare before/after to prove
    that a rejected request wrote nothing."""
    from sqlalchemy import select

    from notee.store import registry_sql as store

    out: dict[str, list] = {}
    with runtime.sessions() as s:
        for t in (store.service_t, store.api_key_t, store.credentials_t, store.user_t, store.device_t,
                  store.template_t):
            out[t.name] = sorted(repr(tuple(r)) for r in s.execute(select(t).where(t.c.service == service)))
    rows = runtime.cql.execute(f"SELECT * FROM {runtime.keyspaces.numbering}.notification WHERE service = %s",
                               (service,))
    out["numbering"] = sorted(repr(tuple(r)) for r in rows)
    return out
