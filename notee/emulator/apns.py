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
from dataclasses import dataclass
from typing import Any

from notee.core.notification_id import KEY as NID_KEY
from notee.emulator.cuts import plain, string_at
from notee.emulator.h2blocks import JSON_HEADERS
from notee.emulator.rules import apns_reason
from notee.emulator.state import LAST_REQUESTS_MAX, Response, Scope, State, header_map
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


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What APNs decides of a body under given headers: its JSON (``_NOT_JSON``, None when empty),
    its refusal reason and the ``aps`` key refused; ``nid_cut``: the body was cut at Notee's
    notification id (its JSON holds the first such body's id)."""

    parsed: Any
    reason: str | None
    refused_key: str | None
    nid_cut: bool = False

    def parsed_for(self, nid: str | None) -> Any:
        """The body's JSON with its own notification id."""
        if not self.nid_cut or nid is None or self.parsed[NID_KEY] == nid:
            return self.parsed
        return {**self.parsed, NID_KEY: nid}


_NID_AT = b'"' + NID_KEY.encode() + b'":'
_PROBE_NID = "emu-probe-id"
_VERDICTS: dict[tuple[bytes, bytes, bytes | None, bytes | None, bytes | None, bytes | None], _Verdict] = {}


def _verdict(body: bytes, headers: dict[bytes, bytes]) -> tuple[_Verdict, str | None]:
    """A body's verdict and its notification id, decided once per body with the id cut out and the
    headers that rule it (a page's pushes share both; the apns-id, the device and the id differ,
    none of which the rules read): the JSON is decoded and the rules applied once."""
    get = headers.get
    ruled = (get(b"apns-push-type"), get(b"apns-priority"), get(b"apns-collapse-id"), get(b"apns-expiration"))
    at = string_at(body, _NID_AT, 0)
    nid = None if at is None else plain(body[at[0] : at[1]])
    head, tail = (body, b"") if at is None or nid is None else (body[: at[0]], body[at[1] :])
    key = (head, tail, *ruled)
    verdict = _VERDICTS.get(key)
    if verdict is None:
        verdict = _decide(body, headers)
        if nid is not None and at is not None:
            probe = _parse(body[: at[0]] + _PROBE_NID.encode() + body[at[1] :])
            if (
                not isinstance(probe, dict)
                or probe.get(NID_KEY) != _PROBE_NID
                or {**probe, NID_KEY: nid} != verdict.parsed
            ):
                return verdict, None  # not where the id is: this body alone
            verdict = _Verdict(verdict.parsed, verdict.reason, verdict.refused_key, nid_cut=True)
        if len(_VERDICTS) >= 1024:
            _VERDICTS.clear()
        _VERDICTS[key] = verdict
    return verdict, nid


def _decide(body: bytes, headers: dict[bytes, bytes]) -> _Verdict:
    parsed = _parse(body)
    reason = None
    if parsed is not _NOT_JSON and body and len(body) <= APNS_PAYLOAD_LIMIT:
        reason = apns_reason(headers, parsed)
    aps = parsed.get("aps") if isinstance(parsed, dict) else None
    return _Verdict(parsed, reason, aps_value_problem(aps) if reason else None)


def _apns_out(status: int, reason: str, apns_id: bytes) -> Response:
    out: dict[str, Any] = {"reason": reason}
    if status == 410:
        out["timestamp"] = int(time.time() * 1000)
    return status, [(b"apns-id", apns_id), *JSON_HEADERS], json.dumps(out).encode()


def _expired(state: State, scope: Scope, apns_id: bytes) -> Response:
    """403 ExpiredProviderToken. The connection must replace the token, and that replacement is
    never "too many updates": real APNs tokens expire after an hour, three times the 20 minutes
    between updates, and a shortened lifetime (``apns_jwt_max_age_s``) must not turn the renewal it
    forces into a refusal."""
    state.counts["apns.expired_provider_token"] += 1
    state.conn_tokens.pop(scope.get("client"), None)
    return _apns_out(403, "ExpiredProviderToken", apns_id)


def apns(state: State, scope: Scope, token: str, body: bytes) -> Response:
    counts = state.counts
    counts["apns.recv"] += 1
    headers = header_map(scope)
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
    if iat is None or (state.rejected_bearers and raw.decode() in state.rejected_bearers):
        return _apns_out(403, "InvalidProviderToken", apns_id)
    now = time.time()
    realism = state.realism
    if now - iat > realism.apns_jwt_max_age_s:
        return _expired(state, scope, apns_id)
    if realism.enabled:
        conn = scope.get("client")
        current = state.conn_tokens.get(conn)
        if current is None:
            state.conn_tokens[conn] = (raw, now)
        elif current[0] != raw:
            if now - current[1] < realism.apns_token_update_min_s:
                counts["apns.token_updates_refused"] += 1
                return _apns_out(429, "TooManyProviderTokenUpdates", apns_id)
            state.conn_tokens[conn] = (raw, now)
    if not headers.get(b"apns-topic"):
        return _apns_out(400, "MissingTopic", apns_id)
    if realism.enabled and state.over_limit(("apns-device", token), realism.device_per_minute, now) is not None:
        counts["apns.device_rate"] += 1
        return _apns_out(429, "TooManyRequests", apns_id)
    attempts = state.attempts  # get + 1, not Counter's += 1: State.deliver says why
    attempts[token] = attempts.get(token, 0) + 1
    verdict, nid = _verdict(body, headers)
    parsed = verdict.parsed
    if len(state.last) < LAST_REQUESTS_MAX or token in state.last:
        state.last[token] = {
            "api": "apns",
            "path": scope["path"],
            # a body that is not JSON is kept as text, so a test can read what was refused
            "body": body.decode(errors="replace") if parsed is _NOT_JSON else verdict.parsed_for(nid),
            "headers": list(scope["headers"]),  # as received: state.last_view drops authorization
        }
    fault = state.take_fault("apns", token) if state.faults else None
    if fault:
        counts["apns.fault"] += 1
        status, h, out = _apns_out(fault.status, fault.code, apns_id)
        if fault.retry_after is not None:
            h.append((b"retry-after", fault.retry_after.encode()))
        return status, h, out
    known = state.apns_tokens.get(token)
    if known:
        counts["apns.error"] += 1
        return _apns_out(known[0], known[1], apns_id)
    if not body:
        return _apns_out(400, "PayloadEmpty", apns_id)
    if len(body) > APNS_PAYLOAD_LIMIT:
        return _apns_out(413, "PayloadTooLarge", apns_id)
    if parsed is _NOT_JSON:
        # Apple's table has no reason of its own for a payload that is not JSON; APNs answers it as
        # it answers an empty one (400 PayloadEmpty), never accepts it
        counts["apns.invalid"] += 1
        return _apns_out(400, "PayloadEmpty", apns_id)
    reason = verdict.reason
    if reason is not None:
        counts["apns.invalid"] += 1
        if token in state.last and (key := verdict.refused_key) is not None:
            state.last[token]["refused"] = {"reason": reason, "field": f"aps.{key}"}  # which key, for tests
        return _apns_out(400, reason, apns_id)
    counts["apns.ok"] += 1
    state.deliver("apns", token)
    if state.journal is not None:
        mine = verdict.parsed_for(nid)
        state.record("apns", token, {k: v for k, v in mine.items() if k != "aps"} if isinstance(mine, dict) else None)
    return 200, [(b"apns-id", apns_id)], b""
