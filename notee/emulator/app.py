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
import dataclasses
import json
import math
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import parse_qsl

from notee.emulator.peer import PeerRules, PeerServer, PeerStats, server_ssl_context

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
APNS_DEFAULT_REASON = {
    400: "BadDeviceToken",
    403: "InvalidProviderToken",
    410: "Unregistered",
    413: "PayloadTooLarge",
    429: "TooManyRequests",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}
APNS_PAYLOAD_LIMIT = 4096
FCM_PAYLOAD_LIMIT = 4096
JWT_MAX_AGE_S = 3600
_JSON = [(b"content-type", b"application/json; charset=UTF-8")]
_LAST_REQUESTS_MAX = 10_000
Response = tuple[int, list[tuple[bytes, bytes]], bytes]
# ASGI, as granian calls the app.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class Fault:
    api: str  # "fcm" | "apns"
    match: str  # a token, or "*"
    status: int
    code: str  # FCM errorCode or APNs reason
    retry_after: str | None
    remaining: int


@dataclass
class Realism:
    """How closely the emulator behaves like FCM and APNs (``notee emulator --realistic``; every
    switch can be changed through ``POST /_emu/realistic``). Off: any bearer is accepted and
    there are no rate limits, so wire-format tests stay simple."""

    enabled: bool = False
    fcm_auth: bool = True  # FCM accepts only access tokens issued by POST /token, until they expire
    fcm_token_lifetime_s: float = 3600.0
    fcm_quota_per_minute: int = 600_000  # per project (FCM's default quota)
    device_per_minute: int = 240  # per device token and API (FCM: 240 a minute to one device)
    minute_s: float = 60.0  # the length of an emulated "minute", to scale the limits for tests
    apns_token_update_min_s: float = 1200.0  # a connection may change its provider token this often

    def update(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if key not in self.__dataclass_fields__:
                raise KeyError(key)
            setattr(self, key, type(getattr(self, key))(value))


@dataclass
class State:
    fcm_tokens: dict[str, str] = field(default_factory=dict)  # token -> FCM errorCode
    apns_tokens: dict[str, tuple[int, str]] = field(default_factory=dict)  # token -> (status, reason)
    faults: list[Fault] = field(default_factory=list)
    latency_s: float = 0.0
    rejected_bearers: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)
    delivered: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))  # api -> token -> n
    attempts: Counter[str] = field(default_factory=Counter)  # token -> requests received
    last: dict[str, dict[str, Any]] = field(default_factory=dict)  # token -> last request seen
    jwt_iat: dict[bytes, int | None] = field(default_factory=dict)
    seq: int = 0
    realism: Realism = field(default_factory=lambda: Realism(enabled=LAUNCH_REALISTIC))
    issued: dict[str, float] = field(default_factory=dict)  # FCM access token -> expiry (epoch s)
    windows: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # key -> (minute, count)
    conn_tokens: dict[Any, tuple[bytes, float]] = field(default_factory=dict)  # connection -> (JWT, since)

    def over_limit(self, key: tuple[str, str], limit: int, now: float) -> float | None:
        """Count one request against ``limit`` per emulated minute; seconds until the window ends
        when the limit is exceeded, else None."""
        minute_s = self.realism.minute_s
        window = int(now // minute_s)
        current, count = self.windows.get(key, (window, 0))
        if current != window:
            count = 0
        if count >= limit:
            self.windows[key] = (window, count)
            return (window + 1) * minute_s - now
        self.windows[key] = (window, count + 1)
        return None

    def reset(self) -> None:
        """Back to a fresh state, in place: the app and the HTTP/2 servers hold this object."""
        fresh = State()
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def take_fault(self, api: str, token: str) -> Fault | None:
        for fault in self.faults:
            if fault.api == api and fault.match in ("*", token) and fault.remaining > 0:
                fault.remaining -= 1
                return fault
        return None


LAUNCH_REALISTIC: bool = os.environ.get("NOTEE_EMULATOR_REALISTIC") == "1"  # `notee emulator --realistic`
STATE = State()  # the single worker's state; reset through POST /_emu/reset
PEER: PeerServer | None = None  # the APNs port's HTTP/2 server, in realistic mode


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await _start_peer()
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


async def _start_peer() -> None:
    """In realistic mode, serve APNs on its own port through the emulator's h2 server (one stream
    until the first valid request, then a limit; GOAWAY), in this worker's loop and on this STATE."""
    global PEER
    port = os.environ.get("NOTEE_EMULATOR_APNS_PORT")
    if not LAUNCH_REALISTIC or not port:
        return
    PEER = PeerServer(lambda scope, body: handle(STATE, scope, body))
    ssl_context = server_ssl_context(os.environ["NOTEE_EMULATOR_TLS_CERT"], os.environ["NOTEE_EMULATOR_TLS_KEY"])
    await PEER.start(os.environ.get("NOTEE_EMULATOR_APNS_HOST", "127.0.0.1"), int(port), ssl_context)


def handle(state: State, scope: Scope, body: bytes) -> Response:
    """Answer one request (granian's ASGI app and the emulator's own HTTP/2 server both call this)."""
    path: str = scope["path"]
    if path.startswith("/3/device/"):
        return apns(state, scope, path[10:], body)
    if path.startswith("/v1/projects/") and path.endswith("/messages:send"):
        return fcm(state, scope, path[13:-14], body)
    if path.startswith("/_emu/"):
        return control(state, scope["method"], path[6:], scope.get("query_string", b""), body)
    if path == "/token" and scope["method"] == "POST":
        return oauth_token(state, body)
    return 404, _JSON, b'{"reason":"BadPath"}'


# --- FCM HTTP v1 ------------------------------------------------------------------------------


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
    headers = list(_JSON)
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    return status or http, headers, json.dumps({"error": error}, indent=2).encode()


def _fcm_payload_size(message: dict[str, Any]) -> int:
    """FCM's 4,096-byte limit counts the message's payload (notification and data), not the token
    or the request envelope."""
    payload = {k: message[k] for k in ("notification", "data") if k in message}
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


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
    return 400, list(_JSON), json.dumps({"error": error}, indent=2).encode()


def oauth_token(state: State, body: bytes) -> Response:
    """Google's OAuth 2.0 token endpoint as a service account uses it (``token_uri``): a JWT-bearer
    grant in, an access token that expires after ``fcm_token_lifetime_s`` out. The assertion's
    signature is not checked (the emulator does not hold the accounts' public keys)."""
    form = dict(parse_qsl(body.decode(errors="replace")))
    if (
        form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer"
        or _jwt_claims(form.get("assertion", "").encode()) is None
    ):
        return 400, list(_JSON), json.dumps({"error": "invalid_grant", "error_description": "Invalid JWT."}).encode()
    token = "ya29.emu-" + uuid.uuid4().hex
    lifetime = state.realism.fcm_token_lifetime_s
    if len(state.issued) > 10_000:
        state.issued = {t: e for t, e in state.issued.items() if e > time.time()}
    state.issued[token] = time.time() + lifetime
    state.counts["oauth.token_issued"] += 1
    return (
        200,
        list(_JSON),
        json.dumps({"access_token": token, "expires_in": int(lifetime), "token_type": "Bearer"}).encode(),
    )


def _bare_error(status: int, rpc: str, message: str) -> Response:
    return status, _JSON, json.dumps({"error": {"code": status, "message": message, "status": rpc}}, indent=2).encode()


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
        message = json.loads(body)["message"]
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
    if len(state.last) < _LAST_REQUESTS_MAX or token in state.last:
        state.last[token] = {
            "api": "fcm",
            "path": scope["path"],
            "body": message,
            "validate_only": bool(json.loads(body).get("validate_only")),
            "headers": {k.decode(): v.decode() for k, v in scope["headers"] if k not in (b"authorization",)},
        }
    fault = state.take_fault("fcm", token)
    if fault:
        state.counts["fcm.fault"] += 1
        return fcm_error(fault.code, fault.retry_after, status=fault.status)
    code = state.fcm_tokens.get(token)
    if code:
        state.counts["fcm.error"] += 1
        return fcm_error(code)
    if _fcm_payload_size(message) > FCM_PAYLOAD_LIMIT:
        return fcm_too_big()
    state.counts["fcm.ok"] += 1
    state.delivered["fcm"][token] += 1
    state.seq += 1
    name = f"projects/{project}/messages/0:{int(time.time() * 1000)}{state.seq:08d}%e1e1e1e1"
    return 200, _JSON, json.dumps({"name": name}, indent=2).encode()


# --- APNs ---------------------------------------------------------------------------------------


def _jwt_claims(raw: bytes) -> dict[str, Any] | None:
    try:
        head, claims, _sig = raw.split(b".")
        json.loads(base64.urlsafe_b64decode(head + b"=" * (-len(head) % 4)))
        payload = json.loads(base64.urlsafe_b64decode(claims + b"=" * (-len(claims) % 4)))
        return payload if isinstance(payload, dict) else None
    except (ValueError, TypeError):
        return None


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


def _apns_out(status: int, reason: str, apns_id: bytes) -> Response:
    out: dict[str, Any] = {"reason": reason}
    if status == 410:
        out["timestamp"] = int(time.time() * 1000)
    return status, [(b"apns-id", apns_id), *_JSON], json.dumps(out).encode()


def apns(state: State, scope: Scope, token: str, body: bytes) -> Response:
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
    now = time.time()
    if now - iat > JWT_MAX_AGE_S:
        return _apns_out(403, "ExpiredProviderToken", apns_id)
    realism = state.realism
    if realism.enabled:
        conn = scope.get("client")
        current = state.conn_tokens.get(conn)
        if current is None:
            state.conn_tokens[conn] = (raw, now)
        elif current[0] != raw:
            if now - current[1] < realism.apns_token_update_min_s:
                state.counts["apns.token_updates_refused"] += 1
                return _apns_out(429, "TooManyProviderTokenUpdates", apns_id)
            state.conn_tokens[conn] = (raw, now)
    if not headers.get(b"apns-topic"):
        return _apns_out(400, "MissingTopic", apns_id)
    if realism.enabled and state.over_limit(("apns-device", token), realism.device_per_minute, now) is not None:
        state.counts["apns.device_rate"] += 1
        return _apns_out(429, "TooManyRequests", apns_id)
    state.attempts[token] += 1
    if len(state.last) < _LAST_REQUESTS_MAX or token in state.last:
        state.last[token] = {
            "api": "apns",
            "path": scope["path"],
            "body": json.loads(body or b"null"),
            "headers": {k.decode(): v.decode() for k, v in scope["headers"] if k not in (b"authorization",)},
        }
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


def _ok(payload: Any = None, status: int = 200) -> Response:
    return (
        status,
        [(b"content-type", b"application/json")],
        json.dumps(payload if payload is not None else {"ok": True}).encode(),
    )


def control(state: State, method: str, path: str, query: bytes, body: bytes) -> Response:
    try:
        req = json.loads(body) if body else {}
        if method == "GET" and path == "stats":
            peer = None
            if PEER is not None:
                st = PEER.stats
                peer = {
                    "connections": st.connections,
                    "goaways": st.goaways,
                    "protocol_errors": st.protocol_errors,
                    "max_open": st.max_open,
                    "ignored_after_goaway": st.ignored_after_goaway,
                    "live": len(st.live),
                    "rules": dataclasses.asdict(PEER.rules),
                    "port": PEER.port,
                }
            return _ok(
                {
                    "counts": dict(state.counts),
                    "faults": [f.__dict__ for f in state.faults],
                    "realism": dataclasses.asdict(state.realism),
                    "apns_peer": peer,
                    "latency_ms": state.latency_s * 1000,
                    "delivered": {api: sum(c.values()) for api, c in state.delivered.items()},
                }
            )
        if method == "GET" and path == "deliveries":
            token = _query(query).get("token", "")
            return _ok(
                {
                    "token": token,
                    "fcm": state.delivered["fcm"][token],
                    "apns": state.delivered["apns"][token],
                    "attempts": state.attempts[token],
                }
            )
        if method == "POST" and path == "deliveries":  # many tokens at once: {"tokens": [...]}
            tokens = req["tokens"]
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise TypeError("tokens must be a list of strings")
            return _ok(
                {
                    "deliveries": [
                        {
                            "token": t,
                            "fcm": state.delivered["fcm"][t],
                            "apns": state.delivered["apns"][t],
                            "attempts": state.attempts[t],
                        }
                        for t in tokens
                    ]
                }
            )
        if method == "GET" and path == "requests/last":
            token = _query(query).get("token", "")
            return _ok(state.last.get(token)) if token in state.last else _ok({"error": "no request"}, 404)
        if method == "POST" and path == "reset":
            issued = STATE.issued  # access tokens stay valid, as a real token outlives a test
            STATE.reset()  # keep the same object: the app reads it per request
            STATE.issued = issued
            if PEER is not None:
                PEER.rules = PeerRules()
                PEER.stats = PeerStats(live=PEER.stats.live)  # counters restart; open connections stay
            return _ok()
        if method == "POST" and path == "realistic":
            peer_keys = {
                "apns_first_streams": "first_streams",
                "apns_max_streams": "max_streams",
                "apns_goaway_after": "goaway_after",
                "apns_answer_delay_ms": "answer_delay_s",
            }
            state.realism.update({k: v for k, v in req.items() if k not in peer_keys})
            for key, attr in peer_keys.items():
                if key in req:
                    if PEER is None:
                        return _ok({"error": f"{key} needs `notee emulator --realistic` (its APNs port)"}, 400)
                    if attr == "max_streams":
                        PEER.lower_limit(int(req[key]))  # sent at once to the open connections
                    elif attr == "answer_delay_s":
                        PEER.rules.answer_delay_s = max(0.0, float(req[key])) / 1000
                    else:
                        setattr(PEER.rules, attr, int(req[key]))
            return _ok({"realism": dataclasses.asdict(state.realism)})
        if method == "POST" and path == "apns/goaway":
            if PEER is None:
                return _ok({"error": "GOAWAY needs `notee emulator --realistic` (its APNs port)"}, 400)
            return _ok({"connections": PEER.goaway_all()})
        if method == "POST" and path == "fcm/tokens":
            for code, tokens in req.items():
                if code not in FCM_ERRORS:
                    return _ok({"error": f"unknown FCM errorCode {code}"}, 400)
                state.fcm_tokens.update(dict.fromkeys(tokens, code))
            return _ok()
        if method == "POST" and path == "apns/tokens":
            table = {
                "unregistered": (410, "Unregistered"),
                "invalid": (400, "BadDeviceToken"),
                "not_for_topic": (400, "DeviceTokenNotForTopic"),
                "expired": (410, "ExpiredToken"),
            }
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
            state.faults.append(
                Fault(
                    api,
                    str(req.get("match", "*")),
                    status,
                    code,
                    None if ra is None else str(ra),
                    int(req.get("times", 1)),
                )
            )
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
