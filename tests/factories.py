"""Test data makers that write straight to MySQL through the seed tables.

Used by store-level tests that must not depend on the HTTP API. API tests create their data
through the API instead.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from sqlalchemy import text


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def make_service(runtime, service: str, tz: str = "Asia/Seoul", *, fcm: bool = False) -> str:
    """``fcm``: also store FCM credentials (encrypted as the admin API does), which sending needs."""
    with runtime.sessions.begin() as s:
        s.execute(text("INSERT INTO service (service, display_name, timezone, created_at) VALUES (:s, :name, :tz, :now)"),
                  {"s": service, "name": f"Test {service}", "tz": tz, "now": _now()})
    if fcm:
        from notee.crypto import SecretsBox
        from notee.domain.credentials import set_fcm_credentials
        from tests.api_helpers import shared_service_account

        box = SecretsBox(runtime.settings.credentials_key.get_secret_value())
        with runtime.sessions() as s:
            set_fcm_credentials(s, box, service, shared_service_account())
    return service


def make_user(runtime, service: str, service_user_id: str | None = None) -> str:
    user_id = str(uuid.uuid4())
    with runtime.sessions.begin() as s:
        s.execute(text("INSERT INTO `user` VALUES (:s, :su, 'name', :u, :now, :now)"),
                  {"s": service, "su": service_user_id or user_id, "u": user_id, "now": _now()})
    return user_id


def make_device(runtime, service: str, user_id: str, token: str, os: str = "AOS") -> str:
    with runtime.sessions.begin() as s:
        s.execute(text("INSERT INTO device VALUES (:s, :u, :t, :os, 'KR', :now, :now)"),
                  {"s": service, "u": user_id, "t": token, "os": os, "now": _now()})
    return token


def make_template(runtime, service: str, method: str, type_: str, title: str = "Hi {{name}}",
                  body: str = "Body") -> str:
    key = str(uuid.uuid4())
    with runtime.sessions.begin() as s:
        s.execute(text("INSERT INTO notification_template (service, notification_method, notification_type, title,"
                       " body, notification_key, created_at, updated_at) VALUES (:s, :m, :t, :ti, :b, :k, :now, :now)"),
                  {"s": service, "m": method, "t": type_, "ti": title, "b": body, "k": key, "now": _now()})
    return key
