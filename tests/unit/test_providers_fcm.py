"""FCM: our lean sender and firebase-admin, driven against the same emulator, agree on the request
they send and on how each outcome is classified; plus table-driven classification.

Here, the rules that need no server; tests/integration/test_providers_fcm.py has the rest."""

from __future__ import annotations

import pytest

from notee.core.errors import ProviderConfigError
from notee.providers.base import Delivered, Failed, InvalidToken, Message, RetryAfter
from notee.providers.fcm import AuthRejected, classify_fcm, fcm_message
from tests.support.providers import sdk_message


def msg(token: str, **kw) -> Message:
    return Message(device_token=token, device_os="AOS", title="Hi Ann", body="Your order shipped", **kw)


def test_encoder_matches_the_sdk_encoder_with_ttl():
    from firebase_admin import messaging

    m = msg("t", data={"a": "1"}, ttl_seconds=3600, priority="high", collapse_key="c")
    assert fcm_message(m, now=1000) == messaging._MessagingService.encode_message(sdk_message(m, now=1000))
    bare = msg("t")
    assert fcm_message(bare, now=0) == messaging._MessagingService.encode_message(sdk_message(bare, now=0))


def _err(status, rpc, message="m", code=None):
    import json

    error = {"code": status, "status": rpc, "message": message}
    if code:
        error["details"] = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]
    return json.dumps({"error": error}).encode()


@pytest.mark.parametrize(
    "status,body,retry_after,expected",
    [
        (200, b'{"name":"projects/p/messages/1"}', None, Delivered("projects/p/messages/1")),
        # A 200 is a delivery even when its body names no message: never retried, so never sent twice.
        (200, b"{}", None, Delivered("")),
        (200, b"<html>ok</html>", None, Delivered("")),
        (404, _err(404, "NOT_FOUND", code="UNREGISTERED"), None, InvalidToken("UNREGISTERED")),
        (
            400,
            _err(
                400,
                "INVALID_ARGUMENT",
                "The registration token is not a valid FCM registration token",
                "INVALID_ARGUMENT",
            ),
            None,
            InvalidToken("INVALID_ARGUMENT"),
        ),
        (
            400,
            _err(400, "INVALID_ARGUMENT", "Message is too big", "INVALID_ARGUMENT"),
            None,
            Failed("INVALID_ARGUMENT: Message is too big"),
        ),
        (403, _err(403, "PERMISSION_DENIED", code="SENDER_ID_MISMATCH"), None, InvalidToken("SENDER_ID_MISMATCH")),
        # the project's quota says when its window reopens: nobody's device
        (
            429,
            _err(429, "RESOURCE_EXHAUSTED", code="QUOTA_EXCEEDED"),
            b"30",
            RetryAfter("QUOTA_EXCEEDED", 30.0, provider_wide=True),
        ),
        # the device's own message rate: no Retry-After, held against the device
        (
            429,
            _err(429, "RESOURCE_EXHAUSTED", "Device message rate exceeded.", code="QUOTA_EXCEEDED"),
            None,
            RetryAfter("QUOTA_EXCEEDED", None),
        ),
        (503, _err(503, "UNAVAILABLE", code="UNAVAILABLE"), None, RetryAfter("UNAVAILABLE", None, provider_wide=True)),
        (500, _err(500, "INTERNAL", code="INTERNAL"), b"2", RetryAfter("INTERNAL", 2.0, provider_wide=True)),
        (502, b"<html>bad gateway</html>", None, RetryAfter("HTTP 502", None, provider_wide=True)),
        (401, _err(401, "UNAUTHENTICATED", code="THIRD_PARTY_AUTH_ERROR"), None, Failed("THIRD_PARTY_AUTH_ERROR")),
        (401, _err(401, "UNAUTHENTICATED"), None, AuthRejected),
        (403, _err(403, "PERMISSION_DENIED"), None, ProviderConfigError),
        (404, _err(404, "NOT_FOUND", "Requested entity was not found."), None, ProviderConfigError),
    ],
)
def test_classify_fcm(status, body, retry_after, expected):
    if isinstance(expected, type) and issubclass(expected, Exception):
        with pytest.raises(expected):
            classify_fcm(status, body, retry_after)
    else:
        assert classify_fcm(status, body, retry_after) == expected


def test_spliced_page_bodies_equal_the_full_encoding():
    from notee.providers.fcm_body import PageBodies, encode

    data = {"k": "v", "quote": 'he said "hi"'}
    page = [
        Message(t, "AOS", 'Héllo "you"', "line1\nline2", data, 3600, "normal", "c1")
        for t in ("tok-1", 'tok"2', "tok-ü3", "x" * 300)
    ]
    other = [Message("tok-9", "AOS", "Other", "Body"), Message("tok-10", "AOS", "Other", "Body", {"a": "b"})]
    cache = PageBodies()
    for m in page + other + page[:1]:
        assert cache.body(m) == encode(m)
    # a whole page at once, its messages sharing their fields (as messages_for builds them) or not
    shared = [
        Message(t, "AOS", "T", "B", data, 60, "high", None, None, f"{'0' * 32}.{t[-3:]:A>11}") for t in ("a", "b")
    ]
    mixed = page + other + shared + page[:1] + [Message("tok-n", "AOS", "T", "B", data, 60, "high", None, None, "")]
    assert PageBodies().bodies(mixed) == [encode(m) for m in mixed]


@pytest.mark.parametrize(
    "body",
    [
        b'{"name":"projects/p/messages/1"}',
        b'{\n  "name": "projects/p/messages/0:1500415314455276%31bd1c96"\n}\n',  # FCM's (and the emulator's) layout
        b'{"name":"projects/p/messages/\\u00e9\\"x"}',  # escapes: parsed as JSON
        '{"name":"projects/p/messages/é"}'.encode(),
        b'{"name":"a","extra":1}',
        b'{"name":"a"} trailing',
    ],
)
def test_a_sent_answer_names_the_message_exactly_as_json_would(body):
    import json

    try:
        expected = Delivered(json.loads(body).get("name", ""))
    except ValueError:
        expected = Delivered("")
    assert classify_fcm(200, body, None) == expected


def test_spliced_bodies_quote_every_token_as_json_would():
    from notee.providers.fcm_body import PageBodies, encode

    tokens = ["plain-token:APA91b_x", 'q"uote', "back\\slash", "ctrl\x01x", "del\x7fx", "line\u2028sep", "é"]
    cache = PageBodies()
    for t in tokens:
        m = Message(t, "AOS", "T", "B")
        assert cache.body(m) == encode(m), t
