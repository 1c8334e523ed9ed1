"""APNs provider: HTTP/2 provider API with token (ES256 JWT) authentication, over Notee's lean
HTTP/2 client (aioapns, the reference client, is exercised against the same emulator in the tests).

- JWT: ``{"alg":"ES256","kid":key_id}`` / ``{"iss":team_id,"iat":now}``, re-signed every 50 min
  (Apple: not more often than every 20 min, not less than every 60).
- Reasons: https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jwt

from notee.core import notification_id
from notee.core.errors import ProviderConfigError
from notee.providers.base import Delivered, Failed, InvalidToken, Message, Outcome, RetryAfter
from notee.providers.http2 import TransportError
from notee.providers.http2_pool import Pool
from notee.providers.payload import Rich
from notee.providers.retry import parse_retry_after

log = logging.getLogger(__name__)

PRODUCTION_URL = "https://api.push.apple.com"
SANDBOX_URL = "https://api.sandbox.push.apple.com"
JWT_REFRESH_S = 50 * 60
# "The maximum size of a notification payload is 4 KB (4096 bytes)" for a regular remote notification:
# https://developer.apple.com/documentation/usernotifications/generating-a-remote-notification
PAYLOAD_LIMIT = 4096
# What differs on every request to APNs (the device token is in the path): HPACK literals that never
# enter the table, the rest of a page's header blocks is then one encoding (http2_wire.HeaderEncoder).
PER_REQUEST_HEADERS = (b":path", b"apns-id")
_INVALID_TOKEN_REASONS = {"BadDeviceToken", "DeviceTokenNotForTopic", "Unregistered", "ExpiredToken"}
_CONFIG_REASONS = {
    "InvalidProviderToken",
    "MissingProviderToken",
    "BadCertificate",
    "BadCertificateEnvironment",
    "BadTopic",
    "MissingTopic",
    "TopicDisallowed",
    "Forbidden",
}


def apns_payload(
    title: str, body: str, data: Mapping[str, str] | None, rich: Rich | None = None, nid: str = ""
) -> dict[str, Any]:
    """The APNs JSON payload: ``aps`` plus custom keys at the top level (docs/PAYLOADS.md), the
    notification id last (``notification_id.KEY``: nothing overrides it)."""
    if rich is None:
        out = {"aps": {"alert": {"title": title, "body": body}, "sound": "default"}, **(data or {})}
    else:
        aps: dict[str, Any] = {}
        if not rich.background and (title or body or rich.alert):
            aps["alert"] = {"title": title, "body": body, **rich.alert}
        aps.update(rich.aps)
        out = {"aps": aps, **(data or {}), **rich.data, **rich.custom}
    return notification_id.stamp(out, nid) if nid else out


_NID_MARK = "\x00notee-id\x00"


def _body_parts(m: Message) -> tuple[bytes, bytes]:
    """The JSON body of ``m`` split where its notification id goes (``(body, b"")`` without one)."""
    encoded = json.dumps(
        apns_payload(m.title, m.body, m.data, m.rich, _NID_MARK if m.notification_id else ""),
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    if not m.notification_id:
        return encoded, b""
    head, _, tail = encoded.partition(json.dumps(_NID_MARK).encode())
    return head, tail


def payload_bytes(title: str, body: str, data: Mapping[str, str] | None, rich: Rich | None = None) -> int:
    """Bytes of the payload this sender puts on the wire: APNs' own measure of PAYLOAD_LIMIT, with
    the notification id every push carries."""
    payload = apns_payload(title, body, data, rich, notification_id.SAMPLE)
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


class ExpiredJwt(Exception):
    """403 ExpiredProviderToken: re-sign once and resend; a second one is a configuration error."""


def classify_apns(
    status: int, body: bytes, apns_id: bytes | str | None = None, retry_after: bytes | str | None = None
) -> Outcome:
    if status == 200:
        return Delivered(apns_id.decode() if isinstance(apns_id, bytes) else (apns_id or ""))
    try:
        reason = str(json.loads(body).get("reason", "")) if body else ""
    except (ValueError, AttributeError):
        reason = ""
    if status == 410 or reason in _INVALID_TOKEN_REASONS:
        return InvalidToken(reason or "Unregistered")
    if reason == "ExpiredProviderToken":
        raise ExpiredJwt()
    if reason in _CONFIG_REASONS or status == 403:
        raise ProviderConfigError(f"APNs rejected the service's key or topic ({status} {reason})")
    if status == 429 or status >= 500:
        # 429 TooManyRequests is about one device token; 500 InternalServerError, 503
        # ServiceUnavailable / Shutdown are the server's, nobody's device
        return RetryAfter(reason or f"HTTP {status}", parse_retry_after(retry_after), provider_wide=status >= 500)
    return Failed(f"{status} {reason}".strip())  # 413 PayloadTooLarge, 400 BadPriority, ...


class ApnsJwt:
    """The provider token of one APNs key, re-signed every JWT_REFRESH_S seconds."""

    def __init__(
        self,
        private_key: str,
        key_id: str,
        team_id: str,
        *,
        refresh_s: float = JWT_REFRESH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key, self._kid, self._team = private_key, key_id, team_id
        self._refresh_s, self._clock = refresh_s, clock
        self._value: bytes = b""
        self._issued = 0.0

    def bearer(self, *, force: bool = False, stale: bytes | None = None) -> bytes:
        """The current provider token (``bearer ...``); ``force`` re-signs it, unless ``stale`` (the
        token APNs refused) is no longer the current one: pages sent side by side all hear the
        same ExpiredProviderToken, and one re-signing serves them all (a second new token on the
        same connection would be TooManyProviderTokenUpdates)."""
        now = self._clock()
        if force and stale is not None and self._value and self._value != stale:
            return self._value
        if force or not self._value or now - self._issued >= self._refresh_s:
            try:
                token = jwt.encode(
                    {"iss": self._team, "iat": int(now)}, self._key, algorithm="ES256", headers={"kid": self._kid}
                )
            except (ValueError, TypeError, jwt.PyJWTError) as exc:
                raise ProviderConfigError("APNs private key is not a usable ES256 (.p8) key") from exc
            self._value, self._issued = b"bearer " + token.encode(), now
        return self._value


def apns_ids(n: int) -> list[bytes]:
    """``n`` random version-4 UUIDs in APNs' canonical form (8-4-4-4-12 lowercase hex), from one
    ``os.urandom`` call: about a third of ``str(uuid.uuid4())``'s CPU each (measured; it was ~2.7 µs
    of the APNs send path's ~21 µs per message)."""
    raw = bytearray(os.urandom(16 * n))
    out = []
    for at in range(0, 16 * n, 16):
        raw[at + 6] = raw[at + 6] & 0x0F | 0x40  # version 4
        raw[at + 8] = raw[at + 8] & 0x3F | 0x80  # RFC 4122 variant
        h = raw[at : at + 16].hex()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}".encode())
    return out


def apns_headers(
    m: Message, topic: str, bearer: bytes, *, now: float | None = None, apns_id: bytes | None = None
) -> list[tuple[bytes, bytes]]:
    background = m.rich is not None and m.rich.background
    headers = [
        (b"authorization", bearer),
        (b"apns-topic", topic.encode()),
        (b"apns-push-type", b"background" if background else b"alert"),
        (b"apns-priority", b"10" if m.priority == "high" and not background else b"5"),
        (b"apns-id", apns_id or str(uuid.uuid4()).encode()),
    ]
    expiration = m.apns_expiration(now if now is not None else time.time())
    if expiration is not None:
        headers.append((b"apns-expiration", expiration.encode()))
    if m.collapse_key:
        headers.append((b"apns-collapse-id", m.collapse_key.encode()[:64]))
    return headers


class ApnsProvider:
    name = "apns"

    def __init__(self, topic: str, token: ApnsJwt, pool: Pool, *, timeout: float = 30.0) -> None:
        self.topic = topic
        self._jwt = token
        self._pool = pool
        self._timeout = timeout

    async def _send(self, messages: Sequence[Message], bearer: bytes) -> list[Outcome | ExpiredJwt]:
        now = time.time()
        # A page shares one payload and one set of headers: each is built once, not per message.
        bodies: dict[tuple[object, ...], tuple[bytes, bytes]] = {}
        heads: dict[tuple[object, ...], list[tuple[bytes, bytes]]] = {}
        items = []
        ids = apns_ids(len(messages))
        last: Message | None = None
        parts: tuple[bytes, bytes] = (b"", b"")
        head: list[tuple[bytes, bytes]] = []
        for m, apns_id in zip(messages, ids, strict=True):
            # messages_for shares a page's title, body, data and rich objects: the same objects as
            # the previous message's need no key built and looked up
            if last is None or not m.shares_content(last) or bool(m.notification_id) != bool(last.notification_id):
                key = (m.title, m.body, tuple(m.data.items()) if m.data else (), id(m.rich), bool(m.notification_id))
                held = bodies.get(key)
                parts = bodies[key] = _body_parts(m) if held is None else held
            if (
                last is None
                or m.rich is not last.rich
                or m.priority != last.priority
                or m.ttl_seconds != last.ttl_seconds
                or m.collapse_key != last.collapse_key
            ):
                head_key = (id(m.rich), m.priority, m.ttl_seconds, m.collapse_key)
                fixed = heads.get(head_key)
                if fixed is None:
                    fixed = [h for h in apns_headers(m, self.topic, bearer, now=now) if h[0] != b"apns-id"]
                head = heads[head_key] = fixed
            last = m
            # The notification id differs per device: spliced in (it is [0-9a-z._-], nothing JSON escapes).
            nid = m.notification_id
            body = b"".join((parts[0], b'"', nid.encode(), b'"', parts[1])) if nid else parts[0]
            items.append((b"/3/device/" + m.device_token.encode(), [*head, (b"apns-id", apns_id)], body))
        out: list[Outcome | ExpiredJwt] = []
        for r in await self._pool.request_batch(items, self._timeout):
            if isinstance(r, TransportError):
                out.append(RetryAfter(f"transport: {r}"[:200], None, transport=True))
                continue
            if r.status == 200:  # the common answer, without the classifier's call
                out.append(Delivered(r.headers.get(b"apns-id", b"").decode()))
                continue
            try:
                out.append(classify_apns(r.status, r.body, r.headers.get(b"apns-id"), r.headers.get(b"retry-after")))
            except ExpiredJwt as exc:
                out.append(exc)
        return out

    async def send(self, messages: Sequence[Message]) -> list[Outcome]:
        used = self._jwt.bearer()
        results = await self._send(messages, used)
        if all(r.__class__ is Delivered for r in results):  # the common page: nothing to re-sign or resend
            return results  # type: ignore[return-value]
        expired = [i for i, r in enumerate(results) if isinstance(r, ExpiredJwt)]
        resent: dict[int, Outcome] = {}
        if expired:
            bearer = self._jwt.bearer(force=True, stale=used)
            again = await self._send([messages[i] for i in expired], bearer)
            if any(isinstance(r, ExpiredJwt) for r in again):
                raise ProviderConfigError(
                    "APNs says the provider token is expired right after re-signing "
                    "(check the server clock and the key)"
                )
            resent = {i: r for i, r in zip(expired, again, strict=True) if not isinstance(r, ExpiredJwt)}
        return [resent[i] if isinstance(r, ExpiredJwt) else r for i, r in enumerate(results)]

    async def close(self) -> None:
        await self._pool.close()
