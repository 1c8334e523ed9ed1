"""Web Push's pure rules: the subscription token, the answer classifier, the message encryption and
its size, the VAPID JWT cache, the RFC 8030 headers (docs/WEB-PUSH.md)."""

from __future__ import annotations

import base64
import os

import http_ece
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notee.core import notification_id, webpush_token
from notee.core.errors import InvalidInput
from notee.domain.web_devices import resolve_token
from notee.providers.base import Delivered, Failed, InvalidToken, Message, RetryAfter
from notee.providers.routing import choose
from notee.providers.webpush import (
    PAYLOAD_LIMIT,
    WebPushProvider,
    classify_webpush,
    payload_bytes,
    plaintext,
    topic_header,
)
from notee.providers.webpush_crypto import (
    JWT_LIFETIME_S,
    JWT_REFRESH_BEFORE_S,
    VapidSigner,
    encrypt,
    encrypted_size,
    generate_vapid_key,
    public_key_b64,
)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def browser(endpoint: str = "https://push.example.net/wp/abc") -> tuple[ec.EllipticCurvePrivateKey, bytes, dict]:
    """A browser's subscription: its private key, its auth secret, and ``toJSON()``."""
    key = ec.generate_private_key(ec.SECP256R1())
    auth = os.urandom(16)
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return key, auth, {"endpoint": endpoint, "keys": {"p256dh": _b64(point), "auth": _b64(auth)}}


def test_a_subscription_becomes_a_token_and_back():
    _, auth, sub = browser()
    token = resolve_token("WEB", None, sub)
    decoded = webpush_token.decode(token)
    assert decoded.endpoint == sub["endpoint"] and decoded.auth == auth
    assert decoded.origin == "https://push.example.net"
    assert token.endswith("." + sub["endpoint"]) and len(token) <= 512
    assert webpush_token.check_token(token) == decoded


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"endpoint": "http://push.example.net/x"}, ["subscription", "endpoint"]),
        ({"endpoint": "https:///nohost"}, ["subscription", "endpoint"]),
        ({"endpoint": "https://push.example.net/" + "x" * 400}, ["subscription", "endpoint"]),
        ({"endpoint": "https://push.example.net/a b"}, ["subscription", "endpoint"]),
        ({"p256dh": _b64(b"\x04" + b"\x01" * 64)}, ["subscription", "keys", "p256dh"]),  # not on the curve
        ({"p256dh": _b64(os.urandom(33))}, ["subscription", "keys", "p256dh"]),
        ({"p256dh": "not base64!"}, ["subscription", "keys", "p256dh"]),
        ({"auth": _b64(os.urandom(15))}, ["subscription", "keys", "auth"]),
        ({"auth": 7}, ["subscription", "keys", "auth"]),
    ],
)
def test_a_malformed_subscription_is_refused_naming_the_field(change, loc):
    _, _, sub = browser()
    if "endpoint" in change:
        sub["endpoint"] = change["endpoint"]
    else:
        sub["keys"].update(change)
    with pytest.raises(InvalidInput) as exc:
        resolve_token("WEB", None, sub)
    assert exc.value.details[0]["loc"] == loc


def test_token_and_subscription_belong_to_their_platforms():
    _, _, sub = browser()
    with pytest.raises(InvalidInput):
        resolve_token("AOS", None, sub)  # a subscription is a browser's
    with pytest.raises(InvalidInput):
        resolve_token("WEB", None, None)  # a browser needs one
    with pytest.raises(InvalidInput):
        resolve_token("WEB", "plain-fcm-token-123", None)  # a WEB token must hold a subscription
    assert resolve_token("AOS", "plain-fcm-token-123", None) == "plain-fcm-token-123"


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (201, b"", Delivered("https://p/m/1")),
        (404, b"", InvalidToken("NotFound")),
        (410, b'{"code":410,"errno":103,"error":"Gone","message":"expired"}', InvalidToken("expired")),
        (410, b'{"reason":"Unregistered"}', InvalidToken("Unregistered")),
        (429, b"", RetryAfter("HTTP 429", 7.0)),
        (503, b"overloaded", RetryAfter("overloaded", 7.0, provider_wide=True)),
        (500, b"", RetryAfter("HTTP 500", 7.0, provider_wide=True)),
        (400, b"BadRequest: invalid TTL", Failed("request_rejected: 400 BadRequest: invalid TTL")),
        (401, b"", Failed("vapid_rejected: 401")),
        (403, b'{"reason":"BadJwtToken"}', Failed("vapid_rejected: 403 BadJwtToken")),
        (413, b"", Failed("payload_too_large: 413")),
    ],
)
def test_every_push_service_answer_is_classified(status, body, expected):
    assert classify_webpush(status, body, b"https://p/m/1", b"7") == expected


def test_encryption_is_rfc8291_and_its_size_is_known_before_sending():
    key, auth, sub = browser()
    text = plaintext("Hi", "Body", {"k": "v"}, None, notification_id.SAMPLE)  # as sent: with an id
    p256dh = webpush_token.b64decode(sub["keys"]["p256dh"])
    body = encrypt(text, p256dh, auth)
    assert len(body) == encrypted_size(len(text)) == payload_bytes("Hi", "Body", {"k": "v"})
    assert http_ece.decrypt(body, private_key=key, auth_secret=auth, version="aes128gcm") == text
    assert encrypt(text, p256dh, auth)[:16] != body[:16]  # a fresh salt (and key pair) per message


def test_the_largest_plaintext_that_fits_makes_exactly_4096_bytes():
    room = PAYLOAD_LIMIT - encrypted_size(len(plaintext("", "", {}, None, notification_id.SAMPLE)))
    assert payload_bytes("", "x" * room, {}) == PAYLOAD_LIMIT
    assert payload_bytes("", "x" * (room + 1), {}) == PAYLOAD_LIMIT + 1


def test_the_vapid_jwt_is_cached_per_audience_until_near_expiry():
    now = [1_000_000.0]
    pem = generate_vapid_key()
    signer = VapidSigner(pem, "mailto:ops@example.com", clock=lambda: now[0])
    first = signer.header("https://a.example")
    assert signer.header("https://a.example") == first and signer.signed == 1
    signer.header("https://b.example")
    assert signer.signed == 2  # one per audience
    now[0] += JWT_LIFETIME_S - JWT_REFRESH_BEFORE_S - 1
    assert signer.header("https://a.example") == first
    now[0] += 2
    assert signer.header("https://a.example") != first and signer.signed == 3
    token, k = first.decode().removeprefix("vapid t=").split(", k=")
    assert k == public_key_b64(pem)
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), webpush_token.b64decode(k))
    claims = jwt.decode(
        token, public, algorithms=["ES256"], audience="https://a.example", options={"verify_exp": False}
    )
    assert claims["sub"] == "mailto:ops@example.com" and claims["exp"] == 1_000_000 + JWT_LIFETIME_S


def test_headers_follow_rfc8030():
    _, _, sub = browser()
    token = resolve_token("WEB", None, sub)
    provider = WebPushProvider(VapidSigner(generate_vapid_key(), "mailto:a@b.c"), pools=lambda origin: None)  # type: ignore[arg-type,return-value]
    m = Message(token, "WEB", "t", "b", ttl_seconds=60, priority="normal", collapse_key="order 42: shipped / late")
    path, headers, _ = provider._item(m, webpush_token.decode(token), b"x")
    got = dict(headers)
    assert path == b"/wp/abc"
    assert got[b"ttl"] == b"60" and got[b"urgency"] == b"normal" and got[b"content-encoding"] == b"aes128gcm"
    assert got[b"topic"] == topic_header("order 42: shipped / late") and len(got[b"topic"]) == 32
    assert topic_header("short_key-1") == b"short_key-1"
    plain = dict(provider._item(Message(token, "WEB", "t", "b"), webpush_token.decode(token), b"x")[1])
    assert plain[b"ttl"] == b"2419200" and plain[b"urgency"] == b"high" and b"topic" not in plain


def test_web_devices_route_only_to_web_push():
    assert choose("WEB", has_apns=True, has_fcm=True, has_web=True) == "web"
    assert choose("WEB", has_apns=True, has_fcm=True, has_web=False) is None  # never through FCM
    assert choose("AOS", has_apns=False, has_fcm=True, has_web=True) == "fcm"


def test_an_import_line_takes_a_web_token_and_refuses_a_plain_one_for_web():
    import json

    from notee.domain.import_lines import LineRejected, LineRules, check_record

    _, _, sub = browser()
    token = resolve_token("WEB", None, sub)
    rules = LineRules(frozenset({"news"}), 3)

    def line(tok: str):
        doc = {"user": "u", "devices": [{"token": tok, "platform": "WEB"}]}
        return check_record("ndjson", None, (1, json.dumps(doc)), rules)

    assert line(token).devices[0].token == token
    with pytest.raises(LineRejected, match=r"devices\[0\]\.token"):
        line("plain-fcm-token-123")
