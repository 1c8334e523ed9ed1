"""Registry rows for tests: one way to write each.

``make_*`` write the rows with the store's own writers (``notee.store.services_sql``, ``users_sql``,
``templates_sql``), the statements the domain runs, without the HTTP API or the domain's side
effects: for store, domain, fan-out and scheduler tests. ``new_*`` go through the HTTP API (admin
API for services and keys): for API tests, which need an API key and test that surface anyway.

    headers = new_service(client, settings, service_id)          # {"Authorization": "Bearer nk_..."}
    user_id = new_user(client, headers, devices=[("tok-aaaaaaaa", "AOS")])
    tmpl = new_template(client, headers, "TOPIC", "news")        # the TemplateOut JSON
"""

from __future__ import annotations

import functools
import secrets
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi.testclient import TestClient

from notee.core.crypto import SecretsBox
from notee.core.settings import Settings
from notee.domain.credentials import set_fcm_credentials
from notee.store import services_sql, templates_sql, users_sql
from notee.store.runtime import Runtime


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def random_token(prefix: str = "tok") -> str:
    return f"{prefix}-{secrets.token_hex(16)}"


# --- straight to the store -------------------------------------------------------------------------


def make_service(runtime: Runtime, service: str, tz: str = "Asia/Seoul", *, fcm: bool = False) -> str:
    """``fcm``: also store FCM credentials (encrypted as the admin API does), which sending needs."""
    with runtime.sessions.begin() as s:
        services_sql.insert_service(s, service=service, display_name=f"Test {service}", timezone=tz, now=_now())
    if fcm:
        box = SecretsBox(runtime.settings.credentials_key.get_secret_value())
        with runtime.sessions.begin() as s:  # the caller owns the commit
            set_fcm_credentials(s, box, service, shared_service_account())
    return service


def make_user(runtime: Runtime, service: str, service_user_id: str | None = None) -> str:
    """A user row; returns its platform user_id."""
    user_id = str(uuid.uuid4())
    with runtime.sessions.begin() as s:
        row = users_sql.upsert_user(
            s,
            service=service,
            service_user_id=service_user_id or user_id,
            new_user_id=user_id,
            now=_now(),
            profile={"service_user_name": "name"},
        )
    return str(row.user_id)


def make_device(runtime: Runtime, service: str, user_id: str, token: str, os: str = "AOS") -> str:
    """A device row only: unlike registering through the API, the user's subscriptions are not copied."""
    with runtime.sessions.begin() as s:
        users_sql.upsert_device(s, service=service, user_id=user_id, token=token, os=os, region="KR", now=_now())
    return token


def make_users_with_devices(runtime: Runtime, service: str, tokens: Sequence[str], os: str = "AOS") -> list[str]:
    """One user per token, each with that one device (``make_user`` + ``make_device`` at scale, in one
    transaction per 500 users): their user_ids, in the tokens' order."""
    users: list[str] = []
    for start in range(0, len(tokens), 500):
        with runtime.sessions.begin() as s:
            for token in tokens[start : start + 500]:
                new = str(uuid.uuid4())
                row = users_sql.upsert_user(
                    s,
                    service=service,
                    service_user_id=new,
                    new_user_id=new,
                    now=_now(),
                    profile={"service_user_name": "name"},
                )
                users_sql.upsert_device(
                    s, service=service, user_id=str(row.user_id), token=token, os=os, region="KR", now=_now()
                )
                users.append(str(row.user_id))
    return users


def make_template(
    runtime: Runtime, service: str, method: str, type_: str, title: str = "Hi {{name}}", body: str = "Body"
) -> str:
    """A template row; returns its notification_key."""
    with runtime.sessions.begin() as s:
        row = templates_sql.upsert_template(
            s,
            templates_sql.TemplateRow(service, method, type_, title, body, priority="high"),
            new_key=str(uuid.uuid4()),
            now=_now(),
        )
    return str(row.notification_key)


# --- through the HTTP API --------------------------------------------------------------------------


def admin_headers(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}


def bearer(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def new_service(
    client: TestClient, settings: Settings, service: str, *, timezone: str | None = None, credentials: bool = False
) -> dict[str, str]:
    """Create the service and one API key; return the key's auth headers. ``credentials``: also
    upload FCM credentials, which any test that sends needs (without them, no device has a route)."""
    body: dict[str, Any] = {"service": service, "display_name": f"Test {service}"}
    if timezone is not None:
        body["timezone"] = timezone
    r = client.post("/v1/admin/services", json=body, headers=admin_headers(settings))
    assert r.status_code == 201, r.text
    if credentials:
        r = client.put(
            f"/v1/admin/services/{service}/credentials/fcm",
            json={"service_account": shared_service_account()},
            headers=admin_headers(settings),
        )
        assert r.status_code == 200, r.text
    return bearer(new_api_key(client, settings, service)["api_key"])


def new_api_key(
    client: TestClient, settings: Settings, service: str, label: str = "test", *, kind: str | None = None
) -> dict[str, Any]:
    """A new API key of ``service`` (``kind``: ``client`` for an app's receipts key; the server's default)."""
    body_in: dict[str, Any] = {"label": label} | ({"kind": kind} if kind else {})
    r = client.post(f"/v1/admin/services/{service}/api-keys", json=body_in, headers=admin_headers(settings))
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def new_user(
    client: TestClient,
    headers: dict[str, str],
    service_user_id: str | None = None,
    *,
    name: str = "daehwan",
    devices: Sequence[tuple[str, str]] = (),
) -> str:
    """PUT the user, POST each (token, os) device; return the platform user_id."""
    r = client.put(f"/v1/users/{service_user_id or 'u-' + secrets.token_hex(6)}", json={"name": name}, headers=headers)
    assert r.status_code in (200, 201), r.text
    user_id = str(r.json()["user_id"])
    for token, os in devices:
        d = client.post(
            f"/v1/users/{user_id}/devices", json={"token": token, "os": os, "region": "KR"}, headers=headers
        )
        assert d.status_code in (200, 201), d.text
    return user_id


def new_template(
    client: TestClient, headers: dict[str, str], method: str = "TOPIC", type_: str | None = None, **fields: Any
) -> dict[str, Any]:
    body = {"title": "Hello {{name}}", "body": "Something happened"} | fields
    if method == "CYCLE" and "title" not in fields and "defaults" not in fields:
        body["defaults"] = {"name": "there"}  # a CYCLE placeholder needs a default: no request fills it
    r = client.put(f"/v1/templates/{method}/{type_ or 't' + secrets.token_hex(4)}", json=body, headers=headers)
    assert r.status_code in (200, 201), r.text
    out: dict[str, Any] = r.json()
    return out


# --- provider credentials (well-formed, not valid at Google or Apple) ----------------------------


def fcm_service_account(project_id: str = "notee-test") -> dict[str, Any]:
    """A well-formed Firebase service account with a fresh RSA key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
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
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "key_id": "ABC123DEFG",
        "team_id": "TEAM123456",
        "bundle_id": "com.example.notee",
        "private_key": pem,
        "sandbox": sandbox,
    }
