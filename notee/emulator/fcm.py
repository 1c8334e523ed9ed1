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

from notee.emulator.fcm_bodies import BadBody, BodyVerdicts, bare_error
from notee.emulator.h2blocks import JSON_HEADERS
from notee.emulator.state import LAST_REQUESTS_MAX, Response, Scope, State, header_map

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


def fcm(state: State, scope: Scope, project: str, body: bytes) -> Response:
    counts = state.counts
    counts["fcm.recv"] += 1
    auth = header_map(scope).get(b"authorization", b"")
    realism = state.realism
    now = time.time()
    bearer = _bearer(auth)
    rejected = state.rejected_bearers
    if (
        bearer is None
        or (rejected and (bearer in rejected or "*" in rejected))
        or (realism.enabled and realism.fcm_auth and state.issued.get(bearer, 0.0) <= now)
    ):
        counts["fcm.unauthenticated"] += 1
        return bare_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. "
            "Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        )
    try:
        token, nid, verdict = _BODIES.read(body)
    except BadBody as bad:
        return bad.response
    if realism.enabled:
        wait = state.over_limit(("fcm-project", project), realism.fcm_quota_per_minute, now)
        if wait is not None:
            counts["fcm.quota_exceeded"] += 1
            return fcm_error("QUOTA_EXCEEDED", str(max(1, math.ceil(wait))))
        if state.over_limit(("fcm-device", token), realism.device_per_minute, now) is not None:
            counts["fcm.device_rate"] += 1
            return fcm_error("QUOTA_EXCEEDED", message="Device message rate exceeded.")
    attempts = state.attempts  # get + 1, not Counter's += 1: State.deliver says why
    attempts[token] = attempts.get(token, 0) + 1
    last = state.last
    kept = None  # the request as GET /_emu/requests/last shows it, for the first tokens after a reset
    if len(last) < LAST_REQUESTS_MAX or token in last:
        kept = last[token] = {
            "api": "fcm",
            "path": scope["path"],
            "body": verdict.message_for(token, nid),
            "validate_only": verdict.validate_only,
            "headers": list(scope["headers"]),  # as received: state.last_view drops authorization
        }
    fault = state.take_fault("fcm", token) if state.faults else None
    if fault:
        counts["fcm.fault"] += 1
        return fcm_error(fault.code, fault.retry_after, status=fault.status)
    code = state.fcm_tokens.get(token)
    if code:
        counts["fcm.error"] += 1
        return fcm_error(code)
    refused = verdict.refusal
    if refused is not None:
        count, (status, answer_headers, out) = refused
        if count:
            counts[count] += 1
        return status, list(answer_headers), out
    if kept is not None:
        kept["device"] = kept["body"]  # what a device gets of it: state.last_view
    counts["fcm.ok"] += 1
    state.deliver("fcm", token)
    if state.journal is not None:
        state.record("fcm", token, verdict.message_for(token, nid).get("data"))
    state.seq += 1
    return 200, JSON_HEADERS, _name_answer(project, now, state.seq)


# Nothing FCM decides of a body depends on its token: bodies are read once per kind (fcm_bodies)
_BODIES = BodyVerdicts()
_BEARERS: dict[bytes, str] = {}  # an Authorization value -> its access token (a sender sends one many times)


def _bearer(auth: bytes) -> str | None:
    """The access token of a ``Bearer`` Authorization value, else None."""
    bearer = _BEARERS.get(auth)
    if bearer is None:
        if not auth.startswith(b"Bearer "):
            return None
        if len(_BEARERS) >= 1024:
            _BEARERS.clear()
        bearer = _BEARERS[auth] = auth[7:].decode()
    return bearer


_NAME_HEADS: dict[str, bytes] = {}


def _name_answer(project: str, now: float, seq: int) -> bytes:
    """``json.dumps({"name": name}, indent=2)`` of the message's name, with the JSON of its constant
    head built once per project (what follows it, digits and ``%e1e1e1e1``, JSON never escapes)."""
    head = _NAME_HEADS.get(project)
    if head is None:
        if len(_NAME_HEADS) >= 1024:
            _NAME_HEADS.clear()
        head = _NAME_HEADS[project] = b'{\n  "name": ' + json.dumps(f"projects/{project}/messages/0:")[:-1].encode()
    return head + b'%d%08d%%e1e1e1e1"\n}' % (int(now * 1000), seq)


def _jwt_claims(raw: bytes) -> dict[str, Any] | None:
    try:
        head, claims, _sig = raw.split(b".")
        json.loads(base64.urlsafe_b64decode(head + b"=" * (-len(head) % 4)))
        payload = json.loads(base64.urlsafe_b64decode(claims + b"=" * (-len(claims) % 4)))
        return payload if isinstance(payload, dict) else None
    except (ValueError, TypeError):
        return None
