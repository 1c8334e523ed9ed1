"""The emulator's FCM persona: the HTTP v1 send endpoint and Google's OAuth token endpoint.

Wire formats follow docs/PROVIDERS.md and https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
(google.rpc.Status bodies whose ``details`` carry ``type.googleapis.com/google.firebase.fcm.v1.FcmError``).
"""

from __future__ import annotations

import base64
import json
import math
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl

from notee.emulator.rules import FcmProblem, check_fcm
from notee.emulator.state import JSON_HEADERS, LAST_REQUESTS_MAX, Response, Scope, State

# errorCode -> (HTTP status, google.rpc status, message); messages as FCM sends them.
FCM_ERRORS: dict[str, tuple[int, str, str]] = {
    "UNREGISTERED": (404, "NOT_FOUND", "Requested entity was not found."),
    "INVALID_ARGUMENT": (400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"),
    "SENDER_ID_MISMATCH": (403, "PERMISSION_DENIED", "SenderId mismatch"),
    "QUOTA_EXCEEDED": (429, "RESOURCE_EXHAUSTED", "Quota exceeded."),
    "UNAVAILABLE": (503, "UNAVAILABLE", "The service is currently unavailable."),
    "INTERNAL": (500, "INTERNAL", "Internal error encountered."),
    "THIRD_PARTY_AUTH_ERROR": (401, "UNAUTHENTICATED", "Auth error from APNS or Web Push Service"),
}
FCM_DEFAULT_CODE = {429: "QUOTA_EXCEEDED", 500: "INTERNAL", 503: "UNAVAILABLE"}
FCM_PAYLOAD_LIMIT = 4096


def fcm_error(
    code: str,
    retry_after: str | None = None,
    *,
    status: int | None = None,
    message: str | None = None,
    details: bool = True,
) -> Response:
    http, rpc, text = FCM_ERRORS.get(code, (status or 400, code, code))
    error: dict[str, Any] = {"code": status or http, "message": message or text, "status": rpc}
    if details:
        error["details"] = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]
    headers = list(JSON_HEADERS)
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    return status or http, headers, json.dumps({"error": error}, indent=2).encode()


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


def fcm_bad_field(problem: FcmProblem) -> Response:
    """What FCM answers for a message field it refuses (unknown, or a bad value)."""
    error = {
        "code": 400,
        "message": problem.text,
        "status": "INVALID_ARGUMENT",
        "details": [
            {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"},
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": problem.field, "description": problem.text}],
            },
        ],
    }
    return 400, list(JSON_HEADERS), json.dumps({"error": error}, indent=2).encode()


def fcm_too_big() -> Response:
    """What FCM answers for a payload over 4,096 bytes."""
    error = {
        "code": 400,
        "message": "Request contains an invalid argument.",
        "status": "INVALID_ARGUMENT",
        "details": [
            {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"},
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": "message", "description": "Message is too big"}],
            },
        ],
    }
    return 400, list(JSON_HEADERS), json.dumps({"error": error}, indent=2).encode()


def oauth_token(state: State, body: bytes) -> Response:
    """Google's OAuth 2.0 token endpoint as a service account uses it (``token_uri``): a JWT-bearer
    grant in, an access token that expires after ``fcm_token_lifetime_s`` out. The assertion's
    signature is not checked (the emulator does not hold the accounts' public keys)."""
    form = dict(parse_qsl(body.decode(errors="replace")))
    if (
        form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer"
        or _jwt_claims(form.get("assertion", "").encode()) is None
    ):
        return (
            400,
            list(JSON_HEADERS),
            json.dumps({"error": "invalid_grant", "error_description": "Invalid JWT."}).encode(),
        )
    token = "ya29.emu-" + uuid.uuid4().hex
    lifetime = state.realism.fcm_token_lifetime_s
    if len(state.issued) > 10_000:
        state.issued = {t: e for t, e in state.issued.items() if e > time.time()}
    state.issued[token] = time.time() + lifetime
    state.counts["oauth.token_issued"] += 1
    return (
        200,
        list(JSON_HEADERS),
        json.dumps({"access_token": token, "expires_in": int(lifetime), "token_type": "Bearer"}).encode(),
    )


def _bare_error(status: int, rpc: str, message: str) -> Response:
    return (
        status,
        JSON_HEADERS,
        json.dumps({"error": {"code": status, "message": message, "status": rpc}}, indent=2).encode(),
    )


def fcm(state: State, scope: Scope, project: str, body: bytes) -> Response:
    state.counts["fcm.recv"] += 1
    headers = dict(scope["headers"])
    auth = headers.get(b"authorization", b"")
    realism = state.realism
    now = time.time()
    bearer = auth[7:].decode()
    if (
        not auth.startswith(b"Bearer ")
        or bearer in state.rejected_bearers
        or "*" in state.rejected_bearers
        or (realism.enabled and realism.fcm_auth and state.issued.get(bearer, 0.0) <= now)
    ):
        state.counts["fcm.unauthenticated"] += 1
        return _bare_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. "
            "Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        )
    try:
        doc = json.loads(body)
        message = doc["message"]
        targets = [message[k] for k in ("token", "fid", "topic", "condition") if k in message]
    except (ValueError, KeyError, TypeError):
        return _bare_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
    if len(targets) != 1 or not isinstance(targets[0], str):
        return _bare_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument.")
    token = targets[0]
    if realism.enabled:
        wait = state.over_limit(("fcm-project", project), realism.fcm_quota_per_minute, now)
        if wait is not None:
            state.counts["fcm.quota_exceeded"] += 1
            return fcm_error("QUOTA_EXCEEDED", str(max(1, math.ceil(wait))))
        if state.over_limit(("fcm-device", token), realism.device_per_minute, now) is not None:
            state.counts["fcm.device_rate"] += 1
            return fcm_error("QUOTA_EXCEEDED", message="Device message rate exceeded.")
    state.attempts[token] += 1
    if len(state.last) < LAST_REQUESTS_MAX or token in state.last:
        state.last[token] = {
            "api": "fcm",
            "path": scope["path"],
            "body": message,
            "validate_only": bool(doc.get("validate_only")),
            "headers": list(scope["headers"]),  # as received: state.last_view drops authorization
        }
    fault = state.take_fault("fcm", token)
    if fault:
        state.counts["fcm.fault"] += 1
        return fcm_error(fault.code, fault.retry_after, status=fault.status)
    code = state.fcm_tokens.get(token)
    if code:
        state.counts["fcm.error"] += 1
        return fcm_error(code)
    refused = _refusal(message, body, token)
    if refused is not None:
        count, (status, answer_headers, out) = refused
        if count:
            state.counts[count] += 1
        return status, list(answer_headers), out
    if token in state.last:
        state.last[token]["device"] = message  # what a device gets of it: state.last_view
    state.counts["fcm.ok"] += 1
    state.delivered["fcm"][token] += 1
    state.record("fcm", token, message.get("data"))
    state.seq += 1
    name = f"projects/{project}/messages/0:{int(time.time() * 1000)}{state.seq:08d}%e1e1e1e1"
    # what json.dumps({"name": name}, indent=2) writes, without its pure-Python indenting encoder
    return 200, JSON_HEADERS, b'{\n  "name": ' + json.dumps(name).encode() + b"\n}"


# A fan-out sends one message body per page with only the token changing: what the field rules and
# the size limit say of a body depends only on the rest of it, so it is decided once per distinct
# rest (the body with its one token string cut out, and where it was cut) and remembered.
_REFUSALS: dict[tuple[bytes, int], tuple[str, Response] | None] = {}
_REFUSALS_KEPT = 1024


def _refusal(message: dict[str, Any], body: bytes, token: str) -> tuple[str, Response] | None:
    """FCM's answer to a message its field rules or its size limit refuse, with the count it adds
    to (empty: none); None when it passes."""
    if not token.isprintable() or '"' in token or "\\" in token:  # JSON escapes it: not found as is
        return _judge(message)
    needle = b'"' + token.encode() + b'"'
    at = body.find(needle)
    if at < 0 or body.find(needle, at + 1) >= 0:  # not cut out exactly once: decided for this body alone
        return _judge(message)
    key = (body[:at] + body[at + len(needle) :], at)
    if key not in _REFUSALS:
        if len(_REFUSALS) >= _REFUSALS_KEPT:
            _REFUSALS.clear()
        _REFUSALS[key] = _judge(message)
    return _REFUSALS[key]


def _judge(message: dict[str, Any]) -> tuple[str, Response] | None:
    try:
        check_fcm(message)
    except FcmProblem as problem:
        return "fcm.invalid", fcm_bad_field(problem)
    if _fcm_payload_size(message) > FCM_PAYLOAD_LIMIT:
        return "", fcm_too_big()
    return None


def _jwt_claims(raw: bytes) -> dict[str, Any] | None:
    try:
        head, claims, _sig = raw.split(b".")
        json.loads(base64.urlsafe_b64decode(head + b"=" * (-len(head) % 4)))
        payload = json.loads(base64.urlsafe_b64decode(claims + b"=" * (-len(claims) % 4)))
        return payload if isinstance(payload, dict) else None
    except (ValueError, TypeError):
        return None
