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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from notee.core.errors import ProviderConfigError, ProviderUnavailable
from notee.core.vocabulary import GOOGLE_TOKEN_URI
from notee.providers.base import Delivered, Failed, InvalidToken, Message, Outcome, RetryAfter
from notee.providers.fcm_body import PAYLOAD_LIMIT as PAYLOAD_LIMIT  # the callers' names: fcm.*
from notee.providers.fcm_body import PageBodies
from notee.providers.fcm_body import counted_content as counted_content
from notee.providers.fcm_body import fcm_message as fcm_message
from notee.providers.fcm_body import payload_bytes as payload_bytes
from notee.providers.http2 import TransportError
from notee.providers.http2_pool import Pool
from notee.providers.retry import parse_retry_after

log = logging.getLogger(__name__)

FCM_URL = "https://fcm.googleapis.com"
_FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"


class AuthRejected(Exception):
    """FCM rejected *our* access token (401 without an FcmError code): refresh once, then fail loudly."""


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
        self._bodies = PageBodies()

    async def _send(self, messages: Sequence[Message], bearer: bytes) -> tuple[list[Outcome | AuthRejected], bool]:
        """One outcome (or our token's rejection) per message; and whether any is not ``Delivered``."""
        path = self._path
        headers = [
            (b"authorization", bearer),
            (b"content-type", b"application/json"),
            (b"x-goog-api-format-version", b"2"),
            (b"x-firebase-client", b"notee"),
        ]
        responses = await self._pool.request_batch(
            [(path, headers, body) for body in self._bodies.bodies(messages)], self._timeout
        )
        out: list[Outcome | AuthRejected] = []
        append, sent, odd = out.append, _SENT.fullmatch, False
        for r in responses:
            if isinstance(r, TransportError):
                append(RetryAfter(f"transport: {r}"[:200], None, transport=True))
                odd = True
                continue
            if r.status == 200 and (match := sent(r.body)) is not None:  # classify_fcm's first case, inline
                append(Delivered(match[1].decode("ascii")))
                continue
            try:
                outcome: Outcome | AuthRejected = classify_fcm(r.status, r.body, r.headers.get(b"retry-after"))
            except AuthRejected as exc:
                outcome = exc
            odd = odd or outcome.__class__ is not Delivered
            append(outcome)
        return out, odd

    async def send(self, messages: Sequence[Message]) -> list[Outcome]:
        token = await self._tokens.token()
        results, odd = await self._send(messages, b"Bearer " + token.encode())
        if not odd:  # every message delivered: nothing to refresh, nothing to log
            return results  # type: ignore[return-value]
        rejected = [i for i, r in enumerate(results) if isinstance(r, AuthRejected)]
        if rejected:  # expired or revoked early: refresh once and resend only those
            bearer = b"Bearer " + (await self._tokens.token(force=True, stale=token)).encode()
            again, _ = await self._send([messages[i] for i in rejected], bearer)
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
