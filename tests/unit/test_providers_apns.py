"""APNs: aioapns (the reference client) and our lean sender against the emulator, every outcome;
the JWT; table-driven classification.

Here, the rules that need no server; tests/integration/test_providers_apns.py has the rest."""

from __future__ import annotations

import json

import jwt
import pytest

from notee.core.errors import ProviderConfigError
from notee.providers.apns import ApnsJwt, ExpiredJwt, classify_apns
from notee.providers.base import Delivered, Failed, InvalidToken, RetryAfter

KEY_ID, TEAM_ID = "TESTKEY123", "TEAMID1234"


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


def test_pages_refused_side_by_side_share_one_re_signed_token(p8):
    """Two pages sent with the same token both hear ExpiredProviderToken: the first re-signs, the
    second gets that new token instead of a third one (APNs refuses a connection's second token
    update within 20 minutes: TooManyProviderTokenUpdates)."""
    now = [1_000_000.0]
    token = ApnsJwt(p8, KEY_ID, TEAM_ID, clock=lambda: now[0])
    refused = token.bearer()
    now[0] += 5
    renewed = token.bearer(force=True, stale=refused)
    assert renewed != refused
    assert token.bearer(force=True, stale=refused) == renewed  # the second page: no new token
    assert token.bearer(force=True, stale=renewed) != renewed  # the new one refused too: re-signed again


@pytest.mark.parametrize(
    "status,reason,expected",
    [
        (200, None, Delivered("id-1")),
        (410, "Unregistered", InvalidToken("Unregistered")),
        (410, "ExpiredToken", InvalidToken("ExpiredToken")),
        (400, "BadDeviceToken", InvalidToken("BadDeviceToken")),
        (400, "DeviceTokenNotForTopic", InvalidToken("DeviceTokenNotForTopic")),
        (400, "BadPriority", Failed("400 BadPriority")),
        (413, "PayloadTooLarge", Failed("413 PayloadTooLarge")),
        (429, "TooManyRequests", RetryAfter("TooManyRequests", None)),
        (429, "TooManyProviderTokenUpdates", RetryAfter("TooManyProviderTokenUpdates", None)),
        (500, "InternalServerError", RetryAfter("InternalServerError", None, provider_wide=True)),
        (503, "ServiceUnavailable", RetryAfter("ServiceUnavailable", None, provider_wide=True)),
        (503, "Shutdown", RetryAfter("Shutdown", None, provider_wide=True)),
        (403, "ExpiredProviderToken", ExpiredJwt),
        (403, "InvalidProviderToken", ProviderConfigError),
        (403, "MissingProviderToken", ProviderConfigError),
        (400, "BadTopic", ProviderConfigError),
    ],
)
def test_classify_apns(status, reason, expected):
    body = json.dumps({"reason": reason}).encode() if reason else b""
    if isinstance(expected, type) and issubclass(expected, Exception):
        with pytest.raises(expected):
            classify_apns(status, body, b"id-1")
    else:
        assert classify_apns(status, body, b"id-1") == expected
