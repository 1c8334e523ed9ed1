"""Web Push test helpers (docs/WEB-PUSH.md): a service's VAPID key through the admin API, and a
browser of a user subscribed at the emulator's push services."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from notee.core.settings import Settings
from notee.emulator.control import EmulatorControl
from tests.support.registry import admin_headers


def vapid(client: TestClient, settings: Settings, service: str, subject: str = "mailto:ops@example.com") -> str:
    """A new VAPID key pair for ``service``; its public key (the pages' ``applicationServerKey``)."""
    r = client.post(
        f"/v1/admin/services/{service}/credentials/webpush/generate",
        json={"subject": subject},
        headers=admin_headers(settings),
    )
    assert r.status_code == 200, r.text
    public: str = r.json()["public_key"]
    return public


def token_of(sub: dict[str, Any]) -> str:
    """The WEB device token of a subscription (``<p256dh>.<auth>.<endpoint>``)."""
    return f"{sub['keys']['p256dh']}.{sub['keys']['auth']}.{sub['endpoint']}"


def browser(
    client: TestClient,
    headers: dict[str, str],
    emulator: EmulatorControl,
    user_id: str,
    flavor: str = "fcm",
    server_key: str | None = None,
    origin: str | None = None,
) -> tuple[dict[str, Any], str]:
    """A browser of ``user_id`` subscribed at the emulator's push service: (its subscription, its token).
    ``origin``: its endpoint's origin when not the emulator's URL (a forwarder in front of it)."""
    sub = emulator.web_subscribe(flavor, server_key, origin)
    r = client.post(
        f"/v1/users/{user_id}/devices",
        json={"os": "WEB", "subscription": {k: sub[k] for k in ("endpoint", "expirationTime", "keys")}},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    assert token == token_of(sub)
    return sub, token
