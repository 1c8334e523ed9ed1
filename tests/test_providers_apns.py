"""APNs: aioapns (the reference client) and our lean sender against the emulator, every outcome;
the JWT; table-driven classification."""

from __future__ import annotations

import asyncio
import json
import secrets
import ssl
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notee.errors import ProviderConfigError
from notee.providers.apns import ApnsJwt, ApnsProvider, ExpiredJwt, classify_apns
from notee.providers.base import Delivered, Failed, InvalidToken, Message, RetryAfter
from notee.providers.http2 import Pool, client_ssl_context
from tests.emulator_fixture import emulator, emulator_process  # noqa: F401

TOPIC, KEY_ID, TEAM_ID = "com.example.app", "TESTKEY123", "TEAMID1234"


@pytest.fixture(scope="module")
def p8() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def msg(token: str, **kw) -> Message:
    return Message(device_token=token, device_os="IOS", title="Hi", body="There", **kw)


def ours_send(emulator, p8, messages, *, clock=time.time):
    async def run():
        provider = ApnsProvider(TOPIC, ApnsJwt(p8, KEY_ID, TEAM_ID, clock=clock),
                                Pool(emulator.url, client_ssl_context(emulator.ca_file)))
        try:
            return await provider.send(messages)
        finally:
            await provider.close()

    return asyncio.run(run())


def aioapns_send(emulator, p8, token: str, payload: dict):
    from urllib.parse import urlsplit

    from aioapns import APNs, NotificationRequest
    from aioapns.connection import APNsProductionClientProtocol

    port = urlsplit(emulator.url).port

    class EmulatorProtocol(APNsProductionClientProtocol):
        APNS_SERVER, APNS_PORT = "localhost", port

    async def run():
        apns = APNs(key=p8, key_id=KEY_ID, team_id=TEAM_ID, topic=TOPIC, max_connection_attempts=1,
                    ssl_context=ssl.create_default_context(cafile=emulator.ca_file), err_func=_quiet)
        apns.pool.protocol_class = EmulatorProtocol
        try:
            return await asyncio.wait_for(apns.send_notification(NotificationRequest(token, payload)), 10)
        finally:
            apns.pool.close()

    return asyncio.run(run())


async def _quiet(request, result):
    pass


def _hex() -> str:
    return secrets.token_hex(32)


CASES = [
    # (how to set up the token, aioapns status, aioapns reason, our outcome)
    ("ok", "200", None, Delivered),
    ("unregistered", "410", "Unregistered", InvalidToken("Unregistered")),
    ("invalid", "400", "BadDeviceToken", InvalidToken("BadDeviceToken")),
    ("fault:413:PayloadTooLarge", "413", "PayloadTooLarge", Failed("413 PayloadTooLarge")),
    ("fault:429:TooManyRequests", "429", "TooManyRequests", RetryAfter("TooManyRequests", None)),
    ("fault:503:ServiceUnavailable", "503", "ServiceUnavailable", RetryAfter("ServiceUnavailable", None)),
    ("fault:500:InternalServerError", "500", "InternalServerError", RetryAfter("InternalServerError", None)),
]


@pytest.mark.parametrize("setup,status,reason,expected", CASES, ids=[c[0] for c in CASES])
def test_aioapns_and_ours_agree_on_every_outcome(emulator, p8, setup, status, reason, expected):
    token = _hex()
    if setup.startswith("fault:"):
        _, code, why = setup.split(":")
        emulator.http.post("/_emu/faults", json={"api": "apns", "status": int(code), "reason": why,
                                                 "match": token, "times": 2}).raise_for_status()
    elif setup != "ok":
        emulator.apns_tokens(**{setup: [token]})

    result = aioapns_send(emulator, p8, token, {"aps": {"alert": "hi"}})
    assert result.status == status
    assert result.description == reason

    [outcome] = ours_send(emulator, p8, [msg(token)])
    if expected is Delivered:
        assert isinstance(outcome, Delivered) and outcome.message_id
        assert emulator.deliveries(token)["apns"] == 2
    else:
        assert outcome == expected


def test_real_oversized_payload_is_413(emulator, p8):
    [outcome] = ours_send(emulator, p8, [msg(_hex(), data={"blob": "x" * 5000})])
    assert outcome == Failed("413 PayloadTooLarge")


def test_expired_provider_token_with_aioapns(emulator, p8):
    token = _hex()
    emulator.http.post("/_emu/faults", json={"api": "apns", "status": 403, "reason": "ExpiredProviderToken",
                                             "match": token}).raise_for_status()
    result = aioapns_send(emulator, p8, token, {"aps": {"alert": "hi"}})
    assert (result.status, result.description) == ("403", "ExpiredProviderToken")


def test_expired_jwt_is_resigned_once_and_the_send_recovers(emulator, p8):
    times = iter([time.time() - 4000])  # first JWT is 66 minutes old, then the real clock

    outcomes = ours_send(emulator, p8, [msg(_hex()), msg(_hex())], clock=lambda: next(times, time.time()))
    assert all(isinstance(o, Delivered) for o in outcomes)


def test_a_clock_that_keeps_signing_expired_jwts_fails_loudly(emulator, p8):
    with pytest.raises(ProviderConfigError, match="expired right after re-signing"):
        ours_send(emulator, p8, [msg(_hex())], clock=lambda: time.time() - 4000)


def test_invalid_provider_token_fails_loudly_not_per_device(emulator, p8):
    bearer = ApnsJwt(p8, KEY_ID, TEAM_ID).bearer().decode()[7:]
    emulator.reject_bearer(bearer)

    async def run():
        jwt_ = ApnsJwt(p8, KEY_ID, TEAM_ID)
        jwt_._value, jwt_._issued = b"bearer " + bearer.encode(), time.time()
        provider = ApnsProvider(TOPIC, jwt_, Pool(emulator.url, client_ssl_context(emulator.ca_file)))
        try:
            return await provider.send([msg(_hex()) for _ in range(3)])
        finally:
            await provider.close()

    with pytest.raises(ProviderConfigError, match="InvalidProviderToken"):
        asyncio.run(run())


def test_request_matches_what_apns_expects(emulator, p8):
    token = _hex()
    ours_send(emulator, p8, [msg(token, data={"k": "v"}, ttl_seconds=60, priority="normal", collapse_key="c")])
    seen = emulator.last_request(token)
    assert seen["path"] == f"/3/device/{token}"
    assert seen["body"] == {"aps": {"alert": {"title": "Hi", "body": "There"}, "sound": "default"}, "k": "v"}
    h = seen["headers"]
    assert (h["apns-topic"], h["apns-push-type"], h["apns-priority"], h["apns-collapse-id"]) == (TOPIC, "alert", "5", "c")
    assert int(h["apns-expiration"]) >= int(time.time()) + 55
    assert "authorization" not in h  # the emulator never keeps credentials


def test_jwt_claims_and_refresh_window(p8):
    now = [1_000_000.0]
    token = ApnsJwt(p8, KEY_ID, TEAM_ID, clock=lambda: now[0])
    first = token.bearer()
    raw = first.decode().split(" ", 1)[1]
    assert jwt.get_unverified_header(raw) == {"alg": "ES256", "kid": KEY_ID, "typ": "JWT"}
    assert jwt.decode(raw, options={"verify_signature": False}) == {"iss": TEAM_ID, "iat": 1_000_000}
    now[0] += 19 * 60
    assert token.bearer() == first  # never re-signed within 20 minutes
    now[0] += 31 * 60 + 1  # 50 minutes after issue: re-signed, well before APNs' 60-minute limit
    assert token.bearer() != first
    with pytest.raises(ProviderConfigError):
        ApnsJwt("not a key", KEY_ID, TEAM_ID).bearer()


@pytest.mark.parametrize("status,reason,expected", [
    (200, None, Delivered("id-1")),
    (410, "Unregistered", InvalidToken("Unregistered")),
    (410, "ExpiredToken", InvalidToken("ExpiredToken")),
    (400, "BadDeviceToken", InvalidToken("BadDeviceToken")),
    (400, "DeviceTokenNotForTopic", InvalidToken("DeviceTokenNotForTopic")),
    (400, "BadPriority", Failed("400 BadPriority")),
    (413, "PayloadTooLarge", Failed("413 PayloadTooLarge")),
    (429, "TooManyRequests", RetryAfter("TooManyRequests", None)),
    (429, "TooManyProviderTokenUpdates", RetryAfter("TooManyProviderTokenUpdates", None)),
    (500, "InternalServerError", RetryAfter("InternalServerError", None)),
    (503, "ServiceUnavailable", RetryAfter("ServiceUnavailable", None)),
    (503, "Shutdown", RetryAfter("Shutdown", None)),
    (403, "ExpiredProviderToken", ExpiredJwt),
    (403, "InvalidProviderToken", ProviderConfigError),
    (403, "MissingProviderToken", ProviderConfigError),
    (400, "BadTopic", ProviderConfigError),
])
def test_classify_apns(status, reason, expected):
    body = json.dumps({"reason": reason}).encode() if reason else b""
    if isinstance(expected, type) and issubclass(expected, Exception):
        with pytest.raises(expected):
            classify_apns(status, body, b"id-1")
    else:
        assert classify_apns(status, body, b"id-1") == expected
