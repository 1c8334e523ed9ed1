"""What the provider tests compare Notee's senders with: firebase-admin's own message for a Notee
``Message`` (``sdk_message``) and an APNs token-auth key (the ``p8`` fixture, a P-256 key in PEM, as
Apple's .p8 files hold). Registered as a plugin by tests/conftest.py: request the fixture, do not
import it."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notee.providers.base import Message

__all__ = ["p8", "sdk_message"]


@pytest.fixture(scope="module")
def p8() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def sdk_message(m: Message, *, now: float) -> Any:
    """firebase-admin's ``messaging.Message`` for what Notee sends as ``m`` (same TTL, priority, collapse key)."""
    from firebase_admin import messaging

    headers = {"apns-priority": "10" if m.priority == "high" else "5"}
    if m.ttl_seconds is not None:
        headers["apns-expiration"] = str(int(now) + m.ttl_seconds)
    if m.collapse_key:
        headers["apns-collapse-id"] = m.collapse_key
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # token= is deprecated in 7.7 in favour of fid=
        return messaging.Message(
            token=m.device_token,
            notification=messaging.Notification(title=m.title, body=m.body),
            data=dict(m.data) or None,
            android=messaging.AndroidConfig(priority=m.priority, ttl=m.ttl_seconds, collapse_key=m.collapse_key),
            apns=messaging.APNSConfig(headers=headers),
        )
