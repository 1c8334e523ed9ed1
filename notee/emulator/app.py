"""The emulator's ASGI application: FCM HTTP v1, APNs provider API and the ``/_emu`` control API.

Served by granian, one worker, so all state is this process's memory. Wire formats follow
docs/PROVIDERS.md and the upstream docs:
- FCM: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (google.rpc.Status bodies
  whose ``details`` carry ``type.googleapis.com/google.firebase.fcm.v1.FcmError``).
- APNs: https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
  (``apns-id`` echoed on every response, empty 200 body, ``{"reason": ...}`` error bodies in one frame).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

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
APNS_DEFAULT_REASON = {400: "BadDeviceToken", 403: "InvalidProviderToken", 410: "Unregistered", 413: "PayloadTooLarge",
                       429: "TooManyRequests", 500: "InternalServerError", 503: "ServiceUnavailable"}
APNS_PAYLOAD_LIMIT = 4096
FCM_PAYLOAD_LIMIT = 4096
JWT_MAX_AGE_S = 3600
_JSON = [(b"content-type", b"application/json; charset=UTF-8")]
_LAST_REQUESTS_MAX = 10_000
Response = tuple[int, list[tuple[bytes, bytes]], bytes]


@dataclass
class Fault:
    api: str  # "fcm" | "apns"
    match: str  # a token, or "*"
    status: int
    code: str  # FCM errorCode or APNs reason
    retry_after: str | None
    remaining: int


@dataclass
class State:
    fcm_tokens: dict[str, str] = field(default_factory=dict)  # token -> FCM errorCode
    apns_tokens: dict[str, tuple[int, str]] = field(default_factory=dict)  # token -> (status, reason)
    faults: list[Fault] = field(default_factory=list)
    latency_s: float = 0.0
    rejected_bearers: set[str] = field(default_factory=set)
    counts: Counter = field(default_factory=Counter)
    delivered: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))  # api -> token -> n
    attempts: Counter = field(default_factory=Counter)  # token -> requests received
    last: dict[str, dict[str, Any]] = field(default_factory=dict)  # token -> last request seen
    jwt_iat: dict[bytes, int | None] = field(default_factory=dict)
    seq: int = 0

    def take_fault(self, api: str, token: str) -> Fault | None:
        for fault in self.faults:
            if fault.api == api and fault.match in ("*", token) and fault.remaining > 0:
                fault.remaining -= 1
                return fault
        return None


STATE = State()  # the single worker's state; reset through POST /_emu/reset


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    if STATE.latency_s and not scope["path"].startswith("/_emu/"):
        await asyncio.sleep(STATE.latency_s)
    status, headers, out = handle(STATE, scope, body)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": out})


def handle(state: State, scope: dict[str, Any], body: bytes) -> Response:
    """Answer one request (granian's ASGI app and the emulator's own HTTP/2 server both call this)."""
    path: str = scope["path"]
    if path.startswith("/3/device/"):
        return apns(state, scope, path[10:], body)
    if path.startswith("/v1/projects/") and path.endswith("/messages:send"):
        return fcm(state, scope, path[13:-14], body)
    if path.startswith("/_emu/"):
        return control(state, scope["method"], path[6:], scope.get("query_string", b""), body)
    return 404, _JSON, b'{"reason":"BadPath"}'


# --- FCM HTTP v1 ------------------------------------------------------------------------------

def fcm_error(code: str, retry_after: str | None = None, *, status: int | None = None,
              message: str | None = None, details: bool = True):
    http, rpc, text = FCM_ERRORS.get(code, (status or 400, code, code))
    error: dict[str, Any] = {"code": status or http, "message": message or text, "status": rpc}
    if details:
        error["details"] = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]
    headers = list(_JSON)
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    return status or http, headers, json.dumps({"error": error}, indent=2).encode()


def _bare_error(status: int, rpc: str, message: str):
    return status, _JSON, json.dumps({"error": {"code": status, "message": message, "status": rpc}}, indent=2).encode()


def fcm(state: State, scope, project: str, body: bytes):
    state.counts["fcm.recv"] += 1
    headers = dict(scope["headers"])
    auth = headers.get(b"authorization", b"")
    if not auth.startswith(b"Bearer ") or auth[7:].decode() in state.rejected_bearers:
        state.counts["fcm.unauthenticated"] += 1
        return _bare_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. "
                           "Expected OAuth 2 access token, login cookie or other valid authentication credential.")
    try:
        message = json.loads(body)["message"]
        targets = [message[k] for k in ("token", "fid", "topic", "condition") if k in message]
    except (ValueError, KeyError, TypeError):
        return _bare_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
    if len(targets) != 1 or not isinstance(targets[0], str):
        return _bare_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument.")
    token = targets[0]
    state.attempts[token] += 1
    if len(state.last) < _LAST_REQUESTS_MAX or token in state.last:
        state.last[token] = {"api": "fcm", "path": scope["path"], "body": message,
                             "validate_only": bool(json.loads(body).get("validate_only")),
                             "headers": {k.decode(): v.decode() for k, v in scope["headers"]
                                         if k not in (b"authorization",)}}
    fault = state.take_fault("fcm", token)
    if fault:
        state.counts["fcm.fault"] += 1
        return fcm_error(fault.code, fault.retry_after, status=fault.status)
    code = state.fcm_tokens.get(token)
    if code:
        state.counts["fcm.error"] += 1
        return fcm_error(code)
    if len(body) > FCM_PAYLOAD_LIMIT + 512:  # the 4 KB limit applies to the message, not the envelope
        return fcm_error("INVALID_ARGUMENT", message="Message is too big", details=True)
    state.counts["fcm.ok"] += 1
    state.delivered["fcm"][token] += 1
    state.seq += 1
    name = f"projects/{project}/messages/0:{int(time.time() * 1000)}{state.seq:08d}%e1e1e1e1"
    return 200, _JSON, json.dumps({"name": name}, indent=2).encode()


# --- APNs ---------------------------------------------------------------------------------------

def _jwt_iat(raw: bytes) -> int | None:
    """``iat`` of an ES256 provider JWT, or None if it is not one. The signature is not checked:
    the emulator does not hold the services' public keys."""
    try:
        head, claims, _sig = raw.split(b".")
        header = json.loads(base64.urlsafe_b64decode(head + b"=" * (-len(head) % 4)))
        payload = json.loads(base64.urlsafe_b64decode(claims + b"=" * (-len(claims) % 4)))
        if header.get("alg") != "ES256" or not header.get("kid") or not payload.get("iss"):
            return None
        return int(payload["iat"])
    except (ValueError, KeyError, TypeError):
        return None


def _apns_out(status: int, reason: str, apns_id: bytes):
    out: dict[str, Any] = {"reason": reason}
    if status == 410:
        out["timestamp"] = int(time.time() * 1000)
    return status, [(b"apns-id", apns_id), *_JSON], json.dumps(out).encode()


def apns(state: State, scope, token: str, body: bytes):
    state.counts["apns.recv"] += 1
    headers = dict(scope["headers"])
    apns_id = headers.get(b"apns-id") or str(uuid.uuid4()).encode()
    auth = headers.get(b"authorization")
    if not auth:
        return _apns_out(403, "MissingProviderToken", apns_id)
    raw = auth[7:] if auth[:7].lower() == b"bearer " else b""
    if raw not in state.jwt_iat:
        if len(state.jwt_iat) > 10_000:
            state.jwt_iat.clear()
        state.jwt_iat[raw] = _jwt_iat(raw)
    iat = state.jwt_iat[raw]
    if iat is None or raw.decode() in state.rejected_bearers:
        return _apns_out(403, "InvalidProviderToken", apns_id)
    if time.time() - iat > JWT_MAX_AGE_S:
        return _apns_out(403, "ExpiredProviderToken", apns_id)
    if not headers.get(b"apns-topic"):
        return _apns_out(400, "MissingTopic", apns_id)
    state.attempts[token] += 1
    if len(state.last) < _LAST_REQUESTS_MAX or token in state.last:
        state.last[token] = {"api": "apns", "path": scope["path"], "body": json.loads(body or b"null"),
                             "headers": {k.decode(): v.decode() for k, v in scope["headers"]
                                         if k not in (b"authorization",)}}
    fault = state.take_fault("apns", token)
    if fault:
        state.counts["apns.fault"] += 1
        status, h, out = _apns_out(fault.status, fault.code, apns_id)
        if fault.retry_after is not None:
            h.append((b"retry-after", fault.retry_after.encode()))
        return status, h, out
    known = state.apns_tokens.get(token)
    if known:
        state.counts["apns.error"] += 1
        return _apns_out(known[0], known[1], apns_id)
    if not body:
        return _apns_out(400, "PayloadEmpty", apns_id)
    if len(body) > APNS_PAYLOAD_LIMIT:
        return _apns_out(413, "PayloadTooLarge", apns_id)
    state.counts["apns.ok"] += 1
    state.delivered["apns"][token] += 1
    return 200, [(b"apns-id", apns_id)], b""


# --- control API ----------------------------------------------------------------------------------

def _ok(payload: Any = None, status: int = 200):
    return status, [(b"content-type", b"application/json")], json.dumps(payload if payload is not None else {"ok": True}).encode()


def control(state: State, method: str, path: str, query: bytes, body: bytes):
    try:
        req = json.loads(body) if body else {}
        if method == "GET" and path == "stats":
            return _ok({"counts": dict(state.counts), "faults": [f.__dict__ for f in state.faults],
                        "latency_ms": state.latency_s * 1000,
                        "delivered": {api: sum(c.values()) for api, c in state.delivered.items()}})
        if method == "GET" and path == "deliveries":
            token = _query(query).get("token", "")
            return _ok({"token": token, "fcm": state.delivered["fcm"][token], "apns": state.delivered["apns"][token],
                        "attempts": state.attempts[token]})
        if method == "GET" and path == "requests/last":
            token = _query(query).get("token", "")
            return _ok(state.last.get(token)) if token in state.last else _ok({"error": "no request"}, 404)
        if method == "POST" and path == "reset":
            STATE.__init__()  # keep the same object: the app reads it per request
            return _ok()
        if method == "POST" and path == "fcm/tokens":
            for code, tokens in req.items():
                if code not in FCM_ERRORS:
                    return _ok({"error": f"unknown FCM errorCode {code}"}, 400)
                state.fcm_tokens.update(dict.fromkeys(tokens, code))
            return _ok()
        if method == "POST" and path == "apns/tokens":
            table = {"unregistered": (410, "Unregistered"), "invalid": (400, "BadDeviceToken"),
                     "not_for_topic": (400, "DeviceTokenNotForTopic"), "expired": (410, "ExpiredToken")}
            for kind, tokens in req.items():
                if kind not in table:
                    return _ok({"error": f"unknown kind {kind}; one of {sorted(table)}"}, 400)
                state.apns_tokens.update(dict.fromkeys(tokens, table[kind]))
            return _ok()
        if method == "POST" and path == "faults":
            api = req["api"]
            status = int(req["status"])
            if api == "fcm":
                code = req.get("code") or FCM_DEFAULT_CODE.get(status, "INTERNAL")
            elif api == "apns":
                code = req.get("reason") or req.get("code") or APNS_DEFAULT_REASON.get(status, "InternalServerError")
            else:
                return _ok({"error": "api must be fcm or apns"}, 400)
            ra = req.get("retry_after")
            state.faults.append(Fault(api, str(req.get("match", "*")), status, code,
                                      None if ra is None else str(ra), int(req.get("times", 1))))
            return _ok()
        if method == "POST" and path == "latency":
            state.latency_s = max(0.0, float(req.get("ms", 0))) / 1000
            return _ok()
        if method == "POST" and path == "auth/reject":
            state.rejected_bearers.update(req.get("bearers", []))
            return _ok()
    except (ValueError, KeyError, TypeError) as exc:
        return _ok({"error": f"bad control request: {exc}"}, 400)
    return _ok({"error": "unknown control route"}, 404)


def _query(raw: bytes) -> dict[str, str]:
    return dict(parse_qsl(raw.decode()))
