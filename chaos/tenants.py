"""The tenants of a chaos run, made through the admin and tenant APIs as an operator would: a service
with FCM (and for some APNs) credentials, an API key, the templates whose data carries the chaos
mark, a webhook endpoint, and a stable population imported in one NDJSON file. The stable devices
are never touched again: each must receive every acknowledged publish of its tenant."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from chaos.record import Api

DAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
TOPIC = "all"


@dataclass
class Tenant:
    service: str
    api: Api  # with its key
    stable: list[str] = field(default_factory=list)  # service user ids ("s-0", ...) of the stable users
    webhook_id: str | None = None
    quiet: list[str] = field(default_factory=list)  # tokens of the users with quiet hours

    @property
    def population(self) -> str:
        return f"{self.service}:stable"

    @property
    def populations(self) -> list[str]:
        """What every topic publish of the tenant must reach (the quiet users once their window ends)."""
        return [self.population, *([f"{self.service}:quiet"] if self.quiet else [])]

    def token(self, i: int) -> str:
        return f"stable-{self.service}-{i}"


def service_account() -> dict[str, Any]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return {
        "type": "service_account",
        "project_id": "notee-chaos",
        "private_key_id": secrets.token_hex(20),
        "private_key": pem.decode(),
        "client_email": "notee@notee-chaos.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


def apns_credentials() -> dict[str, Any]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return {
        "key_id": "ABC123DEFG",
        "team_id": "TEAM123456",
        "bundle_id": "com.example.notee",
        "private_key": pem.decode(),
    }


def _ok(r: Any, what: str) -> Any:
    if r is None or r.status_code >= 300:
        raise RuntimeError(f"setup failed: {what}: {None if r is None else (r.status_code, r.text[:300])}")
    return r.json() if r.content else {}


def make_tenant(admin: Api, index: int, *, apns: bool, webhook_url: str | None) -> Tenant:
    service = f"CHAOS{index}{secrets.token_hex(3).upper()}"
    base = f"/v1/admin/services/{service}"
    _ok(
        admin.call(
            "POST",
            "/v1/admin/services",
            op="setup",
            json={"service": service, "display_name": service, "timezone": "UTC"},
        ),
        "service",
    )
    _ok(admin.call("PUT", f"{base}/credentials/fcm", op="setup", json={"service_account": service_account()}), "fcm")
    if apns:
        _ok(admin.call("PUT", f"{base}/credentials/apns", op="setup", json=apns_credentials()), "apns")
    for rate_class in ("publish", "send", "write", "read"):  # the run measures faults, not the rate limits
        admin.call("PUT", f"{base}/rate-limits/{rate_class}", op="setup", json={"rate": 10000, "burst": 20000})
    key = _ok(admin.call("POST", f"{base}/api-keys", op="setup", json={"label": "chaos"}), "key")["api_key"]
    tenant = Tenant(service, admin.with_headers({"Authorization": f"Bearer {key}"}))
    data = {"chaos": "{{mark}}"}
    for method, type_, body in (
        ("TOPIC", "news", {"title": "News", "body": "chaos", "data": data}),
        ("SINGLE", "direct", {"title": "Direct", "body": "chaos", "data": data}),
        ("CYCLE", "daily", {"title": "Daily", "body": "chaos", "data": {"chaos": f"cycle:{service}"}}),
    ):
        _ok(tenant.api.call("PUT", f"/v1/templates/{method}/{type_}", op="setup", json=body), f"template {type_}")
    if webhook_url:
        hook = _ok(tenant.api.call("POST", "/v1/webhooks", op="setup", json={"url": webhook_url}), "webhook")
        tenant.webhook_id = hook["endpoint_id"]
    return tenant


def import_stable(tenant: Tenant, size: int, ios_every: int, timeout_s: float = 600) -> None:
    """``size`` users with one device each, subscribed to the topic, in one import; waits for it."""
    lines = []
    for i in range(size):
        platform = "IOS" if ios_every and i % ios_every == 0 else "AOS"
        device = {"token": tenant.token(i), "platform": platform}
        lines.append(
            json.dumps(
                {"user": f"s-{i}", "timezone": "UTC", "devices": [device], "topics": [{"type": "news", "topic": TOPIC}]}
            )
        )
    r = tenant.api.call(
        "POST",
        "/v1/imports",
        op="setup",
        content="\n".join(lines).encode(),
        headers={"Content-Type": "application/x-ndjson"},
    )
    import_id = _ok(r, "import")["import_id"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = _ok(tenant.api.call("GET", f"/v1/imports/{import_id}", op="setup"), "import state")
        if state.get("state") == "done":
            if state.get("lines_failed"):
                raise RuntimeError(f"import of {tenant.service} failed: {state}")
            tenant.stable = [f"s-{i}" for i in range(size)]
            return
        time.sleep(1)
    raise RuntimeError(f"import of {tenant.service} did not finish in {timeout_s} s")


def due_minute(now: datetime, ahead_min: int) -> datetime:
    return (now + timedelta(minutes=ahead_min)).replace(second=0, microsecond=0)


def cycle_body(minute: datetime) -> dict[str, Any]:
    utc = minute.astimezone(UTC)
    return {"days": [DAYS[utc.weekday()]], "hour": utc.hour, "minute": utc.minute, "timezone": "UTC"}


def _hhmm(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%H:%M")


def make_quiet_users(tenant: Tenant, count: int, until: datetime) -> tuple[float, float]:
    """``count`` users subscribed to the topic whose quiet hours (UTC) began 10 minutes ago and end at
    ``until`` (a whole minute): every topic push to them is held until then (the template holds by
    default). Returns the window (epoch s)."""
    start = (datetime.now(UTC) - timedelta(minutes=10)).replace(second=0, microsecond=0)
    window = {"start": _hhmm(start), "end": _hhmm(until)}
    for k in range(count):
        sid, token = f"q-{k}", f"quiet-{tenant.service}-{k}"
        user = {"name": sid, "timezone": "UTC", "quiet_hours": window}
        uid = _ok(tenant.api.call("PUT", f"/v1/users/ext:{sid}", op="setup", json=user), "quiet user")["user_id"]
        device = {"token": token, "os": "AOS"}
        _ok(tenant.api.call("POST", f"/v1/users/{uid}/devices", op="setup", json=device), "quiet device")
        _ok(tenant.api.call("PUT", f"/v1/users/{uid}/subscriptions/topic/news/{TOPIC}", op="setup"), "quiet sub")
        tenant.quiet.append(token)
    return start.timestamp(), until.timestamp()
