"""The emulator's APNs persona: the provider API's ``POST /3/device/<token>``.

Wire formats follow docs/PROVIDERS.md and
https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
(``apns-id`` echoed on every response, empty 200 body, ``{"reason": ...}`` error bodies in one frame).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

from notee.emulator.rules import apns_reason
from notee.emulator.state import JSON_HEADERS, LAST_REQUESTS_MAX, Response, Scope, State
from notee.emulator.value_rules import aps_value_problem

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
JWT_MAX_AGE_S = 3600


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


_NOT_JSON: Any = object()  # what _parse returns for a body that is not JSON


def _parse(body: bytes) -> Any:
    """The body's JSON (None for an empty body), or ``_NOT_JSON``."""
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        return _NOT_JSON


def _apns_out(status: int, reason: str, apns_id: bytes) -> Response:
    out: dict[str, Any] = {"reason": reason}
    if status == 410:
        out["timestamp"] = int(time.time() * 1000)
    return status, [(b"apns-id", apns_id), *JSON_HEADERS], json.dumps(out).encode()


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
    parsed = _parse(body)
    if len(state.last) < LAST_REQUESTS_MAX or token in state.last:
        state.last[token] = {
            "api": "apns",
            "path": scope["path"],
            # a body that is not JSON is kept as text, so a test can read what was refused
            "body": body.decode(errors="replace") if parsed is _NOT_JSON else parsed,
            "headers": list(scope["headers"]),  # as received: state.last_view drops authorization
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
    if parsed is _NOT_JSON:
        # Apple's table has no reason of its own for a payload that is not JSON; APNs answers it as
        # it answers an empty one (400 PayloadEmpty), never accepts it
        state.counts["apns.invalid"] += 1
        return _apns_out(400, "PayloadEmpty", apns_id)
    reason = apns_reason(headers, parsed)
    if reason is not None:
        state.counts["apns.invalid"] += 1
        aps = parsed.get("aps") if isinstance(parsed, dict) else None
        if token in state.last and (key := aps_value_problem(aps)) is not None:
            state.last[token]["refused"] = {"reason": reason, "field": f"aps.{key}"}  # which key, for tests
        return _apns_out(400, reason, apns_id)
    state.counts["apns.ok"] += 1
    state.delivered["apns"][token] += 1
    state.record("apns", token, {k: v for k, v in parsed.items() if k != "aps"} if isinstance(parsed, dict) else None)
    return 200, [(b"apns-id", apns_id)], b""
