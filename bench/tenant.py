"""A fresh benchmark tenant (service, API key, templates), made through Notee's own domain functions."""

from __future__ import annotations

import functools
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import text

from notee.core.crypto import SecretsBox


@dataclass(frozen=True)
class Tenant:
    service: str
    api_key: str


def new_service_id() -> str:
    return "B" + secrets.token_hex(6).upper()


def make_tenant(runtime, service: str | None = None) -> Tenant:
    from notee.core.vocabulary import RATE_CLASSES
    from notee.domain import credentials, ratelimit, services

    service = service or new_service_id()
    with runtime.sessions.begin() as session:  # the caller owns the commit
        services.create_service(session, service=service, display_name=f"bench {service}")
        key = services.create_api_key(session, service, label="bench")
        # Sending needs credentials for the devices' platform (the emulator stands in for FCM, not the keys).
        credentials.set_fcm_credentials(
            session, SecretsBox(runtime.settings.credentials_key.get_secret_value()), service, bench_service_account()
        )
        # A benchmark tenant is configured by its admin to the highest limits: the per-request rate-limit
        # check still runs (its cost is part of every figure), but it never refuses the load a figure makes.
        for klass in RATE_CLASSES:
            ratelimit.set_limit(
                session, runtime.settings, service, klass, rate=ratelimit.MAX_RATE, burst=ratelimit.MAX_BURST
            )
    return Tenant(service, key.api_key)


def set_credentials(runtime, service: str) -> None:
    """Set the service's FCM credentials under this run's NOTEE_CREDENTIALS_KEY (a kept service, such
    as the audience population, was made by an earlier run with another key its worker cannot read)."""
    from notee.domain import credentials

    with runtime.sessions.begin() as session:  # the caller owns the commit
        credentials.set_fcm_credentials(
            session, SecretsBox(runtime.settings.credentials_key.get_secret_value()), service, bench_service_account()
        )


@functools.cache
def bench_service_account() -> dict[str, str]:
    """A well-formed Firebase service account with a fresh RSA key (not valid at Google; the emulator takes it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    return {
        "type": "service_account",
        "project_id": "notee-bench",
        "private_key_id": secrets.token_hex(20),
        "private_key": pem,
        "client_email": "notee@notee-bench.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


def make_template(runtime, service: str, method: str, type_: str) -> str:
    """Create a template (title/body of realistic length); return its notification_key."""
    from notee.domain import templates

    given = templates.TemplateInput(
        title="Bench title", body="A benchmark push body of realistic length.", data={"kind": "bench"}
    )
    with runtime.sessions.begin() as session:  # the caller owns the commit
        return templates.put_template(session, runtime.statements, service, method, type_, given).notification_key


def bulk_users(
    runtime, service: str, n: int, *, devices_per_user: int = 1, os_: str = "AOS"
) -> list[tuple[str, list[str]]]:
    """n users with their devices, inserted in bulk with plain SQL (set-up, not measured).
    Returns [(user_id, [device_token, ...]), ...]."""
    from bench.seed import fcm_like_token

    now = datetime.now(UTC).replace(tzinfo=None)
    users, user_rows, device_rows = [], [], []
    for i in range(n):
        uid = str(uuid.uuid4())
        toks = [fcm_like_token(i * devices_per_user + d) for d in range(devices_per_user)]
        users.append((uid, toks))
        user_rows.append({"s": service, "su": f"u{i}", "u": uid, "now": now})
        device_rows.extend({"s": service, "u": uid, "t": t, "os": os_, "now": now} for t in toks)
    with runtime.engine.begin() as conn:
        for i in range(0, n, 2000):
            conn.execute(
                text(
                    "INSERT INTO `user` (service, service_user_id, service_user_name, user_id, created_at,"
                    " updated_at) VALUES (:s, :su, '', :u, :now, :now)"
                ),
                user_rows[i : i + 2000],
            )
        for i in range(0, len(device_rows), 2000):
            conn.execute(
                text(
                    "INSERT INTO device (service, user_id, device_token, device_os, region, created_at,"
                    " updated_at) VALUES (:s, :u, :t, :os, 'KR', :now, :now)"
                ),
                device_rows[i : i + 2000],
            )
    return users


def add_apns_credentials(runtime, service: str, bundle_id: str) -> None:
    """APNs credentials (a fresh P-256 key) for a bench tenant: its iOS devices then go to the
    emulator's APNs port."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from notee.domain import credentials

    key = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    with runtime.sessions.begin() as session:  # the caller owns the commit
        credentials.set_apns_credentials(
            session,
            SecretsBox(runtime.settings.credentials_key.get_secret_value()),
            service,
            key_id="BENCHKEY01",
            team_id="BENCHTEAM1",
            bundle_id=bundle_id,
            private_key=key,
            sandbox=True,
        )
