"""A browser's push subscription as a WEB device's token (docs/WEB-PUSH.md).

A browser gives ``PushSubscription.toJSON()``: an endpoint URL and two keys, ``p256dh`` (the
browser's P-256 public key, 65 bytes uncompressed) and ``auth`` (a 16-byte secret), both base64url
(RFC 8291 section 2). Notee keeps the three as one token, ``<p256dh>.<auth>.<endpoint>``, so a WEB
device travels the delivery path exactly as an FCM or APNs token does (MySQL device rows,
Cassandra slot rows, rotation, pruning, dead letters) and the sender reads everything it needs from
the fan-out's rows. base64url has no ``.``, so the first two dots split the token unambiguously.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import ec

from notee.core.errors import InvalidInput

TOKEN_MAX = 512  # the device token column (schema/mysql/0001_core.sql)
P256DH_LEN = 87  # 65 bytes in unpadded base64url
AUTH_LEN = 22  # 16 bytes in unpadded base64url
ENDPOINT_MAX = TOKEN_MAX - P256DH_LEN - AUTH_LEN - 2
_B64URL_RE = re.compile(r"^[A-Za-z0-9_-]+={0,2}$")
_ENDPOINT_RE = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no space


@dataclass(frozen=True, slots=True)
class WebSubscription:
    """One browser push subscription: where to POST (``endpoint``) and the keys to encrypt for."""

    endpoint: str
    p256dh: bytes = field(repr=False)
    auth: bytes = field(repr=False)

    @property
    def origin(self) -> str:
        """``https://host[:port]`` of the push service: the VAPID audience and the pool's key."""
        parts = urlsplit(self.endpoint)
        return f"{parts.scheme}://{parts.netloc}"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def b64decode(value: str) -> bytes:
    """base64url with or without padding (browsers give it unpadded)."""
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def _bad(loc: str, msg: str) -> InvalidInput:
    return InvalidInput(f"{loc}: {msg}", details=[{"loc": loc.split("."), "type": "web_push_subscription", "msg": msg}])


def _key(loc: str, value: Any, size: int) -> bytes:
    if not isinstance(value, str) or not _B64URL_RE.match(value):
        raise _bad(loc, "must be a base64url string")
    try:
        raw = b64decode(value.rstrip("="))
    except (binascii.Error, ValueError):
        raise _bad(loc, "must be a base64url string") from None
    if len(raw) != size:
        raise _bad(loc, f"must encode {size} bytes, got {len(raw)}")
    return raw


def check_subscription(endpoint: Any, p256dh: Any, auth: Any, *, loc: str = "subscription") -> WebSubscription:
    """A browser's subscription, validated: an https endpoint with a host, a P-256 public key, a
    16-byte auth secret; InvalidInput (422) naming the field otherwise."""
    if not isinstance(endpoint, str) or not _ENDPOINT_RE.match(endpoint):
        raise _bad(f"{loc}.endpoint", "must be a URL of printable ASCII characters")
    if len(endpoint) > ENDPOINT_MAX:
        raise _bad(f"{loc}.endpoint", f"must be at most {ENDPOINT_MAX} characters")
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise _bad(f"{loc}.endpoint", "must be a URL") from None
    if parts.scheme != "https" or not parts.hostname or parts.username or parts.password:
        raise _bad(f"{loc}.endpoint", "must be an https:// URL with a host (RFC 8030 requires HTTPS)")
    key = _key(f"{loc}.keys.p256dh", p256dh, 65)
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key)
    except ValueError:
        raise _bad(f"{loc}.keys.p256dh", "must be an uncompressed P-256 public key") from None
    return WebSubscription(endpoint, key, _key(f"{loc}.keys.auth", auth, 16))


def encode(sub: WebSubscription) -> str:
    """The device token of a subscription."""
    return f"{_b64(sub.p256dh)}.{_b64(sub.auth)}.{sub.endpoint}"


def decode(token: str) -> WebSubscription:
    """The subscription of a WEB device token (ValueError when it is not one)."""
    p256dh, auth, endpoint = token.split(".", 2)
    if not endpoint.startswith("https://"):
        raise ValueError("not a web push token")
    return WebSubscription(endpoint, b64decode(p256dh), b64decode(auth))


def check_token(token: Any, loc: str = "token") -> WebSubscription:
    """A WEB device token (as ``encode`` makes it), validated like the subscription it holds."""
    if not isinstance(token, str) or token.count(".") < 2:
        raise _bad(loc, "must be a web push token: <p256dh>.<auth>.<endpoint>")
    p256dh, auth, endpoint = token.split(".", 2)
    return check_subscription(endpoint, p256dh, auth, loc=loc)
