"""What the emulator's FCM persona decides of a send's body (``notee.emulator.fcm``): its JSON, its
one target, and whether FCM's field rules or its size limit refuse it, decided once per body with
its token (and Notee's notification id) cut out.

A fan-out sends one body per page with only the token and the notification id changing. Nothing
FCM decides of a body depends on the token's value, nor on the notification id's but for its length
(the size limit counts it), so a body is cut there and the rest looked up: the JSON is decoded and
the rules applied once per distinct rest, not per request. A cut is trusted only when the first body
of its kind, decoded again with other strings spliced in at the cuts, reads as the same message with
those strings as its token and id: then any body with the same rest and plain strings at the cuts
(no escapes, no control characters) is that message too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from notee.core.notification_id import KEY as NID_KEY
from notee.emulator.cuts import plain, string_at
from notee.emulator.h2blocks import JSON_HEADERS
from notee.emulator.rules import FcmProblem, check_fcm
from notee.emulator.state import Response

FCM_PAYLOAD_LIMIT = 4096
_TOKEN_AT = b'"token":'
_NID_AT = b'"' + NID_KEY.encode() + b'":'
_PROBE_TOKEN, _PROBE_NID = "emu-probe-token", "emu-probe-id"


class BadBody(Exception):
    """A body FCM refuses before its target is known: ``response`` is its answer."""

    def __init__(self, response: Response) -> None:
        super().__init__(response[0])
        self.response = response


def bare_error(status: int, rpc: str, message: str) -> Response:
    return (
        status,
        JSON_HEADERS,
        json.dumps({"error": {"code": status, "message": message, "status": rpc}}, indent=2).encode(),
    )


def _field_error(field: str, text: str, message: str) -> Response:
    error = {
        "code": 400,
        "message": message,
        "status": "INVALID_ARGUMENT",
        "details": [
            {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"},
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field, "description": text}],
            },
        ],
    }
    return 400, list(JSON_HEADERS), json.dumps({"error": error}, indent=2).encode()


def fcm_bad_field(problem: FcmProblem) -> Response:
    """What FCM answers for a message field it refuses (unknown, or a bad value)."""
    return _field_error(problem.field, problem.text, problem.text)


def fcm_too_big() -> Response:
    """What FCM answers for a payload over 4,096 bytes."""
    return _field_error("message", "Message is too big", "Request contains an invalid argument.")


def _fcm_payload_size(message: dict[str, Any]) -> int:
    """FCM's 4,096-byte limit counts the message's payload (notification and data, and what a device
    gets of the platform blocks: android.notification, apns.payload), not the token, the headers or
    the request envelope."""
    payload: dict[str, Any] = {k: message[k] for k in ("notification", "data") if k in message}
    if isinstance(message.get("android"), dict) and "notification" in message["android"]:
        payload["android"] = {"notification": message["android"]["notification"]}
    if isinstance(message.get("apns"), dict) and "payload" in message["apns"]:
        payload["apns"] = {"payload": message["apns"]["payload"]}
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


def _judge(message: dict[str, Any]) -> tuple[str, Response] | None:
    """FCM's answer to a message its field rules or its size limit refuse, with the count it adds
    to (empty: none); None when it passes."""
    try:
        check_fcm(message)
    except FcmProblem as problem:
        return "fcm.invalid", fcm_bad_field(problem)
    if _fcm_payload_size(message) > FCM_PAYLOAD_LIMIT:
        return "", fcm_too_big()
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """A body's message (as first seen, with that body's token), whether it asked ``validate_only``,
    and FCM's refusal of it (None: accepted)."""

    message: dict[str, Any]
    validate_only: bool
    refusal: tuple[str, Response] | None

    def message_for(self, token: str, nid: str | None) -> dict[str, Any]:
        """The message of a body of this verdict with ``token`` as its target and ``nid`` as its
        notification id (None: the body was not cut there): what ``GET /_emu/requests/last`` and
        the delivery journal show."""
        message = self.message
        if message.get("token") != token:
            message = {**message, "token": token}
        if nid is not None and message["data"][NID_KEY] != nid:
            message = {**message, "data": {**message["data"], NID_KEY: nid}}
        return message


def _decode(body: bytes) -> tuple[dict[str, Any], str, bool]:
    """The message, its one target and ``validate_only``; ``BadBody`` when FCM refuses the JSON."""
    try:
        doc = json.loads(body)
        message = doc["message"]
        targets = [message[k] for k in ("token", "fid", "topic", "condition") if k in message]
    except (ValueError, KeyError, TypeError):
        raise BadBody(bare_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")) from None
    if len(targets) != 1 or not isinstance(targets[0], str):
        raise BadBody(bare_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument."))
    return message, targets[0], bool(doc.get("validate_only"))


# A body cut: (before the token, between the token and the id or None, after, the id's length)
Cut = tuple[bytes, bytes | None, bytes, int]


class BodyVerdicts:
    """``read(body)``: the token and the ``Verdict`` of an FCM send's body; bodies that differ only
    in their token and notification id share a verdict (the module docstring says why that holds).
    The last body's cut is tried first without slicing; others by their rest, ``KEPT`` at most."""

    KEPT = 1024

    def __init__(self) -> None:
        self.kept: dict[Cut, Verdict] = {}
        self.last: tuple[Cut, Verdict] | None = None

    def read(self, body: bytes) -> tuple[str, str | None, Verdict]:
        """The body's target, its notification id where it was cut (None: not cut there), its verdict."""
        last = self.last
        if last is not None:
            hit = self._same_as(body, last[0])
            if hit is not None:
                return hit[0], hit[1], last[1]
        found = self._cut(body)
        if found is not None:
            cut, token, nid = found
            verdict = self.kept.get(cut)
            if verdict is None:
                verdict = self._first(body, cut, token, nid)
                if verdict is None:  # a cut not to be trusted: this body alone
                    return self._alone(body)
                if len(self.kept) >= self.KEPT:
                    self.kept.clear()
                self.kept[cut] = verdict
            self.last = (cut, verdict)
            return token, nid, verdict
        return self._alone(body)

    @staticmethod
    def _alone(body: bytes) -> tuple[str, None, Verdict]:
        message, target, validate_only = _decode(body)
        return target, None, Verdict(message, validate_only, _judge(message))

    @staticmethod
    def _same_as(body: bytes, cut: Cut) -> tuple[str, str | None] | None:
        """The token and id of ``body`` if it is cut like ``cut`` (the same rest, plain strings at
        the cuts)."""
        head, mid, tail, nid_len = cut
        if not (body.startswith(head) and body.endswith(tail)):
            return None
        start, stop = len(head), len(body) - len(tail)
        if mid is None:
            raw = body[start:stop] if stop >= start else b'"'
            if raw.isascii() and b'"' not in raw and b"\\" not in raw:  # plain(), inline: per push
                text = raw.decode("ascii")
                return (text, None) if text.isprintable() else None
            token = plain(raw)
            return None if token is None else (token, None)
        end = body.find(b'"', start, stop)
        if end < 0 or not body.startswith(mid, end) or stop - end - len(mid) != nid_len:
            return None
        raw_token, raw_nid = body[start:end], body[end + len(mid) : stop]
        # what plain() checks, inline (this runs per push): no quote (the token has none: it ends
        # at the first), no escape, printable UTF-8; ASCII decodes without a try
        if b"\\" in raw_token or b"\\" in raw_nid or b'"' in raw_nid:
            return None
        if raw_token.isascii() and raw_nid.isascii():
            token, nid = raw_token.decode("ascii"), raw_nid.decode("ascii")
            return (token, nid) if token.isprintable() and nid.isprintable() else None
        plain_token, plain_nid = plain(raw_token), plain(raw_nid)
        return None if plain_nid is None or plain_token is None else (plain_token, plain_nid)

    @staticmethod
    def _cut(body: bytes) -> tuple[Cut, str, str | None] | None:
        at = string_at(body, _TOKEN_AT, 0)
        if at is None:
            return None
        token = plain(body[at[0] : at[1]])
        if token is None:
            return None
        nid_at = string_at(body, _NID_AT, at[1])
        nid = None if nid_at is None else plain(body[nid_at[0] : nid_at[1]])
        if nid_at is None or nid is None:
            return (body[: at[0]], None, body[at[1] :], 0), token, None
        cut = (body[: at[0]], body[at[1] : nid_at[0]], body[nid_at[1] :], nid_at[1] - nid_at[0])
        return cut, token, nid

    @staticmethod
    def _first(body: bytes, cut: Cut, token: str, nid: str | None) -> Verdict | None:
        """The verdict of the first body of a cut, if the cut is where its token and id are."""
        message, target, validate_only = _decode(body)
        head, mid, tail, _ = cut
        spliced = head + _PROBE_TOKEN.encode() + (tail if mid is None else mid + _PROBE_NID.encode() + tail)
        try:
            probe = json.loads(spliced)
            same = probe["message"]["token"] == _PROBE_TOKEN and target == token
            probe["message"]["token"] = token
            if nid is not None:
                same = same and probe["message"]["data"][NID_KEY] == _PROBE_NID
                probe["message"]["data"][NID_KEY] = nid
        except (ValueError, KeyError, TypeError):
            return None
        if not same or probe != json.loads(body):
            return None
        return Verdict(message, validate_only, _judge(message))
