"""The body of an FCM HTTP v1 request (``{"message": ...}``), as firebase-admin's encoder builds it
(``fcm_message``), what FCM counts of it against its size limit (``payload_bytes``), and a fan-out
page's bodies built from one encoding (``PageBodies``). Pure: no I/O."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from notee.core import notification_id
from notee.providers.base import Message
from notee.providers.payload import Rich, merge_android

# "For both message types, the maximum payload is 4096 bytes" -- the notification and data content,
# not the token or the platform blocks: https://firebase.google.com/docs/cloud-messaging/concept-options
PAYLOAD_LIMIT = 4096


def fcm_message(m: Message, *, now: float | None = None) -> dict[str, Any]:
    """The ``message`` object for one device, as firebase-admin's encoder would build it."""
    rich = m.rich
    out: dict[str, Any] = {"token": m.device_token}
    if rich is None or (not rich.background and (m.title or m.body)):
        out["notification"] = {"title": m.title, "body": m.body}
        if rich is not None and rich.fcm_notification:
            out["notification"].update(rich.fcm_notification)
    data = {**m.data, **rich.data} if rich is not None and rich.data else m.data
    if m.notification_id:
        data = notification_id.stamp(data, m.notification_id)
    if data:
        out["data"] = dict(data)
    android: dict[str, Any] = {"priority": "high" if m.priority == "high" else "normal"}
    if m.ttl_seconds is not None:
        android["ttl"] = f"{m.ttl_seconds}s"
    if m.collapse_key:
        android["collapse_key"] = m.collapse_key
    if rich is not None:
        merge_android(android, rich)
    out["android"] = android
    background = rich is not None and rich.background
    apns_headers = {"apns-priority": "10" if m.priority == "high" and not background else "5"}
    expiration = m.apns_expiration(now if now is not None else time.time())
    if expiration is not None:
        apns_headers["apns-expiration"] = expiration
    if m.collapse_key:
        apns_headers["apns-collapse-id"] = m.collapse_key
    if rich is not None:
        apns_headers["apns-push-type"] = rich.kind
    out["apns"] = {"headers": apns_headers}
    if rich is not None:
        if rich.fcm_aps:
            out["apns"]["payload"] = {"aps": rich.fcm_aps}
        if rich.fcm_apns_options:
            out["apns"]["fcm_options"] = dict(rich.fcm_apns_options)
        if rich.fcm_options:
            out["fcm_options"] = dict(rich.fcm_options)
    return out


def counted_content(message: Mapping[str, Any]) -> dict[str, Any]:
    """What FCM's PAYLOAD_LIMIT counts of a message: its notification and data, and what a device
    gets of the platform blocks (``android.notification``, ``apns.payload``); not the token, the
    headers or the envelope. The emulator counts the same (notee/emulator/fcm_rules.py)."""
    content = {k: message[k] for k in ("notification", "data") if k in message}
    if "notification" in message.get("android", {}):
        content["android"] = {"notification": message["android"]["notification"]}
    if "payload" in message.get("apns", {}):
        content["apns"] = {"payload": message["apns"]["payload"]}
    return content


def payload_bytes(title: str, body: str, data: Mapping[str, str] | None, rich: Rich | None = None) -> int:
    """Bytes FCM counts against PAYLOAD_LIMIT (``counted_content``) of the message ``fcm_message`` builds,
    with the notification id every push carries."""
    m = Message("", "AOS", title, body, dict(data or {}), rich=rich, notification_id=notification_id.SAMPLE)
    message = fcm_message(m, now=0)
    return len(json.dumps(counted_content(message), separators=(",", ":"), ensure_ascii=False).encode())


class PageBodies:
    """JSON bodies of consecutive messages that differ only in their token and notification id (every
    message of a fan-out page) are one rendering with those spliced in: the encoding is done once
    per page, not once per device, and the per-message work is one ``bytes.join``. The result is
    byte-identical to ``json.dumps({"message": fcm_message(m)})`` (tests/unit/test_providers_fcm.py)."""

    _MARK = "\x00notee-token\x00"
    _NID_MARK = "\x00notee-id\x00"

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._data: dict[str, str] | None = None
        self._parts: tuple[bytes, bytes, bytes] = (b"", b"", b"")

    def body(self, m: Message) -> bytes:
        return self.bodies((m,))[0]

    def bodies(self, messages: Sequence[Message]) -> list[bytes]:
        """One body per message. A message whose title, body, data and rich fields are the very
        objects of the previous one's (``messages_for`` shares them across a page) reuses its parts
        without comparing them; the clock (``apns-expiration``) is read once per call."""
        now = int(time.time())
        out: list[bytes] = []
        append, json_str = out.append, _json_token
        last: Message | None = None
        head = mid = tail = b""
        for m in messages:
            if (
                last is None
                or not m.shares_content(last)
                or m.ttl_seconds != last.ttl_seconds
                or m.priority != last.priority
                or m.collapse_key != last.collapse_key
                or bool(m.notification_id) != bool(last.notification_id)
            ):
                head, mid, tail = self._template(m, now)
                last = m
            nid = m.notification_id
            if nid:  # the notification id is [0-9a-z._-]: nothing JSON escapes; it comes after the token
                append(b"".join((head, json_str(m.device_token), mid, nid.encode(), tail)))
            else:
                append(head + json_str(m.device_token) + mid)
        return out

    def _template(self, m: Message, now: int) -> tuple[bytes, bytes, bytes]:
        """The body of ``m`` cut around its token and notification id: (before the token, between
        the two, after the id); kept while the next page's messages render the same."""
        nid = m.notification_id
        key = (m.title, m.body, m.ttl_seconds, m.priority, m.collapse_key, m.rich, now, bool(nid))
        if key != self._key or (m.data is not self._data and m.data != self._data):
            marked = Message(
                self._MARK, m.device_os, m.title, m.body, m.data, m.ttl_seconds, m.priority, m.collapse_key, m.rich
            )
            if nid:
                marked = replace(marked, notification_id=self._NID_MARK)
            head, _, rest = encode(marked, now).partition(json.dumps(self._MARK).encode())
            mid, _, tail = rest.partition(json.dumps(self._NID_MARK).encode()) if nid else (rest, b"", b"")
            # the quotes around the id belong to the parts, so a body is one join of five
            self._key, self._data, self._parts = (
                key,
                m.data,
                (head, mid + b'"', b'"' + tail) if nid else (head, mid, tail),
            )
        return self._parts


def _json_token(token: str) -> bytes:
    """A token as a JSON string, as ``json.dumps(..., ensure_ascii=False)`` writes it."""
    if token.isprintable() and '"' not in token and "\\" not in token:  # nothing JSON would escape
        return b'"' + token.encode() + b'"'
    return json.dumps(token, ensure_ascii=False).encode()


def encode(m: Message, now: float | None = None) -> bytes:
    return json.dumps({"message": fcm_message(m, now=now)}, separators=(",", ":"), ensure_ascii=False).encode()
