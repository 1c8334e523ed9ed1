"""Web Push provider: browsers' push services (FCM web, Mozilla autopush, Apple web push), straight
from their standards, over Notee's HTTP/2 client with one pool per push-service origin.

- RFC 8030: ``POST <endpoint>`` with ``TTL`` (required), ``Urgency`` (``high`` / ``normal`` from the
  push's priority) and ``Topic`` (the collapse key: a later message with the same topic replaces a
  waiting one; at most 32 base64url characters, so a longer key is hashed to fit).
- RFC 8291 (``Content-Encoding: aes128gcm``) and RFC 8292 (VAPID): ``notee.providers.webpush_crypto``.
- Answers (``classify_webpush``): 201 sent; 404 / 410 the subscription is gone (prune); 429 and 5xx
  retried honouring ``Retry-After``; 413 refused (never expected: publishing refuses a push over
  4,096 encrypted bytes); 400 a request error, 401 / 403 a VAPID error, both with the service's reason.
  https://datatracker.ietf.org/doc/html/rfc8030#section-5,
  https://github.com/mozilla-services/autopush-rs (errors), https://developer.apple.com/documentation/usernotifications/sending-web-push-notifications-in-web-apps-and-browsers
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from notee.core import notification_id, webpush_token
from notee.providers.base import Delivered, Failed, InvalidToken, Message, Outcome, RetryAfter
from notee.providers.http2 import TransportError
from notee.providers.http2_pool import Pool
from notee.providers.payload import Rich
from notee.providers.retry import parse_retry_after
from notee.providers.webpush_crypto import RECORD_SIZE, VapidSigner, encrypt, encrypted_size

PAYLOAD_LIMIT = RECORD_SIZE  # push services accept at least 4,096 bytes of encrypted body (RFC 8030 section 7.2)
DEFAULT_TTL_S = 2_419_200  # 4 weeks, FCM's default, when the push has no TTL (the header is required)
_TOPIC_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


def webpush_payload(
    title: str, body: str, data: Mapping[str, str] | None, rich: Rich | None = None, nid: str = ""
) -> dict[str, Any]:
    """The JSON a service worker's ``push`` event reads (docs/WEB-PUSH.md): ``title``, ``body``,
    ``data``; with rich fields, ``image`` and a ``link`` in ``data``. A background push has no title/body.
    ``nid``: the notification id, in ``data`` (``notification_id.KEY``), as FCM carries it."""
    out: dict[str, Any] = {}
    if rich is None or not rich.background:
        out["title"], out["body"] = title, body
    merged = {**(data or {}), **(rich.data if rich is not None else {})}
    out["data"] = notification_id.stamp(merged, nid)
    if rich is not None and rich.fcm_notification.get("image"):
        out["image"] = rich.fcm_notification["image"]
    return out


def plaintext(title: str, body: str, data: Mapping[str, str] | None, rich: Rich | None = None, nid: str = "") -> bytes:
    payload = webpush_payload(title, body, data, rich, nid)
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def payload_bytes(title: str, body: str, data: Mapping[str, str] | None, rich: Rich | None = None) -> int:
    """Bytes of the encrypted body: what push services measure against PAYLOAD_LIMIT (with a
    notification id of its full length, as every push carries one)."""
    return encrypted_size(len(plaintext(title, body, data, rich, notification_id.SAMPLE)))


def topic_header(collapse_key: str) -> bytes:
    """RFC 8030 section 5.4: a ``Topic`` is at most 32 characters of the base64url alphabet."""
    if _TOPIC_RE.match(collapse_key):
        return collapse_key.encode()
    return base64.urlsafe_b64encode(hashlib.sha256(collapse_key.encode()).digest())[:32]


def push_headers(m: Message) -> list[tuple[bytes, bytes]]:
    """RFC 8030's ``TTL`` (required: the push's, else DEFAULT_TTL_S), ``Urgency`` and ``Topic``."""
    headers = [
        (b"ttl", str(m.ttl_seconds if m.ttl_seconds is not None else DEFAULT_TTL_S).encode()),
        (b"urgency", b"high" if m.priority == "high" else b"normal"),
    ]
    collapse = m.collapse_key or (m.rich.collapse_key if m.rich is not None else None)
    if collapse:
        headers.append((b"topic", topic_header(collapse)))
    return headers


def _reason(body: bytes) -> str:
    """The push service's own words: Apple's ``reason``, autopush's ``message``, FCM's text."""
    text = body[:500].decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(parsed, dict):
        for key in ("reason", "message", "error"):
            if parsed.get(key):
                return str(parsed[key])[:200]
    return ""


def classify_webpush(
    status: int, body: bytes, location: bytes | None = None, retry_after: bytes | None = None
) -> Outcome:
    """One push service answer -> an outcome (the table: tests/unit/test_webpush.py)."""
    if status in (200, 201, 202):
        return Delivered(location.decode("ascii", "replace") if location else "")
    reason = _reason(body)
    if status in (404, 410):
        return InvalidToken(reason or ("Gone" if status == 410 else "NotFound"))
    if status == 429 or status >= 500:
        return RetryAfter(reason or f"HTTP {status}", parse_retry_after(retry_after), provider_wide=status >= 500)
    if status in (401, 403):
        # The VAPID key or its JWT was refused: for every device when the key is wrong, for the old
        # subscriptions only after a key rotation (they were made with the previous public key).
        return Failed(f"vapid_rejected: {status} {reason}".strip())
    if status == 413:
        return Failed(f"payload_too_large: 413 {reason}".strip())
    return Failed(f"request_rejected: {status} {reason}".strip())  # 400 and other 4xx


class WebPushProvider:
    """One service's Web Push sender: its VAPID signer, the process's pools (one per origin)."""

    name = "webpush"

    def __init__(self, signer: VapidSigner, pools: Callable[[str], Pool], *, timeout: float = 30.0) -> None:
        self._signer = signer
        self._pools = pools
        self._timeout = timeout

    def _item(
        self, m: Message, sub: webpush_token.WebSubscription, body: bytes
    ) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
        headers = [
            (b"authorization", self._signer.header(sub.origin)),
            (b"content-encoding", b"aes128gcm"),
            (b"content-type", b"application/octet-stream"),
            (b"ttl", str(m.ttl_seconds if m.ttl_seconds is not None else DEFAULT_TTL_S).encode()),
            (b"urgency", b"high" if m.priority == "high" else b"normal"),
        ]
        collapse = m.collapse_key or (m.rich.collapse_key if m.rich is not None else None)
        if collapse:
            headers.append((b"topic", topic_header(collapse)))
        path = sub.endpoint[len(sub.origin) :] or "/"
        return path.encode(), headers, body

    def _prepare(self, messages: Sequence[Message]) -> tuple[dict[str, list[int]], list[Any], list[Outcome | None]]:
        """Encrypt each message for its subscription, grouped by origin; outcomes of those that fail here."""
        texts: dict[tuple[object, ...], bytes] = {}  # a fan-out page shares one payload: encode it once
        by_origin: dict[str, list[int]] = {}
        items: list[Any] = [None] * len(messages)
        early: list[Outcome | None] = [None] * len(messages)
        for i, m in enumerate(messages):
            try:
                sub = webpush_token.decode(m.device_token)
            except ValueError:
                early[i] = InvalidToken("not a web push subscription")
                continue
            if m.notification_id:  # each device's own id: its own text (the encryption is its own anyway)
                text = plaintext(m.title, m.body, m.data, m.rich, m.notification_id)
            else:
                key = (m.title, m.body, tuple(m.data.items()) if m.data else (), id(m.rich))
                text = texts.get(key) or texts.setdefault(key, plaintext(m.title, m.body, m.data, m.rich))
            if encrypted_size(len(text)) > PAYLOAD_LIMIT:
                early[i] = Failed(f"payload_too_large: {encrypted_size(len(text))} encrypted bytes")
                continue
            items[i] = self._item(m, sub, encrypt(text, sub.p256dh, sub.auth))
            by_origin.setdefault(sub.origin, []).append(i)
        return by_origin, items, early

    async def send(self, messages: Sequence[Message]) -> list[Outcome]:
        by_origin, items, out = self._prepare(messages)
        groups = list(by_origin.items())
        # every origin's pool at once: one slow push service does not hold up the others
        answered = await asyncio.gather(
            *(self._pools(origin).request_batch([items[i] for i in idx], self._timeout) for origin, idx in groups)
        )
        for (_origin, idx), answers in zip(groups, answered, strict=True):
            for i, r in zip(idx, answers, strict=True):
                if isinstance(r, TransportError):
                    out[i] = RetryAfter(f"transport: {r}"[:200], None, transport=True)
                else:
                    out[i] = classify_webpush(
                        r.status, r.body, r.headers.get(b"location"), r.headers.get(b"retry-after")
                    )
        return [o if o is not None else Failed("not sent") for o in out]

    def circuit(self, message: Message) -> str:
        """``webpush:<origin>``: the fan-out's circuit breaker guards each push service on its own
        (``notee.providers.base.Circuits``), so autopush failing does not stop FCM web or Apple."""
        endpoint = message.device_token.split(".", 2)[-1]
        return "webpush:" + "/".join(endpoint.split("/", 3)[:3])  # https://host[:port], as WebSubscription.origin

    async def close(self) -> None:
        """The pools belong to the process's ProviderSet, which closes them."""
