"""The emulator's browser push services: ``POST /wp/<flavor>/<id>`` as FCM web push (``fcm``),
Mozilla autopush (``mozilla``) and Apple web push (``apple``) answer it, and the subscriptions a
browser would hold (``POST /_emu/webpush/subscribe``: the emulator keeps the private key).

Each push is checked as the real services check it: the VAPID ``Authorization: vapid t=<jwt>,
k=<key>`` (RFC 8292: ES256 signature against ``k``, ``aud`` the endpoint's origin, ``exp`` in the
future and at most 24 h ahead, a ``sub``; ``k`` the key the subscription was made with, when one was
given), ``Content-Encoding: aes128gcm``, a ``TTL`` (RFC 8030), ``Urgency`` and ``Topic`` values, at
most 4,096 bytes of body. Then, unlike a real push service, it decrypts the message with the
subscription's keys (RFC 8291, ``http_ece``) and records the plaintext, so tests assert on what the
browser's service worker would receive.

Error shapes: FCM answers text, autopush ``{"code", "errno", "error", "message", "more_info"}``, Apple ``{"reason"}``
(https://github.com/mozilla-services/autopush-rs, https://developer.apple.com/documentation/usernotifications/sending-web-push-notifications-in-web-apps-and-browsers).
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notee.emulator.state import Response, Scope, State

FLAVORS = ("fcm", "mozilla", "apple")
BODY_LIMIT = 4096
JWT_MAX_AHEAD_S = 24 * 3600
PUSHES_KEPT = 100  # per subscription
_VAPID_RE = re.compile(r"^vapid t=([^,\s]+),\s*k=([A-Za-z0-9_-]+)$", re.I)
_TOPIC_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_URGENCIES = {b"very-low", b"low", b"normal", b"high"}
_MOZ_MORE_INFO = "http://autopush.readthedocs.io/en/latest/http.html#error-codes"
_MOZ_ERRNO = {400: 110, 401: 109, 403: 109, 404: 102, 410: 103, 413: 104, 429: 201, 500: 999, 503: 202}
_APPLE_REASON = {
    400: "BadRequest",
    401: "BadJwtToken",
    403: "BadJwtToken",
    404: "BadDeviceToken",
    410: "Unregistered",
    413: "PayloadTooLarge",
    429: "TooManyRequests",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}


@dataclass
class WebSub:
    """One subscription a browser would hold: its keys' private halves stay here."""

    flavor: str
    key: ec.EllipticCurvePrivateKey = field(repr=False)
    auth: bytes = field(repr=False)
    server_key: str | None  # the applicationServerKey it was made with (None: any)
    gone: int = 0  # 404 / 410: the browser unsubscribed


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def subscribe(state: State, req: dict[str, Any]) -> dict[str, Any]:
    """A new subscription, as ``PushSubscription.toJSON()`` gives it, at ``req["origin"]``."""
    flavor = str(req.get("flavor", "fcm"))
    if flavor not in FLAVORS:
        raise ValueError(f"flavor must be one of {FLAVORS}")
    sub_id = uuid.uuid4().hex + uuid.uuid4().hex
    key = ec.generate_private_key(ec.SECP256R1())
    auth = os.urandom(16)
    state.web_subs[sub_id] = WebSub(flavor, key, auth, req.get("application_server_key"))
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    origin = str(req["origin"]).rstrip("/")
    return {
        "id": sub_id,
        "endpoint": f"{origin}/wp/{flavor}/{sub_id}",
        "expirationTime": None,
        "keys": {"p256dh": _b64(point), "auth": _b64(auth)},
    }


def _error(flavor: str, status: int, message: str) -> Response:
    if flavor == "mozilla":
        body = {
            "code": status,
            "errno": _MOZ_ERRNO.get(status, 999),
            "error": HTTPStatus(status).phrase,  # autopush's "error" is the status's reason phrase
            "message": message,
            "more_info": _MOZ_MORE_INFO,
        }
        return status, [(b"content-type", b"application/json")], json.dumps(body).encode()
    if flavor == "apple":
        reason = _APPLE_REASON.get(status, "BadRequest")
        return status, [(b"content-type", b"application/json")], json.dumps({"reason": reason}).encode()
    return status, [(b"content-type", b"text/plain; charset=utf-8")], message.encode()


# A refused VAPID header, as each push service answers it: autopush-rs maps every VAPID and JWT error
# to 401 (errno 109); Apple answers 403 {"reason": "BadJwtToken"} for a missing JWT, a wrong key, a
# bad `sub`, a wrong `aud` or an `exp` more than a day ahead; FCM answers 401 for a missing or
# malformed header and 403 for a JWT or key it refuses.
_VAPID_STATUS = {"mozilla": (401, 401), "apple": (403, 403), "fcm": (401, 403)}  # (malformed, refused)
_SUBJECT_RE = re.compile(r"^(mailto:[^\s<>]+@[^\s<>]+|https://\S+)$")


def _check_vapid(headers: dict[bytes, bytes], audience: str, sub: WebSub) -> tuple[int, str] | dict[str, Any]:
    """The JWT's claims, or (status, why) when the push service would refuse it."""
    malformed, refused = _VAPID_STATUS[sub.flavor]
    match = _VAPID_RE.match(headers.get(b"authorization", b"").decode("latin-1"))
    if match is None:
        return malformed, "UnauthorizedRegistration: missing or malformed vapid Authorization header"
    token, k = match.groups()
    if sub.server_key is not None and k != sub.server_key:
        return refused, (
            "InvalidCredentials: the VAPID credentials in the authorization header do not correspond "
            "to the credentials used to create the subscription"
        )
    try:
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), _unb64(k))
        claims: dict[str, Any] = jwt.decode(
            token, public, algorithms=["ES256"], audience=audience, options={"require": ["aud", "exp", "sub"]}
        )
    except (ValueError, jwt.PyJWTError) as exc:
        return refused, f"InvalidCredentials: VAPID JWT refused ({type(exc).__name__})"
    if claims["exp"] > time.time() + JWT_MAX_AHEAD_S:
        return refused, "InvalidCredentials: VAPID JWT exp more than 24 hours ahead"
    if not _SUBJECT_RE.match(str(claims["sub"])):
        return refused, "InvalidCredentials: VAPID JWT sub is not a mailto: or https: URL"
    return claims


def _check_headers(headers: dict[bytes, bytes], body: bytes) -> tuple[int, str] | None:
    if headers.get(b"content-encoding") != b"aes128gcm":
        return 400, "BadRequest: Content-Encoding must be aes128gcm"
    ttl = headers.get(b"ttl", b"")
    if not ttl.isdigit():
        return 400, "BadRequest: missing or invalid TTL header"
    if headers.get(b"urgency", b"normal") not in _URGENCIES:
        return 400, "BadRequest: invalid Urgency header"
    topic = headers.get(b"topic")
    if topic is not None and not _TOPIC_RE.match(topic.decode("latin-1")):
        return 400, "BadRequest: invalid Topic header"
    if len(body) > BODY_LIMIT:
        return 413, "PayloadTooLarge: the encrypted body is over 4096 bytes"
    return None


def _decrypt(sub: WebSub, body: bytes) -> tuple[str | None, Any, str | None]:
    """(the plaintext, it parsed as JSON when it is JSON, the decryption error)."""
    try:
        plain: bytes = http_ece.decrypt(body, private_key=sub.key, auth_secret=sub.auth, version="aes128gcm")
    except Exception as exc:  # any failure is the finding: recorded, and the tests assert on it
        return None, None, f"{type(exc).__name__}: {exc}"
    text = plain.decode("utf-8", "replace")
    try:
        return text, json.loads(text), None
    except ValueError:
        return text, text, None


def _origin(scope: Scope, headers: dict[bytes, bytes]) -> str:
    """The origin this request reached: the VAPID audience it must carry. An HTTP/2 client may send
    ``:authority`` without the port, so the port is the one the server listens on."""
    host = (headers.get(b"host") or headers.get(b":authority") or b"").decode("latin-1")
    if ":" not in host.rsplit("]", 1)[-1]:
        server = scope.get("server") or ("", 443)
        if server[1] != 443:
            host = f"{host}:{server[1]}"
    return f"https://{host}"


def webpush(state: State, scope: Scope, flavor: str, sub_id: str, body: bytes) -> Response:
    """One push to one subscription; every answer is kept with its time (``answers`` of
    ``GET /_emu/webpush/pushes``), so tests count attempts and read the waits between them."""
    state.counts["webpush.recv"] += 1
    state.attempts[sub_id] += 1
    answer = _answer(state, scope, flavor, sub_id, body)
    kept = state.web_answers.setdefault(sub_id, [])
    kept.append({"at": time.time(), "status": answer[0]})
    del kept[:-PUSHES_KEPT]
    return answer


def _answer(state: State, scope: Scope, flavor: str, sub_id: str, body: bytes) -> Response:
    headers = dict(scope["headers"])
    sub = state.web_subs.get(sub_id)
    if sub is None or sub.flavor != flavor:
        return _error(flavor, 404, "NotFound: no such subscription")
    if sub.gone:
        return _error(flavor, sub.gone, "Gone: the subscription has expired or been unsubscribed")
    fault = state.take_fault("webpush", sub_id)
    if fault is not None:
        status, out_headers, out = _error(flavor, fault.status, fault.code)
        if fault.retry_after is not None:
            out_headers.append((b"retry-after", fault.retry_after.encode()))
        return status, out_headers, out
    origin = _origin(scope, headers)
    claims = _check_vapid(headers, origin, sub)
    if isinstance(claims, tuple):
        state.counts["webpush.refused"] += 1
        return _error(flavor, *claims)
    refused = _check_headers(headers, body)
    if refused is not None:
        state.counts["webpush.refused"] += 1
        return _error(flavor, *refused)
    text, payload, error = _decrypt(sub, body)
    state.counts["webpush.ok"] += 1
    state.deliver("webpush", sub_id)
    kept = state.web_pushes.setdefault(sub_id, [])
    kept.append(
        {
            "plaintext": text,
            "payload": payload,
            "decrypt_error": error,
            "ttl": int(headers[b"ttl"]),
            "urgency": headers.get(b"urgency", b"normal").decode(),
            "topic": headers[b"topic"].decode() if b"topic" in headers else None,
            "vapid": {"aud": claims["aud"], "sub": claims["sub"], "exp": claims["exp"]},
            "bytes": len(body),
        }
    )
    del kept[:-PUSHES_KEPT]
    message = uuid.uuid4().hex
    out_headers = [(b"location", f"{origin}/m/{message}".encode())]
    if flavor == "apple":
        out_headers.append((b"apns-id", str(uuid.UUID(message)).encode()))
    return 201, out_headers, b""
