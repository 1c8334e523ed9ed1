"""FCM HTTP v1 provider: one POST per message over Notee's lean HTTP/2 client.

firebase-admin is used for what it does well, credentials (its service-account ``Certificate``
issues the OAuth access tokens, cached here until near expiry) and the reference message model;
the transport is ours because the SDK's senders cost ~1,060-1,180 µs CPU per message against
~40 µs for ours (docs/PROVIDERS.md, "HTTP/2 engines"). tests/{unit,integration}/test_providers_fcm.py
show our request bodies equal the SDK's encoding and our classification matches the exception
the SDK raises for the same emulator response.

Error codes: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC
from typing import Any, Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from notee.core import notification_id
from notee.core.errors import ProviderConfigError, ProviderUnavailable
from notee.core.vocabulary import GOOGLE_TOKEN_URI
from notee.providers.base import Delivered, Failed, InvalidToken, Message, Outcome, RetryAfter
from notee.providers.http2 import TransportError
from notee.providers.http2_pool import Pool
from notee.providers.payload import Rich, merge_android
from notee.providers.retry import parse_retry_after

log = logging.getLogger(__name__)

FCM_URL = "https://fcm.googleapis.com"
_FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
# "For both message types, the maximum payload is 4096 bytes" -- the notification and data content,
# not the token or the platform blocks: https://firebase.google.com/docs/cloud-messaging/concept-options
PAYLOAD_LIMIT = 4096


class AuthRejected(Exception):
    """FCM rejected *our* access token (401 without an FcmError code): refresh once, then fail loudly."""


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


# FCM's answer to a sent message, ``{"name": "projects/p/messages/id"}`` (pretty-printed or not), read
# without a JSON parse: half the CPU of ``json.loads`` on the hottest path; anything else is parsed.
_SENT = re.compile(rb'\{\s*"name"\s*:\s*"([\x20\x21\x23-\x5b\x5d-\x7e]*)"\s*\}\s*')


def classify_fcm(status: int, body: bytes, retry_after: bytes | str | None = None) -> Outcome:
    """One FCM response -> one outcome. Raises AuthRejected (our token) or ProviderConfigError
    (our project/permissions), which are never per-device problems."""
    if status == 200:
        sent = _SENT.fullmatch(body)
        if sent is not None:
            return Delivered(sent[1].decode("ascii"))
        try:
            return Delivered(json.loads(body).get("name", ""))
        except ValueError:
            return Delivered("")
    try:
        error = json.loads(body).get("error", {})
    except (ValueError, AttributeError):
        error = {}
    code = next(
        (
            d.get("errorCode")
            for d in error.get("details", []) or []
            if isinstance(d, dict) and d.get("@type") == _FCM_ERROR_TYPE
        ),
        None,
    )
    rpc = error.get("status") or ""
    message = str(error.get("message", ""))[:200]
    delay = parse_retry_after(retry_after)
    if code == "UNREGISTERED":
        return InvalidToken("UNREGISTERED")
    if code == "SENDER_ID_MISMATCH":
        # The token belongs to another Firebase project: it can never work for this service.
        return InvalidToken("SENDER_ID_MISMATCH")
    if code == "INVALID_ARGUMENT" or rpc == "INVALID_ARGUMENT" or (code is None and status == 400):
        # FCM uses INVALID_ARGUMENT both for a malformed token and for a malformed message; only
        # the former prunes the device.
        if "registration token" in message.lower():
            return InvalidToken("INVALID_ARGUMENT")
        return Failed(f"INVALID_ARGUMENT: {message}")
    if code in ("QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL") or status in (429, 500, 502, 503, 504):
        # The server's trouble (5xx: UNAVAILABLE, INTERNAL) or the project's quota, whose 429 says
        # when its window reopens (Retry-After), is nobody's device; a 429 without Retry-After is
        # the device's message rate (240 a minute to one device).
        provider_wide = status >= 500 or code in ("UNAVAILABLE", "INTERNAL") or delay is not None
        return RetryAfter(code or rpc or f"HTTP {status}", delay, provider_wide=provider_wide)
    if code in ("THIRD_PARTY_AUTH_ERROR", "APNS_AUTH_ERROR"):
        # The APNs/Web Push credentials uploaded to *Firebase* are wrong: every iOS device of the
        # project fails, Android still works. Per-device Failed (not retried, not pruned), and the
        # caller logs it once per batch; raising would abort the Android half of the batch.
        return Failed(code)
    if status == 401:
        raise AuthRejected(message or "UNAUTHENTICATED")
    if status in (403, 404) and code is None:
        raise ProviderConfigError(f"FCM refused the service's project or permissions (HTTP {status} {rpc})")
    return Failed(f"{code or rpc or 'HTTP'} {status}: {message}")


class _BodyCache:
    """JSON bodies of consecutive messages that differ only in their token (every message of a
    fan-out page) are one rendering with the token spliced in: the encoding is done once per page,
    not once per device. The result is byte-identical to ``json.dumps({"message": fcm_message(m)})``
    (tests/unit/test_providers_fcm.py)."""

    _MARK = "\x00notee-token\x00"
    _NID_MARK = "\x00notee-id\x00"

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._data: dict[str, str] | None = None
        self._parts: tuple[bytes, bytes, bytes] = (b"", b"", b"")

    def body(self, m: Message) -> bytes:
        nid = m.notification_id
        key = (m.title, m.body, m.ttl_seconds, m.priority, m.collapse_key, m.rich, int(time.time()), bool(nid))
        if key != self._key or (m.data is not self._data and m.data != self._data):
            marked = Message(
                self._MARK, m.device_os, m.title, m.body, m.data, m.ttl_seconds, m.priority, m.collapse_key, m.rich
            )
            if nid:
                marked = replace(marked, notification_id=self._NID_MARK)
            head, _, rest = _encode(marked).partition(json.dumps(self._MARK).encode())
            mid, _, tail = rest.partition(json.dumps(self._NID_MARK).encode()) if nid else (rest, b"", b"")
            self._key, self._data, self._parts = key, m.data, (head, mid, tail)
        head, mid, tail = self._parts
        token = m.device_token
        # The notification id is [0-9a-z._-]: nothing JSON escapes; it comes after the token (``data``).
        end = mid + b'"' + nid.encode() + b'"' + tail if nid else mid
        if token.isprintable() and '"' not in token and "\\" not in token:  # nothing JSON would escape
            return head + b'"' + token.encode() + b'"' + end
        return head + json.dumps(token, ensure_ascii=False).encode() + end


def _encode(m: Message) -> bytes:
    return json.dumps({"message": fcm_message(m)}, separators=(",", ":"), ensure_ascii=False).encode()


class ServiceAccountTokens:
    """OAuth 2.0 access tokens of one service account, through firebase-admin's credentials
    (``credentials.Certificate(...).get_access_token()``), cached until shortly before they expire
    (5 minutes, or a tenth of the lifetime for short-lived tokens): one token request per hour per
    service account, none per message.

    ``token_uri`` overrides the account's token endpoint (the emulator's ``/token``); ``ca_file`` is
    the CA its TLS certificate is checked against. The token request carries that CA itself rather
    than relying on the process environment (REQUESTS_CA_BUNDLE), which many hosts set globally."""

    def __init__(
        self,
        service_account: dict[str, Any],
        *,
        token_uri: str | None = None,
        ca_file: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # deferred: firebase-admin's credentials load google-auth and requests (~0.2 s per process start); processes that never send FCM do not need them
        from firebase_admin import credentials

        info = dict(service_account)
        if token_uri:
            info["token_uri"] = token_uri
        elif info.get("token_uri") != GOOGLE_TOKEN_URI:
            # Checked when saved too; again here for credentials stored before that check existed.
            raise ProviderConfigError(f"FCM service account's token_uri is not {GOOGLE_TOKEN_URI}")
        try:
            self._cert = credentials.Certificate(info)
        except (ValueError, KeyError, TypeError) as exc:
            raise ProviderConfigError("FCM service-account JSON is not usable") from exc
        self._ca_file = ca_file
        self._clock = clock
        self._token = ""
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()
        self.fetched = 0  # token requests made, for tests and logs

    async def token(self, *, force: bool = False, stale: str | None = None) -> str:
        """The current access token. ``force``: FCM refused it (401): fetch a new one, unless
        another send already replaced ``stale`` meanwhile."""
        if not force and self._token and self._clock() < self._refresh_at:
            return self._token
        async with self._lock:
            if force and stale is not None and self._token and self._token != stale:
                return self._token  # refreshed by a concurrent batch already
            if force or not self._token or self._clock() >= self._refresh_at:
                await self._fetch()
            return self._token

    async def _fetch(self) -> None:
        try:
            info = await asyncio.to_thread(self._access_token)
        except Exception as exc:  # google-auth's errors; firebase-admin does not wrap them
            if type(exc).__name__ == "TransportError":  # the token endpoint could not be reached
                raise ProviderUnavailable("the OAuth token endpoint of the FCM service account is unreachable") from exc
            raise ProviderConfigError("FCM access token could not be obtained for the service account") from exc
        self.fetched += 1
        now = self._clock()
        expiry = info.expiry.replace(tzinfo=UTC).timestamp() if info.expiry else now + 3600
        lifetime = max(0.0, expiry - now)
        self._token = info.access_token
        self._refresh_at = expiry - min(300.0, lifetime / 10)

    def _access_token(self) -> Any:
        """firebase-admin's ``get_access_token()``, with the emulator's CA when there is one."""
        if self._ca_file is None:
            return self._cert.get_access_token()
        # deferred: see __init__ (google-auth and requests load only where FCM is used)
        import requests
        from google.auth.transport.requests import Request

        session = requests.Session()
        session.verify = self._ca_file
        session.trust_env = False  # neither a global CA bundle nor a proxy applies to the emulator
        try:
            credential = self._cert.get_credential()
            credential.refresh(Request(session))
            return _TokenInfo(credential.token, credential.expiry)
        finally:
            session.close()


@dataclass(frozen=True)
class _TokenInfo:
    """What firebase-admin's ``get_access_token()`` answers: the token and its (naive UTC) expiry."""

    access_token: str
    expiry: Any


def emulator_service_account(project_id: str) -> dict[str, Any]:
    """A throwaway service account for a service that has no FCM credentials while every push goes
    to the emulator: its tokens come from the emulator's token endpoint like a real account's from
    Google's, so the same token path runs. One RSA key per process."""
    global _EMULATOR_KEY
    if _EMULATOR_KEY is None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _EMULATOR_KEY = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
    return {
        "type": "service_account",
        "project_id": project_id,
        "private_key_id": "notee-emulator",
        "private_key": _EMULATOR_KEY,
        "client_email": f"notee-emulator@{project_id}.iam.gserviceaccount.com",
        "client_id": "0",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


_EMULATOR_KEY: str | None = None


class StaticToken:
    """A fixed bearer token (a non-realistic emulator accepts any)."""

    def __init__(self, token: str = "notee-emulator") -> None:
        self._token = token

    async def token(self, *, force: bool = False, stale: str | None = None) -> str:
        return self._token


class AccessTokens(Protocol):
    async def token(self, *, force: bool = False, stale: str | None = None) -> str: ...


class FcmProvider:
    name = "fcm"

    def __init__(self, project_id: str, tokens: AccessTokens, pool: Pool, *, timeout: float = 30.0) -> None:
        if not project_id:
            raise ProviderConfigError("FCM credentials have no project_id")
        self.project_id = project_id
        self._path = f"/v1/projects/{project_id}/messages:send".encode()
        self._tokens = tokens
        self._pool = pool
        self._timeout = timeout
        self._bodies = _BodyCache()

    async def _send(self, messages: Sequence[Message], bearer: bytes) -> list[Outcome | AuthRejected]:
        headers = [
            (b"authorization", bearer),
            (b"content-type", b"application/json"),
            (b"x-goog-api-format-version", b"2"),
            (b"x-firebase-client", b"notee"),
        ]
        responses = await self._pool.request_batch(
            [(self._path, headers, self._bodies.body(m)) for m in messages], self._timeout
        )
        out: list[Outcome | AuthRejected] = []
        for r in responses:
            if isinstance(r, TransportError):
                out.append(RetryAfter(f"transport: {r}"[:200], None, transport=True))
                continue
            try:
                out.append(classify_fcm(r.status, r.body, r.headers.get(b"retry-after")))
            except AuthRejected as exc:
                out.append(exc)
        return out

    async def send(self, messages: Sequence[Message]) -> list[Outcome]:
        token = await self._tokens.token()
        results = await self._send(messages, b"Bearer " + token.encode())
        rejected = [i for i, r in enumerate(results) if isinstance(r, AuthRejected)]
        if rejected:  # expired or revoked early: refresh once and resend only those
            bearer = b"Bearer " + (await self._tokens.token(force=True, stale=token)).encode()
            again = await self._send([messages[i] for i in rejected], bearer)
            if any(isinstance(r, AuthRejected) for r in again):
                raise ProviderConfigError(f"FCM rejected the credentials of project {self.project_id} (HTTP 401)")
            for i, r in zip(rejected, again, strict=True):
                results[i] = r
        third_party = sum(1 for r in results if isinstance(r, Failed) and r.reason == "THIRD_PARTY_AUTH_ERROR")
        if third_party:
            log.error(
                "FCM project %s: %d message(s) failed with THIRD_PARTY_AUTH_ERROR: the APNs key or "
                "Web Push credentials configured in Firebase are invalid",
                self.project_id,
                third_party,
            )
        return results  # type: ignore[return-value]

    async def close(self) -> None:
        await self._pool.close()
